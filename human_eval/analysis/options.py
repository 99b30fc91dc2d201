"""What the user asks of an analysis (``maxbench report``'s options), validated once.

The options travel with the result (``Analysis.options`` in ``human_eval/analysis/results.py``), so a
report states every choice it was computed with.
"""

from __future__ import annotations

from dataclasses import dataclass

from maxbench.errors import MaxbenchError

# The level of every interval an analysis reports; fixed, so that reports compare.
CONFIDENCE = 0.95
ALTERNATIVES = ("two-sided", "greater", "less")
DESIGNS = ("auto", "paired", "unpaired")
DEFAULT_EXCLUDE_FLAGS = ("attention_failed",)


@dataclass(frozen=True)
class ReportOptions:
    """The choices of one analysis; invalid ones raise MaxbenchError naming the flag to fix.

    Attributes
    ----------
    reference : str or None
        The system every other one is tested against; None: the study's recorded baseline, else
        the first system by name (the report says which).
    study : str or None
        The study to keep when the input holds several.
    scale : (float, float) or None
        Scale of every aspect, overriding the per-row scale columns.
    min_seconds : float or None
        Exclude ratings of texts answered faster than this; None: rule off.
    exclude_flags : tuple of str
        Exclude rows carrying any of these flags.
    alternative : str
        H1 of every test: ``two-sided``, ``greater`` (the reference is rated higher) or ``less``.
    alpha : float
        Significance level of the stars, on Holm-adjusted p-values.
    design : str
        ``auto`` (paired when every item was rated for both systems), ``paired`` or ``unpaired``.
    n_boot : int
        Bootstrap resamples of every interval.
    seed : int
        Seed of the bootstrap streams.
    z_scores : bool
        Test per-annotator z-scores instead of raw values (direct assessment, as WMT does);
        the descriptive table and the agreement stay on the raw scale.
    exclude_gold_below : float or None
        Exclude every row of an annotator whose gold-item accuracy (``maxbench.human_eval.studies.gold``) is below
        this; None: rule off. Needs a study in the database (a ratings file has no gold items).
    """

    reference: str | None = None
    study: str | None = None
    scale: tuple[float, float] | None = None
    min_seconds: float | None = None
    exclude_flags: tuple[str, ...] = DEFAULT_EXCLUDE_FLAGS
    alternative: str = "two-sided"
    alpha: float = 0.05
    design: str = "auto"
    n_boot: int = 2000
    seed: int = 0
    z_scores: bool = False
    exclude_gold_below: float | None = None

    def __post_init__(self):
        if self.alternative not in ALTERNATIVES:
            raise MaxbenchError(f"--alternative must be one of {', '.join(ALTERNATIVES)}")
        if self.design not in DESIGNS:
            raise MaxbenchError(f"--design must be one of {', '.join(DESIGNS)}")
        if not 0 < self.alpha < 1:
            raise MaxbenchError(f"--alpha {self.alpha} is not a significance level in (0, 1); POSG used 0.1")
        if self.n_boot < 100:
            raise MaxbenchError(f"--n-boot {self.n_boot} is too few for a {CONFIDENCE:.0%} interval; use >= 100")
        if self.exclude_gold_below is not None and not 0 < self.exclude_gold_below <= 1:
            raise MaxbenchError(
                f"--exclude-gold-below {self.exclude_gold_below:g} is not an accuracy in (0, 1]; e.g. 0.8"
            )
        if self.min_seconds is not None and self.min_seconds < 0:
            raise MaxbenchError("--min-seconds must be >= 0")
        if self.scale is not None and not self.scale[0] < self.scale[1]:
            raise MaxbenchError(f"--scale {self.scale[0]:g}:{self.scale[1]:g} is empty; give MIN:MAX with MIN < MAX")


def parse_scale(text: str) -> tuple[float, float]:
    """``"1:5"`` -> (1.0, 5.0)."""
    parts = text.split(":")
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise MaxbenchError(f"--scale {text!r} is not MIN:MAX (for example 1:5 or 0:2)") from None
    if not low < high:
        raise MaxbenchError(f"--scale {text!r} is empty; give MIN:MAX with MIN < MAX")
    return (low, high)
