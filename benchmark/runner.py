"""Runs systems over a suite into a run directory, resumably.

``results/runs/<run-id>/`` holds ``manifest.json`` and ``generations.jsonl``. Rows are keyed
by (system, prompt id, sample); each batch's rows are appended with one write, flushed and
fsynced. On restart a trailing partial line is cut off, finished keys are skipped, and a
batch with missing rows is decoded again whole (batches are fixed by the suite order, so
the rows come out identical). When every key is present the file is rewritten once, in
canonical order, through a temporary file and an atomic rename: an interrupted and an
uninterrupted run end byte-identical, and nothing written is ever lost.

Sharding (``--shard i/n``) hands out whole batches round-robin, numbered across all systems
in registry order (so n can exceed the batches of one system), and every row is decoded in
the same batch as in a single process; shard i writes ``generations.shard-i-of-n.jsonl``
and ``merge_shards`` joins the shards into the same ``generations.jsonl``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from core.errors import MaxbenchError
from core.provenance import versions

MANIFEST = "manifest.json"
GENERATIONS = "generations.jsonl"
TIMINGS = "timings.jsonl"


class PhaseTimer:
    """Wall time of each phase of one invocation (load, fit, generate, score, render), appended
    to ``timings.jsonl`` in the run directory as it finishes. Kept out of the manifest and the
    generations, which must not depend on how long anything took."""

    def __init__(self, run_dir: Path, shard: tuple[int, int] | None = None):
        self.path = Path(run_dir) / TIMINGS
        self.invocation = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.shard = None if shard is None else f"{shard[0]}/{shard[1]}"
        self.phases: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        yield
        self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.phases.append((name, seconds))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _append(
            self.path,
            [{"invocation": self.invocation, "shard": self.shard, "phase": name, "seconds": round(seconds, 2)}],
        )

    def summary(self) -> str:
        total = sum(s for _, s in self.phases)
        width = max((len(n) for n, _ in self.phases), default=5)
        lines = [f"  {n:<{width}}  {s:8.1f} s" for n, s in self.phases]
        return "\n".join(["wall time by phase:", *lines, f"  {'total':<{width}}  {total:8.1f} s"])


def derive_seed(base: int, prompt_id: str, sample: int) -> int:
    """The seed of one (prompt, sample). It does not include the system, so every system
    draws from the same random stream for the same prompt (common random numbers make
    paired comparisons between systems less noisy)."""
    return int.from_bytes(hashlib.sha256(f"{base}:{prompt_id}:{sample}".encode()).digest()[:4], "big")


def atomic_write(path: Path, data: bytes | str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _disk_error(path, exc) from None


def _disk_error(path: Path, exc: OSError) -> MaxbenchError:
    if exc.errno == errno.ENOSPC:
        return MaxbenchError(
            f"disk full while writing {path}; everything written before is kept: "
            f"free some space and run the same command again to resume"
        )
    return MaxbenchError(f"cannot write {path}: {exc.strerror or exc}")


RUN_PACKAGES = (
    "maxbench",
    "torch",
    "transformers",
    "numpy",
    "scipy",
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

    info = {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def read_rows(path: Path, repair: bool = False) -> list[dict]:
    """Rows of a generations file. With ``repair``, a trailing partial line (a write cut by a
    crash) is removed from the file; otherwise it is ignored."""
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data) and repair:
        with open(path, "r+b") as f:
            f.truncate(end)
    rows = []
    for n, line in enumerate(data[:end].splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise MaxbenchError(
                    f"{path}:{n} is not valid JSON; the run file is damaged (move it away to regenerate)"
                ) from None
    return rows


def row_key(row: dict) -> tuple:
    return (row["system"], row["prompt_id"], int(row["sample"]))


@dataclass
class RunPlan:
    """Everything that defines a run's content (what the manifest pins)."""

    run_dir: Path
    suite: object  # benchmark.suites.Suite
    systems: list  # [SystemSpec]
    samples: int = 1
    seed: int = 1234
    batch_size: int = 8
    corpus: str | None = None  # fitting corpus for layers that need one
    registry: str | None = None
    #: also record each layer's teacher-forced log-probabilities of the references (ref-ppl)
    reference_ppl: bool = True

    def identity(self) -> dict:
        return {
            "suite": self.suite.describe() | {"path": None},
            "systems": [s.name for s in self.systems],
            "samples": self.samples,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "corpus": self.corpus,
            "registry": self.registry,
            "reference_ppl": self.reference_ppl,
        }

    def jobs(self, system) -> list[tuple]:
        return [(item, s) for item in self.suite.items for s in range(self.samples)]

    def batches(self, system) -> list[list[tuple]]:
        jobs = self.jobs(system)
        return [jobs[i : i + self.batch_size] for i in range(0, len(jobs), self.batch_size)]

    def canonical_order(self) -> dict:
        order = {}
        for si, system in enumerate(self.systems):
            for ji, (item, s) in enumerate(self.jobs(system)):
                order[(system.name, item.id, s)] = (si, ji)
        return order


