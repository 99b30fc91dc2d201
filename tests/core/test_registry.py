"""The one registry (core/registry.py) and every registry built on it: models, layers, metrics, lineups."""

from __future__ import annotations

import sys

import pytest

from maxbench.errors import MaxbenchError
from maxbench.registry import Registry, closest, unknown_name


class Base:
    pass


class Thing(Base):
    pass


def test_entries_are_imported_on_first_get_only(tmp_path, monkeypatch):
    (tmp_path / "lazy_target_mod.py").write_text("class Target:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_target_mod", raising=False)
    reg = Registry("widget", {"thing": "lazy_target_mod:Target"})
    assert "thing" in reg and reg.names() == ["thing"] and reg.check("thing") == "thing"
    assert "lazy_target_mod" not in sys.modules  # listing and checking import nothing
    assert reg.get("thing").__name__ == "Target" and "lazy_target_mod" in sys.modules
    with pytest.raises(MaxbenchError, match="module no_such_module_here does not exist"):
        Registry("widget", {"x": "no_such_module_here:X"}).get("x")


def test_a_string_entry_resolves_to_its_object_and_is_type_checked():
    reg = Registry("widget", {"thing": f"{__name__}:Thing", "base": f"{__name__}:closest"}, base=Base)
    assert reg.get("thing") is Thing
    with pytest.raises(MaxbenchError, match="is not a Base"):
        reg.get("base")
    with pytest.raises(MaxbenchError, match="has no Nothing"):
        Registry("widget", {"x": f"{__name__}:Nothing"}).get("x")


def test_registering_a_name_twice_for_two_objects_is_refused():
    reg = Registry("widget", {"thing": f"{__name__}:Thing"})
    reg.register("thing", Thing)  # the same object as its "module:Object" entry: allowed
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("thing", "elsewhere:Thing")

    @reg.register("other")
    class Other(Base):
        pass

    assert reg.get("other") is Other
    with pytest.raises(ValueError, match="module:Object"):
        reg.register("bad", "no.colon.here")


def test_an_unknown_name_is_one_line_with_the_closest_known_name():
    reg = Registry("widget", {"graphmax": f"{__name__}:Thing", "sparsemax": f"{__name__}:Thing"})
    with pytest.raises(MaxbenchError) as err:
        reg.get("grapmax")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg == "unknown widget 'grapmax': did you mean 'graphmax'? known widgets: graphmax, sparsemax"
    assert closest("GRAPHMAX", reg) == "graphmax"  # case does not hide a match
    assert closest("zzzz", reg) is None
    assert str(unknown_name("widget", "zzzz", reg)) == "unknown widget 'zzzz'; known widgets: graphmax, sparsemax"


@pytest.mark.parametrize(
    "argv, words",
    [
        (["generate", "--model", "smollm2-13m"], "unknown base model 'smollm2-13m': did you mean 'smollm2-135m'?"),
        (["generate", "--model", "tiny-randm"], "did you mean 'tiny-random'?"),
        (["generate", "--layer", "grapmax"], "unknown output layer 'grapmax': did you mean 'graphmax'?"),
        (["generate", "--layer", "Sparsemax"], "unknown output layer 'Sparsemax': did you mean 'sparsemax'?"),
        (["generate", "--layer", "graphmax(lamb=1.0)"], "has no parameter 'lamb': did you mean 'lam'?"),
        (["run", "--lineup", "defualt"], "unknown lineup 'defualt': did you mean 'default'?"),
        (["run", "--lineup", "lambda-swep"], "did you mean 'lambda-sweep'?"),
        (
            ["score", "--generations", "X", "--metrics", "rep,sacreblue"],
            "metric 'sacreblue': did you mean 'sacrebleu'?",
        ),
    ],
)
def test_unknown_names_in_every_registry_exit_2_with_the_closest_name(tmp_path, cli, argv, words):
    (tmp_path / "x.txt").write_text("a text\n")
    argv = [str(tmp_path / "x.txt") if a == "X" else a for a in argv]
    if argv[0] in ("generate", "run"):
        argv += ["--runs-dir", str(tmp_path / "runs"), "--no-progress"]
    if argv[0] == "generate":
        argv += ["--suite", "smoke"]
    rc, _, err = cli(*argv)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("maxbench: error: "), err
    assert words in err, err
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_every_registered_layer_and_metric_is_the_class_of_that_name():
    from maxbench.benchmark.metrics.base import METRICS, get_metric
    from maxbench.systems.system_strings import LAYERS, layer_class

    for name in LAYERS:  # kerbs and posg: maxbench.systems.layers.kerbs.layer / posg_layer
        assert layer_class(name).name == name
    for name in METRICS:
        assert get_metric(name).name == name
    from maxbench.benchmark.metrics.names import (  # kept apart: --help imports no scipy
        DEFAULT_METRICS,
        FIXED_EVALUATOR_METRICS,
        PAPER_METRICS,
    )

    # ref-ppl and attr-acc join a run's metrics by themselves (reference log-probabilities, a conditional
    # suite); heldout-bleu is scored when named, on a suite that names its held-out split
    others = ("ref-ppl", "attr-acc", "heldout-bleu")
    named = DEFAULT_METRICS + PAPER_METRICS + FIXED_EVALUATOR_METRICS
    assert sorted(named) == sorted(n for n in METRICS if n not in others)
    assert not set(DEFAULT_METRICS) & set(PAPER_METRICS)


@pytest.mark.parametrize(("label", "near"), [("top_pp=0.9", "top_p"), ("topk=3", "top_k"), ("greedyy", "greedy")])
def test_a_misspelled_decoding_key_names_the_closest_one(label, near):
    from maxbench.systems.decoding import DecodingSetting

    with pytest.raises(MaxbenchError) as err:
        DecodingSetting.parse(label)
    assert f"did you mean '{near}'?" in str(err.value) and "\n" not in str(err.value)
