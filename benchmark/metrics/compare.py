"""Paired tests between the systems of two runs of one suite (``maxbench compare``).

``compare_runs`` tests each system of
one run against a system of another on the (prompt id, sample, seed) keys both hold, with the
scorer's own functions: the metrics are computed on both sets of texts (``scoring.score_batch``) and
tested with ``scoring.compare_one``, the paired permutation test and paired bootstrap of
``stats.paired_test`` that ``scores.json``'s comparisons come from. Two runs of different suites
(suite hash) or different seeds are refused: their texts answer different prompts or draws.
"""

from __future__ import annotations

import math
from pathlib import Path

from maxbench.errors import MaxbenchError

COMPARE_FORMAT = "maxbench-compare/1"


def parse_pairs(specs: list[str] | None, systems_a: list[str], systems_b: list[str]) -> list[tuple[str, str]]:
    """(system of A, system of B) pairs: each ``S`` or ``A_SYSTEM=B_SYSTEM`` given, else every system
    both runs hold."""
    if not specs:
        pairs = [(s, s) for s in systems_a if s in systems_b]
        if not pairs:
            raise MaxbenchError(
                "the two runs share no system; name the pairs with --systems A_SYSTEM=B_SYSTEM "
                f"(run A has {', '.join(systems_a)}; run B has {', '.join(systems_b)})"
            )
        return pairs
    pairs = []
    for spec in specs:
        spec = spec.strip()
        # system names hold '=' themselves (top_p=0.9): the pair is the split whose sides are systems
        cuts = [i for i, c in enumerate(spec) if c == "="]
        split = [(spec[:i], spec[i + 1 :]) for i in cuts if spec[:i] in systems_a and spec[i + 1 :] in systems_b]
        if spec in systems_a or spec in systems_b or not split:
            a = b = spec
            for name, run, known in ((a, "A", systems_a), (b, "B", systems_b)):
                if name not in known:
                    raise MaxbenchError(
                        f"system '{name}' is not in run {run} (nor a pair A_SYSTEM=B_SYSTEM of the runs' systems); "
                        f"its systems: {', '.join(known)}"
                    )
        else:
            a, b = split[0]
        pairs.append((a, b))
    return pairs


def check_comparable(manifest_a: dict, manifest_b: dict, run_a: Path, run_b: Path) -> None:
    """Refuse, in one line, two runs whose suite hash or seed differ (or that cannot tell)."""
    for run, manifest in ((run_a, manifest_a), (run_b, manifest_b)):
        if not manifest:
            raise MaxbenchError(f"{run} has no manifest.json; its suite and seeds cannot be checked")
    suite_a, suite_b = (m.get("suite") or {} for m in (manifest_a, manifest_b))
    if suite_a.get("sha256") != suite_b.get("sha256"):
        raise MaxbenchError(
            f"the runs differ in suite hash: {run_a} has suite '{suite_a.get('name')}' sha256 "
            f"{str(suite_a.get('sha256'))[:12]}, {run_b} has '{suite_b.get('name')}' sha256 "
            f"{str(suite_b.get('sha256'))[:12]}; compare runs of one suite"
        )
    if manifest_a.get("seed") != manifest_b.get("seed"):
        raise MaxbenchError(
            f"the runs differ in seed: {run_a} has seed {manifest_a.get('seed')}, {run_b} has seed "
            f"{manifest_b.get('seed')}; compare runs generated with one seed"
        )


def _keyed(rows: list[dict], system: str) -> dict[tuple, dict]:
    return {(str(r["prompt_id"]), int(r.get("sample", 0)), r.get("seed")): r for r in rows if r["system"] == system}


def _batch(rows: list[dict], conditions=None, pool=None):
    """A TextBatch of rows, as ``scoring.load_batches`` makes one per system (with its suite's attributes and
    held-out split: ``scoring.run_conditions``, ``scoring.run_reference_pool``)."""
    from maxbench.benchmark.metrics.base import TextBatch

    refs, prompts, ref_lp, vocab = {}, {}, {}, None
    for r in rows:
        pid = str(r["prompt_id"])
        refs.setdefault(pid, r.get("reference") or "")
        if isinstance(r.get("prompt"), str):
            prompts[pid] = r["prompt"]
        if r.get("reference_logprobs") is not None:
            ref_lp[pid] = r["reference_logprobs"]
            vocab = r.get("vocab_size", vocab)
    strides = [r["reference_stride"] for r in rows if r.get("reference_stride") is not None]
    return TextBatch(
        [r["text"] for r in rows],
        [str(r["prompt_id"]) for r in rows],
        refs if any(v.strip() for v in refs.values()) else None,
        prompts or None,
        ref_lp or None,
        vocab,
        strides[-1] if strides else None,
        conditions,
        pool,
    )


