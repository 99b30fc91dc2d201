"""``maxbench serve`` and ``maxbench study ...``: run the rating app and manage studies."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_write, check_not_input
from maxbench.human_eval import PRODUCTION_DOCS

DEFAULT_BASE_URL = "http://127.0.0.1:8000"


def _preset_names() -> list[str]:
    """The preset rubrics' names, from their files (importing ``rubrics`` here would load the store's
    database layer for every command's help)."""
    return sorted(p.stem for p in (Path(__file__).parent / "studies" / "rubrics").glob("*.toml"))


def register(subparsers) -> None:
    serve = subparsers.add_parser(
        "serve",
        help="run the human-evaluation rating app (gunicorn)",
        description="Serve the rating app with gunicorn. For production behind a reverse proxy, see "
        f"{PRODUCTION_DOCS}.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    serve.add_argument("--threads", type=int, default=4, help="threads per worker (default 4)")
    serve.add_argument(
        "--db", help="SQLAlchemy database URL (default $MAXBENCH_DB_URL or SQLite under $MAXBENCH_HOME/human_eval)"
    )
    serve.add_argument(
        "--access-log",
        action="store_true",
        help="log every request to stderr, like every other line (tokens and query values redacted)",
    )
    serve.set_defaults(func=cmd_serve)

    study = subparsers.add_parser("study", help="create, list, export, close and reopen rating studies")
    study_sub = study.add_subparsers(dest="study_command", metavar="ACTION", required=True)

    create = study_sub.add_parser(
        "create",
        help="create a blinded rating study from a run's generations",
        description="Sample texts from RUN_DIR/generations.jsonl, hide the systems, assign them to "
        "annotators (balanced, Latin-square style) and print the personal links.",
    )
    create.add_argument("run_dir", metavar="RUN_DIR", help="results/runs/<run-id> directory (or the run id)")
    create.add_argument(
        "--systems", nargs="+", metavar="SYSTEM", help="systems to compare (default: every system in the run)"
    )
    create.add_argument("--items-per-system", type=int, required=True, metavar="N", help="texts to rate per system")
    create.add_argument(
        "--raters-per-item",
        type=int,
        required=True,
        metavar="K",
        help="ratings each text gets, from K different annotators",
    )
    create.add_argument(
        "--annotators", type=int, metavar="M", help="number of annotators (default K: everyone rates every text)"
    )
    create.add_argument(
        "--rubric",
        required=True,
        metavar="NAME|FILE.toml",
        help=f"preset ({', '.join(_preset_names())}) or a rubric TOML file",
    )
    create.add_argument(
        "--independent",
        action="store_true",
        help="sample prompts independently per system (default: the same prompts for every system, a paired design)",
    )
    create.add_argument("--seed", type=int, default=0, help="seed of sampling and order (default 0)")
    create.add_argument(
        "--attention-rate",
        type=float,
        default=0.1,
        help="attention-check pages per rated text (default 0.1; 0 turns them off)",
    )
    create.add_argument(
        "--attention-fail-limit", type=int, default=2, help="failed attention checks that stop an annotator (default 2)"
    )
    create.add_argument(
        "--gold-items",
        type=int,
        default=0,
        metavar="N",
        help="gold pairs every annotator judges: a suite reference against a shuffled, looped or truncated copy "
        "of it (default 0; see human_eval/studies/gold.py)",
    )
    create.add_argument(
        "--completion-code", help="code shown on the finish page; Prolific participants are redirected with it"
    )
    create.add_argument(
        "--open-enrolment",
        action="store_true",
        help="one public URL (<base-url>/s/<study>) for Prolific (PROLIFIC_PID, STUDY_ID, SESSION_ID) or MTurk "
        "(workerId, assignmentId, hitId); each participant gets the next free block",
    )
    create.add_argument(
        "--abandon-after-minutes",
        type=int,
        default=60,
        help="with --open-enrolment: a block claimed and not started for this long goes to the next participant",
    )
    create.add_argument(
        "--check-attempts",
        type=int,
        help="comprehension-check attempts before a participant is stopped (default: no limit)",
    )
    create.add_argument("--title", help="title shown to annotators (default: the rubric's)")
    create.add_argument("--consent-file", type=Path, help="text file with the consent information")
    create.add_argument(
        "--base-url",
        default=os.environ.get("MAXBENCH_BASE_URL", DEFAULT_BASE_URL),
        help=f"public address of the app, for the links (default $MAXBENCH_BASE_URL or {DEFAULT_BASE_URL})",
    )
    create.add_argument("--links-out", type=Path, help="also write the links to this CSV file (mode 0600)")
    create.add_argument("--db", help="database URL (default $MAXBENCH_DB_URL or the SQLite default)")
    create.set_defaults(func=cmd_study_create)

    plan = study_sub.add_parser(
        "plan",
        help="items and raters a study needs for a target power, simulated with the report's own tests",
        description="Simulate studies of each judgment type with the tests maxbench report runs (see "
        "human_eval/studies/plan.py for the model) and print, per number of raters, the fewest items reaching the power.",
    )
    size = plan.add_mutually_exclusive_group(required=True)
    size.add_argument("--effect", type=float, metavar="D", help="assumed effect: Cohen's d of one rating (e.g. 0.3)")
    size.add_argument("--pilot", metavar="FILE", help="pilot ratings (long-format CSV/JSON): the effect is estimated")
    size.add_argument(
        "--width",
        type=float,
        metavar="W",
        help="instead of power: the human-rated texts whose 95%% interval of a system's mean rating is at most W "
        "wide, without a judge and with one of correlation --judge-correlation (PPI++)",
    )
    plan.add_argument(
        "--judge-correlation",
        type=float,
        metavar="R",
        help="with --width: the judge's measured correlation with people's ratings (judges.json: pearson)",
    )
    plan.add_argument(
        "--sd", type=float, default=1.0, help="with --width: sd of a text's mean rating by people (default 1.0)"
    )
    plan.add_argument(
        "--judged",
        type=int,
        metavar="N",
        help="with --width: texts the judge rates beyond the people's (default: unbounded)",
    )
    plan.add_argument(
        "--reference", metavar="SYSTEM", help="with --pilot: the reference system (default: first by name)"
    )
    plan.add_argument(
        "--judgment", nargs="+", choices=("likert", "direct", "pairwise", "best-worst"), help="default: all four"
    )
    plan.add_argument("--systems", type=int, default=2, metavar="N", help="systems in the study (default 2)")
    plan.add_argument("--power", type=float, default=0.8, help="target power (default 0.8)")
    plan.add_argument("--alpha", type=float, default=0.05, help="significance level, Holm-adjusted (default 0.05)")
    plan.add_argument("--raters", type=int, nargs="+", metavar="K", help="raters per item to try (default 3)")
    plan.add_argument("--items", type=int, nargs="+", metavar="N", help="items per system to try (default 15 ... 300)")
    plan.add_argument("--n-sim", type=int, default=100, help="simulated studies per design (default 100)")
    plan.add_argument("--seed", type=int, default=0, help="seed of the simulations (default 0)")
    plan.set_defaults(func=cmd_study_plan)

    lst = study_sub.add_parser("list", help="list the studies in the database")
    lst.add_argument("--db", help="database URL")
    lst.set_defaults(func=cmd_study_list)

    export = study_sub.add_parser("export", help="write a study's ratings in long format (CSV or JSON)")
    export.add_argument("study_id", metavar="STUDY", help="study id (as printed by study create)")
    export.add_argument(
        "--format",
        choices=["csv", "json", "explorer"],
        default="csv",
        help="csv or json: long format; explorer: JSON with each text's run prompt id, for maxbench view --study",
    )
    export.add_argument("--out", type=Path, help="output file (default stdout)")
    export.add_argument("--blind", action="store_true", help="system codes instead of names")
    export.add_argument(
        "--judges",
        action="store_true",
        help="csv or json: add the judges' (model raters') judgments after the people's ratings, every row marked "
        "by rater_kind (human or model); without it judges are never exported",
    )
    export.add_argument("--db", help="database URL")
    export.set_defaults(func=cmd_study_export)

    participants = study_sub.add_parser(
        "participants",
        help="list a study's participants for the crowd platform's approval (CSV)",
        description="One row per participant: id (the Prolific or MTurk participant id, else the annotator's "
        "label), completion (completed pages / pages), attention checks passed and failed, gold accuracy. "
        "The file holds participant ids: it is written with mode 0600.",
    )
    participants.add_argument("study_id", metavar="STUDY", help="study id (as printed by study create)")
    participants.add_argument("--out", type=Path, metavar="FILE.csv", help="output file (default stdout)")
    participants.add_argument("--db", help="database URL")
    participants.set_defaults(func=cmd_study_participants)

    close = study_sub.add_parser("close", help="close a study: annotators can no longer rate")
    close.add_argument("study_id", metavar="STUDY")
    close.add_argument("--db", help="database URL")
    close.set_defaults(func=cmd_study_close)

    reopen = study_sub.add_parser("reopen", help="reopen a closed study: annotators can rate again")
    reopen.add_argument("study_id", metavar="STUDY")
    reopen.add_argument("--db", help="database URL")
    reopen.set_defaults(func=cmd_study_reopen)

    db = subparsers.add_parser("db", help="the ratings database's schema: upgrade it after upgrading maxbench")
    db_sub = db.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    upgrade = db_sub.add_parser(
        "upgrade",
        help="bring the ratings database to this maxbench's schema, keeping every rating",
        description="Run the schema migrations (alembic) the database has not had yet. A database made before "
        "schema versions is first matched to a revision by its tables. Restart running servers afterwards.",
    )
    upgrade.add_argument("--db", help="database URL (default $MAXBENCH_DB_URL or the SQLite default)")
    upgrade.set_defaults(func=cmd_db_upgrade)

    judge = subparsers.add_parser(
        "judge",
        help="rate a study's texts with a language model: a rater of kind 'model' beside the people",
        description="Rate every unit of a study (a text, a pair in both orders, a best-worst tuple) with a model, "
        "using the study's rubric and judgment kind and showing it what a person sees. The score is read from the "
        "model's probabilities of the rubric's labels (see docs/human-evaluation.md, Judges). Judgments are stored "
        "in the study's database under the judge's rater id; a run that was stopped resumes where it stopped.",
    )
    judge.add_argument("study_id", metavar="STUDY", help="study id (as printed by study create)")
    judge.add_argument(
        "--judge",
        required=True,
        metavar="MODEL",
        help="a maxbench base model: built-in name (smollm2-135m, gemma3-270m, tiny-random), local directory or hub "
        "id, optionally with an adapter that needs no training as system strings write it (MODEL+peft(path=DIR)); "
        "or openai:URL:MODEL, an OpenAI-compatible server (e.g. openai:http://127.0.0.1:8080/v1:smollm2)",
    )
    judge.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        metavar="NAME",
        help="with openai:: the environment variable holding the API key (default OPENAI_API_KEY; never logged)",
    )
    judge.add_argument("--concurrency", type=int, default=4, help="with openai:: requests at once (default 4)")
    judge.add_argument(
        "--rate", type=float, default=10.0, help="with openai:: requests per second at most (default 10)"
    )
    judge.add_argument("--retries", type=int, default=4, help="with openai:: retries of a failed request (default 4)")
    judge.add_argument("--timeout", type=float, default=60.0, help="with openai:: seconds per request (default 60)")
    judge.add_argument(
        "--rater-id", metavar="ID", help="the judge's rater id in the study (default judge-<model>-<identity hash>)"
    )
    judge.add_argument("--limit", type=int, metavar="N", help="judge at most N units not yet judged, then stop")
    judge.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: CUDA when present, else CPU)")
    judge.add_argument("--threads", type=int, default=None, help="torch CPU threads (set it on a shared machine)")
    judge.add_argument("--db", help="database URL (default $MAXBENCH_DB_URL or the SQLite default)")
    judge.set_defaults(func=cmd_judge)

    rubric = study_sub.add_parser("rubric", help="check and show a rubric preset or TOML file")
    rubric.add_argument(
        "rubric", metavar="NAME|FILE.toml", nargs="?", help="rubric to show (default: list the presets)"
    )
    rubric.set_defaults(func=cmd_study_rubric)


