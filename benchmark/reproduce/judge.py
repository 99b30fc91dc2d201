"""Judging a paper's cells by the rules of ``verdicts.py`` (``verdicts.RULES`` states them): each
comparison's verdict on its interval on its claim kind's scale, a cell's from its comparisons,
Holm's step over the paper's counted cells (a cell repeating an earlier cell's evidence is marked
before it, ``mark_repeated``, and decided as that cell); then the labels (few prompts, partial, a
trained head's recorded history), identical rows marked, one verdict per claim, and the headline
counts."""

from __future__ import annotations

from dataclasses import replace

from maxbench.benchmark.reproduce import fmt
from maxbench.benchmark.reproduce.cells import CellVerdict, Comparison, Row
from maxbench.benchmark.reproduce.evidence import RunScores
from maxbench.benchmark.reproduce.kinds import kind_of
from maxbench.benchmark.reproduce.papers import SETTING_SEP, Claim, Paper, sensitivity_claims
from maxbench.benchmark.reproduce.protocol import RunSpec
from maxbench.benchmark.reproduce.verdicts import (
    FEW_PROMPTS,
    INCONCLUSIVE,
    LARGER,
    LEVEL,
    NOT_COMPARABLE,
    REPRODUCED,
    RULES,
    SMALLER,
    VERDICTS,
    Verdict,
    aggregate,
    decide,
    deciding_p,
    family_level,
    holm_step,
)

FLAG_FEW = "few prompts"
FLAG_PARTIAL = "partial"
FLAG_UNTRAINED = "untrained head"
FLAG_NO_HISTORY = "training history not recorded"
FLAG_IMPROVING = "still improving"
FLAG_BUDGET = "budget"
#: a claim whose cells' verdicts differ
MIXED = "mixed"


def with_settings(paper: Paper) -> Paper:
    """``paper`` with its sensitivity settings' claims (``CLAIM@SETTING``, diagnostic) among its claims."""
    extra = tuple(c for _, c in sensitivity_claims(paper))
    return replace(paper, claims=paper.claims + extra) if extra else paper


#: the rules' sentence for a paper with seed replicates (``[protocol.seeds]``)
SEEDS_RULE = (
    " Seeds: where a comparison's method or baseline was trained with several seeds (the paper file's "
    "seeds table), it rests on the seed-averaged scores, the seeds paired (a side with one seed repeated), "
    "and its interval is a t interval whose variance adds the prompts' sampling (a bootstrap over "
    "prompts, the seeds fixed) and the seed pairs' spread over S, on Welch-Satterthwaite degrees of "
    "freedom; a cell with fewer seed pairs generated than planned is partial."
)
#: the rules' sentence for a paper with ablation claims (``component``)
COMPONENT_RULE = (
    " Ablations: a cell of a claim that removes a trained component is not comparable, outside the counts "
    "and Holm's family, where the method's adapter records that component's trained values as moved by "
    "under 0.01 from their start (component inert), or has no training meta to tell (component unchecked)."
)


def rules_text(paper: Paper) -> str:
    """The verdict rules as a paper's report states them: ``RULES``, and the sentences of the
    features its file uses (seed replicates, ablated components)."""
    text = RULES
    if paper.protocol.get("seeds"):
        text += SEEDS_RULE
    if any(c.component for c in paper.claims):
        text += COMPONENT_RULE
    return text


def _claim(paper: Paper, c: CellVerdict) -> Claim:
    return next(x for x in paper.claims if x.id == c.claim)


def judge(claim: Claim, c: CellVerdict, comp: Comparison, significant: bool = True, level: float = LEVEL) -> Verdict:
    """One comparison of a cell on its interval, on its kind's scale; ``level`` is the family's
    Bonferroni level (``verdicts.family_level``) of the interval its statements about the paper's
    effect and the band are made on."""
    kind = kind_of(c.kind)
    lo, hi = kind.interval(comp.est)
    return decide(
        claim.direction,
        lo,
        hi,
        comp.paper,
        band=kind.band,
        significant=significant,
        hardware=claim.hardware,
        reason=comp.reason,
        scale=kind.scale,
        wide=kind.interval(comp.est, level),
        cost=claim.cost,
    )


def _aggregate(c: CellVerdict) -> None:
    v = aggregate([(comp.baseline, comp.verdict) for comp in c.details])
    c.verdict, c.why = v.verdict, v.why


def decide_cells(paper: Paper, cells: list[CellVerdict]) -> None:
    """The verdict of every cell: each comparison's verdict on its interval, the cell's from its
    comparisons (``aggregate``), then Holm's step over the paper's counted cells, which judges a
    cell it does not reject as if its interval contained 0, and every statement about the paper's
    effect or the band on the interval widened to 1 - alpha / m, m the family's comparisons; a cell
    repeating another's evidence (``mark_repeated``) is decided as that cell. Diagnostics are decided on their own
    intervals, outside the family."""
    family = []
    for c in cells:
        if not c.details:
            continue  # decided where built (a convergence diagnostic, a claim that cannot run)
        claim = _claim(paper, c)
        for comp in c.details:
            comp.verdict = judge(claim, c, comp)
        c.p_value = deciding_p([(comp.verdict, comp.est.p_value) for comp in c.details])
        _aggregate(c)
        enters = c.verdict != NOT_COMPARABLE and c.p_value is not None
        if c.twin is not None and enters and not any(t is c.twin for t, _ in family):
            _unrepeat(c)  # its twin stays out of the family (not comparable): this cell counts instead
        if c.counted and enters:
            family.append((c, claim))
    adjusted, rejects = holm_step([c.p_value for c, _ in family])
    level = family_level(sum(len(c.details) for c, _ in family))
    decided = {}
    for (c, claim), p_adj, significant in zip(family, adjusted, rejects):
        c.p_holm = p_adj
        for comp in c.details:
            comp.verdict = judge(claim, c, comp, significant, level)
        _aggregate(c)
        decided[id(c)] = (p_adj, significant)
    for c in cells:  # a cell repeating an earlier one's evidence (``mark_repeated``) is decided as it was
        twin = decided.get(id(c.twin)) if c.twin is not None and c.details else None
        if twin is not None:
            claim = _claim(paper, c)
            c.p_holm = twin[0]
            for comp in c.details:
                comp.verdict = judge(claim, c, comp, twin[1], level)
            _aggregate(c)


def _unrepeat(c: CellVerdict) -> None:
    """A cell marked as repeating another's evidence counted after all (its twin is not judged)."""
    c.flags = [f for f in c.flags if not f.startswith(f"{FLAG_SAME} {c.same_as}")]
    c.same_as, c.twin, c.counted = "", None, True


def unadjusted(paper: Paper, c: CellVerdict) -> str:
    """A cell's verdict on its own interval, before Holm's step (the settings' cells, diagnostics, are
    judged that way: the sensitivity table compares like with like)."""
    claim = next((x for x in paper.claims if x.id == c.claim), None)
    if claim is None or not c.details or c.p_holm is None:
        return c.verdict
    return aggregate([(d.baseline, judge(claim, c, d)) for d in c.details]).verdict


def _cell_runs(c: CellVerdict, runs: list[RunSpec]) -> tuple[tuple[str, ...], list[RunSpec]]:
    """The cell's roles and its runs (every planned fold of the cell is a run here)."""
    roles = tuple(x for x in (c.method, *c.baselines.split(", ")) if x)
    models = c.model.split("+")
    return roles, [r for r in runs if r.model in models and r.corpus == c.corpus and all(x in r.roles for x in roles)]


def _texts_of(role: str, planned: list[RunSpec], scores: RunScores) -> str:
    """What a role generated in the cell's runs, as one fingerprint of its texts in each run (the role's
    name where it generated nothing yet, so an ungenerated role is never the same as another)."""
    shas = [scores.texts_sha256(r, role) for r in planned]
    return role if not shas or None in shas else "+".join(shas)


def _partial_why(c: CellVerdict, runs: list[RunSpec], scores: RunScores, replicates: tuple = ()) -> list[str]:
    """Why a cell is partial: a run of the cell is partial (its roles' systems, and those of their
    seed ``replicates``, not all generated over the suite), or a --roles piece left out a role of
    the cell that the protocol plans for the run."""
    roles, planned = _cell_runs(c, runs)
    models = c.model.split("+")
    mine = (*roles, *(x for x in replicates if x not in roles))
    why = sorted({f"{r.run_dir.name}: {scores.partial_for(r, mine)}" for r in planned if scores.partial_for(r, mine)})
    pieces = [r for r in runs if r.model in models and r.corpus == c.corpus and r.planned and r not in planned]
    why += sorted(
        {
            f"{r.run_dir.name}: " + ", ".join(x for x in roles if x not in r.roles) + " not generated in this piece"
            for r in pieces
            if all(x in r.planned for x in roles)
        }
    )
    return why


