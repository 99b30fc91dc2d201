"""The flipped-attribute check of a conditional reproduction (issue 40): the protocol's ``flipped``
roles generate once more on each conditional suite with its categorical attribute set to the
opposite value (``suites.flipped_suite``), and attr-acc's classifier labels both texts of each
prompt (``metrics.attributes.flip_check``): how often the label changes, how often the flipped text
carries the flipped value, and how often both texts carry what they asked for.

Each flipped run is an ordinary resumable run under ``<out>/runs/<run>-flipped`` (the same
systems, seed and batches as the run it mirrors), generated after the protocol's own runs and never
scored (its suite has no references); the report's section "Flipped attributes" pairs it with the
original run by prompt id and sample. A run whose generations are not all there yet is shown as
partial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from maxbench.benchmark.reproduce.papers import Paper
from maxbench.benchmark.reproduce.protocol import RunSpec
from maxbench.errors import MaxbenchError


@dataclass
class FlipSpec:
    """A flipped run and the run it mirrors."""

    original: RunSpec
    flipped: RunSpec  # its plan on the flipped suite, its roles those of the protocol's ``flipped``

    @property
    def run_dir(self) -> Path:
        return self.flipped.run_dir

    @property
    def plan(self):
        return self.flipped.plan

    @property
    def roles(self) -> dict:
        return self.flipped.roles


def plan_flipped(paper: Paper, runs: list[RunSpec], out: Path) -> list[FlipSpec]:
    """One flipped run per protocol run on a conditional suite that has every ``flipped`` role (none
    when the protocol names no ``flipped`` roles). An unknown role is one line."""
    from dataclasses import replace

    from maxbench.benchmark.data.suites import flipped_suite, load_suite, save_suite
    from maxbench.registry import unknown_name

    wanted = list(paper.protocol.get("flipped", []))
    known = paper.roles()
    for role in wanted:
        if role not in known:
            raise MaxbenchError(f"paper file {paper.path}: flipped: {unknown_name('system role', role, known)}")
    specs = []
    for run in runs:
        suite = run.plan.suite
        roles = {r: run.roles[r] for r in wanted if r in run.roles}
        if not roles or not getattr(suite, "conditional", False):
            continue
        flipped = flipped_suite(suite)
        manifest = save_suite(flipped, out / "suites")
        systems = [s for s in run.plan.systems if s.name in roles.values()]
        plan = replace(
            run.plan,
            run_dir=run.plan.run_dir.with_name(run.plan.run_dir.name + "-flipped"),
            suite=load_suite(str(manifest)),
            systems=systems,
            reference_ppl=False,
        )
        specs.append(FlipSpec(run, RunSpec(run.model, run.corpus, run.fold, plan, roles, "")))
    return specs


def execute_flipped(specs: list[FlipSpec], device=None, threads=None, shard=None, progress: bool = True) -> None:
    from maxbench.benchmark.run.runner import generate_run

    for spec in specs:
        generate_run(spec.plan, device=device, threads=threads, shard=shard, progress=progress)


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float | None, float | None]:
    """The Wilson score interval of a proportion k / n (95% by default)."""
    if n <= 0:
        return None, None
    p = k / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def flip_rows(specs: list[FlipSpec]) -> list[dict]:
    """Per flipped run and role: the pairs, the three counts with rates and Wilson intervals, or
    why there are none yet (``status``)."""
    from maxbench.benchmark.metrics.attributes import flip_check
    from maxbench.benchmark.metrics.scoring import load_run

    out = []
    for spec in specs:
        base = {"model": spec.original.model, "corpus": spec.original.corpus, "run": spec.run_dir.name}
        have = (spec.run_dir / "generations.jsonl").exists() and (spec.original.run_dir / "generations.jsonl").exists()
        batches_a = load_run(spec.original.run_dir)[1] if have else {}
        batches_b = load_run(spec.run_dir)[1] if have else {}
        n_items = len(spec.plan.suite.items) * spec.plan.samples
        for role, system in spec.roles.items():
            row = base | {"role": role, "system": system}
            a, b = batches_a.get(system), batches_b.get(system)
            if a is None or b is None:
                out.append(row | {"status": "not generated yet"})
                continue
            try:
                res = flip_check(a, b)
            except MaxbenchError as exc:  # e.g. the classifier cannot be trained here: the row says why
                out.append(row | {"status": f"not checked: {exc}"})
                continue
            row |= {"status": "partial" if min(len(a.texts), len(b.texts)) < n_items else "complete"}
            row |= {"n": res.n, "attribute": res.attribute}
            for key in ("changed", "to_target", "flipped"):
                k = getattr(res, key)
                lo, hi = wilson(k, res.n)
                row[key] = {"count": k, "rate": k / res.n if res.n else None, "ci": [lo, hi]}
            out.append(row)
    return out


def flip_section(specs: list[FlipSpec], rows: list[dict]):
    """The report's section "Flipped attributes", or None without flipped runs."""
    from maxbench.document import Cell, Para, Section, Table, num

    if not specs:
        return None
    sec = Section("Flipped attributes")
    sec.paragraphs.append(
        Para(
            "Each system also generated from every prompt with its categorical attribute set to the opposite value "
            "(the same seed and batches; runs ending in -flipped). attr-acc's classifier labels both texts of a prompt: "
            "'changed' is the share of pairs whose labels differ, 'to target' the share whose flipped text carries "
            "the flipped value, 'both' the share where each text carries the value it asked for. 95% Wilson intervals "
            "over prompts. A system that ignores the attribute changes its label only by chance."
        )
    )

    def rate(d):
        if not isinstance(d, dict) or d.get("rate") is None:
            return "n/a"
        lo, hi = d["ci"]
        return f"{100 * d['rate']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"

    body = tuple(
        (
            Cell(r["model"], code=True),
            Cell(r["corpus"]),
            Cell(r["role"]),
            num(str(r.get("n", "-"))),
            num(rate(r.get("changed"))),
            num(rate(r.get("to_target"))),
            num(rate(r.get("flipped"))),
            Cell(r["status"]),
        )
        for r in rows
    )
    sec.tables.append(
        Table(
            ("model", "corpus", "system", "pairs", "changed", "to target", "both", "status"),
            body,
            align="lllrrrrl",
        )
    )
    return sec
