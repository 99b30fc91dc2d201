"""``maxbench judge STUDY --judge MODEL``: a model rates a study's units as a rater of kind "model".

**Units.** What a person sees on one page, in the order shown: a text (Likert, direct
assessment); a pair of texts for one prompt (pairwise: every pair of the study's texts for a
prompt, in both orders, so that order consistency and position bias can be measured); a
best-worst tuple (the tuples the study's pages show, places as shown). Gold texts are judged
like the others, so the judge's gold accuracy can be read.

**Identity.** A judge is its model's weights hash and tokenizer hash, the prompt template's
hash (``template.template_hash``) and the decoding (label probabilities, how the page is framed,
dtype). The identity is stored with the judge's rater row (``Annotator.judge``, its sha256 as
``key``), and the rater's id defaults to ``judge-<model>-<key[:8]>``: another identity is another
rater. A rater id that a person of the study has, or that another judge identity has, is refused.

**Resumable.** Each unit's judgments (one per criterion) are written in one transaction; a
unit already stored for this rater is skipped, and the unique (rater, unit, criterion) key makes
a second write of it impossible, so a judge killed at any point and run again judges each unit
once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import secrets
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from maxbench.errors import MaxbenchError
from maxbench.human_eval.judges.template import questions
from maxbench.human_eval.store.db import hash_token, write_transaction
from maxbench.human_eval.store.models import Annotator, Assignment, Item, Judgment, PageText
from maxbench.human_eval.studies.create import find_study
from maxbench.human_eval.studies.rubrics import Rubric

RATER_ID_MAX = 64
_RATER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


@dataclass(frozen=True)
class Unit:
    key: str  # the item ids in the order shown, ","-joined
    items: tuple[int, ...]


def study_rubric(study) -> Rubric:
    data = study.rubric
    if not data or not data.get("criteria"):
        raise MaxbenchError(
            f"study {study.slug} has no rubric (no criteria to judge): a judge rates with the study's own rubric; "
            "create the study with --rubric"
        )
    return Rubric.from_json(data)


def study_units(session: Session, study, rubric: Rubric) -> list[Unit]:
    """The units of ``study`` in a fixed order (see the module docstring)."""
    items = session.scalars(select(Item).where(Item.study_id == study.id).order_by(Item.id)).all()
    if rubric.kind in ("likert", "direct"):
        return [Unit(str(i.id), (i.id,)) for i in items]
    if rubric.kind == "pairwise":
        by_prompt: dict[str, list[int]] = defaultdict(list)
        for i in items:
            by_prompt[i.code].append(i.id)
        units = []
        for code in sorted(by_prompt):
            for a, b in itertools.combinations(sorted(by_prompt[code]), 2):
                units += [Unit(f"{a},{b}", (a, b)), Unit(f"{b},{a}", (b, a))]
        return units
    places: dict[int, dict[int, int]] = defaultdict(dict)
    query = (
        select(PageText.assignment_id, PageText.place, PageText.item_id)
        .join(Assignment, PageText.assignment_id == Assignment.id)
        .join(Annotator, Assignment.annotator_id == Annotator.id)
        .where(Annotator.study_id == study.id)
    )
    for assignment_id, place, item_id in session.execute(query):
        places[assignment_id][place] = item_id
    tuples = {tuple(shown[p] for p in sorted(shown)) for shown in places.values()}
    return [Unit(",".join(map(str, t)), t) for t in sorted(tuples)]


def identity(backend) -> dict:
    """The backend's identity (model, weights, tokenizer, template, decoding) and its sha256, ``key``."""
    ident = backend.identity()
    return ident | {"key": hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()}