def _budget(rec: dict) -> str:
    """A head's training budget in words ('' where its fit meta does not say)."""
    b = rec.get("budget") or {}
    parts = [
        f"{b['tokens']:,} training tokens" if b.get("tokens") else "",
        f"{b['epochs']} epochs" if b.get("epochs") else "",
        f"lr {b['lr']:g}" if b.get("lr") else "",
    ]
    return ", ".join(x for x in parts if x)


def head_labels(role: str, recs: list[dict]) -> tuple[list[str], str]:
    """The labels of a cell from the recorded training history of the trained heads of one of its
    roles (``evidence.head_training``: validation perplexity and training loss per epoch), and why
    the cell never counts as reproduced ('' if it may): the history is read, never guessed from the
    cell's interval.

    - best validation epoch 0: training never beat the head's initialisation, which is not the base
      softmax (a KerBS head's extra senses start dormant, not absent): never counted as reproduced;
    - no recorded history: labelled, its training cannot be checked;
    - validation perplexity still falling at the last epoch: labelled 'still improving';
    - the budget (tokens, epochs, learning rate) the conclusion is scoped to, where recorded."""
    labels, never = [], ""
    for rec in recs:
        hist = rec.get("history") or []
        budget = _budget(rec)
        at = f" at its budget ({budget})" if budget else ""
        if rec.get("untrained"):
            what = (
                f"{role}'s head kept its best validation epoch 0: training never beat its initialisation{at} "
                "(which is not the base softmax)"
            )
            labels.append(f"{FLAG_UNTRAINED}: {what}")
            never = never or what
        elif not hist:
            refit = rec.get("refit")
            seen = (
                f" (a refit of the same identity under the current code, other bits, kept epoch {refit['best_epoch']}"
                f"{' and still improved at its last' if refit['still_improving'] else ''}: section 'Trained heads')"
                if refit
                else ""
            )
            labels.append(
                f"{FLAG_NO_HISTORY}: {role}'s head has no recorded training history: its training cannot be checked"
                + seen
            )
        elif rec.get("still_improving"):
            last = hist[-1]
            loss = f", training loss {last['train_loss']:.4g}" if last.get("train_loss") is not None else ""
            labels.append(
                f"{FLAG_IMPROVING}: {role}'s head's validation perplexity still fell at its last epoch "
                f"({last.get('epoch')}: {last['valid_ppl']:.4g}{loss}){at}: more training might change the "
                "effect; the conclusion holds for this budget"
            )
        elif budget:
            labels.append(f"{FLAG_BUDGET}: {role}'s head trained with {budget}; the conclusion holds for this budget")
    return labels, never


def mark_repeated(paper: Paper, runs: list[RunSpec], scores: RunScores, cells: list[CellVerdict]) -> None:
    """Before Holm's family is formed: a cell with the same evidence as an earlier cell (the same
    comparisons of the same scores with the same numbers, its roles known by the texts they generated,
    so that two roles with the same texts and the same scores of them are one system: FCTG's mu
    variants whose gate stayed shut are the zero-shot model, its "without MVA" row) is counted once:
    ``same_as`` the earlier cell, outside the counts and the family, and decided as that cell is
    (``decide_cells``)."""
    seen: dict[tuple, tuple[CellVerdict, dict]] = {}
    for c in cells:
        if not c.corpus or not c.counted:
            continue
        claim = _claim(paper, c)
        roles, planned = _cell_runs(c, runs)
        texts = {x: _texts_of(x, planned, scores) for x in roles}
        baselines = tuple(sorted({texts[b] for b in c.baselines.split(", ") if b}))
        numbers = tuple(sorted({(d.est.estimate, d.est.low, d.est.high) for d in c.details}, key=repr))
        key = (c.model, c.corpus, texts.get(c.method, c.method), baselines, c.scores, claim.direction, c.kind)
        key += (claim.hardware, numbers or (c.est.estimate, c.est.low, c.est.high))
        if key not in seen:
            seen[key] = (c, texts)
            continue
        first, first_texts = seen[key]
        c.same_as, c.twin, c.counted = first.claim, first, False
        # each role of this cell that the earlier cell does not have, with the earlier role of its texts
        alias = {t: x for x, t in first_texts.items()}
        same = [f"{x}'s texts are {alias[texts[x]]}'s" for x in roles if x not in first_texts and texts[x] in alias]
        why = f" ({'; '.join(same)}, text for text)" if same else ""
        c.flags.append(f"{FLAG_SAME} {first.claim}{why}: counted once")


