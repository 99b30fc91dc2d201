"""``maxbench report``: a significance report from ratings (an exported file or a study in the database)."""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
from pathlib import Path

from maxbench.errors import MaxbenchError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="significance report (tables, tests, agreement, plots) from human ratings",
        description="Write <out>/<name>/report.md, report.html, report.json and figures/ from long-format "
        "ratings. The same input and options give byte-identical files.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--ratings",
        metavar="FILE",
        help="long-format ratings: CSV, JSON or JSON Lines with "
        "study,item,system,annotator,criterion,value (optional position, seconds, flags, "
        "scale_min, scale_max)",
    )
    source.add_argument(
        "--study", metavar="ID", dest="db_study", help="a study in the rating app's database (its slug or numeric id)"
    )
    p.add_argument("--select-study", metavar="ID", help="with --ratings: the study to keep when the file holds several")
    p.add_argument(
        "--db", metavar="URL", help="database URL for --study (default: $MAXBENCH_DB_URL or the embedded SQLite file)"
    )
    p.add_argument(
        "--reference",
        metavar="SYSTEM",
        help="system every other one is tested against (default: with --study, the run's baseline when the "
        "study recorded one; else the first by name; the report states which)",
    )
    p.add_argument("--out", metavar="DIR", default="results/reports", help="parent folder (default: %(default)s)")
    p.add_argument("--name", help="report folder name (default: the study id)")
    p.add_argument(
        "--scale",
        metavar="MIN:MAX",
        help="rating scale of every aspect, overriding the scale_min/scale_max columns (e.g. 1:5, 0:2)",
    )
    p.add_argument(
        "--min-seconds",
        type=float,
        metavar="S",
        help="exclude ratings of items answered in less than S seconds (off by default)",
    )
    p.add_argument(
        "--exclude-flag",
        action="append",
        metavar="FLAG",
        help="exclude rows carrying FLAG; repeatable (default: attention_failed). Give 'none' to exclude no flag",
    )
    p.add_argument(
        "--exclude-gold-below",
        type=float,
        metavar="ACC",
        help="exclude every rating of an annotator whose gold-item accuracy is below ACC, e.g. 0.8 "
        "(--study of a study created with --gold-items; off by default)",
    )
    p.add_argument(
        "--alternative",
        choices=("two-sided", "greater", "less"),
        default="two-sided",
        help="H1 for every test; greater: the reference is rated higher (default: %(default)s)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level for the stars, on Holm-adjusted p (default: %(default)s; POSG used 0.1)",
    )
    p.add_argument(
        "--design",
        choices=("auto", "paired", "unpaired"),
        default="auto",
        help="paired: Wilcoxon signed-rank on per-item means; auto: paired when every item was rated "
        "for both systems (default: %(default)s)",
    )
    p.add_argument(
        "--n-boot", type=int, default=2000, help="bootstrap resamples for the intervals (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    p.add_argument(
        "--z-scores",
        action="store_true",
        help="test per-annotator z-scores (direct assessment, as WMT); on by default for a database study "
        "whose rubric is kind = direct",
    )
    p.add_argument(
        "--judges",
        action="store_true",
        help="with --study: also write judges.{md,html,json}: each model rater (maxbench judge) against the people, "
        "and PPI++ estimates combining both beside the people-only ones (the human report never includes judges)",
    )
    p.add_argument(
        "--human-share",
        type=float,
        metavar="F",
        help="with --judges: keep the people's ratings of a seeded random share F of the prompts only (0 < F <= 1), "
        "the judge alone scoring the rest: what PPI gives with fewer people (default: all the people's ratings)",
    )
    p.set_defaults(func=run_report)


