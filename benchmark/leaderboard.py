"""Registries of systems, and the leaderboard rendered from scored runs.

A registry is a TOML file (``benchmark/registries/<name>.toml`` or any path) naming a suite, a
fitting corpus, seeds, samples, the baseline and the systems as system strings. The
leaderboard reads ``scores.json`` (and the generations, for per-step statistics) of one or
more run directories and writes ``leaderboard.md``, ``.csv``, ``.html`` and PNG plots; it
never generates, so ``maxbench leaderboard RUN_DIR...`` re-renders without a model. Output is a
pure function of its inputs (no timestamps), so the same runs give byte-identical files.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import MaxbenchError

REGISTRY_DIR = Path(__file__).parent / "registries"
#: score columns in display order; scores not listed follow in their own order
PREFERRED = [
    "bleu-2",
    "bleu-3",
    "bleu-4",
    "bleu-5",
    "sacrebleu",
    "rouge-l-f",
    "meteor",
    "bertscore-f1",
    "ms-jaccard-2",
    "ms-jaccard-3",
    "ms-jaccard-4",
    "kld",
    "ppl",
    "ref-eps-ppl",
    "self-bleu-2",
    "self-bleu-3",
    "self-bleu-4",
    "self-bleu-5",
    "rep",
    "seq-rep-4",
    "distinct-1-corpus",
    "distinct-2-corpus",
    "distinct-3-corpus",
    "distinct-4-corpus",
    "uniq",
]
PLOT_FILES = ("tradeoff.png", "lambda.png", "steps.png")


@dataclass
class Registry:
    name: str
    suite: str
    systems: list  # [SystemSpec]
    corpus: str | None = None
    samples: int = 1
    seed: int = 1234
    batch_size: int = 16
    baseline: str | None = None
    metrics: list = field(default_factory=list)
    path: Path | None = None


def load_registry(name_or_path: str) -> Registry:
    from systems.registry import parse_system

    path = REGISTRY_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            known = ", ".join(p.stem for p in sorted(REGISTRY_DIR.glob("*.toml")))
            raise MaxbenchError(
                f"unknown registry '{name_or_path}'; built-in registries: {known} "
                f"(or give the path of a registry .toml file)"
            )
    try:
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MaxbenchError(f"registry {path} is malformed: {exc}") from None
    allowed = {"name", "suite", "corpus", "samples", "seed", "batch_size", "baseline", "metrics", "systems"}
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise MaxbenchError(f"registry {path}: unknown key '{unknown[0]}' (known: {', '.join(sorted(allowed))})")
    if not spec.get("systems") or not isinstance(spec["systems"], list):
        raise MaxbenchError(f"registry {path} needs a non-empty 'systems' list of system strings")
    systems = [parse_system(s) for s in spec["systems"]]
    for s in systems:
        s.build_layer()  # an unknown parameter fails here, before anything runs
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise MaxbenchError(f"registry {path} lists a system twice")
    baseline = spec.get("baseline")
    if baseline is not None:
        baseline = parse_system(baseline).name
        if baseline not in names:
            raise MaxbenchError(f"registry {path}: baseline '{baseline}' is not one of its systems")
    return Registry(
        name=spec.get("name", path.stem),
        suite=spec.get("suite", "food-reviews"),
        systems=systems,
        corpus=spec.get("corpus"),
        samples=int(spec.get("samples", 1)),
        seed=int(spec.get("seed", 1234)),
        batch_size=int(spec.get("batch_size", 16)),
        baseline=baseline,
        metrics=list(spec.get("metrics", [])),
        path=path,
    )


# ---------------------------------------------------------------- reading runs
def _load_runs(run_dirs: list[Path]) -> tuple[dict, dict, dict]:
    """systems -> score entries, systems -> comparison entries, systems -> per-step means."""
    scores, comps, steps, order = {}, {}, {}, []
    baseline = None
    for run_dir in run_dirs:
        path = Path(run_dir) / "scores.json"
        if not path.exists():
            raise MaxbenchError(f"{run_dir} has no scores.json; score it first (maxbench score {run_dir})")
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            raise MaxbenchError(f"{path} is not valid JSON; rescore the run (maxbench score {run_dir})") from None
        for system, entry in doc.get("systems", {}).items():
            if system in scores:
                continue
            order.append(system)
            scores[system] = entry["scores"]
        c = doc.get("comparisons") or {}
        baseline = baseline or c.get("baseline")
        for system, entry in c.get("systems", {}).items():
            comps.setdefault(system, entry)
        steps.update({k: v for k, v in _step_means(Path(run_dir)).items() if k not in steps})
    return {s: scores[s] for s in order}, {"baseline": baseline, "systems": comps}, steps


def _step_means(run_dir: Path, max_steps: int = 64) -> dict:
    from benchmark.runner import GENERATIONS, read_rows

    acc: dict = {}
    for row in read_rows(run_dir / GENERATIONS):
        st = row.get("stats") or {}
        a = acc.setdefault(row["system"], {})
        for key in ("entropy", "support"):
            vals = st.get(key) or []
            sums = a.setdefault(key, [[0.0, 0] for _ in range(max_steps)])
            for i, v in enumerate(vals[:max_steps]):
                if v is not None:
                    sums[i][0] += v
                    sums[i][1] += 1
    return {s: {k: [t / n for t, n in v if n] for k, v in a.items()} for s, a in acc.items()}


# ---------------------------------------------------------------- rendering
def _columns(scores: dict) -> list[str]:
    present = list(dict.fromkeys(k for entry in scores.values() for k in entry))
    return [c for c in PREFERRED if c in present] + [c for c in present if c not in PREFERRED]


def _fmt(v, col: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    scale = 100.0 if col not in ("ppl", "ref-eps-ppl", "ref-ppl", "kld", "uniq", "sacrebleu") else 1.0
    v = v * scale
    return f"{v:.0f}" if col == "uniq" else f"{v:.2f}"


def _best(scores: dict, col: str) -> set[str]:
    """The systems holding the best value of a column (all of them on a tie)."""
    vals = [(s, e[col]["value"]) for s, e in scores.items() if col in e and e[col]["value"] is not None]
    if not vals:
        return set()
    hib = next(e[col]["higher_is_better"] for e in scores.values() if col in e)
    top = (max if hib else min)(v for _, v in vals)
    return {s for s, v in vals if v == top}


def _stars(p) -> str:
    if p is None:
        return ""
    return "**" if p < 0.01 else "*" if p < 0.05 else ""


def _table(scores: dict, comps: dict) -> tuple[list[str], list[list[dict]]]:
    cols = _columns(scores)
    best = {c: _best(scores, c) for c in cols}
    rows = []
    for system, entry in scores.items():
        cells = []
        for c in cols:
            e = entry.get(c)
            if e is None:
                cells.append({"text": "", "best": False})
                continue
            p = comps["systems"].get(system, {}).get(c, {}).get("p_value")
            ci = "" if e["ci_low"] is None else f" [{_fmt(e['ci_low'], c)}, {_fmt(e['ci_high'], c)}]"
            cells.append(
                {"value": _fmt(e["value"], c), "ci": ci, "stars": _stars(p), "best": system in best[c], "p": p}
            )
        rows.append(cells)
    return cols, rows


def _title(run_dirs: list[Path]) -> str:
    """Named after the first run's registry and suite, so a re-render gives the same page."""
    try:
        ident = json.loads((Path(run_dirs[0]) / "manifest.json").read_text())["identity"]
        return f"maxbench leaderboard: {ident['registry'] or 'generate'} on {ident['suite']['name']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "maxbench leaderboard"


