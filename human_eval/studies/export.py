"""All ratings of a study in long format: one row per (rated text, annotator, criterion).

``long_format_rows(session, study_id, blind=False) -> list[dict]`` is the contract the
analysis (``maxbench report --study ID``) reads; open the session with
``maxbench.human_eval.store.db.session_for(url)``. Each row has exactly these keys (COLUMNS):

- ``study``: the study id (slug); ``item``: the prompt's opaque id within the study. The
  texts of different systems for the same prompt share it, so an item rated under several
  systems marks a paired design; (item, system) names one rated text.
- ``system``: the system's name (its opaque code with ``blind=True``).
- ``annotator``: the annotator's label (``a01``...); ``criterion``: the rubric criterion;
  ``value``: the integer rating; ``scale_min``/``scale_max``: the rubric's scale.
- ``position``: 1-based position of the page in that annotator's presentation order
  (attention-check pages count, as the annotator saw them).
- ``seconds``: time from the page being shown (its last showing) to the rating being
  submitted, or None when unknown.
- ``flags``: ';'-joined, empty when none: ``attention_failed`` (the annotator reached the
  study's attention-check failure limit and was stopped), ``revoked`` (the researcher
  revoked the annotator's link).

Attention-check pages and gold items (``maxbench.human_eval.studies.gold``) are not exported as ratings;
attention results are in the admin view, gold accuracy in ``gold.gold_accuracy`` and the report.
Rows are sorted by annotator, position and the rubric's criterion order, so the same
database gives the same rows.

``participant_rows(session, study_id)`` (``maxbench study participants``) is the list a crowd
platform's approval needs, one row per participant (PARTICIPANT_COLUMNS); it holds the
platform's participant ids, which nothing else exports.

Judges (model raters, ``maxbench judge``) are in none of these rows. ``judgment_rows(session,
study_id, blind=False)`` (``maxbench study export --judges``) gives their judgments in the same
columns plus JUDGE_COLUMNS, and the people's rows gain those columns too: ``rater_kind`` ("human"
or "model"), ``shown`` (the unit's systems by place, ';'-joined: pairwise A;B, a best-worst
tuple; the text's own system for one text; empty on a person's row), and a judge's ``expected``
score (a scale's expectation over the labels; empty for choices), ``label_mass`` and ``scoring``
(``maxbench.store.models.Judgment``). A judge's row has no ``position`` or ``seconds``; its
``value`` is the argmax label's value, stored as a person's would be.

Beyond the ratings the report reads ``study_baseline`` (the run's baseline, recorded when the
study was created) and ``study_progress`` (how many of the assigned texts are rated).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections import defaultdict

from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload

from maxbench.human_eval.analysis.ratings import GoldScore, StudyProgress
from maxbench.human_eval.store.models import (
    Annotator,
    Assignment,
    Enrolment,
    Item,
    Judgment,
    PageText,
    Rating,
    StudySystem,
)
from maxbench.human_eval.studies.create import find_study
from maxbench.human_eval.studies.gold import GOLD_DEGRADED, GOLD_PREFIX, GOLD_REFERENCE

COLUMNS = [
    "study",
    "item",
    "system",
    "annotator",
    "criterion",
    "value",
    "position",
    "seconds",
    "flags",
    "scale_min",
    "scale_max",
]

JUDGE_COLUMNS = ["rater_kind", "shown", "expected", "label_mass", "scoring"]


def long_format_rows(
    session: Session, study_id: str | int, blind: bool = False, run_keys: bool = False, _with_assignment: bool = False
) -> list[dict]:
    """The study's ratings (COLUMNS); ``run_keys`` adds each text's ``prompt_id`` and ``sample`` in the run,
    the ``run_id`` it came from and ``text_sha256``, the sha256 of the text shown to raters (UTF-8)
    (admin-only keys that join the ratings to the run's texts and per-prompt scores, and let
    ``maxbench view --study`` check that the run still holds the rated texts)."""
    study = find_study(session, study_id)
    rubric = study.rubric
    order = {c["name"]: i for i, c in enumerate(rubric["criteria"])}
    query = (
        select(Rating, Assignment, Annotator, Item)
        .join(Assignment, Rating.assignment_id == Assignment.id)
        .join(Annotator, Assignment.annotator_id == Annotator.id)
        .join(Item, Assignment.item_id == Item.id)
        .join(StudySystem, Item.system_id == StudySystem.id)
        .where(Annotator.study_id == study.id, not_gold())
        .options(joinedload(Item.system))
    )
    rows = []
    for rating, assignment, annotator, item in session.execute(query):
        flags = []
        if annotator.excluded_at is not None:
            flags.append("attention_failed")
        if annotator.revoked_at is not None:
            flags.append("revoked")
        rows.append(
            {
                "study": study.slug,
                "item": item.code,
                "system": item.system.code if blind else item.system.name,
                "annotator": annotator.label,
                "criterion": rating.criterion,
                "value": rating.value,
                "position": assignment.position,
                "seconds": None if assignment.seconds is None else round(assignment.seconds, 3),
                "flags": ";".join(flags),
                "scale_min": rubric["scale_min"],
                "scale_max": rubric["scale_max"],
                **({"_assignment": assignment.id} if _with_assignment else {}),
            }
            | (
                {
                    "prompt_id": item.prompt_id,
                    "sample": item.sample,
                    "run_id": study.run_id,
                    "text_sha256": hashlib.sha256(item.text.encode("utf-8")).hexdigest(),
                }
                if run_keys
                else {}
            )
        )
    rows.sort(key=lambda r: (r["annotator"], r["position"], order.get(r["criterion"], len(order)), r["criterion"]))
    return rows


def judgment_rows(session: Session, study_id: str | int, blind: bool = False) -> list[dict]:
    """The people's rows (``long_format_rows``) and the judges' judgments after them, in COLUMNS +
    JUDGE_COLUMNS (module docstring). A judge's units whose first text is gold are left out, as gold
    pages are from the people's rows. Judges sorted by label, then their units in the order of
    their texts' ids, then the rubric's criterion order."""
    study = find_study(session, study_id)
    rubric = study.rubric
    people = [
        r | {"rater_kind": "human", "shown": "", "expected": None, "label_mass": None, "scoring": ""}
        for r in long_format_rows(session, study_id, blind=blind)
    ]
    names = {
        i.id: (i.code, name, code)
        for i, name, code in session.execute(
            select(Item, StudySystem.name, StudySystem.code)
            .join(StudySystem, Item.system_id == StudySystem.id)
            .where(Item.study_id == study.id)
        )
    }
    order = {c: i for i, c in enumerate(c["name"] for c in rubric["criteria"])}

    def criterion_order(criterion: str) -> int:
        return order.get(criterion.rpartition("_")[0] if criterion not in order else criterion, len(order))

    query = (
        select(Judgment, Annotator.label)
        .join(Annotator, Judgment.annotator_id == Annotator.id)
        .where(Annotator.study_id == study.id, Annotator.kind == "model")
    )
    judged = []
    for j, label in session.execute(query):
        code, name, system_code = names[j.item_id]
        if name.startswith(GOLD_PREFIX):
            continue
        shown = [names[i][2] if blind else names[i][1] for i in j.items]
        judged.append(
            (
                (label, [int(i) for i in j.items], criterion_order(j.criterion), j.criterion),
                {
                    "study": study.slug,
                    "item": code,
                    "system": system_code if blind else name,
                    "annotator": label,
                    "criterion": j.criterion,
                    "value": j.value,
                    "position": None,
                    "seconds": None,
                    "flags": "",
                    "scale_min": rubric["scale_min"],
                    "scale_max": rubric["scale_max"],
                    "rater_kind": "model",
                    "shown": ";".join(shown),
                    "expected": None if j.expected is None else round(j.expected, 6),
                    "label_mass": round(j.label_mass, 6),
                    "scoring": j.scoring,
                },
            )
        )
    return people + [row for _, row in sorted(judged, key=lambda x: x[0])]


def not_gold():
    """The SQL condition that leaves gold items (``maxbench.human_eval.studies.gold``) out: they are no system's texts."""
    return ~StudySystem.name.startswith(GOLD_PREFIX, autoescape=True)


