"""Score a run directory (every system in it) or external text files, with intervals and tests.

``score_run`` writes ``RUN_DIR/scores.json``::

    {"format": "maxbench-scores/1", "run_id", "created", "generations_sha256", "suite",
     "bootstrap": {"n_resamples", "seed", "level", "method"},
     "versions": {...},
     "metrics": {<metric>: {"variant", "signature", "higher_is_better", "scores": [<score>...],
                            "display": {<score>: ScoreInfo.to_dict()},
                            "ranges": {<score>: [low, high]}}},  (null for an unbounded end)
     "systems": {<system>: {"n_texts", "n_prompts", "suite_prompts", "partial", "n_empty",
                            "notes": {<metric>: str}, "not_applicable": {<metric>: reason},
                            "scores": {<score>: {"metric", "value", "reason", "ci_low", "ci_high",
                                                 "ci_method", "higher_is_better", "signature",
                                                 "per_prompt": {<prompt_id>: value}}}}},
     "human": {"label", "signature", "n_prompts", "cut_words", "not_applicable": {<metric>: reason},
               "scores": {<score>: {... as a system's}}},
     "comparisons": {"baseline", "method", "systems": {<system>: {<score>: {"difference",
                     "ci_low", "ci_high", "ci_method", "p_value", "n_prompts"[, "test": "closeness"]}}}}}

``display`` is how each score is shown (``ScoreInfo``: goal, display name, scale), and ``ranges`` the
range each score's metric declares (``score_ranges``), both copied from the metric so that the
leaderboard and the frontier statistics need no metric code. ``human`` is the human row
(``maxbench.benchmark.metrics.human``): the suite's references scored by every metric that applies
to them, null with the reason for the others. A score whose goal is the human value is compared
with the baseline by its distance to the human row (``closeness_test``: ``"test": "closeness"``).

In a run over several base models, ``baseline`` is null and ``comparisons.baselines`` gives each
system's own baseline, the softmax of its base model with the same decoding (``model_baselines``).

A number that is not there is null with a ``reason``: undefined (a perplexity of no tokens,
an infinite perplexity) or not applicable (reference metrics on a suite without references:
the run's other metrics are still scored). ``suite_prompts`` is the suite's number of prompts
and ``partial`` says whether the system lacks some of its prompts or samples (null when the
run has no manifest to tell). Texts are grouped by system; references by prompt id; a
prompt's samples share its reference.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from maxbench.benchmark.metrics.base import METRICS, Metric, MetricResult, TextBatch, get_metric
from maxbench.benchmark.metrics.human import HUMAN_ROW, generation_words, references_batch
from maxbench.benchmark.metrics.human import signature as human_signature
from maxbench.benchmark.metrics.stats import (
    CI_METHOD,
    CLOSENESS_METHOD,
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    JACKKNIFE_METHOD,
    TEST_METHOD,
    bootstrap_ci,
    closeness_test,
    paired_test,
)
from maxbench.errors import MaxbenchError
from maxbench.provenance import versions

FORMAT = "maxbench-scores/1"


@dataclass
class ScoringOptions:
    metrics: list[str]
    n_resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    level: float = DEFAULT_LEVEL
    evaluator: str | None = None  # the model of the ppl metric (None: DEFAULT_EVALUATOR)
    device: str | None = None
    threads: int | None = None
    progress: bool = True
    #: the metrics are the default set (none named): a metric the batch is too small for
    #: (``Metric.too_small``: MAUVE on a suite of fewer than 20 references) is recorded as not applicable
    #: with its reason, and the command goes on; a metric named explicitly stops it with its error
    defaults: bool = False


def _log(options: ScoringOptions, msg: str) -> None:
    if options.progress:
        print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- reading inputs


def _decode(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise MaxbenchError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise MaxbenchError(f"{path} is a directory; give a file") from None
    except OSError as exc:
        raise MaxbenchError(f"cannot read {path}: {exc.strerror or exc}") from None
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data[:nul].count(b"\n") + 1
        raise MaxbenchError(f"{path} looks binary (NUL byte on line {line}); give UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise MaxbenchError(
            f"{path} line {line}: not UTF-8 (byte 0x{data[exc.start]:02x}); convert the file to UTF-8"
        ) from None


def read_texts(path: str | Path) -> list[dict]:
    """Texts of a file: JSONL (``.jsonl``/``.json``; one object per line with a string ``text``,
    other fields kept) or, for any other name, one text per line (an empty line is an empty text)."""
    path = Path(path)
    content = _decode(path)
    rows = []
    if path.suffix.lower() in (".jsonl", ".json"):
        for n, line in enumerate(content.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MaxbenchError(f"{path} line {n}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                raise MaxbenchError(f"{path} line {n}: expected a JSON object with a string field 'text'")
            rows.append(obj)
    else:
        lines = content.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the newline that ends the last line
        rows = [{"text": line.rstrip("\r")} for line in lines]
    if not rows:
        raise MaxbenchError(f"{path} holds no texts")
    return rows


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _system_strings_problem(manifest: dict) -> str | None:
    """Where a run's manifest contradicts its own system strings (a system's model or layer entry that
    its name does not hold), None when nowhere: the manifest was edited and cannot say what scored."""
    for name, entry in (manifest.get("systems") or {}).items():
        model, layer = entry.get("model"), entry.get("layer")
        adapter, adapter_params = entry.get("adapter"), entry.get("adapter_params") or {}
        if isinstance(model, str) and isinstance(adapter, str) and isinstance(adapter_params, dict):
            from maxbench.systems.adapters.base import adapter_suffix

            model += adapter_suffix(adapter, tuple(adapter_params.items()))  # the name's model part
        if isinstance(model, str) and not (name == model or name.startswith(f"{model}/")):
            return f"says system '{name}' has model '{model}', which its system string contradicts"
        if isinstance(model, str) and isinstance(layer, str):
            rest = name[len(model) + 1 :]
            if rest != layer and not rest.startswith((f"{layer}/", f"{layer}(")):  # parameters, e.g. graphmax(lam=1.0)
                return f"says system '{name}' has layer '{layer}', which its system string contradicts"
    return None


def check_suite(run_dir: Path, manifest: dict) -> None:
    """The suite hash the manifest records (and ``scores.json`` copies) must be the suite's: the
    identity's and, when the suite can still be loaded from where the run found it, the file's."""
    from maxbench.rundir import manifest_path

    suite = manifest.get("suite")
    if not isinstance(suite, dict):
        return
    ident = (manifest.get("identity") or {}).get("suite")
    where = manifest_path(run_dir)
    if isinstance(ident, dict):
        differ = [k for k in ("name", "version", "sha256", "n_items") if k in ident and ident[k] != suite.get(k)]
        if differ:
            raise MaxbenchError(
                f"{where} records two suites (its 'suite' and its identity's differ in {', '.join(differ)}); "
                "the manifest was edited: restore it or regenerate the run"
            )
    recorded = suite.get("sha256")
    now = _load_recorded(suite) if isinstance(recorded, str) else None
    if now is None:
        return  # nothing to check against
    if now.name == suite.get("name") and now.version == suite.get("version", now.version) and now.sha256 != recorded:
        raise MaxbenchError(
            f"{where} records suite '{now.name}' with sha256 {recorded[:12]}..., but the suite ({now.path}) has "
            f"sha256 {now.sha256[:12]}...; the suite or the manifest changed since the run: restore it, or "
            "regenerate the run"
        )
    if isinstance(suite.get("n_items"), int) and now.sha256 == recorded and suite["n_items"] != len(now.items):
        raise MaxbenchError(
            f"{where} records {suite['n_items']} prompts for suite '{now.name}', which has {len(now.items)}"
        )


def load_batches(run_dir: Path) -> tuple[dict, dict[str, TextBatch]]:
    """The run's manifest and one TextBatch per system (in the order systems first appear), read by
    the run folder's owner (``maxbench.rundir``)."""
    from maxbench.rundir import generations_path, manifest_path, read_generations, read_manifest

    manifest = read_manifest(run_dir)
    if manifest:
        why = _system_strings_problem(manifest)
        if why:
            raise MaxbenchError(f"{manifest_path(run_dir)} {why}; restore the manifest or regenerate the run")
        check_suite(Path(run_dir), manifest)
    numbered = read_generations(run_dir, numbered=True)
    gen_path = generations_path(run_dir)
    groups: dict[str, dict] = {}
    for n, row in numbered:
        system, pid = row["system"], row["prompt_id"]
        g = groups.setdefault(system, {"texts": [], "ids": [], "refs": {}, "prompts": {}, "ref_lp": {}, "vocab": None})
        if g["refs"].setdefault(pid, row["reference"]) != row["reference"]:
            raise MaxbenchError(f"{gen_path} row {n}: prompt '{pid}' has two different references")
        g["texts"].append(row["text"])
        g["ids"].append(pid)
        if isinstance(row.get("prompt"), str):
            g["prompts"][pid] = row["prompt"]
        if row.get("reference_logprobs") is not None:
            g["ref_lp"][pid] = row["reference_logprobs"]
            g["vocab"] = row.get("vocab_size", g["vocab"])
            if row.get("reference_stride") is not None:
                g["stride"] = row["reference_stride"]
    conditions, pool = run_conditions(manifest), run_reference_pool(manifest)
    # a suite without references (a TXT file) stores empty ones: scored, they would look like real zeros
    batches = {
        s: TextBatch(
            g["texts"],
            g["ids"],
            g["refs"] if any(r.strip() for r in g["refs"].values()) else None,
            g["prompts"] or None,
            g["ref_lp"] or None,
            g["vocab"],
            g.get("stride"),
            conditions,
            pool,
        )
        for s, g in groups.items()
    }
    return manifest, batches


