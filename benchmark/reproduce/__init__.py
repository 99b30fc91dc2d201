"""Reproductions of the method papers' headline claims (``maxbench reproduce PAPER``).

A reproduction is a protocol over ordinary runs: ``papers/<paper>.toml`` holds the paper's claims
with the numbers it reports and the protocol maxbench runs (models, corpora, folds, systems,
decoding, metrics); ``folds.py`` makes the cross-validation suites, ``protocol.py`` turns the
protocol into runs of ``benchmark/run/runner.py``, and ``report.py`` writes
``results/reproductions/<paper>/report.{md,html,csv,json}`` from the runs' evidence
(``evidence.py``), one module per claim kind (``claims/``), the verdict rules (``verdicts.py``,
stated once in ``RULES``) applied by ``judge.py``, and ``render.py`` and ``exports.py``.
"""