def _page_places(session: Session, study_pk: int, blind: bool) -> dict[int, dict[int, str]]:
    """Per page that shows several texts: place -> the system (its code with ``blind``)."""
    places: dict[int, dict[int, str]] = defaultdict(dict)
    query = (
        select(PageText.assignment_id, PageText.place, StudySystem.name, StudySystem.code)
        .join(Item, PageText.item_id == Item.id)
        .join(StudySystem, Item.system_id == StudySystem.id)
        .where(Item.study_id == study_pk)
    )
    for assignment_id, place, name, code in session.execute(query):
        places[assignment_id][place] = code if blind else name
    return places


def pair_judgment_rows(session: Session, study_id: str | int, blind: bool = False) -> list[dict]:
    """A pairwise study's judgments, one row per (page, criterion): ``left``/``right`` are the
    systems shown as A and B, ``winner`` one of them or empty for a tie (``value`` 1, 2, 0)."""
    study = find_study(session, study_id)
    places = _page_places(session, study.id, blind)
    rows = []
    for row in long_format_rows(session, study_id, blind, _with_assignment=True):
        assignment_id = row.pop("_assignment")
        shown = places.get(assignment_id, {})
        left, right = shown.get(1), shown.get(2)
        if left is None or right is None:
            continue
        winner = {1: left, 2: right}.get(row["value"], "")
        rows.append(
            {
                **{k: v for k, v in row.items() if k not in ("system", "scale_min", "scale_max")},
                "left": left,
                "right": right,
                "winner": winner,
            }
        )
    return rows


def best_worst_rows(session: Session, study_id: str | int, blind: bool = False) -> list[dict]:
    """A best-worst study's judgments, one row per (page, criterion): ``shown`` the systems in places
    1, 2, ... (';'-joined), ``best`` and ``worst`` two of them."""
    study = find_study(session, study_id)
    places = _page_places(session, study.id, blind)
    pages: dict[tuple, dict] = {}
    for row in long_format_rows(session, study_id, blind, _with_assignment=True):
        assignment_id = row["_assignment"]
        shown = [places[assignment_id][p] for p in sorted(places.get(assignment_id, {}))]
        criterion, _, side = row["criterion"].rpartition("_")
        if not shown or side not in ("best", "worst") or not 1 <= row["value"] <= len(shown):
            continue
        page = pages.setdefault(
            (assignment_id, criterion),
            {
                "study": row["study"],
                "item": row["item"],
                "annotator": row["annotator"],
                "criterion": criterion,
                "position": row["position"],
                "seconds": row["seconds"],
                "flags": row["flags"],
                "shown": ";".join(shown),
            },
        )
        page[side] = shown[row["value"] - 1]
    return [p for p in pages.values() if "best" in p and "worst" in p]


def gold_accuracy(session: Session, study_id: str | int) -> tuple[GoldScore, ...]:
    """Each annotator's gold accuracy so far (annotators without a completed gold judgment left out)."""
    study = find_study(session, study_id)
    pairwise = study.rubric.get("kind") == "pairwise"
    rows = session.execute(
        select(Annotator.label, Assignment.id, Item.code, StudySystem.name, Rating.criterion, Rating.value)
        .join(Assignment, Rating.assignment_id == Assignment.id)
        .join(Annotator, Assignment.annotator_id == Annotator.id)
        .join(Item, Assignment.item_id == Item.id)
        .join(StudySystem, Item.system_id == StudySystem.id)
        .where(Annotator.study_id == study.id, StudySystem.name.startswith(GOLD_PREFIX, autoescape=True))
    ).all()
    judged: dict[str, list[bool]] = defaultdict(list)
    if pairwise:
        places = defaultdict(dict)
        for assignment_id, place, name in session.execute(
            select(PageText.assignment_id, PageText.place, StudySystem.name)
            .join(Item, PageText.item_id == Item.id)
            .join(StudySystem, Item.system_id == StudySystem.id)
            .where(Item.study_id == study.id, StudySystem.name.startswith(GOLD_PREFIX, autoescape=True))
        ):
            places[assignment_id][place] = name
        for label, assignment_id, _, _, _, value in rows:
            judged[label].append(places[assignment_id].get(value) == GOLD_REFERENCE)
    else:
        values: dict[tuple, dict[str, int]] = defaultdict(dict)
        for label, _, code, name, criterion, value in rows:
            values[(label, code, criterion)][name] = value
        for (label, _, _), by_role in sorted(values.items()):
            if len(by_role) == 2:  # both pages rated
                judged[label].append(by_role[GOLD_REFERENCE] > by_role[GOLD_DEGRADED])
    return tuple(GoldScore(label, len(v), sum(v)) for label, v in sorted(judged.items()))


#: the study export the results explorer (``maxbench view --study FILE``) reads
EXPLORER_FORMAT = "maxbench-study-ratings/1"


def explorer_export(session: Session, study_id: str | int) -> dict:
    """The study's ratings keyed by the run's prompt ids and system names, for ``maxbench view``
    (a researcher's tool: system names are shown; the rating app's pages never see this)."""
    study = find_study(session, study_id)
    return {
        "format": EXPLORER_FORMAT,
        "study": study.slug,
        "run_id": study.run_id,
        "ratings": long_format_rows(session, study_id, run_keys=True),
    }


def study_baseline(session: Session, study_id: str | int) -> str | None:
    """The run's baseline recorded when the study was created: the report's default reference.

    None for a study created from an unscored run, or before baselines were recorded.
    """
    return (find_study(session, study_id).design or {}).get("baseline")


def study_judgment(session: Session, study_id: str | int) -> str:
    """The judgment type of the study's rubric (``likert``, ``direct``, ...)."""
    return find_study(session, study_id).rubric.get("kind", "likert")


