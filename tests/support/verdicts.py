"""A toy paper and constructed cells, for the tests of the verdict rules and of the reproduction
report's judging and plots."""

import json
from types import SimpleNamespace

from maxbench.benchmark.reproduce.cells import CellVerdict, Comparison
from maxbench.benchmark.reproduce.papers import load_paper
from maxbench.benchmark.reproduce.protocol import RunSpec
from maxbench.benchmark.reproduce.verdicts import Estimate

PAPER = """
paper = "toy"
title = "toy"
source = "tests"
[protocol]
models = ["m1", "m2"]
corpora = ["c"]
folds = 0
baseline = "softmax"
metrics = ["bleu-n"]
[protocol.systems]
{systems}
{claims}
"""

CLAIM = """
[[claims]]
id = "{id}"
where = "Table {id}"
statement = "{method} raises BLEU-2"
methods = ["{method}"]
baseline = "softmax"
scores = ["bleu-2"]
direction = "higher"
paper_baseline = [0.5]
paper_method = [0.55]
"""


def toy_paper(tmp_path, claims: str, systems=("softmax", "graphmax", "sparsemax")):
    """The paper "toy" (models m1 and m2, corpus c, no folds, baseline softmax) with ``systems``, each
    named for its layer, and ``claims`` (TOML: ``toy_claim``), loaded from a file as a paper is."""
    path = tmp_path / "toy.toml"
    table = "".join(f'{s} = "{s}"\n' for s in systems)
    path.write_text(PAPER.format(systems=table, claims=claims))
    return load_paper(str(path))


def toy_claim(claim_id: str, method: str = "graphmax") -> str:
    """A claim of the toy paper, as TOML: ``method`` raises BLEU-2 over softmax by 10% (0.5 -> 0.55)."""
    return CLAIM.format(id=claim_id, method=method)


def toy_cell(claim: str, est: Estimate, paper=0.1, model="m1", method="graphmax", **fields) -> CellVerdict:
    """A difference cell of the toy paper's ``claim`` with one comparison, against softmax: the relative
    effect ``est`` beside the paper's ``paper``; ``fields`` set the cell's other fields."""
    return CellVerdict(
        claim=claim,
        model=model,
        corpus="c",
        method=method,
        baselines="softmax",
        scores="bleu-2",
        kind="difference",
        paper_relative=paper,
        est=est,
        n_folds=1,
        n_prompts=64,
        details=[Comparison(baseline="softmax", est=est, paper=paper)],
        **fields,
    )


def kerbs_run(root, resources: dict, role: str = "kerbs") -> tuple[RunSpec, str]:
    """A run of the toy paper (m1 on c) under ``root/runs/m1-c`` whose manifest records a KerBS head's
    ``resources`` (its cache key, its training history's flags), the KerBS system in the protocol's
    ``role``; returns the run and that system."""
    run_dir = root / "runs" / "m1-c"
    run_dir.mkdir(parents=True)
    system = "m1/kerbs/greedy,max_new_tokens=1"
    manifest = {"systems": {system: {"layer": "kerbs"}}, "resources": {system: resources}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    plan = SimpleNamespace(run_dir=run_dir, suite=SimpleNamespace(items=[{}] * 96, name="s"), systems=[], corpus="c")
    roles = {"softmax": "m1/softmax/greedy,max_new_tokens=1", role: system}
    return RunSpec("m1", "c", None, plan, roles, roles["softmax"]), system