def conditional_scoring(batches) -> bool:
    """Whether attr-acc joins a run's metrics by itself: its suite is conditional, with a categorical
    attribute that its corpus labels (``maxbench.benchmark.metrics.attributes.classified_attribute``)."""
    from maxbench.benchmark.metrics.attributes import classified_attribute

    return any(b.conditions is not None and classified_attribute(b.conditions)[0] for b in batches)


def _load_recorded(suite: dict):
    """The suite a manifest's ``suite`` entry names, loaded from where the run found it (its path, else
    the built-in of its name); None when it can no longer be found or loaded."""
    from maxbench.benchmark.data.suites import builtin_suites, load_suite
    from maxbench.rundir import recorded_file

    path, name = suite.get("path"), suite.get("name")
    on_disk = isinstance(path, str) and recorded_file(path).is_file()
    found = str(recorded_file(path)) if on_disk else name if name in builtin_suites() else None
    if found is None:
        return None
    try:
        return load_suite(found)
    except MaxbenchError:
        return None


def _recorded_suite(manifest: dict):
    """The suite a run's manifest records, loaded from where the run found it, when it still has the
    bytes the run recorded; None otherwise (a suite that moved or changed scores without it)."""
    suite = manifest.get("suite")
    now = _load_recorded(suite) if isinstance(suite, dict) else None
    return now if now is not None and now.sha256 == suite.get("sha256") else None


