"""Scoring's checks of a run's manifest: a system string agrees with the model, layer and adapter
recorded for it."""


def test_a_layer_with_parameters_agrees_with_its_system_string():
    from maxbench.benchmark.metrics.scoring import _system_strings_problem

    name = "smollm2-135m/graphmax(lam=1.0,solver=exact)/top_p=0.9"
    entry = {"model": "smollm2-135m", "layer": "graphmax", "layer_params": {"lam": 1.0}}
    assert _system_strings_problem({"systems": {name: entry}}) is None
    assert "contradicts" in _system_strings_problem({"systems": {name: entry | {"layer": "graph"}}})


def test_an_adapted_system_agrees_with_its_system_string():
    # the manifest records the base model and the adapter apart; the name's model part joins them
    from maxbench.benchmark.metrics.scoring import _system_strings_problem

    entry = {"model": "smollm2-135m", "layer": "softmax", "adapter": "lora", "adapter_params": {}}
    assert _system_strings_problem({"systems": {"smollm2-135m+lora/softmax/top_k=40": entry}}) is None
    with_params = entry | {"adapter": "fctg", "adapter_params": {"mu": 0.5, "alm": "cn"}}
    assert (
        _system_strings_problem({"systems": {"smollm2-135m+fctg(mu=0.5,alm=cn)/softmax/top_k=40": with_params}}) is None
    )
    assert "contradicts" in _system_strings_problem({"systems": {"smollm2-135m+prefix/softmax/top_k=40": entry}})
