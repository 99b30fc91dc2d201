"""What a reproduction report rests on, read from the runs and the report's evidence file: each run's
``scores.json`` (read once, with why a run is partial), the paired tests and reference scores of
``pairs.json``, the runs' timings (generation CPU time per token, adapters' training time, wall
time), the trained heads' training records, and the metric signatures a run was scored with.

``pairs.json`` is part of the report's evidence, committed beside it: the differences between two
systems of a run when neither is its baseline (a lambda against another, sparsemax, KerBS), and a
correlation claim's scores of the human references, are computed from the generations by the same
paired test as ``scores.json``'s (``maxbench.benchmark.metrics.stats.paired_test``), once, and
kept there keyed by the run, its generations' sha256, the two systems, the metric's signature as
the run's ``scores.json`` records it and the resamples (the references: by the suite, its sha256,
the metric and its signature). A report re-rendered from the same scored runs
(``--report-only``) computes nothing again; an entry whose key no longer matches (the generations
or the metric changed) is computed afresh, and entries the report did not use are dropped when it
is written.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from maxbench import rundir
from maxbench.benchmark.reproduce.papers import Paper
from maxbench.benchmark.reproduce.protocol import RunSpec, read_json_object
from maxbench.benchmark.reproduce.verdicts import best_epoch
from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write

#: the report's evidence file, beside report.md
PAIRS = "pairs.json"
PAIRS_FORMAT = "maxbench-reproduce-pairs/1"

# ---------------------------------------------------------------- scores.json


def read_scores(run_dir: Path) -> dict | None:
    """The run's scores document as it is (None when it has none; one that is damaged is refused in
    one line by the run folder's owner). Whether it scores the run's generations as they are now is
    ``RunScores``' question."""
    return rundir.read_scores(run_dir, fresh=False).to_dict() if rundir.has_scores(run_dir) else None


def metric_of(doc: dict, score: str) -> str | None:
    """The metric of a run's ``scores.json`` that computes ``score``."""
    return next((m for m, e in doc.get("metrics", {}).items() if score in e.get("scores", [])), None)


def signature(doc: dict, metric: str | None) -> str:
    """The signature ``metric`` had when the run was scored ('' if none)."""
    return ((doc.get("metrics") or {}).get(metric) or {}).get("signature", "") if metric else ""


class RunScores:
    """What the report reads of each run's scores, read once: scores.json, the generations' sha256,
    and why the run is partial (not scored, its generations or its manifest missing, scored on other
    generations, part of its suite)."""

    def __init__(self, runs: list[RunSpec]):
        self.runs = runs
        self._docs: dict[Path, dict | None] = {}
        self._partial: dict[Path, str] = {}
        self._whole: dict[Path, str] = {}  # why no system of the run is complete (not scored, stale)
        self._short: dict[Path, set] = {}  # the systems that cover part of the suite or none
        self._texts: dict[Path, dict[str, str]] = {}  # system -> its texts' fingerprint (texts_sha256)
        for r in runs:
            doc = read_scores(r.run_dir)
            why = ""
            if doc is None:
                why = "not scored" if rundir.has_generations(r.run_dir) else "not run"
                self._whole[r.run_dir] = why
            elif not rundir.has_generations(r.run_dir):
                why = "its generations.jsonl is missing (regenerate the run)"
                self._whole[r.run_dir] = why
            elif not rundir.manifest_path(r.run_dir).is_file():  # its texts' provenance is gone
                why = "its manifest.json is missing (regenerate the run)"
                self._whole[r.run_dir] = why
            elif doc.get("generations_sha256") != rundir.generations_sha256(r.run_dir):
                why = "its scores.json scores other generations (rescore it)"
                self._whole[r.run_dir] = why
            else:
                systems = doc.get("systems", {})
                planned = set(r.roles.values())
                short = {s for s in planned if s not in systems or (systems.get(s) or {}).get("partial")}
                self._short[r.run_dir] = short
                if short:
                    why = f"{len(short)} of its {len(planned)} systems cover part of the suite or none"
            self._docs[r.run_dir] = doc  # a partial run's scores are used, and its cells say so
            if why:
                self._partial[r.run_dir] = why

    def partial_for(self, run: RunSpec, roles: tuple[str, ...]) -> str:
        """Why the cell of these roles in ``run`` is partial ('' when its own systems are complete):
        another system of the run still to generate does not make it partial."""
        if run.run_dir in self._whole:
            return self._whole[run.run_dir]
        short = [run.roles[x] for x in roles if run.roles.get(x) in self._short.get(run.run_dir, set())]
        return f"{len(short)} of its systems cover part of the suite or none" if short else ""

    def doc(self, run: RunSpec) -> dict | None:
        return self._docs.get(run.run_dir)

    def texts_sha256(self, run: RunSpec, role: str) -> str | None:
        """A fingerprint of the texts the role's system generated in ``run`` (every prompt and sample
        with its text), so that two roles that generated the same texts, text for text, are seen to
        be the same evidence; None when the role generated nothing there."""
        if run.run_dir not in self._texts:
            rows: dict[str, list] = {}
            for row in rundir.read_generations(run.run_dir, missing_ok=True):
                rows.setdefault(row["system"], []).append((row["prompt_id"], row.get("sample", 0), row.get("text")))
            self._texts[run.run_dir] = {
                system: hashlib.sha256(json.dumps(sorted(texts)).encode()).hexdigest() for system, texts in rows.items()
            }
        return self._texts[run.run_dir].get(run.roles.get(role, ""))

    def partial(self, run: RunSpec) -> str:
        return self._partial.get(run.run_dir, "")


