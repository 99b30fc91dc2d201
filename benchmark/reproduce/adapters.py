"""The trained adapters behind a reproduction's runs (FCTG and its variants, and the LoRA and
prefix-tuning baselines): what each one's training meta records, the rule that an ablation of a
component that did not train says nothing, and the report's "Trained adapters" section.

An adapter's meta (written where it is trained, ``systems/adapters``) is read from a committed copy
under the reproduction's ``heads/<run>/`` (any ``.json`` whose sha256 is the one the run's manifest
records for that model; ``protocol.record_adapters`` writes them), else from this machine's adapter
cache, else from the committed report.json's record of the same adapter. It records the training steps kept
(``best_step``) and the held-out loss at each checkpoint, the CPU seconds per step and, for FCTG, the
gate's chosen start and learning rate, the trained gate's values over the held-out texts' tokens
(quantiles) and, per component (MVA's gate, MAM's and ALM's heads), how far its trained values moved
from their start (``moved``) and whether that is under 0.01 (``inert``).

A claim may name the ``component`` it ablates (``component = "mva"``). A cell of such a claim where
the method's adapter records that component inert is "not comparable (component inert)" and kept
out of the counts and Holm's family: removing a part that never trained measures nothing about it;
so is one whose method's adapter has no meta to tell ("component unchecked"). Only the method's adapter is read: a baseline may lack the part or hold it shut by design (FCTG at
mu = 0.5, whose threshold shuts its gate, so the gate cannot move), which is what the claim compares.
"""

from __future__ import annotations

from maxbench import rundir
from maxbench.benchmark.reproduce.cells import CellVerdict
from maxbench.benchmark.reproduce.evidence import HEADS
from maxbench.benchmark.reproduce.papers import Paper
from maxbench.benchmark.reproduce.protocol import RunSpec, read_json_object
from maxbench.benchmark.reproduce.verdicts import NOT_COMPARABLE, Verdict
from maxbench.document import Cell, Para, Section, Table, num
from maxbench.errors import MaxbenchError

#: the label of a cell whose ablated component did not train
FLAG_INERT = "component inert"
#: the label of a cell whose method's adapter has no training meta to tell whether it trained
FLAG_UNCHECKED = "component unchecked"
#: the gate quantiles the report shows (keys of the meta's ``gate.quantiles``)
QUANTILES = ("q10", "q50", "q90", "q99")


def _meta(run: RunSpec, adapter: dict, model: str = "") -> tuple[dict | None, str]:
    """The adapter's training meta and where it was found (its sha256 must be the manifest's): the
    committed copy named for the model first, then any committed copy of the same sha256 and cache key
    (two adapters of other options can train the same tensors, as FCTG's mu variants whose gates stay
    shut do: their metas differ in their options), then the cache."""
    from maxbench.systems.adapters.base import adapter_directory

    sha, key = adapter.get("sha256"), adapter.get("key")
    committed = run.run_dir.parent.parent / HEADS / run.run_dir.name
    if committed.is_dir():
        own = committed / f"{model}.json"
        for path in [own, *sorted(p for p in committed.glob("*.json") if p != own)]:
            meta = read_json_object(path)
            if meta is not None and meta.get("adapter") and meta.get("sha256") == sha:
                if path == own or not key or meta.get("key") in (None, key):
                    return meta, f"{HEADS}/{committed.name}/{path.name}"
    if adapter.get("name") and adapter.get("key"):
        meta = read_json_object(adapter_directory(adapter["name"], adapter["key"]) / "meta.json")
        if meta is not None and meta.get("sha256") == sha:
            return meta, "the cached adapter's meta.json"
    return None, ""


def record(meta: dict, source: str) -> dict:
    """What the report shows of one adapter's training (see the module docstring)."""
    gate = meta.get("gate") or {}
    return {
        "adapter": meta.get("adapter"),
        "sha256": meta.get("sha256"),
        "seed": (meta.get("options") or {}).get("seed"),
        "steps": meta.get("steps"),
        "best_step": meta.get("best_step"),
        "validation_loss": meta.get("validation_loss") or {},
        "step_cpu_median": meta.get("step_cpu_median"),
        "gate": {
            "start": gate.get("start"),
            "gate_bias": gate.get("gate_bias"),
            "gate_lr": gate.get("gate_lr"),
            "values": gate.get("values"),
            "quantiles": gate.get("quantiles") or {},
        }
        if gate
        else {},
        "moved": meta.get("moved") or {},
        "inert": meta.get("inert") or {},
        "source": source,
    }


def trained_adapters(runs: list[RunSpec], previous: list[dict] | None = None) -> dict[tuple[str, str], dict | None]:
    """(run, model) -> ``record`` for every adapted model of every run; where neither a committed copy
    nor the cache has its meta, the committed report's record of the same adapter (``previous``: its
    report.json's ``adapters``, matched by run, model and sha256), else None (not found)."""
    before = {(x.get("run"), x.get("model"), x.get("sha256")): x for x in previous or []}
    out = {}
    for run in runs:
        try:
            manifest = rundir.read_manifest(run.run_dir) or {}
        except MaxbenchError:
            continue
        for model, entry in sorted((manifest.get("models") or {}).items()):
            adapter = ((entry or {}).get("options") or {}).get("adapter")
            if not adapter:
                continue
            meta, source = _meta(run, adapter, model)
            key = (run.run_dir.name, model)
            if meta is not None:
                out[key] = record(meta, source)
            elif (*key, adapter.get("sha256")) in before:
                kept = before[(*key, adapter.get("sha256"))]
                out[key] = {k: v for k, v in kept.items() if k not in ("run", "model")}
            else:
                out[key] = None
    return out


