"""Creating a study from a run: sample the texts, hide the systems, assign annotators.

``create_study(session, run_dir, rubric, options)`` reads ``<run_dir>/generations.jsonl`` (one
JSON object per generated text: system, prompt_id, sample, prompt, text, ...), samples
``options.items_per_system`` prompts per system (the same prompts for every system in the paired
design, as in POSG; independent samples per system with ``paired=False``, as in graphmax),
takes sample 0 (the lowest sample index) of each (system, prompt), assigns the texts to
annotators with ``design.build_design`` and stores everything in one transaction. It
returns the secrets, which exist nowhere else: the annotators' tokens and the admin token.
The options are a :class:`~maxbench.human_eval.studies.options.StudyOptions`.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from maxbench.errors import MaxbenchError
from maxbench.human_eval.analysis.best_worst import TUPLE_SIZE
from maxbench.human_eval.store.db import hash_token, write_transaction
from maxbench.human_eval.store.models import (
    Annotator,
    Assignment,
    Item,
    PageText,
    Study,
    StudySystem,
)
from maxbench.human_eval.studies.design import (
    best_worst_sequence,
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
from maxbench.human_eval.studies.options import StudyOptions
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
    return path


def read_generations(run_dir: Path) -> list[dict]:
    """The run's rows, read by the run folder's owner (``maxbench.rundir``: the one rule of a row), each
    with the prompt a rater reads it after (a row without one cannot be shown)."""
    from maxbench.rundir import generations_path
    from maxbench.rundir import read_generations as read_rows

    records = read_rows(run_dir, numbered=True)
    for n, rec in records:
        if "prompt" not in rec:
            raise MaxbenchError(
                f"{generations_path(run_dir)} row {n} has no 'prompt', which raters read each text after: "
                "give a run that maxbench run/generate wrote"
            )
    return [rec | {"sample": rec.get("sample", 0)} for _, rec in records]


def _run_id(run_dir: Path) -> str:
    from maxbench.rundir import read_manifest

    return str(read_manifest(run_dir).get("run_id") or run_dir.name)


def _run_baseline(run_dir: Path, systems: list[str]) -> str | None:
    """The baseline the run was scored against, when the study rates it; None when the run has no
    scores of its generations as they are now (a study rates texts: it needs no scores)."""
    from maxbench.rundir import has_scores, read_scores

    try:
        baseline = (read_scores(run_dir).comparisons or {}).get("baseline") if has_scores(run_dir) else None
    except MaxbenchError:
        return None
    return baseline if baseline in systems else None


def _run_code(run_dir: Path, systems: list[str]) -> dict[str, dict]:
    """Where each rated system's code came from, as the run's manifest records it (``systems[S]["code"]``:
    the origins of its layer, model and adapter, docs/plugins.md); frozen into the study so that its
    report names the code that made the rated texts, even after the run is regenerated or moved.
    Empty for a run made before origins were recorded."""
    from maxbench.rundir import read_manifest

    entries = read_manifest(run_dir).get("systems") or {}
    code = {s: entries[s].get("code") for s in systems if isinstance(entries.get(s), dict)}
    return {s: c for s, c in code.items() if isinstance(c, dict) and c}


@dataclass(frozen=True)
class _Layout:
    """Everything a study is made of but its secrets, decided before the database is touched.

    ``texts`` are the rated (system, prompt) pairs, ``chosen`` their generation records;
    ``units`` (pairwise, best-worst) the pages' prompts with their systems in places 1, 2, ...;
    ``annotator_pages`` each annotator's pages, whose ``text_index`` points into ``units`` when
    there are units and into ``texts`` otherwise; ``gold`` the gold pairs the gold pages show.
    """

    systems: list[str]
    chosen: dict[tuple[str, str], dict]
    texts: list[tuple[str, str]]
    index_of: dict[tuple[str, str], int]
    prompt_code: dict[str, str]
    units: list[tuple[str, tuple[str, ...]]]
    gold: list
    annotator_pages: list[list]
    n_pages: list[int]
    design_record: dict


def create_study(session: Session, run_dir: str | Path, rubric: Rubric, options: StudyOptions) -> CreatedStudy:
    """A new study of ``run_dir``'s texts judged with ``rubric``; its secrets are returned, never stored.

    The steps: check the options against the judgment kind, read the run, pick its systems
    (``_select_systems``), lay out the texts and the annotators' pages from the one seed
    (``_lay_out``), then store the study, its items and its annotators in one transaction.
    """
    _check_judgment(rubric, options)
    run_dir = resolve_run_dir(run_dir)
    records = read_generations(run_dir)
    systems = _select_systems(records, options.systems, run_dir)
    layout = _lay_out(records, systems, rubric, options, run_dir)
    with write_transaction(session):
        study, admin_token = _insert_study(session, run_dir, rubric, options, layout.design_record)
        items, gold_items = _insert_items(session, study, layout)
        tokens = _insert_annotators(session, study, rubric, layout, items, gold_items, options.n_annotators)
        session.commit()
    return CreatedStudy(
        slug=study.slug,
        admin_token=admin_token,
        annotator_tokens=tokens,
        n_items=len(layout.texts),
        n_pages=layout.n_pages,
        open_enrolment=options.open_enrolment,
    )


# --------------------------------------------------------------------------- checks and sampling


def _check_judgment(rubric: Rubric, options: StudyOptions) -> None:
    """The options a judgment kind cannot take."""
    if rubric.kind in ("pairwise", "best-worst") and not options.paired:
        raise MaxbenchError(f"a {rubric.kind} study compares systems on the same prompts: leave out --independent")
    if rubric.kind == "best-worst" and (options.attention_rate > 0 or options.gold_items > 0):
        raise MaxbenchError(
            "a best-worst study takes no attention checks or gold items yet (a best and a worst text cannot "
            "both be 'the same value'): give --attention-rate 0 and no --gold-items"
        )


def _select_systems(records: list[dict], asked: tuple[str, ...] | None, run_dir: Path) -> list[str]:
    """The systems asked for (every system of the run when none), each once, checked against the run."""
    available = sorted({r["system"] for r in records})
    systems = list(dict.fromkeys(asked or available))
    unknown = [s for s in systems if s not in available]
    if unknown:
        raise MaxbenchError(f"system(s) {', '.join(unknown)} not in {run_dir}; the run has: {', '.join(available)}")
    reserved = [s for s in systems if s.startswith(GOLD_PREFIX)]
    if reserved:
        raise MaxbenchError(f"system name(s) {', '.join(reserved)} start with {GOLD_PREFIX!r}, kept for gold items")
    return systems


def _sample_prompts(
    prompts_of: dict[str, list[str]], options: StudyOptions, rng: random.Random, run_dir: Path
) -> dict[str, list[str]]:
    """system -> its ``items_per_system`` prompts: the same for every system when paired."""
    n = options.items_per_system
    if options.paired:
        common = sorted(set.intersection(*(set(p) for p in prompts_of.values())))
        if len(common) < n:
            raise MaxbenchError(
                f"run {run_dir} has {len(common)} prompt(s) generated by every selected system, "
                f"fewer than --items-per-system {n}: ask for {len(common)} or fewer, "
                "or use --independent"
            )
        picked = rng.sample(common, n)
        return {s: picked for s in prompts_of}
    per_system_prompts = {}
    for s, prompts in prompts_of.items():
        if len(prompts) < n:
            raise MaxbenchError(
                f"system {s} has {len(prompts)} prompt(s) in {run_dir}, fewer than --items-per-system {n}: ask for fewer"
            )
        per_system_prompts[s] = rng.sample(prompts, n)
    return per_system_prompts


def _lay_out(records: list[dict], systems: list[str], rubric: Rubric, options: StudyOptions, run_dir: Path) -> _Layout:
    """The texts, item codes and every annotator's pages, all random choices drawn from ``options.seed``."""
    # One text per (system, prompt): the lowest sample index, so reruns pick the same text.
    chosen: dict[tuple[str, str], dict] = {}
    for rec in records:
        key = (rec["system"], rec["prompt_id"])
        if rec["system"] in systems and (key not in chosen or rec["sample"] < chosen[key]["sample"]):
            chosen[key] = rec
    prompts_of = {s: sorted(p for (sys_, p) in chosen if sys_ == s) for s in systems}
    rng = random.Random(options.seed)
    per_system_prompts = _sample_prompts(prompts_of, options, rng, run_dir)

    all_prompts = sorted({p for ps in per_system_prompts.values() for p in ps})
    rng.shuffle(all_prompts)
    # Opaque item codes: numbered in a shuffled prompt order, so they say nothing of the run.
    prompt_code = {p: f"item-{i + 1:03d}" for i, p in enumerate(all_prompts)}
    texts: list[tuple[str, str]] = [(s, p) for s in systems for p in sorted(per_system_prompts[s])]
    index_of = {key: i for i, key in enumerate(texts)}
    units, sequence = _page_sequence(rubric.kind, systems, per_system_prompts, index_of, options.paired, rng)
    design = build_design(
        sequence,
        len(units) or len(texts),
        options.raters_per_item,
        options.n_annotators,
        options.seed,
        options.attention_rate,
        rubric.attention_values,
    )
    gold = build_gold_pairs(records, options.gold_items, options.seed)
    gold_rng = random.Random(f"gold-pages-{options.seed}")
    annotator_pages = [
        insert_gold(pages, gold_pages(len(gold), rubric.kind == "pairwise", a), gold_rng)
        for a, pages in enumerate(design.pages)
    ]
    design_record = {
        "paired": options.paired,
        "systems": systems,
        "baseline": _run_baseline(run_dir, systems),  # the report's default reference
        "code": _run_code(run_dir, systems),  # the report's provenance: where each system's code came from
        "items_per_system": options.items_per_system,
        "raters_per_item": options.raters_per_item,
        "annotators": options.n_annotators,
        "seed": options.seed,
        "attention_rate": options.attention_rate,
        "attention_fail_limit": options.attention_fail_limit,
        "n_texts": len(texts),
        "check_attempts": options.check_attempts,
        "enrolment": {"abandon_after_s": options.abandon_after_s} if options.open_enrolment else None,
        "gold": [{"prompt_id": g.prompt_id, "degradation": g.kind} for g in gold],
    }
    return _Layout(
        systems=systems,
        chosen=chosen,
        texts=texts,
        index_of=index_of,
        prompt_code=prompt_code,
        units=units,
        gold=gold,
        annotator_pages=annotator_pages,
        n_pages=[len(p) for p in design.pages],
        design_record=design_record,
    )


def _page_sequence(
    kind: str,
    systems: list[str],
    per_system_prompts: dict[str, list[str]],
    index_of: dict[tuple[str, str], int],
    paired: bool,
    rng: random.Random,
) -> tuple[list[tuple[str, tuple[str, ...]]], list[int]]:
    """(units, the order of the pages): a pairwise or best-worst page shows a unit (a prompt with
    its systems in places 1, 2, ...) and the sequence indexes the units; a rating page shows one
    text and the sequence indexes the texts (no units)."""
    units: list[tuple[str, tuple[str, ...]]] = []
    prompt_list = sorted(per_system_prompts[systems[0]])
    if kind == "pairwise":
        grid = pairwise_sequence(len(prompt_list), len(systems), rng)
        units = [(prompt_list[pi], (systems[a], systems[b])) for pi, a, b in grid]
        return units, list(range(len(units)))
    if kind == "best-worst":
        tuples = best_worst_sequence(len(prompt_list), len(systems), min(TUPLE_SIZE, len(systems)), rng)
        units = [(prompt_list[pi], tuple(systems[k] for k in shown)) for pi, shown in tuples]
        return units, list(range(len(units)))
    if paired:
        grid = paired_sequence(len(prompt_list), len(systems), rng)
        return units, [index_of[(systems[si], prompt_list[pi])] for pi, si in grid]
    return units, interleaved_sequence(
        [[index_of[(s, p)] for p in sorted(per_system_prompts[s])] for s in systems], rng
    )


