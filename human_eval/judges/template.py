"""What a judge reads: the study's rubric and one page's texts, as a person sees them (blinded).

The page is the rubric's instructions, the prompt under the rubric's ``prompt_label``, the text
(or the texts as A, B, ... / 1, 2, ...), one criterion's question and the labels to answer with.
Nothing names a system, a code or the run. A model with a chat template reads it as the user's
turn and answers at the start of its own turn; a model without one reads it as plain text ending
in "Answer:" and a newline. The answer is one of the labels (``labels``), never free text.

``TEMPLATE_VERSION`` and the strings below are hashed into the judge's identity
(``template_hash``): changing the wording is a new judge, and its judgments are kept apart.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from maxbench.human_eval.studies.rubrics import Criterion, Rubric

TEMPLATE_VERSION = 1
# The 0-100 slider is read at its deciles: eleven labels, an expectation still anywhere in 0..100.
DIRECT_STEP = 10
PAIRWISE_LABELS = {"A": 1, "B": 2, "T": 0}  # value as the page stores it: 1 A better, 2 B better, 0 tie
PAGE = "{instructions}\n\n{prompt_label}:\n{prompt}\n\n{texts}\n\n{question}\n{answer}"
SCALE_ANSWER = "Answer with one number from {low} to {high}{labels}. Answer with the number only."
PAIR_ANSWER = 'Answer "A" if A is better, "B" if B is better{tie}. Answer with the letter only.'
TIE = ', or "T" if they are about the same'
BEST_ANSWER = "Which text is the best? Answer with its number, from 1 to {n}, only."
WORST_ANSWER = "Which text is the worst? Answer with its number, from 1 to {n}, only."
PLAIN_END = "\n\nAnswer:\n"


def template_hash(chat_template: str | None) -> str:
    """The identity of the wording: these strings, and the model's chat template when it has one."""
    parts = [TEMPLATE_VERSION, PAGE, SCALE_ANSWER, PAIR_ANSWER, TIE, BEST_ANSWER, WORST_ANSWER, PLAIN_END]
    parts += [sorted(PAIRWISE_LABELS.items()), DIRECT_STEP, chat_template or ""]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@dataclass(frozen=True)
class Question:
    """One question to the judge: the page text, the labels it may answer, their stored values,
    and the criterion it is stored under (best-worst: ``<criterion>_best`` / ``_worst``)."""

    criterion: str
    page: str
    labels: tuple[str, ...]
    values: tuple[int, ...]
    ordered: bool  # a scale: the expectation over the values means something


def scale_points(rubric: Rubric) -> list[int]:
    if rubric.kind == "direct":
        return list(range(rubric.scale_min, rubric.scale_max + 1, DIRECT_STEP))
    return rubric.values


def _scale_help(rubric: Rubric, criterion: Criterion) -> str:
    named = {**rubric.scale_labels, **criterion.anchors}
    shown = "; ".join(f"{v} = {named[v]}" for v in sorted(named) if rubric.scale_min <= v <= rubric.scale_max)
    return f" ({shown})" if shown else ""


def questions(rubric: Rubric, prompt: str, texts: list[str]) -> list[Question]:
    """The questions for one unit: one per criterion (best-worst: a best and a worst per criterion)."""
    common = {"instructions": rubric.instructions.strip(), "prompt_label": rubric.prompt_label, "prompt": prompt}
    out = []
    for c in rubric.criteria:
        if rubric.kind in ("likert", "direct"):
            points = scale_points(rubric)
            answer = SCALE_ANSWER.format(low=points[0], high=points[-1], labels=_scale_help(rubric, c))
            page = PAGE.format(**common, texts=f"Text:\n{texts[0]}", question=c.question, answer=answer)
            out.append(Question(c.name, page, tuple(str(v) for v in points), tuple(points), True))
        elif rubric.kind == "pairwise":
            shown = f"A:\n{texts[0]}\n\nB:\n{texts[1]}"
            labels = [k for k in PAIRWISE_LABELS if rubric.allow_tie or PAIRWISE_LABELS[k] != 0]
            answer = PAIR_ANSWER.format(tie=TIE if rubric.allow_tie else "")
            page = PAGE.format(**common, texts=shown, question=c.question, answer=answer)
            out.append(Question(c.name, page, tuple(labels), tuple(PAIRWISE_LABELS[k] for k in labels), False))
        else:  # best-worst
            shown = "\n\n".join(f"{i}:\n{t}" for i, t in enumerate(texts, 1))
            places = tuple(range(1, len(texts) + 1))
            for side, ask in (("best", BEST_ANSWER), ("worst", WORST_ANSWER)):
                page = PAGE.format(**common, texts=shown, question=c.question, answer=ask.format(n=len(texts)))
                out.append(Question(f"{c.name}_{side}", page, tuple(str(p) for p in places), places, False))
    return out


def render(page: str, tokenizer) -> tuple[str, bool]:
    """The text the model reads, and whether its chat template framed it (no special tokens to add)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": page}], tokenize=False, add_generation_prompt=True
        )
        return text, True
    return page + PLAIN_END, False
