"""Runs systems over a suite into a run directory, resumably: what decodes and what schedules.

The run directory's files (manifest, generations, shard files, their merge) are
``maxbench.rundir``'s; this module fills them. On restart a trailing partial line is
cut off, finished keys are skipped, and a batch with missing rows is decoded again whole
(batches are fixed by the suite order and the batch size, so the rows come out identical). A run of
the device generator may resume at another batch size (its rows do not depend on their batch); the
manifest records each batch size it ran at (``maxbench.rundir.apply_batch_size``).

Sharding (``--shard i/n``) hands out whole batches round-robin, numbered across all systems
in lineup order (so n can exceed the batches of one system), and every row is decoded in
the same batch as in a single process; each shard writes its own shard file and
``rundir.merge_shards`` joins them. A shard that has
finished its own batches takes over the batches another shard of the run has not reached yet,
while that shard is running (work stealing: the shard that fits a head does not keep the others
waiting); each batch is claimed by a lock (``maxbench.locks.claim``) before it is decoded, so none is
decoded twice, and a shard that is not running keeps its batches (``--shard i/n`` on separate
machines or at separate times still generates exactly shard i). No process waits on another's fit
while it has something else to decode: a batch whose layer another process is fitting, or whose fit
would wait on a cache another process is building (``OutputLayer.fit_busy``: the hidden states two
heads share, graphmax's graph), is left for later; once a shard has walked its own batches, such a
batch goes first as soon as its fit no longer waits, before any batch is taken over, and one is
waited for only when nothing else is left.

Before the first token, ``preflight`` checks everything a run can be refused for (systems,
models, corpus, folders, limits of the model and the machine, disk space), so a mistake costs
seconds and leaves no half-made run directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import check_output_dir, ensure_dir, free_bytes
from maxbench.locks import claim, exclusive, held
from maxbench.provenance import versions
from maxbench.rundir import (
    CLAIMS,
    REFERENCE_STATES,
    RowsSeen,
    RunPlan,
    append_rows,
    apply_batch_size,
    apply_lineup,
    canonicalise,
    check_model_hash,
    check_or_write_manifest,
    existing_manifest,
    finished_keys,
    read_rows,
    removed_path,
    row_key,
    shard_file,
    timings_path,
    update_manifest,
)

#: set by ``maxbench run --workers`` for its workers, so their phases join the parent's invocation
INVOCATION_ENV = "MAXBENCH_INVOCATION"


class PhaseTimer:
    """Wall and CPU time of each phase of one invocation (load, fit, generate, ref-ppl, score,
    render), appended to ``timings.jsonl`` in the run directory as it finishes, with the shard
    that ran it and, for generation, the seconds spent in the output layer. Kept out of the
    manifest and the generations, which must not depend on how long anything took. Workers of
    ``maxbench run --workers`` share their parent's invocation id (``INVOCATION_ENV``)."""

    def __init__(self, run_dir: Path, shard: tuple[int, int] | None = None, invocation: str | None = None):
        self.path = timings_path(run_dir)
        self.invocation = invocation or os.environ.get(INVOCATION_ENV) or new_invocation()
        self.shard = None if shard is None else f"{shard[0]}/{shard[1]}"
        self.phases: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str):
        t0, c0 = time.perf_counter(), time.process_time()
        yield
        self.add(name, time.perf_counter() - t0, time.process_time() - c0)

    def add(self, name: str, seconds: float, cpu_seconds: float | None = None, **extra) -> None:
        self.phases.append((name, seconds))
        ensure_dir(self.path.parent, "run directory")
        row = {"invocation": self.invocation, "shard": self.shard, "phase": name, "seconds": round(seconds, 2)}
        if cpu_seconds is not None:
            row["cpu_seconds"] = round(cpu_seconds, 2)
        append_rows(self.path, [row | {k: round(v, 2) for k, v in extra.items()}])

    def records(self) -> list[dict]:
        """This invocation's rows of ``timings.jsonl``, its workers' included."""
        return [r for r in read_rows(self.path) if r.get("invocation") == self.invocation]

    def summary(self, wall: float | None = None) -> str:
        """The phase table: wall and CPU seconds of each phase (with the shard that ran it) and, for
        generation, the output layer's share of the decoding time; ``wall`` is the invocation's
        elapsed time (phases of parallel workers overlap, so their sum exceeds it)."""
        rows = self.records()
        width = max((len(r["phase"]) for r in rows), default=5)
        lines = [f"  {'phase':<{width}}  {'shard':>5}  {'wall s':>8}  {'cpu s':>8}  {'layer share':>11}"]
        for r in rows:
            share = f"{r['layer_seconds'] / r['decode_seconds']:11.0%}" if r.get("decode_seconds") else " " * 11
            cpu = f"{r['cpu_seconds']:8.1f}" if r.get("cpu_seconds") is not None else f"{'':8}"
            lines.append(f"  {r['phase']:<{width}}  {r['shard'] or '':>5}  {r['seconds']:8.1f}  {cpu}  {share}")
        total = sum(r["seconds"] for r in rows)
        lines.append(f"  {'sum of phases':<{width}}  {'':>5}  {total:8.1f}")
        if wall is not None:
            lines.append(f"  {'elapsed':<{width}}  {'':>5}  {wall:8.1f}")
        return "\n".join(["time by phase:", *lines])


