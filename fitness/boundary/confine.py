"""The worker confined by the operating system: no network, writes only where it needs them,
reads nowhere a secret is kept.

The runtime guard (``fitness.worker.guard``) watches Python. What a library does in C
it does not see (``torch.save`` opens its file in C++), so the worker that runs
candidates also asks the kernel, once, before it imports anything:

- **Writes** (Landlock, Linux 5.19 and later): only under the worker's scratch
  directory, its spill directory, the compile caches it needs (Triton's; torch
  inductor's, CUDA's where set or there), ``/dev/shm``, and the device nodes it
  opens (``/dev/null`` and the like, the GPU drivers' nodes). From ABI 4 on,
  Landlock also refuses TCP connections, and from ABI 6 on signals to processes
  outside the worker.
- **Reads** (Landlock, the same ABI): everywhere but the policy's hidden
  directories, and beneath those only the paths it names (``read_rules``; the
  sandbox hides the user's home, kevo's checkout, the evaluator's working directory,
  ``/dev`` and ``/proc``, and names Python's directories, the GPU toolchain's, kevo's
  packages the worker imports and what it writes). In ``/proc`` the worker reads its
  own ``/proc/PID`` and what is no process's (``cpuinfo``, ``sys``, ``driver``, ...),
  never another process's ``environ``, ``cmdline`` or ``mem``, nor ``kcore``; in
  ``/dev`` the nodes it opens. The problem reaches the worker as text, so no problem
  file need be read. Listing a directory and executing a file stay open (the names
  are seen, not what the files hold). The programs the worker starts (Triton's
  ``ptxas``, the C compiler) inherit the rules, and their own ``/proc/PID`` is
  another process's: it is shut to them.
- **Network**: a network namespace of its own (``unshare(CLONE_NEWNET)``, with
  a user namespace when not root), which has no interface but a loopback that
  is down. Where namespaces are refused, a seccomp filter refuses every socket
  but ``AF_UNIX`` (and io_uring, which could open one behind the filter). A program a
  profiler wraps keeps the machine's network (the profiler talks to it over TCP) with
  Landlock refusing every TCP port but the profiler's (``Policy.ports``).

Each layer degrades on its own where the platform lacks it (an older kernel, a
container without the system calls), and what was in force is said: the
worker's ready message and every verdict carry ``Confinement.in_force``
(``"landlock+netns"``: writes and reads held; ``"landlock+netns (reads open: ...)"``:
writes alone; ``"netns (landlock unavailable: ...)"``: neither, ...).

``fitness.boundary.sandbox`` starts the worker as ``python -I fitness/boundary/confine.py POLICY --
python -m fitness.worker ...``: this file runs as a script (nothing of kevo,
torch or NumPy imported), confines its thread (Landlock, namespaces and seccomp
bind the calling thread only), and then executes the worker, which inherits all
of it (Landlock and namespaces survive ``exec``; no-new-privileges keeps a
set-user-ID program from shedding them). ``exec`` ends every other thread, so a
thread started before the confinement (a profiler's library that the loader put
in this process, ``LD_PRELOAD``) is gone before the worker's code runs, and the
threads of the new program are started by the confined one. Only the standard
library is used here.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import glob
import json
import os
import sys
from collections.abc import Callable, Sequence

#: The worker's environment variable that carries what was put in force (JSON).
ENV = "KEVO_CONFINEMENT"

#: Device nodes a worker opens for writing: the generic ones, and the GPU drivers'
#: (NVIDIA: nvidia*, nvidia-caps; AMD: kfd, dri). Anything else under /dev stays shut
#: (a worker run as root must not reach /dev/mem or a disk).
DEVICE_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
                "/dev/nvidia*", "/dev/nvidia-caps", "/dev/kfd", "/dev/dri")

# The worker's own files in /proc (this process keeps its pid through exec): the CUDA driver
# writes one of them, and fails to start without it. Not the guard's to allow a library.
_OWN_PROC = ("/proc/self",)
# What of /proc stays shut to reads beside other processes' directories: the kernel's memory.
_PROC_SHUT = ("kcore",)

# Landlock (linux/landlock.h). The same system call numbers on x86_64 and aarch64.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_WRITE_FILE, _READ_FILE, _TRUNCATE = 1 << 1, 1 << 2, 1 << 14
# The rights that change the file system, with the ABI each came in. Reading a file (bit 2)
# is handled where the policy hides a directory; executing and listing a directory (bits 0, 3)
# are not, so they stay open; nor are device ioctls.
_WRITE_RIGHTS = {
    _WRITE_FILE: 1, 1 << 4: 1, 1 << 5: 1, 1 << 6: 1, 1 << 7: 1, 1 << 8: 1, 1 << 9: 1, 1 << 10: 1,
    1 << 11: 1, 1 << 12: 1,  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
    1 << 13: 2,  # REFER: move or link a file between directories
    _TRUNCATE: 3,
}
_NET_TCP = (1 << 0) | (1 << 1)  # bind, connect (ABI 4)
_SCOPES = (1 << 0) | (1 << 1)  # abstract UNIX sockets, signals outside the domain (ABI 6)
_PR_SET_NO_NEW_PRIVS = 38

# Namespaces and seccomp.
_CLONE_NEWNET, _CLONE_NEWUSER = 0x40000000, 0x10000000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
_AF_UNIX = 1
# machine: (AUDIT_ARCH_*, socket, io_uring_setup)
_SECCOMP_ARCH = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}
_X32_BIT = 0x40000000


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the worker may write: ``writable`` directories (and what is beneath them); and
    what it may read: everything but the ``hidden`` directories, and beneath those only the
    ``readable`` paths (and the writable ones). No hidden directory: reads stay open.
    ``network`` False gives no network of its own and leaves signals and abstract sockets
    open, but TCP is still refused (Landlock, ABI 4) but to and from ``ports``: a program a
    profiler wraps talks to it there."""

    writable: tuple[str, ...]
    hidden: tuple[str, ...] = ()
    readable: tuple[str, ...] = ()
    network: bool = True
    ports: tuple[int, ...] = ()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Policy":
        data = json.loads(text)
        return cls(**{name: value if isinstance(value, bool) else tuple(value) for name, value in data.items()})


