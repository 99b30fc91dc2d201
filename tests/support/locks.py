"""A lock held by another process, as a worker building a cache holds it."""

import contextlib
import subprocess
import sys
from pathlib import Path

_HOLDER = """
import sys
from maxbench.locks import exclusive
with exclusive(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()
"""


class HeldLock:
    """The lock of ``path`` (``maxbench.locks.exclusive``) held by a child process until ``release``."""

    def __init__(self, path: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout.readline().strip() == "held"

    def release(self) -> None:
        """Let the child go and wait until it has ended (the kernel has then dropped its lock)."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


@contextlib.contextmanager
def held_by_another_process(path: Path):
    lock = HeldLock(path)
    try:
        yield lock
    finally:
        lock.release()
        lock.proc.stdout.close()
