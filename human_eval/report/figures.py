"""The figures of a rating report: per aspect, 100% stacked bars of the scale points per system.

The files are byte-identical for the same analysis: matplotlib's Agg backend, a fixed font and
resolution, a fixed SVG hash salt, and no date or software version in the PNG and SVG metadata.
"""

from __future__ import annotations

import io
import re

from maxbench.human_eval.analysis.results import Analysis, Scale
from maxbench.human_eval.report.render import fmt_value

MAX_LIKERT_POINTS = 11  # beyond this a "scale" is a slider: no stacked bars, no count columns


def likert_figures(a: Analysis) -> dict[str, tuple[str, bytes, bytes]]:
    """aspect -> (file stem, PNG bytes, SVG bytes): 100% stacked bars of the scale points per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    out = {}
    rc = {
        "svg.hashsalt": "maxbench-report",
        "font.family": "DejaVu Sans",
        "font.size": 9,
        "figure.dpi": 100,
        "savefig.dpi": 100,
    }
    for index, aspect in enumerate(a.aspects):
        scale: Scale = a.scales[aspect]
        if len(scale.domain) > MAX_LIKERT_POINTS:
            continue
        with matplotlib.rc_context(rc):
            labels = [_wrap(system) + f"\n(n={a.descriptive(aspect, system).n})" for system in a.systems]
            row_height = 0.3 + 0.16 * max(label.count("\n") + 1 for label in labels)
            fig, ax = plt.subplots(figsize=(7.5, row_height * len(a.systems) + 1.3), layout="constrained")
            colours = colormaps["RdYlGn"](
                [0.08 + 0.84 * k / max(1, len(scale.domain) - 1) for k in range(len(scale.domain))]
            )
            for row, system in enumerate(a.systems):
                d = a.descriptive(aspect, system)
                left = 0.0
                for k, (value, count) in enumerate(d.distribution):
                    share = 100.0 * count / d.n if d.n else 0.0
                    ax.barh(
                        row,
                        share,
                        left=left,
                        color=colours[k],
                        edgecolor="white",
                        linewidth=0.5,
                        label=fmt_value(value) if row == 0 else None,
                    )
                    if share >= 8:
                        ax.text(left + share / 2, row, f"{share:.0f}", ha="center", va="center", fontsize=8)
                    left += share
            ax.set_yticks(range(len(a.systems)), labels)
            ax.invert_yaxis()
            ax.set_xlim(0, 100)
            ax.set_xlabel("share of ratings (%)")
            ax.set_title(_short(aspect, 60))
            fig.legend(
                title="rating",
                ncols=len(scale.domain),
                loc="outside lower center",
                frameon=False,
                fontsize=8,
                title_fontsize=8,
            )
            ax.spines[["top", "right"]].set_visible(False)
            png, svg = io.BytesIO(), io.BytesIO()
            fig.savefig(png, format="png", metadata={"Software": None})
            fig.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
            plt.close(fig)
        out[aspect] = (f"likert-{index + 1:02d}-{_slug(aspect)}", png.getvalue(), svg.getvalue())
    return out


def _wrap(name: str, width: int = 30) -> str:
    """A system name on lines of at most ``width`` characters, broken after '/' or ',' where possible."""
    lines, line = [], ""
    for piece in re.findall(r"[^/,]+[/,]?|[/,]", name):
        while len(piece) > width:  # a piece with no break opportunity is cut hard
            if line:
                lines.append(line)
                line = ""
            lines.append(piece[:width])
            piece = piece[width:]
        if len(line) + len(piece) > width and line:
            lines.append(line)
            line = ""
        line += piece
    return "\n".join(lines + [line] if line else lines)


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]
    return slug or "aspect"