def run_reference_pool(manifest: dict):
    """Every text of the held-out split a run's suite was drawn from (``TextBatch.reference_pool``, for
    heldout-bleu): None when the suite names none (``Suite.heldout``) or can no longer be loaded."""
    from maxbench.benchmark.data.corpora import load_corpus
    from maxbench.benchmark.metrics.base import ReferencePool

    suite = _recorded_suite(manifest)
    if suite is None or not suite.heldout:
        return None
    texts = tuple(load_corpus(suite.heldout).test)
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()
    return ReferencePool(suite.heldout, digest, texts)


def run_conditions(manifest: dict):
    """The attributes of a run's conditional suite (``TextBatch.conditions``, for attr-acc): None for a
    suite without attributes, and for one that can no longer be loaded as the run recorded it."""
    from maxbench.benchmark.metrics.attributes import conditions_of

    if not isinstance(manifest.get("suite"), dict) or not isinstance(manifest["suite"].get("conditional"), dict):
        return None
    now = _recorded_suite(manifest)
    return conditions_of(now) if now is not None and now.conditional else None


# ---------------------------------------------------------------- scoring


def build_metrics(options: ScoringOptions) -> list:
    metrics = [
        get_metric(name, model=options.evaluator, device=options.device, threads=options.threads)
        for name in options.metrics
    ]
    check_score_names(metrics)
    return metrics


def check_score_names(metrics: Sequence[Metric]) -> None:
    """Two metrics that give a score of one name would overwrite each other in scores.json: refused,
    naming both (a plugin metric that subclasses a built-in must name its scores anew). Checked once,
    on the declared names, where the metrics are built (``build_metrics``): ``Metric.result`` holds a
    metric to the names it declares."""
    owner: dict[str, str] = {}
    for metric in metrics:
        for score in metric.score_ranges:
            if score in owner and owner[score] != metric.name:
                raise MaxbenchError(
                    f"metrics '{owner[score]}' and '{metric.name}' both give a score named '{score}'; "
                    f"rename the scores of '{metric.name}' (its score_ranges and compute) or leave one out"
                )
            owner[score] = metric.name


def score_batch(
    batch: TextBatch,
    metrics: Sequence[Metric],
    options: ScoringOptions,
    label: str,
    not_applicable: bool = False,
    errors: list[str] | None = None,
) -> list[MetricResult]:
    """Every metric on ``batch``. A metric that cannot score it stops with its one-line error, or,
    with ``not_applicable``, gives its scores as None with the reason, and the others go on. With
    ``errors`` (a list), a metric that fails on the batch (MAUVE on too few texts, an encoder that
    cannot be loaded) gives its scores as None with its error, which is appended there, and the
    other metrics go on: the caller writes what was computed, then stops with the first error. With
    ``options.defaults``, a metric the batch is too small for (``Metric.too_small``) is not applicable."""
    results = []
    for metric in metrics:
        t0 = time.perf_counter()
        why = metric.unavailable(batch) if not_applicable else None
        if not why and options.defaults:
            why = metric.too_small(batch)
        if why:
            results.append(metric.not_applicable(why))
        elif errors is None:
            results.append(metric.compute(batch))
        else:
            try:
                results.append(metric.compute(batch))
            except MaxbenchError as exc:
                errors.append(f"{label}: {exc}")
                why = f"not computed: {exc}"
                results.append(metric.not_applicable(why))
        _log(options, f"  {label}: {metric.name} ({f'n/a: {why}' if why else f'{time.perf_counter() - t0:.1f} s'})")
    return results


def _score_entries(results: list[MetricResult], options: ScoringOptions) -> dict:
    out = {}
    for res in results:
        for name, score in res.scores.items():
            entry = {
                "metric": res.metric,
                "value": score.value,
                "reason": score.reason if score.value is None else None,
                "ci_low": None,
                "ci_high": None,
                "ci_method": None,
                "higher_is_better": res.higher_is_better,
                "signature": res.signature,
            }
            if options.n_resamples > 0 and score.value is not None and score.interval is not None:
                entry["ci_low"], entry["ci_high"], entry["ci_method"] = score.interval
            elif options.n_resamples > 0 and score.value is not None and score.stats is not None:
                ci = bootstrap_ci(score.stats, options.n_resamples, options.seed, options.level, score.range)
                entry["ci_low"], entry["ci_high"] = ci.confidence_interval or (None, None)
                entry["ci_method"] = ci.method
            entry["per_prompt"] = score.stats.per_prompt() if score.stats is not None else {}
            out[name] = entry
    return out


def _metric_table(results: list[MetricResult]) -> dict:
    return {
        r.metric: {
            "variant": r.variant,
            "signature": r.signature,
            "higher_is_better": r.higher_is_better,
            "scores": list(r.scores),
        }
        for r in results
    }


def _bootstrap_info(options: ScoringOptions) -> dict:
    return {
        "n_resamples": options.n_resamples,
        "seed": options.seed,
        "level": options.level,
        "method": CI_METHOD,
        "method_for_type_counts": JACKKNIFE_METHOD + ", clipped to the score's range (distinct-n-corpus, uniq, "
        "kld, ms-jaccard: duplicated prompts in a bootstrap resample add no n-gram types)",
    }


SCORE_PACKAGES = (
    "maxbench",
    "numpy",
    "scipy",
    "sacrebleu",
    "nltk",
    "rouge-score",
    "bert-score",
    "mauve-text",
    "faiss-cpu",
    "scikit-learn",
    "sentence-transformers",
    "torch",
    "transformers",
)


def score_versions() -> dict:
    return versions(SCORE_PACKAGES)


def coverage(manifest: dict, batch: TextBatch) -> dict:
    """How much of the run's suite a system's texts cover: the suite's prompt count and whether
    some prompt or sample is missing (None for both when the manifest does not say)."""
    suite_prompts = (manifest.get("suite") or {}).get("n_items")
    samples = manifest.get("samples", 1)
    if not isinstance(suite_prompts, int) or not isinstance(samples, int):
        return {"suite_prompts": None, "partial": None}
    partial = len(batch.prompt_order) < suite_prompts or len(batch.texts) < suite_prompts * samples
    return {"suite_prompts": suite_prompts, "partial": partial}


def default_baseline(manifest: dict, systems: Sequence[str]) -> str | None:
    """The one softmax system of the run, if there is exactly one."""
    soft = [s for s in systems if manifest.get("systems", {}).get(s, {}).get("layer") == "softmax"]
    return soft[0] if len(soft) == 1 else None


def model_baselines(manifest: dict, systems: Sequence[str]) -> dict[str, str]:
    """Each system's baseline in a run over several base models: the softmax system of its own base
    model with the same decoding setting, or that model's only softmax system when none has the
    same decoding. A layer is then tested against its own model's plain distribution, never against
    another model's. Systems whose model has no such softmax system get no baseline."""
    info = manifest.get("systems", {})
    soft = [s for s in systems if info.get(s, {}).get("layer") == "softmax"]
    out = {}
    for system in systems:
        model, decoding = info.get(system, {}).get("model"), info.get(system, {}).get("decoding")
        own = [b for b in soft if info[b].get("model") == model]
        same = [b for b in own if info[b].get("decoding") == decoding]
        pick = same if len(same) == 1 else own if len(own) == 1 else []
        if pick and pick[0] != system:
            out[system] = pick[0]
    return out


def previous_baseline(run_dir: Path, systems: Sequence[str]) -> str | None:
    """The baseline the run's ``scores.json`` was scored against, when it is still one of its
    systems: a plain rescoring (``maxbench score RUN``) keeps a lineup's ``baseline`` or an earlier
    ``--baseline`` instead of falling back to the default. None without scores, or with scores that
    cannot be read (they are replaced)."""
    from maxbench.rundir import has_scores, read_scores

    if not has_scores(run_dir):
        return None
    try:
        comparisons = read_scores(run_dir, fresh=False).comparisons
    except MaxbenchError:
        return None
    baseline = comparisons.get("baseline") if isinstance(comparisons, dict) else None
    return baseline if isinstance(baseline, str) and baseline in systems else None


def baselines_of(manifest: dict, systems: Sequence[str], baseline: str | None) -> tuple[str | None, dict[str, str]]:
    """(the run's one baseline or None, each system's baseline). A baseline that is given, or a run
    of one base model, compares every system with one baseline (by default the run's one softmax
    system); a run of several base models compares each system with its own model's softmax
    (``model_baselines``)."""
    models = {manifest.get("systems", {}).get(s, {}).get("model") for s in systems}
    if baseline is None and len(models) > 1:
        return None, model_baselines(manifest, systems)
    baseline = baseline or default_baseline(manifest, systems)
    return baseline, {s: baseline for s in systems if baseline is not None and s != baseline}


def _with_origin(signature: str, origin: dict | None) -> str:
    return signature if origin is None else f"{signature}|origin={json.dumps(origin, sort_keys=True)}"


def plugin_code(manifest: dict, system: str) -> dict:
    """The plugin origins of a system's layer and model as its run's manifest recorded them (none for
    built-ins, so that their score cache keys stay what they were)."""
    from maxbench.registry import is_plugin_origin

    entry = (manifest.get("systems") or {}).get(system) if isinstance(manifest.get("systems"), dict) else None
    code = entry.get("code") if isinstance(entry, dict) else None
    if not isinstance(code, dict):
        return {}
    return {part: origin for part, origin in code.items() if is_plugin_origin(origin)}