# --------------------------------------------------------------------------- storing


def _insert_study(
    session: Session, run_dir: Path, rubric: Rubric, options: StudyOptions, design_record: dict
) -> tuple[Study, str]:
    """The study row under a fresh slug, and its admin token (only the token's hash is stored)."""
    slug = f"{rubric.name}-{datetime.now(UTC):%Y%m%d}-{secrets.token_hex(3)}"
    while session.scalar(select(Study.id).where(Study.slug == slug)) is not None:
        slug = f"{rubric.name}-{datetime.now(UTC):%Y%m%d}-{secrets.token_hex(3)}"
    admin_token = "adm-" + secrets.token_urlsafe(24)
    study = Study(
        slug=slug,
        title=options.title or rubric.title,
        rubric=rubric.to_json(),
        consent_text=options.consent_text or DEFAULT_CONSENT,
        admin_token_hash=hash_token(admin_token),
        run_dir=str(run_dir.resolve()),
        run_id=_run_id(run_dir),
        design=design_record,
        attention_rate=options.attention_rate,
        attention_fail_limit=options.attention_fail_limit,
        completion_code=options.completion_code,
    )
    session.add(study)
    session.flush()
    return study, admin_token


def _insert_items(session: Session, study: Study, layout: _Layout) -> tuple[list[Item], list[dict[str, Item]]]:
    """(the items of ``layout.texts``, in that order; per gold pair, its "reference" and "degraded" items).

    Systems are stored under opaque codes; the gold items take the item codes after the rated ones.
    """
    system_rows = {
        s: StudySystem(study_id=study.id, name=s, code="sys-" + secrets.token_hex(3)) for s in layout.systems
    }
    session.add_all(system_rows.values())
    session.flush()
    items = []
    for s, p in layout.texts:
        rec = layout.chosen[(s, p)]
        items.append(
            Item(
                study_id=study.id,
                code=layout.prompt_code[p],
                system_id=system_rows[s].id,
                prompt_id=p,
                sample=int(rec["sample"]),
                prompt=rec["prompt"],
                text=rec["text"],
            )
        )
    gold_items_of: list[dict[str, Item]] = []
    if layout.gold:
        gold_systems = {
            role: StudySystem(study_id=study.id, name=name, code="sys-" + secrets.token_hex(3))
            for role, name in (("reference", GOLD_REFERENCE), ("degraded", GOLD_DEGRADED))
        }
        session.add_all(gold_systems.values())
        session.flush()
        for k, g in enumerate(layout.gold):
            code = f"item-{len(layout.prompt_code) + k + 1:03d}"
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
    return items, gold_items_of


def _insert_annotators(
    session: Session,
    study: Study,
    rubric: Rubric,
    layout: _Layout,
    items: list[Item],
    gold_items_of: list[dict[str, Item]],
    n_annotators: int,
) -> list[tuple[str, str]]:
    """One annotator per block of pages, with its assignments; returns (label, token) per annotator."""
    tokens: list[tuple[str, str]] = []
    width = max(2, len(str(n_annotators)))
    for a, pages in enumerate(layout.annotator_pages):
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
            elif layout.units:
                prompt, in_places = layout.units[page.text_index]
                shown = [items[layout.index_of[(system, prompt)]] for system in in_places]
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
                    PageText(assignment=assignment, place=place, item_id=item.id) for place, item in enumerate(shown, 1)
                )
        tokens.append((label, token))
    return tokens


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
