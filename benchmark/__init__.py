"""What is run and how it is scored: corpora, suites, lineups, runs, metrics, leaderboards."""

import core  # noqa: F401  (first: pins the CPU arithmetic before NumPy or torch load)