def check_or_write_manifest(plan: RunPlan, extra: dict) -> dict:
    path = plan.run_dir / MANIFEST
    ident = plan.identity()
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            raise MaxbenchError(f"{path} is unreadable; this run directory is damaged") from None
        if old.get("identity") != ident:
            diff = [k for k in ident if old.get("identity", {}).get(k) != ident[k]]
            raise MaxbenchError(
                f"run directory {plan.run_dir} was made by a different run (differs in: "
                f"{', '.join(diff)}); pick another --run-id or delete that directory"
            )
        return old
    manifest = {
        "run_id": plan.run_dir.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "identity": ident,
        "suite": plan.suite.describe(),
        "samples": plan.samples,
        "seed": plan.seed,
        "seed_rule": "sha256(f'{seed}:{prompt_id}:{sample}')[:4] as big-endian int",
        "systems": {
            s.name: {"model": s.model, "layer": s.layer, "layer_params": dict(s.params), "decoding": s.decoding.label}
            for s in plan.systems
        },
    } | extra
    atomic_write(path, json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    return manifest


def update_manifest(plan: RunPlan, key: str, value) -> None:
    path = plan.run_dir / MANIFEST
    manifest = json.loads(path.read_text())
    manifest.setdefault(key, {}).update(value)
    atomic_write(path, json.dumps(manifest, indent=1) + "\n")


def _append(path: Path, rows: list[dict]) -> None:
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    try:
        with open(path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise _disk_error(path, exc) from None


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise MaxbenchError(f"--shard must look like i/n (e.g. 0/4), got '{text}'") from None
    if not (n >= 1 and 0 <= i < n):
        raise MaxbenchError(f"--shard {text}: need 0 <= i < n")
    return i, n


def shard_file(run_dir: Path, shard: tuple[int, int] | None) -> Path:
    return run_dir / (GENERATIONS if shard is None else f"generations.shard-{shard[0]}-of-{shard[1]}.jsonl")


class ReferenceStateCache:
    """The base model's forward pass over each prompt + reference, kept for the other systems
    of the same model (the output layer and the LM head are all that differ between them).
    Holds at most ``max_bytes``; past that, states are computed again for each system, which
    gives the same values."""

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes, self.used, self.states = max_bytes, 0, {}

    def get(self, lm, model_name: str, item):
        from systems.decoding import reference_states

        key = (model_name, item.id)
        if key in self.states:
            return self.states[key]
        st = reference_states(lm, item.prompt, item.reference)
        if st is not None and self.used + st.nbytes <= self.max_bytes:
            self.states[key] = st
            self.used += st.nbytes
        return st


def generate_run(
    plan: RunPlan,
    device: str | None = None,
    threads: int | None = None,
    shard: tuple[int, int] | None = None,
    progress: bool = True,
    timer: PhaseTimer | None = None,
) -> Path:
    """Generate every missing row of the plan (or of one shard of it); returns the file."""
    from tqdm import tqdm

    from benchmark.corpora import load_corpus
    from systems.decoding import decode, reference_logprobs
    from systems.layers.base import FitContext
    from systems.models import load_model

    layers = [s.build_layer() for s in plan.systems]  # bad parameters fail before any work
    timer = timer or PhaseTimer(plan.run_dir, shard)
    out = shard_file(plan.run_dir, shard)
    done = {row_key(r) for r in read_rows(out, repair=True)}
    if shard is None:
        for other in plan.run_dir.glob("generations.shard-*.jsonl"):
            done |= {row_key(r) for r in read_rows(other)}
    models: dict = {}
    ref_states = ReferenceStateCache()
    manifest_written = False
    unit = 0  # (system, batch) units are handed to shards round-robin across all systems
    for system, layer in zip(plan.systems, layers):
        batches = plan.batches(system)
        mine = [b for bi, b in enumerate(batches, start=unit) if shard is None or bi % shard[1] == shard[0]]
        unit += len(batches)
        todo = [b for b in mine if any((system.name, it.id, s) not in done for it, s in b)]
        if not todo:
            continue
        if system.model not in models:
            with timer.phase(f"load {system.model}"):
                models[system.model] = load_model(system.model, device=device, threads=threads)
        lm = models[system.model]
        if not manifest_written:
            check_or_write_manifest(plan, {"versions": run_versions(), "machine": machine(lm.device)})
            manifest_written = True
        update_manifest(plan, "models", {system.model: lm.describe()})
        if layer.needs_fit:
            if not plan.corpus:
                raise MaxbenchError(f"system '{system.name}' needs a fitting corpus; pass --corpus")
            with timer.phase(f"fit {system.name}"):
                layer.fit(FitContext(model=lm, corpus=load_corpus(plan.corpus), options={"progress": progress}))
            update_manifest(plan, "resources", {system.name: layer.resource_hashes()})
        bar = tqdm(
            total=sum(len(b) for b in todo), desc=system.name, unit="text", disable=not progress, dynamic_ncols=True
        )
        spent = {"generate": 0.0, "ref-ppl": 0.0}
        for batch in todo:
            t0 = time.perf_counter()
            seeds = [derive_seed(plan.seed, it.id, s) for it, s in batch]
            results = decode(lm, layer, [it.prompt for it, _ in batch], system.decoding, seeds)
            t1 = time.perf_counter()
            spent["generate"] += t1 - t0
            if plan.reference_ppl:
                # once per prompt (sample 0): the layer's distribution does not depend on the sample
                firsts = [i for i, (it, s) in enumerate(batch) if s == 0 and it.reference.strip()]
                states = [ref_states.get(lm, system.model, batch[i][0]) for i in firsts]
                lps = reference_logprobs(lm, layer, [], [], states=states)
                for i, lp in zip(firsts, lps):
                    results[i] = results[i] | {
                        "reference_logprobs": [None if v is None else round(v, 6) for v in lp],
                        "vocab_size": lm.vocab_size,
                    }
                spent["ref-ppl"] += time.perf_counter() - t1
            rows = []
            for (item, s), seed, res in zip(batch, seeds, results):
                if (system.name, item.id, s) in done:
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
            _append(out, rows)
            done |= {row_key(r) for r in rows}
            bar.update(len(batch))
        bar.close()
        for what, seconds in spent.items():
            if seconds:
                timer.add(f"{what} {system.name}", seconds)
    if not manifest_written:
        check_or_write_manifest(plan, {"versions": run_versions(), "machine": machine(device or "cpu")})
    _canonicalise(plan, out, shard)
    return out


def _canonicalise(plan: RunPlan, path: Path, shard) -> None:
    order = plan.canonical_order()
    rows = read_rows(path)
    if shard is None:  # rows made by earlier sharded invocations count too
        for other in sorted(plan.run_dir.glob("generations.shard-*.jsonl")):
            rows += read_rows(other)
    unknown = [r for r in rows if row_key(r) not in order]
    if unknown:
        raise MaxbenchError(
            f"{path} holds rows of system '{unknown[0]['system']}', which this run does not "
            f"define; this run directory belongs to another registry"
        )
    by_key = {row_key(r): r for r in rows}
    if shard is None and len(by_key) < len(order):
        return  # incomplete: keep appending on the next run
    body = "".join(json.dumps(by_key[k], ensure_ascii=False) + "\n" for k in sorted(by_key, key=order.get))
    if not path.exists() or path.read_text() != body:
        atomic_write(path, body)


def merge_shards(plan: RunPlan) -> Path:
    """Join shard files into generations.jsonl in canonical order; all keys must be present."""
    order = plan.canonical_order()
    by_key = {row_key(r): r for r in read_rows(plan.run_dir / GENERATIONS)}
    for path in sorted(plan.run_dir.glob("generations.shard-*.jsonl")):
        by_key.update({row_key(r): r for r in read_rows(path)})
    missing = [k for k in order if k not in by_key]
    if missing:
        raise MaxbenchError(
            f"cannot merge {plan.run_dir}: {len(missing)} rows missing (e.g. {missing[0]}); "
            f"run the missing shards first"
        )
    out = plan.run_dir / GENERATIONS
    atomic_write(out, "".join(json.dumps(by_key[k], ensure_ascii=False) + "\n" for k in sorted(order, key=order.get)))
    return out
