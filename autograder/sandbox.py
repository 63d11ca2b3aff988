"""Bubblewrap sandboxes for grading kernels: student code sees the OS, Python and ``helpers/``, read-only.

Every grading kernel, and every process it starts, runs inside a `bubblewrap
<https://github.com/containers/bubblewrap>`_ sandbox (``bwrap``, Debian package
``bubblewrap``) built by :func:`bwrap_argv`. Inside it:

* the OS (``/usr``, ``/etc`` and the ``/bin``, ``/lib`` ... links), the Python environment
  (the venv and the interpreter it links to) and the course's ``helpers/`` package are
  mounted read-only at their host paths; ``/etc`` files only root may read are masked;
* nothing else of the host exists: no course root (``autograder/``, ``source/``, the
  gradebook), no home directory, no ``/sys``; ``/proc`` shows only the sandbox's processes;
* ``/tmp`` and ``/dev/shm`` are private memory file systems of ``TMPFS_BYTES`` each, and
  one scratch directory is writable (at its host path); nothing else is;
* it has its own user (uid 65534, no capabilities), pid, network (loopback only), IPC,
  UTS and cgroup namespaces, and it ends with the process that started it;
* it holds at most ``PROCESS_LIMIT`` processes and threads at once (:class:`ProcessLimit`): a
  pids cgroup where the grader may make and join one (a grader run as root, whose uid the sandbox's
  user maps to, is exempt from ``RLIMIT_NPROC``), and ``RLIMIT_NPROC`` inside (which binds
  an unprivileged grader's sandbox, counted per user namespace).

Kernels talk to the grader over ZMQ ``ipc`` sockets in the scratch directory, since no
network is shared (:mod:`autograder.warm_kernels`).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BWRAP = "bwrap"
SANDBOX_UID = 65534  # "nobody": the sandbox's user, mapped to the grader's own uid
TMPFS_BYTES = 1 << 30  # size of the sandbox's /tmp and of its /dev/shm (memory), in bytes
PROCESS_LIMIT = 512  # processes and threads of one sandbox at once; grading a source (up to 8 ranks) peaks at 97
PROBE_TIMEOUT_S = 30  # a trivial sandbox that has not run by then counts as unavailable
OS_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")  # /usr-merged links (or directories)
ENV_NAMES = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
             "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS",
             "PYTHONFAULTHANDLER", "PYTHONIOENCODING", "SOURCE_DATE_EPOCH")
ENV_PREFIXES = ("LC_", "COURSE_", "JPY_", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "GLOO_", "TORCH_", "ATEN_")


class SandboxUnavailable(RuntimeError):
    """Grading for credit needs the sandbox, and it cannot start here (the message says why)."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"bubblewrap (Debian package `bubblewrap`) is needed to grade for credit: {reason}. "
            "Install it (`apt-get install bubblewrap`; it needs unprivileged user namespaces), or, "
            "for self-study only, grade with `python -m autograder grade`, which grades without it.")


def helpers_dir() -> str:
    """The ``helpers`` package directory kernels import (the editable install maps it into the course root)."""
    spec = importlib.util.find_spec("helpers")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the course's helpers package is not installed")
    return os.path.realpath(next(iter(spec.submodule_search_locations)))


def python_dirs() -> list[str]:
    """The Python environment kernels run: this interpreter's venv and the installation it links to."""
    real = Path(os.path.realpath(sys.executable)).parent.parent  # .../bin/python3 -> the installation
    dirs = {os.path.abspath(sys.prefix), os.path.abspath(sys.base_prefix), str(real)}
    return sorted(d for d in dirs if not d.startswith("/usr/"))  # /usr is mounted anyway


@functools.cache
def _private_etc() -> tuple[tuple[str, bool], ...]:
    """``(path, is_dir)`` of the files and directories under /etc that others may not read (shadow, keys)."""
    found: list[tuple[str, bool]] = []
    for top, dirs, files in os.walk("/etc"):
        for name in (*dirs, *files):
            path = os.path.join(top, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if not stat.S_ISLNK(mode) and not mode & stat.S_IROTH:
                found.append((path, stat.S_ISDIR(mode)))
        masked = {path for path, is_dir in found if is_dir}
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in masked]  # masked whole
    return tuple(found)


def _os_mounts() -> list[str]:
    """Read-only /usr and /etc, the /bin, /lib ... links, and /etc's private files masked."""
    argv = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in OS_LINKS:
        path = "/" + name
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    # The sandbox's user is the grader's own uid: run as root, it could read root's files
    for path, is_dir in _private_etc():
        argv += ["--tmpfs", path] if is_dir else ["--ro-bind", "/dev/null", path]
    return argv


