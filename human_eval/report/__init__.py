"""Significance reports: ``maxbench report`` (``cli``), the shared formatting and writing of a report
(``render``), one module per judgment kind (``ratings`` with ``paper_tables`` and ``figures``,
``pairwise``, ``best_worst``), and the agreement of automatic metrics with human ratings (``agreement``)."""