def lineup_change_text(plan: RunPlan, changed: dict) -> str:
    """One line on what ``apply_lineup`` changed in a run directory."""
    parts = []
    new = [n for n in changed["added"] if n not in changed.get("restored", ())]
    if new:
        parts.append(f"added {', '.join(new)} (only its rows are generated)")
    if changed.get("restored"):
        parts.append(f"listed again {', '.join(changed['restored'])} (its rows are kept from before)")
    if changed["removed"]:
        parts.append(
            f"removed {', '.join(changed['removed'])} (rows kept in {removed_path(plan.run_dir)}, neither scored nor shown)"
        )
    return f"the lineup of {plan.run_dir} changed: {'; '.join(parts)}"


def new_invocation() -> str:
    """An id for one invocation: its start time and process id."""
    return f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}-{os.getpid()}"


def derive_seed(base: int, prompt_id: str, sample: int) -> int:
    """The seed of one (prompt, sample). It does not include the system, so every system
    draws from the same random stream for the same prompt (common random numbers make
    paired comparisons between systems less noisy)."""
    return int.from_bytes(hashlib.sha256(f"{base}:{prompt_id}:{sample}".encode()).digest()[:4], "big")


RUN_PACKAGES = (
    "maxbench",
    "torch",
    "transformers",
    "numpy",
    "scipy",
    "numba",
    "sacrebleu",
    "nltk",
    "rouge-score",
    "bert-score",
    "spacy",
)


def run_versions() -> dict:
    return versions(RUN_PACKAGES, commit=True)


def machine(device: str) -> dict:
    import torch

    from maxbench.arithmetic import arithmetic_record

    info = {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "arithmetic": arithmetic_record(),
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def shard_units(plan: RunPlan, shard: tuple[int, int] | None) -> list[list[tuple[int, list]]]:
    """Per system, the (unit, batch) pairs of ``shard`` (every pair without one): the batches of all
    systems are numbered in lineup order, and unit k belongs to shard k mod n."""
    out, unit = [], 0
    for system in plan.systems:
        batches = plan.batches(system)
        out.append([(k, b) for k, b in enumerate(batches, start=unit) if shard is None or k % shard[1] == shard[0]])
        unit += len(batches)
    return out


class ReferenceStateCache:
    """The base model's forward pass over each prompt + reference, kept for the other systems
    of the same model (the output layer and the LM head are all that differ between them).
    Holds at most ``max_bytes``; past that, states are computed again for each system, which
    gives the same values.

    With ``directory`` (the run's ``REFERENCE_STATES`` folder), a state is also written there,
    atomically, for the run's other workers, which read it instead of running the same forward
    pass (a worker takes over the other's batches, so both would otherwise compute every state).
    The file is named by a hash of the model's weights and tokenizer, the prompt and the
    reference; one that cannot be read is computed and written again. The folder goes when the
    run's generations are merged."""

    def __init__(self, max_bytes: int = 1 << 30, directory: Path | None = None):
        self.max_bytes, self.used, self.states = max_bytes, 0, {}
        self.directory = directory

    def _file(self, lm, item) -> Path:
        ident = [getattr(lm, "hash", None), getattr(lm, "tokenizer_hash", None), item.prompt, item.reference]
        return self.directory / (hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:32] + ".pt")

    def get(self, lm, model_name: str, item):
        from maxbench.systems.decoding import reference_states

        key = (model_name, item.id)
        if key in self.states:
            return self.states[key]
        st = self._read(lm, item) if self.directory is not None else None
        if st is None:
            st = reference_states(lm, item.prompt, item.reference)
            if st is not None and self.directory is not None:
                self._write(lm, item, st)
        if st is not None and self.used + st.nbytes <= self.max_bytes:
            self.states[key] = st
            self.used += st.nbytes
        return st

    def _read(self, lm, item):
        import torch

        from maxbench.systems.decoding import ReferenceStates

        path = self._file(lm, item)
        try:
            saved = torch.load(path, map_location=lm.device, weights_only=True)
            return ReferenceStates(hidden=saved["hidden"], targets=saved["targets"])
        except Exception:  # missing, half-written by a killed worker, or corrupt: computed again
            return None

    def _write(self, lm, item, st) -> None:
        import torch

        from maxbench.fileio import atomic_open

        try:
            with atomic_open(self._file(lm, item)) as f:  # the hidden states are a view: save only their rows
                torch.save({"hidden": st.hidden.cpu().clone(), "targets": st.targets.cpu()}, f)
        except (MaxbenchError, OSError):  # a full disk: the other workers compute the state themselves
            pass


