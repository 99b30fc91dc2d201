"""Options the commands share: run ids derived from suite and systems stay one plain folder name,
and the names earlier versions gave."""


def test_derived_run_ids_stay_one_plain_name():
    from maxbench.benchmark.commands.options import run_id

    assert run_id(None, "smoke", "tiny-random/softmax/top_p=0.9") == "smoke-tiny_random_softmax_top_p=0.9"
    long = run_id(
        None, "smoke", *[f"org/very-long-model-name/graphmax(lam={i}.0,solver=exact)/top_p=0.9" for i in range(5)]
    )
    assert len(long) <= 100 and "/" not in long and long.startswith("run-smoke-")
    assert run_id(None, "ünïcode", "m/softmax/greedy").isascii()


def test_run_directory_names_are_those_earlier_versions_gave():
    # Resuming an existing run, and the README's examples, depend on these names staying put.
    from maxbench.benchmark.commands.options import lineup_run_id, run_id

    assert lineup_run_id(None, "default", "food-reviews") == "default-food-reviews"
    assert run_id(None, "food-reviews", "smollm2-135m/softmax/top_p=0.9") == (
        "food_reviews-smollm2_135m_softmax_top_p=0.9"
    )