def check_compare_args(n_resamples, level, seed, spelled: tuple[str, str, str]) -> None:
    """The checks of ``compare``'s resamples, level and seed, for the command and ``RunResult.compare``
    (``spelled``: how each door names them)."""
    from maxbench import arguments

    arguments.resamples(n_resamples, spelled[0], minimum=1)
    arguments.level(level, spelled[1])
    arguments.seed(seed, spelled[2])


def default_metrics(run_a: Path, run_b: Path, option: str = "--metrics") -> list[str]:
    """The metrics both runs' ``scores.json`` name (in A's order), else the scorer's defaults. A run
    without scores names none: it is refused, naming the run, unless the metrics are given
    (``option``, as the caller spells it)."""
    from maxbench.benchmark.metrics.names import DEFAULT_METRICS
    from maxbench.rundir import has_scores, read_scores

    for run in (run_a, run_b):
        if Path(run).is_dir() and not has_scores(Path(run)):
            raise MaxbenchError(
                f"run {run} has no scores, so there are no metrics to compare by default: score it first "
                f"(maxbench score {run}), or name the metrics with {option}"
            )
    try:  # only the names of the metrics, never a number: stale scores name them as well
        names_a, names_b = (list(read_scores(r, fresh=False).metrics or {}) for r in (run_a, run_b))
    except MaxbenchError:
        return list(DEFAULT_METRICS)
    both = [m for m in names_a if m in names_b]
    return both or list(DEFAULT_METRICS)


def check_metric_code(names: list[str], run_a: Path, run_b: Path) -> None:
    """``compare`` computes its metrics again on both runs' texts, so a plugin metric needs its code here,
    as ``score`` does (an output layer or model of a plugin needs none: only texts are read). A metric
    that is not known now, and that a run's ``scores.json`` records as a plugin's, is refused in one line
    saying where its code came from and how to bring it (docs/plugins.md)."""
    from maxbench.benchmark.metrics.base import METRICS
    from maxbench.registry import describe_origin, is_plugin_origin
    from maxbench.rundir import read_scores

    for name in names:
        if name in METRICS:
            continue
        for run in (run_a, run_b):
            try:  # where the metric's code came from, not its numbers: stale scores record it as well
                entry = (read_scores(run, fresh=False).metrics or {}).get(name)
            except MaxbenchError:
                continue
            origin = entry.get("origin") if isinstance(entry, dict) else None
            if not is_plugin_origin(origin):
                continue
            how = {
                "file": f"give --include {origin.get('path')}",
                "entry-point": f"install {origin.get('distribution')} {origin.get('version')}",
            }.get(origin.get("source"), "register it with maxbench.register_metric")
            raise MaxbenchError(
                f"metric '{name}' is a plugin's: {run}/scores.json records it from {describe_origin(origin)}; "
                f"compare computes the metrics again on both runs' texts, so {how}, or leave it out with --metrics"
            )


