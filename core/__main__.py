"""``python -m maxbench``: the same command line as ``maxbench``."""

import sys

from maxbench.cli import main

sys.exit(main())