def bwrap_argv(scratch: str, *, cwd: str | None = None, ro_binds: dict[str, str] | None = None,
               as_pid_1: bool = False) -> list[str]:
    """The ``bwrap`` command prefix of a sandbox whose one writable directory is ``scratch``.

    Append ``--`` and the command. ``scratch`` is mounted at its own path; ``ro_binds`` maps
    more host paths to the read-only paths they get inside; ``cwd`` is the command's working
    directory (default ``scratch``). The sandbox is killed when the thread that started it
    ends. With ``as_pid_1`` the command is the sandbox's init (pid 1): it must reap its
    orphans, no process in the sandbox can kill or stop it, and the sandbox ends with it.
    Else bwrap is the init, and the command is pid 2.
    """
    argv = [shutil.which(BWRAP) or BWRAP, *_os_mounts(), "--proc", "/proc", "--dev", "/dev",
            "--size", str(TMPFS_BYTES), "--tmpfs", "/dev/shm", "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp"]
    for path in (*python_dirs(), helpers_dir()):  # after /tmp: they may be below it (a copy of the course)
        argv += ["--ro-bind", path, path]
    argv += ["--bind", scratch, scratch]
    for source, target in (ro_binds or {}).items():
        argv += ["--ro-bind", source, target]
    argv += ["--remount-ro", "/"]  # the sandbox's root (mount points only): no file can be planted there
    argv += ["--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
             "--hostname", "sandbox", "--chdir", cwd or scratch, "--die-with-parent"]
    # No --new-session: kernels call setsid() themselves, and jupyter interrupts their process group.
    return argv + (["--as-pid-1"] if as_pid_1 else [])


def _python_path(env: dict[str, str]) -> dict[str, str]:
    """``PYTHONPATH`` for the sandbox: the directory of ``helpers``, if the grader finds it through ``PYTHONPATH``.

    (A copy of the course run with ``PYTHONPATH=COPY``; normally the editable install finds it.)
    """
    parent = os.path.dirname(helpers_dir())
    entries = {os.path.realpath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p}
    return {"PYTHONPATH": parent} if parent in entries else {}


def sandbox_env(env: dict[str, str], home: str) -> dict[str, str]:
    """The part of ``env`` a sandboxed process gets (no host paths, no secrets), with ``home`` as its home."""
    kept = {k: v for k, v in env.items() if k in ENV_NAMES or k.startswith(ENV_PREFIXES)} | _python_path(env)
    kept.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    kept["PATH"] = f"{os.path.dirname(sys.executable)}:{kept['PATH']}"  # the venv's python first
    return {**kept, "HOME": home, "TMPDIR": os.path.join(home, "tmp"), "IPYTHONDIR": os.path.join(home, "ipython"),
            "MPLCONFIGDIR": os.path.join(home, "matplotlib"), "XDG_CACHE_HOME": os.path.join(home, "cache"),
            "XDG_CONFIG_HOME": os.path.join(home, "config")}


def make_home(home: str) -> None:
    """Create the directories :func:`sandbox_env` names under ``home``."""
    for sub in ("tmp", "ipython", "matplotlib", "cache", "config"):
        os.makedirs(os.path.join(home, sub), exist_ok=True)


@functools.cache
def available() -> bool:
    """Whether sandboxes start here: ``bwrap`` is installed and runs a trivial sandbox (asked once per process)."""
    return not unavailable_reason()


@functools.cache
def unavailable_reason() -> str:
    """Why sandboxes cannot start here ("" when they can)."""
    if not sys.platform.startswith("linux"):
        return "sandboxes need Linux"
    if shutil.which(BWRAP) is None:
        return "`bwrap` is not installed"
    scratch = tempfile.mkdtemp(prefix="course-sandbox-probe-")
    try:
        done = subprocess.run([*bwrap_argv(scratch, as_pid_1=True), "--", sys.executable, "-S", "-c", "print('ok')"],
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired, RuntimeError) as exc:
        return f"a trivial sandbox did not run ({exc})"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0 or done.stdout.strip() != "ok":
        detail = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return f"a trivial sandbox did not run ({detail[0]})"
    return ""


