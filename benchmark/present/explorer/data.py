"""What the explorer shows, as plain JSON-ready data: the leaderboard rows with their metric
families, per-step curves with intervals, and per prompt every system's text with its token
pieces, quantised per-token probabilities and entropies, and flags.

Runs are read as the leaderboard reads them (``benchmark/present/leaderboard.py``: ``scores.json``, the
manifest, rows grouped by base model) and their ``generations.jsonl`` once more for the texts. A
study's ratings come from the file ``maxbench study export ID --format explorer`` writes (the
rating app lives in ``human_eval``, which this package does not import): rated texts keyed by the
run's prompt id and system, so they join the run's texts and per-prompt scores here.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.benchmark.present.leaderboard import (
    best_rows,
    compact_columns,
    comparable_rows,
    human_rows,
    load_scored_run,
    score_columns,
    score_info,
    significance_mark,
)
from maxbench.errors import MaxbenchError

#: metric families of the headline leaderboard, by score name prefix (first match wins)
FAMILIES = (
    ("fluency", "Fluency / likelihood", ("ppl", "ref-")),
    ("diversity", "Diversity", ("self-bleu", "rep", "seq-rep", "distinct", "uniq")),
    ("quality", "Quality vs references", ("bleu", "sacrebleu", "rouge", "meteor", "bertscore", "ms-jaccard", "kld")),
)
#: per-prompt scores offered for "difference from the baseline" (those the runs have per prompt)
DIFF_METRICS = ("bleu-4", "rouge-l-f", "meteor", "bertscore-f1", "ppl", "self-bleu-4", "seq-rep-4", "rep")
LEVELS = 64  # quantisation of per-token probabilities and entropies: one character each
CODE = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_"  # LEVELS symbols; '.' = unknown
ENTROPY_MAX = 8.0  # nats: entropies above shade as this
FLAGS = ("loop", "empty", "ref-zero")
STUDY_FORMAT = "maxbench-study-ratings/1"


def family_of(score: str) -> str:
    for key, _, prefixes in FAMILIES:
        if any(score == p or score.startswith(p) for p in prefixes):
            return key
    return "other"


def quantise(values, top: float) -> str:
    """One character per value: its level in [0, top] out of LEVELS, '.' where unknown."""
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(".")
        else:
            out.append(CODE[min(LEVELS - 1, max(0, int(v / top * LEVELS)))])
    return "".join(out)


def _round(v, digits: int = 4):
    return None if v is None or not math.isfinite(v) else float(f"{v:.{digits}g}")


@dataclass
class Study:
    """A study's ratings joined to run texts: ``ratings[(prompt_id, sample, system)][aspect] = [values]``."""

    name: str
    run_id: str | None
    aspects: list[str]
    scale: dict  # aspect -> [min, max]
    ratings: dict = field(default_factory=dict)
    #: (prompt_id, sample, system) -> the sha256s its rows give the rated text (the text or ``text_sha256``),
    #: in file order, where the export records them: one, unless the file was edited
    texts: dict = field(default_factory=dict)
    #: (prompt_id, sample, system) -> the run the rated text came from, where the export records it per row
    row_runs: dict = field(default_factory=dict)


