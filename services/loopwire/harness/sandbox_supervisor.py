"""The supervisor inside a session's sandbox: starts each command in namespaces of its own.

It runs as the sandbox's command (``python3 -I -S -c`` this file's text, so it imports nothing
but the standard library of the system's interpreter, which the sandbox binds read-only) with
two capabilities in the sandbox's user namespace and no seccomp filter, which it needs to make
each command's namespaces; the command itself gets neither.

For each request from the harness (a JSON line and descriptors over the control socket) it
forks the command's init into a new pid namespace (clone), whose pid 1 it is. The init makes a
mount and an IPC namespace, mounts a fresh /tmp, /dev/shm and /dev/pts (as bubblewrap does for a sandbox of its
own), drops every capability, loads the seccomp filter and waits for "go" from
the harness, which by then holds a pidfd of it. Only then does it spawn ``bash -c`` (vfork and
exec: pid 2, a session of its own). When bash exits, the init exits with its status and the kernel kills every
process left in the namespace: setsid and double forks cannot leave it, and a SIGKILL through
the harness's pidfd ends the whole tree the same way.
"""

import ctypes
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 0x1000, 0x4000, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_CAPBSET_DROP, PR_CAP_AMBIENT = 38, 22, 24, 47
SECCOMP_MODE_FILTER, PR_CAP_AMBIENT_CLEAR_ALL, CAP_VERSION_3 = 2, 4, 0x20080522
MAX_FDS = 4
CLONE_SYSCALL = {"x86_64": 56, "aarch64": 220}[os.uname().machine]

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None):
    check(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                     ctypes.c_ulong(flags), data and data.encode()), f"mount {target}")


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def confine(program, tmp_size, workspace):
    """In the command's init: its own mounts and IPC, fresh /tmp, /dev/shm and /dev/pts, no
    capability left (bounding and ambient sets too), then the seccomp filter. /proc stays the
    sandbox's (read-only; the kernel refuses a new one over bubblewrap's covered /proc)."""
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    held = os.open(workspace, os.O_PATH | os.O_DIRECTORY)
    for target in ("/tmp", "/dev/shm"):
        mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmp_size},mode=0755")
        if workspace.startswith(target + "/"):  # a workspace under /tmp: back on top, as bwrap binds it
            os.makedirs(workspace, exist_ok=True)
            mount(f"/proc/self/fd/{held}", workspace, None, MS_BIND | MS_REC)
    os.close(held)
    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "drop bounding capability")
    check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    header = struct.pack("Ii", CAP_VERSION_3, 0)
    check(libc.capset(header, bytes(24)), "capset")
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    prog = SockFprog(len(program) // 8, program)
    check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0), "seccomp")


def status_code(status):
    """bash's exit as bubblewrap reports it: its code, or 128 + the signal that killed it."""
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def close_all_but(keep):
    """Close every descriptor but ``keep`` (and make those not inherited by bash)."""
    low = 0
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    for fd in keep:
        os.set_inheritable(fd, False)


def command_init(request, fds, program, tmp_size):
    """pid 1 of the command's namespace: confine, wait for go, run bash, exit with its status."""
    out, go = fds[0], fds[1]
    stdin = fds[2] if request.get("stdin") else -1
    try:
        close_all_but([fd for fd in (out, go, stdin) if fd >= 0])
        confine(program, tmp_size, request["cwd"])
        if os.read(go, 2) != b"go":
            os._exit(125)  # the harness gave up on this command before it ran
        os.close(go)
        # vfork and exec (no copy of this process), as bwrap would start it: a session of its own,
        # default signal dispositions (Python ignores SIGPIPE and SIGXFSZ, which exec would keep;
        # posix_spawn would leave libc's internal signals ignored).
        bash = subprocess.Popen(request["argv"], cwd=request["cwd"], env=request["env"],
                                stdin=stdin if stdin >= 0 else subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, restore_signals=True)
    except BaseException as e:  # noqa: BLE001 - the child must never return into the supervisor
        try:
            os.write(out, f"sandbox: cannot start the command: {e!r}\n".encode())
        finally:
            os._exit(126)
    os.closerange(0, 1 << 20)
    while True:
        try:
            child, status = os.wait()
        except ChildProcessError:
            os._exit(126)
        if child == bash.pid:  # (held until now: a Popen dropped earlier would reap bash itself)
            os._exit(status_code(status))


def clone_pid_namespace():
    """fork() into a new pid namespace, whose pid 1 the child is: one copy of this process."""
    pid = libc.syscall(ctypes.c_long(CLONE_SYSCALL), ctypes.c_ulong(CLONE_NEWPID | signal.SIGCHLD),
                       ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"clone: {os.strerror(err)}")
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()  # what os.fork does in the child
    return pid


def spawn(request, fds, program, tmp_size):
    """The command's init, as our child, in a new pid namespace; its pid."""
    pid = clone_pid_namespace()
    if pid == 0:
        command_init(request, fds, program, tmp_size)
    return pid


def send(ctl, message, fds=()):
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
    ctl.sendmsg([json.dumps(message).encode()], ancillary)


def main(ctl_fd, filter_fd, tmp_size):
    with os.fdopen(filter_fd, "rb") as f:
        program = f.read()
    ctl = socket.socket(fileno=ctl_fd)
    poll = select.poll()
    poll.register(ctl_fd, select.POLLIN)
    running = {}  # pidfd -> (request id, pid)
    while True:
        for fd, _ in poll.poll():
            if fd == ctl_fd:
                data, ancdata, _, _ = ctl.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * 4))
                if not data:
                    return  # the harness is gone: so is the sandbox
                fds = [n for level, kind, raw in ancdata if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
                       for n in struct.unpack(f"{len(raw) // 4}i", raw[:len(raw) - len(raw) % 4])]
                request = json.loads(data)
                try:
                    pid = spawn(request, fds, program, tmp_size)
                    pidfd = os.pidfd_open(pid)
                except OSError as e:
                    send(ctl, {"id": request["id"], "error": str(e)})
                else:
                    running[pidfd] = (request["id"], pid)
                    poll.register(pidfd, select.POLLIN)
                    send(ctl, {"id": request["id"], "pid": pid}, [pidfd])
                finally:
                    for n in fds:
                        os.close(n)
            else:
                ident, pid = running.pop(fd)
                poll.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                send(ctl, {"id": ident, "exit": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
