"""The supervisor inside a session's sandbox: makes each command's init ahead of time.

It runs as the sandbox's command (``python3 -I -S -c`` this file's text, so it imports nothing
but the standard library of the system's interpreter, which the sandbox binds read-only) with
two capabilities in the sandbox's user namespace and no seccomp filter, which it needs to make
each command's namespaces; the command itself gets neither.

On each request from the harness it forks a spare: the init of a future command, in a new pid
namespace (clone) whose pid 1 it is. The spare makes a mount and an IPC namespace, mounts a
fresh /tmp, /dev/shm and /dev/pts (as bubblewrap does for a sandbox of its own), drops every
capability and loads the seccomp filter, all before any command exists; then it starts the
command's bash (vfork and exec: pid 2, a session of its own), which waits, confined, for its
script. The supervisor hands the harness a pidfd of the spare and its ends of the spare's
script, output, status and stdin pipes, so the harness holds the kill of a command's namespace
before it writes the command, straight to its waiting bash: a command costs no fork, exec or
bash start. When bash exits its init kills whatever is left in its namespace (setsid and
double forks cannot leave it), reaps it all, and only then tells the harness bash's status, so
nothing of a command runs once the harness sees it end. A SIGKILL through the harness's pidfd
ends the whole tree the same way, and the harness then reads no status.

A spare made with ``shell`` runs a shell that stays (``SHELL``): it serves one command after another,
each in a subshell of its own (a fork, no exec) that it forked ahead, while the harness was busy with the
command before (the runner), so a session's commands back to back cost neither a spare, a bash start nor a
fork. The runner first checks that the command before left nothing in /tmp, /dev/shm or the IPC namespace
(the next command must find them fresh, as in a spare of its own) and says on the status pipe whether the
shell may serve again. After each command the shell kills every other process of its namespace
(``kill -9 -1`` spares only the caller and pid 1) and waits, sleeping between its checks, until none is
left (orphans are the init's to reap), so nothing of a command runs once its status line is written. A
command that kills the shell (``kill $$``) ends the namespace; its init then writes ``!`` and bash's
status, and the harness drops the shell.
"""

import ctypes
import json
import os
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 0x1000, 0x4000, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_SET_DUMPABLE = 38, 22, 24, 47, 4
SECCOMP_MODE_FILTER, PR_CAP_AMBIENT_CLEAR_ALL, CAP_VERSION_3 = 2, 4, 0x20080522
MAX_FDS = 4
# The waiting bash's command line: it reads its script from the harness's pipe with builtins (a flag,
# "i" when the command has a stdin pipe, then the command, to EOF) and evals it, which parses and runs
# it as `bash -c` does its argument ($0, $BASH_EXECUTION_STRING and line numbers alike; a syntax error
# names `eval` where `bash -c` says `-c`); $SECONDS counts from the command's start, not bash's.
WAITING_BASH = ('IFS= read -r -u {script} -n 1 BASH_EXECUTION_STRING && [ "$BASH_EXECUTION_STRING" = i ] && '
                'exec 0<&{stdin}; exec {stdin}<&-; IFS= read -r -u {script} -N 2147483647 BASH_EXECUTION_STRING; '
                'exec {script}<&-; SECONDS=0; eval "$BASH_EXECUTION_STRING"')
# The shell that stays. Each command is read and run by a subshell it forked ahead (its runner), so no fork waits
# between a command's arrival and its start. Before it forks the runner, the shell checks that /tmp, /dev/shm and the
# IPC namespace are as fresh as a spare's (the command before may have left something there); the runner says so on
# the status pipe ("1", or "0": do not send me another), then reads the command's header (a flag, "i" when it has a
# stdin pipe, and its length in bytes, ten digits: one read) and the command, puts the command's stdout and stderr on
# the output pipe, closes the shell's own descriptors, and has eval parse and run it as the waiting bash does (the
# same $0, $$, $PPID, $BASH_EXECUTION_STRING, line numbers, $SECONDS). The runner is an ordinary subshell (not `&`,
# whose commands would ignore SIGINT and SIGQUIT): the shell waits for it. Then every other process of the namespace
# is killed and gone (while the init reaps them the shell sleeps, 100 us doubling to 10 ms between checks, with no
# process started: read -t on a read end of its status pipe opened through /proc, where nothing writes meanwhile), and
# the status line "<status>" is written; the shell ends if its script pipe holds anything (its end, or bytes no
# harness sent: a command's), else it checks and forks the next runner. One line: $LINENO as in `bash -c`.
# Only as pid 2 of its namespace (its init's first child): kill -9 -1 anywhere else would reach too far.
SHELL = ('[ $$ = 2 ] && __lw_k=1 && while :; do ( printf "%s\\n" "$__lw_k" >&{status}; '
         'LC_ALL=C IFS= read -r -N 11 -u {script} __lw_n && LC_ALL=C IFS= read -r -N "${{__lw_n:1}}" -u {script} __lw_c '
         '|| exit; [ "${{__lw_n::1}}" = i ] && exec 0<&{stdin}; exec {stdin}<&- {script}<&- {status}>&- 1>&{out} 2>&1 '
         '{out}>&-; BASH_EXECUTION_STRING=$__lw_c; unset __lw_n __lw_c __lw_s __lw_k __lw_f __lw_x __lw_w __lw_t; '
         'SECONDS=0; eval "$BASH_EXECUTION_STRING" ); __lw_s=$?; kill -9 -1; if kill -0 -1; then '
         'exec {{__lw_w}}</proc/self/fd/{status}; __lw_t=100; while kill -0 -1; do printf -v __lw_x 0.%06d $__lw_t; '
         'read -r -t $__lw_x -u "$__lw_w" __lw_x; __lw_t=$((__lw_t < 10000 ? __lw_t * 2 : 10000)); done; '
         'exec {{__lw_w}}<&-; fi; printf "%s\\n" "$__lw_s" >&{status}; read -r -t 0 -u {script} && break; __lw_k=1; '
         'shopt -s dotglob nullglob; {fresh}shopt -u dotglob nullglob; for __lw_f in shm sem msg; do '
         '{{ read -r __lw_x && read -r __lw_x && __lw_k=0; }} < /proc/sysvipc/$__lw_f; done; done')