def default_rater_id(ident: dict) -> str:
    """``judge-<model>-<key[:8]>``: the model's last path part (an adapted model's identity names
    it ``MODEL+ADAPTER``: ``judge-tiny-random-peft-...``)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", ident["model"].rsplit("/", 1)[-1]).strip("-")[:40] or "model"
    return f"judge-{name}-{ident['key'][:8]}"


def judge_rater(session: Session, study, ident: dict, rater_id: str | None) -> Annotator:
    """The rater row of this judge identity in ``study``: found, or created (committed)."""
    if rater_id is not None and not _RATER_ID.match(rater_id):
        raise MaxbenchError(
            f"--rater-id {rater_id!r}: use 1-{RATER_ID_MAX} letters, digits, '-', '_', '.' or ':', starting with a "
            "letter or digit"
        )
    label = rater_id or default_rater_id(ident)
    raters = session.scalars(select(Annotator).where(Annotator.study_id == study.id)).all()
    for a in raters:
        if a.label == label and a.kind != "model":
            raise MaxbenchError(
                f"rater id {label!r} is a human rater's in study {study.slug}: give the judge another --rater-id; "
                "nothing was judged"
            )
        if a.label == label and (a.judge or {}).get("key") != ident["key"]:
            raise MaxbenchError(
                f"rater id {label!r} is another judge's in study {study.slug} (its model, weights, template or "
                "decoding differ): give this judge another --rater-id; nothing was judged"
            )
        if a.kind == "model" and (a.judge or {}).get("key") == ident["key"] and a.label != label:
            raise MaxbenchError(
                f"this judge already rates study {study.slug} as {a.label!r}: run it with --rater-id {a.label} "
                "(or without --rater-id) to resume"
            )
    for a in raters:
        if a.label == label:
            return a
    with write_transaction(session):
        rater = Annotator(
            study_id=study.id, label=label, token_hash=hash_token(secrets.token_urlsafe(32)), kind="model", judge=ident
        )
        session.add(rater)
        session.commit()
    return rater


@dataclass
class JudgeSummary:
    rater: str
    units: int
    judged: int
    already: int
    seconds: float
    scoring: set[str]

    @property
    def units_per_second(self) -> float:
        return self.judged / self.seconds if self.seconds > 0 else float("nan")


def judge_study(
    session: Session, study_id: str, backend, rater_id: str | None = None, limit: int | None = None, log=None
) -> JudgeSummary:
    """Judge every unit of the study not yet judged by this judge identity (``limit``: at most that
    many; progress lines to ``log``) with ``backend`` (``scoring.InProcessJudge``,
    ``http.OpenAIJudge``): units are scored ``backend.concurrency`` at a time and written one
    transaction each, in order."""
    study = find_study(session, study_id)
    rubric = study_rubric(study)
    ident = identity(backend)
    units = study_units(session, study, rubric)
    texts = {i.id: i for i in session.scalars(select(Item).where(Item.study_id == study.id))}
    # Check the labels before the rater row exists: a refused judge leaves nothing behind.
    shown = {"pairwise": 2}.get(rubric.kind, len(units[0].items) if units else 1)
    prepared = {q.labels: backend.prepare(q.labels) for q in questions(rubric, "", [""] * shown)}
    rater = judge_rater(session, study, ident, rater_id)
    wanted = len(rubric.stored_criteria)
    done_counts: dict[str, int] = defaultdict(int)
    for unit in session.scalars(select(Judgment.unit).where(Judgment.annotator_id == rater.id)):
        done_counts[unit] += 1
    done = {u for u, n in done_counts.items() if n == wanted}
    todo = [u for u in units if u.key not in done]
    if limit is not None:
        todo = todo[:limit]
    work = [
        (unit, questions(rubric, texts[unit.items[0]].prompt, [texts[i].text for i in unit.items])) for unit in todo
    ]

    def score(job):
        unit, qs = job
        return [backend.score(q.page, prepared.get(q.labels) or backend.prepare(q.labels)) for q in qs]

    start, judged, scoring = time.perf_counter(), 0, set()
    pool = ThreadPoolExecutor(max_workers=max(1, backend.concurrency))
    try:
        results = pool.map(score, work) if backend.concurrency > 1 else map(score, work)
        for n, ((unit, qs), scored_all) in enumerate(zip(work, results, strict=True), 1):
            rows = _judgment_rows(rater.id, unit, qs, scored_all)
            scoring.update(r.scoring for r in rows)
            try:
                with write_transaction(session):
                    session.add_all(rows)
                    session.commit()
                judged += 1
            except IntegrityError:  # another process stored this unit first: it stays judged once
                session.rollback()
            if log is not None and (n % 25 == 0 or n == len(work)):
                print(f"judge {rater.label}: {n}/{len(work)} units", file=log, flush=True)
    finally:  # a failure stops the units still queued; what was stored stays
        pool.shutdown(wait=True, cancel_futures=True)
    return JudgeSummary(rater.label, len(units), judged, len(done), time.perf_counter() - start, scoring)


def _judgment_rows(rater_id: int, unit: Unit, qs, scored_all) -> list[Judgment]:
    rows: list[Judgment] = []
    for q, scored in zip(qs, scored_all, strict=True):
        best = scored.argmax()
        if q.criterion.endswith("_worst") and rows and rows[-1].criterion.endswith("_best"):
            # a person cannot name one text both best and worst: the worst is the likeliest other place
            taken = rows[-1].value - 1
            best = max((i for i in range(len(q.labels)) if i != taken), key=lambda i: scored.probabilities[i])
        rows.append(
            Judgment(
                annotator_id=rater_id,
                item_id=unit.items[0],
                unit=unit.key,
                items=list(unit.items),
                criterion=q.criterion,
                value=q.values[best],
                expected=scored.expectation(q.values) if q.ordered else None,
                probabilities=dict(zip(q.labels, scored.probabilities, strict=True)),
                label_mass=scored.label_mass,
                scoring=scored.scoring,
            )
        )
    return rows
