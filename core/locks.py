"""Cross-process locks for work that several processes of one run may reach at once.

``exclusive(path)`` holds an advisory ``fcntl.flock`` on ``<path>.lock`` for the ``with`` block.
The kernel releases it when its holder exits, however it exits (``kill -9`` included), so a lock
never outlives its process and nothing has to clean up after a crash. Caches wrap their
load-or-build in it: the first process builds, the others wait and then load what it wrote, so
parallel workers (``maxbench run --workers``, ``torchrun``) never fit the same head twice.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .fileio import ensure_dir, os_error


def lock_path(path: str | Path) -> Path:
    """The lock file of ``path``: ``<path>.lock`` beside it."""
    path = Path(path)
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def exclusive(path: str | Path) -> Iterator[None]:
    """Hold the lock of ``path`` for the block, waiting while another process holds it."""
    import fcntl

    lock = lock_path(path)
    ensure_dir(lock.parent, "cache folder")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise os_error(lock, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
