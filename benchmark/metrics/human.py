"""The human row: the suite's references scored as if a system had written them.

The field reads likelihood, repetition and diversity of open-ended text against the human text it
imitates (Holtzman et al. 2020; Su and Collier 2022 give the human row beside every method), so a
score whose goal is "closest to human" (``ScoreInfo.goal``) needs the references' own value. Every
metric that applies to a set of texts without references to compare against scores them
(``Metric.human_row`` says why the others do not: they would compare the references with
themselves); attr-acc on them is its ceiling.

Generated texts stop at ``max_new_tokens``; a reference does not. Where a metric depends on length
(distinct-n, Uniq, repetition, perplexity), the references are cut to the generation length in
words (``cut_words``): the suite's ``generation_words`` where it declares one (the length attr-acc's
ceiling cuts to), else the median word count of the run's texts that reached ``max_new_tokens``
(the rows whose ``finish`` is ``length``); with neither, the references are whole. ``signature``
says which.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from maxbench.benchmark.metrics.base import TextBatch

#: the human row's label in every table
HUMAN_ROW = "human (references)"


def cut_words(text: str, words: int | None) -> str:
    """The first ``words`` whitespace words of ``text`` (all of it when None)."""
    return text if words is None else " ".join(text.split()[:words])


def generation_words(batches: Iterable[TextBatch], rows: Iterable[dict]) -> tuple[int | None, str]:
    """(words each reference is cut to, how that length was found): see the module docstring."""
    conditions = next((b.conditions for b in batches if b.conditions is not None), None)
    if conditions is not None and conditions.generation_words is not None:
        return conditions.generation_words, "suite-generation-words"
    full = [len(r["text"].split()) for r in rows if r.get("finish") == "length" and isinstance(r.get("text"), str)]
    if full:
        return int(round(statistics.median(full))), "median-words-of-texts-at-max-new-tokens"
    return None, "whole"


def references_batch(
    batches: Iterable[TextBatch], words: int | None = None, continuation: bool = True
) -> TextBatch | None:
    """The references of every prompt the batches hold, in order of first appearance, as a batch of
    texts (one per prompt, each its own prompt's reference, cut to ``words``): what the human row and
    the reproduction report's reference scores are computed on. None when the batches have no references.
    With ``continuation`` each text is ``" " + reference``, as it continues its prompt (the form ref-ppl
    scores it in, ``systems.decoding.reference_states``): a perplexity under the evaluator then reads
    the same token boundary a generated text has."""
    batches = list(batches)
    refs: dict[str, str] = {}
    prompts: dict[str, str] = {}
    for b in batches:
        if b.references is None:
            continue
        for p in b.prompt_order:
            refs.setdefault(p, b.references[p])
            if b.prompts and p in b.prompts:
                prompts.setdefault(p, b.prompts[p])
    if not refs:
        return None
    first = next(b for b in batches if b.references is not None)
    order = list(refs)
    return TextBatch(
        [" " + cut_words(refs[p].strip(), words) if continuation else cut_words(refs[p], words) for p in order],
        order,
        refs,
        prompts or None,
        conditions=first.conditions,
        reference_pool=first.reference_pool,
    )


def signature(words: int | None, how: str) -> str:
    """What the human row scored: the references, and the words each was cut to and why."""
    cut = "whole" if words is None else f"first-{words}-words({how})"
    return f"human|texts:references|cut:{cut}"
