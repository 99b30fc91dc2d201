"""The reproduction report as a document (``core/document.py``): the head (headline counts, partial
cells and controls, warnings), the verdict rules, the verdicts table, the deviations from the
paper, one section per claim with the rows behind its cells (in its claim kind's terms), the seed
controls, the sensitivity settings, the diagnostics, the trained heads and the runs used.
``sections`` builds them from a built ``Report``; ``exports.py`` writes them and the csv, json and
plot."""

from __future__ import annotations

from pathlib import Path

from maxbench.benchmark.reproduce import adapters, fmt
from maxbench.benchmark.reproduce.cells import CellVerdict, Report
from maxbench.benchmark.reproduce.claims import rows_table
from maxbench.benchmark.reproduce.controls import sections as control_sections
from maxbench.benchmark.reproduce.controls import summary as control_summary
from maxbench.benchmark.reproduce.evidence import read_scores, run_table
from maxbench.benchmark.reproduce.judge import (
    FLAG_PARTIAL,
    claim_verdict,
    headline,
    rules_text,
    unadjusted,
    with_settings,
)
from maxbench.benchmark.reproduce.kinds import kind_of
from maxbench.benchmark.reproduce.matched import section as matched_section
from maxbench.benchmark.reproduce.papers import SCORES_KEY, SETTING_SEP, Claim, Paper
from maxbench.benchmark.reproduce.verdicts import NOT_COMPARABLE
from maxbench.document import Cell, Code, Para, Section, Table, num


def cells_table(cells: list[CellVerdict], with_claim: bool = True) -> Table:
    """One line per cell: the paper's effect, maxbench's estimate, Holm's p and the verdict with why."""
    cols = (("claim",) if with_claim else ()) + (
        "model",
        "corpus",
        "method vs baseline",
        "paper's effect",
        "maxbench, % of its baseline [95% CI] (a ratio: x)",
        "prompts (folds)",
        "Holm p",
        "verdict",
    )
    body = []
    for c in cells:
        kind = kind_of(c.kind)
        vs = f"{c.method} vs {c.baselines}" if c.method and c.baselines else (c.method or c.scores)
        flags = "; ".join(c.flags)
        body.append(
            ((Cell(c.claim),) if with_claim else ())
            + (
                Cell(c.model or "(all)", code=bool(c.model)),
                Cell(c.corpus or "-"),
                Cell(vs),
                num(kind.paper_text(c)),
                num(kind.estimate_text(c)),
                num(kind.prompts_text(c) if c.n_prompts else "-"),
                num(fmt.p_value(c.p_holm)),
                Cell(c.verdict, detail=f"({c.why})" + (f" [{flags}]" if flags else "")),
            )
        )
    return Table(cols, tuple(body), align=("l" if with_claim else "") + "llllrrrl")


def _left_out(counts: dict) -> str:
    """The cells outside the headline's counts: diagnostic ones, and those repeating another's evidence."""
    parts = [
        f"{n} {what if n == 1 else plural}"
        for n, what, plural in (
            (counts["diagnostic_cells"], "diagnostic cell", "diagnostic cells"),
            (counts["repeated_cells"], "cell repeating another's evidence", "cells repeating another's evidence"),
        )
        if n
    ]
    return f"; left out of the counts: {' and '.join(parts)}" if parts else ""


def _fmt_counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"


def deviations(paper: Paper) -> list[Para]:
    """Every difference from the paper and what maxbench chose: the protocol's, then each claim's."""
    out = [Para("{}", (d,)) for d in paper.differences]
    for claim in paper.claims:
        for d in claim.differences:
            out.append(Para("{} ({}): {}", (claim.id, claim.where, d)))
        if not claim.runnable:
            out.append(Para("{} ({}): not run here: {}.", (claim.id, claim.where, claim.reason)))
        if claim.hardware:
            out.append(
                Para(
                    "{} ({}): the quantity depends on hardware and implementation, not on the method: shown, "
                    "judged not comparable.",
                    (claim.id, claim.where),
                )
            )
    if paper.diagnostic_roles:
        out.append(
            Para(
                "Diagnostics ({}): {}",
                (", ".join(paper.diagnostic_roles), paper.diagnostics or "kept out of the counts"),
            )
        )
    return out


