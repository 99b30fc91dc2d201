"""Reproductions of the method papers' headline claims (``maxbench reproduce PAPER``).

A reproduction is a protocol over ordinary runs: ``papers/<paper>.toml`` holds the paper's claims
with the numbers it reports and the protocol maxbench runs (models, corpora, folds, systems,
decoding, metrics); ``folds.py`` makes the cross-validation suites, ``protocol.py`` turns the
protocol into runs of ``benchmark/run/runner.py``, ``verdicts.py`` decides each claim from the runs'
scores, and ``report.py`` writes ``results/reproductions/<paper>/report.{md,html,csv,json}``.
"""