def score_run(
    run_dir: str | Path, options: ScoringOptions, baseline: str | None = None, use_cache: bool = True
) -> dict:
    """Score every system of a run and write ``scores.json`` there (atomically); returns its content.

    A system whose rows, metrics, settings and scoring code are unchanged since the last scoring
    takes its scores from the run's score cache (``score_cache``), and so does its comparison
    with a baseline that is unchanged too: only what changed is computed. ``use_cache=False``
    computes everything (the file is the same bytes either way). When nothing but the time would
    differ, the existing ``scores.json`` is kept as it is. Without ``baseline``, a run scored before
    keeps the baseline it was scored against (``previous_baseline``); a run scored for the first time
    gets ``baselines_of``'s default."""
    from maxbench.benchmark.metrics.score_cache import ScoreCache, comparison_key, system_key
    from maxbench.rundir import generations_sha256, scores_path, write_scores

    run_dir = Path(run_dir)
    manifest, batches = load_batches(run_dir)
    if baseline is not None and baseline not in batches:
        raise MaxbenchError(f"--baseline '{baseline}' is not a system of this run; systems: {', '.join(batches)}")
    if baseline is None:
        baseline = previous_baseline(run_dir, list(batches))
    baseline, baselines = baselines_of(manifest, list(batches), baseline)
    metrics = build_metrics(options)
    if any(b.reference_logprobs for b in batches.values()) and "ref-ppl" not in options.metrics:
        metrics.append(get_metric("ref-ppl"))
    if "attr-acc" not in options.metrics and conditional_scoring(batches.values()):
        metrics.append(get_metric("attr-acc"))  # a conditional suite's run: whether texts keep to its attributes
    check_score_names(metrics)  # the metrics that joined by themselves too
    versions_now = score_versions()
    from maxbench.rundir import read_generations

    words, how = generation_words(batches.values(), read_generations(run_dir))
    human_sig = human_signature(words, how)
    doc = {
        "format": FORMAT,
        "run_id": manifest.get("run_id", run_dir.name),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "generations_sha256": generations_sha256(run_dir),
        "suite": manifest.get("suite"),
        "bootstrap": _bootstrap_info(options),
        "versions": versions_now,
        "metrics": {},
        "systems": {},
    }
    cache = ScoreCache(run_dir)
    settings = {"n_resamples": options.n_resamples, "seed": options.seed, "level": options.level}
    # a plugin's origin is part of what a score depends on (docs/plugins.md); built-ins add nothing
    plugin_metrics = {m.name: METRICS.origin(m.name) for m in metrics if not METRICS.is_builtin(m.name)}
    signatures = [_with_origin(m.cache_signature(), plugin_metrics.get(m.name)) for m in metrics] if use_cache else []
    keys: dict[str, str] = {}
    all_results: dict[str, list[MetricResult]] = {}
    errors: list[str] = []  # metrics that could not run: their scores are null, the rest is written

    baseline_set = set(baselines.values())
    # a plugin metric's statistics are not kept: nothing says its finalize depends on its options alone
    keep_stats = use_cache and all(METRICS.is_builtin(m.name) for m in metrics)

    def results_of(system: str) -> list[MetricResult]:
        if system not in all_results:
            batch = batches[system]
            _log(options, f"scoring {system} ({len(batch.texts)} texts, {len(batch.prompt_order)} prompts)")
            failed_before = len(errors)
            all_results[system] = score_batch(batch, metrics, options, system, not_applicable=True, errors=errors)
            if keep_stats and system in baseline_set and len(errors) == failed_before:
                cache.put_stats(keys[system], all_results[system])  # for systems added later (score_cache)
        return all_results[system]

    def statistics_of(system: str) -> list[MetricResult]:
        """What a paired test needs of ``system``: its results, or, when its scores came from the cache,
        its statistics from the cache (``cached_statistics``); computed again only without them."""
        if system not in all_results and keep_stats:
            stored = cache.get_stats(keys[system])
            reused = cached_statistics(batches[system], metrics, doc["systems"][system], stored)
            if reused is not None:
                _log(options, f"scoring {system}: statistics for the paired tests from the score cache")
                return reused
        return results_of(system)

    human_key, human_computed = None, {}
    references = references_batch(batches.values(), words)
    human_metrics = [m for m in metrics if m.human_row() is None]
    closeness = {n for m in metrics for n, i in m.score_info.items() if i.goal == "human"}

    def human_results() -> list[MetricResult] | None:
        """The human row's results for the closeness tests: computed, or rebuilt from the cache."""
        if references is None or not human_metrics:
            return None
        if "results" not in human_computed:
            reused = None
            if keep_stats:
                reused = cached_statistics(references, human_metrics, stored, cache.get_stats(human_key))
            human_computed["results"] = reused or score_batch(
                references, human_metrics, options, HUMAN_ROW, not_applicable=True
            )
        return human_computed["results"]

    if references is not None:
        human_key = system_key(references, {"human": human_sig}, signatures, settings, versions_now)
        stored = (cache.get(human_key) if use_cache else None) if human_metrics else {"scores": {}}
        if stored is None:
            _log(options, f"scoring {HUMAN_ROW} ({len(references.texts)} references, {human_sig})")
            failed_before = len(errors)
            results = score_batch(references, human_metrics, options, HUMAN_ROW, not_applicable=True, errors=errors)
            human_computed["results"] = results
            stored = {
                "scores": _score_entries(results, options),
                "notes": {r.metric: r.notes for r in results if r.notes},
            }
            if use_cache and len(errors) == failed_before:
                stored = json.loads(json.dumps(stored, allow_nan=False))
                cache.put(human_key, stored)
                if keep_stats:
                    cache.put_stats(human_key, results)
        else:
            _log(options, f"scoring {HUMAN_ROW}: unchanged, from the score cache")
        doc["human"] = _human_entry(stored, metrics, references, words, human_sig)

    for system, batch in batches.items():
        cover = coverage(manifest, batch)
        code = plugin_code(manifest, system)
        extra = {"code": code} if code else {}
        if options.defaults:  # a named metric the batch is too small for is an error, not a cached n/a
            left_out = [m.name for m in metrics if m.too_small(batch)]
            extra |= {"left_out": left_out} if left_out else {}
        keys[system] = system_key(batch, cover, signatures, settings | extra, versions_now)
        body = cache.get(keys[system]) if use_cache else None
        if body is None:
            failed_before = len(errors)
            results = results_of(system)
            body = {
                "metrics": _metric_table(results),
                "system": {
                    "n_texts": len(batch.texts),
                    "n_prompts": len(batch.prompt_order),
                    **cover,
                    "n_empty": sum(1 for t in batch.texts if not t.strip()),
                    "notes": {r.metric: r.notes for r in results if r.notes},
                    "not_applicable": {r.metric: r.not_applicable for r in results if r.not_applicable},
                    "scores": _score_entries(results, options),
                },
            }
            if use_cache and len(errors) == failed_before:  # a metric that failed is tried again next time
                body = json.loads(json.dumps(body, allow_nan=False))  # what the cache gives back next time
                cache.put(keys[system], body)
        else:
            _log(options, f"scoring {system}: unchanged, from the score cache")
        doc["metrics"].update(body["metrics"])
        for name, origin in plugin_metrics.items():
            if name in doc["metrics"]:
                doc["metrics"][name]["origin"] = origin
        doc["systems"][system] = body["system"]
    for m in metrics:  # how each score is shown: the metric's declaration now, not the cache's
        if m.name in doc["metrics"]:
            doc["metrics"][m.name]["display"] = {n: i.to_dict() for n, i in m.score_info.items()}
            doc["metrics"][m.name]["ranges"] = {
                n: [b if math.isfinite(b) else None for b in r] for n, r in m.score_ranges.items()
            }
    if "human" in doc:  # after the systems in the file, as in the tables
        doc["human"] = doc.pop("human")
    if baselines:
        out = compare_header(baselines, options, baseline)
        for system in batches:
            if system not in baselines:
                continue
            base = baselines[system]
            key = comparison_key(system, keys[system], base, keys[base], settings | {"human": human_key})
            rows = cache.get(key) if use_cache else None
            if rows is None:
                rows = compare_one(statistics_of(system), statistics_of(base), options, human_results(), closeness)
                if use_cache:
                    rows = json.loads(json.dumps(rows, allow_nan=False))
                    cache.put(key, rows)
            out["systems"][system] = rows
        doc["comparisons"] = out
    if use_cache:
        cache.prune()
    doc = write_scores(run_dir, doc)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise MaxbenchError(f"{errors[0]}{more}; every other score is written to {scores_path(run_dir)}")
    return doc


