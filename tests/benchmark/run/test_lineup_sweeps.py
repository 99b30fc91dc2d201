"""Sweeps in a lineup (benchmark/run/lineup.py): one system string varied over one decoding or layer
option, each value a system of its own in the option's order, recorded as ``{name: {knob, values,
systems}}``; every bad sweep is one line and exit status 2 before anything loads."""

import json

import pytest

from maxbench.benchmark.run.lineup import load_lineup

SAMPLE = "tiny-random/softmax/sample,max_new_tokens=8"


def _lineup(tmp_path, *entries):
    path = tmp_path / "sweeps.toml"
    path.write_text('name = "t"\nsuite = "smoke"\nsystems = [\n' + "".join(f"  {e},\n" for e in entries) + "]\n")
    return path


def _sweep(system, knob, values, extra=""):
    return f'{{ system = "{system}", sweep = {{ {knob} = {json.dumps(values)} }}{extra} }}'


def test_a_sweep_is_one_system_per_value_in_the_options_order_and_recorded(tmp_path):
    lineup = load_lineup(
        str(
            _lineup(
                tmp_path,
                _sweep(SAMPLE, "temperature", [1.3, 0.7, 1.0]),
                _sweep("tiny-random/graphmax(lam=1.0,solver=exact)/top_p=0.9", "lam", [3.0, 0.3]),
                _sweep("tiny-random/posg/sample", "tag_topk", [1, 3], ', name = "posg tags"'),
                '"tiny-random/softmax/top_p=0.9"',
            )
        )
    )
    temp = lineup.sweeps["tiny-random/softmax/temp=*,max_new_tokens=8"]
    assert (temp.knob, temp.values) == ("temp", (0.7, 1.0, 1.3))
    # each point is the system string a person would write, the value 1.0 being plain sampling
    assert temp.systems == (
        "tiny-random/softmax/temp=0.7,max_new_tokens=8",
        "tiny-random/softmax/sample,max_new_tokens=8",
        "tiny-random/softmax/temp=1.3,max_new_tokens=8",
    )
    lam = lineup.sweeps["tiny-random/graphmax(lam=*,solver=exact)/top_p=0.9"]
    assert lam.record() == {
        "knob": "lam",
        "values": [0.3, 3.0],
        "systems": [
            "tiny-random/graphmax(lam=0.3,solver=exact)/top_p=0.9",
            "tiny-random/graphmax(lam=3.0,solver=exact)/top_p=0.9",
        ],
    }
    assert lineup.sweeps["posg tags"].systems == (
        "tiny-random/posg(tag_topk=1)/sample",
        "tiny-random/posg(tag_topk=3)/sample",
    )
    assert [s.name for s in lineup.systems] == [
        *temp.systems,
        *lam.systems,
        *lineup.sweeps["posg tags"].systems,
        "tiny-random/softmax/top_p=0.9",
    ]
    assert lineup.systems[1].decoding.temperature == 1.0 and lineup.systems[3].build_layer().lam == 0.3


def test_a_point_two_sweeps_share_is_one_system(tmp_path):
    lineup = load_lineup(
        str(_lineup(tmp_path, _sweep(SAMPLE, "temp", [0.7, 1.0]), _sweep(SAMPLE, "top_p", [0.5, 1.0])))
    )
    assert [s.name for s in lineup.systems] == [
        "tiny-random/softmax/temp=0.7,max_new_tokens=8",
        SAMPLE,
        "tiny-random/softmax/top_p=0.5,max_new_tokens=8",
    ]
    assert [sw.systems[-1] for sw in lineup.sweeps.values()] == [SAMPLE, SAMPLE]


def test_the_builtin_frontier_lineup_loads_with_its_sweeps():
    lineup = load_lineup("frontier")
    assert lineup.suite == "food-reviews" and len(lineup.sweeps) == 10
    assert all(5 <= len(s.systems) <= 7 for s in lineup.sweeps.values())
    knobs = sorted(s.knob for s in lineup.sweeps.values())
    assert knobs == ["eta", "lam", "min_p", "temp", "temp", "temp", "temp", "top_k", "top_p", "typical_p"]
    assert {"mauve", "self-bleu", "distinct", "bleu-n"} <= set(lineup.metrics)


@pytest.mark.parametrize(
    "entry, words",
    [
        (_sweep(SAMPLE, "temp", [0.7]), "has 1 point(s); a sweep needs two values or more"),
        (_sweep(SAMPLE, "lam", [0.3, 1.0]), "has no option 'lam' to sweep; its options: temp, top_k, top_p"),
        (
            _sweep("tiny-random/graphmax/sample", "lamb", [0.3, 1.0]),
            "has no option 'lamb' to sweep (did you mean 'lam'?)",
        ),
        (_sweep(SAMPLE, "max_new_tokens", [8, 16]), "has no option 'max_new_tokens' to sweep"),
        (_sweep("tiny-random/softmax/greedy", "temp", [0.7, 1.0]), "decodes greedily, so it has no temp"),
        (_sweep(SAMPLE, "temp", [0, 1.0]), "temp=0: temperature must be a finite number > 0"),
        (_sweep(SAMPLE, "top_p", [0.5, 1.2]), "top_p=1.2: top_p must be in (0, 1]"),
        (_sweep(SAMPLE, "min_p", [-0.1, 0.1]), "min_p=-0.1: min_p must be in [0, 1]"),
        (_sweep(SAMPLE, "eta", [0.001, 1.0]), "eta=1.0: eta must be in [0, 1)"),
        (_sweep(SAMPLE, "top_k", [0, 5]), "top_k takes whole numbers >= 1"),
        (
            _sweep("tiny-random/graphmax/sample", "lam", [-1.0, 1.0]),
            "lam=-1.0: graphmax: lam must be a finite number >= 0",
        ),
        (_sweep("tiny-random/posg/sample", "tag_topk", [-1, 2]), "posg tag_topk must be >= 0"),
        (_sweep(SAMPLE, "temp", [0.7, 0.70]), "values 0.7 and 0.7 name the same system"),
        (_sweep(SAMPLE, "temp", [1, 1.0]), "values 1 and 1.0 name the same system"),
        (_sweep(SAMPLE, "temp", ["hot", 1.0]), "temp must be a list of numbers"),
        (
            f'{{ system = "{SAMPLE}", sweep = {{ temp = [0.7, 1.0], top_p = [0.5, 0.9] }} }}',
            "varies 2 options (temp, top_p); a sweep varies exactly one",
        ),
        (_sweep(SAMPLE, "temp", [0.7, 1.0], ", swept = 1"), "unknown key 'swept': did you mean 'sweep'?"),
        (f"{_sweep(SAMPLE, 'temp', [0.7, 1.0])}, {_sweep(SAMPLE, 'temp', [0.8, 1.2])}", "two sweeps named"),
    ],
)
def test_a_bad_sweep_is_one_line_and_exit_2_before_anything_loads(tmp_path, cli, monkeypatch, entry, words):
    import maxbench.benchmark.run.runner as runner

    def never(*a, **k):
        raise AssertionError("a model was about to load")

    monkeypatch.setattr(runner, "preflight", never)
    monkeypatch.setattr(runner, "generate_run", never)
    rc, out, err = cli("run", "--lineup", _lineup(tmp_path, entry), "--runs-dir", tmp_path / "runs", "--no-progress")
    assert rc == 2 and words in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "runs").exists()
