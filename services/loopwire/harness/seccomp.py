"""The seccomp filter of the shell sandbox, compiled to classic BPF by libseccomp.

bubblewrap loads a compiled program from a file descriptor (``--seccomp FD``) right before
it executes the sandboxed command. The program is built with libseccomp (Debian's
``libseccomp2``, the library bubblewrap, systemd, Docker and Flatpak use) through ctypes:
six functions of its stable C API, no compiler and no extra Python package, so it builds
offline wherever bubblewrap is installed. Everything not listed is allowed; what is listed
fails with EPERM (or ENOSYS for clone3, so libc falls back to clone, whose namespace flags
are checked). Syscalls of other ABIs (i386, x32) hit libseccomp's bad-arch action and are
killed, so a 32-bit entry point cannot bypass the list.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os

# Denied outright: mounts and namespaces (escape), kernel and key management, tracing and
# other processes' memory, raw handles, and kernel interfaces a sandboxed build never needs.
DENIED = (
    "mount", "umount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup",
    "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "nfsservctl", "uselib", "_sysctl",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "iopl", "ioperm", "fanotify_init",
)
# Must resolve, or the filter is not built at all (the brief of the sandbox promises these).
REQUIRED = (
    "mount", "umount2", "ptrace", "bpf", "keyctl", "add_key", "request_key", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "unshare", "setns",
    "pivot_root", "chroot", "swapon", "swapoff", "reboot", "perf_event_open", "open_by_handle_at",
)
# Syscalls numbered 424 and up have the same number on every architecture; an old libseccomp
# that does not know the name still gets the rule.
_UNIFIED = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
            "fspick": 433, "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442, "quotactl_fd": 443,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}
# clone with any of these flags creates namespaces: denied like unshare.
_CLONE_NEW = {"CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
              "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
              "CLONE_NEWNET": 0x40000000, "CLONE_NEWTIME": 0x00000080}
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C  # typing into / driving the controlling terminal

_ACT_ALLOW = 0x7FFF0000
_CMP_MASKED_EQ = 7


def _act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


class SeccompUnavailable(RuntimeError):
    """libseccomp is missing or could not build the filter."""


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as e:
        raise SeccompUnavailable(f"libseccomp cannot be loaded ({e}); install libseccomp2") from None
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.restype = None
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_rule_add_array.restype = ctypes.c_int
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_export_bpf.restype = ctypes.c_int
    return lib


@functools.cache
def filter_program() -> bytes:
    """The compiled BPF program (struct sock_filter[]) for the native architecture."""
    lib = _library()
    ctx = lib.seccomp_init(_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    try:
        def rule(name: str, action: int, *conds: tuple[int, int, int]) -> None:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr == -1:
                nr = _UNIFIED.get(name, -1)
            if nr == -1:
                if name in REQUIRED:
                    raise SeccompUnavailable(f"libseccomp does not know the syscall {name}")
                return
            args = (_ArgCmp * max(len(conds), 1))(*(_ArgCmp(a, _CMP_MASKED_EQ, m, v) for a, m, v in conds))
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(conds), args)
            if rc < 0:
                raise SeccompUnavailable(f"seccomp_rule_add({name}) failed: {os.strerror(-rc)}")

        for name in DENIED:
            rule(name, _act_errno(errno.EPERM))
        rule("clone3", _act_errno(errno.ENOSYS))  # its flags sit in memory a filter cannot read
        for flag in _CLONE_NEW.values():  # x86-64 and arm64 pass the flags in the first argument
            rule("clone", _act_errno(errno.EPERM), (0, flag, flag))
        for request in (_TIOCSTI, _TIOCLINUX):
            rule("ioctl", _act_errno(errno.EPERM), (1, 0xFFFFFFFF, request))
        fd = os.memfd_create("loopwire-seccomp", os.MFD_CLOEXEC)
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc < 0:
                raise SeccompUnavailable(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            size = os.lseek(fd, 0, os.SEEK_END)
            return os.pread(fd, size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


def program_fd() -> int:
    """A fresh, rewound (inheritable) descriptor holding the program, for ``bwrap --seccomp``."""
    program = filter_program()
    fd = os.memfd_create("loopwire-seccomp")
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd
