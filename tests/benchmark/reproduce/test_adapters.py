"""The trained adapters behind a reproduction (``benchmark/reproduce/adapters.py``): their metas read
from the committed copies by the sha256 the manifest records, an ablation of a component that never
trained taken out of the counts, and attribute accuracy with its ceiling beside every cell
(``judge.beside_labels``). Constructed runs and metas of the toy paper."""

import json
import math
from types import SimpleNamespace

from maxbench.benchmark.reproduce import adapters
from maxbench.benchmark.reproduce.cells import Report
from maxbench.benchmark.reproduce.evidence import Evidence, Pairs, RunScores
from maxbench.benchmark.reproduce.judge import beside_of, beside_text, decide_cells, headline
from maxbench.benchmark.reproduce.protocol import RunSpec
from maxbench.benchmark.reproduce.render import sections
from maxbench.benchmark.reproduce.verdicts import NOT_COMPARABLE, Estimate, relative
from maxbench.document import render_markdown
from tests.support.verdicts import toy_cell, toy_claim, toy_paper

Z = 1.959963984540054
SYSTEMS = ("softmax", "fctg")
FCTG = "m1+fctg/softmax/top_k=40"


def _meta(sha: str, inert_mva: bool) -> dict:
    return {
        "adapter": "fctg",
        "sha256": sha,
        "options": {"seed": 0},
        "steps": 50,
        "best_step": 40,
        "validation_loss": {"10": 3.88, "20": 3.87, "30": 3.86, "40": 3.85, "50": 3.855},
        "step_cpu_median": 16.5,
        "gate": {
            "start": 0.018,
            "gate_bias": -4.0,
            "gate_lr": 0.01,
            "values": 1000,
            "quantiles": {"q10": 0.0, "q50": 0.0046, "q90": 0.38, "q99": 0.98},
        },  # fmt: skip
        "moved": {"mva": 0.004 if inert_mva else 0.98, "mam": 0.03, "alm": 0.04},
        "inert": {"mva": inert_mva, "mam": False, "alm": False},
    }


def _run(root, sha="a" * 64, meta: dict | None = None, scores: dict | None = None, baseline_meta=None) -> RunSpec:
    """A run of the toy paper (m1 on c) whose manifest records an FCTG adapter of this sha256, its
    meta committed under heads/<run>/ (``meta``; ``baseline_meta``: the softmax role is an adapted
    model too, sha256 "c" * 64), and a scores.json with ``scores`` per system."""
    run_dir = root / "runs" / "m1-c"
    run_dir.mkdir(parents=True)
    adapter = {"name": "fctg", "key": "0" * 24, "sha256": sha}
    models = {"m1+fctg": {"options": {"adapter": adapter}}, "m1": {}}
    roles = {"softmax": "m1/softmax/top_k=40", "fctg": FCTG}
    if baseline_meta is not None:
        models["m1+fctg(mu=0.5)"] = {"options": {"adapter": {"name": "fctg", "key": "1" * 24, "sha256": "c" * 64}}}
        roles["softmax"] = "m1+fctg(mu=0.5)/softmax/top_k=40"
    (run_dir / "manifest.json").write_text(json.dumps({"systems": {FCTG: {}}, "models": models}))
    if meta is not None or baseline_meta is not None:
        (root / "heads" / "m1-c").mkdir(parents=True)
    if meta is not None:
        (root / "heads" / "m1-c" / "m1+fctg.json").write_text(json.dumps(meta))
    if baseline_meta is not None:
        (root / "heads" / "m1-c" / "m1+fctg(mu=0.5).json").write_text(json.dumps(baseline_meta))
    if scores is not None:
        (run_dir / "scores.json").write_text(json.dumps({"systems": scores}))
    plan = SimpleNamespace(run_dir=run_dir, suite=SimpleNamespace(items=[{}] * 80, name="s"), systems=[], corpus="c")
    return RunSpec("m1", "c", None, plan, roles, roles["softmax"])


def _paper(tmp_path, component="mva", extra=""):
    claim = toy_claim("abl", "fctg") + f'component = "{component}"\n' + toy_claim("main", "fctg")
    paper = toy_paper(tmp_path, claim, SYSTEMS)
    if extra:
        path = paper.path
        path.write_text(path.read_text().replace("[protocol.systems]", extra + "\n[protocol.systems]"))
        from maxbench.benchmark.reproduce.papers import load_paper

        paper = load_paper(str(path))
    return paper


def _cell(claim):
    c, h = math.log(1.08), Z * 0.01  # +8% [+6%, +10%]: a clear effect on its own interval
    return toy_cell(claim, relative(Estimate(c, c - h, c + h, 0.01, None, 1, "constructed")), 0.1, "m1", "fctg")