def _pids_cgroup() -> str | None:
    """The directory of this process's cgroup in a pids hierarchy (cgroup v1 ``pids``, or v2 with
    the pids controller enabled below it) where this process may make a child cgroup; else None."""
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
        with open("/proc/self/cgroup") as f:
            own = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for fields in mounts:
        tail = fields[fields.index("-") + 1:]
        if tail[0] == "cgroup" and "pids" in tail[2].split(","):
            relative = next((path for _, controllers, path in own if "pids" in controllers.split(",")), None)
        elif tail[0] == "cgroup2":
            relative = next((path for hierarchy, _, path in own if hierarchy == "0"), None)
        else:
            continue
        if relative is None:
            continue
        directory = os.path.join(fields[4], relative.lstrip("/"))
        try:
            if tail[0] == "cgroup2":
                with open(os.path.join(directory, "cgroup.subtree_control")) as f:
                    if "pids" not in f.read().split():
                        continue
        except OSError:
            continue
        if os.access(directory, os.W_OK):
            return directory
    return None


STALE_CGROUP_S = 60.0  # an empty sandbox cgroup this old was left by a grader that did not end cleanly


def _remove_stale(parent: str) -> None:
    """Remove the empty sandbox cgroups under ``parent`` that graders killed (or pool workers) left behind.

    A sandbox's cgroup holds its processes for as long as it lives; only one just made (not yet
    joined) is empty and young, so empty ones older than ``STALE_CGROUP_S`` are left-overs.
    """
    for entry in os.scandir(parent):
        if not entry.name.startswith("course-sandbox-"):
            continue
        try:
            if time.time() - entry.stat().st_mtime > STALE_CGROUP_S:
                os.rmdir(entry.path)  # fails while any process is in it
        except OSError:
            pass


class ProcessLimit:
    """A pids cgroup of at most ``limit`` processes and threads, which a sandbox joins before bwrap starts.

    :meth:`make` returns None where no pids cgroup can be made (no writable pids hierarchy:
    an unprivileged grader, whose sandboxes ``RLIMIT_NPROC`` bounds instead). Start the
    sandbox with :meth:`argv` before ``bwrap``'s; :meth:`remove` once the sandbox has ended.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory

    @classmethod
    def make(cls, limit: int = PROCESS_LIMIT) -> "ProcessLimit | None":
        """A new cgroup of at most ``limit`` tasks that a process of this one can join; None where there is none."""
        parent = _pids_cgroup()
        if parent is None:
            return None
        _remove_stale(parent)
        try:
            directory = tempfile.mkdtemp(prefix="course-sandbox-", dir=parent)
        except OSError:
            return None
        made = cls(directory)
        try:
            with open(os.path.join(directory, "pids.max"), "w") as f:
                f.write(str(limit))
            # a child joins it the way a sandbox will (a delegated cgroup v2 may allow making, not joining)
            probe = subprocess.run([*made.argv(), "true"], capture_output=True, timeout=PROBE_TIMEOUT_S)
            joined = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            joined = False
        if not joined:
            made.remove()
            return None
        return made

    def argv(self) -> list[str]:
        """A command prefix that joins the cgroup, then execs the rest of the command (bwrap's)."""
        return [sys.executable, "-S", "-c", "import os, sys; open(sys.argv[1], 'w').write('0'); "
                "os.execvp(sys.argv[2], sys.argv[2:])", os.path.join(self.directory, "cgroup.procs")]

    def current(self) -> int:
        """Processes and threads in the cgroup now."""
        with open(os.path.join(self.directory, "pids.current")) as f:
            return int(f.read())

    def remove(self, wait_s: float = 5.0) -> None:
        """Remove the cgroup once it is empty (the sandbox's processes end soon after it; waits ``wait_s`` at most)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                os.rmdir(self.directory)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.02)


def nspid(pid: int) -> list[int]:
    """Process ``pid``'s pid in each pid namespace it is in, outermost first (``NSpid:`` of /proc; [] if gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(field) for field in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def start_time(pid: int) -> int | None:
    """Process ``pid``'s start time (clock ticks after boot), to tell it from a later process given its pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read()
    except OSError:
        return None
    return int(stat_line[stat_line.rindex(b")") + 2:].split()[19])


def children(pid: int) -> list[int]:
    """The pids of the processes whose parent is ``pid`` (its pid namespace's init, for the ``bwrap`` process)."""
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def host_pid(sandbox_pid: int, inner_pid: int) -> int | None:
    """The host pid of the process below ``sandbox_pid`` (``bwrap``) whose pid in its own namespace is ``inner_pid``.

    None if there is none: a pid that cannot be traced to the sandbox is never signalled.
    """
    import psutil

    try:
        below = psutil.Process(sandbox_pid).children(recursive=True)
    except psutil.Error:
        return None
    for process in below:
        pids = nspid(process.pid)
        if len(pids) > 1 and pids[-1] == inner_pid:
            return process.pid
    return None
