"""Which annotator rates which text, and in what order (a balanced, Latin-square style design).

The rated texts form a grid of prompts x systems (paired design: every system continued
the same prompts) or one list per system (independent design). They are laid out in one
sequence such that every window of consecutive texts is balanced over systems and, in the
paired grid, never holds the same prompt twice: round ``r`` of the grid visits each prompt
``p`` once, with system ``(p + r) mod S`` (the rows of a Latin square). That sequence is
repeated ``raters_per_item`` times and cut into one contiguous block per annotator, so

- every text gets exactly ``raters_per_item`` ratings (the per-item rater cap), each from a
  different annotator, as long as there are at least that many annotators;
- annotators' loads differ by at most one text, and each block is balanced over systems;
- with as many annotators as raters per item, everyone rates every text (the papers' design).

Each annotator's block is then shuffled with a seeded generator; that shuffled order,
with the attention checks inserted, is the presentation order stored per annotator.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from maxbench.errors import MaxbenchError


@dataclass(frozen=True)
class Page:
    """One page of an annotator's sequence: a text (``text_index``) or an attention check."""

    text_index: int | None
    attention_value: int | None = None


@dataclass(frozen=True)
class StudyDesign:
    n_texts: int
    raters_per_item: int
    n_annotators: int
    seed: int
    attention_rate: float
    pages: list[list[Page]]  # per annotator, in presentation order

    def ratings_per_text(self) -> list[int]:
        counts = [0] * self.n_texts
        for pages in self.pages:
            for page in pages:
                if page.text_index is not None:
                    counts[page.text_index] += 1
        return counts


def paired_sequence(n_prompts: int, n_systems: int, rng: random.Random) -> list[tuple[int, int]]:
    """(prompt, system) pairs of a full grid in Latin-square rounds; prompts in a seeded order."""
    prompt_order = list(range(n_prompts))
    rng.shuffle(prompt_order)
    return [(p, (k + r) % n_systems) for r in range(n_systems) for k, p in enumerate(prompt_order)]


def pairwise_sequence(n_prompts: int, n_systems: int, rng: random.Random) -> list[tuple[int, int, int]]:
    """(prompt, left system, right system) comparisons of every pair of systems on every prompt.

    Latin-square rounds as in ``paired_sequence``: round ``r`` visits each prompt once, with
    pair ``(k + r) mod P``, so any window is balanced over pairs and never repeats a prompt.
    Positions are balanced: a pair's comparisons alternate which system is on the left, in
    sequence order, so each is on the left in half of them (to within one).
    """
    pairs = [(a, b) for a in range(n_systems) for b in range(a + 1, n_systems)]
    if not pairs:
        raise MaxbenchError("a pairwise study needs at least two systems")
    prompt_order = list(range(n_prompts))
    rng.shuffle(prompt_order)
    uses = [0] * len(pairs)
    out = []
    for r in range(len(pairs)):
        for k, p in enumerate(prompt_order):
            pair_index = (k + r) % len(pairs)
            a, b = pairs[pair_index]
            out.append((p, a, b) if uses[pair_index] % 2 == 0 else (p, b, a))
            uses[pair_index] += 1
    return out


def best_worst_sequence(
    n_prompts: int, n_systems: int, size: int, rng: random.Random
) -> list[tuple[int, tuple[int, ...]]]:
    """(prompt, systems in places 1..size) tuples for best-worst scaling, balanced.

    Each prompt gets the ``n_systems`` cyclic tuples ``(j, j+1, ..., j+size-1) mod S`` (just one,
    all systems, when ``size == n_systems``), so every system is shown ``size`` times per prompt
    (once with ``size == n_systems``) and with every other system equally often. Places rotate:
    the k-th use of a tuple starts at place ``k mod size``, so each system is in each place
    equally often over rounds. Rounds visit each prompt once, in a seeded prompt order.
    """
    if not 3 <= size <= n_systems:
        raise MaxbenchError(
            f"best-worst scaling needs at least 3 systems for a tuple of {size}; the study has {n_systems}"
        )
    cyclic = [tuple((j + k) % n_systems for k in range(size)) for j in range(n_systems if size < n_systems else 1)]
    prompt_order = list(range(n_prompts))
    rng.shuffle(prompt_order)
    uses = [0] * len(cyclic)
    out = []
    for r in range(len(cyclic)):
        for k, p in enumerate(prompt_order):
            t = (k + r) % len(cyclic)
            turn = uses[t] % size
            out.append((p, cyclic[t][turn:] + cyclic[t][:turn]))
            uses[t] += 1
    return out


def interleaved_sequence(per_system: list[list[int]], rng: random.Random) -> list[int]:
    """Round-robin over systems of each system's (shuffled) texts: any window is balanced."""
    queues = [list(texts) for texts in per_system]
    for q in queues:
        rng.shuffle(q)
    out: list[int] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def n_attention_checks(n_items: int, rate: float) -> int:
    if rate <= 0 or n_items == 0:
        return 0
    return max(1, round(rate * n_items))


def build_design(
    sequence: list[int],
    n_texts: int,
    raters_per_item: int,
    n_annotators: int,
    seed: int,
    attention_rate: float,
    scale: list[int],
) -> StudyDesign:
    """Cut ``raters_per_item`` copies of ``sequence`` (text indices) into annotators' blocks."""
    if raters_per_item < 1:
        raise MaxbenchError("--raters-per-item must be at least 1")
    if n_annotators < raters_per_item:
        raise MaxbenchError(
            f"{n_annotators} annotator(s) cannot give each item {raters_per_item} "
            f"different raters: use --annotators {raters_per_item} or more"
        )
    if not 0 <= attention_rate <= 1:
        raise MaxbenchError(f"--attention-rate {attention_rate} must be between 0 and 1")
    rng = random.Random(seed)
    slots = sequence * raters_per_item
    base, extra = divmod(len(slots), n_annotators)
    if base == 0:
        raise MaxbenchError(
            f"{n_annotators} annotators for {len(slots)} ratings leaves some with nothing "
            f"to rate: use --annotators {len(slots)} or fewer"
        )
    pages: list[list[Page]] = []
    start = 0
    for a in range(n_annotators):
        size = base + (1 if a < extra else 0)
        block = slots[start : start + size]
        start += size
        rng.shuffle(block)
        annotator_pages = [Page(i) for i in block]
        # Instructed-response checks: one at a random place in each of k equal stretches of
        # the sequence (never first, never two in a row), so they cannot be anticipated.
        k = n_attention_checks(len(block), attention_rate)
        cuts = [round(j * len(block) / k) for j in range(k + 1)] if k else []
        before = [rng.randint(cuts[j] + 1, cuts[j + 1]) for j in range(k)]  # disjoint ranges
        for index in sorted(before, reverse=True):
            annotator_pages.insert(index, Page(None, rng.choice(scale)))
        pages.append(annotator_pages)
    design = StudyDesign(
        n_texts=n_texts,
        raters_per_item=raters_per_item,
        n_annotators=n_annotators,
        seed=seed,
        attention_rate=attention_rate,
        pages=pages,
    )
    counts = design.ratings_per_text()
    # Holds by construction (blocks of length <= len(sequence) never repeat a text); checked
    # because a violated cap would silently bias agreement and tests.
    assert all(c == raters_per_item for c in counts), counts
    for annotator_pages in pages:
        texts = [p.text_index for p in annotator_pages if p.text_index is not None]
        assert len(texts) == len(set(texts)), "an annotator got the same text twice"
    return design
