"""What is run and how it is scored: corpora, suites, lineups, runs, metrics, leaderboards."""
