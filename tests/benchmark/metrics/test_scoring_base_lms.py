"""Leaderboards over several base models: each layer tested against its own model's softmax, and
evaluator PPL under one named, chosen evaluator (``--evaluator``, a lineup's ``evaluator``)."""

from __future__ import annotations

import json

import pytest

from maxbench.benchmark.metrics.scoring import baselines_of, model_baselines
from maxbench.cli import main

SMOL, GEMMA = "smollm2-135m", "gemma3-270m"


def _manifest(systems: list[str]) -> dict:
    out = {}
    for s in systems:
        model, layer, decoding = s.split("/")
        out[s] = {"model": model, "layer": layer.split("(")[0], "decoding": decoding}
    return {"systems": out}


TWO_MODELS = [
    f"{SMOL}/softmax/top_p=0.9",
    f"{SMOL}/graphmax(lam=1.0)/top_p=0.9",
    f"{SMOL}/softmax/greedy",
    f"{SMOL}/sparsemax/greedy",
    f"{GEMMA}/softmax/top_p=0.9",
    f"{GEMMA}/graphmax(lam=1.0)/top_p=0.9",
    f"{GEMMA}/kerbs/greedy",
]


def test_with_several_base_models_each_system_meets_its_own_models_softmax():
    baseline, each = baselines_of(_manifest(TWO_MODELS), TWO_MODELS, None)
    assert baseline is None
    assert each == {
        f"{SMOL}/graphmax(lam=1.0)/top_p=0.9": f"{SMOL}/softmax/top_p=0.9",
        f"{SMOL}/sparsemax/greedy": f"{SMOL}/softmax/greedy",  # same decoding, of two softmax systems
        f"{GEMMA}/graphmax(lam=1.0)/top_p=0.9": f"{GEMMA}/softmax/top_p=0.9",
        f"{GEMMA}/kerbs/greedy": f"{GEMMA}/softmax/top_p=0.9",  # its model's only softmax
    }
    # a model with two softmax systems and neither decoding matching: no baseline rather than a guess
    odd = [*TWO_MODELS, f"{SMOL}/kerbs/top_k=5"]
    assert f"{SMOL}/kerbs/top_k=5" not in model_baselines(_manifest(odd), odd)


def test_one_base_model_keeps_one_baseline_and_a_given_baseline_wins():
    one = [s for s in TWO_MODELS if s.startswith(SMOL)][:2] + [f"{SMOL}/posg/greedy"]
    baseline, each = baselines_of(_manifest(one), one, None)
    assert baseline == f"{SMOL}/softmax/top_p=0.9" and set(each.values()) == {baseline} and len(each) == 2
    given = f"{GEMMA}/softmax/top_p=0.9"
    baseline, each = baselines_of(_manifest(TWO_MODELS), TWO_MODELS, given)
    assert baseline == given and set(each.values()) == {given} and len(each) == len(TWO_MODELS) - 1


PROMPTS = {f"p{i}": (f"Prompt {i}", f"the reference text number {i} is here") for i in range(6)}
TEXTS = {
    f"{SMOL}/softmax/top_p=0.9": "the reference text is fine",
    f"{SMOL}/sparsemax/top_p=0.9": "fine fine fine fine",
    f"{GEMMA}/softmax/top_p=0.9": "a much more varied continuation with words {i}",
    f"{GEMMA}/sparsemax/top_p=0.9": "varied words {i} and more",
}


