"""Model options per model in a lineup (``[model_args."MODEL"]``, benchmark/run/lineup.py): checked on loading,
given to that model only (the command line's ``--model-args`` over them), and part of the run's and the
model's identity; a lineup without them keeps the identity runs had before."""

import json
import subprocess
import sys

import pytest

from maxbench.benchmark.data.suites import load_suite
from maxbench.benchmark.run.lineup import load_lineup
from maxbench.benchmark.run.workers import cpu_cores
from maxbench.errors import MaxbenchError
from maxbench.rundir import RunPlan
from maxbench.systems.models import folder_identity, model_identity, tiny_random_model
from tests.support.paths import ROOT

TINY = "tiny-random/softmax/greedy,max_new_tokens=4"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The tiny random Llama saved as a local model folder: a model whose identity an option moves
    (``trust_remote_code`` does not count for a built-in) and that runs on the CPU."""
    model, tok, _ = tiny_random_model()
    path = tmp_path_factory.mktemp("models") / "tiny"
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


def _lineup(tmp_path, systems, extra=""):
    rows = [{"id": f"p{i}", "prompt": f"Review {i}: the soup was", "reference": f"cold {i}"} for i in range(3)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "three"\nfile = "p.jsonl"\n')
    path = tmp_path / "lineup.toml"
    path.write_text(
        f'name = "t"\nsuite = "{tmp_path / "s.toml"}"\nbatch_size = 2\nmetrics = ["distinct"]\n'
        f"systems = {json.dumps(systems)}\n{extra}"
    )
    return path


def _run_args(lineup, tmp_path, run_id="r", *extra):
    return [
        "run",
        "--lineup",
        lineup,
        "--runs-dir",
        tmp_path / "runs",
        "--run-id",
        run_id,
        "--out",
        tmp_path / f"lb-{run_id}",
        "--n-resamples",
        "0",
        "--threads",
        "1",
        "--no-progress",
        *extra,
    ]


def _plan(lineup, tmp_path, model_args=None):
    reg = load_lineup(str(lineup))
    return RunPlan(
        run_dir=tmp_path / "runs" / "r",
        suite=load_suite(reg.suite),
        systems=reg.systems,
        batch_size=reg.batch_size,
        lineup=reg.name,
        model_args=model_args or {},
        per_model_args=reg.model_args,
    )


def test_a_lineups_options_are_checked_normalised_and_reach_that_model_only(tmp_path, folder, cli):
    systems = [TINY, f"{folder}/softmax/greedy,max_new_tokens=4"]
    extra = f'[model_args."{folder}"]\ntrust_remote_code = true\ndtype = "float32"\n'
    lineup = _lineup(tmp_path, systems, extra)
    # normalised by the function --model-args uses: float32 is fp32
    assert load_lineup(str(lineup)).model_args == {str(folder): {"dtype": "fp32", "trust_remote_code": True}}
    rc, out, err = cli(*_run_args(lineup, tmp_path, "r", "--workers", "1"))
    assert rc == 0, err
    manifest = json.loads((tmp_path / "runs" / "r" / "manifest.json").read_text())
    models = manifest["models"]
    # the folder is loaded with its options (and identified by them); tiny-random with none
    assert models[str(folder)]["options"] == {"trust_remote_code": True}
    assert models[str(folder)]["hash"] == model_identity(folder, {"trust_remote_code": True}, name=str(folder))
    assert models[str(folder)]["hash"] != folder_identity(folder)
    assert "options" not in models["tiny-random"]
    assert manifest["identity"]["per_model_args"] == {str(folder): {"dtype": "fp32", "trust_remote_code": True}}
    assert "model_args" not in manifest["identity"]
    # the same run directory with the lineup's options gone is another run: its rows are not shared
    rc, _, err = cli(*_run_args(_lineup(tmp_path, systems), tmp_path, "r", "--workers", "1"))
    assert rc == 2 and "was made by a different run (differs in: per_model_args)" in err, err


@pytest.mark.parametrize(
    "extra, words",
    [
        ('[model_args."tiny-random"]\ndtyp = "bf16"\n', "unknown model option 'dtyp': did you mean 'dtype'?"),
        ('[model_args."tiny-random"]\ndtype = "int3"\n', "unknown model dtype 'int3'"),
        ('[model_args."tiny-random"]\ntrust_remote_code = "maybe"\n', "trust_remote_code must be true or false"),
        ('[model_args."tiny-random"]\ndtype = 16\n', "option 'dtype' must be a string or true/false"),
        ('[model_args."tiny-random"]\nrevision = "v1"\n', "model 'tiny-random' has no revisions"),
        (
            '[model_args."tiny-randon"]\ndtype = "fp32"\n',
            "model_args names model 'tiny-randon', which none of its systems uses (did you mean 'tiny-random'?); "
            "its models: tiny-random",
        ),
        (
            '[model_args."smollm2-135m"]\ndtype = "fp32"\n',
            "model_args names model 'smollm2-135m', which none of its systems uses; its models: tiny-random",
        ),
        ('[model_args]\ndtype = "bf16"\n', "'model_args' holds a table per model"),
        ('model_args = "dtype=bf16"\n', "'model_args' must be a table per model"),
    ],
)
def test_bad_options_of_a_lineup_are_one_line_and_exit_2(tmp_path, cli, extra, words):
    lineup = _lineup(tmp_path, [TINY], extra)
    rc, out, err = cli(*_run_args(lineup, tmp_path))
    assert rc == 2 and err.count("\n") == 1 and words in err and f"lineup {lineup}" in err, err
    assert not (tmp_path / "runs").exists()


def test_each_model_is_checked_at_its_own_revision_and_the_command_line_wins(tmp_path, monkeypatch):
    import maxbench.systems.models as models

    systems = ["org/a/softmax/greedy", "org/b/softmax/greedy"]
    lineup = _lineup(tmp_path, systems, '[model_args."org/a"]\nrevision = "v2"\ndtype = "bf16"\n')
    reached, loaded = [], []

    def reachable(name, revision=None):
        reached.append((name, revision))
        return name

    def load(name, device=None, threads=None, options=None):
        loaded.append((name, options))
        raise MaxbenchError("stop: no hub in a test")

    monkeypatch.setattr(models, "check_model_reachable", reachable)
    monkeypatch.setattr(models, "load_model", load)
    from maxbench.benchmark.run.runner import preflight

    with pytest.raises(MaxbenchError, match="stop"):
        preflight(_plan(lineup, tmp_path), device="cpu", progress=False)
    assert reached == [("org/a", "v2"), ("org/b", None)]
    assert loaded == [("org/a", {"dtype": "bf16", "revision": "v2"})]
    # --model-args applies to every model, over a lineup's option of the same key
    plan = _plan(lineup, tmp_path, model_args={"revision": "v3"})
    assert plan.options_for("org/a") == {"dtype": "bf16", "revision": "v3"}
    assert plan.options_for("org/b") == {"revision": "v3"}
    reached.clear()
    with pytest.raises(MaxbenchError, match="stop"):
        preflight(plan, device="cpu", progress=False)
    assert reached == [("org/a", "v3"), ("org/b", "v3")]
    # a revision written in the system string and a different one in the lineup: one line, on loading
    pinned = _lineup(tmp_path, ["org/a@v1/softmax/greedy"], '[model_args."org/a@v1"]\nrevision = "v2"\n')
    with pytest.raises(MaxbenchError, match=r"names revision 'v1' but its model options give revision=v2; give one"):
        load_lineup(str(pinned))


def test_runs_that_differ_in_one_models_options_have_other_identities(tmp_path, folder):
    systems = [TINY, f"{folder}/softmax/greedy"]
    plain = _plan(_lineup(tmp_path, systems), tmp_path)
    trusted = _plan(_lineup(tmp_path, systems, f'[model_args."{folder}"]\ntrust_remote_code = true\n'), tmp_path)
    assert trusted.identity() != plain.identity()
    assert trusted.identity()["per_model_args"] == {str(folder): {"trust_remote_code": True}}
    # and the model's identity, which keys its hidden-state caches and trained heads
    assert model_identity(folder, trusted.options_for(str(folder))) != model_identity(
        folder, plain.options_for(str(folder))
    )
    assert trusted.options_for("tiny-random") == {}


def test_a_plan_without_per_model_options_keeps_its_identity(tmp_path):
    suite = load_suite("smoke")
    before = {  # what RunPlan.identity() gave before per-model options existed, in its order
        "suite": suite.describe() | {"path": None},
        "systems": [],
        "samples": 1,
        "seed": 1234,
        "batch_size": 8,
        "corpus": None,
        "registry": None,
        "reference_ppl": True,
    }
    for empty in ({}, {"tiny-random": {}}):
        plan = RunPlan(run_dir=tmp_path, suite=suite, systems=[], per_model_args=empty)
        assert json.dumps(plan.identity()) == json.dumps(before)
        cli_only = RunPlan(
            run_dir=tmp_path, suite=suite, systems=[], model_args={"dtype": "fp32"}, per_model_args=empty
        )
        assert json.dumps(cli_only.identity()) == json.dumps({"model_args": {"dtype": "fp32"}} | before)
    # the committed runs of the built-in lineups still resume: their recorded identity, byte for byte
    for name, run in (("base-lms", "base-lms-food-reviews"), ("decoding-baselines", "decoding-baselines-food-reviews")):
        path = ROOT / "results" / name / "runs" / run / "manifest.json"
        if not path.exists():
            pytest.skip(f"{path} is not here")
        reg = load_lineup(name)
        assert reg.model_args == {}
        plan = RunPlan(
            run_dir=path.parent,
            suite=load_suite(reg.suite),
            systems=reg.systems,
            samples=reg.samples,
            seed=reg.seed,
            batch_size=reg.batch_size,
            corpus=reg.corpus,
            lineup=reg.name,
            per_model_args=reg.model_args,
        )
        assert json.dumps(plan.identity()) == json.dumps(json.loads(path.read_text())["identity"])


@pytest.mark.skipif(not sys.platform.startswith("linux") or cpu_cores() < 2, reason="two workers need two cores")
def test_workers_load_each_model_with_the_lineups_options(tmp_path, folder):
    """The workers read the lineup file again: a worker without the options would write another identity,
    and the parent's run would then be refused as a different run."""
    systems = [TINY, f"{folder}/softmax/greedy,max_new_tokens=4"]
    lineup = _lineup(tmp_path, systems, f'[model_args."{folder}"]\ntrust_remote_code = true\n')
    cmd = [sys.executable, "-m", "maxbench", *map(str, _run_args(lineup, tmp_path, "w", "--workers", "2"))]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "generated in 2 worker processes" in done.stdout
    manifest = json.loads((tmp_path / "runs" / "w" / "manifest.json").read_text())
    assert manifest["models"][str(folder)]["options"] == {"trust_remote_code": True}
    assert manifest["identity"]["per_model_args"] == {str(folder): {"trust_remote_code": True}}
