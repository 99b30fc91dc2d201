"""Creating a study from a run: sample the texts, hide the systems, assign annotators.

``create_study(session, run_dir, ...)`` reads ``<run_dir>/generations.jsonl`` (one JSON
object per generated text: system, prompt_id, sample, prompt, text, ...), samples
``items_per_system`` prompts per system (the same prompts for every system in the paired
design, as in POSG; independent samples per system with ``paired=False``, as in graphmax),
takes sample 0 (the lowest sample index) of each (system, prompt), assigns the texts to
annotators with ``design.build_design`` and stores everything in one transaction. It
returns the secrets, which exist nowhere else: the annotators' tokens and the admin token.
"""

from __future__ import annotations

import json
import random
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from maxbench.errors import MaxbenchError
from maxbench.human_eval.analysis.bestworst import TUPLE_SIZE
from maxbench.human_eval.store.db import hash_token, write_transaction
from maxbench.human_eval.store.models import (
    COMPLETION_CODE_MAX,
    TITLE_MAX,
    Annotator,
    Assignment,
    Item,
    PageText,
    Study,
    StudySystem,
)
from maxbench.human_eval.studies.design import (
    bestworst_sequence,
    build_design,
    interleaved_sequence,
    paired_sequence,
    pairwise_sequence,
)
from maxbench.human_eval.studies.gold import (
    GOLD_DEGRADED,
    GOLD_PREFIX,
    GOLD_REFERENCE,
    GoldPage,
    build_gold_pairs,
    gold_pages,
    insert_gold,
)
from maxbench.human_eval.studies.rubrics import Rubric

DEFAULT_CONSENT = (
    "This is a research study on the quality of automatically generated text. You will read "
    "short texts and rate them; it takes about as long as the number of pages suggests, and "
    "you can stop at any time and continue later with the same personal link. Your ratings "
    "are stored with a random identifier, not your name, and are used only for research. "
    "Taking part is voluntary, and you may withdraw by closing the page."
)

ATTENTION_PROMPT = "Please read the text below carefully."


def attention_text(value: int, label: str | None) -> str:
    shown = f"{value} ({label})" if label else str(value)
    return (
        "This page checks that the instructions are being read. Please ignore the usual "
        f"questions and select {shown} for every question on this page."
    )


@dataclass(frozen=True)
class CreatedStudy:
    slug: str
    admin_token: str
    annotator_tokens: list[tuple[str, str]]  # (label, token)
    n_items: int
    n_pages: list[int]
    open_enrolment: bool = False

    def links(self, base_url: str) -> list[tuple[str, str]]:
        base = base_url.rstrip("/")
        return [(label, f"{base}/a/{token}") for label, token in self.annotator_tokens]

    def public_url(self, base_url: str) -> str:
        """The open-enrolment address the crowd platform links to (it appends its parameters)."""
        return f"{base_url.rstrip('/')}/s/{self.slug}"


def resolve_run_dir(run: str | Path) -> Path:
    path = Path(run).expanduser()
    if not path.is_dir() and (Path("results") / "runs" / str(run)).is_dir():
        path = Path("results") / "runs" / str(run)
    if not path.is_dir():
        raise MaxbenchError(f"run directory {run} not found: give a results/runs/<run-id> directory")
    if not (path / "generations.jsonl").is_file():
        raise MaxbenchError(f"{path} has no generations.jsonl: generate the run first (maxbench run/generate)")
    return path


def read_generations(run_dir: Path) -> list[dict]:
    path = run_dir / "generations.jsonl"
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as exc:
        raise MaxbenchError(f"cannot read {path} ({exc.strerror}): check its permissions") from None
    except UnicodeDecodeError as exc:
        raise MaxbenchError(
            f"{path} is not UTF-8 text (byte {exc.start}): give the generations.jsonl a run wrote"
        ) from None
    records = []
    required = {"system": str, "prompt_id": str, "prompt": str, "text": str}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            # A run killed mid-write may leave a torn last line; the runner resumes past it.
            if not line.endswith("\n"):
                continue
            raise MaxbenchError(f"{path} line {lineno} is not JSON: repair or regenerate the run") from None
        if not isinstance(rec, dict):
            raise MaxbenchError(f"{path} line {lineno} is not a JSON object: repair or regenerate the run")
        for key, typ in required.items():
            if not isinstance(rec.get(key), typ):
                raise MaxbenchError(f"{path} line {lineno}: field {key!r} missing or not a {typ.__name__}")
        rec.setdefault("sample", 0)
        if not isinstance(rec["sample"], int) or isinstance(rec["sample"], bool) or rec["sample"] < 0:
            raise MaxbenchError(f"{path} line {lineno}: field 'sample' must be a whole number of 0 or more")
        records.append(rec)
    if not records:
        raise MaxbenchError(f"{run_dir}/generations.jsonl holds no generations")
    return records