def _model_of(system: str) -> str:
    """The model part of a system string (``smollm2-135m+fctg(seed=1)/softmax/...``)."""
    return system.split("/", 1)[0]


def hold_inert(paper: Paper, runs: list[RunSpec], cells: list[CellVerdict], adapters: dict) -> list:
    """The cells of claims that ablate a ``component`` where the method's adapter (each of its seeds'
    where it has replicates, ``[protocol.seeds]``) records it inert, or has no training meta to tell:
    each is taken out of the counts (before Holm's step) and returned with why, for ``mark_inert``."""
    held = []
    for c in cells:
        claim = next((x for x in paper.claims if x.id == c.claim), None)
        if claim is None or not claim.component or not c.corpus:
            continue
        mine = [c.method, *((paper.protocol.get("seeds") or {}).get(c.corpus) or {}).get(c.method, [])]
        why = []
        for run in runs:
            if run.model not in c.model.split("+") or run.corpus != c.corpus or c.method not in run.roles:
                continue
            for role in (x for x in mine if x in run.roles):
                key = (run.run_dir.name, _model_of(run.roles[role]))
                if key not in adapters:
                    continue  # not an adapter (or not generated yet: the cell is partial)
                rec = adapters[key]
                if rec is None:
                    why.append(
                        f"{role}'s adapter has no training meta here ({run.run_dir.name}): its {claim.component} cannot be checked"
                    )
                elif rec["inert"].get(claim.component):
                    moved = rec["moved"].get(claim.component)
                    by = f" by {moved:.3g}" if isinstance(moved, (int, float)) else ""
                    why.append(f"{role}'s {claim.component} moved{by} (< 0.01) from its start in {run.run_dir.name}")
        if why:
            c.counted = False
            inert = any(" moved" in x for x in why)
            held.append((c, FLAG_INERT if inert else FLAG_UNCHECKED, "; ".join(why)))
    return held


def mark_inert(held: list) -> None:
    """The held cells' verdicts, after every other is decided: not comparable, with why, the cell's
    and each of its comparisons'."""
    for c, flag, why in held:
        c.verdict = NOT_COMPARABLE
        tail = (
            "removing a part that never trained measures nothing about it"
            if flag == FLAG_INERT
            else "its training cannot be checked"
        )
        c.why = f"{flag}: {why}: {tail}"
        for comp in c.details:
            comp.verdict = Verdict(NOT_COMPARABLE, c.why)
        c.flags.append(f"{flag}: outside the counts")


def _gate_text(gate: dict) -> str:
    if not gate:
        return ""
    q = gate.get("quantiles") or {}
    start = f"start {gate['start']:g}, lr {gate['gate_lr']:g}" if gate.get("start") is not None else ""
    vals = ", ".join(f"{k[1:]}%: {q[k]:.3g}" for k in QUANTILES if q.get(k) is not None)
    return "; ".join(x for x in (start, vals) if x)


def section(adapters: dict) -> Section:
    """Each trained adapter's training as its meta records it."""
    s = Section("Trained adapters", level=2)
    s.paragraphs.append(
        Para(
            "Each adapter a run generated with, as its training meta records it (a committed copy under "
            "heads/<run>/, else the cached adapter's, by the sha256 the run's manifest records): the steps kept "
            "(the checkpoint with the lowest held-out loss) and the held-out loss at each checkpoint, the CPU "
            "seconds per training step (median), and for FCTG the gate's chosen start and learning rate, the "
            "trained gate's values over the held-out texts' tokens (percentiles), and how far each component's "
            "trained values moved from their start (inert: under 0.01, which makes a cell ablating it not "
            "comparable)."
        )
    )
    body = []
    for (run, model), rec in sorted(adapters.items()):
        if rec is None:
            body.append(
                (
                    Cell(run, code=True),
                    Cell(model, code=True),
                    *(num("n/a"),) * 3,
                    Cell(""),
                    Cell(""),
                    Cell("not found"),
                )
            )
            continue
        losses = ", ".join(f"{k}: {v:.4g}" for k, v in rec["validation_loss"].items())
        moved = ", ".join(
            f"{k} {v:.3g}" + (" (inert)" if rec["inert"].get(k) else "") for k, v in sorted(rec["moved"].items())
        )
        if rec["steps"] is None:
            kept = "n/a"
        elif rec["best_step"] is None:
            kept = f"{rec['steps']} (no selection)"
        else:
            kept = f"{rec['best_step']} of {rec['steps']}"
        body.append(
            (
                Cell(run, code=True),
                Cell(model, code=True),
                num(kept),
                num(losses or "not recorded"),
                num(f"{rec['step_cpu_median']:.3g}" if rec["step_cpu_median"] is not None else "n/a"),
                Cell(_gate_text(rec["gate"])),
                Cell(moved),
                Cell(rec["source"]),
            )
        )
    cols = (
        "run",
        "model",
        "steps kept",
        "held-out loss by step",
        "CPU s per step",
        "gate: start, values (percentiles)",
        "moved from start",
        "source",
    )
    s.tables.append(Table(cols, tuple(body), align="llrrrlll"))
    return s
