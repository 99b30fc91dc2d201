"""Gold items: a real reference of the suite against a degraded copy of it, with a known answer.

A study created with ``gold_items=N`` (``maxbench study create --gold-items N``) picks N prompts
of the run whose suite reference has at least ``MIN_WORDS`` words and degrades each reference in
one of three ways (rotating, so each kind is used): ``shuffled`` (its words in a seeded random
order), ``looped`` (its first quarter repeated to the original length, like a degenerate
sampler) or ``truncated`` (cut to its first third). Everything follows from the study seed.

Every annotator gets every gold pair, at seeded places of their sequence (never first):

- pairwise: one page with the reference and the degraded copy as A and B (the reference's side
  alternating over pairs and annotators); the expected answer is the reference;
- likert / direct: two pages, the reference and the degraded copy; the expected answer is the
  reference rated higher than its copy by the same participant, criterion by criterion.

Gold texts are stored as the study's texts of two reserved systems (``GOLD_REFERENCE`` and
``GOLD_DEGRADED``, with random codes like every system), so their pages carry the same markup
and random ids as any other page. ``maxbench.human_eval.studies.export`` leaves them out of every rating export
and of the progress counts: they never reach the per-system statistics. ``export.gold_accuracy``
reads them back, and ``maxbench report --exclude-gold-below X`` excludes annotators whose
accuracy is below X (counted in the report's exclusion table).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from maxbench.errors import MaxbenchError

GOLD_PREFIX = "[gold] "
GOLD_REFERENCE = GOLD_PREFIX + "reference"
GOLD_DEGRADED = GOLD_PREFIX + "degraded"
DEGRADATIONS = ("shuffled", "looped", "truncated")
MIN_WORDS = 8


def is_gold(system_name: str) -> bool:
    return system_name.startswith(GOLD_PREFIX)


def degrade(text: str, kind: str, rng: random.Random) -> str:
    """The reference made worse in a way a reader can see; never equal to it."""
    words = text.split()
    if len(words) < MIN_WORDS:
        raise MaxbenchError(f"a gold reference needs at least {MIN_WORDS} words, this one has {len(words)}")
    if kind == "shuffled":
        out = list(words)
        while out == words:  # at least two different words (MIN_WORDS), so this ends
            rng.shuffle(out)
            if len(set(words)) == 1:
                break
    elif kind == "looped":
        head = words[: max(2, len(words) // 4)]
        out = (head * (len(words) // len(head) + 1))[: len(words)]
    elif kind == "truncated":
        out = words[: max(2, len(words) // 3)]
    else:
        raise MaxbenchError(f"unknown gold degradation {kind!r}: use one of {', '.join(DEGRADATIONS)}")
    return " ".join(out)


@dataclass(frozen=True)
class GoldPair:
    prompt_id: str
    prompt: str
    reference: str
    degraded: str
    kind: str


def build_gold_pairs(records: list[dict], n: int, seed: int) -> list[GoldPair]:
    """N gold pairs from the run's records (one per prompt, its suite reference), seeded."""
    if n < 0:
        raise MaxbenchError("--gold-items must be 0 or more")
    if n == 0:
        return []
    references: dict[str, dict] = {}
    for rec in sorted(records, key=lambda r: (r["prompt_id"], r.get("sample", 0), r["system"])):
        ref = rec.get("reference")
        if isinstance(ref, str) and len(ref.split()) >= MIN_WORDS and len(set(ref.split())) > 1:
            references.setdefault(rec["prompt_id"], rec)
    if len(references) < n:
        raise MaxbenchError(
            f"--gold-items {n}: the run has {len(references)} prompt(s) with a suite reference of at least "
            f"{MIN_WORDS} different words; ask for {len(references)} or fewer"
        )
    rng = random.Random(f"gold-{seed}")
    chosen = rng.sample(sorted(references), n)
    pairs = []
    for k, prompt_id in enumerate(chosen):
        rec = references[prompt_id]
        kind = DEGRADATIONS[k % len(DEGRADATIONS)]
        pairs.append(GoldPair(prompt_id, rec["prompt"], rec["reference"], degrade(rec["reference"], kind, rng), kind))
    return pairs


@dataclass(frozen=True)
class GoldPage:
    """A gold page in an annotator's sequence: pair ``pair``; ``texts`` are the roles shown in
    places 1, 2, ... (pairwise: both; likert/direct: one)."""

    pair: int
    texts: tuple[str, ...]


def gold_pages(n_pairs: int, pairwise: bool, annotator: int) -> list[GoldPage]:
    if pairwise:
        return [
            GoldPage(k, ("reference", "degraded") if (k + annotator) % 2 == 0 else ("degraded", "reference"))
            for k in range(n_pairs)
        ]
    return [GoldPage(k, (role,)) for k in range(n_pairs) for role in ("reference", "degraded")]


def insert_gold(pages: list, gold: list[GoldPage], rng: random.Random) -> list:
    """``pages`` with the gold pages at seeded places, never first."""
    out = list(pages)
    for page in gold:
        out.insert(rng.randint(1, len(out)), page)
    return out