def fold_value(run: RunSpec, doc: dict, role: str, score: str) -> float | None:
    """The value of ``score`` for the system of ``role`` in the run's scores.json."""
    entry = doc["systems"].get(run.roles[role], {}).get("scores", {}).get(score) or {}
    return entry.get("value")


def n_prompts(run: RunSpec, doc: dict, roles: tuple[str, ...]) -> int:
    """The prompts the systems of these roles were scored on (the fewest; the suite's if unrecorded)."""
    ns = [(doc["systems"].get(run.roles[r]) or {}).get("n_prompts") for r in roles]
    ns = [n for n in ns if isinstance(n, int)]
    return min(ns) if ns else len(run.plan.suite.items)


def runs_of(runs: list[RunSpec], model: str, corpus: str, roles: tuple[str, ...]) -> list[RunSpec]:
    """The runs (folds) of one base model and corpus that have every one of these roles."""
    return [r for r in runs if r.model == model and r.corpus == corpus and all(x in r.roles for x in roles)]


# ---------------------------------------------------------------- pairs.json


class Pairs:
    """The report's evidence file ``pairs.json`` (see the module docstring): paired tests between two
    systems of a run when neither is its baseline, and scores of the human references. An entry is
    computed only when the file has none under its key; ``save`` writes the entries this report used."""

    def __init__(self, n_resamples: int = 1000, path: Path | None = None):
        self.n_resamples, self.path = n_resamples, path
        self.stored: dict = {}
        self.used: dict = {}
        self.computed = 0
        self._memo: dict = {}  # (run, system, metric) -> its scores, for entries computed afresh
        self._batches: dict = {}  # run -> its systems' text batches
        if path is not None and path.exists():
            try:
                doc = json.loads(path.read_text())
                if doc.get("format") == PAIRS_FORMAT:
                    self.stored = dict(doc.get("entries", {}))
            except (OSError, ValueError):
                self.stored = {}

    @staticmethod
    def _key(*parts) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]

    def _get(self, key: str, compute):
        if key not in self.used:
            if key in self.stored:
                self.used[key] = self.stored[key]
            else:
                self.used[key] = compute()
                self.computed += 1
        return self.used[key]

    def _scores(self, run_dir: Path, system: str, metric: str) -> dict:
        """The scores of ``metric`` for one system of the run, computed once per report (an entry
        computed afresh often needs a system another entry has computed)."""
        from maxbench.benchmark.metrics.base import get_metric
        from maxbench.benchmark.metrics.scoring import load_batches

        key = (run_dir, system, metric)
        if key not in self._memo:
            if run_dir not in self._batches:
                self._batches[run_dir] = load_batches(run_dir)[1]
            self._memo[key] = get_metric(metric).compute(self._batches[run_dir][system]).scores
        return self._memo[key]

    def compare(self, run_dir: Path, a: str, b: str, metric: str, score: str, signature: str = ""):
        """(difference, ci_low, ci_high) of ``score`` between systems a and b of the run, or None."""

        def compute():
            from maxbench.benchmark.metrics.stats import paired_test

            ra, rb = self._scores(run_dir, a, metric), self._scores(run_dir, b, metric)
            out = {}
            for name, sa in ra.items():
                sb = rb[name]
                if sa.value is None or sb.value is None:
                    out[name] = None
                    continue
                c = paired_test(sa.stats, sb.stats, self.n_resamples)
                lo, hi = c.confidence_interval or (None, None)
                out[name] = [c.difference, lo, hi]
            return {"run": run_dir.name, "systems": [a, b], "metric": metric, "scores": out}

        gen = rundir.generations_sha256(run_dir) or ""
        key = self._key("pair", run_dir.name, gen, a, b, metric, signature, self.n_resamples)
        found = self._get(key, compute)["scores"].get(score)
        return None if found is None else tuple(found)

    def seeded(
        self, run_dir: Path, pairs: list[tuple[str, str]], metric: str, score: str, signature: str = ""
    ) -> dict | None:
        """``score`` of the seed-averaged systems of the run: ``pairs`` are (a, b) systems trained with
        one seed each (b repeated where it has one seed); {"a", "b", "difference": [d, lo, hi, se, df],
        "log_ratio": [l, lo, hi, se, df] or None, "n_seeds", "n_prompts", "method"}
        (``stats.seed_averaged``), or None. The entry's key holds the method's text, so a change of
        method computes it afresh."""
        from maxbench.benchmark.metrics.stats import DEFAULT_LEVEL, DEFAULT_SEED, SEED_AVERAGED_METHOD

        def compute():
            from maxbench.benchmark.metrics.stats import seed_averaged

            stats = {s: self._scores(run_dir, s, metric) for pair in pairs for s in pair}
            out = {}
            for name in stats[pairs[0][0]]:
                xs = [stats[a][name] for a, _ in pairs]
                ys = [stats[b].get(name) for _, b in pairs]
                if any(s is None or s.value is None or s.stats is None for s in (*xs, *ys)):
                    out[name] = None
                    continue
                got = seed_averaged([x.stats for x in xs], [y.stats for y in ys], self.n_resamples)
                out[name] = (
                    None
                    if got is None
                    else {
                        "a": got.a,
                        "b": got.b,
                        "difference": _json_numbers(got.difference),
                        "log_ratio": None if got.log_ratio is None else _json_numbers(got.log_ratio),
                        "n_seeds": got.n_seeds,
                        "n_prompts": got.n_prompts,
                        "method": got.method,
                    }
                )
            return {"run": run_dir.name, "pairs": [list(p) for p in pairs], "metric": metric, "scores": out}

        gen = rundir.generations_sha256(run_dir) or ""
        settings = (self.n_resamples, DEFAULT_SEED, DEFAULT_LEVEL, SEED_AVERAGED_METHOD)
        key = self._key("seeded", run_dir.name, gen, pairs, metric, signature, *settings)
        return self._get(key, compute)["scores"].get(score)

    def humans(self, run: RunSpec, metric: str, signature: str = "") -> dict:
        """Every score of ``metric`` on the human references of the run's suite (each reference
        scored as if a system had written it, itself among the references)."""

        def compute():
            from maxbench.benchmark.metrics.base import TextBatch, get_metric
            from maxbench.benchmark.metrics.human import references_batch
            from maxbench.benchmark.metrics.scoring import load_batches

            _, batches = load_batches(run.run_dir)
            first = next(iter(batches.values()))
            humans = references_batch([TextBatch(first.texts, first.prompt_ids, first.references)], continuation=False)
            res = get_metric(metric).compute(humans)
            return {
                "suite": run.plan.suite.name,
                "metric": metric,
                "scores": {k: s.value for k, s in res.scores.items()},
            }

        suite = run.plan.suite
        key = self._key("human", suite.name, getattr(suite, "sha256", ""), metric, signature)
        return self._get(key, compute)["scores"]

    def save(self) -> None:
        if self.path is None:
            return
        body = {"format": PAIRS_FORMAT, "n_resamples": self.n_resamples, "entries": dict(sorted(self.used.items()))}
        text = json.dumps(body, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
        if not self.path.exists() or self.path.read_text() != text:
            atomic_write(self.path, text)


def _json_numbers(values) -> list:
    """Numbers as pairs.json holds them: a non-finite one (infinite degrees of freedom) as None."""
    return [v if v is not None and math.isfinite(v) else None for v in values]


def paired_difference(run: RunSpec, doc: dict, method: str, baseline: str, score: str, pairs: Pairs):
    """(difference, ci_low, ci_high) of ``score``, method - baseline, in one run, or None: from its
    scores.json against the run's baseline, else from ``pairs``. A claim is about the difference
    itself: a comparison scores.json keeps as a closeness test (``"test": "closeness"``: the distance
    to the human row, |method - human| - |baseline - human|, for a score whose goal is the human
    value) is another estimand, so the plain difference is computed from ``pairs`` instead."""
    a, b = run.roles[method], run.roles[baseline]
    if a not in doc.get("systems", {}) or b not in doc.get("systems", {}):
        return None  # a system the run has not generated yet (a partial run)
    if b == run.baseline:
        c = (doc.get("comparisons", {}).get("systems", {}).get(a) or {}).get(score)
        if c is None:
            return None
        if c.get("test") != "closeness":
            return (c["difference"], c["ci_low"], c["ci_high"])
    metric = metric_of(doc, score)
    return None if metric is None else pairs.compare(run.run_dir, a, b, metric, score, signature(doc, metric))


def _entry(run: RunSpec, doc: dict, role: str, score: str) -> dict:
    return ((doc.get("systems") or {}).get(run.roles[role]) or {}).get("scores", {}).get(score) or {}


def _mean_of_per_prompt(entry: dict) -> list | None:
    """The per-prompt values of a score whose value is their mean (a mean of per-prompt values,
    such as a repetition rate), else None (a corpus-level score: BLEU, Distinct, perplexity)."""
    per, value = entry.get("per_prompt"), entry.get("value")
    if not per or value is None or any(v is None for v in per.values()):
        return None
    vals = list(per.values())
    return per if abs(sum(vals) / len(vals) - value) <= 1e-9 * max(1.0, abs(value)) else None


def paired_binary(run: RunSpec, doc: dict, method: str, baseline: str, score: str) -> tuple[list, list] | None:
    """The two systems' per-prompt values of ``score`` in one run, paired by prompt, where the score is
    the mean of them and every one is 0 or 1 (a rate over one text per prompt), else None."""
    pa = _mean_of_per_prompt(_entry(run, doc, method, score))
    pb = _mean_of_per_prompt(_entry(run, doc, baseline, score))
    if pa is None or pb is None or set(pa) != set(pb):
        return None
    keys = sorted(pa)
    a, b = [pa[k] for k in keys], [pb[k] for k in keys]
    return (a, b) if all(v in (0, 1) for v in (*a, *b)) else None


def log_ratio(
    run: RunSpec, doc: dict, method: str, baseline: str, score: str, diff: tuple, n_resamples: int = 1000
) -> tuple[tuple[float, float, float] | None, str]:
    """log(method / baseline) of ``score`` in one run with its 95% interval, from the per-prompt data
    (the rules of ``verdicts.RULES``), and how: the paired bootstrap of the ratio of means where the
    score is the mean of its per-prompt values (``verdicts.log_ratio_bootstrap``), else the delta
    method on both systems' intervals and their paired difference's ``diff`` (``verdicts.log_ratio_delta``).
    (None, why) where a value is not positive (no ratio scale)."""
    from maxbench.benchmark.reproduce.verdicts import log_ratio_bootstrap, log_ratio_delta

    ea, eb = _entry(run, doc, method, score), _entry(run, doc, baseline, score)
    va, vb = ea.get("value"), eb.get("value")
    if va is None or vb is None or va <= 0 or vb <= 0:
        return None, "a value is not positive: no ratio scale"
    pa, pb = _mean_of_per_prompt(ea), _mean_of_per_prompt(eb)
    if pa is not None and pb is not None and set(pa) == set(pb):
        keys = sorted(pa)
        got = log_ratio_bootstrap([pa[k] for k in keys], [pb[k] for k in keys], n_resamples)
        if got is not None:
            return got, "paired bootstrap of the ratio of means over prompts"
    got = log_ratio_delta(
        (va, ea.get("ci_low"), ea.get("ci_high")), (vb, eb.get("ci_low"), eb.get("ci_high")), tuple(diff)
    )
    return got, "" if got is not None else "an interval is missing: no ratio interval"


@dataclass
class Evidence:
    """The runs a report covers, their scores read once, and its pairs file."""

    runs: list[RunSpec]
    scores: RunScores
    pairs: Pairs

    @classmethod
    def of(cls, runs: list[RunSpec], pairs: Pairs) -> Evidence:
        return cls(runs, RunScores(runs), pairs)


# ---------------------------------------------------------------- timings


def time_per_token(run_dir: Path) -> dict[str, float]:
    """CPU seconds per generated token of each system, from the run's timings and generations.

    CPU time of the generating process (wall time where a timing row has none): on a shared
    machine other processes stretch wall time by whatever else runs at that moment, so two
    systems generated at different times compare fairly only by the CPU time they used."""
    seconds: dict[str, float] = {}
    for row in rundir.read_timings(run_dir):
        if row["phase"].startswith("generate "):
            name = row["phase"][len("generate ") :]
            seconds[name] = seconds.get(name, 0.0) + row.get("cpu_seconds", row["seconds"])
    tokens: dict[str, int] = {}
    for row in rundir.read_generations(run_dir, missing_ok=True):
        tokens[row["system"]] = tokens.get(row["system"], 0) + int(row.get("n_tokens", 0))
    return {s: seconds[s] / tokens[s] for s in seconds if tokens.get(s)}


def _train_rows(run: RunSpec) -> list[dict]:
    return [r for r in rundir.read_timings(run.run_dir) if r.get("phase", "").startswith("train ")]


def training_seconds(run: RunSpec) -> dict[str, float]:
    """Training seconds of each adapted system's adapter, from the run's ``train <model>`` timing rows
    (``runner.record_training``): CPU seconds where every adapter of the run has them, else wall
    seconds for all (never one kind against the other)."""
    rows = _train_rows(run)
    cpu = bool(rows) and all(r.get("cpu_seconds") is not None for r in rows)
    per_model = {r["phase"][len("train ") :]: r["cpu_seconds" if cpu else "seconds"] for r in rows}
    return {s.name: float(per_model[s.model_key]) for s in run.plan.systems if s.model_key in per_model}


def training_steps(run: RunSpec) -> dict[str, list[float]]:
    """CPU seconds of each training step of each adapted system's adapter, where its ``train MODEL``
    row records them (adapters trained since issue 40's reproduction)."""
    per_model = {
        r["phase"][len("train ") :]: r["step_cpu_seconds"] for r in _train_rows(run) if r.get("step_cpu_seconds")
    }
    return {s.name: list(per_model[s.model_key]) for s in run.plan.systems if s.model_key in per_model}


def run_wall_seconds(run: RunSpec) -> float:
    """The wall time every invocation spent on one run (all phases of its timings.jsonl; 0 if none)."""
    return sum(row["seconds"] for row in rundir.read_timings(run.run_dir))


def total_wall_seconds(runs: list[RunSpec]) -> float:
    """The wall time every invocation spent on these runs (all phases of their timings.jsonl)."""
    return sum(run_wall_seconds(r) for r in runs)


def run_table(runs: list[RunSpec]) -> list[dict]:
    """Every run the report used: its folder, suite, fitting corpus, wall seconds (``run_wall_seconds``)
    and the sha256 of its manifest, generations and scores (absent files are empty)."""
    return [
        {
            "run": r.run_dir.name,
            "model": r.model,
            "corpus": r.plan.corpus,
            "fold": r.fold,
            "suite": r.plan.suite.name,
            "prompts": len(r.plan.suite.items),
            "systems": len(r.plan.systems),
            "wall_seconds": round(run_wall_seconds(r), 1),
            **{f"{n}_sha256": digest for n, digest in rundir.file_digests(r.run_dir).items()},
        }
        for r in runs
    ]


# ---------------------------------------------------------------- trained heads


#: the folder under a reproduction's folder that holds committed copies of its runs' heads' fit meta,
#: one folder per run (``heads/<run>/<any name>.json``)
HEADS = "heads"


def _head_meta(layer: str, sha: str, committed: Path | None = None) -> tuple[dict | None, str]:
    """The fit meta of the ``layer`` head with these weights (as the manifest records them) and where
    it was found: a committed copy under ``committed`` (the reproduction's heads/<run>/), else this
    machine's head cache."""
    from maxbench.fileio import maxbench_home

    if not sha:
        return None, ""
    if committed is not None and committed.is_dir():
        for path in sorted(committed.glob("*.json")):
            meta = read_json_object(path)
            if meta is not None and meta.get("sha256") == sha:
                return meta, f"{HEADS}/{committed.name}/{path.name}"
    for meta_file in sorted((maxbench_home() / "heads" / layer).glob("*/meta.json")):
        meta = read_json_object(meta_file)
        if meta is not None and meta.get("sha256") == sha:
            return meta, "the cached head's meta.json"
    return None, ""


def _manifest(run: RunSpec) -> dict | None:
    try:
        return rundir.read_manifest(run.run_dir) or None
    except MaxbenchError:
        return None


def budget_of(meta: dict) -> dict:
    """A head's training budget from its fit meta: training tokens, epochs, learning rate (None where
    the meta does not say)."""
    cfg = meta.get("config") or {}
    return {"tokens": meta.get("budget_tokens"), "epochs": cfg.get("epochs"), "lr": cfg.get("lr")}


def head_training(run: RunSpec, system: str) -> dict:
    """What is known of a trained head's training in this run, read from its fit meta (a committed copy
    under the reproduction's ``heads/<run>/``, else this machine's cache; found by the sha256 the
    run's manifest records): ``history`` (per epoch: validation perplexity, training loss where
    recorded; [] when not recorded), ``best_epoch`` (None: not recorded), ``untrained`` (best epoch 0),
    ``still_improving`` (the last epoch lowered validation perplexity; None: not recorded), ``budget``
    (``budget_of``) and ``source``."""
    res = ((_manifest(run) or {}).get("resources") or {}).get(system) or {}
    sha = next((v for k, v in res.items() if k.endswith("_head") and isinstance(v, str)), "")
    layer = next((k[: -len("_head")].replace("_", "-") for k in res if k.endswith("_head")), "")
    committed = run.run_dir.parent.parent / HEADS / run.run_dir.name
    meta, where = _head_meta(layer, sha, committed) if layer else (None, "")
    history = ((meta or {}).get("training") or {}).get("history") or []
    epoch = best_epoch(history)
    if epoch is None and isinstance(res.get("best_epoch"), int):
        epoch = res["best_epoch"]
    untrained = bool(res.get("untrained_best")) or epoch == 0
    improving = (len(history) >= 2 and history[-1]["valid_ppl"] < history[-2]["valid_ppl"]) if history else None
    source = where if history else ("the run's manifest" if epoch is not None or untrained else "")
    return {
        "best_epoch": 0 if untrained and epoch is None else epoch,
        "untrained": untrained,
        "history": history,
        "still_improving": improving,
        "budget": budget_of(meta) if meta else {},
        "sha256": sha,
        "source": source,
        "refit": head_refit(run, system, sha) if not history else None,
    }


#: the name ending of a committed refit's fit meta: ``heads/<run>/<head file's stem>-refit.json``
REFIT_SUFFIX = "-refit.json"


def head_refit(run: RunSpec, system: str, sha: str) -> dict | None:
    """A head trained before fit metas were recorded has no history of its own; a refit of the same
    identity (the same layer, options, data, budget and seed) under the current code, committed beside
    the run's head files as ``heads/<run>/<head file's stem>-refit.json``, shows how that training goes.
    Its bits may differ from the run's head (floating-point order changed with the code), so it is
    reported beside the head, with whether its sha256 is the run's, and never read by the verdict rules
    as the run head's history: ``{"sha256", "same", "history", "best_epoch", "still_improving",
    "budget", "file"}``, or None."""
    from maxbench.benchmark.reproduce.protocol import head_meta_file
    from maxbench.systems.system_strings import parse_system

    try:
        spec = parse_system(system)
    except MaxbenchError:
        return None
    path = head_meta_file(run.run_dir.parent.parent, run.run_dir.name, spec)
    path = path.with_name(path.stem + REFIT_SUFFIX)
    meta = read_json_object(path)
    history = ((meta or {}).get("training") or {}).get("history") or []
    if not history:
        return None
    return {
        "sha256": meta.get("sha256"),
        "same": meta.get("sha256") == sha,
        "history": history,
        "best_epoch": best_epoch(history),
        "still_improving": len(history) >= 2 and history[-1]["valid_ppl"] < history[-2]["valid_ppl"],
        "budget": budget_of(meta),
        "file": f"{HEADS}/{run.run_dir.name}/{path.name}",
    }


def trained_heads(runs: list[RunSpec], previous: list[dict] | None = None) -> dict[tuple[str, str], dict]:
    """(run, system) -> the training record (``head_training``) of every system with a trained head.

    ``previous`` is the committed report's ``heads`` list: a head whose history this machine cannot
    find (no committed copy, no cache) keeps the history that report recorded for the same run and
    system (the same head: the run's manifest pins its sha256, which the record names where it has
    one) and the source it was read from, so that a report renders the same with or without this
    machine's cache; a record is never made up where neither has it."""
    kept = {(h.get("run"), h.get("system")): h for h in previous or [] if h.get("history") and h.get("source")}
    heads = {}
    for r in runs:
        manifest = _manifest(r)
        if manifest is None:
            continue
        for system, res in (manifest.get("resources") or {}).items():
            if any(k.endswith("_head") for k in res or {}):
                rec = head_training(r, system)
                old = kept.get((r.run_dir.name, system))
                if not rec["history"] and old is not None and old.get("sha256", rec["sha256"]) == rec["sha256"]:
                    rec = dict(rec, **{k: old[k] for k in ("best_epoch", "untrained", "history") if k in old})
                    h = rec["history"]
                    rec["still_improving"] = len(h) >= 2 and h[-1]["valid_ppl"] < h[-2]["valid_ppl"]
                    rec["budget"] = old.get("budget") or rec["budget"]
                    rec["source"] = old["source"]  # where the history was read, on the machine that rendered it
                heads[(r.run_dir.name, system)] = rec
    return heads


# ---------------------------------------------------------------- metric signatures


def same_metric(recorded: str, now: str) -> bool:
    """Whether a recorded signature is the installed metric's: equal, or the installed signature with
    the parts a metric appends for the data it scored (attr-acc: the suite, the attribute, the
    trained classifier, from ``|suite:`` on)."""
    return recorded == now or recorded.startswith(now + "|suite:")


def signature_warnings(paper: Paper, runs: list[RunSpec]) -> list[str]:
    """Where a run's scores.json was computed with another signature of a metric than the
    installed metric has (an evaluator's weights, which naming needs the model loaded, aside):
    the report uses the recorded numbers and says so."""
    from maxbench.benchmark.metrics.base import get_metric

    def norm(sig: str) -> str:
        return re.sub(r"\|weights:[^|]*", "", sig)

    out = []
    for m in paper.protocol.get("metrics", []):
        try:
            now = norm(get_metric(m).signature)
        except Exception:  # noqa: BLE001 - a metric that cannot name itself without loading: not checked
            continue
        stale = sorted(
            r.run_dir.name
            for r in runs
            if (doc := read_scores(r.run_dir)) is not None
            and signature(doc, m)
            and not same_metric(norm(signature(doc, m)), now)
        )
        if stale:
            out.append(
                f"metric '{m}' now has the signature {now}; {len(stale)} run(s) were scored with another "
                f"({', '.join(stale)}): their recorded numbers are used; `maxbench score RUN_DIR` rescores a run"
            )
    return out
