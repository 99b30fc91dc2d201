"""A paper's protocol as ordinary runs of ``benchmark/run/runner.py``, and running them.

Each (base model, corpus, fold) is one run directory under ``<out>/runs/`` (committable: not
under the git-ignored ``results/runs/``): its suite (a fold suite written to ``<out>/suites/`` or
a built-in one), its fitting corpus (the fold view, or the corpus itself), the protocol's systems
(``first_fold_systems`` only in fold 0 unless ``--full``) and the paper's decoding. Generation is
the runner's: resumable after any interruption, byte-identical when finished, and sharded with
``--shard i/n`` (each run's batches are split the same way). Scoring is ``score_run`` with the
protocol's metrics, skipped when ``scores.json`` already scores the same generations and metrics.
The fit meta of every trained head a run uses (its training history among it) is copied beside the
runs, to ``<out>/heads/<run>/`` (``record_heads``): the heads stay in the cache, too large to commit;
so is each adapter's training meta (``record_adapters``: ``<model>.json``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from maxbench.benchmark.reproduce.papers import Paper
from maxbench.errors import MaxbenchError

if TYPE_CHECKING:
    from maxbench.rundir import RunPlan

#: seconds per prompt for 64 new tokens on one CPU thread (SmolLM2's generation times on 16 food-review prompts,
#: batch 16, in docs/performance-log.md's section on the second model),
#: per layer, for SmolLM2; Gemma costs GEMMA_FACTOR times as much; ref-ppl and scoring add SCORE_S
SECONDS_PER_PROMPT = {
    "softmax": 0.9,
    "sparsemax": 1.0,
    "graphmax": 1.2,
    "graphmax-paper": 1.8,
    "kerbs": 1.1,
    "posg": 1.5,
    "posg-tag-topk": 5.7,  # top-k POS sampling (POSG's protocol: tag_topk=20; 2,189 CPU s for 192 x 128 tokens)
}
GEMMA_FACTOR = 3.6
SCORE_S = 0.6
#: one-off fitting per (model, fitting corpus, layer options): graph, KerBS head, its fine-tuned-softmax
#: control, POS head (SmolLM2, Gemma); KerBS and ft-softmax are CPU seconds of one fit on one thread
#: (hidden-state preparation, training, held-out evaluation), measured for issue 51
FIT_S = {"graphmax": (30, 60), "kerbs": (450, 1100), "ft-softmax": (380, 1000), "posg": (90, 600)}
#: seconds to train an adapter for 50 steps of 8 texts of at most 128 tokens on one thread, SmolLM2, by
#: adapter (the fit rows of the FCTG reproduction's timings.jsonl, wall seconds, 2026-11-29: LoRA 351-371 s,
#: prefix-tuning 374 s and NRP 557 s of CPU in their metas; FCTG 1,943-2,319 s: its 50 steps, about 16 CPU s
#: each, plus the gate's six probes of 10 steps and their validation passes); an adapter not listed:
#: ADAPTER_OTHER_S; scaled by ``steps``
ADAPTER_S = {"lora": 380, "prefix": 390, "nrp": 570, "fctg": 2300}
ADAPTER_OTHER_S = 600


@dataclass
class Options:
    models: list[str] | None = None
    corpora: list[str] | None = None
    folds: int | None = None
    folds_run: int | None = None
    prompts: int | None = None
    full: bool = False
    roles: list[str] | None = None  # generate only these system roles (a first piece of a long protocol)


@dataclass
class RunSpec:
    """One run of the protocol: where, what, and which system plays which role."""

    model: str
    corpus: str
    fold: int | None
    plan: RunPlan
    roles: dict[str, str] = field(default_factory=dict)  # role -> system name
    baseline: str = ""
    #: the roles the protocol plans for this run when ``--roles`` generates a piece of it (else empty):
    #: a cell whose role is not in this piece is partial, not missing
    planned: tuple = ()

    @property
    def run_dir(self) -> Path:
        return self.plan.run_dir


def _setting(paper: Paper, opts: Options, key: str):
    full = paper.protocol.get("full", {}) if opts.full else {}
    return full.get(key, paper.protocol.get(key))


def _subset(given: list[str] | None, known: list[str], what: str) -> list[str]:
    from maxbench.registry import unknown_name

    if not given:
        return list(known)
    for g in given:
        if g not in known:
            raise unknown_name(what, g, known)
    return [k for k in known if k in given]


def plan_runs(paper: Paper, opts: Options, out: Path) -> list[RunSpec]:
    """Every run of the protocol (checked before anything is written but the fold suites)."""
    from maxbench.benchmark.data.suites import load_suite
    from maxbench.benchmark.reproduce.folds import fold_items, heldout_items, suite_name, write_suite
    from maxbench.rundir import RunPlan
    from maxbench.systems.system_strings import parse_system

    proto = paper.protocol
    models = _subset(opts.models, proto["models"], "model")
    corpora = _subset(opts.corpora, proto["corpora"], "corpus")
    k = proto.get("folds", 0)
    if opts.folds is not None:
        if not k:
            raise MaxbenchError(
                f"the {paper.name} protocol uses the corpus's own held-out split, not folds; drop --folds"
            )
        k = opts.folds
    if k and k < 2:
        raise MaxbenchError(f"--folds must be at least 2 (cross-validation needs a held-out fold), got {k}")
    prompts = opts.prompts if opts.prompts is not None else _setting(paper, opts, "prompts") or 0
    if prompts < 0:
        raise MaxbenchError(f"--prompts must be >= 0 (0: every usable text of the fold), got {prompts}")
    per_model = _setting(paper, opts, "folds_run") or {}
    first_only = _setting(paper, opts, "first_fold_only")
    first_only = True if first_only is None else first_only
    seed = proto.get("seed", 1)
    from maxbench.benchmark.data.corpora import fold_view
    from maxbench.benchmark.reproduce.papers import SETTING_SEP, all_roles, sensitivity_roles

    matched = matched_roles(paper, opts.roles or [])
    if opts.roles:
        known = list(all_roles(proto)) + list(sensitivity_roles(proto)) + [m.id for m in paper.matched]
        known += [r for m in paper.matched for r in m.point_roles()]
        _subset(opts.roles, known, "system role (or [[matched]] entry)")
    specs: list[tuple] = []
    for model in models:
        n_run = min(k, opts.folds_run or per_model.get(model, k)) if k else 0
        for corpus in corpora:
            for fold in range(n_run) if k else [None]:
                roles = dict(proto["systems"]) | dict((proto.get("corpus_systems") or {}).get(corpus, {}))
                roles |= dict((proto.get("model_systems") or {}).get(model, {}))
                if fold in (0, None) or not first_only:
                    roles |= dict(proto.get("first_fold_systems", {}))
                sens = proto.get("sensitivity") or {}
                if model in sens.get("models", []) and corpus in sens.get("corpora", []):
                    roles |= sensitivity_roles(proto)  # every fold: the settings are judged over folds
                if fold in (0, None):  # a matched entry's sweep points, named by --roles: the first fold
                    roles |= {r: layer for r, (m, c, layer) in matched.items() if model in m and corpus in c}
                full = dict(roles)
                if opts.roles:  # the baseline stays: every comparison of the run is against it
                    keep = set(opts.roles) | {proto["baseline"]} | set(matched)
                    roles = {k: v for k, v in roles.items() if k in keep or k.split(SETTING_SEP)[0] in keep}
                if not roles:
                    continue
                specs.append((model, corpus, fold, roles, full))
    suites = {}
    if k:  # every fold suite is checked before any is written
        for corpus in corpora:
            for fold in sorted({f for _, c, f, _, _ in specs if c == corpus}):
                items = fold_items(corpus, fold, k, seed, prompts, proto.get("suite_kind", "review"))
                suites[(corpus, fold)] = items
        folder = out / "suites"
        folder.mkdir(parents=True, exist_ok=True)
        for (corpus, fold), items in suites.items():
            name = f"{suite_name(corpus, fold, k, seed)}-n{len(items)}"  # the size too: --full writes its own
            suites[(corpus, fold)] = load_suite(
                str(
                    write_suite(
                        items,
                        name,
                        folder,
                        f"fold {fold} of {k} of {corpus} (seed {seed})",
                        corpus,
                        fold_view(corpus, fold, k, seed),
                    )
                )
            )
    if not k:  # a fixed held-out split: a built-in suite, or one built from the corpus's test split
        for corpus in corpora:
            if proto["suites"][corpus] == "heldout":
                items = heldout_items(corpus, prompts, proto.get("suite_kind", "windows"))
                suites[(corpus, None)] = items
        for corpus in corpora:
            if (corpus, None) in suites:
                name = f"{corpus}-heldout-n{len(suites[(corpus, None)])}"
                folder = out / "suites"
                folder.mkdir(parents=True, exist_ok=True)
                manifest = write_suite(
                    suites[(corpus, None)], name, folder, f"held-out split of {corpus}", corpus, corpus
                )
                suites[(corpus, None)] = load_suite(str(manifest))
    runs = []
    for model, corpus, fold, roles, full in specs:
        if fold is None:
            suite = suites.get((corpus, None)) or load_suite(proto["suites"][corpus])
            fit_corpus, run_id = corpus, f"{model}-{corpus}"
            if (corpus, None) in suites:  # a suite built here: its size is part of the run's name
                run_id += f"-n{len(suite.items)}"
        else:
            suite = suites[(corpus, fold)]
            fit_corpus = fold_view(corpus, fold, k, seed)
            run_id = f"{model}-{corpus}-fold{fold}of{k}-n{len(suite.items)}"
        if opts.roles:  # a piece never takes systems out of a run that has them (their rows stay in use)
            have = set(_manifest_systems(out / "runs" / run_id))
            for role, layer in full.items():
                if role not in roles and parse_system(system_string(model, layer)).name in have:
                    roles[role] = layer
            roles = {k: roles[k] for k in full if k in roles}  # the protocol's order
        systems = {role: parse_system(system_string(model, layer)) for role, layer in roles.items()}
        plan = RunPlan(
            run_dir=out / "runs" / run_id,
            suite=suite,
            systems=list({s.name: s for s in systems.values()}.values()),  # two roles may share a system
            samples=1,
            seed=proto.get("seed", 1234),
            batch_size=proto.get("batch_size", 16),
            corpus=fit_corpus,
            lineup=f"reproduce-{paper.name}",
        )
        names = {role: s.name for role, s in systems.items()}
        planned = tuple(full) if set(full) != set(roles) else ()
        runs.append(RunSpec(model, corpus, fold, plan, names, names[proto["baseline"]], planned))
    return runs


def matched_roles(paper: Paper, named: list[str]) -> dict[str, tuple]:
    """The sweep points of the ``[[matched]]`` entries that ``--roles`` names (by the entry's id or by
    the point's role, ``ROLE~OPTION=VALUE``): role -> (its base models, its corpora, its LAYER/DECODING).
    They are planned only when named: a sensitivity reading, not the protocol's own work."""
    from maxbench.benchmark.run.lineup import sweep_point

    roles = paper.roles()
    out = {}
    for spec in paper.matched:
        for name, (role, knob, value) in spec.point_roles().items():
            if spec.id not in named and name not in named:
                continue
            model = spec.models[0]
            point = sweep_point(system_string(model, roles[role]), knob, value).name
            layer = point[len(model) :].removeprefix("/")  # the point's LAYER/DECODING (or +ADAPTER/...)
            out[name] = (spec.models, spec.corpora, layer)
    return out


def _manifest_systems(run_dir: Path) -> list[str]:
    """The systems an existing run's manifest lists ([] for a new run or an unreadable manifest)."""
    from maxbench.rundir import read_manifest

    try:
        return list(read_manifest(run_dir).get("systems") or [])
    except MaxbenchError:
        return []


def system_string(model: str, role: str) -> str:
    """The system of a protocol role on a base model: ``MODEL/LAYER/DECODING``, or, for a role that
    starts with an adapter (``+fctg(mu=0.5)/softmax/top_k=40``), ``MODEL+ADAPTER/LAYER/DECODING``."""
    return f"{model}{role}" if role.startswith("+") else f"{model}/{role}"


def check_metrics(paper: Paper) -> list[str]:
    """The protocol's metrics, each registered, and every score a claim names computed by one of
    them (a ratio or convergence claim reads the runs' timings or generations instead); a missing
    metric or an unknown score is one line."""
    from maxbench.benchmark.metrics.base import METRICS, get_metric
    from maxbench.benchmark.reproduce.kinds import kind_of
    from maxbench.registry import unknown_name

    metrics = list(paper.protocol.get("metrics", []))
    for m in metrics:
        if m not in METRICS:
            raise MaxbenchError(
                f"the {paper.name} protocol needs metric '{m}', which is not registered in this installation "
                f"(the papers' metric variants); known metrics: {', '.join(METRICS.names())}"
            )
    # ref-ppl is scored beside the protocol's metrics whenever a run records the references'
    # log-probabilities (score_run), which every reproduction run does
    computed = {score: m for m in [*metrics, "ref-ppl"] for score in get_metric(m).score_ranges}
    for claim in paper.claims:
        if not claim.runnable or not kind_of(claim.kind).reads_scores:
            continue
        for score in claim.scores + claim.also + claim.against:
            if score not in computed:
                raise MaxbenchError(
                    f"paper file {paper.path}, claim '{claim.id}': {unknown_name('score', score, sorted(computed))} "
                    f"(the scores of the protocol's metrics: {', '.join(metrics)})"
                )
    for spec in paper.matched:
        for score in (spec.quality, spec.match):
            if score not in computed:
                raise MaxbenchError(
                    f"paper file {paper.path}, matched '{spec.id}': {unknown_name('score', score, sorted(computed))} "
                    f"(the scores of the protocol's metrics: {', '.join(metrics)})"
                )
    return metrics


def check_controls(paper: Paper, out: Path) -> None:
    """Every control run a claim names is a run folder under ``out/runs/`` (one line if not)."""
    from maxbench.rundir import has_generations

    for claim in paper.claims:
        for run in claim.controls:
            if not has_generations(out / "runs" / run):
                raise MaxbenchError(
                    f"paper file {paper.path}, claim '{claim.id}': control run '{run}' is missing "
                    f"({out / 'runs' / run} has no generations.jsonl); run it first or remove it from 'controls'"
                )


def _rows_done(run_dir: Path) -> dict[str, int]:
    """How many rows each system already has in a run (its generations file and shard files)."""
    from collections import Counter

    from maxbench.rundir import generation_files, read_run_rows

    done: Counter = Counter()
    for path in generation_files(run_dir):
        if path.is_file():
            try:
                done.update(row.get("system") for _, row in read_run_rows(path))
            except MaxbenchError:
                continue  # a damaged file: the run itself says so when it resumes
    return dict(done)


def estimate_seconds(runs: list[RunSpec], remaining: bool = False) -> float:
    """A rough wall-time estimate on one thread (see SECONDS_PER_PROMPT): generation, reference
    perplexity and scoring of every system, plus one fit per (model, fitting corpus, layer) and one
    training per adapter. ``remaining``: only the rows a run does not have yet (and the fits and
    training of systems without any row), for resuming a long protocol."""
    total, fitted = 0.0, set()
    for run in runs:
        gemma = GEMMA_FACTOR if "gemma" in run.model else 1.0
        n = len(run.plan.suite.items) * run.plan.samples
        done = _rows_done(run.run_dir) if remaining else {}
        for system in run.plan.systems:
            todo = max(n - done.get(system.name, 0), 0)
            if not todo:
                continue
            layer = system.layer
            if layer == "graphmax" and "solver=paper" in system.name:
                layer = "graphmax-paper"
            elif layer == "posg" and "tag_topk" in system.name:
                layer = "posg-tag-topk"
            per = SECONDS_PER_PROMPT.get(layer, 1.2) * system.decoding.max_new_tokens / 64
            total += todo * (per * gemma + SCORE_S)
            started = todo < n  # its head or adapter exists already
            fit_key = (run.model, run.plan.corpus, system.layer, tuple(system.params))
            if system.layer in FIT_S and fit_key not in fitted and not started:
                fitted.add(fit_key)  # each seed or option of a layer is its own fit
                total += FIT_S[system.layer][1 if gemma > 1 else 0]
            if system.adapter and (run.plan.corpus, system.model_key) not in fitted and not started:
                fitted.add((run.plan.corpus, system.model_key))
                steps = dict(system.adapter_params).get("steps", 50)
                total += ADAPTER_S.get(system.adapter, ADAPTER_OTHER_S) * gemma * steps / 50
    return total


#: the folder, beside ``runs/``, that keeps each run's trained heads' fit meta
HEADS = "heads"
#: meta fields that describe this machine's cache rather than the head
_LOCAL_META = ("path", "loaded_from_cache")


def read_json_object(path: Path) -> dict | None:
    """The JSON object in ``path``, or None (missing, unreadable, not JSON, not an object)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def head_meta_file(out: Path, run_id: str, system) -> Path:
    """Where a run's head of ``system`` keeps its fit meta: ``<out>/heads/<run>/<layer>[-<key><value>...].json``
    (``kerbs.json``, ``kerbs-seed1.json``, ``ft-softmax-seed2.json``; options at their defaults are not
    in the system's name, so not in the file's)."""
    name = system.layer + "".join(f"-{k}{v}" for k, v in system.params)
    return out / HEADS / run_id / f"{name}.json"


def record_heads(run: RunSpec) -> list[str]:
    """Copy the fit meta (identity, training history, held-out perplexities, times) of every trained
    head the run's manifest records (``resources``: ``<layer>_head`` -> sha256) from the head cache to
    ``<out>/heads/<run>/`` (:func:`head_meta_file`), so the history of each head behind the run's rows is
    committed beside them; the heads themselves stay in the cache. Returns one warning line per
    recorded head that is not in this machine's cache (and has no file yet): its meta cannot be copied."""
    from maxbench.fileio import atomic_write
    from maxbench.rundir import read_manifest
    from maxbench.systems.layers.head_cache import find_head

    try:
        resources = read_manifest(run.run_dir).get("resources") or {}
    except MaxbenchError:
        return []
    out, warnings = run.run_dir.parent.parent, []
    for system in run.plan.systems:
        sha = (resources.get(system.name) or {}).get(f"{system.layer.replace('-', '_')}_head")
        if not sha:
            continue
        path = head_meta_file(out, run.run_dir.name, system)
        if (read_json_object(path) or {}).get("sha256") == sha:
            continue
        meta = find_head(system.layer, sha)
        if meta is None:
            warnings.append(
                f"warning: the {system.layer} head of {system.name} in run {run.run_dir.name} (sha256 {sha[:12]}...) "
                f"is not in this machine's head cache: its fit meta is not recorded in {path.parent}"
            )
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({k: v for k, v in meta.items() if k not in _LOCAL_META}, indent=1) + "\n")
    return warnings