def head_section(rep: Report) -> Section:
    """The title, the command, the wall time, the headline counts, what is partial, the controls and warnings."""
    paper, cells = rep.paper, rep.cells
    head = Section(f"Reproduction: {paper.name}", level=1)
    counts = headline(paper, cells)
    head.paragraphs += [
        Para("{} ({}).", (paper.title, paper.source)),
        Para("Command: {}", (Code(rep.command),)),
        Para(
            f"Total wall time of its runs: {rep.wall / 60:.1f} min (every phase of every invocation, from each "
            "run's timings.jsonl)."
        ),
        Para(
            f"Claims: {counts['claims']} ({_fmt_counts(counts['claims_by_verdict'])}). Verdicts per claim x base model "
            f"x corpus: {counts['cells']} ({_fmt_counts(counts['cells_by_verdict'])})" + _left_out(counts) + "."
        ),
    ]
    partial = [c for c in cells if any(f.startswith(FLAG_PARTIAL) for f in c.flags) and SETTING_SEP not in c.claim]
    if partial:
        which = "; ".join(
            f"{c.claim} {c.model} {c.corpus}"
            + (f" {c.method}" if c.method else "")
            + f" ({next(f for f in c.flags if f.startswith(FLAG_PARTIAL))[len(FLAG_PARTIAL) + 2 :]})"
            for c in partial
        )
        head.paragraphs.append(
            Para(
                "Partial: {} of {} cells rest on runs that are not complete: {}.",
                (str(len(partial)), str(len(cells)), which),
            )
        )
    for ctrl in rep.controls:
        if ctrl.partial:
            missing = "; ".join(f"seed {x} ({', '.join(fs)})" for x, fs in ctrl.missing)
            head.paragraphs.append(
                Para(
                    "Partial: the section '{}' rests on {} of {} planned seeds; missing {}.",
                    (ctrl.spec.title, str(ctrl.n), str(len(ctrl.spec.seeds)), missing),
                )
            )
    for ctrl in rep.controls:
        head.paragraphs.append(Para("{} (outside the counts): {}", (ctrl.spec.title, control_summary(ctrl))))
    for w in rep.warnings:
        head.paragraphs.append(Para("Warning: {}", (w,)))
    return head


def verdicts_section(rep: Report, by_id: dict[str, Claim]) -> Section:
    """One verdict per claim, then the table of every counted cell."""
    cells = rep.cells
    summary = Section("Verdicts", level=2)
    summary.paragraphs.append(
        Para(
            "One verdict per claim x base model x corpus (its method against its baseline, or against every "
            "competitor of a 'best among' claim); the rows behind each are in the claim's section. Holm p: the "
            "cell's p-value after Holm's step over the {} counted cells that have one.",
            (str(sum(1 for c in cells if c.counted and c.p_holm is not None)),),
        )
    )
    claim_rows = tuple(
        (Cell(cid), Cell(by_id[cid].where), Cell(v["verdict"], detail=f"({v['cells']})"))
        for cid, v in headline(rep.paper, cells)["claim_verdicts"].items()
    )
    summary.tables.append(Table(("claim", "where", "verdict (its cells)"), claim_rows, align="lll"))
    summary.tables.append(cells_table([c for c in cells if not c.diagnostic]))
    return summary


