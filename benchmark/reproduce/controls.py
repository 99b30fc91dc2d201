"""Seed-paired controls of a trained head (a paper's ``[[controls]]`` entries, ``papers.ControlSpec``):
KerBS against its fine-tuned softmax, fitted with the same seeds, read from each head's fit meta
(``maxbench fit`` writes it; copied under the reproduction's folder).

Per seed: the held-out perplexity of the base softmax, the method's head and the control's head on
the same test positions (the meta's ``test_ppl_<layer>``, ``test_positions``), and their relative
differences: method vs control in % of the control, method vs baseline and control vs baseline in %
of the baseline. Across seeds: the mean of the paired (same-seed) relative difference and its t
interval with n - 1 degrees of freedom (``paired_t``), so the seeds' variation is the interval's;
the verdict is the report's rules (``verdicts.decide``) on that interval for the method against the
control, with the paper's effect and direction of the claim the control names. Every head's
validation history is shown; a head whose best validation epoch is 0 (the untrained head) is
flagged, and a control verdict resting on an untrained method head never counts as reproduced.

A seed whose two files are not both there makes the control **partial** (rendered, and the report
says which seeds are missing); fewer than ``FEW_SEEDS`` seeds are labelled "few seeds". A folder
that does not exist, no seed with both files, an unreadable file, a file without the perplexities,
or two files of one seed on different test positions is one line, exit status 2 (``check``),
before anything is written.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from scipy.stats import t

from maxbench.benchmark.reproduce.papers import ControlSpec, Paper
from maxbench.benchmark.reproduce.verdicts import (
    INCONCLUSIVE,
    LEVEL,
    REPRODUCED,
    SMALLER,
    Estimate,
    best_epoch,
    decide,
)
from maxbench.errors import MaxbenchError

#: a control resting on fewer seeds than this is labelled "few seeds (n=...)"
FEW_SEEDS = 10
FLAG_PARTIAL = "partial"
FLAG_FEW_SEEDS = "few seeds"
FLAG_UNTRAINED = "untrained head"


def ppl_key(layer: str) -> str:
    """The fit meta's key of a layer's held-out perplexity: test_ppl_kerbs, test_ppl_ft_softmax."""
    return "test_ppl_" + layer.replace("-", "_")


@dataclass
class Head:
    seed: int
    layer: str
    file: str
    ppl: float
    baseline_ppl: float
    positions: int | None
    history: list[dict]
    best_epoch: int | None
    untrained: bool
    train_seconds: float | None
    fit_seconds: float | None  # prepare + train + evaluate

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SeedRow:
    seed: int
    baseline: float  # the base softmax's held-out perplexity
    method: float
    control: float
    positions: int | None
    method_vs_control: float  # (method - control) / control
    method_vs_baseline: float  # (method - baseline) / baseline
    control_vs_baseline: float  # (control - baseline) / baseline


@dataclass
class ControlResult:
    spec: ControlSpec
    rows: list[SeedRow]
    heads: list[Head]
    missing: list[tuple[int, list[str]]]  # (seed, its files that are not there)
    vs_control: Estimate
    vs_baseline: Estimate
    control_vs_baseline: Estimate
    direction: str
    paper_effect: float | None
    verdict: str = ""
    why: str = ""
    flags: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.rows)

    @property
    def partial(self) -> bool:
        return bool(self.missing)

    def to_dict(self) -> dict:
        def est(e: Estimate) -> dict:
            return {
                "mean": e.estimate,
                "low": e.low,
                "high": e.high,
                "se": e.se,
                "df": e.df,
                "n": e.n_folds,
                "p_value": e.p_value,
            }

        return {
            "id": self.spec.id,
            "title": self.spec.title,
            "statement": self.spec.statement,
            "claim": self.spec.claim,
            "model": self.spec.model,
            "corpus": self.spec.corpus,
            "method": self.spec.method,
            "control": self.spec.control,
            "baseline": self.spec.baseline,
            "seeds_planned": list(self.spec.seeds),
            "seeds": [r.seed for r in self.rows],
            "missing": [{"seed": s, "files": f} for s, f in self.missing],
            "per_seed": [dict(r.__dict__) for r in self.rows],
            "method_vs_control": est(self.vs_control),
            "method_vs_baseline": est(self.vs_baseline),
            "control_vs_baseline": est(self.control_vs_baseline),
            "direction": self.direction,
            "paper_effect": self.paper_effect,
            "verdict": self.verdict,
            "why": self.why,
            "flags": self.flags,
            "heads": [h.to_dict() for h in self.heads],
        }


def paired_t(diffs: list[float], level: float = LEVEL) -> Estimate:
    """Paired (same-seed) differences -> their mean and the t interval with n - 1 degrees of
    freedom: mean +- t_{n-1} sd / sqrt(n). One difference has no interval."""
    n = len(diffs)
    if n == 0:
        return Estimate(None, None, None, None, None, 0, "no seed")
    m = sum(diffs) / n
    if n == 1:
        return Estimate(m, None, None, None, None, 1, "one seed: no interval over seeds")
    sd = math.sqrt(sum((d - m) ** 2 for d in diffs) / (n - 1))
    se = sd / math.sqrt(n)
    h = float(t.ppf(0.5 + level / 2, n - 1)) * se
    return Estimate(m, m - h, m + h, se, n - 1, n, f"mean over {n} seeds, t interval with {n - 1} df")


def _read_head(spec: ControlSpec, path: Path, layer: str, seed: int) -> Head:

    what = f"control '{spec.id}': {path}"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MaxbenchError(f"{what} is unreadable: {exc}") from None
    key = ppl_key(layer)
    ppl, base = meta.get(key), meta.get(ppl_key(spec.baseline))
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (ppl, base)):
        raise MaxbenchError(f"{what} has no held-out perplexities '{key}' and '{ppl_key(spec.baseline)}'")
    recorded = (meta.get("config") or {}).get("seed")
    if recorded is not None and recorded != seed:
        raise MaxbenchError(f"{what} is the fit of seed {recorded}, not of seed {seed}")
    if meta.get("layer") not in (None, layer):
        raise MaxbenchError(f"{what} is a '{meta.get('layer')}' head, not '{layer}'")
    training = meta.get("training") or {}
    history = [
        {"epoch": int(h.get("epoch", i)), "valid_ppl": float(h["valid_ppl"])}
        for i, h in enumerate(training.get("history") or [])
        if isinstance(h, dict) and isinstance(h.get("valid_ppl"), (int, float))
    ]
    epoch = best_epoch(history)
    if epoch is None and isinstance(meta.get("best_epoch"), int):
        epoch = meta["best_epoch"]
    untrained = bool(meta.get("untrained_best")) or epoch == 0
    secs = meta.get("seconds") or {}
    fit = sum(v for k, v in secs.items() if k in ("prepare", "train", "evaluate") and isinstance(v, (int, float)))
    return Head(
        seed=seed,
        layer=layer,
        file=path.name,
        ppl=float(ppl),
        baseline_ppl=float(base),
        positions=meta.get("test_positions"),
        history=history,
        best_epoch=0 if untrained and epoch is None else epoch,
        untrained=untrained,
        train_seconds=training.get("train_seconds", secs.get("train")),
        fit_seconds=round(fit, 1) if secs else None,
    )


def load(paper: Paper, spec: ControlSpec, root: Path) -> ControlResult:
    """Read one control's files under ``root`` (the reproduction's folder) and compute it (the
    verdict included). Bad input raises MaxbenchError (one line)."""
    folder = root / spec.folder
    if not folder.is_dir():
        raise MaxbenchError(
            f"paper file {paper.path}, control '{spec.id}': its folder {folder} does not exist; "
            "fit the heads and copy their meta there, or remove the control"
        )
    rows, heads, missing = [], [], []
    for seed in spec.seeds:
        paths = {layer: spec.path(root, layer, seed) for layer in (spec.method, spec.control)}
        absent = [p.name for p in paths.values() if not p.is_file()]
        got = {layer: _read_head(spec, p, layer, seed) for layer, p in paths.items() if p.is_file()}
        heads += got.values()
        if absent:
            missing.append((seed, absent))
            continue
        m, c = got[spec.method], got[spec.control]
        if m.positions != c.positions or not math.isclose(m.baseline_ppl, c.baseline_ppl, rel_tol=1e-9):
            raise MaxbenchError(
                f"control '{spec.id}', seed {seed}: {m.file} and {c.file} are not on the same test positions "
                f"({m.positions} vs {c.positions} positions, base softmax {m.baseline_ppl:.6g} vs {c.baseline_ppl:.6g})"
            )
        b = m.baseline_ppl
        rows.append(
            SeedRow(
                seed=seed,
                baseline=b,
                method=m.ppl,
                control=c.ppl,
                positions=m.positions,
                method_vs_control=(m.ppl - c.ppl) / c.ppl,
                method_vs_baseline=(m.ppl - b) / b,
                control_vs_baseline=(c.ppl - b) / b,
            )
        )
    if not rows:
        raise MaxbenchError(
            f"paper file {paper.path}, control '{spec.id}' names a missing run: no seed of {list(spec.seeds)} has both "
            f"files under {folder} (missing: {', '.join(f for _, fs in missing for f in fs)})"
        )
    claim = next(c for c in paper.claims if c.id == spec.claim)
    res = ControlResult(
        spec=spec,
        rows=rows,
        heads=heads,
        missing=missing,
        vs_control=paired_t([r.method_vs_control for r in rows]),
        vs_baseline=paired_t([r.method_vs_baseline for r in rows]),
        control_vs_baseline=paired_t([r.control_vs_baseline for r in rows]),
        direction=claim.direction,
        paper_effect=claim.paper_relative(0),
    )
    judge(res)
    return res


def judge(res: ControlResult) -> None:
    """The control's verdict and flags: the report's rules on the t interval over seeds of the
    method against the control; fewer than two seeds is inconclusive (no interval); an untrained
    method head never counts as reproduced."""
    e = res.vs_control
    if res.n < 2:
        res.verdict, res.why = INCONCLUSIVE, f"{res.n} seed: no interval over seeds"
    else:
        v = decide(res.direction, e.low, e.high, res.paper_effect)
        res.verdict, res.why = v.verdict, v.why
    if res.partial:
        res.flags.append(
            f"{FLAG_PARTIAL}: {res.n} of {len(res.spec.seeds)} seeds; missing "
            + "; ".join(f"seed {s} ({', '.join(fs)})" for s, fs in res.missing)
        )
    if res.n < FEW_SEEDS:
        res.flags.append(f"{FLAG_FEW_SEEDS} (n={res.n})")
    for h in res.heads:
        if h.untrained:
            res.flags.append(
                f"{FLAG_UNTRAINED}: {h.layer} seed {h.seed}'s best validation epoch is 0 (the head as initialised, "
                "which is not the base softmax)"
            )
    seeds = {r.seed for r in res.rows}
    untrained = any(h.untrained and h.layer == res.spec.method and h.seed in seeds for h in res.heads)
    if untrained and res.verdict in (REPRODUCED, SMALLER):
        res.why = f"never counted as reproduced: a {res.spec.method} head's best epoch is 0 (on its interval alone: {res.verdict}, {res.why})"
        res.verdict = INCONCLUSIVE


def check(paper: Paper, root: Path) -> list[ControlResult]:
    """Every control of the paper, read (bad input: one line, exit 2, before anything is written)."""
    return [load(paper, spec, root) for spec in paper.seed_controls]


# ---------------------------------------------------------------- rendering


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:+.3g}%"


def _interval(e: Estimate) -> str:
    if e.estimate is None:
        return "n/a"
    return _pct(e.estimate) + ("" if e.low is None else f" [{_pct(e.low)}, {_pct(e.high)}]")


def summary(res: ControlResult) -> str:
    """One line for the report's head: the control's verdict and its estimate."""
    s = res.spec
    flags = f" [{'; '.join(res.flags)}]" if res.flags else ""
    return (
        f"{s.method} vs {s.control} ({s.model}, {s.corpus}, {res.n} seed{'s' if res.n != 1 else ''}): "
        f"{_interval(res.vs_control)} of {s.control}'s held-out perplexity: {res.verdict} ({res.why}){flags}"
    )


def sections(res: ControlResult):
    """The control's section of the report: per seed, across seeds with the verdict, every head's
    validation history."""
    from maxbench.document import Cell, Para, Section, Table, num

    s = res.spec
    sec = Section(s.title, level=2)
    sec.paragraphs += [
        Para("Claim: {}.", (s.statement,)),
        Para(
            "Heads fitted on {} with base model {} (maxbench fit --layer {} / {} --corpus {} --seed S), each head's "
            "fit meta under {}; seeds planned: {}, present: {}. Held-out perplexity of the base {}, {} and {} on the "
            "same test positions of the corpus's test split (the fit's own evaluation, not the reproduction's "
            "suite).",
            (
                s.corpus,
                s.model,
                s.method,
                s.control,
                s.corpus,
                f"{s.folder}/",
                ", ".join(map(str, s.seeds)),
                ", ".join(str(r.seed) for r in res.rows) or "none",
                s.baseline,
                s.method,
                s.control,
            ),
        ),
    ]
    if res.partial:
        sec.paragraphs.append(
            Para(
                "Partial: {} of {} seeds; missing {}. The numbers below rest on the seeds present.",
                (
                    str(res.n),
                    str(len(s.seeds)),
                    "; ".join(f"seed {x} ({', '.join(fs)})" for x, fs in res.missing),
                ),
            )
        )
    sec.tables.append(
        Table(
            (
                "seed",
                "test positions",
                f"{s.baseline} ppl",
                f"{s.method} ppl",
                f"{s.control} ppl",
                f"{s.method} vs {s.baseline}",
                f"{s.method} vs {s.control}",
                f"{s.control} vs {s.baseline}",
            ),
            tuple(
                (
                    num(str(r.seed)),
                    num("n/a" if r.positions is None else str(r.positions)),
                    num(f"{r.baseline:.4f}"),
                    num(f"{r.method:.4f}"),
                    num(f"{r.control:.4f}"),
                    num(_pct(r.method_vs_baseline)),
                    num(_pct(r.method_vs_control)),
                    num(_pct(r.control_vs_baseline)),
                )
                for r in res.rows
            ),
            caption=Para("Per seed: held-out perplexity; relative differences in % of the second system's perplexity."),
            align="rrrrrrrr",
        )
    )
    few = f" ({FLAG_FEW_SEEDS}, n={res.n})" if res.n < FEW_SEEDS else ""
    across = (
        (f"{s.method} vs {s.control} (the verdict's)", res.vs_control),
        (f"{s.method} vs {s.baseline}", res.vs_baseline),
        (f"{s.control} vs {s.baseline}", res.control_vs_baseline),
    )
    sec.tables.append(
        Table(
            ("paired relative difference", "seeds", "mean [95% t interval, n - 1 df]", "se", "p"),
            tuple(
                (
                    Cell(name),
                    num(f"{e.n_folds}{few}"),
                    num(_interval(e)),
                    num("n/a" if e.se is None else f"{100 * e.se:.3g}%"),
                    num("n/a" if e.p_value is None else f"{e.p_value:.2g}"),
                )
                for name, e in across
            ),
            caption=Para(
                "Across seeds: the mean of the same-seed relative differences, with the t interval on n - 1 degrees "
                "of freedom (mean +- t sd / sqrt(n)), so the seeds' variation is the interval's."
            ),
            align="lrrrr",
        )
    )
    sec.paragraphs.append(
        Para(
            "Verdict on the claim ({} against {}, direction {}; the paper's effect is the claim {}'s {} vs {} "
            "effect, {}): {} ({}).{}",
            (
                s.method,
                s.control,
                res.direction,
                s.claim,
                s.method,
                s.baseline,
                _pct(res.paper_effect),
                res.verdict,
                res.why,
                (" Labels: " + "; ".join(res.flags) + ".") if res.flags else "",
            ),
        )
    )
    sec.bullets += [
        Para(
            "The interval holds the seeds' variation only: each fit's meta records the held-out perplexity over its "
            "test positions, not the per-position losses, so the sampling of test positions (the same for every "
            "head) is not in it. {}",
            (
                f"With {res.n} seeds the t quantile is large (t_{res.n - 1} = {float(t.ppf(0.5 + LEVEL / 2, res.n - 1)):.3g}) "
                "and the interval rests on the seeds' differences being near normal."
                if res.n > 1
                else "With one seed there is no interval.",
            ),
        ),
        Para(
            "This verdict is the control of the Verdicts table's cell {} {} {} {}; it is judged on its own interval, "
            "outside the counts and Holm's step over the runs' cells.",
            (s.claim, s.model, s.corpus, s.method),
        ),
    ]
    starts = _untrained_gaps(res)
    if starts:
        sec.bullets.append(
            Para(
                "The untrained heads (epoch 0) differ on the validation part: {} (in % of {}'s epoch 0). 'Best epoch 0' "
                "means the head as initialised.",
                (
                    "; ".join(
                        f"seed {x}: {s.method} {a:.4f} vs {s.control} {b:.4f} ({_pct(a / b - 1)})" for x, a, b in starts
                    ),
                    s.control,
                ),
            )
        )
    hist = Table(
        ("head", "seed", "best epoch", "validation perplexity by epoch (0: untrained)", "train s", "fit s", "flag"),
        tuple(
            (
                Cell(h.layer, code=True),
                num(str(h.seed)),
                num("n/a" if h.best_epoch is None else str(h.best_epoch)),
                num(", ".join(f"{x['epoch']}: {x['valid_ppl']:.4f}" for x in h.history) or "not recorded"),
                num("n/a" if h.train_seconds is None else f"{h.train_seconds:.0f}"),
                num("n/a" if h.fit_seconds is None else f"{h.fit_seconds:.0f}"),
                Cell(
                    "untrained head: best epoch 0, never counted as reproduced"
                    if h.untrained
                    else ("" if {r.seed for r in res.rows} & {h.seed} else "its seed's pair is incomplete: not used")
                ),
            )
            for h in sorted(res.heads, key=lambda h: (h.seed, h.layer != s.method))
        ),
        caption=Para(
            "Every head's validation history (the fit's validation part), its best epoch (the one it keeps) and its "
            "fit times (train; prepare + train + evaluate) in seconds on this machine's CPU."
        ),
        align="lrrlrrl",
    )
    sec.tables.append(hist)
    return [sec]


def _untrained_gaps(res: ControlResult) -> list[tuple[int, float, float]]:
    """Per complete seed: the method's and the control's epoch-0 validation perplexity, where they differ."""
    out = []
    for r in res.rows:
        h = {x.layer: x for x in res.heads if x.seed == r.seed}
        a, b = (
            next((e["valid_ppl"] for e in h[layer].history if e["epoch"] == 0), None)
            for layer in (res.spec.method, res.spec.control)
        )
        if a is not None and b is not None and not math.isclose(a, b, rel_tol=1e-6):
            out.append((r.seed, a, b))
    return out