@dataclasses.dataclass(frozen=True)
class Confinement:
    """What was put in force: ``in_force`` in words, and the paths the worker may write
    (the policy's directories and the device nodes found), which the guard uses too."""

    in_force: str
    writable: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps({"in_force": self.in_force, "writable": list(self.writable)})


def writable_dirs(scratch: str, spill: str, env: dict[str, str]) -> tuple[str, ...]:
    """The directories a worker started with ``env`` may write: its ``scratch`` directory
    (its ``TMPDIR``, so torch inductor's default cache and Triton's build directories
    are there), its ``spill`` directory, the compile caches and ``/dev/shm``.

    >>> writable_dirs("/tmp/w", "/dev/shm/s", {"HOME": "/h", "TRITON_CACHE_DIR": "/c"})[:3]
    ('/tmp/w', '/dev/shm/s', '/c')
    """
    home = env.get("HOME") or os.path.expanduser("~")
    triton_home = env.get("TRITON_HOME") or home
    dirs = [scratch, spill, env.get("TRITON_CACHE_DIR") or os.path.join(triton_home, ".triton", "cache")]
    dirs += [env[name] for name in ("TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                                    "CUDA_CACHE_PATH") if env.get(name)]
    if not env.get("CUDA_CACHE_PATH") and os.path.isdir(os.path.join(home, ".nv", "ComputeCache")):
        dirs.append(os.path.join(home, ".nv", "ComputeCache"))  # the CUDA driver's JIT cache
    dirs.append("/dev/shm")
    return tuple(dict.fromkeys(dirs))


def device_nodes() -> tuple[str, ...]:
    """The nodes of ``DEVICE_NODES`` this machine has."""
    return tuple(path for pattern in DEVICE_NODES for path in sorted(glob.glob(pattern)))


def read_rules(hidden: Sequence[str], readable: Sequence[str],
               entries: Callable[[str], list[str]] | None = None) -> list[str]:
    """The paths that, each with what lies beneath it, are all a process may read when
    everything is readable but the ``hidden`` directories, and beneath those only the
    ``readable`` paths: each entry of every directory on the way down to a hidden one (not
    the way itself; ``entries``: a directory's subdirectories and files, symbolic links left
    out, as their targets have rules of their own), and the readable paths that are not a
    hidden directory or above one. ``/`` is never hidden; a hidden directory beneath another
    is hidden by it.

    >>> tree = {"/": ["etc", "home", "usr"], "/home": ["me", "you"]}
    >>> read_rules(["/home/me", "/home/me/work"], ["/home/me/.venv", "/home", "/usr/lib"], tree.get)
    ['/etc', '/home/me/.venv', '/home/you', '/usr', '/usr/lib']
    """
    entries = entries or _entries
    roots = {os.path.realpath(path) for path in hidden if path} - {"/"}
    roots = {root for root in roots if not any(_beneath(root, other) for other in roots - {root})}
    ways = {"/" + "/".join(parts[:i]) for root in roots for parts in [root.strip("/").split("/")]
            for i in range(len(parts))}
    rules = {os.path.join(way, name) for way in ways for name in entries(way) or ()} - ways - roots
    rules |= {path for path in map(os.path.realpath, readable)
              if not any(root == path or _beneath(root, path) for root in roots)}
    return sorted(rules)


def _beneath(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def _entries(directory: str) -> list[str]:
    """The subdirectories and regular files of ``directory`` (no links, sockets or devices)."""
    try:
        with os.scandir(directory) as found:
            return [e.name for e in found if e.is_dir(follow_symlinks=False) or e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def _proc_readable() -> list[str]:
    """This process's own directory in /proc, and every entry there that is not another
    process's (cpuinfo, meminfo, stat, sys, driver, ...) but ``_PROC_SHUT``."""
    names = [name for name in _entries("/proc") if not name.isdigit() and name not in _PROC_SHUT]
    return [f"/proc/{os.getpid()}", *(f"/proc/{name}" for name in names)]


def in_force() -> Confinement:
    """What ``apply`` put in force for this process (read from ``ENV``); for a process
    started some other way, none (and no paths)."""
    text = os.environ.get(ENV)
    if not text:
        return Confinement("none (the worker was not started through fitness.boundary.confine)", ())
    data = json.loads(text)
    return Confinement(str(data["in_force"]), tuple(data["writable"]))


# -- applying it ------------------------------------------------------------------------------


def apply(policy: Policy) -> Confinement:
    """Confine this process (and what it starts) to ``policy``, as far as the platform
    allows; what was put in force. It binds the calling thread and the threads and programs it starts."""
    nodes = device_nodes()
    writable = tuple(policy.writable) + nodes
    if not sys.platform.startswith("linux"):
        return Confinement(f"guard only (no confinement by the OS on {sys.platform})", writable)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return Confinement(f"guard only (no-new-privileges refused: {_last_error()})", writable)
    in_force, missing = [], []
    network, why = _own_network(libc) if policy.network else ("", "")  # before Landlock: a user namespace's maps
    if network:  # are written in /proc
        in_force.append(network)
    elif policy.network:
        missing.append(f"network isolation unavailable: {why}")
    reads = None
    if policy.hidden:
        reads = read_rules(policy.hidden, (*policy.readable, *policy.writable, *nodes, *_proc_readable()))
    why = _landlock(libc, policy, nodes, reads)
    if why and reads is not None:  # the reads' part refused: writes alone
        why_reads, why = why, _landlock(libc, policy, nodes, None)
        if not why:
            missing.append(f"reads open: {why_reads}")
    elif not why and reads is None:
        missing.append("reads open: the policy hides no directory")
    if why:
        missing.append(f"landlock unavailable: {why}")
    else:
        in_force.insert(0, "landlock")
    if not policy.network:
        held = not why and landlock_abi() >= 4
        missing.append(f"network shared, TCP only on ports {_spans(policy.ports)}" if held else "network open")
    words = "+".join(in_force) or "guard only"
    if missing:
        words += f" ({'; '.join(missing)})"
    return Confinement(words, writable)


def _last_error() -> str:
    code = ctypes.get_errno()
    return f"{errno.errorcode.get(code, code)}: {os.strerror(code)}"


def _own_network(libc: ctypes.CDLL) -> tuple[str, str]:
    """('netns' | 'userns+netns' | 'seccomp', '') once the process has no network, or
    ('', why not)."""
    if libc.unshare(_CLONE_NEWNET) == 0:
        return "netns", ""
    why = f"unshare: {_last_error()}"
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
        # the same ids inside as outside, so that files and messages name the user as before
        try:
            for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                               ("/proc/self/gid_map", f"{gid} {gid} 1")):
                with open(path, "w") as f:
                    f.write(text)
        except OSError:
            return "userns(ids unmapped)+netns", ""  # the kernel still checks files as the same user
        return "userns+netns", ""
    why += f"; with a user namespace: {_last_error()}"
    refused = _seccomp_sockets(libc)
    if not refused:
        return "seccomp", ""
    return "", f"{why}; seccomp: {refused}"


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def _seccomp_sockets(libc: ctypes.CDLL) -> str:
    """Refuse (EACCES) every socket but AF_UNIX, io_uring, and every system call of
    another ABI (x32, i386); '' once in force, else why not."""
    arch = _SECCOMP_ARCH.get(os.uname().machine)
    if arch is None:
        return f"no filter for {os.uname().machine}"
    audit_arch, nr_socket, nr_io_uring = arch
    ld_w_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    deny = _SECCOMP_RET_ERRNO | errno.EACCES
    program = [
        (ld_w_abs, 0, 0, 4),  # 0: the architecture
        (jeq, 0, 7, audit_arch),  # 1: another ABI: deny (a jump counts from the next instruction)
        (ld_w_abs, 0, 0, 0),  # 2: the system call's number
        (jge, 5, 0, _X32_BIT),  # 3: x32: deny
        (jeq, 4, 0, nr_io_uring),  # 4: io_uring_setup: deny
        (jeq, 0, 2, nr_socket),  # 5: not socket(): allow
        (ld_w_abs, 0, 0, 16),  # 6: socket's first argument, the family (its low 32 bits)
        (jeq, 0, 1, _AF_UNIX),  # 7: AF_UNIX: allow, else deny
        (ret, 0, 0, _SECCOMP_RET_ALLOW),  # 8
        (ret, 0, 0, deny),  # 9
    ]
    filters = (_SockFilter * len(program))(*[_SockFilter(*item) for item in program])
    prog = _SockFprog(len(program), filters)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        return _last_error()
    return ""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _spans(ports: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``'1-3, 7'``; ``'none'`` for no port."""
    spans: list[list[int]] = []
    for port in sorted(ports):
        if spans and port == spans[-1][1] + 1:
            spans[-1][1] = port
        else:
            spans.append([port, port])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans) or "none"


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers; 0 for none."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, int(libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))))


def _landlock(libc: ctypes.CDLL, policy: Policy, nodes: tuple[str, ...], reads: list[str] | None) -> str:
    """Restrict writes to the policy's directories and ``nodes``, and,
    unless ``reads`` is None, reading files to what lies beneath ``reads``; '' once in force,
    else why not. The paths in /proc are held open (and so are their inodes: procfs makes a
    new one for each new look-up)."""
    abi = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if abi < 0:
        return f"the kernel offers none ({_last_error()})"
    if abi < 2:
        return f"ABI {abi} cannot let a file move between directories, as Triton's cache does"
    writes = sum(right for right, since in _WRITE_RIGHTS.items() if abi >= since)
    handled = writes | (_READ_FILE if reads is not None else 0)
    attr = _RulesetAttr(handled, _NET_TCP if abi >= 4 else 0, _SCOPES if policy.network and abi >= 6 else 0)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        return f"landlock_create_ruleset: {_last_error()}"
    try:
        file_rights = _WRITE_FILE | _TRUNCATE  # all a device node takes
        rules = [(path, writes) for path in policy.writable] + [(path, file_rights) for path in (*nodes, *_OWN_PROC)]
        rules += [(path, _READ_FILE) for path in reads or ()]
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | (0 if path.startswith("/proc/") else os.O_CLOEXEC))
            except (FileNotFoundError, PermissionError):
                continue  # a cache never made, a device this machine lacks, a file not ours
            try:
                rule = _PathBeneathAttr(rights & handled, fd)
                if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    return f"landlock_add_rule({path}): {_last_error()}"
            finally:
                if not path.startswith("/proc/"):
                    os.close(fd)
        for port in policy.ports if abi >= 4 and not policy.network else ():
            rule = _NetPortAttr(_NET_TCP, port)
            if libc.syscall(_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                return f"landlock_add_rule(port {port}): {_last_error()}"
        if libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            return f"landlock_restrict_self: {_last_error()}"
    finally:
        os.close(ruleset)
    return ""


def main(argv: list[str]) -> None:
    """``confine.py POLICY -- PROGRAM ARGS...``: confine this process, then execute PROGRAM
    with ``ENV`` saying what is in force."""
    if len(argv) < 3 or argv[1] != "--":
        raise SystemExit("usage: confine.py POLICY -- PROGRAM [ARGS...]")
    confinement = apply(Policy.from_json(argv[0]))
    os.environ[ENV] = confinement.to_json()
    program = argv[2:]
    os.execv(program[0], program)


if __name__ == "__main__":
    main(sys.argv[1:])
