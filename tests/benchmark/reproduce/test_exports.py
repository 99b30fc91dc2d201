"""benchmark/reproduce/exports.py: the differences plot draws each counted cell once."""

import matplotlib.axes

from maxbench.benchmark.reproduce import exports
from maxbench.benchmark.reproduce.verdicts import REPRODUCED, Estimate
from tests.support.verdicts import toy_cell


def test_a_cell_repeating_another_s_evidence_is_drawn_once(tmp_path, monkeypatch):
    """FCTG's mu ablation repeats the 'without MVA' cell's evidence: the plot shows that point once,
    under the cell that is counted."""
    drawn = []
    real = matplotlib.axes.Axes.errorbar
    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", lambda ax, *a, **kw: drawn.append(a) or real(ax, *a, **kw))
    est = Estimate(0.05, 0.01, 0.09, 0.02, None, 1)
    first = toy_cell("a", est, verdict=REPRODUCED)
    again = toy_cell("b", est, verdict=REPRODUCED, same_as="a", counted=False)
    assert exports.plot([first, again], tmp_path / "d.png") is not None
    assert len(drawn) == 1
