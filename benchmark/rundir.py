"""The names ``benchmark/reproduce/report.py`` still imports from the run directory's format, which
``maxbench.rundir`` owns now; this module goes once that report reads runs through it."""

from maxbench.rundir import GENERATIONS, TIMINGS, read_rows

__all__ = ["GENERATIONS", "TIMINGS", "read_rows"]
