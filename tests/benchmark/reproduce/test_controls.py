"""The seed-paired control of a reproduction (KerBS against its fine-tuned softmax, kerbs.toml's
[[controls]]): built from constructed fit-meta files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from maxbench.benchmark.reproduce import controls
from maxbench.benchmark.reproduce.papers import load_paper
from maxbench.benchmark.reproduce.verdicts import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from maxbench.errors import MaxbenchError

NAME = "smollm2-135m-food-reviews-{layer}-seed{seed}.json"


def meta(layer: str, seed: int, ppl: float, history=(55.8, 49.6, 48.3), softmax=54.0, positions=6080) -> dict:
    key = controls.ppl_key(layer)
    return {
        "layer": layer,
        "config": {"seed": seed},
        "test_positions": positions,
        "test_ppl_softmax": softmax,
        key: ppl,
        "training": {
            "history": [{"epoch": i, "valid_ppl": v} for i, v in enumerate(history)],
            "train_seconds": 400.0,
        },
        "seconds": {"prepare": 250.0, "train": 400.0, "evaluate": 60.0},
    }


def write(root: Path, layer: str, seed: int, **kw) -> None:
    d = root / "controls"
    d.mkdir(parents=True, exist_ok=True)
    (d / NAME.format(layer=layer, seed=seed)).write_text(json.dumps(meta(layer, seed, **kw)))


def pairs(root: Path, values: dict[int, tuple[float, float]], **kw) -> None:
    for seed, (k, f) in values.items():
        write(root, "kerbs", seed, ppl=k, **kw)
        write(root, "ft-softmax", seed, ppl=f, **kw)


@pytest.fixture(scope="module")
def paper():
    return load_paper("kerbs")


def test_the_paired_t_interval_matches_a_hand_worked_example():
    # differences 1%, 2%, 3%: mean 2%, sd 1%, se 1% / sqrt(3) = 0.57735%; t_{0.975, 2} = 4.302653
    e = controls.paired_t([0.01, 0.02, 0.03])
    assert e.estimate == pytest.approx(0.02)
    assert e.se == pytest.approx(0.01 / math.sqrt(3))
    assert e.df == 2 and e.n_folds == 3
    half = 4.302653 * 0.01 / math.sqrt(3)  # 0.0248414
    assert (e.low, e.high) == (pytest.approx(0.02 - half, abs=1e-6), pytest.approx(0.02 + half, abs=1e-6))
    one = controls.paired_t([0.01])
    assert one.estimate == 0.01 and one.low is None


def test_per_seed_differences_and_the_verdict_over_seeds(tmp_path, paper):
    # KerBS 2%, 3%, 2.5% below its control, on the same test positions: the interval excludes 0 on
    # the paper's side (the paper's -0.92% lies in the band: the sign is judged)
    pairs(tmp_path, {0: (49.0, 50.0), 1: (48.5, 50.0), 2: (48.75, 50.0)})
    (res,) = controls.check(paper, tmp_path)
    assert [r.seed for r in res.rows] == [0, 1, 2] and not res.partial
    assert [round(r.method_vs_control, 6) for r in res.rows] == [-0.02, -0.03, -0.025]
    assert res.rows[0].method_vs_baseline == pytest.approx(49.0 / 54.0 - 1)
    assert res.rows[0].control_vs_baseline == pytest.approx(50.0 / 54.0 - 1)
    assert res.vs_control.estimate == pytest.approx(-0.025) and res.vs_control.df == 2
    assert res.paper_effect == pytest.approx(102.17 / 103.12 - 1)
    assert res.verdict == REPRODUCED
    assert "few seeds (n=3)" in res.flags


def test_kerbs_worse_than_its_control_is_not_reproduced(tmp_path, paper):
    pairs(tmp_path, {0: (50.5, 50.0), 1: (50.6, 50.0), 2: (50.4, 50.0)})
    (res,) = controls.check(paper, tmp_path)
    assert res.verdict == NOT_REPRODUCED and "other side" in res.why


def test_a_partial_set_is_rendered_and_labelled_partial(tmp_path, paper):
    pairs(tmp_path, {0: (49.0, 50.0), 1: (48.5, 50.0)})
    write(tmp_path, "kerbs", 2, ppl=48.0)  # seed 2's control has not landed
    (res,) = controls.check(paper, tmp_path)
    assert res.partial and res.n == 2
    assert res.missing == [(2, [NAME.format(layer="ft-softmax", seed=2)])]
    assert any(f.startswith("partial: 2 of 3 seeds; missing seed 2") for f in res.flags)
    from maxbench.benchmark.reproduce.report import write_report

    out = tmp_path
    write_report(paper, [], out, "maxbench reproduce kerbs")
    md = (out / "report.md").read_text()
    assert "## Control: fine-tuned softmax" in md
    head = md.split("## Verdict rules")[0]
    assert "Partial: the section 'Control: fine-tuned softmax' rests on 2 of 3 planned seeds; missing seed 2" in head
    assert "its seed's pair is incomplete: not used" in md  # kerbs seed 2's history is still shown
    doc = json.loads((out / "report.json").read_text())
    (c,) = doc["controls"]
    assert c["seeds"] == [0, 1] and c["missing"] == [{"seed": 2, "files": [NAME.format(layer="ft-softmax", seed=2)]}]
    assert [h["seed"] for h in c["heads"]] == [0, 0, 1, 1, 2]
    assert c["heads"][0]["history"][2] == {"epoch": 2, "valid_ppl": 48.3}


def test_a_head_whose_best_epoch_is_0_is_flagged_and_never_counts_as_reproduced(tmp_path, paper):
    pairs(tmp_path, {0: (49.0, 50.0), 2: (48.75, 50.0)})
    write(tmp_path, "kerbs", 1, ppl=48.5, history=(48.0, 49.0, 50.0))  # best at epoch 0: untrained
    write(tmp_path, "ft-softmax", 1, ppl=50.0)
    (res,) = controls.check(paper, tmp_path)
    (h,) = [h for h in res.heads if h.seed == 1 and h.layer == "kerbs"]
    assert h.best_epoch == 0 and h.untrained
    assert any(f.startswith("untrained head: kerbs seed 1") for f in res.flags)
    assert res.verdict == INCONCLUSIVE and res.why.startswith("never counted as reproduced")
    (sec,) = controls.sections(res)
    from maxbench.document import render_markdown

    md = render_markdown([sec])
    assert "untrained head: best epoch 0, never counted as reproduced" in md
    # the two untrained heads of seed 1 differ on validation (48.0 vs 55.8): the report says so
    assert "seed 1: kerbs 48.0000 vs ft-softmax 55.8000 (-14%)" in md


def test_a_control_naming_a_missing_run_is_one_line(tmp_path, paper):
    with pytest.raises(MaxbenchError, match="its folder .* does not exist"):
        controls.check(paper, tmp_path)
    write(tmp_path, "kerbs", 0, ppl=49.0)  # no seed with both files
    with pytest.raises(MaxbenchError, match="names a missing run"):
        controls.check(paper, tmp_path)


def test_a_seed_pair_on_other_test_positions_or_another_seed_is_refused(tmp_path, paper):
    write(tmp_path, "kerbs", 0, ppl=49.0)
    write(tmp_path, "ft-softmax", 0, ppl=50.0, positions=6000)
    with pytest.raises(MaxbenchError, match="not on the same test positions"):
        controls.check(paper, tmp_path)
    d = tmp_path / "controls"
    (d / NAME.format(layer="ft-softmax", seed=0)).write_text(json.dumps(meta("ft-softmax", 1, 50.0)))
    with pytest.raises(MaxbenchError, match="not of seed 0"):
        controls.check(paper, tmp_path)


def test_a_bad_controls_entry_is_refused_on_load(tmp_path):
    text = (Path(load_paper("kerbs").path)).read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('claim = "table1-lm-ppl"\nmodel', 'claim = "table9"\nmodel'))
    with pytest.raises(MaxbenchError, match="claim"):
        load_paper(str(bad))
    bad.write_text(text.replace('file = "{model}-{corpus}-{layer}-seed{seed}.json"', 'file = "x.json"'))
    with pytest.raises(MaxbenchError, match="pattern"):
        load_paper(str(bad))