def claim_section(rep: Report, claim: Claim) -> Section:
    """A claim: its statement, the paper's numbers, its verdict and the rows behind its cells."""
    s = Section(f"{claim.where}: {claim.id}", level=2)
    s.paragraphs.append(Para("Claim: {}", (claim.statement,)))
    if claim.paper_model:
        s.paragraphs.append(Para("Paper's numbers: {}.", (claim.paper_model,)))
    if not claim.runnable:
        s.paragraphs.append(Para("Verdict: not comparable. {}", (claim.reason,)))
        return s
    mine = [c for c in rep.cells if c.claim == claim.id and not c.diagnostic]
    if mine:  # its cells are in the Verdicts table; here the rows behind them
        s.paragraphs.append(Para("Verdict: {} ({}); the cells are in the Verdicts table.", claim_verdict(mine)))
    crow = [r for r in rep.rows if r.claim == claim.id and not r.diagnostic]
    s.tables += kind_of(claim.kind).tables(claim, crow, rep.evidence)
    seeded = [r for r in crow if r.seeds and not r.same_as and not r.identical_to]
    if seeded:
        s.bullets.append(
            Para(
                "Seeds: where the method or its baseline was trained with several seeds, a row (and its "
                "cell) rests on their seed-averaged scores, the seeds paired ({}; a side with one seed "
                "repeated, its own seed variation then in no interval); its interval is a t interval whose "
                "variance adds the prompts' sampling (a bootstrap over prompts, the seeds fixed) and the "
                "seed pairs' spread, so seeds that disagree widen it however many prompts there are (with 3 "
                "seeds that disagree, near t on 2 degrees of freedom). The sd beside a mean is the seeds'. "
                "The last table gives each seed pair's own effect.",
                ("; ".join(sorted({", ".join(f"{x['method']} vs {x['baseline']}" for x in r.seeds) for r in seeded})),),
            )
        )
    twins = sorted({f"{r.score} = {r.identical_to}" for r in crow if r.identical_to})
    if twins:
        s.bullets.append(
            Para(
                "Not shown again: maxbench's variants that give the same numbers as the paper's here ({}).",
                ("; ".join(twins),),
            )
        )
    same = sorted({(r.same_as, f"{r.method} vs {r.baseline} {r.score}") for r in crow if r.same_as})
    for other in sorted({a for a, _ in same}):
        what = ", ".join(sorted({b for a, b in same if a == other}))
        s.bullets.append(Para("Shown under {} (the same rows): {}.", (other, what)))
    if claim.controls:
        runs = rep.evidence.runs
        s.tables.append(controls_table(claim, runs[0].run_dir.parent if runs else Path(".")))
    return s


def controls_table(claim: Claim, runs_root: Path) -> Table:
    """The claim's scores for every system of each control run."""
    body = []
    for run in claim.controls:
        doc = read_scores(runs_root / run) or {}
        for system, entry in (doc.get("systems") or {}).items():
            vals = [((entry.get("scores") or {}).get(s) or {}).get("value") for s in claim.scores]
            body.append((Cell(run, code=True), Cell(system, code=True), *(num(fmt.value(v)) for v in vals)))
    return Table(("control run", "system", *claim.scores), tuple(body), align="ll" + "r" * len(claim.scores))


