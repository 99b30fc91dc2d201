"""The leaderboard's PNG plots (``plots/``): quality against diversity, MAUVE against diversity,
graphmax's lambda sweep and the per-step distribution statistics. A plot is written only where its
scores are there; every file is a pure function of the rows (no version string or date), so the same
runs give the same bytes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from maxbench.fileio import atomic_open

if TYPE_CHECKING:
    from maxbench.benchmark.present.leaderboard import Row

PLOT_FILES = ("tradeoff.png", "mauve-diversity.png", "lambda.png", "steps.png")


def label_lifts(
    xy: list[tuple[float, float]], x_span: float, y_span: float, height_pt: float, line_pt: float = 11.0
) -> list[float]:
    """Vertical offsets (points) that keep point labels from printing over each other: walking the
    points from the bottom up, a label whose point lies close to one already placed (within 30% of
    the x axis, about a label's width, and one label line) is lifted one line above it. ``x_span`` and
    ``y_span`` are the axes' data ranges and ``height_pt`` their height in points."""
    line = line_pt / height_pt * y_span  # one label line in data units
    lifts = [0.0] * len(xy)
    placed: list[tuple[float, float]] = []  # (x, the label's y in data units)
    for i in sorted(range(len(xy)), key=lambda i: (xy[i][1], xy[i][0])):
        x, y = xy[i]
        top, moved = y, True
        while moved:  # each lift may meet another label placed earlier: repeat until none is hit
            moved = False
            for px, py in placed:
                if abs(px - x) < 0.3 * x_span and py - line < top < py + line:
                    top, moved = py + line, True
        lifts[i] = (top - y) / line * line_pt
        placed.append((x, top))
    return lifts


def write_plots(rows: list[Row], plot_dir: Path) -> list[Path]:
    """Write the plots that ``rows``' scores allow into ``plot_dir`` (removing stale ones); returns them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from maxbench.systems.system_strings import parse_system

    scores = {row.label: row.scores for row in rows}
    system_of = {row.label: row.system for row in rows}
    label_of = {(row.run, row.system): row.label for row in rows}
    steps: dict = {}
    for run in dict.fromkeys(row.run for row in rows):
        for system, st in run.steps.items():
            steps.setdefault(label_of.get((run, system), system), st)
    plt.rcParams.update({"svg.hashsalt": "maxbench", "figure.dpi": 100})
    meta = {"Software": None}  # no version string or date: the same data gives the same bytes
    written = []
    for stale in PLOT_FILES:
        (plot_dir / stale).unlink(missing_ok=True)

    def save(fig, name):
        path = plot_dir / name
        with atomic_open(path) as f:
            fig.savefig(f, format="png", metadata=meta, bbox_inches="tight")
        plt.close(fig)
        written.append(path)

    decodings = {parse_system(row.system).decoding.label for row in rows}

    def short(label):
        system = system_of.get(label, label)
        spec = parse_system(system)
        name = spec.layer + (f"({','.join(f'{k}={v}' for k, v in spec.params)})" if spec.params else "")
        name += f" {spec.decoding.label}" if len(decodings) > 1 else ""  # rows that differ in decoding say how
        return name + label[len(system) :]  # a row's run, where one system appears in several runs

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
    pts = [
        (s, e["diversity"], e["mauve"])
        for s, e in scores.items()
        if e.get("diversity", {}).get("value") is not None and e.get("mauve", {}).get("value") is not None
    ]
    if pts:
        fig, ax = plt.subplots(figsize=(6, 4.5))

        def bar(e):  # the interval around the value, as matplotlib's error bar lengths (x100)
            low, high = e.get("ci_low"), e.get("ci_high")
            return [[0.0], [0.0]] if low is None else [[100 * (e["value"] - low)], [100 * (high - e["value"])]]

        xy = [(100 * div["value"], 100 * mv["value"]) for _, div, mv in pts]
        colours = []
        for (_, div, mv), (x, y) in zip(pts, xy):
            colours.append(ax.errorbar(x, y, xerr=bar(div), yerr=bar(mv), fmt="o", capsize=3)[0].get_color())
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        height_pt = ax.get_position().height * fig.get_figheight() * 72
        lifts = label_lifts(xy, x1 - x0, y1 - y0, height_pt)
        for (s, _, _), (x, y), dy, colour in zip(pts, xy, lifts, colours):  # a lifted label: its point's colour
            ax.annotate(short(s), (x, y), fontsize=8, xytext=(4, 4 + dy), textcoords="offset points", color=colour)
        ax.set_xlabel("diversity (Su et al.: prod of 1 - rep-n, n = 2..4; x100)")
        ax.set_ylabel("MAUVE vs the references (x100)")
        ax.set_title("MAUVE against diversity [95% intervals]")
        ax.grid(alpha=0.3)
        save(fig, "mauve-diversity.png")
    sweep = []
    for s, e in scores.items():
        spec = parse_system(system_of[s])
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