def render(run_dirs: list[Path], out_dir: Path) -> list[Path]:
    from benchmark.runner import atomic_write

    title = _title(run_dirs)
    scores, comps, steps = _load_runs([Path(r) for r in run_dirs])
    if not scores:
        raise MaxbenchError("the runs hold no scored systems")
    out_dir = Path(out_dir)
    (out_dir / "plots").mkdir(parents=True, exist_ok=True)
    cols, rows = _table(scores, comps)
    plots = _plots(scores, steps, out_dir / "plots")
    systems = list(scores)
    baseline = comps.get("baseline")
    note = (
        "Scores x100 except sacreBLEU, PPL, KLD and Uniq; [95% bootstrap interval over prompts]; "
        "bold = best in column (by the metric's direction); * p < 0.05, ** p < 0.01: paired permutation "
        f"test over prompts against the baseline `{baseline}`."
    )
    # markdown
    md = [f"# {title}", "", note, "", "| system | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for system, cells in zip(systems, rows):
        md.append(
            f"| `{system}` | "
            + " | ".join(
                (f"**{c['value']}**" if c["best"] else c["value"]) + c["stars"] + c["ci"] if "value" in c else ""
                for c in cells
            )
            + " |"
        )
    md += ["", "Sources: " + ", ".join(f"`{Path(r).as_posix()}`" for r in run_dirs), ""]
    md += [f"![{p.stem}](plots/{p.name})" for p in plots] + [""]
    written = [out_dir / "leaderboard.md"]
    atomic_write(written[0], "\n".join(md))
    # csv
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["system"] + [f"{c}{suffix}" for c in cols for suffix in ("", "_ci_low", "_ci_high", "_p_vs_baseline")])
    for system in systems:
        line = [system]
        for c in cols:
            e = scores[system].get(c) or {}
            p = comps["systems"].get(system, {}).get(c, {}).get("p_value")
            line += [_num(e.get("value")), _num(e.get("ci_low")), _num(e.get("ci_high")), _num(p)]
        w.writerow(line)
    written.append(out_dir / "leaderboard.csv")
    atomic_write(written[-1], buf.getvalue())
    # html (self-contained; every name escaped)
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = []
    for system, cells in zip(systems, rows):
        tds = "".join(
            f'<td class="{"best" if c["best"] else ""}">{esc(c["value"])}{esc(c["stars"])}'
            f"<small>{esc(c['ci'])}</small></td>"
            if "value" in c
            else "<td></td>"
            for c in cells
        )
        body.append(f'<tr><th scope="row"><code>{esc(system)}</code></th>{tds}</tr>')
    imgs = "".join(
        f'<figure><img alt="{esc(p.stem)}" src="data:image/png;base64,'
        f'{base64.b64encode(p.read_bytes()).decode()}"></figure>'
        for p in plots
    )
    page = (
        f'<!doctype html><html lang="en"><meta charset="utf-8"><title>{esc(title)}</title><style>'
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:4px 6px;text-align:right;white-space:nowrap}td small{color:#666;display:block}"
        ".best{font-weight:bold;background:#eef6ee}img{max-width:48em}</style>"
        f"<h1>{esc(title)}</h1><p>{esc(note)}</p><table><thead><tr><th>system</th>{head}</tr></thead><tbody>"
        + "".join(body)
        + f"</tbody></table>{imgs}</html>\n"
    )
    written.append(out_dir / "leaderboard.html")
    atomic_write(written[-1], page)
    return written + plots