def flag_cells(paper: Paper, runs: list[RunSpec], scores: RunScores, cells: list[CellVerdict], heads: dict) -> None:
    """Labels: few prompts, partial (with why), the recorded training history of the cell's trained
    heads (``head_labels``: a method head whose best epoch is 0 never counts as reproduced)."""
    for c in cells:
        if not c.corpus:
            continue  # a claim that cannot run
        claim = _claim(paper, c)
        c.flags.extend(claim.flags)  # the paper file's own labels (e.g. hardware-dependent)
        if c.n_prompts and c.n_prompts < FEW_PROMPTS:
            c.flags.append(f"{FLAG_FEW} ({c.n_prompts})")
        replicates = tuple(
            x for b in c.baselines.split(", ") for p in paper.seed_pairs(c.corpus, c.method, b) for x in p
        )
        why = _partial_why(c, runs, scores, replicates)
        if why:
            c.flags.append(f"{FLAG_PARTIAL}: " + "; ".join(why))
        # the trained heads of the cell's roles, read from their recorded training history
        roles, planned = _cell_runs(c, runs)
        for role in roles:
            recs = [
                heads[(r.run_dir.name, r.roles[role])] for r in planned if (r.run_dir.name, r.roles.get(role)) in heads
            ]
            labels, never = head_labels(role, recs)
            c.flags.extend(labels)
            if never and role == c.method and c.verdict in (REPRODUCED, SMALLER, LARGER):
                c.why = f"never counted as reproduced: {never} (on its interval alone: {c.verdict}, {c.why})"
                c.verdict = INCONCLUSIVE
        c.beside = beside_of(paper, c, planned, scores)
        c.flags.extend(beside_text(x, len(planned)) for x in c.beside)


#: the label of a cell repeating an earlier cell's evidence (``mark_repeated``)
FLAG_SAME = "the same evidence as"
#: the label of a score shown beside a cell (``[protocol] beside``)
FLAG_BESIDE = "beside"
#: a score's ceiling in scores.json: the score's name with this ending (attr-acc-ceiling)
CEILING = "-ceiling"


def beside_of(paper: Paper, c: CellVerdict, planned: list[RunSpec], scores: RunScores) -> list[dict]:
    """The protocol's ``beside`` scores (FCTG: attribute accuracy) of the cell's roles in each of its
    runs: per role its value and interval, and its mean over its seeds where it has replicates
    (``[protocol.seeds]``); the score's ceiling where scores.json has one (``SCORE-ceiling``). What a
    reader needs beside a verdict on text quality; the rules never read it. One entry per score and run:
    {"score", "run", "roles": [{"role", "value", "ci_low", "ci_high", "seeds", "seed_mean"}], "ceiling"}."""
    out = []
    roles = [x for x in (c.method, *c.baselines.split(", ")) if x]
    table = (paper.protocol.get("seeds") or {}).get(c.corpus) or {}
    for score in paper.protocol.get("beside") or ():
        for run in planned:
            systems = (scores.doc(run) or {}).get("systems") or {}

            def entry(role, score=score, systems=systems, run=run):
                return ((systems.get(run.roles.get(role, "")) or {}).get("scores") or {}).get(score) or {}

            found = []
            for role in roles:
                e = entry(role)
                if e.get("value") is None:
                    continue
                vals = [entry(x).get("value") for x in (role, *table.get(role, []))]
                full = len(vals) > 1 and None not in vals
                found.append(
                    {
                        "role": role,
                        "value": e["value"],
                        "ci_low": e.get("ci_low"),
                        "ci_high": e.get("ci_high"),
                        "seeds": len(vals) if full else 1,
                        "seed_mean": sum(vals) / len(vals) if full else None,
                    }
                )
            ceiling = next(
                (x.get("value") for x in (entry(r, score + CEILING) for r in roles) if x.get("value") is not None), None
            )
            if found:
                out.append({"score": score, "run": run.run_dir.name, "roles": found, "ceiling": ceiling})
    return out


def beside_text(x: dict, runs: int = 1) -> str:
    """One ``beside_of`` entry as the cell's label."""
    parts = []
    for r in x["roles"]:
        text = f"{r['role']} {fmt.value(r['value'])}"
        if r["ci_low"] is not None:
            text += f" [{fmt.value(r['ci_low'])}, {fmt.value(r['ci_high'])}]"
        if r["seed_mean"] is not None:
            text += f", over its {r['seeds']} seeds {fmt.value(r['seed_mean'])}"
        parts.append(text)
    ceil = f"; its ceiling {fmt.value(x['ceiling'])}" if x["ceiling"] is not None else ""
    where = f" ({x['run']})" if runs > 1 else ""
    return f"{FLAG_BESIDE}: {x['score']}{where}: " + "; ".join(parts) + ceil