def _run_id(run_dir: Path) -> str:
    try:
        return str(json.loads((run_dir / "manifest.json").read_text())["run_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return run_dir.name


def _run_baseline(run_dir: Path, systems: list[str]) -> str | None:
    """The baseline the run was scored against (its scores.json), when the study rates it."""
    try:
        baseline = json.loads((run_dir / "scores.json").read_text())["comparisons"]["baseline"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return baseline if baseline in systems else None


def create_study(
    session: Session,
    run_dir: str | Path,
    rubric: Rubric,
    *,
    systems: list[str] | None,
    items_per_system: int,
    raters_per_item: int,
    annotators: int | None = None,
    paired: bool = True,
    seed: int = 0,
    attention_rate: float = 0.1,
    attention_fail_limit: int = 2,
    completion_code: str | None = None,
    title: str | None = None,
    consent_text: str | None = None,
    open_enrolment: bool = False,
    abandon_after_s: int = 3600,
    check_attempts: int | None = None,
    gold_items: int = 0,
) -> CreatedStudy:
    if rubric.kind in ("pairwise", "best-worst") and not paired:
        raise MaxbenchError(f"a {rubric.kind} study compares systems on the same prompts: leave out --independent")
    if rubric.kind == "best-worst" and (attention_rate > 0 or gold_items > 0):
        raise MaxbenchError(
            "a best-worst study takes no attention checks or gold items yet (a best and a worst text cannot "
            "both be 'the same value'): give --attention-rate 0 and no --gold-items"
        )
    run_dir = resolve_run_dir(run_dir)
    records = read_generations(run_dir)
    available = sorted({r["system"] for r in records})
    systems = list(dict.fromkeys(systems or available))
    unknown = [s for s in systems if s not in available]
    if unknown:
        raise MaxbenchError(f"system(s) {', '.join(unknown)} not in {run_dir}; the run has: {', '.join(available)}")
    reserved = [s for s in systems if s.startswith(GOLD_PREFIX)]
    if reserved:
        raise MaxbenchError(f"system name(s) {', '.join(reserved)} start with {GOLD_PREFIX!r}, kept for gold items")
    if items_per_system < 1:
        raise MaxbenchError("--items-per-system must be at least 1")
    if attention_fail_limit < 1:
        raise MaxbenchError("--attention-fail-limit must be at least 1")
    if title is not None and not title.strip():
        raise MaxbenchError("--title is empty: give a title, or leave --title out to use the rubric's")
    if title is not None and len(title) > TITLE_MAX:
        raise MaxbenchError(f"--title is {len(title)} characters long: shorten it to {TITLE_MAX} or fewer")
    if completion_code is not None and not (0 < len(completion_code.strip()) <= COMPLETION_CODE_MAX):
        raise MaxbenchError(f"--completion-code must have 1 to {COMPLETION_CODE_MAX} characters")
    annotators = raters_per_item if annotators is None else annotators
    if check_attempts is not None and check_attempts < 1:
        raise MaxbenchError("--check-attempts must be at least 1 (Prolific allows two)")
    if abandon_after_s < 60:
        raise MaxbenchError("--abandon-after-minutes must be at least 1")

    # One text per (system, prompt): the lowest sample index, so reruns pick the same text.
    chosen: dict[tuple[str, str], dict] = {}
    for rec in records:
        key = (rec["system"], rec["prompt_id"])
        if rec["system"] in systems and (key not in chosen or rec["sample"] < chosen[key]["sample"]):
            chosen[key] = rec
    prompts_of = {s: sorted(p for (sys_, p) in chosen if sys_ == s) for s in systems}

    rng = random.Random(seed)
    if paired:
        common = sorted(set.intersection(*(set(p) for p in prompts_of.values())))
        if len(common) < items_per_system:
            raise MaxbenchError(
                f"run {run_dir} has {len(common)} prompt(s) generated by every selected system, "
                f"fewer than --items-per-system {items_per_system}: ask for {len(common)} or fewer, "
                "or use --independent"
            )
        picked = rng.sample(common, items_per_system)
        per_system_prompts = {s: picked for s in systems}
    else:
        per_system_prompts = {}
        for s in systems:
            if len(prompts_of[s]) < items_per_system:
                raise MaxbenchError(
                    f"system {s} has {len(prompts_of[s])} prompt(s) in {run_dir}, fewer "
                    f"than --items-per-system {items_per_system}: ask for fewer"
                )
            per_system_prompts[s] = rng.sample(prompts_of[s], items_per_system)

    # Everything random is decided before the database is touched, from the one seed.
    all_prompts = sorted({p for ps in per_system_prompts.values() for p in ps})
    rng.shuffle(all_prompts)
    # Opaque item codes: numbered in a shuffled prompt order, so they say nothing of the run.
    prompt_code = {p: f"item-{i + 1:03d}" for i, p in enumerate(all_prompts)}
    texts: list[tuple[str, str]] = [(s, p) for s in systems for p in sorted(per_system_prompts[s])]
    index_of = {key: i for i, key in enumerate(texts)}
    units: list[tuple[str, tuple[str, ...]]] = []  # pairwise, best-worst: (prompt, systems in places 1, 2, ...)
    if rubric.kind == "pairwise":
        prompt_list = sorted(per_system_prompts[systems[0]])
        grid = pairwise_sequence(len(prompt_list), len(systems), rng)
        units = [(prompt_list[pi], (systems[a], systems[b])) for pi, a, b in grid]
        sequence = list(range(len(units)))
    elif rubric.kind == "best-worst":
        prompt_list = sorted(per_system_prompts[systems[0]])
        tuples = bestworst_sequence(len(prompt_list), len(systems), min(TUPLE_SIZE, len(systems)), rng)
        units = [(prompt_list[pi], tuple(systems[k] for k in shown)) for pi, shown in tuples]
        sequence = list(range(len(units)))
    elif paired:
        prompt_list = sorted(per_system_prompts[systems[0]])
        grid = paired_sequence(len(prompt_list), len(systems), rng)
        sequence = [index_of[(systems[si], prompt_list[pi])] for pi, si in grid]
    else:
        sequence = interleaved_sequence(
            [[index_of[(s, p)] for p in sorted(per_system_prompts[s])] for s in systems], rng
        )
    design = build_design(
        sequence, len(units) or len(texts), raters_per_item, annotators, seed, attention_rate, rubric.attention_values
    )
    gold = build_gold_pairs(records, gold_items, seed)
    gold_rng = random.Random(f"gold-pages-{seed}")
    annotator_pages = [
        insert_gold(pages, gold_pages(len(gold), rubric.kind == "pairwise", a), gold_rng)
        for a, pages in enumerate(design.pages)
    ]
    design_record = {
        "paired": paired,
        "systems": systems,
        "baseline": _run_baseline(run_dir, systems),  # the report's default reference
        "items_per_system": items_per_system,
        "raters_per_item": raters_per_item,
        "annotators": annotators,
        "seed": seed,
        "attention_rate": attention_rate,
        "attention_fail_limit": attention_fail_limit,
        "n_texts": len(texts),
        "check_attempts": check_attempts,
        "enrolment": {"abandon_after_s": abandon_after_s} if open_enrolment else None,
        "gold": [{"prompt_id": g.prompt_id, "degradation": g.kind} for g in gold],
    }

    with write_transaction(session):
        slug = f"{rubric.name}-{datetime.now(UTC):%Y%m%d}-{secrets.token_hex(3)}"
        while session.scalar(select(Study.id).where(Study.slug == slug)) is not None:
            slug = f"{rubric.name}-{datetime.now(UTC):%Y%m%d}-{secrets.token_hex(3)}"
        admin_token = "adm-" + secrets.token_urlsafe(24)
        study = Study(
            slug=slug,
            title=title or rubric.title,
            rubric=rubric.to_json(),
            consent_text=consent_text or DEFAULT_CONSENT,
            admin_token_hash=hash_token(admin_token),
            run_dir=str(run_dir.resolve()),
            run_id=_run_id(run_dir),
            design=design_record,
            attention_rate=attention_rate,
            attention_fail_limit=attention_fail_limit,
            completion_code=completion_code,
        )
        session.add(study)
        session.flush()
        system_rows = {s: StudySystem(study_id=study.id, name=s, code="sys-" + secrets.token_hex(3)) for s in systems}
        session.add_all(system_rows.values())
        session.flush()
        items = []
        for s, p in texts:
            rec = chosen[(s, p)]
            items.append(
                Item(
                    study_id=study.id,
                    code=prompt_code[p],
                    system_id=system_rows[s].id,
                    prompt_id=p,
                    sample=int(rec["sample"]),
                    prompt=rec["prompt"],
                    text=rec["text"],
                )
            )
        gold_items_of: list[dict[str, Item]] = []
        if gold:
            gold_systems = {
                role: StudySystem(study_id=study.id, name=name, code="sys-" + secrets.token_hex(3))
                for role, name in (("reference", GOLD_REFERENCE), ("degraded", GOLD_DEGRADED))
            }
            session.add_all(gold_systems.values())
            session.flush()
            for k, g in enumerate(gold):
                code = f"item-{len(all_prompts) + k + 1:03d}"
                gold_items_of.append(
                    {
                        role: Item(
                            study_id=study.id,
                            code=code,
                            system_id=gold_systems[role].id,
                            prompt_id=g.prompt_id,
                            sample=0,
                            prompt=g.prompt,
                            text=g.reference if role == "reference" else g.degraded,
                        )
                        for role in ("reference", "degraded")
                    }
                )
            session.add_all(item for pair in gold_items_of for item in pair.values())
        session.add_all(items)
        session.flush()

        tokens: list[tuple[str, str]] = []
        width = max(2, len(str(annotators)))
        for a, pages in enumerate(annotator_pages):
            token = secrets.token_urlsafe(18)
            label = f"a{a + 1:0{width}d}"
            annotator = Annotator(study_id=study.id, label=label, token_hash=hash_token(token))
            session.add(annotator)
            session.flush()
            for position, page in enumerate(pages, 1):
                attention = None
                shown = []  # the page's texts, in places 1, 2, ...
                if isinstance(page, GoldPage):
                    shown = [gold_items_of[page.pair][role] for role in page.texts]
                elif page.text_index is None:
                    attention = {
                        "prompt": ATTENTION_PROMPT,
                        "expected": page.attention_value,
                        "text": attention_text(page.attention_value, rubric.scale_labels.get(page.attention_value)),
                    }
                elif units:
                    prompt, in_places = units[page.text_index]
                    shown = [items[index_of[(system, prompt)]] for system in in_places]
                else:
                    shown = [items[page.text_index]]
                assignment = Assignment(
                    public_id=secrets.token_urlsafe(12),
                    annotator_id=annotator.id,
                    item_id=shown[0].id if shown else None,
                    position=position,
                    attention=attention,
                )
                session.add(assignment)
                if len(shown) > 1:
                    session.add_all(
                        PageText(assignment=assignment, place=place, item_id=item.id)
                        for place, item in enumerate(shown, 1)
                    )
            tokens.append((label, token))
        session.commit()
    return CreatedStudy(
        slug=slug,
        admin_token=admin_token,
        annotator_tokens=tokens,
        n_items=len(texts),
        n_pages=[len(p) for p in design.pages],
        open_enrolment=open_enrolment,
    )


def find_study(session: Session, study_id: str | int) -> Study:
    """A study by slug, or by its numeric id; MaxbenchError when there is none."""
    study = None
    if isinstance(study_id, int) or str(study_id).isdigit():
        study = session.get(Study, int(study_id))
    if study is None:
        study = session.scalar(select(Study).where(Study.slug == str(study_id)))
    if study is None:
        known = session.scalars(select(Study.slug).order_by(Study.id)).all()
        raise MaxbenchError(f"no study {study_id!r} in the rating database; known: {', '.join(known) or 'none'}")
    return study
