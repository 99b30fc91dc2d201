"""Builders of small run folders and the command lines that make and score them, for tests."""

import json
from pathlib import Path


# ---------------------------------------------------------------- the leaderboard
def write_scored_run(
    root,
    run_id,
    systems,
    suite="six",
    n_items=6,
    seed=1234,
    covered=None,
    new_format=True,
    value=0.5,
    extra_scores=None,
):
    """A scored run directory as `maxbench run` leaves it (manifest.json, scores.json, generations):
    the leaderboard reads only these files."""
    d = Path(root) / run_id
    d.mkdir(parents=True)
    ident = {
        "suite": {"name": suite, "version": "1", "sha256": (suite * 64)[:64], "n_items": n_items, "path": None},
        "systems": systems,
        "samples": 1,
        "seed": seed,
        "registry": "t",
    }
    (d / "manifest.json").write_text(json.dumps({"run_id": run_id, "identity": ident}))
    covered = n_items if covered is None else covered
    entries = {}
    for k, s in enumerate(systems):
        v = value + k / 10
        scores = {"bleu-4": {"value": v, "ci_low": v - 0.01, "ci_high": v + 0.01, "higher_is_better": True}}
        scores |= extra_scores or {}
        entries[s] = {"n_texts": covered, "n_prompts": covered, "scores": scores}
        if new_format:
            entries[s] |= {"suite_prompts": n_items, "partial": covered < n_items}
    doc = {"suite": ident["suite"], "systems": entries, "comparisons": {"baseline": systems[0], "systems": {}}}
    (d / "scores.json").write_text(json.dumps(doc))
    rows = [
        {"system": s, "prompt_id": f"p{i:02d}", "sample": 0, "prompt": "P", "reference": "R", "text": "T"}
        | {"stats": {"entropy": [1.0, 2.0], "support": [3, 2]}}
        for s in systems
        for i in range(covered)
    ]
    (d / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def leaderboard_table(md: str) -> list[list[str]]:
    """The full table of a leaderboard.md (after the compact one, when there is one)."""
    lines = [ln for ln in md.split("## All metrics")[-1].splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]


SCORED_SYSTEMS = ["m/softmax/greedy", "m/sparsemax/greedy"]


def score_args(run_dir, *more):
    return ["score", run_dir, "--metrics", "distinct,rep", "--bootstrap", "20", "--quiet", *more]


TINY_LINEUP_SYSTEMS = [
    "tiny-random/softmax/top_p=0.9,max_new_tokens=24",
    "tiny-random/sparsemax/top_p=0.9,max_new_tokens=24",
    "tiny-random/softmax/greedy,max_new_tokens=24",
]


def write_tiny_lineup(tmp_path, systems=TINY_LINEUP_SYSTEMS, extra=""):
    rows = [
        {"id": f"p{i:02d}", "prompt": f"Review {i}: the soup was", "reference": f"cold and salty, sadly {i}"}
        for i in range(12)
    ]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "twelve"\nfile = "p.jsonl"\n')
    reg = tmp_path / "reg.toml"
    reg.write_text(
        f'name = "t"\nsuite = "{tmp_path / "s.toml"}"\nsamples = 2\nbatch_size = 4\n'
        f'baseline = "{systems[0]}"\nmetrics = ["bleu-n", "self-bleu", "rep", "distinct", "rouge-l"]\n'
        f"systems = {json.dumps(systems)}\n{extra}"
    )
    return reg