def missing_baselines(runs: list[RunSpec], scores: RunScores, cells: list[CellVerdict]) -> list[str]:
    """One warning line per cell that is not comparable because a baseline it is compared with (a
    control such as KerBS's fine-tuned softmax) is not measured in its runs: the cell is never judged
    against another baseline instead."""
    out = []
    for c in cells:
        if not c.details or not c.corpus:
            continue
        _, planned = _cell_runs(c, runs)
        for comp in c.details:
            if comp.verdict is None or comp.verdict.verdict != NOT_COMPARABLE:
                continue
            missing = sorted(
                r.run_dir.name
                for r in planned
                if r.roles.get(comp.baseline) not in ((scores.doc(r) or {}).get("systems") or {})
            )
            if missing:
                out.append(
                    f"cell {c.claim} x {c.model} x {c.corpus} ({c.method}): its baseline '{comp.baseline}' is not "
                    f"measured in {', '.join(missing)}: not comparable (generate and score it there; the cell is "
                    "never judged against another baseline)"
                )
    return out


def mark_identical(rows: list[Row]) -> None:
    """A maxbench-variant row with its paper variant's numbers is marked ``identical_to`` it; a row
    an earlier claim already has (same comparison, score and numbers) is marked ``same_as`` it."""
    shown: dict[tuple, str] = {}
    by_cmp: dict[tuple, dict[str, Row]] = {}
    for r in rows:
        by_cmp.setdefault((r.claim, r.model, r.corpus, r.method, r.baseline), {})[r.score] = r
    for r in rows:
        if r.variant == "maxbench":
            peers = by_cmp[(r.claim, r.model, r.corpus, r.method, r.baseline)]
            twin = peers.get(r.peer)
            twin = twin if twin is not None and twin.variant == "paper" and twin.numbers == r.numbers else None
            if twin is not None and r.diff.estimate is not None:
                r.identical_to = twin.score
                continue
        key = (r.model, r.corpus, r.method, r.baseline, r.score, r.numbers)
        if key in shown and shown[key] != r.claim:
            r.same_as = shown[key]
        else:
            shown.setdefault(key, r.claim)


def claim_verdict(cells: list[CellVerdict]) -> tuple[str, str]:
    """One claim from its cells: their verdict when they agree, else 'mixed' with the counts; cells
    repeating another claim's evidence (``mark_repeated``) say whose."""
    vs = [c.verdict for c in cells]
    if not vs:
        return NOT_COMPARABLE, "no cell"
    repeated = [c.same_as for c in cells if c.same_as]
    again = (
        f"; {'it repeats' if len(vs) == 1 else f'{len(repeated)} of them repeat'} the evidence of "
        f"{', '.join(sorted(set(repeated)))}, counted there"
        if repeated
        else ""
    )
    if len(set(vs)) == 1:
        return vs[0], f"{len(vs)} cell{'s' if len(vs) > 1 else ''}{again}"
    counts = ", ".join(f"{k} {vs.count(k)}" for k in VERDICTS if k in vs)
    return MIXED, counts + again


def headline(paper: Paper, cells: list[CellVerdict]) -> dict:
    """The counts a report leads with: claims (one verdict each, 'mixed' where its cells differ)
    and cells (claim x base model x corpus), the diagnostics and repeated evidence left out."""
    counted = [c for c in cells if c.counted]
    claims = {}
    for claim in paper.claims:
        mine = [c for c in cells if c.claim == claim.id and not c.diagnostic]
        if claim.diagnostic or not mine:
            continue
        claims[claim.id] = claim_verdict(mine)
    by_claim = {}
    for v, _ in claims.values():
        by_claim[v] = by_claim.get(v, 0) + 1
    by_cell = {}
    for c in counted:
        by_cell[c.verdict] = by_cell.get(c.verdict, 0) + 1
    return {
        "claims": len(claims),
        "claims_by_verdict": {k: by_claim[k] for k in (*VERDICTS, MIXED) if k in by_claim},
        "claim_verdicts": {k: {"verdict": v, "cells": w} for k, (v, w) in claims.items()},
        "cells": len(counted),
        "cells_by_verdict": {k: by_cell[k] for k in VERDICTS if k in by_cell},
        "diagnostic_cells": sum(1 for c in cells if c.diagnostic and SETTING_SEP not in c.claim),
        "sensitivity_cells": sum(1 for c in cells if SETTING_SEP in c.claim),
        "repeated_cells": sum(1 for c in cells if c.same_as),
    }
