"""SQL tables of the rating app (SQLAlchemy 2 declarative models).

Study 1-n StudySystem, Item, Annotator; Annotator 1-n Assignment (one page each, in the
order shown); Assignment 1-n Rating (one row per criterion). An Item is one rated text:
``code`` names the prompt it continues, shared by the texts of every system for that
prompt (so ``item`` in the export says which ratings are paired), and ``system_id`` says
which system wrote it. Attention checks are Assignments without an Item.

Secrets (annotator and admin tokens) are stored only as SHA-256 digests: a copy of the
database does not let anyone rate or administer.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# Column widths that input is checked against before it is stored (PostgreSQL enforces
# them, SQLite does not): a study's slug is "<rubric name>-YYYYMMDD-xxxxxx".
SLUG_MAX = 64
SLUG_SUFFIX = len("-20261123-abcdef")
TITLE_MAX = 200
COMPLETION_CODE_MAX = 100


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Study(Base):
    __tablename__ = "study"
    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(SLUG_MAX), unique=True)
    title: Mapped[str] = mapped_column(String(TITLE_MAX))
    # Large columns load on first access: the rating path reads the rubric from a
    # per-process cache (annotator.study_rubric) and never needs the others.
    rubric: Mapped[dict] = mapped_column(JSON, deferred=True)  # Rubric.to_json(), frozen at creation
    consent_text: Mapped[str] = mapped_column(Text, deferred=True)
    admin_token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    run_dir: Mapped[str] = mapped_column(Text, deferred=True)  # admin-only: never rendered for annotators
    run_id: Mapped[str] = mapped_column(String(200))
    design: Mapped[dict] = mapped_column(JSON, deferred=True)  # parameters and seed of the assignment
    attention_rate: Mapped[float] = mapped_column(Float, default=0.0)
    attention_fail_limit: Mapped[int] = mapped_column(Integer, default=2)
    completion_code: Mapped[str | None] = mapped_column(String(COMPLETION_CODE_MAX), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    closed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)

    systems: Mapped[list[StudySystem]] = relationship(back_populates="study", order_by="StudySystem.id")
    items: Mapped[list[Item]] = relationship(back_populates="study", order_by="Item.id")
    annotators: Mapped[list[Annotator]] = relationship(back_populates="study", order_by="Annotator.id")


class StudySystem(Base):
    __tablename__ = "study_system"
    __table_args__ = (UniqueConstraint("study_id", "name"), UniqueConstraint("study_id", "code"))
    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id"))
    name: Mapped[str] = mapped_column(Text)  # e.g. "smollm2-135m/graphmax(lam=1.0)/top_p=0.9"
    code: Mapped[str] = mapped_column(String(32))  # opaque, for blinded exports
    study: Mapped[Study] = relationship(back_populates="systems")


class Item(Base):
    __tablename__ = "item"
    __table_args__ = (UniqueConstraint("study_id", "code", "system_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id"), index=True)
    code: Mapped[str] = mapped_column(String(32))  # the prompt's opaque id within the study
    system_id: Mapped[int] = mapped_column(ForeignKey("study_system.id"))
    prompt_id: Mapped[str] = mapped_column(String(200))  # the run's id: admin-only
    sample: Mapped[int] = mapped_column(Integer, default=0)
    prompt: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    study: Mapped[Study] = relationship(back_populates="items")
    system: Mapped[StudySystem] = relationship()


class Annotator(Base):
    __tablename__ = "annotator"
    __mapper_args__ = {"eager_defaults": False}
    __table_args__ = (UniqueConstraint("study_id", "label"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id"), index=True)
    label: Mapped[str] = mapped_column(String(64))  # "a01": what the researcher sees
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    consented_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    check_attempts: Mapped[int] = mapped_column(Integer, default=0)
    check_passed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    attention_failures: Mapped[int] = mapped_column(Integer, default=0)
    excluded_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    last_seen_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # "human" (a person with a link) or "model" (a judge: no link is ever issued, its judgments are
    # in ``judgment``, never in ``rating``); ``judge`` is a model rater's identity (``JUDGE_IDENTITY``).
    # The database fills ``kind`` (server default, no eager fetch): an INSERT of a person names no
    # column the first schemas lack, so rows a person makes look the same under every revision.
    kind: Mapped[str] = mapped_column(String(16), server_default="human")
    judge: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    study: Mapped[Study] = relationship(back_populates="annotators")
    assignments: Mapped[list[Assignment]] = relationship(back_populates="annotator", order_by="Assignment.position")


class Assignment(Base):
    """One page for one annotator; ``position`` is the 1-based order in which it is shown."""

    __tablename__ = "assignment"
    __table_args__ = (UniqueConstraint("annotator_id", "position"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    public_id: Mapped[str] = mapped_column(String(32), unique=True)  # random, used in URLs
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotator.id"), index=True)
    item_id: Mapped[int | None] = mapped_column(ForeignKey("item.id"), nullable=True)
    position: Mapped[int] = mapped_column(Integer)
    # Attention check: {"prompt", "text", "expected"}; None for a real item.
    attention: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    attention_passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    annotator: Mapped[Annotator] = relationship(back_populates="assignments")
    item: Mapped[Item | None] = relationship()
    ratings: Mapped[list[Rating]] = relationship(back_populates="assignment", order_by="Rating.id")


class PageText(Base):
    """The texts of a page that shows several (pairwise: places 1 and 2, as A and B; best-worst:
    1..4), for the same prompt; ``Assignment.item_id`` is the text in place 1. A one-text page
    (Likert, direct assessment, attention checks) has no rows here."""

    __tablename__ = "page_text"
    __table_args__ = (UniqueConstraint("assignment_id", "place"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignment.id"), index=True)
    place: Mapped[int] = mapped_column(Integer)
    item_id: Mapped[int] = mapped_column(ForeignKey("item.id"))
    item: Mapped[Item] = relationship()
    assignment: Mapped[Assignment] = relationship()


PARTICIPANT_ID_MAX = 64


class Enrolment(Base):
    """A crowd participant (Prolific's PROLIFIC_PID, MTurk's workerId) holding one block (an
    Annotator) of a study with open enrolment. ``annotator_id`` is unique: two participants
    claiming one block at once cannot both win. A block given away after abandonment keeps
    the earlier row with ``annotator_id`` NULL and ``released_at`` set.

    The participant id is admin-only: never rendered to participants; only `maxbench study
    participants` (the list for the platform's approval) exports it."""

    __tablename__ = "enrolment"
    __table_args__ = (UniqueConstraint("study_id", "participant_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id"), index=True)
    platform: Mapped[str] = mapped_column(String(16))  # "prolific" or "mturk"
    participant_id: Mapped[str] = mapped_column(String(PARTICIPANT_ID_MAX))
    platform_session: Mapped[str | None] = mapped_column(String(PARTICIPANT_ID_MAX), nullable=True)
    annotator_id: Mapped[int | None] = mapped_column(ForeignKey("annotator.id"), unique=True, nullable=True)
    claimed_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    released_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


# Tables added after the first release. A database from before lacks them until
# `maxbench db upgrade` runs the migrations (store/migrations): it is refused until then.
OPTIONAL_TABLES = {"page_text", "enrolment", "judgment"}

RATER_KINDS = ("human", "model")
# What a model rater's ``Annotator.judge`` holds: the judge's identity, hashed into ``key``.
# An adapted model's adds "adapter" (its name, key and content hash; its key is in "weights" too).
JUDGE_IDENTITY = ("model", "weights", "tokenizer", "template", "decoding")
JUDGMENT_UNIT_MAX = 200


class Judgment(Base):
    """One judgment of a model rater (``Annotator.kind == "model"``) on one unit, per criterion.

    A unit is what a person sees on one page, in the order shown: ``items`` lists the Item ids
    by place (one text; a pair, A then B; a best-worst tuple), and ``unit`` spells it
    ("12", "12,31", "12,31,40,7"), so that (rater, unit, criterion) is the unique key: a judge
    (one identity, one rater row) never judges a unit twice. ``value`` is the argmax label's
    value, ``expected`` the expectation of the values under the label probabilities (None for
    choices without an order: pairwise and best-worst), ``probabilities`` the label -> probability
    map (normalised over the labels), ``label_mass`` the probability the model put on the labels
    at all, and ``scoring`` "single-token" or "sequence" (how the labels were scored)."""

    __tablename__ = "judgment"
    __table_args__ = (UniqueConstraint("annotator_id", "unit", "criterion"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotator.id"), index=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("item.id"))  # the text in place 1
    unit: Mapped[str] = mapped_column(String(JUDGMENT_UNIT_MAX))
    items: Mapped[list] = mapped_column(JSON)
    criterion: Mapped[str] = mapped_column(String(40))
    value: Mapped[int] = mapped_column(Integer)
    expected: Mapped[float | None] = mapped_column(Float, nullable=True)
    probabilities: Mapped[dict] = mapped_column(JSON)
    label_mass: Mapped[float] = mapped_column(Float)
    scoring: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Rating(Base):
    __tablename__ = "rating"
    # One value per criterion and page: a repeated submit can never store a second rating.
    __table_args__ = (UniqueConstraint("assignment_id", "criterion"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignment.id"), index=True)
    criterion: Mapped[str] = mapped_column(String(40))
    value: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    assignment: Mapped[Assignment] = relationship(back_populates="ratings")
