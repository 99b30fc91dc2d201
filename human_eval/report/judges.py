"""The judges' report: each model rater of a study against its people, and the estimates that
combine both (``maxbench report --study ID --judges``), written beside the human report as
judges.md, judges.html and judges.json. The human report itself never includes a judge.

The numbers are ``maxbench.human_eval.analysis.judges``'s; this module reads them out of the
database (the people's ratings through the study export, so exclusions by flag are the human
report's) and renders them. ``human_share`` keeps the people's ratings of a seeded random share
of the prompts only, the other prompts counting as judged by the judge alone: what PPI would
give with fewer people, on the same study. PPI's guarantee assumes exactly this: the
people's prompts are a random sample of the study's prompts.
"""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from pathlib import Path

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from maxbench.document import Cell, Para, Section, Table, num
from maxbench.errors import MaxbenchError
from maxbench.human_eval.analysis import judges as stats
from maxbench.human_eval.report.render import REPORT_FORMAT_VERSION, REPORT_PACKAGES, fmt, fmt_p, write_documents
from maxbench.human_eval.store.models import Annotator, Item, Judgment, StudySystem
from maxbench.human_eval.studies.create import find_study
from maxbench.human_eval.studies.export import best_worst_rows, long_format_rows, pair_judgment_rows, study_baseline
from maxbench.human_eval.studies.gold import GOLD_DEGRADED, GOLD_REFERENCE, is_gold
from maxbench.human_eval.studies.rubrics import Rubric
from maxbench.provenance import versions

JUDGE_FILES = ("judges.md", "judges.html", "judges.json")
BEST_WORST_ESTIMAND = (
    " The counting score is the mean over a system's texts of each text's (times best - times worst) / times "
    "shown: the human report's score when every text is shown equally often. The judge's value of a text is "
    "p(best) - p(worst) at its place, averaged over the tuples showing it."
)