#: what a report folder holds: the files its writer replaces
REPORT_FILES = ("report.md", "report.html", "report.json", "figures", "judges.md", "judges.html", "judges.json")


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before anything is read, an --out whose report files would replace an input (the
    ratings file, the database): the folder is --name's, or, before the study's name is known, any
    folder under --out (an input lies in one that exists)."""
    from maxbench.fileio import check_not_input

    if args.ratings:
        inputs = [(Path(args.ratings), "the ratings file")]
    else:
        from maxbench.human_eval.store.db import database_inputs

        inputs = database_inputs(args.db)
    out = Path(args.out)
    folders = [out / args.name] if args.name else [d for d in out.iterdir() if d.is_dir()] if out.is_dir() else []
    for folder in folders:
        for name in REPORT_FILES:
            check_not_input(folder / name, "--out", inputs)
        for given, _ in inputs:  # a figure is written as figures/<stem>.png and .svg
            if Path(given).suffix in (".png", ".svg"):
                check_not_input(folder / "figures" / Path(given).name, "--out", inputs)


def run_report(args: argparse.Namespace) -> int:
    from maxbench.human_eval.analysis.analyse import analyse
    from maxbench.human_eval.analysis.options import DEFAULT_EXCLUDE_FLAGS, ReportOptions, parse_scale
    from maxbench.human_eval.analysis.ratings import load_ratings
    from maxbench.human_eval.report.ratings import write_report

    if args.select_study and not args.ratings:
        raise MaxbenchError(
            "--select-study picks a study inside a --ratings file; with --study the database already names one"
        )
    if (args.judges or args.human_share is not None) and not args.db_study:
        raise MaxbenchError("--judges reads the judges from the rating database: give --study ID (not --ratings)")
    if args.human_share is not None and not (args.judges and 0 < args.human_share <= 1):
        raise MaxbenchError("--human-share F goes with --judges, with 0 < F <= 1")
    _check_outputs(args)
    flags = tuple(args.exclude_flag) if args.exclude_flag else DEFAULT_EXCLUDE_FLAGS
    if flags == ("none",):
        flags = ()
    options = ReportOptions(
        reference=args.reference,
        study=args.select_study,
        scale=parse_scale(args.scale) if args.scale else None,
        min_seconds=args.min_seconds,
        exclude_flags=flags,
        alternative=args.alternative,
        alpha=args.alpha,
        design=args.design,
        n_boot=args.n_boot,
        seed=args.seed,
        z_scores=args.z_scores,
        exclude_gold_below=args.exclude_gold_below,
    )
    correlations = None
    if args.ratings:
        ratings = load_ratings(args.ratings)
        studies = sorted({r.study for r in ratings.rows})
        default_name = options.study or (studies[0] if len(studies) == 1 else Path(args.ratings).stem)
    else:
        best_worst = judgment_rows_from_database(args.db_study, args.db, "best-worst")
        if best_worst is not None:
            from maxbench.human_eval.analysis.analyse import analyse_best_worst
            from maxbench.human_eval.report.best_worst import write_best_worst_report

            analysis = analyse_best_worst(best_worst, options, "the rating database")
            folder = write_best_worst_report(
                analysis, args.out, args.name or _folder_name(analysis.study), study_code(args.db_study, args.db)
            )
            print(f"wrote {folder}/report.md, report.html and report.json")
            return _judges(args, options, folder)
        pairwise = judgment_rows_from_database(args.db_study, args.db, "pairwise")
        if pairwise is not None:
            from maxbench.human_eval.analysis.analyse import analyse_pairwise
            from maxbench.human_eval.report.pairwise import write_pairwise_report

            analysis = analyse_pairwise(pairwise, options, "the rating database", study_gold(args.db_study, args.db))
            folder = write_pairwise_report(
                analysis, args.out, args.name or _folder_name(analysis.study), study_code(args.db_study, args.db)
            )
            print(f"wrote {folder}/report.md, report.html and report.json")
            return _judges(args, options, folder)
        ratings = ratings_from_database(args.db_study, args.db)
        if ratings.judgment == "direct":
            options = replace(options, z_scores=True)
        default_name = ratings.rows[0].study  # the slug, also when the study was named by its number
    analysis = analyse(ratings, options)
    code = None
    if not args.ratings:
        correlations = metric_correlations(args.db_study, args.db, ratings, options)
        code = study_code(args.db_study, args.db)
    folder = write_report(analysis, args.out, args.name or _folder_name(default_name), correlations, code)
    print(f"wrote {folder}/report.md, report.html, report.json and figures/")
    return _judges(args, options, folder)


def _judges(args: argparse.Namespace, options, folder: Path) -> int:
    """With --judges: the judges' report beside the human one."""
    if not args.judges:
        return 0
    from maxbench.human_eval.report.judges import judge_data, write_judges_report
    from maxbench.human_eval.store.db import session_for

    with session_for(args.db, create=False) as session:
        data = judge_data(session, args.db_study, options.exclude_flags, args.human_share, args.seed)
    write_judges_report(data, folder)
    print(f"wrote {folder}/judges.md, judges.html and judges.json")
    return 0


