"""What a run pins and its manifest: ``RunPlan`` (the run's identity: suite, systems, samples, seed,
batch size, corpus, lineup, ref-ppl), the manifest's reader and writers, and the checks that refuse to
resume a run made by another plan, by other plugin code or from other weights.

``manifest.json`` pins ``RunPlan.identity`` with its versions, machine, models and fitted resources; a
run directory made by another run is refused, never mixed. The systems are one part of the identity a
run may change (``maxbench.rundir.lineup``); the batch size is the other, in a run whose rows do not
depend on their batch (``RunPlan.batch_invariant``): each batch size it ran at is recorded
(``maxbench.rundir.lineup.apply_batch_size``)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write
from maxbench.locks import exclusive
from maxbench.rundir.files import MANIFEST, check_run_dir, json_type, manifest_path, read_object, recorded_path

if TYPE_CHECKING:  # annotations only: the shared base imports no other maxbench package at run time
    from maxbench.benchmark.data.suites import Suite
    from maxbench.systems.system_strings import SystemSpec


@dataclass
class RunPlan:
    """Everything that defines a run's content (what the manifest pins)."""

    run_dir: Path
    suite: Suite
    systems: list[SystemSpec]
    samples: int = 1
    seed: int = 1234
    batch_size: int = 8
    corpus: str | None = None  # fitting corpus for layers that need one
    lineup: str | None = None
    #: also record each layer's teacher-forced log-probabilities of the references (ref-ppl)
    reference_ppl: bool = True
    #: model options of every model of the run (``--model-args``, docs/models.md); part of the
    #: identity only when given, so runs made before the option existed keep theirs
    model_args: dict = field(default_factory=dict)
    #: model options of one model each (a lineup's ``[model_args."MODEL"]``): base model -> options;
    #: ``model_args`` overrides them key by key. Part of the identity only when given, as above
    per_model_args: dict = field(default_factory=dict)
    #: the lineup's sweeps, ``{name: {knob, values, systems}}`` (``Sweep.record``): kept in the manifest
    #: under ``sweeps`` and brought up to date with the lineup, not part of the identity
    sweeps: dict = field(default_factory=dict)
    #: the random generator of sampled rows (``maxbench.systems.decoding.GENERATORS``): None until
    #: the run's device is known, then that device's default unless one was asked for. Part of the
    #: identity only when not ``cpu``, so runs made before the option existed keep theirs
    generator: str | None = None

    @property
    def batch_invariant(self) -> bool:
        """Whether a row's text does not depend on the batch it is decoded in, so the run may resume
        at another batch size. True for the device generator, whose draws are a function of the row's
        seed and step alone; not for the CPU generator (the CPU's default, token-exact with
        transformers' ``generate``), whose rows see the batch's padding, which can move a near-tie of
        two logits."""
        return self.generator == "device"

    def options_for(self, model: str) -> dict:
        """The options ``model`` (a ``SystemSpec.model``) is loaded with: its own, then ``model_args``."""
        return dict(self.per_model_args.get(model, {})) | dict(self.model_args)

    def identity(self) -> dict:
        extra = {"model_args": dict(sorted(self.model_args.items()))} if self.model_args else {}
        if self.generator not in (None, "cpu"):
            extra["generator"] = self.generator
        if any(self.per_model_args.values()):
            extra["per_model_args"] = {m: dict(sorted(o.items())) for m, o in sorted(self.per_model_args.items()) if o}
        return extra | {
            "suite": self.suite.describe() | {"path": None},
            "systems": [s.name for s in self.systems],
            "samples": self.samples,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "corpus": self.corpus,
            "registry": self.lineup,  # the lineup, under its old key: runs made before the rename resume
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


def read_manifest(run_dir: Path, required: bool = False) -> dict:
    """The run's manifest ({} when the folder has none, unless ``required``). A damaged one (not JSON,
    not an object, an 'identity' that is not an object) is refused in one line."""
    run_dir = check_run_dir(run_dir)
    path = manifest_path(run_dir)
    if not path.is_file():
        if required:
            raise MaxbenchError(f"{run_dir} has no {MANIFEST}; its suite and seeds cannot be checked")
        return {}
    todo = f"the run directory is damaged: restore its {MANIFEST} or regenerate the run"
    doc = read_object(path, todo)
    why = _manifest_problem(doc)
    if why:
        raise MaxbenchError(f"{path}: {why}; {todo}")
    return doc


def _manifest_problem(manifest: dict) -> str | None:
    """What is wrong with the shape of a run's manifest (None when nothing is)."""
    for key in ("systems", "removed_systems", "suite", "identity"):
        if manifest.get(key) is not None and not isinstance(manifest[key], dict):
            return f"'{key}' is {json_type(manifest[key])}, expected an object"
    for key in ("systems", "removed_systems"):
        for name, entry in (manifest.get(key) or {}).items():
            if not isinstance(entry, dict):
                return f"{key}[{name!r}] is {json_type(entry)}, expected an object"
    parts = manifest.get("batch_sizes")
    if parts is not None and not isinstance(parts, list):
        return f"'batch_sizes' is {json_type(parts)}, expected a list"
    for i, part in enumerate(parts or []):
        if not isinstance(part, dict) or not isinstance(part.get("batch_size"), int):
            return f"batch_sizes[{i}] is {json.dumps(part)}, expected an object with a whole batch_size"
    samples = manifest.get("samples", 1)
    if not isinstance(samples, int) or isinstance(samples, bool):
        return f"'samples' is {json.dumps(samples)}, not a whole number"
    return None


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Write the run's manifest (atomically)."""
    atomic_write(manifest_path(run_dir), json.dumps(manifest, indent=1) + "\n")


def recorded_identity(manifest) -> dict:
    ident = manifest.get("identity") if isinstance(manifest, dict) else None
    return ident if isinstance(ident, dict) else {}


def generated_systems(manifest: dict) -> dict:
    """Every system the run has generated rows of, with its manifest entry: its lineup's systems now
    and those removed since (``apply_lineup``)."""
    out = {}
    for key in ("removed_systems", "systems"):
        section = manifest.get(key) if isinstance(manifest, dict) else None
        if isinstance(section, dict):
            out |= section
    return out


def existing_manifest(plan: RunPlan) -> dict | None:
    """The run directory's manifest if there is one; refused when another run made it. A plan whose
    identity differs from the recorded one only in its systems is the same run with a changed lineup
    (``apply_lineup``), unless it shares no system with the run."""
    if not manifest_path(plan.run_dir).exists():
        return None
    ident = plan.identity()
    old = read_manifest(plan.run_dir)
    recorded = recorded_identity(old)
    if isinstance(old, dict) and recorded.get("generator", "cpu") != ident.get("generator", "cpu"):
        made, asked = recorded.get("generator", "cpu"), ident.get("generator", "cpu")
        raise MaxbenchError(
            f"run directory {plan.run_dir} was generated with the {made} generator, not the {asked} one; its "
            f"rows must not be mixed: resume it with --generator {made}, or pick another --run-id"
        )
    if not isinstance(old, dict) or recorded != ident:
        diff = [k for k in ident if recorded.get(k) != ident[k]]
        diff += [k for k in recorded if k not in ident]
        if plan.batch_invariant and "batch_size" in diff:
            diff.remove("batch_size")  # another part of the run, recorded by apply_batch_size
        before = recorded.get("systems")
        if diff == ["systems"]:
            made = set(before) | set(generated_systems(old)) if isinstance(before, list) else set()
            if not made & {s.name for s in plan.systems}:  # no row to keep: another run, not an edit
                diff = ["systems, and it shares none of them with this one"]
        if diff == ["batch_size"]:
            made = recorded.get("batch_size")
            raise MaxbenchError(
                f"run directory {plan.run_dir} was generated at batch size {made} with the cpu generator, whose "
                f"text depends on the rest of its batch (padding can move a near-tie of two logits): resume it "
                f"with --batch-size {made} (a lineup's batch_size = {made}), or pick another --run-id (runs of --generator device resume at any "
                "batch size)"
            )
        if diff and diff != ["systems"]:
            raise MaxbenchError(
                f"run directory {plan.run_dir} was made by a different run (differs in: "
                f"{', '.join(diff)}); pick another --run-id or delete that directory"
            )
    check_code(plan, old)
    return old


def check_code(plan: RunPlan, manifest: dict) -> None:
    """Refuse to resume a run whose rows were made by other plugin code: rows of old code must not be
    mixed with new. Built-ins are not compared (their origin is maxbench's version)."""
    from maxbench.registry import describe_origin, is_plugin_origin

    recorded = generated_systems(manifest)  # a system removed and listed again: its rows come back
    for system in plan.systems:
        entry = recorded.get(system.name)
        code = entry.get("code") if isinstance(entry, dict) else None
        if not isinstance(code, dict):
            continue  # a run made before origins were recorded
        now = system.code()
        for part in ("layer", "model", "adapter"):
            old, new = code.get(part), now.get(part)
            if (is_plugin_origin(old) or is_plugin_origin(new)) and old != new:
                raise MaxbenchError(
                    f"system '{system.name}' of run directory {plan.run_dir} was generated with {part} code from "
                    f"{describe_origin(old or {})}, but that code is now {describe_origin(new)}; rows of the old code "
                    "must not be mixed with new: pick another --run-id or delete that directory"
                )


def check_or_write_manifest(plan: RunPlan, extra: dict) -> dict:
    with exclusive(manifest_path(plan.run_dir)):  # workers of one run start together
        return _check_or_write_manifest(plan, extra)


def _check_or_write_manifest(plan: RunPlan, extra: dict) -> dict:
    ident = plan.identity()
    old = existing_manifest(plan)
    if old is not None:
        return old
    manifest = {
        "run_id": plan.run_dir.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "identity": ident,
        "suite": plan.suite.describe() | {"path": recorded_path(plan.suite.path)},
        "samples": plan.samples,
        "seed": plan.seed,
        "seed_rule": "sha256(f'{seed}:{prompt_id}:{sample}')[:4] as big-endian int",
        "systems": {s.name: system_entry(s) for s in plan.systems},
    } | extra
    manifest = with_sweeps(manifest, plan)
    write_manifest(plan.run_dir, manifest)
    return manifest


def batch_size_now(manifest: dict) -> int | None:
    """The batch size a run was last generated at: its last part's (``batch_sizes``), else its identity's."""
    parts = manifest.get("batch_sizes") if isinstance(manifest, dict) else None
    if isinstance(parts, list) and parts and isinstance(parts[-1], dict):
        return parts[-1].get("batch_size")
    return recorded_identity(manifest).get("batch_size")


def system_entry(system) -> dict:
    """A system's entry in the manifest's ``systems`` section."""
    return {
        "model": system.model,
        "layer": system.layer,
        "layer_params": dict(system.params),
        "decoding": system.decoding.label,
        "code": system.code(),
    } | ({"adapter": system.adapter, "adapter_params": dict(system.adapter_params)} if system.adapter else {})


def with_sweeps(manifest: dict, plan: RunPlan) -> dict:
    """``manifest`` with the plan's sweeps under ``sweeps`` (no key when it has none)."""
    out = {k: v for k, v in manifest.items() if k != "sweeps"}
    return out | {"sweeps": plan.sweeps} if plan.sweeps else out


def recorded_model_hash(manifest: dict | None, model: str) -> str | None:
    """The weights hash the manifest records for ``model`` (``models`` section), None if none."""
    models = manifest.get("models") if isinstance(manifest, dict) else None
    entry = models.get(model) if isinstance(models, dict) else None
    recorded = entry.get("hash") if isinstance(entry, dict) else None
    return recorded if isinstance(recorded, str) and recorded else None


def check_model_hash(plan: RunPlan, manifest: dict | None, model: str, loaded_hash: str | None) -> None:
    """Refuse to resume a run whose rows were made from other weights than the model loaded now (a run
    copied from another machine): rows of two weight files must not sit under one hash, and the
    recorded hash is never overwritten."""
    recorded = recorded_model_hash(manifest, model)
    if recorded is not None and loaded_hash is not None and recorded != loaded_hash:
        raise MaxbenchError(
            f"run directory {plan.run_dir} was generated with model '{model}' of hash {recorded}, but the "
            f"model loaded here has hash {loaded_hash}; rows of two weight files must not be mixed in one run: "
            "pick another --run-id, or regenerate the run in a new directory"
        )


def update_manifest(plan: RunPlan, key: str, value: dict) -> None:
    """Add ``value``'s entries to the manifest's ``key`` section, under the manifest's lock (workers
    update it side by side), keeping the section in the lineup's order whoever wrote first. A model's
    recorded hash is never replaced by another one (``check_model_hash``)."""
    path = manifest_path(plan.run_dir)
    rank = {name: i for i, name in enumerate([*(s.name for s in plan.systems), *(s.model_key for s in plan.systems)])}
    with exclusive(path):
        manifest = json.loads(path.read_text())
        if key == "models":
            for model, entry in value.items():
                check_model_hash(plan, manifest, model, entry.get("hash") if isinstance(entry, dict) else None)
        section = manifest.setdefault(key, {}) | value
        manifest[key] = dict(sorted(section.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
        write_manifest(plan.run_dir, manifest)
