"""Reports from real generations rated through the real server by SCRIPTED participants.

For each judgment type (likert ``fluency``, direct ``direct-quality``, pairwise
``pairwise-quality``, best-worst ``best-worst-quality``) this creates a study over a run's
generations, serves it with ``maxbench serve`` (gunicorn, ``maxbench.human_eval.testing.participants.start_server``),
lets scripted participants rate every page over HTTP and writes ``maxbench report`` for the study
under ``--out``/scripted-<judgment>/.

The participants are scripts, not people: each system gets a fixed, made-up quality (its place in
``--systems``: 0, 1, 2, ...; later is better), each participant perceives a text's quality as
that value plus seeded normal noise (sd ``--noise``), and answers from it: a Likert value
3 + (quality - mean), a slider 50 + 15 (quality - mean), the better of a pair, the best and worst
of a tuple. They recognise a text's system by looking its text up in the run, which no real
participant can do (the pages are blinded). The reports therefore show the app's path and the
statistics working end to end on real texts, and nothing about the systems' real quality.

    python scripts/scripted_study.py [--run results/base-lms/runs/base-lms-food-reviews] \\
        [--items 12] [--raters 3] [--out results/studies] \\
        [--judges smollm2-135m gemma3-270m [--human-share 0.5] [--threads 2]]

With ``--judges`` each study is also rated by each model judge (``maxbench judge``, in this
process, timed: units per second and the load average go to judging.json), and the report gains
judges.md/.html/.json (``maxbench report --judges``): the judges' agreement with the scripted
participants (a script, so agreement with a script) and PPI++ from ``--human-share`` of the
prompts' ratings plus the judges' scores of the rest.

The run may be sharded (generations.shard-*.jsonl): the shards are merged into a scratch copy.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from maxbench.errors import MaxbenchError  # noqa: E402
from maxbench.human_eval.store.db import session_for  # noqa: E402
from maxbench.human_eval.studies.create import create_study, read_generations  # noqa: E402
from maxbench.human_eval.studies.options import StudyOptions  # noqa: E402
from maxbench.human_eval.studies.rubrics import load_rubric  # noqa: E402
from maxbench.human_eval.testing.participants import ScriptedAnnotator, start_server  # noqa: E402
from maxbench.rundir import recorded_path  # noqa: E402

DEFAULT_RUN = ROOT / "results" / "base-lms" / "runs" / "base-lms-food-reviews"
DEFAULT_SYSTEMS = [
    "smollm2-135m/softmax/top_p=0.9",
    "smollm2-135m/sparsemax/top_p=0.9",
    "smollm2-135m/graphmax(lam=1.0,solver=exact)/top_p=0.9",
    "smollm2-135m/kerbs/top_p=0.9",
]
RUBRICS = {
    "likert": "fluency",
    "direct": "direct-quality",
    "pairwise": "pairwise-quality",
    "best-worst": "best-worst-quality",
}
_TEXT = re.compile(r'id="text(?:-\d)?">(.*?)</div>', re.S)


def merged_run(run: Path, scratch: Path) -> Path:
    """The run itself when it has generations.jsonl, else a scratch copy with its shards merged."""
    if (run / "generations.jsonl").is_file():
        return run
    shards = sorted(run.glob("generations.shard-*.jsonl"))
    if not shards:
        raise MaxbenchError(f"{run} has no generations.jsonl or generations.shard-*.jsonl")
    scratch.mkdir(parents=True, exist_ok=True)
    with open(scratch / "generations.jsonl", "w", encoding="utf-8") as out:
        for shard in shards:
            out.write(shard.read_text(encoding="utf-8"))
    if (run / "manifest.json").is_file():
        shutil.copy(run / "manifest.json", scratch / "manifest.json")
    return scratch


class Participant:
    """A scripted participant's answers: perceived quality = the system's quality + noise."""

    def __init__(self, judgment: str, quality: dict[str, float], system_of: dict[str, str], rng, noise: float):
        self.judgment, self.quality, self.system_of, self.rng, self.noise = judgment, quality, system_of, rng, noise
        self.mean = sum(quality.values()) / len(quality)

    def perceive(self, text: str) -> float:
        return self.quality[self.system_of[text]] - self.mean + self.rng.gauss(0, self.noise)

    def __call__(self, page: str, fields: list[str]) -> dict[str, int]:
        texts = [html.unescape(t) for t in _TEXT.findall(page)]
        texts = ["" if t == "<em>(no text was produced)</em>" else t for t in texts]
        q = [self.perceive(t) for t in texts]
        if self.judgment == "likert":
            return {f: min(5, max(1, round(3 + q[0]))) for f in fields}
        if self.judgment == "direct":
            return {f: min(100, max(0, round(50 + 15 * q[0]))) for f in fields}
        if self.judgment == "pairwise":
            return {f: 1 if q[0] > q[1] else 2 for f in fields}
        best, worst = q.index(max(q)) + 1, q.index(min(q)) + 1
        return {f: best if f.endswith("_best") else worst for f in fields}


def rated_study(db_url: str, judgment: str) -> str | None:
    """The slug of this judgment's scripted study already in the database, every participant
    finished (so a rerun with the same ``--db`` resumes judging instead of rebuilding); None when
    there is none. A study some participant has not finished is refused: the run that made it was
    killed while people rated, so the database is to be deleted and the script run again."""
    from sqlalchemy import select

    from maxbench.human_eval.store.models import Annotator, Study

    with session_for(db_url) as session:
        study = session.scalar(select(Study).where(Study.title == f"Scripted {judgment} study"))
        if study is None:
            return None
        people = session.scalars(
            select(Annotator).where(Annotator.study_id == study.id, Annotator.kind == "human")
        ).all()
        if not people or any(a.finished_at is None for a in people):
            raise MaxbenchError(
                f"study {study.slug} in {db_url} was left half rated by its scripted participants (a killed run): "
                "delete that database and run the script again"
            )
        return study.slug


def run_judgment(judgment, run_dir, db_url, base_url, systems, items, raters, seed, noise) -> str:
    rubric = load_rubric(RUBRICS[judgment])
    with session_for(db_url, create=True) as session:
        options = StudyOptions(
            systems=systems,
            items_per_system=items,
            raters_per_item=raters,
            seed=seed,
            attention_rate=0 if judgment == "best-worst" else 0.1,
            title=f"Scripted {judgment} study",
        )
        created = create_study(session, run_dir, rubric, options)
    records = [r for r in read_generations(run_dir) if r["system"] in systems]
    system_of = {r["text"]: r["system"] for r in sorted(records, key=lambda r: -r["sample"])}
    quality = {s: float(k) for k, s in enumerate(systems)}
    for a, (_, link) in enumerate(created.links(base_url)):
        participant = Participant(judgment, quality, system_of, random.Random(f"{seed}-{judgment}-{a}"), noise)
        annotator = ScriptedAnnotator(base_url, link, rubric.check.answer)
        path = annotator.start()
        while path and path.startswith("/item/"):
            path = annotator.rate_page(path, participant, reads_page=True)
        annotator.close()
    return created.slug


def judge_studies(slugs: dict[str, str], db_url: str, models: list[str], threads: int, out: Path) -> None:
    """Each study judged by each model, in this process, one model after the other. After each
    (model, study) the measurement is written into ``out``/scripted-<judgment>/judging.json, one
    entry per judge: units, seconds, units per second (model loading excluded) and the load
    average before and after. A rerun (same ``--db``) judges only the units not stored yet and
    keeps an earlier entry of a judge whose units were all judged before."""
    from maxbench.human_eval.judges.judge import judge_study
    from maxbench.human_eval.judges.scoring import InProcessJudge, load_judge_model

    for model in models:
        loaded = load_judge_model(model, threads=threads)
        for judgment, slug in slugs.items():
            before = os.getloadavg()
            with session_for(db_url) as session:
                summary = judge_study(session, slug, InProcessJudge(loaded), log=sys.stderr)
            entry = {
                "judge": model,
                "rater": summary.rater,
                "backend": "in-process",
                "device": loaded.device,
                "threads": threads,
                "units": summary.units,
                "judged_now": summary.judged,
                "seconds": round(summary.seconds, 2),
                "units_per_second": round(summary.units_per_second, 3),
                "scoring": sorted(summary.scoring),
                "load_average_before": [round(x, 2) for x in before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
            }
            path = out / f"scripted-{judgment}" / "judging.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            entries = json.loads(path.read_text()) if path.is_file() else []
            earlier = [e for e in entries if e["rater"] == summary.rater]
            if summary.judged or not earlier:
                entries = [e for e in entries if e["rater"] != summary.rater] + [entry]
                path.write_text(json.dumps(entries, indent=2) + "\n")
            save_judgments(db_url, slug, path.parent / JUDGMENTS_FILE)


JUDGMENTS_FILE = "judgments.json"


def save_judgments(db_url: str, slug: str, path: Path) -> None:
    """The study's judges and their judgments, each text named by (prompt code, system) rather
    than by database ids, so that ``load_judgments`` puts them back into a rebuilt database (the
    scripted studies are rebuilt the same from ``--seed``)."""
    from sqlalchemy import select

    from maxbench.human_eval.store.models import Annotator, Item, Judgment, StudySystem
    from maxbench.human_eval.studies.create import find_study

    with session_for(db_url) as session:
        study = find_study(session, slug)
        texts = {
            i: [code, name]
            for i, code, name in session.execute(
                select(Item.id, Item.code, StudySystem.name)
                .join(StudySystem, Item.system_id == StudySystem.id)
                .where(Item.study_id == study.id)
            )
        }
        raters = session.scalars(
            select(Annotator).where(Annotator.study_id == study.id, Annotator.kind == "model").order_by(Annotator.label)
        ).all()
        judgments = []
        for rater in raters:
            for j in session.scalars(select(Judgment).where(Judgment.annotator_id == rater.id)):
                judgments.append(
                    {
                        "rater": rater.label,
                        "texts": [texts[i] for i in j.items],
                        "criterion": j.criterion,
                        "value": j.value,
                        "expected": j.expected,
                        "probabilities": j.probabilities,
                        "label_mass": j.label_mass,
                        "scoring": j.scoring,
                    }
                )
        judgments.sort(key=lambda j: (j["rater"], j["texts"], j["criterion"]))
        doc = {
            "note": "the judges' judgments of this scripted study (scripts/scripted_study.py puts them back into a "
            "rebuilt database instead of judging again)",
            "study_title": study.title,
            "judges": [{"rater": r.label, "identity": r.judge} for r in raters],
            "judgments": judgments,
        }
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def load_judgments(db_url: str, slug: str, path: Path, models: list[str]) -> int:
    """Put ``path``'s judgments (``save_judgments``) of the judges named in ``models`` into the
    study; units this database holds already are kept as they are. Returns how many were added."""
    import secrets

    from sqlalchemy import select

    from maxbench.human_eval.store.db import hash_token
    from maxbench.human_eval.store.models import Annotator, Item, Judgment, StudySystem
    from maxbench.human_eval.studies.create import find_study

    doc = json.loads(path.read_text(encoding="utf-8"))
    added = 0
    with session_for(db_url) as session:
        study = find_study(session, slug)
        ids = {
            (code, name): i
            for i, code, name in session.execute(
                select(Item.id, Item.code, StudySystem.name)
                .join(StudySystem, Item.system_id == StudySystem.id)
                .where(Item.study_id == study.id)
            )
        }
        for judge in doc["judges"]:
            if judge["identity"]["model"] not in models:
                continue
            rater = session.scalar(
                select(Annotator).where(Annotator.study_id == study.id, Annotator.label == judge["rater"])
            )
            if rater is None:
                rater = Annotator(
                    study_id=study.id,
                    label=judge["rater"],
                    token_hash=hash_token(secrets.token_urlsafe(32)),
                    kind="model",
                    judge=judge["identity"],
                )
                session.add(rater)
                session.flush()
            elif rater.kind != "model" or (rater.judge or {}).get("key") != judge["identity"]["key"]:
                raise MaxbenchError(f"{path}: rater {judge['rater']} of study {slug} is another rater; nothing added")
            stored = set(
                session.execute(select(Judgment.unit, Judgment.criterion).where(Judgment.annotator_id == rater.id))
            )
            for j in doc["judgments"]:
                if j["rater"] != judge["rater"]:
                    continue
                try:
                    items = [ids[tuple(t)] for t in j["texts"]]
                except KeyError as exc:
                    raise MaxbenchError(
                        f"{path}: text {exc.args[0]} is not in study {slug} (rebuilt with other --items, --systems or "
                        "--seed?); nothing added"
                    ) from None
                unit = ",".join(map(str, items))
                if (unit, j["criterion"]) in stored:
                    continue
                session.add(
                    Judgment(
                        annotator_id=rater.id,
                        item_id=items[0],
                        unit=unit,
                        items=items,
                        criterion=j["criterion"],
                        value=j["value"],
                        expected=j["expected"],
                        probabilities=j["probabilities"],
                        label_mass=j["label_mass"],
                        scoring=j["scoring"],
                    )
                )
                added += 1
        session.commit()
    return added


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, default=DEFAULT_RUN)
    p.add_argument("--systems", nargs="+", default=DEFAULT_SYSTEMS)
    p.add_argument("--judgments", nargs="+", choices=list(RUBRICS), default=list(RUBRICS))
    p.add_argument("--items", type=int, default=12, help="prompts per system (default 12)")
    p.add_argument("--raters", type=int, default=3, help="raters per item (default 3)")
    p.add_argument("--noise", type=float, default=1.0, help="sd of a participant's perception noise (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "studies")
    p.add_argument("--db", help="database URL (default: a fresh SQLite file in a scratch folder)")
    p.add_argument("--judges", nargs="+", metavar="MODEL", default=[], help="model judges to rate each study with")
    p.add_argument("--human-share", type=float, help="with --judges: share of prompts whose ratings PPI keeps")
    p.add_argument("--threads", type=int, default=2, help="with --judges: torch CPU threads (default 2)")
    args = p.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="scripted-study-"))
    try:
        run_dir = merged_run(args.run, scratch / "run")
        db_url = args.db or f"sqlite:///{scratch / 'ratings.sqlite3'}"
        with session_for(db_url, create=True):
            pass
        server = start_server(db_url, workers=1, threads=2, log_path=scratch / "server.log")
        try:
            slugs = {}
            for j in args.judgments:
                slugs[j] = rated_study(db_url, j) or run_judgment(
                    j, run_dir, db_url, server.base_url, args.systems, args.items, args.raters, args.seed, args.noise
                )
        finally:
            server.stop()
        if args.judges:
            for judgment, slug in slugs.items():  # what was judged before (committed) is not judged again
                saved = args.out / f"scripted-{judgment}" / JUDGMENTS_FILE
                if saved.is_file():
                    print(f"{judgment}: {load_judgments(db_url, slug, saved, args.judges)} judgments from {saved}")
            judge_studies(slugs, db_url, args.judges, args.threads, args.out)
        for judgment, slug in slugs.items():
            name = f"scripted-{judgment}"
            cmd = [sys.executable, "-m", "maxbench", "report", "--study", slug, "--db", db_url]
            cmd += ["--out", str(args.out), "--name", name, "--n-boot", str(args.n_boot), "--seed", str(args.seed)]
            if args.judges:
                cmd += ["--judges"] + (["--human-share", str(args.human_share)] if args.human_share else [])
            if judgment in ("likert", "direct"):  # tested against the first system given (quality 0)
                cmd += ["--reference", args.systems[0]]
            subprocess.run(cmd, check=True, cwd=ROOT)
            if args.judges:
                save_judgments(db_url, slug, args.out / name / JUDGMENTS_FILE)
            scripted = {
                "note": "rated by scripted participants through the real server (scripts/scripted_study.py)",
                "quality": {s: k for k, s in enumerate(args.systems)},
                "noise_sd": args.noise,
                "run": recorded_path(args.run),
            }
            (args.out / name / "scripted.json").write_text(json.dumps(scripted, indent=2) + "\n")
            print(f"{judgment}: study {slug}, report {args.out / name}")
    except MaxbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