def cmd_serve(args: argparse.Namespace) -> int:
    from maxbench.human_eval.app.server import serve

    if args.db:
        os.environ["MAXBENCH_DB_URL"] = args.db  # the workers build their app from the environment
    serve(args.host, args.port, args.workers, args.threads, args.access_log)
    return 0


def _check_base_url(base_url: str) -> None:
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise MaxbenchError(
            f"--base-url {base_url!r} is not an http(s) address for the links: give e.g. https://rate.example.org"
        )


def _open_links_file(path: Path) -> tuple[int, bool]:
    """(descriptor, whether it was created) of the links CSV, opened before the study exists.

    The links are the annotators' only credentials: a file that cannot be written must stop
    the command before the study is made, not after. An existing file is truncated only
    once the study exists.
    """
    existed = path.exists()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError as exc:
        raise MaxbenchError(
            f"cannot write --links-out {path} ({exc.strerror}): choose a file in a writable folder"
        ) from None
    return fd, not existed


def _print_created(created, base_url: str, links_fd: int | None, links_out: Path | None) -> None:
    links = created.links(base_url)
    print(f"study: {created.slug}")
    print(f"texts: {created.n_items}; pages per annotator: {', '.join(str(n) for n in created.n_pages)}")
    print(f"admin token (keep it secret; log in at {base_url.rstrip('/')}/admin/login):")
    print(f"  {created.admin_token}")
    if created.open_enrolment:
        print(f"public study URL for Prolific or MTurk (blocks: {len(links)}): {created.public_url(base_url)}")
    print("annotator links (one per person; a link is the annotator's only credential):")
    for (label, link), pages in zip(links, created.n_pages):
        print(f"  {label}  {link}  ({pages} pages)")
    if links_fd is not None:
        os.ftruncate(links_fd, 0)
        os.fchmod(links_fd, 0o600)
        with os.fdopen(links_fd, "w", encoding="utf-8") as f:
            f.write("annotator,link,pages\n")
            for (label, link), pages in zip(links, created.n_pages):
                f.write(f"{label},{link},{pages}\n")
        print(f"links written to {links_out}")