def _clean(value):
    """JSON without NaN: undefined numbers are null."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return value


def _mean(values) -> float:
    """The mean, exactly rounded (``math.fsum``): the same whatever order the judgments are read in
    (a database rebuilt from saved judgments gives the same report)."""
    values = list(values)
    return math.fsum(values) / len(values)


def _words(text: str) -> int:
    return len(text.split())


def judge_data(
    session: Session,
    study_id: str,
    exclude_flags: tuple[str, ...] = ("attention_failed",),
    human_share: float | None = None,
    seed: int = 0,
) -> dict:
    """Every judge of the study against its people (module docstring); plain data for JSON."""
    study = find_study(session, study_id)
    rubric = Rubric.from_json(study.rubric)
    raters = session.scalars(
        select(Annotator).where(Annotator.study_id == study.id, Annotator.kind == "model").order_by(Annotator.label)
    ).all()
    if not raters:
        raise MaxbenchError(
            f"study {study.slug} has no judge yet: run `maxbench judge {study.slug} --judge MODEL` first"
        )
    items = {
        i.id: (i.code, name, i.text)
        for i, name in session.execute(
            select(Item, StudySystem.name)
            .join(StudySystem, Item.system_id == StudySystem.id)
            .where(Item.study_id == study.id)
        )
    }
    by_key = {(code, name): i for i, (code, name, _) in items.items()}
    systems = sorted({name for _, name, _ in items.values() if not is_gold(name)})
    baseline = study_baseline(session, study.slug)
    baseline = baseline if baseline in systems else systems[0]
    prompts = sorted({code for code, name, _ in items.values() if not is_gold(name)})
    kept = set(prompts)
    if human_share is not None:
        kept = set(random.Random(seed).sample(prompts, max(2, round(human_share * len(prompts)))))

    def flagged(row) -> bool:
        return any(f in exclude_flags for f in (row.get("flags") or "").split(";") if f)

    data = {
        "study": study.slug,
        "title": study.title,
        "judgment": rubric.kind,
        "baseline": baseline,
        "prompts": len(prompts),
        "human_prompts": len(kept),
        "human_share": human_share,
        "judges": [],
    }
    for rater in raters:
        rows = session.scalars(select(Judgment).where(Judgment.annotator_id == rater.id)).all()
        entry = {
            "rater": rater.label,
            "identity": rater.judge,
            "judgments": len(rows),
            "scoring": sorted({r.scoring for r in rows}),
            "label_mass": _mean([r.label_mass for r in rows]) if rows else None,
            "criteria": {},
            "warnings": [],
        }
        if rubric.kind in ("likert", "direct"):
            _scale(entry, rubric, rows, items, long_format_rows(session, study.slug), flagged, baseline, kept)
        elif rubric.kind == "pairwise":
            people = [r for r in pair_judgment_rows(session, study.slug) if not flagged(r)]
            _pairwise(entry, rubric, rows, items, by_key, people, baseline, kept)
        else:
            people = [r for r in best_worst_rows(session, study.slug) if not flagged(r)]
            _best_worst(entry, rubric, rows, items, by_key, people, baseline, kept)
        data["judges"].append(entry)
    return _clean(data)


def _scale(entry, rubric, rows, items, human_rows, flagged, baseline, kept) -> None:
    human: dict[str, dict[tuple, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r in human_rows:
        if not flagged(r):
            human[r["criterion"]][(r["item"], r["system"])].append(int(r["value"]))
    for c in rubric.criteria:
        mine = [r for r in rows if r.criterion == c.name]
        expected = {items[r.item_id][:2]: r.expected for r in mine if not is_gold(items[r.item_id][1])}
        argmax = {items[r.item_id][:2]: r.value for r in mine if not is_gold(items[r.item_id][1])}
        agreement = stats.scale_agreement(human[c.name], expected, argmax, rubric.values)
        means = {u: _mean(v) for u, v in human[c.name].items() if u[0] in kept}
        gold = defaultdict(dict)
        for r in mine:
            code, name, _ = items[r.item_id]
            if is_gold(name):
                gold[code][name] = r.expected
        judged = [g for g in gold.values() if len(g) == 2]
        correct = sum(g[GOLD_REFERENCE] > g[GOLD_DEGRADED] for g in judged)
        entry["criteria"][c.name] = {
            "agreement": agreement,
            "gold": {"n": len(judged), "correct": correct} if judged else None,
            "ppi": stats.ppi_table(means, expected, baseline, (min(rubric.values), max(rubric.values))),
        }
        _warn_scale(entry, c.name, agreement)


def _warn_scale(entry, criterion, agreement) -> None:
    r = agreement.get("pearson")
    if agreement["items"] and (r is None or r <= 0.1):
        entry["warnings"].append(
            f"{criterion}: the judge does not follow the people (Pearson r = {fmt(r)} over {agreement['items']} "
            "texts): at or below chance; PPI gives it a weight near 0 and the interval stays the people's"
        )


def _pair_units(rows, items):
    units = defaultdict(dict)
    for r in rows:
        units[r.criterion][tuple(r.items)] = (r.value, r.probabilities)
    return units


def _pairwise(entry, rubric, rows, items, by_key, people, baseline, kept) -> None:
    units = _pair_units(rows, items)
    for c in rubric.criteria:
        mine = units.get(c.name, {})
        plain = {k: v for k, v in mine.items() if not any(is_gold(items[i][1]) for i in k)}
        gold_units = {k: v for k, v in mine.items() if all(is_gold(items[i][1]) for i in k)}
        seen = [
            ((by_key[(r["item"], r["left"])], by_key[(r["item"], r["right"])]), int(r["value"]))
            for r in people
            if r["criterion"] == c.name
        ]
        behaviour = stats.pair_behaviour(plain)
        agreement = stats.pairwise_agreement(seen, plain)
        # a system's preference on a prompt: people's share of wins (ties half), the judge's mean over
        # both orders of p(wins) + p(tie)/2: the order averages out the judge's position bias
        h_pref, j_pref = defaultdict(list), defaultdict(list)
        lc_h, lc_j = defaultdict(lambda: ([], [])), defaultdict(lambda: ([], []))
        for (a, b), v in seen:
            for me, other, win in ((a, b, 1), (b, a, 2)):
                code, s, text = items[me]
                o = 1.0 if v == win else 0.5 if v == 0 else 0.0
                h_pref[(code, s, items[other][1])].append(o)
                if items[other][1] == baseline:
                    lc_h[s][0].append(o)
                    lc_h[s][1].append(_words(text) - _words(items[other][2]))
        for (a, b), (v, p) in plain.items():
            for me, other, side, win in ((a, b, "A", 1), (b, a, "B", 2)):
                code, s, text = items[me]
                j_pref[(code, s, items[other][1])].append(p.get(side, 0.0) + p.get("T", 0.0) / 2)
                if items[other][1] == baseline:
                    lc_j[s][0].append(1.0 if v == win else 0.5 if v == 0 else 0.0)
                    lc_j[s][1].append(_words(text) - _words(items[other][2]))
        strength_h = _strength(h_pref)
        strength_j = _strength(j_pref)
        vs_base_h = {(code, s): _mean(v) for (code, s, o), v in h_pref.items() if o == baseline}
        vs_base_j = {(code, s): _mean(v) for (code, s, o), v in j_pref.items() if o == baseline}
        gold = [
            (v == 1) == (items[a][1] == GOLD_REFERENCE) and v != 0
            for (a, b), (v, _) in gold_units.items()
            if {items[a][1], items[b][1]} == {GOLD_REFERENCE, GOLD_DEGRADED}
        ]
        entry["criteria"][c.name] = {
            "agreement": agreement | {"ranking": stats.ranking_tau(strength_h, strength_j)},
            "behaviour": behaviour,
            "length_controlled": {
                s: {
                    "people": stats.length_controlled_win_rate(*lc_h[s]),
                    "judge": stats.length_controlled_win_rate(*lc_j[s]),
                }
                for s in sorted(set(lc_h) | set(lc_j))
            },
            "gold": {"n": len(gold), "correct": sum(gold)} if gold else None,
            "ppi": stats.ppi_table({u: v for u, v in vs_base_h.items() if u[0] in kept}, vs_base_j, None, (0.0, 1.0)),
        }
        chance = agreement["chance"]
        if agreement["agreement"] is not None and agreement["agreement"] <= chance:
            entry["warnings"].append(
                f"{c.name}: the judge repeats {fmt(agreement['agreement'])} of the people's choices over "
                f"{agreement['judgments']} judgments, at or below chance ({fmt(chance)}: two raters answering "
                "independently with these shares of each answer)"
            )


def _strength(prefs) -> dict[str, float]:
    per = defaultdict(list)
    for (_, s, _), v in prefs.items():
        per[s] += v
    return {s: _mean(v) for s, v in per.items()}


def _best_worst(entry, rubric, rows, items, by_key, people, baseline, kept) -> None:
    """Agreement on the chosen best and worst text, and PPI++ of each system's counting score.

    The counting score of the human report, (times best - times worst) / times shown, is the
    mean over a system's texts of each text's own (best - worst) / shown when every text is shown
    equally often (as the study's design shows them); so the estimand here is that mean over
    texts: the people's value of a text is the mean over the pages showing it of 1[best] -
    1[worst], the judge's the mean over the tuples showing it of p(best = its place) - p(worst =
    its place), in [-1, 1] both."""
    mine = {(tuple(r.items), r.criterion): r.value for r in rows}
    for c in rubric.criteria:
        same = {"best": [], "worst": []}
        people_text = defaultdict(list)
        for r in people:
            if r["criterion"] != c.name:
                continue
            shown_systems = r["shown"].split(";")
            shown = tuple(by_key[(r["item"], s)] for s in shown_systems)
            for side in same:
                judged = mine.get((shown, f"{c.name}_{side}"))
                if judged is not None:  # (the people's place, the judge's place)
                    same[side].append((shown_systems.index(r[side]) + 1, judged))
            for s in shown_systems:
                if not is_gold(s):
                    people_text[(r["item"], s)].append(float(s == r["best"]) - float(s == r["worst"]))
        judge_text = defaultdict(list)
        probabilities = {(tuple(r.items), r.criterion): r.probabilities for r in rows}
        for (shown, criterion), best in probabilities.items():
            if criterion != f"{c.name}_best" or (shown, f"{c.name}_worst") not in probabilities:
                continue
            worst = probabilities[(shown, f"{c.name}_worst")]
            for place, item in enumerate(shown, 1):
                code, s, _ = items[item]
                if not is_gold(s):
                    judge_text[(code, s)].append(best.get(str(place), 0.0) - worst.get(str(place), 0.0))
        human = {u: _mean(v) for u, v in people_text.items()}
        judge = {u: _mean(v) for u, v in judge_text.items()}
        per_system_h, per_system_j = defaultdict(list), defaultdict(list)
        for (_, s), v in human.items():
            per_system_h[s].append(v)
        for (_, s), v in judge.items():
            per_system_j[s].append(v)
        tau = stats.ranking_tau(
            {s: _mean(v) for s, v in per_system_h.items()},
            {s: _mean(v) for s, v in per_system_j.items()},
        )
        agreement = {
            side: {
                "judgments": len(v),
                "agreement": sum(h == j for h, j in v) / len(v) if v else None,
                "chance": stats.chance_agreement(v),
            }
            for side, v in same.items()
        }
        entry["criteria"][c.name] = {
            "agreement": agreement | {"ranking": tau},
            "ppi": stats.ppi_table({u: v for u, v in human.items() if u[0] in kept}, judge, baseline, (-1.0, 1.0)),
        }
        for side, a in agreement.items():
            if a["agreement"] is not None and a["agreement"] <= a["chance"]:
                entry["warnings"].append(
                    f"{c.name}: the judge picks the people's {side} text in {fmt(a['agreement'])} of "
                    f"{a['judgments']} judgments, at or below chance ({fmt(a['chance'])}: two raters choosing "
                    "places independently with these shares)"
                )


# --------------------------------------------------------------------------- rendering


def _est(e: dict | None) -> str:
    if not e:
        return "-"
    return f"{fmt(e['estimate'])} [{fmt(e['low'])}, {fmt(e['high'])}]"


def _width_ratio(v: dict) -> str:
    """How much narrower PPI's interval is than the people's (1.00: no gain): the ratio of their
    standard errors, which is the ratio of the intervals' widths before either is clipped to the scale."""
    people, ppi = v["people"].get("se"), v["ppi"].get("se")
    return fmt(ppi / people) if people and ppi is not None and math.isfinite(ppi / people) else "-"


