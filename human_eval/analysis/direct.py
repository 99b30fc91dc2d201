"""Direct assessment (a 0-100 slider, as WMT's Appraise uses it): each annotator's scores are
standardised to z-scores with that annotator's own mean and standard deviation (Graham et al.
2013/2017), so that a harsh and a lenient annotator count alike; the report then runs its
usual tests on the z-scores.

``z_scores(rows)`` returns the rows with ``value`` replaced by the z-score (sample standard
deviation, ddof=1) and the annotators whose z-scores are undefined (a single rating, or every
rating the same), whose rows are left out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from maxbench.human_eval.analysis.ratings import Rating

SLIDER_MIN, SLIDER_MAX = 0, 100


def z_scores(rows: Sequence[Rating]) -> tuple[list[Rating], list[str]]:
    """Per-annotator (and per-criterion) z-scores; (standardised rows, annotators left out)."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for k, r in enumerate(rows):
        groups[(r.annotator, r.criterion)].append(k)
    out: list[Rating | None] = [None] * len(rows)
    undefined: set[str] = set()
    for (annotator, _criterion), ks in groups.items():
        values = np.array([rows[k].value for k in ks], dtype=float)
        sd = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
        if sd == 0:
            undefined.add(annotator)
            continue
        mean = float(values.mean())
        for k, v in zip(ks, values):
            out[k] = replace(rows[k], value=(v - mean) / sd)
    return [r for r in out if r is not None], sorted(undefined)
