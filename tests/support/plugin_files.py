"""Source texts of plugin files for tests that write them and --include them."""

# A metric plugin: Uniq under another name, registered with maxbench.register_metric.
UNIQ2 = """
from dataclasses import replace

import maxbench
from maxbench.benchmark.metrics.base import NONNEGATIVE
from maxbench.benchmark.metrics.diversity import Uniq


class Uniq2(Uniq):
    name = "uniq2"

    @property
    def score_ranges(self):
        return {"uniq2": NONNEGATIVE}

    def result(self, scores, notes=""):
        return super().result([replace(s, name="uniq2") for s in scores], notes)


maxbench.register_metric(Uniq2)
"""