def judge_sections(data: dict) -> list[Section]:
    intro = Section(f"Judges of study {data['study']} ({data['judgment']})", level=1)
    intro.paragraphs.append(
        Para(
            "Study title: {}. Model raters (judges) against the study's raters (a scripted study's raters are "
            "scripts: agreement there is agreement with a script). Judges are kept out of the human report; "
            "here each is measured on the texts both rated, and PPI++ combines the people's ratings of "
            "{} of {} prompts with the judge's scores of the rest (valid when those prompts are a random "
            "sample). Baseline: {}.",
            (data["title"], str(data["human_prompts"]), str(data["prompts"]), data["baseline"]),
        )
    )
    sections = [intro]
    for j in data["judges"]:
        ident = j["identity"] or {}
        s = Section(f"Judge {j['rater']}")
        s.paragraphs.append(
            Para(
                "Model {}, weights {}, template {}, framing {}; {} judgments, labels scored as {}; mean "
                "probability on the labels {}.",
                (
                    str(ident.get("model")),
                    str(ident.get("weights", ""))[:12],
                    str(ident.get("template", ""))[:12],
                    str((ident.get("decoding") or {}).get("framing")),
                    str(j["judgments"]),
                    ", ".join(j["scoring"]) or "-",
                    fmt(j["label_mass"], 3),
                ),
            )
        )
        for w in j["warnings"]:
            s.paragraphs.append(Para("Warning: {}", (w,)))
        for name, c in j["criteria"].items():
            s.paragraphs.append(_summary(data["judgment"], name, c))
            s.tables += _criterion_tables(data, name, c)
        sections.append(s)
    if data.get("throughput"):
        sections.append(_throughput_section(data["throughput"]))
    return sections