#: bytes a generated row takes per new token (token id, text, per-step statistics; about 60 with
#: graphmax's two extra statistics) and beyond its prompt, reference and tokens: upper estimates
ROW_BYTES_PER_TOKEN = 96
ROW_BYTES_FIXED = 1024
#: room kept free for the manifest, timings, scores and the leaderboard
DISK_MARGIN = 64 << 20
#: rows one run may hold: the runner keeps each row's key (and builds its job list) in memory
MAX_ROWS = 10_000_000


@dataclass
class Preflight:
    """What ``preflight`` checked and loaded, for ``generate_run`` to use."""

    layers: list  # one OutputLayer per system, unfitted
    todo: list  # per system, the (unit, batch) pairs (batch: a list of (item, sample)) that still lack rows
    done: set  # keys of the rows already written
    models: dict = field(default_factory=dict)  # model key -> LoadedModel, for systems with work
    load_seconds: dict = field(default_factory=dict)
    adapt_seconds: dict = field(default_factory=dict)  # model key -> seconds training or loading its adapter
    adapt_meta: dict = field(default_factory=dict)  # model key -> its adapter's meta (what training measured)


def preflight(
    plan: RunPlan,
    device: str | None = None,
    threads: int | None = None,
    shard: tuple[int, int] | None = None,
    outputs: tuple[tuple[Path, str], ...] = (),
    progress: bool = True,
) -> Preflight:
    """Everything a run can be refused for, checked before the first token and before anything is
    written, so that a mistake anywhere in a lineup costs seconds and leaves no half-made run
    directory: every system's layer and parameters, its model name and, for a hub id not cached,
    the hub (``maxbench.systems.models.check_model_reachable``), the fitting corpus, the run directory and the other ``outputs`` ((folder, option)
    pairs: writable folders, not files or devices), a run directory made by another run, then each
    model with work to do is loaded and every prompt is checked against its context and a batch
    against free memory (``maxbench.systems.decoding.check_limits``), and last the free disk space."""
    from maxbench.benchmark.data.corpora import check_corpus
    from maxbench.benchmark.data.suites import require_attributes
    from maxbench.systems.decoding import check_generator, check_limits, default_generator
    from maxbench.systems.models import check_model_reachable, choose_device, load_model, options_for_model
    from maxbench.systems.system_strings import probe_layer

    # the device (CUDA asked for on a machine without it is refused here) and the generator it draws with
    plan.generator = check_generator(plan.generator or default_generator(choose_device(device)))
    layers = [s.build_layer() for s in plan.systems]
    adapters = {s.model_key: s.build_adapter() for s in plan.systems if s.adapter}
    for system, layer in zip(plan.systems, layers):
        probe_layer(system.layer, layer)  # a plugin's scores, once, on a tiny input
    for name in dict.fromkeys(s.model for s in plan.systems):
        # each model's own options (a lineup's [model_args."MODEL"], then --model-args), checked before any loads
        revision = options_for_model(name, plan.options_for(name))["revision"]
        check_model_reachable(name, revision=revision)
    if plan.corpus is not None:
        check_corpus(plan.corpus)
    for system, layer in zip(plan.systems, layers):
        if layer.needs_fit and not plan.corpus:
            raise MaxbenchError(f"system '{system.name}' needs a fitting corpus; pass --corpus")
        if getattr(layer, "needs_attributes", False):
            require_attributes(plan.suite, system.name)
    check_adapters(plan, adapters)
    for folder, what in ((plan.run_dir, "run directory"), *outputs):
        check_output_dir(folder, what)
    manifest = existing_manifest(plan)
    total = len(plan.suite.items) * plan.samples * len(plan.systems)
    if total > MAX_ROWS:
        raise MaxbenchError(
            f"this run would hold {total:,} rows (prompts x samples x systems); a run keeps a key per row in "
            f"memory and is meant for at most {MAX_ROWS:,}: split it into several runs"
        )
    out = shard_file(plan.run_dir, shard)
    done = finished_keys(plan)
    todo = [
        [(k, b) for k, b in units if any((system.name, it.id, s) not in done for it, s in b)]
        for system, units in zip(plan.systems, shard_units(plan, shard))
    ]
    pre = Preflight(layers=layers, todo=todo, done=done)
    for system, layer, units in zip(plan.systems, layers, todo):
        if not units:
            continue
        key = system.model_key
        if key not in pre.models:
            t0 = time.perf_counter()
            # an adapted system loads its own copy of the base model (LoRA merges into its weights)
            options = plan.options_for(system.model)
            pre.models[key] = load_model(system.model, device=device, threads=threads, options=options)
            pre.load_seconds[key] = time.perf_counter() - t0
            if key not in adapters:
                # a run copied from another machine: its rows came from the weights its manifest names
                check_model_hash(plan, manifest, key, pre.models[key].hash)
        items = list(dict.fromkeys(it for _, batch in units for it, _ in batch))
        check_limits(
            pre.models[key],
            [it.prompt for it in items],
            system.decoding,
            plan.batch_size,
            ids=[it.id for it in items],
            references=[it.reference for it in items] if plan.reference_ppl else None,
            hidden_states=layer.needs_hidden,
        )
    for system in plan.systems:
        if system.model_key not in pre.models:  # nothing to do for it: its folders are checked unloaded
            check_model_folders(plan, manifest, system, adapters.get(system.model_key))
    rows = [(it, system) for system, units in zip(plan.systems, todo) for _, batch in units for it, _ in batch]
    new = sum(
        ROW_BYTES_FIXED
        + 2 * (len(it.prompt.encode()) + len(it.reference.encode()))
        + ROW_BYTES_PER_TOKEN * system.decoding.max_new_tokens
        for it, system in rows
    )
    if new:
        have = out.stat().st_size if out.exists() else 0
        need = have + 2 * new + DISK_MARGIN  # the finished file is rewritten once beside the old one
        free = free_bytes(plan.run_dir)
        if need > free:
            raise MaxbenchError(
                f"this run needs about {need / 2**20:,.0f} MiB in {plan.run_dir} ({len(rows)} rows to generate), "
                f"but only {free / 2**20:,.0f} MiB are free there; free some space or choose another --runs-dir"
            )
    adapt_models(plan, pre, adapters, manifest, progress)
    return pre


