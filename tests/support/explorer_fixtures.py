"""A small scored run (tiny-random, real decoding and scorer) with hostile text, and a study over it
rated by scripted raters, shared by the explorer's tests."""

import json
import sys
from pathlib import Path

HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2"> {{7*7}} \u2028 & and'
SYSTEMS = [
    "tiny-random/softmax/top_p=0.9,max_new_tokens=16",
    "tiny-random/sparsemax/top_p=0.9,max_new_tokens=16",
    "tiny-random/softmax/greedy,max_new_tokens=16",
]


def make_scored_run(root: Path) -> Path:
    import subprocess

    rows = [
        {"id": f"p{i:02d}", "prompt": f"Review {i}: the soup was", "reference": f"cold and salty, sadly {i}"}
        for i in range(8)
    ]
    rows[3]["prompt"] = HOSTILE
    root.mkdir(parents=True, exist_ok=True)
    (root / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "s.toml").write_text('name = "eight"\nfile = "p.jsonl"\n')
    (root / "reg.toml").write_text(
        f'name = "t"\nsuite = "{root / "s.toml"}"\nsamples = 1\nbatch_size = 4\nbaseline = "{SYSTEMS[0]}"\n'
        f'metrics = ["bleu-n", "self-bleu", "rep", "seq-rep", "distinct", "rouge-l"]\nsystems = {json.dumps(SYSTEMS)}\n'
    )
    cmd = [sys.executable, "-m", "maxbench", "run", "--lineup", str(root / "reg.toml"), "--runs-dir"]
    cmd += [str(root / "runs"), "--run-id", "r", "--out", str(root / "out"), "--n-resamples", "50", "--threads", "1"]
    subprocess.run([*cmd, "--no-progress"], check=True, capture_output=True)
    # one text says hostile things too (the texts of tiny-random are bytes noise)
    gen = root / "runs" / "r" / "generations.jsonl"
    lines = [json.loads(x) for x in gen.read_text(encoding="utf-8").split("\n") if x.strip()]
    lines[0]["text"] = HOSTILE
    lines[0]["pieces"] = [HOSTILE[:20], HOSTILE[20:]]
    lines[0]["stats"]["p_chosen"] = lines[0]["stats"]["p_chosen"][:2]
    gen.write_text("".join(json.dumps(x) + "\n" for x in lines))
    # scored again: scores.json must describe these generations (leaderboard and view check its hash)
    score = [sys.executable, "-m", "maxbench", "score", str(root / "runs" / "r"), "--bootstrap", "50", "--threads", "1"]
    score += ["--metrics", "bleu-n,self-bleu,rep,seq-rep,distinct,rouge-l"]
    subprocess.run(score, check=True, capture_output=True)
    return root / "runs" / "r"


def make_study_export(root: Path, run_dir: Path) -> Path:
    """A study over ``run_dir`` in a fresh database, every page rated by a scripted rater, exported for the explorer."""
    from sqlalchemy import select

    from maxbench.human_eval.store.db import session_for
    from maxbench.human_eval.store.models import Assignment, Rating
    from maxbench.human_eval.studies.create import create_study
    from maxbench.human_eval.studies.export import explorer_export
    from maxbench.human_eval.studies.options import StudyOptions
    from maxbench.human_eval.studies.rubrics import load_rubric

    url = f"sqlite:///{root / 'ratings.sqlite3'}"
    rubric = load_rubric("graphmax")
    with session_for(url, create=True) as session:
        create_study(session, run_dir, rubric, StudyOptions(items_per_system=8, raters_per_item=1, attention_rate=0))
        for a in session.scalars(select(Assignment).where(Assignment.item_id.is_not(None))):
            length = len(a.item.text)
            for k, c in enumerate(rubric.criteria):
                session.add(Rating(assignment_id=a.id, criterion=c.name, value=1 + (length + k) % 5))
        session.commit()
        doc = explorer_export(session, session.scalars(select(Assignment)).first().annotator.study.slug)
    path = root / "study.json"
    path.write_text(json.dumps(doc))
    return path
