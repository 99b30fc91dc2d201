"""The human study: the rating app, study design and the statistics of the reports."""

import core  # noqa: F401  (first: pins the CPU arithmetic before NumPy or torch load)