def check_model_folders(plan: RunPlan, manifest: dict | None, system, adapter) -> None:
    """For a system with nothing left to generate, whose model is therefore not loaded: refuse a local
    model folder or a ``peft`` adapter folder whose files changed since its rows were generated. The
    run would otherwise report texts of the old files under the new ones, as complete."""
    from maxbench.systems.adapters.pretrained import PeftAdapter, folder_sha256
    from maxbench.systems.models import local_identity

    entry = ((manifest or {}).get("models") or {}).get(system.model_key)
    if not isinstance(entry, dict):
        return
    recorded_adapter = (entry.get("options") or {}).get("adapter")
    recorded_adapter = recorded_adapter if isinstance(recorded_adapter, dict) else None
    base_hash = recorded_adapter.get("base_hash") if recorded_adapter is not None else entry.get("hash")
    now = local_identity(system.model, plan.options_for(system.model))
    advice = "its rows are of the old files: pick another --run-id, or regenerate the run in a new directory"
    if now is not None and isinstance(base_hash, str) and now != base_hash:
        raise MaxbenchError(
            f"run directory {plan.run_dir} was generated with model folder {system.model} of hash {base_hash[:12]}, "
            f"but its files now hash to {now[:12]} (weights, config or tokenizer changed); {advice}"
        )
    if isinstance(adapter, PeftAdapter) and recorded_adapter is not None and recorded_adapter.get("sha256"):
        try:
            sha = folder_sha256(adapter.folder)
        except OSError as exc:
            raise MaxbenchError(f"adapter 'peft': cannot read {adapter.options['path']}: {exc}") from None
        if sha != recorded_adapter["sha256"]:
            raise MaxbenchError(
                f"run directory {plan.run_dir} was generated with the peft adapter folder {adapter.options['path']} "
                f"of sha256 {str(recorded_adapter['sha256'])[:12]}, but its files now hash to {sha[:12]}; {advice}"
            )


