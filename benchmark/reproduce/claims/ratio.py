"""``kind = "ratio"``: a ratio of the method's cost to the baseline's, measured once per run (fold):
generation CPU seconds per token (``measure = "time-per-token"``, from timings.jsonl and the
tokens generated) or an adapter's training seconds (``measure = "training"``). Over folds, the
geometric mean with a t interval on the log scale (``verdicts.ratio_interval``); one run whose
training steps are recorded: the ratio of mean step times (``verdicts.step_ratio_interval``). The
verdict is on ratio - 1 against the paper's ratio - 1 (``paper_effect``); a quantity that depends on
hardware is shown and judged not comparable (``hardware = true``)."""

from __future__ import annotations

from maxbench.benchmark.reproduce import fmt
from maxbench.benchmark.reproduce.cells import CellVerdict, Row
from maxbench.benchmark.reproduce.claims.difference import Difference
from maxbench.benchmark.reproduce.evidence import Evidence, time_per_token, training_seconds, training_steps
from maxbench.benchmark.reproduce.papers import Claim
from maxbench.benchmark.reproduce.protocol import RunSpec
from maxbench.benchmark.reproduce.verdicts import Estimate, ratio_interval, step_ratio_interval


class Ratio(Difference):
    name = "ratio"
    reads_scores = False

    def paper_relative(self, claim: Claim, i: int) -> float | None:
        return None if claim.paper_effect is None else claim.paper_effect - 1

    def relative(self, baseline: float, method: float) -> float:
        return method / baseline - 1

    def measure(self, row: Row, claim: Claim, docs: list[tuple[RunSpec, dict]], evidence: Evidence, seeds=()) -> None:
        """The ratio of the two systems' times in each run (one seed: a time is not averaged over seeds)."""
        training = claim.measure == "training"
        ratios, steps = [], []
        for r, _ in docs:
            per = training_seconds(r) if training else time_per_token(r.run_dir)
            a, b = per.get(r.roles[row.method]), per.get(r.roles[row.baseline])
            ratios.append(a / b if a and b else None)
            if training:
                got = training_steps(r)
                steps.append((got.get(r.roles[row.method]), got.get(r.roles[row.baseline])))
        if training and docs and None in ratios:
            row.note = "an adapter's training time is not in the run's timings.jsonl"
        if len(docs) == 1 and steps and None not in steps[0]:  # one run: the steps are the replicates
            ab = step_ratio_interval(*steps[0])
        else:
            ab = ratio_interval(ratios)
            if training and len(docs) == 1 and ab.estimate is not None:
                row.note = "an adapter's step times are not recorded (trained before they were): no interval"
        row.diff = ab
        row.rel = Estimate(
            None if ab.estimate is None else ab.estimate - 1,
            None if ab.low is None else ab.low - 1,
            None if ab.high is None else ab.high - 1,
            None,
            ab.df,
            ab.n_folds,
            ab.method,
        )

    def paper_text(self, c: CellVerdict) -> str:
        if len(c.details) > 1 and any(d.paper is not None for d in c.details):  # one effect per competitor
            return "; ".join(
                f"vs {d.baseline}: {'n/a' if d.paper is None else f'x{d.paper + 1:.3g}'}" for d in c.details
            )
        return "n/a" if c.paper_relative is None else f"x{c.paper_relative + 1:.4g}"

    def estimate_text(self, c: CellVerdict) -> str:  # a ratio r, judged as r - 1: shown as r
        if c.est.estimate is not None:
            return fmt.times(c.est, shift=1)
        if len(c.details) > 1:
            return "; ".join(f"vs {d.baseline}: {fmt.times(d.est, shift=1)}" for d in c.details)
        return fmt.times(c.details[0].est, shift=1) if c.details else "n/a"

    def row_paper_text(self, r: Row, claim: Claim) -> str:
        return f"x{claim.paper_effect:g}" if claim.paper_effect else "(figure)"

    def row_difference_text(self, r: Row) -> str:
        return "-"

    def row_relative_text(self, r: Row) -> str:
        return fmt.times(r.diff) if r.diff.estimate is not None else super().row_relative_text(r)