def compare_runs(run_a: Path, run_b: Path, pairs: list[str] | None = None, options=None) -> dict:
    """Paired tests of run A's systems against run B's (A minus B), on the (prompt id, sample, seed)
    keys both hold; ``options`` a ``ScoringOptions`` (its metrics, resamples, seed and level)."""
    from maxbench.benchmark.metrics.base import METRICS
    from maxbench.benchmark.metrics.scoring import (
        ScoringOptions,
        build_metrics,
        compare_one,
        run_conditions,
        run_reference_pool,
        score_batch,
    )
    from maxbench.benchmark.metrics.stats import TEST_METHOD
    from maxbench.rundir import read_generations, read_manifest

    run_a, run_b = Path(run_a), Path(run_b)
    manifest_a, manifest_b = read_manifest(run_a, required=True), read_manifest(run_b, required=True)
    check_comparable(manifest_a, manifest_b, run_a, run_b)
    rows_a, rows_b = read_generations(run_a), read_generations(run_b)
    systems_a = list(dict.fromkeys(str(r["system"]) for r in rows_a))
    systems_b = list(dict.fromkeys(str(r["system"]) for r in rows_b))
    chosen = parse_pairs(pairs, systems_a, systems_b)
    if options is None:
        options = ScoringOptions(metrics=default_metrics(run_a, run_b), progress=False)
    check_metric_code(options.metrics, run_a, run_b)
    metrics = build_metrics(options)
    doc = {
        "format": COMPARE_FORMAT,
        "run_a": {"path": str(run_a), "run_id": manifest_a.get("run_id"), "seed": manifest_a.get("seed")},
        "run_b": {"path": str(run_b), "run_id": manifest_b.get("run_id"), "seed": manifest_b.get("seed")},
        "suite": manifest_a.get("suite"),
        "method": TEST_METHOD,
        "n_resamples": options.n_resamples,
        "seed": options.seed,
        "level": options.level,
        "pairs": [],
    }
    # where each plugin metric's code came from, as scores.json records it (docs/plugins.md); built-ins add nothing
    origins = {m.name: METRICS.origin(m.name) for m in metrics if not METRICS.is_builtin(m.name)}
    if origins:
        doc["metric_origins"] = origins
    suite_parts = (run_conditions(manifest_a), run_reference_pool(manifest_a))  # one suite: checked above
    for sa, sb in chosen:
        keyed_a, keyed_b = _keyed(rows_a, sa), _keyed(rows_b, sb)
        seeds_b = {(p, s): seed for p, s, seed in keyed_b}
        clash = next(((p, s) for p, s, seed in keyed_a if (p, s) in seeds_b and seeds_b[(p, s)] != seed), None)
        if clash is not None:
            raise MaxbenchError(
                f"the runs differ in the seed of prompt '{clash[0]}' sample {clash[1]} ({sa} / {sb}); "
                f"compare runs generated with one seed"
            )
        common = [k for k in keyed_a if k in keyed_b]
        if not common:
            raise MaxbenchError(f"'{sa}' of run A and '{sb}' of run B share no (prompt id, sample, seed)")
        label = sa if sa == sb else f"{sa} vs {sb}"
        batch_a = _batch([keyed_a[k] for k in common], *suite_parts)
        batch_b = _batch([keyed_b[k] for k in common], *suite_parts)
        res_a = score_batch(batch_a, metrics, options, f"A {label}", not_applicable=True)
        res_b = score_batch(batch_b, metrics, options, f"B {label}", not_applicable=True)
        tests = compare_one(res_a, res_b, options)
        values_a = {n: s.value for r in res_a for n, s in r.scores.items()}
        values_b = {n: s.value for r in res_b for n, s in r.scores.items()}
        scores = {}
        for name, va in values_a.items():
            t = tests.get(name, {})
            scores[name] = {
                "value_a": va,
                "value_b": values_b.get(name),
                "difference": t.get("difference"),
                "ci_low": t.get("ci_low"),
                "ci_high": t.get("ci_high"),
                "ci_method": t.get("ci_method"),
                "p_value": t.get("p_value"),
                "n_prompts": t.get("n_prompts"),
            }
        doc["pairs"].append({"system_a": sa, "system_b": sb, "n_texts": len(common), "scores": scores})
    return doc


def _num(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.4g}"


def compare_markdown(doc: dict) -> str:
    """The comparison as a Markdown table, one row per (pair, score), rendered by ``maxbench.document``
    as every Markdown writer's is: system names are code spans and metric names text, escaped there."""
    from maxbench.document import Cell, Para, Section, Table, num, render_markdown

    level = round(doc["level"] * 100)
    columns = ("system A", "system B", "score", "A", "B", "A - B", f"{level}% interval", "p", "prompts")
    rows = []
    for pair in doc["pairs"]:
        for name, s in pair["scores"].items():
            ci = f"[{_num(s['ci_low'])}, {_num(s['ci_high'])}]" if s["ci_low"] is not None else "-"
            rows.append(
                (
                    Cell(pair["system_a"], code=True),
                    Cell(pair["system_b"], code=True),
                    Cell(name),
                    num(_num(s["value_a"])),
                    num(_num(s["value_b"])),
                    num(_num(s["difference"])),
                    num(ci),
                    num(_num(s["p_value"])),
                    num(str(s["n_prompts"] if s["n_prompts"] is not None else "-")),
                )
            )
    sections = [Section("", tables=[Table(columns, tuple(rows), align="lllrrrlrr")])]
    if doc.get("metric_origins"):
        from maxbench.registry import describe_origin

        plugins = "; ".join(f"metric {n}: {describe_origin(o)}" for n, o in doc["metric_origins"].items())
        sections.append(Section("", paragraphs=[Para("plugins: {}", (plugins,))]))
    return render_markdown(sections)