def check_adapters(plan: RunPlan, adapters: dict) -> None:
    """Before anything is loaded: every adapter's own inputs (``check_inputs``), every adapted system
    that trains has its training data (the fitting corpus),
    and an adapter that conditions on attributes runs on a conditional suite."""
    from maxbench.benchmark.data.suites import require_attributes

    for key, adapter in adapters.items():
        adapter._plugin_call("check_inputs", adapter.check_inputs)  # e.g. a peft folder, before anything loads
        if adapter.trains and not plan.corpus:
            raise MaxbenchError(
                f"model '{key}': adapter '{adapter.name}' is trained on a fitting corpus; pass --corpus"
            )
        if adapter.needs_attributes:
            require_attributes(plan.suite, next(s.name for s in plan.systems if s.model_key == key))
            adapter.check_attribute_values(plan.suite, adapter_training_data(plan)[0] if adapter.trains else [])


def adapter_training_data(plan: RunPlan) -> tuple[list, dict]:
    """What adapters train on, and its identity. On a conditional suite with a template and a corpus
    (docs/conditional.md): the suite corpus's fitting split, each text with its attributes rendered
    as the suite renders them (the prompt) and its target (the text to learn); otherwise the fitting
    split of the run's corpus, plain documents learnt whole."""
    from maxbench.benchmark.data.corpora import load_attributes, load_corpus
    from maxbench.benchmark.data.suites import render_prompt
    from maxbench.systems.adapters import TrainingExample

    suite = plan.suite
    if getattr(suite, "conditional", False) and suite.template and suite.corpus:
        corpus, attributed = load_corpus(suite.corpus), load_attributes(suite.corpus)
        carried = {
            k: sum(1 for t in corpus.fit if k in getattr(attributed.get(t), "attributes", {})) for k in suite.attributes
        }
        lacking = [k for k, n in carried.items() if n == 0]
        if corpus.fit and lacking:
            raise MaxbenchError(
                f"suite '{suite.name}' asks for attribute{'s' if len(lacking) > 1 else ''} "
                f"{', '.join(repr(k) for k in lacking)}, which no text of corpus '{corpus.name}''s fitting split "
                f"carries (it has {', '.join(sorted({a for t in corpus.fit for a in getattr(attributed.get(t), 'attributes', {})})) or 'none'}); "
                "adapters learn the suite's attributes from that corpus: drop them from the suite or use a corpus "
                "that has them"
            )
        examples = []
        for text in corpus.fit:
            row = attributed.get(text)
            if row is None or any(k not in row.attributes for k in suite.attributes):
                continue
            values = {k: row.attributes[k] for k in suite.attributes}
            if any(a.categorical and values[k] not in a.values for k, a in suite.attributes.items()):
                continue
            prompt = render_prompt(suite.template, suite.attributes, values)
            examples.append(TrainingExample(prompt, row.target, values))
        data = {
            "corpus": corpus.name,
            "sha256": corpus.sha256,
            "split": "fit",
            "template": suite.template,
            "attributes": {k: a.describe() for k, a in suite.attributes.items()},
        }
        return examples, data
    corpus = load_corpus(plan.corpus)
    examples = [TrainingExample(prompt="", text=t) for t in corpus.fit]
    return examples, {"corpus": corpus.name, "sha256": corpus.sha256, "split": "fit"}


def adapt_models(plan: RunPlan, pre: Preflight, adapters: dict, manifest: dict | None, progress: bool = True) -> None:
    """Last in preflight: each adapted model with work to do gets its adapter, loaded from the adapter
    cache or trained now (``adapter_training_data``; systems/adapters), and its prompts are checked
    again against the adapted model (a prefix takes positions of the context)."""
    from maxbench.systems.adapters import AdapterFitContext, adapter_code
    from maxbench.systems.decoding import check_limits

    data = None
    for key, adapter in adapters.items():
        if key not in pre.models:
            continue
        if adapter.trains:
            data = data or adapter_training_data(plan)
        t0 = time.perf_counter()
        code = adapter_code(adapter)
        examples, identity = data if adapter.trains else ([], {})
        ctx = AdapterFitContext(model=pre.models[key], examples=examples, data=identity, options={"progress": progress})
        pre.models[key] = adapter.prepare(ctx, code=code)
        pre.adapt_seconds[key] = time.perf_counter() - t0
        pre.adapt_meta[key] = dict(adapter.meta)
        check_model_hash(plan, manifest, key, pre.models[key].hash)
        for system, units in zip(plan.systems, pre.todo):
            if system.model_key == key and units:
                items = list(dict.fromkeys(it for _, batch in units for it, _ in batch))
                check_limits(
                    pre.models[key],
                    [it.prompt for it in items],
                    system.decoding,
                    plan.batch_size,
                    ids=[it.id for it in items],
                    references=[it.reference for it in items] if plan.reference_ppl else None,
                )