def _num(v) -> str:
    # 12 significant digits: corpus-level n-gram scores sum floats in hash order, so their last
    # bits can differ between processes; 12 digits are far below any interval's width.
    return "" if v is None else f"{float(v):.12g}"


def _plots(scores: dict, steps: dict, plot_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from systems.registry import parse_system

    plt.rcParams.update({"svg.hashsalt": "maxbench", "figure.dpi": 100})
    meta = {"Software": None}  # no version string or date: the same data gives the same bytes
    written = []
    for stale in PLOT_FILES:
        (plot_dir / stale).unlink(missing_ok=True)

    def save(fig, name):
        path = plot_dir / name
        fig.savefig(path, format="png", metadata=meta, bbox_inches="tight")
        plt.close(fig)
        written.append(path)

    def short(system):
        spec = parse_system(system)
        return spec.layer + (f"({','.join(f'{k}={v}' for k, v in spec.params)})" if spec.params else "")

    pts = [
        (s, e["bleu-4"]["value"], e["self-bleu-4"]["value"])
        for s, e in scores.items()
        if e.get("bleu-4", {}).get("value") is not None and e.get("self-bleu-4", {}).get("value") is not None
    ]
    if pts:
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for s, b, sb in pts:
            ax.scatter(-100 * sb, 100 * b)
            ax.annotate(short(s), (-100 * sb, 100 * b), fontsize=8, xytext=(4, 4), textcoords="offset points")
        ax.set_xlabel("negative Self-BLEU-4 (diversity, higher is more diverse)")
        ax.set_ylabel("BLEU-4 vs the reference set (quality)")
        ax.set_title("Quality-diversity trade-off")
        ax.grid(alpha=0.3)
        save(fig, "tradeoff.png")
    sweep = []
    for s, e in scores.items():
        spec = parse_system(s)
        lam = dict(spec.params).get("lam") if spec.layer == "graphmax" else None
        if lam is not None and dict(spec.params).get("solver", "exact") == "exact":
            sweep.append((float(lam), e))
    if len({lam for lam, _ in sweep}) >= 2:
        sweep.sort(key=lambda x: x[0])
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        lams = [lam for lam, _ in sweep]
        for n in (2, 3, 4, 5):
            ys = [100 * (e.get(f"bleu-{n}", {}).get("value") or float("nan")) for _, e in sweep]
            a1.plot(lams, ys, marker="o", label=f"BLEU-{n}")
        a2.plot(lams, [e.get("ppl", {}).get("value") or float("nan") for _, e in sweep], marker="o", color="C4")
        for ax in (a1, a2):
            ax.set_xscale("log")
            ax.set_xlabel("lambda")
            ax.grid(alpha=0.3)
        a1.set_ylabel("BLEU (x100)")
        a1.legend()
        a2.set_ylabel("PPL of generations (evaluator LM)")
        fig.suptitle("graphmax: lambda sweep")
        save(fig, "lambda.png")
    if steps:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        for s, st in steps.items():
            if st.get("entropy"):
                a1.plot(st["entropy"], label=short(s))
            if st.get("support"):
                a2.plot(st["support"], label=short(s))
        a1.set_ylabel("mean entropy (nats)")
        a2.set_ylabel("mean support size (tokens with p > 0)")
        a2.set_yscale("log")
        for ax in (a1, a2):
            ax.set_xlabel("decoding step")
            ax.grid(alpha=0.3)
        a1.legend(fontsize=7)
        fig.suptitle("Per-step distribution statistics")
        save(fig, "steps.png")
    return written


def registry_sha256(reg: Registry) -> str:
    return hashlib.sha256(reg.path.read_bytes()).hexdigest() if reg.path else ""