def cmd_study_create(args: argparse.Namespace) -> int:
    from maxbench.human_eval.store.db import database_errors, database_inputs, session_for
    from maxbench.human_eval.studies.create import create_study
    from maxbench.human_eval.studies.options import StudyOptions
    from maxbench.human_eval.studies.rubrics import load_rubric

    _check_base_url(args.base_url)
    rubric = load_rubric(args.rubric)
    consent = None
    if args.consent_file:
        try:
            consent = args.consent_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or "not UTF-8 text"
            raise MaxbenchError(f"cannot read --consent-file {args.consent_file}: {reason}") from None
        if not consent:
            raise MaxbenchError(f"--consent-file {args.consent_file} is empty")
    options = StudyOptions(
        systems=args.systems,
        items_per_system=args.items_per_system,
        raters_per_item=args.raters_per_item,
        annotators=args.annotators,
        paired=not args.independent,
        seed=args.seed,
        attention_rate=args.attention_rate,
        attention_fail_limit=args.attention_fail_limit,
        completion_code=args.completion_code,
        title=args.title,
        consent_text=consent,
        open_enrolment=args.open_enrolment,
        abandon_after_s=60 * args.abandon_after_minutes,
        check_attempts=args.check_attempts,
        gold_items=args.gold_items,
    )
    if args.links_out:
        from maxbench.rundir import run_inputs

        runs = (Path(args.run_dir), Path("results") / "runs" / args.run_dir)  # a folder, or a run id
        inputs = [*database_inputs(args.db), *(i for r in runs for i in run_inputs(r))]
        if args.consent_file:
            inputs.append((args.consent_file, "the consent file"))
        if Path(args.rubric).suffix == ".toml":
            inputs.append((Path(args.rubric), "the rubric file"))
        check_not_input(args.links_out, "--links-out", inputs)
    links_fd, links_created = _open_links_file(args.links_out) if args.links_out else (None, False)
    try:
        with database_errors(args.db), session_for(args.db, create=True) as session:
            created = create_study(session, args.run_dir, rubric, options)
    except BaseException:
        if links_fd is not None:
            os.close(links_fd)
            if links_created:
                args.links_out.unlink(missing_ok=True)
        raise
    _print_created(created, args.base_url, links_fd, args.links_out)
    return 0