def sensitivity_section(paper: Paper, cells: list[CellVerdict]) -> Section | None:
    """The claims of ``[protocol.sensitivity]`` judged again under each setting (another decoding,
    another lambda), and which of their conclusions survive every setting."""
    settings = list((paper.protocol.get("sensitivity") or {}).get("settings") or {})
    mine = [c for c in cells if SETTING_SEP in c.claim]
    if not settings:
        return None
    sens = paper.protocol.get("sensitivity") or {}
    sec = Section(str(sens.get("title") or "Sensitivity"), level=2)
    sec.paragraphs.append(
        Para(
            "{} Each setting replaces some roles of the claims {} with other systems (the rest keep the protocol's), "
            "or some of their scores with others of the same texts, on {} x {}, over every fold; each cell is "
            "judged by the same rules on its own interval, outside the counts and Holm's step.",
            (
                str(sens.get("description", "")),
                ", ".join(sens.get("claims", [])),
                ", ".join(sens.get("models", [])),
                ", ".join(sens.get("corpora", [])),
            ),
        )
    )
    for name, subs in (sens.get("settings") or {}).items():
        parts = [f"{r} = {v}" for r, v in subs.items() if r != SCORES_KEY]
        parts += [f"{a} → {b}" for a, b in (subs.get(SCORES_KEY) or {}).items()]
        sec.bullets.append(Para("{}: {}", (name, "; ".join(parts))))
    survive = []
    for cid in sens.get("claims", []):
        main = {(c.model, c.corpus, c.method): c for c in cells if c.claim == cid}
        changed, missing = [], []
        judged = [x for x in mine if x.claim.split(SETTING_SEP)[0] == cid]
        for c in judged:
            setting = c.claim.split(SETTING_SEP, 1)[1]
            base = main.get((c.model, c.corpus, c.method.split(SETTING_SEP)[0]))
            if base is None or any(f.startswith(FLAG_PARTIAL) for f in c.flags) or c.verdict == NOT_COMPARABLE:
                missing.append(setting)
            elif c.verdict != unadjusted(paper, base):
                changed.append(f"{setting}: {c.verdict}")
        if not judged:
            text = "not yet judged (no run)"
        elif missing:
            text = f"not yet judged under {', '.join(dict.fromkeys(missing))} (partial or no run)"
        elif changed:
            text = "changes under " + "; ".join(changed)
        else:  # the settings that apply to this claim (a setting of scores only to the claims with them)
            text = f"survives every setting ({len({c.claim.split(SETTING_SEP, 1)[1] for c in judged})})"
        changed_roles = {c.method.split(SETTING_SEP)[0] for c in judged}
        shown = [
            c
            for (model, corpus, method), c in main.items()
            if model in sens.get("models", [model])
            and corpus in sens.get("corpora", [corpus])
            and method in changed_roles
        ]
        verdicts = ", ".join(sorted({unadjusted(paper, c) for c in shown})) or "no cell"
        survive.append((Cell(cid), Cell(verdicts), Cell(text)))
    sec.tables.append(Table(("claim", "its verdict", "under the settings"), tuple(survive), align="lll"))
    if mine:
        sec.tables.append(cells_table(mine))
    return sec


def diagnostic_sections(rep: Report, by_id: dict[str, Claim]) -> list[Section]:
    """The cells kept out of the counts (the protocol's diagnostic roles and claims), their rows, and
    graphmax's Figure 2 trace where it was written."""
    paper = rep.paper
    diag = [c for c in rep.cells if c.diagnostic and SETTING_SEP not in c.claim]
    if not diag:
        return []
    d = Section("Diagnostic: " + (", ".join(paper.diagnostic_roles) or "kept out of the counts"), level=2)
    if paper.diagnostics:
        d.paragraphs.append(Para("{}", (paper.diagnostics,)))
    d.tables.append(cells_table(diag))
    drows = [
        r
        for r in rep.rows
        if r.diagnostic and kind_of(r.kind).in_rows_table and not r.identical_to and SETTING_SEP not in r.claim
    ]
    if drows:
        d.tables.append(rows_table(by_id, drows))
    out = [d]
    trace = rep.trace
    if trace:
        tr = Section("Figure 2: the trace of Algorithm 1 as printed", level=3)
        tr.paragraphs.append(Para("{}", (trace.get("description", ""),)))
        tr.paragraphs.append(Para("Written by {}.", (Code("scripts/graphmax_figure2_trace.py"),)))
        tr.tables.append(
            Table(
                ("t", "||x^{t+1} - x^t||_2", "stopping rule (< 1e-4) met"),
                tuple(
                    (num(str(p["t"])), num(f"{p['step_norm']:.3g}"), Cell("yes" if p["step_norm"] < 1e-4 else "no"))
                    for p in trace.get("steps", [])
                ),
                align="rrl",
            )
        )
        out.append(tr)
    return out


