"""Writing files so that a reader never sees half of one, and checking folders before work starts.

``atomic_write`` (and ``atomic_open`` for writers that stream, such as ``numpy.savez``) writes to a
temporary file in the destination's folder, flushes and fsyncs it, gives it the mode a plain
``open()`` would (``0o666`` less the umask: colleagues sharing a results folder can read it, where
``tempfile.mkstemp`` alone leaves ``0o600``) unless a ``mode`` is asked for, and renames it over the
destination with ``os.replace``. A crash leaves the old file or the new one, never a mix.
``atomic_dir`` does the same for a folder of files (a converted model, a cache), with the mode
``mkdir`` gives (``mkdtemp`` alone leaves ``0o700``).

Operating-system failures become one-line ``MaxbenchError``s naming the path (``os_error``).
``check_output_dir`` answers, before anything is computed, whether a folder is or can become a
writable folder, without creating it; ``ensure_dir`` creates it. ``check_not_input`` is the one check
that a command's output is none of its inputs (a run's files, a ratings database, a suite, a ratings
file), links and hard links resolved: every command that writes a file or a folder passes it its
inputs before it computes anything, so nothing the user made is overwritten by what was derived
from it. ``plain_name`` checks a name that becomes one path component (``--run-id``), so it cannot
climb out of its parent folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from maxbench.errors import MaxbenchError

_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=-]{0,99}")


def umask() -> int:
    """The process's umask, read without changing it where the OS allows (another thread creating
    a file meanwhile would otherwise get the wrong mode)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file."""
    return 0o666 & ~umask()


def _reason(exc: OSError) -> str:
    return {
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EROFS: "the file system is read-only",
        errno.ENOTDIR: "a part of that path is a file, not a folder",
        errno.EEXIST: "something that is not a folder is in the way",
        errno.EISDIR: "it is a folder",
        errno.ENAMETOOLONG: "the name is too long",
        errno.ENOENT: "a folder on that path does not exist and cannot be made",
    }.get(exc.errno, exc.strerror or type(exc).__name__)


#: the environment variable that names maxbench's cache folder (``maxbench.fileio.maxbench_home``)
HOME_ENV = "MAXBENCH_HOME"


def maxbench_home() -> Path:
    """The cache root: ``$MAXBENCH_HOME`` or ``~/.cache/maxbench``. A write that fails because the
    root itself is unusable (mistyped, read-only) is reported naming ``MAXBENCH_HOME``
    (``cache_home_problem``)."""
    home = os.environ.get(HOME_ENV)
    return Path(home).expanduser() if home else Path.home() / ".cache" / "maxbench"


def _home_named() -> str:
    value = os.environ.get(HOME_ENV)
    return f"{HOME_ENV}={value}" if value else f"the cache folder {maxbench_home()} ({HOME_ENV} is unset)"


def cache_home_problem(path: str | Path | None = None) -> MaxbenchError | None:
    """The error naming ``MAXBENCH_HOME`` when the cache root itself cannot be used for writing (a
    mistyped path whose parents cannot be made, a file in its place, a read-only or foreign folder),
    else None. With ``path``, only when ``path`` lies in the cache root (or is a folder on the way to
    one that does not exist yet), so a failure below a usable root keeps its own message."""
    home = Path(os.path.abspath(maxbench_home()))
    if path is not None:
        p = Path(os.path.abspath(path))
        inside = p == home or home in p.parents
        on_the_way = p in home.parents and not (home.exists() or home.is_symlink())
        if not (inside or on_the_way):
            return None
    found = _existing_ancestor(home)
    if found == home:
        if not found.is_dir():
            what = "it is a file, not a folder" if found.is_file() else "it is not a folder"
        elif not os.access(found, os.W_OK | os.X_OK):
            what = "this user cannot write in it (read-only or permission denied)"
        else:
            return None
    elif not found.is_dir():
        what = f"cannot create it ({found} is a file, not a folder)"
    elif not os.access(found, os.W_OK | os.X_OK):
        what = f"cannot create it ({found}, the nearest existing folder, is not writable)"
    else:
        return None
    return MaxbenchError(f"{_home_named()}: {what}: set {HOME_ENV} to a writable folder or unset it")


def os_error(path: str | Path, exc: OSError, doing: str = "write") -> MaxbenchError:
    """One line for an operating-system failure on ``path``: what failed and what to do (a failure
    caused by an unusable cache root names ``MAXBENCH_HOME``, not the sub-folder it was making)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return MaxbenchError(
            f"disk full while writing {path}; everything written before is kept: "
            f"free some space and run the same command again to resume"
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EEXIST):
        home = cache_home_problem(path)
        if home is not None:
            return home
    return MaxbenchError(f"cannot {doing} {path}: {_reason(exc)}; choose another location")


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` when the ``with`` block ends without an exception (and
    is removed if it raises). ``mode`` defaults to what the umask gives; pass ``0o600`` for secrets."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise MaxbenchError(f"cannot write {path}: it exists and is not a regular file; choose another location")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise os_error(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), default_mode() if mode is None else mode)
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise os_error(path, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write(path: str | Path, data: bytes | str, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) atomically; see ``atomic_open``."""
    with atomic_open(path, mode) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """A temporary folder beside ``path`` that replaces it when the ``with`` block ends without an
    exception (and is removed otherwise); the caller writes its completion marker last, inside the
    block. The folder, and everything in it, gets the mode ``mkdir`` and ``open()`` would give
    (``mkdtemp`` leaves ``0o700``, and libraries that write through temporary files, such as
    transformers' ``save_pretrained``, leave ``0o600``); executables keep their execute bits."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{path.name}-", dir=path.parent))
    except OSError as exc:
        raise os_error(path, exc) from None
    try:
        yield tmp
        _umask_modes(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except OSError as exc:
        raise os_error(path, exc) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _fsync_dir(path.parent)


def _umask_modes(folder: Path) -> None:
    mask = umask()
    os.chmod(folder, 0o777 & ~mask)
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                os.chmod(p, 0o777 & ~mask)
            elif stat.S_ISREG(st.st_mode):  # a link's mode is its target's business
                os.chmod(p, (0o777 if st.st_mode & stat.S_IXUSR else 0o666) & ~mask)


def _fsync_dir(folder: Path) -> None:
    # The rename is durable only once the folder's entry is on disk; some file systems refuse this.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _existing_ancestor(path: Path) -> Path:
    """``path`` itself if it exists (or is a dangling link), else its nearest existing ancestor."""
    probe = Path(os.path.abspath(path))
    while not (probe.exists() or probe.is_symlink()) and probe != probe.parent:
        probe = probe.parent
    return probe


def check_output_dir(path: str | Path, what: str) -> None:
    """Refuse, without creating anything, a ``path`` that is not and cannot become a folder this
    process can write in: a file or a device (``/dev/null``) where the folder belongs, a file further
    up, a read-only or permission-denied place. ``what`` names the option, e.g. ``--runs-dir``."""
    path = Path(path)
    found = _existing_ancestor(path)
    if not found.is_dir():
        kind = "a file" if found.is_file() else "a broken link" if found.is_symlink() else "not a folder"
        where = (
            f"{found} is {kind}"
            if found == Path(os.path.abspath(path))
            else f"{found} is {kind}, so {path} cannot be made"
        )
        raise MaxbenchError(f"{what} {path}: {where}; give a folder")
    if not os.access(found, os.W_OK | os.X_OK):
        detail = "" if found == Path(os.path.abspath(path)) else f" ({found} is the nearest existing folder)"
        raise MaxbenchError(f"{what} {path}: this user cannot write there{detail}; choose another folder")


#: a command's inputs for ``check_not_input``: (path, what it is, e.g. "the run's texts")
Inputs = Iterable[tuple["str | Path", str]]


def _same_file(a: str | Path, b: str | Path) -> bool:
    """Whether ``a`` and ``b`` name one file or folder: the same path once every link is resolved
    (a path that does not exist yet resolves as far as it exists), or, both existing, one inode."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_not_input(path: str | Path, what: str, inputs: Inputs, whole_folder: bool = False) -> None:
    """Refuse an output ``path`` that is one of the command's ``inputs`` (or resolves to one through
    links): writing it would replace what the output is computed from. With ``whole_folder`` the
    output is a folder replaced whole, so a folder that holds an input is refused too. The refusal
    names both paths; nothing has been written."""
    out = Path(os.path.realpath(path))
    for given, label in inputs:
        if _same_file(path, given):
            kind = "folder" if whole_folder else "file"
            raise MaxbenchError(
                f"{what} {path} is {label} {given}, an input of this command: writing there would destroy it; "
                f"choose another {kind}"
            )
        if whole_folder and out in Path(os.path.realpath(given)).parents:
            raise MaxbenchError(
                f"{what} {path} is replaced whole, and it holds {label} {given}, an input of this command; "
                "choose another folder"
            )


def check_output_file(path: str | Path, what: str, inputs: Inputs = ()) -> None:
    """Refuse, before the work that produces it, a file ``path`` that could not be written: its folder
    fails ``check_output_dir``, a folder, device or pipe has its name, or it is one of the command's
    ``inputs`` (``check_not_input``)."""
    check_not_input(path, what, inputs)
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not path.is_file():
        raise MaxbenchError(f"{what} {path} exists and is not a regular file; move it away or choose another location")
    check_output_dir(path.parent, what)


def ensure_dir(path: str | Path, what: str) -> Path:
    """Create folder ``path`` (and its parents) or fail with one line naming ``what``."""
    path = Path(path)
    check_output_dir(path, what)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MaxbenchError(f"{what} {path}: cannot create it: {_reason(exc)}; choose another folder") from None
    return path


def free_bytes(path: str | Path) -> int:
    """Free space for this user on the file system that holds (or will hold) ``path``."""
    return shutil.disk_usage(_existing_ancestor(Path(path))).free


def plain_name(name: str, what: str) -> str:
    """``name`` if it is one plain path component (letters, digits, '.', '_', '=', '-'; first a letter
    or digit; at most 100): such a name cannot climb out of its folder (``../x``) or hide itself."""
    if not _PLAIN_NAME.fullmatch(name):
        raise MaxbenchError(
            f"{what} {name!r} is not a plain folder name (letters, digits, '.', '_', '=', '-', starting "
            f"with a letter or digit, at most 100 characters); choose another"
        )
    return name