def test_an_adapter_s_meta_is_read_from_its_committed_copy_by_the_manifest_s_sha256(tmp_path):
    run = _run(tmp_path, meta=_meta("a" * 64, inert_mva=False))
    got = adapters.trained_adapters([run])
    rec = got[("m1-c", "m1+fctg")]
    assert rec["source"] == "heads/m1-c/m1+fctg.json" and rec["best_step"] == 40 and rec["steps"] == 50
    assert rec["gate"]["quantiles"]["q90"] == 0.38 and rec["moved"]["mva"] == 0.98 and not rec["inert"]["mva"]
    # a committed meta of other bits is not this adapter's
    other = _run(tmp_path / "other", sha="b" * 64, meta=_meta("a" * 64, inert_mva=False))
    assert adapters.trained_adapters([other]) == {("m1-c", "m1+fctg"): None}


def test_two_adapters_that_trained_the_same_tensors_each_show_their_own_meta(tmp_path):
    """FCTG's mu = 0.5 and mu = 0.8 variants whose gates stay shut train the same tensors (one sha256);
    each row shows its own meta (its options, its file), never the other's."""
    mine, other = _meta("c" * 64, inert_mva=True), _meta("c" * 64, inert_mva=True)
    mine["options"], other["options"] = {"mu": 0.8, "seed": 3}, {"mu": 0.5, "seed": 0}
    mine["key"], other["key"] = "0" * 24, "1" * 24
    run = _run(tmp_path, sha="c" * 64, meta=mine, baseline_meta=other)  # m1+fctg and m1+fctg(mu=0.5)
    got = adapters.trained_adapters([run])
    assert got[("m1-c", "m1+fctg")]["source"] == "heads/m1-c/m1+fctg.json"
    assert got[("m1-c", "m1+fctg")]["seed"] == 3
    assert got[("m1-c", "m1+fctg(mu=0.5)")]["source"] == "heads/m1-c/m1+fctg(mu=0.5).json"
    # without a copy named for it, the copy of the same sha256 and cache key, not another key's
    (tmp_path / "heads" / "m1-c" / "m1+fctg.json").rename(tmp_path / "heads" / "m1-c" / "zz.json")
    got = adapters.trained_adapters([run])
    assert got[("m1-c", "m1+fctg")]["source"] == "heads/m1-c/zz.json"


def test_an_ablation_of_an_inert_component_is_not_comparable_and_outside_the_counts(tmp_path):
    paper = _paper(tmp_path)
    run = _run(tmp_path, meta=_meta("a" * 64, inert_mva=True))
    recs = adapters.trained_adapters([run])
    abl, main = _cell("abl"), _cell("main")
    held = adapters.hold_inert(paper, [run], [abl, main], recs)
    assert [(c.claim, flag) for c, flag, _ in held] == [("abl", adapters.FLAG_INERT)]
    assert not abl.counted and main.counted
    decide_cells(paper, [abl, main])
    assert abl.p_holm is None and main.p_holm is not None  # outside Holm's family
    adapters.mark_inert(held)
    assert abl.verdict == NOT_COMPARABLE and abl.why.startswith("component inert: fctg's mva moved by 0.004 (< 0.01)")
    assert main.verdict != NOT_COMPARABLE  # the main claim names no component: judged as usual
    assert [d.verdict.verdict for d in abl.details] == [NOT_COMPARABLE]  # its comparisons say so too
    assert headline(paper, [abl, main])["cells"] == 1
    # the same cell with a gate that moved is judged as usual
    moved = _run(tmp_path / "moved", meta=_meta("a" * 64, inert_mva=False))
    assert adapters.hold_inert(paper, [moved], [_cell("abl")], adapters.trained_adapters([moved])) == []
    # a baseline whose gate is shut by design (mu above its start) is what the claim compares: not held
    shut = _run(tmp_path / "shut", meta=_meta("a" * 64, False), baseline_meta=_meta("c" * 64, True))
    recs = adapters.trained_adapters([shut])
    assert recs[("m1-c", "m1+fctg(mu=0.5)")]["inert"]["mva"]
    assert adapters.hold_inert(paper, [shut], [_cell("abl")], recs) == []
    # a method whose adapter's meta is found nowhere cannot be checked: held, and says why
    lost = _run(tmp_path / "lost")
    assert adapters.trained_adapters([lost]) == {("m1-c", "m1+fctg"): None}
    ((c, flag, why),) = adapters.hold_inert(paper, [lost], [_cell("abl")], adapters.trained_adapters([lost]))
    assert flag == adapters.FLAG_UNCHECKED and "fctg's adapter has no training meta here (m1-c): its mva cannot" in why
    adapters.mark_inert([(c, flag, why)])
    assert c.why.startswith("component unchecked: ") and c.why.endswith("its training cannot be checked")