#: the prompts of the small batch ``cached_statistics`` computes a metric on
STATS_PROBE_PROMPTS = 2


def cached_statistics(
    batch: TextBatch, metrics: Sequence[Metric], entry: dict, stored: dict | None
) -> list[MetricResult] | None:
    """One system's results for paired tests, rebuilt from the score cache without scoring its texts:
    ``stored`` is what ``ScoreCache.get_stats`` kept (the blocks of each score's ``PromptStats``) and
    ``entry`` the system's cached part of scores.json. What turns blocks into a score (``finalize``)
    is code, not data: it is taken from the same metric computed on the batch's first
    ``STATS_PROBE_PROMPTS`` prompts. Each rebuilt statistic must give back the value the statistics
    had when they were kept and every cached per-prompt value, bit for bit, or None is returned (the
    caller then computes the scores)."""
    from maxbench.benchmark.metrics.base import Score
    from maxbench.benchmark.metrics.stats import PromptStats

    if stored is None:
        return None
    scores = entry.get("scores") or {}
    probe = _first_prompts(batch, STATS_PROBE_PROMPTS)
    out = []
    for metric in metrics:
        names = [n for n, e in scores.items() if e.get("metric") == metric.name]
        if not names or any(n not in stored for n in names):
            return None
        rebuilt = {}
        wanted = [n for n in names if scores[n]["value"] is not None and stored[n] is not None]
        probed = None
        if wanted:
            try:
                probed = metric.compute(probe)
            except Exception:  # noqa: BLE001 - e.g. a metric that needs more texts: computed in full instead
                return None
        for n in names:
            value = scores[n]["value"]
            if n not in wanted:
                rebuilt[n] = Score(n, value, None)
                continue
            finalize = getattr(probed.scores.get(n), "stats", None)
            if finalize is None:
                return None
            ids, blocks, keys, ok, stored_value = stored[n]
            stats = PromptStats(ids, blocks, finalize.finalize, keys, ok)
            try:
                same = float(stats.value()).hex() == stored_value and stats.per_prompt() == scores[n].get("per_prompt")
            except Exception:  # noqa: BLE001 - blocks that do not fit: not used
                return None
            if not same:
                return None
            rebuilt[n] = Score(n, value, stats)
        out.append(MetricResult(metric.name, "", "", metric.higher_is_better, rebuilt))
    return out


def _first_prompts(batch: TextBatch, n: int) -> TextBatch:
    """The texts of ``batch``'s first ``n`` prompts, with what belongs to them."""
    keep = set(batch.prompt_order[:n])
    rows = [(t, p) for t, p in zip(batch.texts, batch.prompt_ids) if p in keep]

    def part(d):
        return None if d is None else {p: v for p, v in d.items() if p in keep}

    return replace(
        batch,
        texts=[t for t, _ in rows],
        prompt_ids=[p for _, p in rows],
        references=part(batch.references),
        prompts=part(batch.prompts),
        reference_logprobs=part(batch.reference_logprobs),
    )


def compare_header(baselines: dict[str, str], options: ScoringOptions, baseline: str | None = None) -> dict:
    """The comparisons section without its rows: test settings and the baseline(s)."""
    out = {
        "baseline": baseline,
        "method": TEST_METHOD,
        "n_resamples": options.n_resamples,
        "seed": options.seed,
        "level": options.level,
        "systems": {},
    }
    if baseline is None:
        out["baselines"] = dict(baselines)
    return out