def _summary(judgment: str, name: str, c: dict) -> Para:
    """One line per criterion: how close the judge is to the people, and what PPI gains with it."""
    a = c["agreement"]
    if judgment in ("likert", "direct"):
        close = f"has Pearson r {fmt(a['pearson'])} with the people's mean over {a['items']} texts"
    elif judgment == "pairwise":
        close = f"repeats {fmt(a['agreement'])} of the people's {a['judgments']} choices (chance {fmt(a['chance'])})"
    else:
        close = (
            f"picks the people's best text in {fmt(a['best']['agreement'])} (chance {fmt(a['best']['chance'])}) "
            f"and worst in {fmt(a['worst']['agreement'])} (chance {fmt(a['worst']['chance'])}) of "
            f"{a['best']['judgments']} judgments"
        )
    close += f"; system ranking tau {fmt(a['ranking']['tau'])}"
    ppi = (c.get("ppi") or {}).get("systems") or {}
    ratios = [  # standard errors: the widths before clipping to the scale (_width_ratio)
        v["ppi"]["se"] / v["people"]["se"]
        for v in ppi.values()
        if v["people"].get("se")
        and v["ppi"].get("se") is not None
        and math.isfinite(v["ppi"]["se"] / v["people"]["se"])
    ]
    if not ratios:
        return Para("Summary, {}: the judge {}.", (name, close))
    lam = sorted(v["ppi"]["lambda"] for v in ppi.values())
    return Para(
        "Summary, {}: the judge {}. PPI++'s intervals are {} as wide as the people's alone (median over {} "
        "systems; lambda {} to {}, 0 meaning the judge is not used).",
        (name, close, fmt(float(np.median(ratios))), str(len(ratios)), fmt(lam[0]), fmt(lam[-1])),
    )


