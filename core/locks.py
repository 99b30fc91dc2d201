"""Cross-process locks for work that several processes of one run may reach at once.

``exclusive(path)`` holds an advisory ``fcntl.flock`` on ``<path>.lock`` for the ``with`` block.
The kernel releases it when its holder exits, however it exits (``kill -9`` included), so a lock
never outlives its process and nothing has to clean up after a crash. Caches wrap their
load-or-build in it: the first process builds, the others wait and then load what it wrote, so
parallel workers (``maxbench run --workers``, ``torchrun``) never fit the same head twice.
``claim(path)`` is the same lock taken without waiting (a unit of work nobody else is doing), and
``held(path)`` asks whether a live process holds it (a worker that is running now).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from maxbench.fileio import ensure_dir, os_error


def lock_path(path: str | Path) -> Path:
    """The lock file of ``path``: ``<path>.lock`` beside it."""
    path = Path(path)
    return path.with_name(path.name + ".lock")


def _open_lock(path: str | Path) -> int:
    lock = lock_path(path)
    ensure_dir(lock.parent, "cache folder")
    try:
        return os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise os_error(lock, exc) from None


@contextlib.contextmanager
def exclusive(path: str | Path) -> Iterator[None]:
    """Hold the lock of ``path`` for the block, waiting while another process holds it."""
    import fcntl

    fd = _open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def claim(path: str | Path) -> Iterator[bool]:
    """Take the lock of ``path`` for the block if nobody holds it: yields True when taken (the block
    owns the work), False at once when another process holds it."""
    import fcntl

    fd = _open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True
    finally:
        os.close(fd)


def held(path: str | Path) -> bool:
    """Whether a process holds the lock of ``path`` now (it has not ended: the kernel drops the lock
    of a process that did, ``kill -9`` included)."""
    if not lock_path(path).exists():
        return False
    with claim(path) as taken:
        return not taken