def record_adapters(run: RunSpec) -> list[str]:
    """Copy the training meta of every adapter the run's manifest records (``models``: each model's
    ``options.adapter``: name, key, sha256) from the adapter cache to ``<out>/heads/<run>/<model>.json``,
    beside the heads' (``adapters.trained_adapters`` reads it there, by its sha256). Returns one
    warning line per adapter that is not in this machine's cache (and has no file yet)."""
    from maxbench.fileio import atomic_write
    from maxbench.rundir import read_manifest
    from maxbench.systems.adapters.base import adapter_directory

    try:
        models = read_manifest(run.run_dir).get("models") or {}
    except MaxbenchError:
        return []
    out, warnings = run.run_dir.parent.parent / HEADS / run.run_dir.name, []
    for model, entry in sorted(models.items()):
        adapter = ((entry or {}).get("options") or {}).get("adapter") or {}
        sha, name, key = adapter.get("sha256"), adapter.get("name"), adapter.get("key")
        if not (sha and name and key):
            continue
        path = out / f"{model}.json"
        if (read_json_object(path) or {}).get("sha256") == sha:
            continue
        meta = read_json_object(adapter_directory(name, key) / "meta.json")
        if meta is None or meta.get("sha256") != sha:
            warnings.append(
                f"warning: the {name} adapter of {model} in run {run.run_dir.name} (sha256 {sha[:12]}...) is not in "
                f"this machine's adapter cache: its training meta is not recorded in {out}"
            )
            continue
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(meta, indent=1) + "\n")
    return warnings