def _throughput_section(entries: list[dict]) -> Section:
    s = Section("Judging throughput")
    s.paragraphs.append(
        Para(
            "From judging.json beside this report (written by whoever judged, e.g. scripts/scripted_study.py): "
            "units judged in that session, model loading excluded, with the machine's load average (1, 5, 15 "
            "minutes) before and after."
        )
    )
    s.tables.append(
        Table(
            (
                "Judge",
                "Backend",
                "Device",
                "Threads",
                "Units judged",
                "Seconds",
                "Units/s",
                "Load before",
                "Load after",
            ),
            tuple(
                (
                    Cell(str(e.get("rater")), code=True),
                    Cell(str(e.get("backend"))),
                    Cell(str(e.get("device"))),
                    num(str(e.get("threads"))),
                    num(f"{e.get('judged_now')} of {e.get('units')}"),
                    num(fmt(e.get("seconds"))),
                    num(fmt(e.get("units_per_second"), 3)),
                    num(" ".join(fmt(x) for x in e.get("load_average_before") or [])),
                    num(" ".join(fmt(x) for x in e.get("load_average_after") or [])),
                )
                for e in entries
            ),
        )
    )
    return s


def _criterion_tables(data: dict, name: str, c: dict) -> list[Table]:
    tables = []
    a = c["agreement"]
    if data["judgment"] in ("likert", "direct"):
        tables.append(
            Table(
                ("Criterion", "Texts", "alpha people", "alpha people+judge", "Pearson r", "Spearman", "tau ranking"),
                (
                    (
                        Cell(name),
                        num(str(a["items"])),
                        num(fmt(a["alpha_people"])),
                        num(fmt(a["alpha_people_and_judge"])),
                        num(fmt(a["pearson"])),
                        num(fmt(a["spearman"])),
                        num(f"{fmt(a['ranking']['tau'])} ({a['ranking']['systems']} systems)"),
                    ),
                ),
            )
        )
    elif data["judgment"] == "pairwise":
        b = c["behaviour"]
        tables.append(
            Table(
                (
                    "Criterion",
                    "People's judgments",
                    "Agreement (chance)",
                    "tau ranking",
                    "Order consistency",
                    "Position bias",
                ),
                (
                    (
                        Cell(name),
                        num(str(a["judgments"])),
                        num(f"{fmt(a['agreement'])} ({fmt(a['chance'])})"),
                        num(f"{fmt(a['ranking']['tau'])} ({a['ranking']['systems']} systems)"),
                        num(f"{fmt(b['order_consistency'])} ({b['pairs_both_orders']} pairs)"),
                        num(fmt(b["position_bias"], 3)),
                    ),
                ),
            )
        )
        rows = tuple(
            (
                Cell(s, code=True),
                num(fmt(v["people"]["win_rate"])),
                num(fmt(v["people"]["lc_win_rate"])),
                num(fmt(v["judge"]["win_rate"])),
                num(fmt(v["judge"]["lc_win_rate"])),
            )
            for s, v in c["length_controlled"].items()
        )
        if rows:
            tables.append(
                Table(
                    ("System vs baseline", "People win rate", "People LC", "Judge win rate", "Judge LC"),
                    rows,
                    caption=Para("Length-controlled (LC) win rates: the GLM's win rate at equal length."),
                )
            )
    else:
        tables.append(
            Table(
                ("Criterion", "Best: agreement (chance; n)", "Worst: agreement (chance; n)", "tau ranking"),
                (
                    (
                        Cell(name),
                        num(f"{fmt(a['best']['agreement'])} ({fmt(a['best']['chance'])}; {a['best']['judgments']})"),
                        num(f"{fmt(a['worst']['agreement'])} ({fmt(a['worst']['chance'])}; {a['worst']['judgments']})"),
                        num(f"{fmt(a['ranking']['tau'])} ({a['ranking']['systems']} systems)"),
                    ),
                ),
            )
        )
    if c.get("gold"):
        g = c["gold"]
        tables.append(Table(("Criterion", "Gold accuracy"), ((Cell(name), num(f"{g['correct']}/{g['n']}")),)))
    ppi = c.get("ppi")
    if ppi and ppi["systems"]:
        what = {"pairwise": "win rate against the baseline", "best-worst": "counting score"}.get(
            data["judgment"], "mean rating"
        )
        tables.append(
            Table(
                (
                    "System",
                    f"People: {what} [95%]",
                    "PPI++ [95%]",
                    "width PPI/people",
                    "lambda",
                    "people units",
                    "judge-only units",
                ),
                tuple(
                    (
                        Cell(s, code=True),
                        num(_est(v["people"])),
                        num(_est(v["ppi"])),
                        num(_width_ratio(v)),
                        num(fmt(v["ppi"]["lambda"])),
                        num(str(v["ppi"]["n"])),
                        num(str(v["ppi"]["N"])),
                    )
                    for s, v in ppi["systems"].items()
                ),
                caption=Para(
                    "Criterion {}.{} Intervals: normal, clipped to the scale's range where an end passed it; "
                    "width PPI/people: the ratio of the standard errors.",
                    (name, BEST_WORST_ESTIMAND if data["judgment"] == "best-worst" else ""),
                ),
            )
        )
    if ppi and ppi.get("differences"):
        tables.append(
            Table(
                ("System - baseline", "People [95%]", "p (Holm)", "PPI++ [95%]", "p (Holm)"),
                tuple(
                    (
                        Cell(s, code=True),
                        num(_est(v["people"])),
                        num(fmt_p(v["people"].get("p_holm"))),
                        num(_est(v["ppi"])),
                        num(fmt_p(v["ppi"].get("p_holm"))),
                    )
                    for s, v in ppi["differences"].items()
                ),
                caption=Para(
                    "Criterion {}: differences against the baseline over prompts, paired; intervals clipped to "
                    "the range a difference can take.",
                    (name,),
                ),
            )
        )
    return tables


def write_judges_report(data: dict, folder: Path) -> None:
    """judges.md/.html/.json in ``folder``; a ``judging.json`` there (a list of judging sessions:
    rater, backend, device, threads, units, judged_now, seconds, units_per_second and the load
    averages before and after) is shown as the judging throughput."""
    measured = folder / "judging.json"
    if measured.is_file():
        try:
            data = data | {"throughput": json.loads(measured.read_text(encoding="utf-8"))}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise MaxbenchError(f"{measured} cannot be read as JSON ({exc}): fix or remove it") from None
    payload = {"format": REPORT_FORMAT_VERSION, "versions": versions(REPORT_PACKAGES), **data}
    write_documents(folder, judge_sections(data), payload, stem="judges")