def ratings_from_database(study: str, url: str | None):
    """The study's rows through the rating app's export contract, imported only when asked for."""
    try:
        from maxbench.human_eval.store.db import session_for
        from maxbench.human_eval.studies.export import long_format_rows, study_baseline, study_judgment, study_progress
    except ImportError as exc:
        raise MaxbenchError(
            f"the rating app's database export is not available ({exc}); "
            "export the ratings as CSV and pass --ratings FILE"
        ) from None
    from maxbench.human_eval.analysis.ratings import ratings_from_records

    with session_for(url, create=False) as session:
        records = long_format_rows(session, study)
        baseline, progress = study_baseline(session, study), study_progress(session, study)
        judgment = study_judgment(session, study)
    if not records:
        raise MaxbenchError(f"study {study!r} has no ratings yet; nothing to report")
    return replace(
        ratings_from_records(records, source="the rating database", baseline=baseline, progress=progress),
        judgment=judgment,
        gold=study_gold(study, url),
    )


def study_gold(study: str, url: str | None) -> tuple | None:
    """Each annotator's gold accuracy; None for a study created without gold items."""
    from maxbench.human_eval.store.db import session_for
    from maxbench.human_eval.studies.create import find_study
    from maxbench.human_eval.studies.export import gold_accuracy

    with session_for(url, create=False) as session:
        if not (find_study(session, study).design or {}).get("gold"):
            return None
        return gold_accuracy(session, study)


def study_code(study: str, url: str | None) -> dict:
    """The rated systems' plugin code (``render.plugin_code``) as the study recorded it from its run's
    manifest when it was created; empty without plugins, and for a study made before it was recorded."""
    from maxbench.human_eval.report.render import plugin_code
    from maxbench.human_eval.store.db import session_for
    from maxbench.human_eval.studies.create import find_study

    with session_for(url, create=False) as session:
        return plugin_code((find_study(session, study).design or {}).get("code"))


def judgment_rows_from_database(study: str, url: str | None, judgment: str) -> list[dict] | None:
    """A pairwise or best-worst study's judgment rows (``export.pair_judgment_rows`` or
    ``export.best_worst_rows``); None for a study of another judgment type."""
    try:
        from maxbench.human_eval.store.db import session_for
        from maxbench.human_eval.studies.export import best_worst_rows, pair_judgment_rows, study_judgment
    except ImportError:
        return None  # ratings_from_database says what is missing
    with session_for(url, create=False) as session:
        if study_judgment(session, study) != judgment:
            return None
        rows = (pair_judgment_rows if judgment == "pairwise" else best_worst_rows)(session, study)
    if not rows:
        raise MaxbenchError(f"study {study!r} has no judgments yet; nothing to report")
    return rows


def metric_correlations(study: str, url: str | None, ratings, options):
    """The run's automatic metrics against the study's ratings (the study knows its run)."""
    from maxbench.human_eval.report.agreement import study_correlations
    from maxbench.human_eval.store.db import session_for

    with session_for(url, create=False) as session:
        return study_correlations(session, study, ratings, options.exclude_flags, options.n_boot, options.seed)


def _folder_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:100]
    return name or "report"
