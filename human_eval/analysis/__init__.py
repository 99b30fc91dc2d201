"""From ratings to statistics: reading and validating ratings, the options of an analysis, the
result objects, and the statistics of each judgment kind. No SQL and no Flask here."""