def scores_current(run_dir: Path, metrics: list[str]) -> bool:
    """Whether the run's scores.json scores its present generations (``ScoresFile.stale``, the rule
    every reader of scores keeps) with these metrics."""
    from maxbench.rundir import has_scores, read_scores

    if not has_scores(run_dir):
        return False
    try:
        scores = read_scores(run_dir)
    except MaxbenchError:
        return False  # stale or damaged: scored again
    return scores.generations_sha256 is not None and set(metrics) <= set(scores.metrics or {})


def execute(
    runs: list[RunSpec],
    metrics: list[str],
    device: str | None = None,
    threads: int | None = None,
    shard: tuple[int, int] | None = None,
    progress: bool = True,
    n_resamples: int = 1000,
) -> None:
    """Generate every missing row of every run (or of one shard), then score what is not scored."""
    from maxbench.benchmark.metrics.scoring import ScoringOptions, score_run
    from maxbench.benchmark.run.runner import PhaseTimer, generate_run

    for run in runs:
        generate_run(run.plan, device=device, threads=threads, shard=shard, progress=progress)
        for line in record_heads(run) + record_adapters(run):
            print(f"maxbench: {line}", file=sys.stderr, flush=True)
    if shard is not None:
        return
    for run in runs:
        if scores_current(run.run_dir, metrics):
            continue
        timer = PhaseTimer(run.run_dir)
        with timer.phase("score"):
            score_run(
                run.run_dir,
                ScoringOptions(
                    metrics=metrics, n_resamples=n_resamples, device=device, threads=threads, progress=progress
                ),
                baseline=run.baseline,
            )