def generate_run(
    plan: RunPlan,
    device: str | None = None,
    threads: int | None = None,
    shard: tuple[int, int] | None = None,
    progress: bool = True,
    timer: PhaseTimer | None = None,
    outputs: tuple[tuple[Path, str], ...] = (),
) -> Path:
    """Generate every missing row of the plan (or of one shard of it); returns the file. Nothing is
    written before ``preflight`` has passed; ``outputs`` are further folders it checks."""
    pre = preflight(plan, device=device, threads=threads, shard=shard, outputs=outputs, progress=progress)
    changed = apply_lineup(plan)  # a system added to the run's lineup, or dropped from it
    if changed:
        print(f"maxbench: {lineup_change_text(plan, changed)}", file=sys.stderr, flush=True)
    part = apply_batch_size(plan)  # a run free of its batch resumed at another batch size
    if part:
        print(
            f"maxbench: {plan.run_dir} resumes at batch size {plan.batch_size} ({part['rows_before']} rows were "
            "finished before; the manifest's batch_sizes records each part)",
            file=sys.stderr,
            flush=True,
        )
    out = shard_file(plan.run_dir, shard)
    # One process per output file: a worker left running by a killed parent finishes (or dies)
    # before another one appends to its file.
    with exclusive(out):
        return _generate(plan, pre, out, shard, device, progress, timer or PhaseTimer(plan.run_dir, shard))


def _schedule(plan: RunPlan, units: list, shard) -> list[tuple]:
    """(system index, (unit, batch) pairs) in the order a shard works through them: the lineup's order,
    walked backwards by odd shards, so that two workers fit the heads of the first and the last
    systems (graphmax's graph, POSG's and KerBS's heads) at the same time rather than one waiting
    for the other (a fit that would still wait is put off: ``_Decoder.batch``, ``_take_later``). The
    order changes no row: each batch is decoded the same way in any order."""
    work = list(enumerate(units))
    return work[::-1] if shard is not None and shard[0] % 2 else work