def heads_section(heads: dict) -> Section:
    """Each trained head's validation perplexity per epoch, where it is recorded."""
    h = Section("Trained heads", level=2)
    h.paragraphs.append(
        Para(
            "Each trained head's validation perplexity per epoch (epoch 0: the untrained head, its "
            "initialisation), where it is recorded: a committed copy of the head's fit meta under heads/<run>/, "
            "or the head's meta.json in the cache of the machine that rendered the report (by the sha256 the "
            "run's manifest records; a later rendering without that cache keeps the committed report's record), "
            "or the run's manifest. The verdict rules read this history. A head trained before fit metas were "
            "recorded has none; where a refit of its identity (the same options, data, budget and seed) under the "
            "current code is committed (heads/<run>/<head>-refit.json), its history is shown in the last column, "
            "with whether its sha256 is the run head's: it shows how that training goes, and the verdict rules do "
            "not read it."
        )
    )
    h.tables.append(
        Table(
            ("run", "system", "best epoch", "validation perplexity by epoch", "source", "refit of the same identity"),
            tuple(
                (
                    Cell(run, code=True),
                    Cell(system, code=True),
                    num("n/a" if rec["best_epoch"] is None else str(rec["best_epoch"])),
                    num(", ".join(f"{x['epoch']}: {x['valid_ppl']:.4g}" for x in rec["history"]) or "not recorded"),
                    Cell(rec["source"] or "not recorded"),
                    Cell(refit_text(rec.get("refit"))),
                )
                for (run, system), rec in sorted(heads.items())
            ),
            align="llrlll",
        )
    )
    return h


def refit_text(refit: dict | None) -> str:
    """One line for a head's refit under the current code (``evidence.head_refit``); "" without one."""
    if not refit:
        return ""
    bits = "the run head's bits" if refit["same"] else f"other bits (sha256 {str(refit['sha256'])[:12]}...)"
    epochs = ", ".join(f"{x['epoch']}: {x['valid_ppl']:.4g}" for x in refit["history"])
    return f"{epochs}; best epoch {refit['best_epoch']}; {bits}"


def runs_section(rep: Report) -> Section:
    """Every run used: its fitting corpus, size, wall time, the sha256 of its files and its status. A file
    absent from a run that generated nothing is "(not run)"; from one that did, "(missing)", and the run's
    status says why it is partial (never "complete" beside a missing file)."""
    runs = rep.evidence.runs
    s = Section("Runs used", level=2)
    cols = (
        "run",
        "fitting corpus",
        "prompts",
        "systems",
        "wall time (min)",
        "manifest sha256",
        "generations sha256",
        "status",
    )

    def absent(x: dict) -> str:  # a file a run lacks: all of it when nothing was generated, else lost
        return "(missing)" if x["generations_sha256"] else "(not run)"

    body = tuple(
        (
            Cell(x["run"], code=True),
            Cell(x["corpus"], code=True),
            num(str(x["prompts"])),
            num(str(x["systems"])),
            num(f"{x['wall_seconds'] / 60:.1f}" if x["wall_seconds"] else absent(x)),
            num(x["manifest_sha256"][:16] or absent(x)),
            num(x["generations_sha256"][:16] or absent(x)),
            Cell(rep.evidence.scores.partial(r) or "complete"),
        )
        for x, r in zip(run_table(runs), runs)
    )
    s.tables.append(Table(cols, body, align="llrrrlll"))
    return s


def sections(rep: Report) -> list[Section]:
    """The report's sections, in the order it reads (the flipped-attribute check and the plot are
    added by ``exports.write``)."""
    paper = rep.paper
    by_id = {c.id: c for c in with_settings(paper).claims}
    rules = Section("Verdict rules", level=2, paragraphs=[Para("{}", (rules_text(paper),))])
    dev = Section("Deviations and reading choices", level=2, bullets=deviations(paper))
    out = [head_section(rep), rules, verdicts_section(rep, by_id), dev]
    out += [claim_section(rep, claim) for claim in paper.claims if not claim.diagnostic]
    for ctrl in rep.controls:
        out += control_sections(ctrl)
    sens = sensitivity_section(paper, rep.cells)
    if sens is not None:
        out.append(sens)
    matched = matched_section(paper, rep.matched)
    if matched is not None:
        out.append(matched)
    out += diagnostic_sections(rep, by_id)
    if rep.heads:
        out.append(heads_section(rep.heads))
    if rep.adapters:
        out.append(adapters.section(rep.adapters))
    out.append(runs_section(rep))
    return out