# Whether anything is left in a directory (but ``keep``), with dotglob and nullglob on: a builtin glob, no process.
LEFT = 'for __lw_f in {d}/*; do if [ "$__lw_f" != {keep} ]; then __lw_k=0; break; fi; done; '


def left(directory, keep=""):
    return LEFT.format(d=shlex.quote(directory), keep=shlex.quote(keep))


def fresh_checks(workspace):
    """The shell's checks that /tmp, /dev/shm and /dev/mqueue are as fresh as a spare's: empty but for the
    directories leading to a workspace under /tmp (made on the fresh tmpfs, the workspace bound on top)."""
    checks = {"/dev/shm": left("/dev/shm"), "/dev/mqueue": left("/dev/mqueue"), "/tmp": left("/tmp")}
    parts = workspace.split("/")
    for target in ("/tmp", "/dev/shm"):
        if not workspace.startswith(target + "/"):
            continue
        for n in range(target.count("/") + 1, len(parts)):
            checks["/".join(parts[:n])] = left("/".join(parts[:n]), "/".join(parts[:n + 1]))
    return "".join(checks.values())


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


def confine(program, tmp_size, workspace, shell):
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
    if shell:  # a POSIX message queue a command leaves is then seen (and the shell not used again)
        os.makedirs("/dev/mqueue", exist_ok=True)
        mount("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)
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


def receive(sock):
    """A JSON message and the descriptors passed with it (at most MAX_FDS)."""
    data, ancdata, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * 4))
    fds = [n for level, kind, raw in ancdata if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
           for n in struct.unpack(f"{len(raw) // 4}i", raw[:len(raw) - len(raw) % 4])]
    return (json.loads(data) if data else None), fds


def end_namespace():
    """As pid 1: kill every process left in the namespace and reap them all (orphans are ours)."""
    while True:
        try:
            os.kill(-1, signal.SIGKILL)  # every process of the namespace but its init
        except ProcessLookupError:
            pass
        try:
            os.wait()
        except ChildProcessError:
            return


def read_to_end(fd):
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def unreadable_bash():
    """A copy of bash that nothing may read (mode 0111, in the init's own fresh /dev/shm), to exec: a process
    running a file it cannot read is not dumpable, so no other process of the session (same uid, no capability)
    can open a waiting bash's or shell's descriptors through /proc/<pid>/fd; through its script pipe, bytes would
    run as the next command after the command that wrote them was told ended. Unlinked once bash has started;
    the commands it starts by name are the system's bash, as ever."""
    path = "/dev/shm/bash"  # named bash: its process's name
    with open(shutil.which("bash") or "/bin/bash", "rb") as src, \
            open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o111), "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def start_bash(request, script, out, stdin, status):
    """The command's bash: started to wait for its script (``request["ahead"]``), or on the script, read here. vfork and
    exec (no copy of this process), as bwrap would start it: a session of its own, default signal dispositions
    (Python ignores SIGPIPE and SIGXFSZ, which exec would keep; posix_spawn would leave libc's internal signals
    ignored); not dumpable (``unreadable_bash``)."""
    output = out
    if request.get("shell"):
        text = SHELL.format(script=script, stdin=stdin, status=status, out=out, fresh=fresh_checks(request["cwd"]))
        argv, given, keep, output = ["bash", "-c", text], -1, (script, stdin, status, out), subprocess.DEVNULL
    elif request["ahead"]:
        argv, given, keep = ["bash", "-c", WAITING_BASH.format(script=script, stdin=stdin)], -1, (script, stdin)
    else:
        data = read_to_end(script)
        argv, given, keep = [b"bash", b"-c", data[1:]], stdin if data[:1] == b"i" else -1, ()
    executable = unreadable_bash()
    try:
        return subprocess.Popen(argv, executable=executable, cwd=request["cwd"], env=request["env"], pass_fds=keep,
                                stdin=given if given >= 0 else subprocess.DEVNULL, stdout=output, stderr=output,
                                start_new_session=True, restore_signals=True)
    finally:
        os.unlink(executable)