def cmd_study_list(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from maxbench.human_eval.store.db import database_errors, session_for
    from maxbench.human_eval.store.models import Study

    with database_errors(args.db), session_for(args.db) as session:
        studies = session.scalars(select(Study).order_by(Study.id)).all()
        if not studies:
            print("no studies yet: create one with maxbench study create")
        for s in studies:
            done = sum(1 for a in s.annotators for x in a.assignments if x.attention is None and x.completed_at)
            total = sum(1 for a in s.annotators for x in a.assignments if x.attention is None)
            state = "closed" if s.closed_at else "open"
            print(f"{s.slug}\t{state}\t{done}/{total} rated\t{s.rubric['name']}\trun {s.run_id}")
    return 0


def cmd_study_export(args: argparse.Namespace) -> int:
    from maxbench.human_eval.store.db import database_errors, database_inputs, session_for
    from maxbench.human_eval.studies.export import (
        COLUMNS,
        JUDGE_COLUMNS,
        explorer_export,
        judgment_rows,
        long_format_rows,
        rows_to_csv,
        rows_to_json,
    )

    if args.format == "explorer" and args.blind:
        raise MaxbenchError("--format explorer joins ratings to the run's systems by name; it cannot be --blind")
    if args.format == "explorer" and args.judges:
        raise MaxbenchError("--judges goes with --format csv or json (the explorer shows people's ratings only)")
    if args.out:
        check_not_input(args.out, "--out", database_inputs(args.db))
    with database_errors(args.db), session_for(args.db) as session:
        if args.format == "explorer":
            doc = explorer_export(session, args.study_id)
            rows, body = doc["ratings"], json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
        elif args.judges:
            rows = judgment_rows(session, args.study_id, blind=args.blind)
            body = rows_to_csv(rows, COLUMNS + JUDGE_COLUMNS) if args.format == "csv" else rows_to_json(rows)
        else:
            rows = long_format_rows(session, args.study_id, blind=args.blind)
            body = rows_to_csv(rows) if args.format == "csv" else rows_to_json(rows)
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(args.out, body)
        except (OSError, MaxbenchError) as exc:
            raise MaxbenchError(
                f"cannot write --out {args.out} ({getattr(exc, 'strerror', None) or exc}): choose a file in a writable folder, "
                "or leave --out out to write to stdout; the ratings stay in the database"
            ) from None
        print(f"{len(rows)} {'rows' if args.judges else 'ratings'} written to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(body)
    return 0


def cmd_study_participants(args: argparse.Namespace) -> int:
    from maxbench.human_eval.store.db import database_errors, database_inputs, session_for
    from maxbench.human_eval.studies.export import participant_rows, participants_to_csv

    if args.out:
        check_not_input(args.out, "--out", database_inputs(args.db))
    with database_errors(args.db), session_for(args.db) as session:
        rows = participant_rows(session, args.study_id)
    body = participants_to_csv(rows)
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(args.out, body, mode=0o600)
        except (OSError, MaxbenchError) as exc:
            raise MaxbenchError(
                f"cannot write --out {args.out} ({getattr(exc, 'strerror', None) or exc}): choose a file in a "
                "writable folder, or leave --out out to write to stdout"
            ) from None
        print(f"{len(rows)} participants written to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(body)
    return 0


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from maxbench.human_eval.store.db import database_errors, database_url, shown_url, upgrade_database

    with database_errors(args.db):
        before, after = upgrade_database(args.db)
    where = shown_url(database_url(args.db))
    if before == after:
        print(f"database {where} is at schema revision {after}, the current one; nothing changed")
    else:
        print(f"database {where} upgraded from schema revision {before} to {after}; every row kept")
    return 0


def cmd_judge(args: argparse.Namespace) -> int:
    from maxbench.human_eval.judges.judge import judge_study, study_rubric
    from maxbench.human_eval.store.db import database_errors, session_for
    from maxbench.human_eval.studies.create import find_study

    if args.limit is not None and args.limit < 1:
        raise MaxbenchError("--limit must be 1 or more")
    make_backend = _judge_backend(args)
    with database_errors(args.db), session_for(args.db) as session:
        study_rubric(find_study(session, args.study_id))  # before the model loads: a study without a rubric
        summary = judge_study(
            session, args.study_id, make_backend(), rater_id=args.rater_id, limit=args.limit, log=sys.stderr
        )
    print(
        f"judge {summary.rater}: {summary.judged} units judged now, {summary.already} before, of {summary.units} "
        f"({summary.units_per_second:.2f} units/s; labels scored as {', '.join(sorted(summary.scoring)) or '-'})"
    )
    return 0


def _judge_backend(args: argparse.Namespace):
    """What makes the judge's backend, checked before the database is opened (the model loads later)."""
    if args.judge.startswith("openai:"):
        from maxbench.human_eval.judges.http import OpenAIJudge, parse_endpoint

        url, model = parse_endpoint(args.judge)
        key = OpenAIJudge.key_from_env(args.api_key_env)
        return lambda: OpenAIJudge(
            url, model, key, concurrency=args.concurrency, rate=args.rate, retries=args.retries, timeout=args.timeout
        )
    from maxbench.human_eval.judges.scoring import InProcessJudge, judge_model, load_judge_model

    judge_model(args.judge)  # the name, its adapter and the adapter's folder, before the database opens
    return lambda: InProcessJudge(load_judge_model(args.judge, device=args.device, threads=args.threads))


def _set_closed(args: argparse.Namespace, closed: bool):
    from maxbench.human_eval.store.db import database_errors, session_for, write_transaction
    from maxbench.human_eval.store.models import utcnow
    from maxbench.human_eval.studies.create import find_study

    with database_errors(args.db), session_for(args.db) as session, write_transaction(session):
        study = find_study(session, args.study_id)
        was_closed = study.closed_at
        if closed and study.closed_at is None:
            study.closed_at = utcnow()
        elif not closed:
            study.closed_at = None
        session.commit()
        return study.slug, was_closed, study.closed_at


def cmd_study_close(args: argparse.Namespace) -> int:
    slug, _, closed_at = _set_closed(args, True)
    print(f"study {slug} closed at {closed_at} UTC (maxbench study reopen {slug} opens it again)")
    return 0


def cmd_study_reopen(args: argparse.Namespace) -> int:
    slug, was_closed, _ = _set_closed(args, False)
    if was_closed is None:
        print(f"study {slug} was open; nothing changed")
    else:
        print(f"study {slug} reopened (closed since {was_closed} UTC): annotators can rate again")
    return 0


def cmd_study_rubric(args: argparse.Namespace) -> int:
    from maxbench.human_eval.studies.rubrics import load_rubric, preset_names

    if not args.rubric:
        for name in preset_names():
            r = load_rubric(name)
            print(f"{name}\t{r.scale_min}..{r.scale_max}\t{', '.join(r.criterion_names)}\t({r.source})")
        return 0
    r = load_rubric(args.rubric)
    print(f"rubric {r.name}: {r.title}")
    print(
        f"scale {r.scale_min}..{r.scale_max}; criteria: {', '.join(r.criterion_names)}; "
        f"{len(r.examples)} worked example(s); comprehension check: {r.comprehension_check().question}"
    )
    return 0


def cmd_study_plan(args: argparse.Namespace) -> int:
    from maxbench.human_eval.analysis.ratings import load_ratings
    from maxbench.human_eval.studies.plan import ITEMS, JUDGMENTS, RATERS, format_plan, pilot_effect, plan

    if args.width is not None:
        return _plan_width(args)
    if args.judge_correlation is not None or args.judged is not None:
        raise MaxbenchError("--judge-correlation and --judged go with --width W (the target interval width)")
    if args.reference and not args.pilot:
        raise MaxbenchError("--reference names the pilot's reference system: give --pilot FILE with it")
    items, raters = args.items or ITEMS, args.raters or RATERS
    if min(raters) < 1:
        raise MaxbenchError("--raters must be 1 or more")
    effect, source = args.effect, "assumed with --effect"
    if args.pilot:
        if not Path(args.pilot).is_file():
            raise MaxbenchError(f"pilot ratings {args.pilot} not found: give a long-format export (CSV or JSON)")
        effect, source = pilot_effect(load_ratings(args.pilot), args.reference)
    rows = plan(
        effect, args.judgment or JUDGMENTS, args.systems, args.power, args.alpha, args.n_sim, args.seed, items, raters
    )
    print(f"effect: {source}")
    print(format_plan(rows, effect, args.systems, args.power, args.alpha, args.n_sim, max(items)), end="")
    return 0


def _plan_width(args: argparse.Namespace) -> int:
    from maxbench.human_eval.analysis.ppi import humans_for_width

    if args.width <= 0 or args.sd <= 0:
        raise MaxbenchError("--width and --sd must be positive (on the rating scale, e.g. --width 0.3 --sd 1.0)")
    rho = args.judge_correlation
    if rho is not None and not -1 <= rho <= 1:
        raise MaxbenchError(f"--judge-correlation {rho} is not a correlation: give a value in [-1, 1]")
    if args.judged is not None and args.judged < 1:
        raise MaxbenchError("--judged must be 1 or more")
    alone = humans_for_width(args.width, args.sd, 0.0)
    print(f"95% interval of a mean rating at most {args.width:g} wide (sd {args.sd:g}):")
    print(f"  people only: {alone} human-rated texts per system")
    if rho is not None:
        judged = "as many more texts as needed" if args.judged is None else f"{args.judged} more texts"
        with_judge = humans_for_width(args.width, args.sd, rho, args.judged)
        print(
            f"  with a judge of correlation {rho:g} rating {judged} (PPI++): {with_judge} human-rated texts "
            f"per system ({with_judge / alone:.0%} of people only); valid when the people's texts are a random sample"
        )
    return 0