def load_study(path: Path) -> Study:
    """The file ``maxbench study export ID --format explorer --out FILE`` writes."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MaxbenchError(
            f"study file {path} does not exist; write it with maxbench study export ID --format explorer --out {path}"
        ) from None
    except (OSError, ValueError):
        raise MaxbenchError(f"study file {path} is not valid JSON; export it again (--format explorer)") from None
    if not isinstance(doc, dict) or doc.get("format") != STUDY_FORMAT or not isinstance(doc.get("ratings"), list):
        raise MaxbenchError(
            f"{path} is not a study export for the explorer (format {STUDY_FORMAT}); "
            f"write it with maxbench study export ID --format explorer"
        )
    study = Study(str(doc.get("study")), doc.get("run_id"), [], {})
    for n, r in enumerate(doc["ratings"], 1):
        try:
            key = (str(r["prompt_id"]), int(r.get("sample") or 0), str(r["system"]))
            aspect, value = str(r["criterion"]), r["value"]
        except (KeyError, TypeError, ValueError):
            raise MaxbenchError(f"{path} rating {n} lacks prompt_id, system, criterion or value") from None
        text, digest = r.get("text"), r.get("text_sha256")
        if isinstance(text, str):
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if isinstance(digest, str) and digest and digest not in study.texts.setdefault(key, []):
            study.texts[key].append(digest)
        if r.get("run_id") is not None:
            study.row_runs.setdefault(key, str(r["run_id"]))
        if aspect not in study.aspects:
            study.aspects.append(aspect)
            study.scale[aspect] = [r.get("scale_min"), r.get("scale_max")]
        if value is not None and "attention_failed" not in str(r.get("flags") or ""):
            study.ratings.setdefault(key, {}).setdefault(aspect, []).append(float(value))
    return study


def leaderboard_data(runs, rows, study: Study | None, human_means: dict) -> dict:
    """Rows of the headline table: every score with interval, significance and best marks, and how
    each score is shown (``meta``: the metric's ``ScoreInfo``: goal, display name, scale, digits). The
    human rows (the references, ``human_rows``) lead, marked ``human``."""
    cols = score_columns(rows, runs)
    per_model = len({row.model for row in rows}) > 1
    infos = {c: score_info(runs, c, rows) for c in cols}
    humans = human_rows(runs)
    best = {c: best_rows(rows, c, per_model, infos[c], humans) for c in cols}
    meta = {}
    for c in cols:
        e = next((row.scores[c] for row in rows if c in row.scores), {})
        i = infos[c]
        meta[c] = {
            "family": family_of(c),
            "higher_is_better": i.goal == "higher"
            if i.goal in ("higher", "lower")
            else e.get("higher_is_better", True),
            "goal": i.goal,
            "display": i.display,
            "scale": i.scale,
            "digits": i.digits,
        }
    out_rows = []
    for k, row in enumerate(humans + rows):
        i = k - len(humans)
        cells = {}
        for c in cols:
            e = row.scores.get(c)
            if e is None:
                continue
            p = row.p_values.get(c, {}).get("p_value")
            cells[c] = {
                "v": _round(e.get("value"), 10),
                "lo": _round(e.get("ci_low"), 10),
                "hi": _round(e.get("ci_high"), 10),
                "p": _round(p, 3),
                "mark": significance_mark(row, c),
                "best": i in best[c],
                "why": e.get("reason"),
            }
        for aspect, (mean, lo, hi, n) in human_means.get(row.system, {}).items():
            cells["human:" + aspect] = {"v": mean, "lo": lo, "hi": hi, "n": n, "p": None, "mark": "", "best": False}
        covered, of = row.coverage
        out_rows.append(
            {
                "system": row.system,
                "label": row.label,
                "model": row.model,
                "layer": row.layer,
                "run": row.run.run_id,
                "partial": row.partial,
                "coverage": [covered, of],
                "cells": cells,
            }
            | ({"human": True, "signature": row.entry.get("signature")} if i < 0 else {})
        )
    if study is not None:
        for aspect in study.aspects:
            key = "human:" + aspect
            cols.append(key)
            meta[key] = {
                "family": "human",
                "higher_is_better": True,
                "goal": "higher",
                "display": aspect,
                "scale": 1,
                "digits": 2,
            }
            vals = [r["cells"][key]["v"] for r in out_rows if key in r["cells"]]
            for r in out_rows:
                if key in r["cells"] and vals:
                    r["cells"][key]["best"] = r["cells"][key]["v"] == max(vals)
    baselines = sorted({b for run in runs for b in [run.comparisons.get("baseline")] if b})
    baselines += sorted({b for run in runs for b in (run.comparisons.get("baselines") or {}).values() if b})
    return {
        "columns": cols,
        "meta": meta,
        # the compact default view: the leaderboard's compact columns (those present), then human aspects
        "compact": compact_columns(runs, cols, rows) + [c for c in cols if c.startswith("human:")],
        "families": [[k, label] for k, label, _ in FAMILIES] + [["other", "Other"], ["human", "Human ratings"]],
        "rows": out_rows,
        "grouped": per_model,
        "baselines": list(dict.fromkeys(baselines)),
    }


def _mean_ci(values: list[float]) -> tuple[float, float, float, int]:
    n = len(values)
    m = sum(values) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n) if n > 1 else 0.0
    return _round(m), _round(m - half), _round(m + half), n


def build(run_dirs: list[Path], study: Study | None = None) -> tuple[dict, list[dict]]:
    """(the index: everything shown at first render, the prompts: one record each, in order)."""
    from maxbench.benchmark.metrics.diversity import repetition_loop
    from maxbench.benchmark.metrics.tokenize import word_tokens
    from maxbench.rundir import generations_path, read_generations

    if not run_dirs:
        raise MaxbenchError("give at least one run directory (maxbench view RUN_DIR...)")
    warnings: list[str] = []
    runs = [load_scored_run(Path(r)) for r in run_dirs]
    rows = comparable_rows(runs, mixed=True)
    if not rows:
        raise MaxbenchError("the runs hold no scored systems; score them first (maxbench score RUN_DIR)")
    systems = [row.system for row in rows]
    if len(set(systems)) != len(systems):
        raise MaxbenchError("a system appears in two of these runs; view each run on its own")
    if len({row.model for row in rows}) > 1 and not all(r.comparisons.get("baselines") for r in runs):
        warnings.append(
            "these runs hold several base models but do not name a baseline for each: no significance marks "
            "for the rows without one, and differences are against the first system"
        )
    baseline_of = {}
    for run in runs:
        for s in run.systems:
            baseline_of[s] = (run.comparisons.get("baselines") or {}).get(s) or run.comparisons.get("baseline")
    # texts, per-step statistics and flags; a loop is the rep metric's own per-prompt verdict where the run
    # scored rep (with several samples, a prompt any of whose samples loops), else the same test run here
    loops = {row.system: (row.scores.get("rep") or {}).get("per_prompt") for row in rows}
    prompts: dict[str, dict] = {}
    steps: dict[str, dict] = {}
    for run in runs:
        for g in read_generations(run.path, missing_ok=True):  # the rows score reads, by the same rule
            if g["system"] not in systems:
                continue
            pid, sample = g["prompt_id"], g.get("sample", 0)
            rec = prompts.setdefault(
                f"{pid}#{sample}" if sample else pid,
                {
                    "id": pid,
                    "sample": sample,
                    "prompt": g.get("prompt") or "",
                    "reference": g.get("reference") or "",
                    "texts": {},
                },
            )
            text = g.get("text") or ""
            st = g.get("stats") or {}
            pieces = g.get("pieces")
            if not isinstance(pieces, list) or "".join(pieces) != text:
                pieces = None  # an older run: no token boundaries, the text is shown whole
            flags = []
            rep = loops.get(g["system"])
            if (rep.get(pid, 0) > 0) if rep else repetition_loop(word_tokens(text)) is not None:
                flags.append("loop")
            if not text.strip():
                flags.append("empty")
            ref_lp = g.get("reference_logprobs")
            zero = sum(v is None for v in ref_lp) if isinstance(ref_lp, list) else None
            if zero:
                flags.append("ref-zero")
            rec["texts"][g["system"]] = {
                "text": text,
                "pieces": pieces,
                "p": quantise((st.get("p_chosen") or [])[: len(pieces or [])], 1.0) if pieces else "",
                "h": quantise((st.get("entropy") or [])[: len(pieces or [])], ENTROPY_MAX) if pieces else "",
                "flags": flags,
                "ref_zero": [zero, len(ref_lp)] if isinstance(ref_lp, list) else None,
                "finish": g.get("finish"),
            }
            acc = steps.setdefault(g["system"], {})
            for key in ("entropy", "support", "p_chosen"):
                for i, v in enumerate((st.get(key) or [])[:128]):
                    if v is not None and math.isfinite(v):
                        a = acc.setdefault(key, [])
                        while len(a) <= i:
                            a.append([0, 0.0, 0.0])
                        a[i][0] += 1
                        a[i][1] += v
                        a[i][2] += v * v
    if not prompts:
        raise MaxbenchError(
            f"{runs[0].path} has no generated texts ({generations_path(runs[0].path).name}); generate the run first"
        )
    # per-prompt scores for "difference from the baseline"
    per_prompt = {}
    for row in rows:
        for c in DIFF_METRICS:
            pp = (row.scores.get(c) or {}).get("per_prompt")
            if pp:
                per_prompt.setdefault(c, {})[row.system] = pp
    human_means, item_ratings = {}, {}
    correlations = None
    if study is not None:
        note = check_study_run(study, runs, prompts)
        if note is not None:
            warnings.append(note)
            print(f"maxbench: warning: {note}", file=sys.stderr, flush=True)
        joined = {
            k: v
            for k, v in study.ratings.items()
            if k[2] in systems and (k[0] in prompts or f"{k[0]}#{k[1]}" in prompts)
        }
        if not joined:
            raise MaxbenchError(
                f"none of study {study.name}'s rated texts is in these runs (study of run {study.run_id}, runs "
                f"{', '.join(r.run_id for r in runs)}); give the run the study was made from"
            )
        if len(joined) < len(study.ratings):
            warnings.append(
                f"{len(study.ratings) - len(joined)} of study {study.name}'s {len(study.ratings)} rated texts are not "
                "in these runs and are left out"
            )
        per_system: dict = {}
        for (pid, sample, system), asp in joined.items():
            item_ratings.setdefault(f"{pid}#{sample}" if sample else pid, {})[system] = asp
            for a, vals in asp.items():
                per_system.setdefault(system, {}).setdefault(a, []).append(sum(vals) / len(vals))
        human_means = {s: {a: _mean_ci(v) for a, v in d.items()} for s, d in per_system.items()}
        correlations = correlation_data(rows, joined, study)
    board = leaderboard_data(runs, rows, study, human_means)
    curves = {
        s: {
            k: [
                [_round(t / n), _round(1.96 * math.sqrt(max(0.0, t2 / n - (t / n) ** 2) / n)) if n > 1 else 0]
                for n, t, t2 in a
            ]
            for k, a in acc.items()
        }
        for s, acc in steps.items()
    }
    order = sorted(prompts, key=lambda k: (prompts[k]["id"], prompts[k]["sample"]))
    records = []
    index_prompts = []
    for key in order:
        rec = prompts[key]
        texts = [rec["texts"].get(s) for s in systems]
        records.append(
            {
                "key": key,
                "prompt": rec["prompt"],
                "reference": rec["reference"],
                "texts": texts,
                "ratings": [item_ratings.get(key, {}).get(s) for s in systems] if study else None,
            }
        )
        index_prompts.append(
            {
                "key": key,
                "head": rec["prompt"][:160],
                "flags": [t["flags"] if t else ["missing"] for t in texts],
                "rated": bool(item_ratings.get(key)),
                "scores": {
                    c: [_round((vals.get(s) or {}).get(rec["id"])) for s in systems] for c, vals in per_prompt.items()
                },
            }
        )
    frontier_views = _frontiers(runs, warnings)
    index = {
        "title": f"maxbench explorer: {', '.join(r.run_id for r in runs)}",
        "runs": [{"run_id": r.run_id, "path": r.path.as_posix(), "suite": r.suite.get("name")} for r in runs],
        "systems": systems,
        "baseline_of": [baseline_of.get(s) for s in systems],
        "leaderboard": board,
        "curves": [curves.get(s, {}) for s in systems],
        "prompts": index_prompts,
        "diff_metrics": [c for c in DIFF_METRICS if c in per_prompt],
        "flags": list(FLAGS),
        "levels": LEVELS,
        "code": CODE,
        "entropy_max": ENTROPY_MAX,
        "study": None
        if study is None
        else {"name": study.name, "aspects": study.aspects, "scale": study.scale, "correlations": correlations},
        "warnings": warnings,
    }
    if frontier_views:  # only runs with sweeps: the others' explorers keep their bytes
        index["frontiers"] = frontier_views
    return index, records


def _frontiers(runs, warnings: list[str]) -> list[dict]:
    """The frontier data (``present.frontiers.data``, default planes) of each run whose manifest records
    sweeps; a run whose sweeps cannot be drawn gets a warning line instead."""
    from maxbench.benchmark.present import frontiers
    from maxbench.rundir import read_manifest

    out = []
    for r in runs:
        if not read_manifest(r.path).get("sweeps"):
            continue
        try:
            _, planes = frontiers.build(r.path)
        except MaxbenchError as exc:
            warnings.append(f"{r.run_id}: no frontier view: {exc}")
            continue
        out.append({"run_id": r.run_id} | frontiers.data(planes))
    return out


def check_study_run(study: Study, runs, prompts: dict) -> str | None:
    """Refuse a study made from another run than the ones viewed: its ratings are of that run's texts,
    and system names and prompt ids alone would attach them to other texts. The study's run (its
    ``run_id``, and each row's where the export records it) must be one of them, and where the export
    records a rated text's sha256 (``text_sha256``, or the text itself), the run's text under that
    prompt, sample and system must have it. An export without any text hash (written before
    ``maxbench study export`` recorded them) is checked by its run id alone: the returned note says
    so (None otherwise)."""
    ids = [r.run_id for r in runs]
    if study.run_id is not None and str(study.run_id) not in ids:
        raise MaxbenchError(
            f"study {study.name} rated the texts of run {study.run_id}, but the runs given are {', '.join(ids)}; "
            "its ratings would be attached to other texts: give the run the study was made from"
        )
    for (pid, sample, system), run_id in study.row_runs.items():
        if run_id not in ids:
            raise MaxbenchError(
                f"study {study.name} rated the text of system '{system}' for prompt '{pid}' (sample {sample}) from "
                f"run {run_id}, but the runs given are {', '.join(ids)}; its ratings would be attached to other "
                "texts: give the run the study was made from"
            )
    for (pid, sample, system), digests in study.texts.items():
        rec = prompts.get(f"{pid}#{sample}" if sample else pid)
        shown = (rec or {}).get("texts", {}).get(system)
        if shown is None:
            continue  # not in these runs: left out with the other unjoined ratings
        now = hashlib.sha256(shown["text"].encode("utf-8")).hexdigest()
        for digest in digests:
            if now == digest:
                continue
            raise MaxbenchError(
                f"study {study.name} rated another text of system '{system}' for prompt '{pid}' (sample {sample}) "
                f"than run {study.row_runs.get((pid, sample, system)) or study.run_id or ', '.join(ids)} holds "
                f"(sha256 {digest[:12]}... rated, {now[:12]}... in the run); the run was regenerated or is another "
                "run of the same name: give the run the study was made from"
            )
    if not study.texts:
        return (
            f"study {study.name}'s export records no text hashes (exported before maxbench recorded them): its "
            "ratings are matched to this run by run id, system and prompt only; export it again (maxbench study "
            "export ID --format explorer) to have every rated text checked against the run"
        )
    return None


def correlation_data(rows, joined: dict, study: Study) -> list[dict]:
    """Kendall's tau and Spearman's rho of every per-prompt score against every rated aspect."""
    from maxbench.rank_correlation import mean_ratings, metric_rating_table, per_prompt_metrics

    ratings = mean_ratings(
        (pid, system, aspect, sum(vals) / len(vals))
        for (pid, _sample, system), asp in joined.items()
        for aspect, vals in asp.items()
    )
    metrics, hib = per_prompt_metrics({row.system: row.entry for row in rows})
    return [r.to_json() for r in metric_rating_table(metrics, ratings, hib)]