def study_progress(session: Session, study_id: str | int) -> StudyProgress:
    """How many of the study's rating pages (attention checks and gold items not counted) are rated."""
    study = find_study(session, study_id)
    texts = (
        select(func.count())
        .select_from(Assignment)
        .join(Annotator, Assignment.annotator_id == Annotator.id)
        .join(Item, Assignment.item_id == Item.id)
        .join(StudySystem, Item.system_id == StudySystem.id)
        .where(Annotator.study_id == study.id, not_gold())
    )
    # Rated means holding a rating row, so the counts agree with the exported rows.
    unrated = texts.where(~select(Rating.id).where(Rating.assignment_id == Assignment.id).exists())
    stopped = Annotator.revoked_at.is_not(None) | Annotator.excluded_at.is_not(None)
    assigned = session.scalar(texts)
    return StudyProgress(
        texts_assigned=assigned,
        texts_rated=assigned - session.scalar(unrated),
        texts_unrated_stopped=session.scalar(unrated.where(stopped)),
        closed=study.closed_at is not None,
    )


def rows_to_csv(rows: list[dict], columns: list[str] = COLUMNS) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row[k] is None else row[k] for k in columns})
    return out.getvalue()


def rows_to_json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=1, ensure_ascii=False) + "\n"


PARTICIPANT_COLUMNS = [
    "id",
    "platform",
    "annotator",
    "status",
    "completion",
    "pages_completed",
    "pages_total",
    "attention_passed",
    "attention_failed",
    "gold_accuracy",
]


def _annotator_status(annotator: Annotator, done: int, total: int) -> str:
    if annotator.excluded_at is not None:
        return "excluded"  # stopped by failed attention checks
    if annotator.revoked_at is not None:
        return "revoked"
    if annotator.finished_at is not None or (total and done == total):
        return "finished"
    return "started" if done else "not started"


def participant_rows(session: Session, study_id: str | int) -> list[dict]:
    """One row per participant (PARTICIPANT_COLUMNS), for approving or rejecting them on the crowd
    platform: ``id`` is the platform's participant id (Prolific's PROLIFIC_PID, MTurk's workerId) of
    an enrolled block, else the annotator's label (a personal link); ``completion`` is completed
    pages / pages (attention checks and gold pages count, as the participant saw them);
    ``attention_passed``/``attention_failed`` count answered attention checks; ``gold_accuracy``
    is the share of gold judgments right (empty without gold items). A participant whose claimed
    block was given away after abandonment has a row with status ``released`` and no pages.
    Rows: annotators in label order, then the released participants in claim order."""
    study = find_study(session, study_id)
    pages = defaultdict(lambda: [0, 0, 0, 0])  # completed, total, attention passed, failed
    for annotator_id, completed_at, attention, passed in session.execute(
        select(Assignment.annotator_id, Assignment.completed_at, Assignment.attention, Assignment.attention_passed)
        .join(Annotator, Assignment.annotator_id == Annotator.id)
        .where(Annotator.study_id == study.id)
    ):
        counts = pages[annotator_id]
        counts[0] += completed_at is not None
        counts[1] += 1
        if attention is not None and passed is not None:
            counts[2 if passed else 3] += 1
    enrolments = session.scalars(
        select(Enrolment).where(Enrolment.study_id == study.id).order_by(Enrolment.claimed_at, Enrolment.id)
    ).all()
    holder = {e.annotator_id: e for e in enrolments if e.annotator_id is not None}
    gold = {score.annotator: score.accuracy for score in gold_accuracy(session, study.slug)}
    rows = []
    people = select(Annotator).where(Annotator.study_id == study.id, Annotator.kind == "human")
    for annotator in session.scalars(people.order_by(Annotator.label)):
        done, total, passed, failed = pages[annotator.id]
        enrolment = holder.get(annotator.id)
        if (study.design or {}).get("enrolment") and enrolment is None:
            continue  # a block nobody holds
        accuracy = gold.get(annotator.label)
        rows.append(
            {
                "id": enrolment.participant_id if enrolment else annotator.label,
                "platform": enrolment.platform if enrolment else "link",
                "annotator": annotator.label,
                "status": _annotator_status(annotator, done, total),
                "completion": f"{done}/{total}",
                "pages_completed": done,
                "pages_total": total,
                "attention_passed": passed,
                "attention_failed": failed,
                "gold_accuracy": None if accuracy is None else round(accuracy, 4),
            }
        )
    for e in enrolments:
        if e.annotator_id is None:
            rows.append(
                {
                    "id": e.participant_id,
                    "platform": e.platform,
                    "annotator": None,
                    "status": "released",
                    "completion": "0/0",
                    "pages_completed": 0,
                    "pages_total": 0,
                    "attention_passed": 0,
                    "attention_failed": 0,
                    "gold_accuracy": None,
                }
            )
    return rows


def participants_to_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=PARTICIPANT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row[k] is None else row[k] for k in PARTICIPANT_COLUMNS})
    return out.getvalue()