class _Decoder:
    """Decodes claimed batches of one run in one process: each system's layer fitted (or loaded) on
    its first batch, rows appended to this process's file, time kept per system."""

    def __init__(
        self, plan: RunPlan, pre: Preflight, out: Path, progress: bool, timer: PhaseTimer, shared: bool = False
    ):
        self.plan, self.pre, self.out, self.progress, self.timer = plan, pre, out, progress, timer
        self.seen = RowsSeen(plan.run_dir)
        self.seen.keys |= pre.done
        self.ready: set = set()
        self.corpus = None  # the fitting corpus, once a fit needs it
        # a shard shares its reference states with the run's other shards; one process keeps them in memory
        self.ref_states = ReferenceStateCache(directory=plan.run_dir / REFERENCE_STATES if shared else None)
        self.spent: dict = {}  # system index -> {"generate", "ref-ppl", "cpu generate", "cpu ref-ppl", "clock"}

    def _corpus(self):
        """The run's fitting corpus, loaded once per process (every fit and fit check reads it)."""
        from maxbench.benchmark.data.corpora import load_corpus

        if self.corpus is None:
            self.corpus = load_corpus(self.plan.corpus)
        return self.corpus

    def _prepare(self, si: int, wait: bool) -> bool:
        """Fit (or load) system ``si``'s layer; False, at once, when ``wait`` is False and the fit would
        wait on another process: that process is fitting this system (it holds the system's fit claim),
        or the layer says its fit would wait on something another process is building
        (``OutputLayer.fit_busy``, e.g. the hidden states another system's head is building). With
        ``wait``, the fit runs and the caches' own locks make it wait for that work and load it."""
        from maxbench.systems.layers.base import FitContext

        system, layer = self.plan.systems[si], self.pre.layers[si]
        lm = self.pre.models[system.model_key]
        if layer.needs_fit:
            with claim(self.plan.run_dir / CLAIMS / f"fit-{si}") as fitting_here:
                if not fitting_here and not wait:
                    return False
                ctx = FitContext(model=lm, corpus=self._corpus(), options={"progress": self.progress})
                if not wait and layer.fit_busy(ctx):
                    return False
                with self.timer.phase(f"fit {system.name}"):
                    layer.fit(ctx)
            update_manifest(self.plan, "resources", {system.name: layer.resource_hashes()})
        update_manifest(self.plan, "models", {system.model_key: lm.describe()})
        self.ready.add(si)
        return True

    def batch(self, si: int, unit: int, batch: list, wait: bool = True) -> bool | None:
        """Decode ``batch`` of system ``si`` unless another process holds its claim or has written its
        rows; returns whether this process decoded it, or None (only without ``wait``) when fitting the
        system's layer now would wait on another process (``_prepare``): the batch is left for later,
        not waited for."""
        system = self.plan.systems[si]
        if self.seen.done(system.name, batch):
            return False
        with claim(self.plan.run_dir / CLAIMS / f"batch-{unit}") as mine:
            if not mine:
                return False
            self.seen.refresh()
            if self.seen.done(system.name, batch):
                return False
            if si not in self.ready and not self._prepare(si, wait):
                return None
            self._decode(si, batch)
        return True

    def _decode(self, si: int, batch: list) -> None:
        """Decode one batch and append its rows; CUDA running out of memory on it (decoding or ref-ppl)
        is one line naming a batch size to try and how to go on: resume at it, in a run whose rows do
        not depend on their batch (``RunPlan.batch_invariant``), else start a new run id. The rows of
        the batches before are kept."""
        import torch

        from maxbench.systems.decoding import OutOfMemory, out_of_memory

        try:
            self._decode_batch(si, batch)
        except (torch.cuda.OutOfMemoryError, OutOfMemory):
            device = self.pre.models[self.plan.systems[si].model_key].device
            raise out_of_memory(device, len(batch), self.plan.batch_invariant) from None

    def _decode_batch(self, si: int, batch: list) -> None:
        from maxbench.systems.decoding import decode, reference_logprobs, reference_stride_used
        from maxbench.systems.system_strings import layer_label

        plan, system, layer = self.plan, self.plan.systems[si], self.pre.layers[si]
        lm = self.pre.models[system.model_key]
        spent = self.spent.setdefault(si, {"generate": 0.0, "ref-ppl": 0.0, "cpu generate": 0.0, "cpu ref-ppl": 0.0})
        clock = spent.setdefault("clock", {})
        t0, c0 = time.perf_counter(), time.process_time()
        seeds = [derive_seed(plan.seed, it.id, s) for it, s in batch]
        label = layer_label(system.layer)
        results = decode(
            lm,
            layer,
            [it.prompt for it, _ in batch],
            system.decoding,
            seeds,
            clock=clock,
            label=label,
            generator=plan.generator or "cpu",
        )
        t1, c1 = time.perf_counter(), time.process_time()
        spent["generate"] += t1 - t0
        spent["cpu generate"] += c1 - c0
        if plan.reference_ppl:
            # once per prompt (sample 0): the layer's distribution does not depend on the sample
            firsts = [i for i, (it, s) in enumerate(batch) if s == 0 and it.reference.strip()]
            states = [self.ref_states.get(lm, system.model_key, batch[i][0]) for i in firsts]
            lps = reference_logprobs(lm, layer, [], [], states=states, label=label)
            for i, lp in zip(firsts, lps):
                results[i] = results[i] | {
                    "reference_logprobs": [None if v is None else round(v, 6) for v in lp],
                    "vocab_size": lm.vocab_size,
                }
                # a reference longer than the context was scored in strided windows: the row says so
                stride = reference_stride_used(lm, batch[i][0].prompt, batch[i][0].reference)
                if stride is not None:
                    results[i]["reference_stride"] = stride
            spent["ref-ppl"] += time.perf_counter() - t1
            spent["cpu ref-ppl"] += time.process_time() - c1
        rows = []
        for (item, s), seed, res in zip(batch, seeds, results):
            if (system.name, item.id, s) in self.seen.keys:
                continue
            rows.append(
                {
                    "system": system.name,
                    "prompt_id": item.id,
                    "sample": s,
                    "seed": seed,
                    "prompt": item.prompt,
                    "reference": item.reference,
                    **res,
                }
            )
        append_rows(self.out, rows)
        self.seen.keys |= {row_key(r) for r in rows}

    def flush(self, si: int) -> None:
        """The phase rows of system ``si``'s batches decoded since the last flush."""
        spent = self.spent.pop(si, None)
        if not spent:
            return
        name = self.plan.systems[si].name
        clock = spent["clock"]
        self.timer.add(
            f"generate {name}",
            spent["generate"],
            spent["cpu generate"],
            layer_seconds=clock["layer"],
            decode_seconds=clock["decode"],
        )
        if spent["ref-ppl"]:
            self.timer.add(f"ref-ppl {name}", spent["ref-ppl"], spent["cpu ref-ppl"])

    def steal(self, shard: tuple[int, int]) -> bool:
        """Decode one batch that a running shard of the run has not reached yet (the last one in its
        own order); False when there is none."""
        i, n = shard
        for j in (*range(i + 1, n), *range(i)):
            if not held(shard_file(self.plan.run_dir, (j, n))):
                continue  # not running now: its batches stay its own
            theirs = [
                (si, k, b)
                for si, units in _schedule(self.plan, shard_units(self.plan, (j, n)), (j, n))
                for k, b in units
            ]
            for si, unit, batch in reversed(theirs):
                if self.plan.systems[si].model_key in self.pre.models and self.batch(si, unit, batch, wait=False):
                    self.flush(si)
                    return True
        return False