def _run(tmp_path, texts=TEXTS):
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {"system": s, "prompt_id": p, "sample": 0, "prompt": pr, "reference": ref, "text": t.format(i=i)}
        for s, t in texts.items()
        for i, (p, (pr, ref)) in enumerate(PROMPTS.items())
    ]
    (run / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = {"run_id": "run", "suite": {"name": "toy", "n_items": len(PROMPTS)}, "samples": 1}
    (run / "manifest.json").write_text(json.dumps(manifest | _manifest(list(texts))))
    return run


def test_scores_of_a_two_model_run_compare_each_layer_with_its_own_softmax(tmp_path, capsys):
    run = _run(tmp_path)
    assert main(["score", str(run), "--metrics", "uniq,distinct", "--bootstrap", "100", "--quiet"]) == 0
    assert "paired tests against each system's own base model's softmax:" in capsys.readouterr().out
    doc = json.loads((run / "scores.json").read_text())
    comp = doc["comparisons"]
    assert comp["baseline"] is None
    assert comp["baselines"] == {
        f"{SMOL}/sparsemax/top_p=0.9": f"{SMOL}/softmax/top_p=0.9",
        f"{GEMMA}/sparsemax/top_p=0.9": f"{GEMMA}/softmax/top_p=0.9",
    }
    for model in (SMOL, GEMMA):
        value = {
            s: doc["systems"][f"{model}/{s}/top_p=0.9"]["scores"]["uniq"]["value"] for s in ("softmax", "sparsemax")
        }
        test = comp["systems"][f"{model}/sparsemax/top_p=0.9"]["uniq"]
        if test.get("test") == "closeness":  # Uniq is judged by closeness to the references' value
            human = doc["human"]["scores"]["uniq"]["value"]
            want = abs(value["sparsemax"] - human) - abs(value["softmax"] - human)
        else:
            want = value["sparsemax"] - value["softmax"]
        assert test["difference"] == pytest.approx(want)
    # and the leaderboard says which baseline its stars are against
    assert main(["leaderboard", str(run), "--out", str(tmp_path / "lb")]) == 0
    page = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert "test over prompts against the softmax of the row's own base model with the same decoding." in page


def test_a_one_model_run_still_names_its_one_baseline(tmp_path):
    run = _run(tmp_path, {k: v for k, v in TEXTS.items() if k.startswith(SMOL)})
    assert main(["score", str(run), "--metrics", "uniq", "--bootstrap", "0", "--quiet"]) == 0
    comp = json.loads((run / "scores.json").read_text())["comparisons"]
    assert comp["baseline"] == f"{SMOL}/softmax/top_p=0.9" and "baselines" not in comp


def test_the_evaluator_is_chosen_by_name_and_named_in_the_signature(tmp_path, capsys):
    run = _run(tmp_path, {k: v for k, v in TEXTS.items() if k.startswith(SMOL)})
    assert (
        main(["score", str(run), "--metrics", "ppl", "--evaluator", "tiny-random", "--bootstrap", "0", "--quiet"]) == 0
    )
    doc = json.loads((run / "scores.json").read_text())
    assert doc["metrics"]["ppl"]["signature"].startswith("ppl|model:tiny-random|weights:")
    assert main(["score", str(run), "--metrics", "ppl", "--evaluator", "tiny-randm"]) == 2
    assert "cannot load evaluator model 'tiny-randm'" in capsys.readouterr().err


def _lineup(tmp_path, extra: str) -> str:
    rows = [{"id": f"p{i}", "prompt": f"Review {i}: the soup was", "reference": f"cold, sadly {i}"} for i in range(2)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "two"\nfile = "p.jsonl"\n')
    reg = tmp_path / "reg.toml"
    reg.write_text(
        f'name = "t"\nsuite = "{tmp_path / "s.toml"}"\nbatch_size = 2\nmetrics = ["ppl"]\n'
        f'systems = ["tiny-random/softmax/greedy,max_new_tokens=4"]\n{extra}'
    )
    return str(reg)


def test_a_lineups_evaluator_scores_its_run_and_the_flag_overrides_it(tmp_path, cli):
    reg = _lineup(tmp_path, 'evaluator = "tiny-random"\n')
    common = ["--lineup", reg, "--runs-dir", tmp_path / "runs", "--n-resamples", "0", "--threads", "1"]
    rc, out, err = cli("run", *common, "--run-id", "a", "--out", tmp_path / "lb", "--no-progress")
    assert rc == 0, err
    scores = json.loads((tmp_path / "runs" / "a" / "scores.json").read_text())
    assert scores["metrics"]["ppl"]["signature"].startswith("ppl|model:tiny-random|")
    rc, out, err = cli("run", *common, "--run-id", "a", "--out", tmp_path / "lb", "--evaluator", "nope-model")
    assert rc == 2 and "cannot load evaluator model 'nope-model'" in err
    rc, _, err = cli("run", "--lineup", _lineup(tmp_path, 'evaluator = "smolm2-135m"\n'))
    assert rc == 2 and "did you mean 'smollm2-135m'" in err


def test_the_base_lms_lineup_has_both_models_every_layer_and_one_evaluator():
    from maxbench.benchmark.run.lineup import load_lineup

    reg = load_lineup("base-lms")
    assert reg.evaluator == SMOL and reg.baseline is None and reg.suite == reg.corpus == "food-reviews"
    layers = ["softmax", "sparsemax", "graphmax", "graphmax", "kerbs", "posg"]
    for model in (SMOL, GEMMA):
        mine = [s for s in reg.systems if s.model == model]
        assert [s.layer for s in mine] == layers and {s.decoding.label for s in mine} == {"top_p=0.9"}
        assert [dict(s.params).get("solver") for s in mine if s.layer == "graphmax"] == ["exact", "paper"]
    default = load_lineup("default")
    # the SmolLM2 half is the default lineup, so its rows can be checked against the default leaderboard
    assert [s.name for s in reg.systems if s.model == SMOL] == [s.name for s in default.systems]
    assert (reg.seed, reg.batch_size, reg.samples, reg.metrics) == (
        default.seed,
        default.batch_size,
        default.samples,
        default.metrics,
    )