def spare_init(ready, request, pipes, program, tmp_size):
    """pid 1 of a future command's namespace: confine, start its bash, end it all once bash exits, report."""
    script, out, status, stdin = pipes
    bash = None
    try:
        close_all_but([ready, *pipes])
        confine(program, tmp_size, request["cwd"], request.get("shell"))
        # Not dumpable: nothing of the command (same uid, no capability) can open the init's descriptors through
        # /proc/1/fd, so the status line on its pipe is the init's own (bash, exec'd, is not either: unreadable_bash).
        check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable")
        if request["ahead"] or request.get("shell"):
            bash = start_bash(request, script, out, stdin, status)
    except BaseException as e:  # noqa: BLE001 - the child must never return into the supervisor
        try:
            os.write(ready, f"cannot make the command's init: {e!r}".encode())
        finally:
            os._exit(126)
    os.write(ready, b"ready")
    if bash is None:
        try:
            bash = start_bash(request, script, out, stdin, status)
        except BaseException as e:  # noqa: BLE001 - the child must never return into the supervisor
            try:
                os.write(out, f"sandbox: cannot start the command: {e!r}\n".encode())
                os.write(status, b"126")
            finally:
                os._exit(126)
    close_all_but([status])
    while True:
        try:
            child, waited = os.wait()
        except ChildProcessError:
            os._exit(126)
        if child == bash.pid:  # (held until now: a Popen dropped earlier would reap bash itself)
            break
    code = status_code(waited)
    end_namespace()
    os.write(status, (f"!{code}\n" if request.get("shell") else str(code)).encode())
    os._exit(code)


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


def spawn(program, tmp_size, request):
    """A spare, as our child in a new pid namespace, confining itself and starting its bash: (its pid, our end
    of its ready pipe, our ends of its script, output, status and stdin pipes). It says "ready" on the ready
    pipe once confined, or why not; meanwhile we can make the next one (two cores make two at once)."""
    (script_r, script_w), (out_r, out_w), (status_r, status_w), (stdin_r, stdin_w) = (os.pipe() for _ in range(4))
    ready_r, ready_w = os.pipe()
    ours, theirs = [script_w, out_r, status_r, stdin_w], [script_r, out_w, status_w, stdin_r]
    try:
        pid = clone_pid_namespace()
    except BaseException:
        for fd in (*ours, *theirs, ready_r, ready_w):
            os.close(fd)
        raise
    if pid == 0:
        spare_init(ready_w, request, theirs, program, tmp_size)
    for fd in (*theirs, ready_w):
        os.close(fd)
    return pid, ready_r, ours


def send(ctl, message, fds=()):
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
    ctl.sendmsg([json.dumps(message).encode()], ancillary)


def main(ctl_fd, filter_fd, tmp_size):
    with os.fdopen(filter_fd, "rb") as f:
        program = f.read()
    ctl = socket.socket(fileno=ctl_fd)
    poll = select.poll()
    poll.register(ctl_fd, select.POLLIN)
    children = {}  # pidfd -> pid of a spare (or the command it became), to reap
    making = {}  # ready pipe -> (request, pid, our ends of its pipes) of a spare confining itself
    while True:
        for fd, _ in poll.poll():
            if fd == ctl_fd:
                request, fds = receive(ctl)
                for n in fds:
                    os.close(n)
                if request is None:
                    return  # the harness is gone: so is the sandbox
                try:
                    pid, ready, ends = spawn(program, tmp_size, request)
                except OSError as e:
                    send(ctl, {"spare": request["spare"], "error": str(e)})
                else:
                    making[ready] = request, pid, ends
                    poll.register(ready, select.POLLIN)
            elif fd in making:
                request, pid, ends = making.pop(fd)
                poll.unregister(fd)
                said = os.read(fd, 4096)
                os.close(fd)
                try:
                    if said != b"ready":  # it could not confine itself or start bash: it said why, and exits
                        os.waitpid(pid, 0)
                        raise OSError(said.decode(errors="replace") or "the command's init ended before it was "
                                      "confined")
                    pidfd = os.pidfd_open(pid)
                except OSError as e:
                    send(ctl, {"spare": request["spare"], "error": str(e)})
                else:
                    children[pidfd] = pid
                    poll.register(pidfd, select.POLLIN)
                    send(ctl, {"spare": request["spare"]}, [pidfd, *ends])
                finally:
                    for n in ends:
                        os.close(n)
            else:
                pid = children.pop(fd)
                poll.unregister(fd)
                os.close(fd)
                os.waitpid(pid, 0)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