def record_training(timer: PhaseTimer, pre: Preflight) -> None:
    """One ``train <model>`` row per adapted model whose adapter was trained by maxbench, with the
    seconds its training took when it was trained (wall, and CPU where recorded, with each step's CPU
    seconds; from the adapter's meta, so a cached adapter's row is its original training's), written
    once per run: the training times a reproduction compares outlive the adapter cache."""
    known = {r.get("phase") for r in read_rows(timer.path)} if timer.path.exists() else set()
    for name, meta in pre.adapt_meta.items():
        seconds = meta.get("train_seconds")
        if f"train {name}" in known or not isinstance(seconds, (int, float)):
            continue
        row = {"invocation": timer.invocation, "shard": timer.shard, "phase": f"train {name}", "seconds": seconds}
        for key, out in (
            ("train_cpu_seconds", "cpu_seconds"),
            ("steps", "steps"),
            ("step_cpu_seconds", "step_cpu_seconds"),
        ):
            if meta.get(key) is not None:
                row[out] = meta[key]
        append_rows(timer.path, [row])


def _generate(plan: RunPlan, pre: Preflight, out: Path, shard, device, progress: bool, timer: PhaseTimer) -> Path:
    from tqdm import tqdm

    for name, seconds in pre.load_seconds.items():
        timer.add(f"load {name}", seconds)
    for name, seconds in pre.adapt_seconds.items():
        timer.add(f"fit {name}", seconds)
    record_training(timer, pre)
    read_rows(out, repair=True)  # a line cut by a crash goes; its row is decoded again
    first = next(iter(pre.models.values()), None)
    check_or_write_manifest(
        plan, {"versions": run_versions(), "machine": machine(first.device if first else device or "cpu")}
    )
    work = _Decoder(plan, pre, out, progress, timer, shared=shard is not None)
    work.seen.refresh()  # rows another process wrote since preflight are not decoded again
    later: list = []
    for si, units in _schedule(plan, pre.todo, shard):
        units = [(k, b) for k, b in units if not work.seen.done(plan.systems[si].name, b)]
        if not units:
            continue
        bar = tqdm(
            total=sum(len(b) for _, b in units),
            desc=plan.systems[si].name,
            unit="text",
            disable=not progress,
            dynamic_ncols=True,
        )
        for unit, batch in units:
            if work.batch(si, unit, batch, wait=False) is None:
                later.append((si, unit, batch))  # another worker is fitting this layer: not waited for now
            bar.update(len(batch))
        bar.close()
        work.flush(si)
    # then, one batch at a time: a batch left for later whose fit no longer waits, else a batch another
    # running shard has not reached, else a batch left for later, waited for
    while True:
        if _take_later(work, later):
            continue
        if shard is not None and work.steal(shard):
            continue
        if not later:
            break
        si, unit, batch = later.pop(0)
        work.batch(si, unit, batch)  # waits for the other worker's fit and loads what it made
        work.flush(si)
    canonicalise(plan, out, shard)
    return out


def _take_later(work: _Decoder, later: list) -> bool:
    """Take the first batch of ``later`` (in its order) that is no longer blocked out of ``later``: it
    is decoded when its layer can now be fitted without waiting (``_Decoder.batch`` with ``wait``
    False), or just dropped when another process has taken or written it meanwhile. True when one was
    taken; False when every batch left is still blocked (``later`` unchanged). Each True shortens
    ``later``, so a loop over it ends, and no batch leaves it undecoded unless another process has it."""
    blocked: set = set()  # systems found blocked in this pass: their other batches are too
    for i, (si, unit, batch) in enumerate(later):
        if si in blocked:
            continue
        done = work.batch(si, unit, batch, wait=False)
        if done is None:
            blocked.add(si)
            continue
        del later[i]
        if done:
            work.flush(si)
        return True
    return False
