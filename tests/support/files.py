"""File modes, for tests of what others may read."""

import os
import stat


def file_mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)