def test_a_re_rendering_without_the_metas_keeps_the_committed_report_s_record(tmp_path):
    run = _run(tmp_path, meta=_meta("a" * 64, inert_mva=True))
    before = [{"run": "m1-c", "model": "m1+fctg", **adapters.trained_adapters([run])[("m1-c", "m1+fctg")]}]
    (tmp_path / "heads" / "m1-c" / "m1+fctg.json").unlink()  # a machine without the committed copy
    assert adapters.trained_adapters([run]) == {("m1-c", "m1+fctg"): None}
    kept = adapters.trained_adapters([run], before)[("m1-c", "m1+fctg")]
    assert kept["inert"]["mva"] and kept["source"] == "heads/m1-c/m1+fctg.json"
    other = [dict(before[0], sha256="d" * 64)]  # another adapter's record is not this one's
    assert adapters.trained_adapters([run], other) == {("m1-c", "m1+fctg"): None}


def test_the_report_shows_each_adapter_s_training_and_gate(tmp_path):
    paper = _paper(tmp_path)
    run = _run(tmp_path, meta=_meta("a" * 64, inert_mva=True))
    rep = Report(
        paper=paper,
        evidence=Evidence.of([run], Pairs()),
        rows=[],
        cells=[],
        adapters=adapters.trained_adapters([run]),
    )
    md = render_markdown(sections(rep))
    line = next(x for x in md.splitlines() if x.startswith("| `m1-c` | `m1+fctg` |"))
    assert "| 40 of 50 |" in line and "50: 3.855" in line and "| 16.5 |" in line
    assert "start 0.018, lr 0.01; 10%: 0, 50%: 0.0046, 90%: 0.38, 99%: 0.98" in line
    assert "mva 0.004 (inert)" in line and "mam 0.03" in line


def test_attribute_accuracy_and_its_ceiling_stand_beside_every_cell(tmp_path):
    paper = _paper(tmp_path, extra='beside = ["attr-acc"]')
    acc = {"value": 0.5, "ci_low": 0.4, "ci_high": 0.61}
    scores = {
        FCTG: {"scores": {"attr-acc": acc, "attr-acc-ceiling": {"value": 0.875}}},
        "m1/softmax/top_k=40": {"scores": {"attr-acc": {"value": 0.45}, "attr-acc-ceiling": {"value": 0.875}}},
    }
    run = _run(tmp_path, scores=scores)
    (entry,) = beside_of(paper, _cell("main"), [run], RunScores([run]))
    assert entry["ceiling"] == 0.875 and [r["role"] for r in entry["roles"]] == ["fctg", "softmax"]
    assert beside_text(entry) == "beside: attr-acc: fctg 0.5 [0.4, 0.61]; softmax 0.45; its ceiling 0.875"
    (tmp_path / "plain").mkdir()
    plain = _paper(tmp_path / "plain")
    assert beside_of(plain, _cell("main"), [run], RunScores([run])) == []  # only where the protocol asks
    # a role with seed replicates: its mean over its seeds beside its seed 0
    (tmp_path / "seeded").mkdir()
    seeded = _paper(tmp_path / "seeded", extra='beside = ["attr-acc"]')
    text = seeded.path.read_text().replace('fctg = "fctg"\n', 'fctg = "fctg"\nfctg-seed1 = "fctg-seed1"\n')
    seeded.path.write_text(text + '\n[protocol.seeds."c"]\nfctg = ["fctg-seed1"]\n')
    from maxbench.benchmark.reproduce.papers import load_paper

    seeded = load_paper(str(seeded.path))
    scores["m1+fctg(seed=1)/softmax/top_k=40"] = {"scores": {"attr-acc": {"value": 0.6}}}
    (tmp_path / "seeded-run").mkdir()
    run = _run(tmp_path / "seeded-run", scores=scores)
    run.roles["fctg-seed1"] = "m1+fctg(seed=1)/softmax/top_k=40"
    (entry,) = beside_of(seeded, _cell("main"), [run], RunScores([run]))
    assert beside_text(entry).startswith("beside: attr-acc: fctg 0.5 [0.4, 0.61], over its 2 seeds 0.55; softmax")


def test_a_reproduction_commits_each_adapter_s_meta_beside_its_run(tmp_path, monkeypatch):
    from maxbench.benchmark.reproduce.protocol import record_adapters
    from maxbench.systems.adapters.base import adapter_directory

    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    run = _run(tmp_path / "out")
    cache = adapter_directory("fctg", "0" * 24)
    cache.mkdir(parents=True)
    (cache / "meta.json").write_text(json.dumps(_meta("a" * 64, inert_mva=False)))
    assert record_adapters(run) == []
    copied = tmp_path / "out" / "heads" / "m1-c" / "m1+fctg.json"
    assert json.loads(copied.read_text())["sha256"] == "a" * 64
    assert adapters.trained_adapters([run])[("m1-c", "m1+fctg")]["source"] == "heads/m1-c/m1+fctg.json"
    # an adapter this machine does not hold (other bits in the cache): one warning line, nothing copied
    (cache / "meta.json").write_text(json.dumps(_meta("e" * 64, inert_mva=False)))
    copied.unlink()
    (warning,) = record_adapters(run)
    assert "the fctg adapter of m1+fctg in run m1-c" in warning and "not in this machine's adapter cache" in warning
    assert not copied.exists()