def compare_one(
    results: list[MetricResult],
    base_results: list[MetricResult],
    options: ScoringOptions,
    human_results: list[MetricResult] | None = None,
    closeness: set[str] | frozenset = frozenset(),
) -> dict:
    """One system against its baseline, score by score, on the prompts both have. A score in
    ``closeness`` (its goal is the human value) with a human value in ``human_results`` is compared
    by its distance to it (``closeness_test``, the row's ``test`` says so); every other score by
    its difference (``paired_test``)."""
    base = {name: s for r in base_results for name, s in r.scores.items()}
    human = {name: s for r in human_results or () for name, s in r.scores.items()}
    rows = {}
    for r in results:
        for name, score in r.scores.items():
            if name not in base or score.value is None or base[name].value is None:
                continue
            if score.stats is None or base[name].stats is None:
                continue  # a score without per-prompt statistics (MAUVE) has no paired test
            h = human.get(name) if name in closeness else None
            settings = (options.n_resamples or DEFAULT_RESAMPLES, options.seed, options.level)
            try:
                if h is not None and h.value is not None and h.stats is not None:
                    c = closeness_test(score.stats, base[name].stats, h.stats, *settings)
                else:
                    c = paired_test(score.stats, base[name].stats, *settings)
            except ValueError:  # no shared prompt
                continue
            ci_low, ci_high = c.confidence_interval or (None, None)
            rows[name] = {
                "difference": c.difference,
                "ci_low": ci_low,
                "ci_high": ci_high,
                "ci_method": c.ci_method,
                "p_value": c.p_value,
                "n_prompts": c.n_prompts,
            }
            if c.method == CLOSENESS_METHOD:
                rows[name]["test"] = "closeness"
    return rows


def _human_entry(stored: dict, metrics: Sequence[Metric], references: TextBatch, words, sig: str) -> dict:
    """The human row as scores.json keeps it: the references' scores (``stored``), and for every
    metric that does not apply to them its scores as null with the reason (``Metric.human_row``)."""
    scores = dict(stored.get("scores") or {})
    not_applicable = {}
    for m in metrics:
        why = m.human_row()
        if why is None:
            continue
        not_applicable[m.name] = why
        for n in m.score_ranges:
            scores[n] = {"metric": m.name, "value": None, "reason": why, "ci_low": None, "ci_high": None}
    return {
        "label": HUMAN_ROW,
        "signature": sig,
        "n_prompts": len(references.prompt_order),
        "cut_words": words,
        "notes": stored.get("notes") or {},
        "not_applicable": not_applicable,
        "scores": scores,
    }


def score_files(generations: str | Path, references: str | Path | None, options: ScoringOptions) -> dict:
    """Score a file of generated texts, optionally against a file with one reference per text."""
    generations = Path(generations)
    gen_rows = read_texts(generations)
    refs = None
    if references is not None:
        references = Path(references)
        ref_rows = read_texts(references)
        if len(ref_rows) != len(gen_rows):
            raise MaxbenchError(
                f"{generations} has {len(gen_rows)} texts but {references} has {len(ref_rows)}; "
                f"give exactly one reference per generated text, in the same order"
            )
        refs = [r["text"] for r in ref_rows]
        if not any(r.strip() for r in refs):
            raise MaxbenchError(f"{references} holds only empty references; give the reference texts")
    metrics = build_metrics(options)
    ids = [str(i) for i in range(1, len(gen_rows) + 1)]  # one prompt per line: resampling is over lines
    prompts = {i: r["prompt"] for i, r in zip(ids, gen_rows) if isinstance(r.get("prompt"), str)}
    batch = TextBatch([r["text"] for r in gen_rows], ids, dict(zip(ids, refs)) if refs else None, prompts or None)
    for metric in metrics:  # every refusal before any metric spends time
        metric.require(batch)
    results = score_batch(batch, metrics, options, generations.name)
    scores = _score_entries(results, options)
    for entry in scores.values():
        entry.pop("per_prompt")
    return {
        "format": FORMAT,
        "generations": str(generations),
        "generations_sha256": _sha256(generations),
        "references": str(references) if references else None,
        "references_sha256": _sha256(references) if references else None,
        "n_texts": len(gen_rows),
        "n_empty": sum(1 for r in gen_rows if not r["text"].strip()),
        "bootstrap": _bootstrap_info(options),
        "versions": score_versions(),
        "metrics": _metric_table(results),
        "notes": {r.metric: r.notes for r in results if r.notes},
        "scores": scores,
    }
