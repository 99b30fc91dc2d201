"""The benchmark scripts (benchmarks/*.py): each one runs end to end on a tiny setting and prints
its figures with the load average, and each refuses bad input with one line and exit status 2,
never a traceback (benchmarks/harness.py, maxbench.cli.run_guarded).

The scripts run in this process (``runpy``, as ``python benchmarks/<name>.py`` would), so they
share the loaded libraries; one test runs a script as its own program."""

import argparse
import runpy
import subprocess
import sys

import pytest
import torch

from tests.support.paths import ROOT

BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name != "harness.py")

# Each script's tiniest real run and a line its output must hold.
SMOKE = {
    "adapter_steps.py": (["--model", "tiny-random", "--steps", "1", "--repeats", "2", "--batch", "2"], "/ fctg"),
    "add_system.py": (
        ["--model", "tiny-random", "--systems", "2", "--prompts", "2", "--new-tokens", "4", "--metrics", "distinct"]
        + ["--n-resamples", "50", "--workers", "1"],
        "add / rerun",
    ),
    "cpu_arithmetic.py": (["--batch-size", "2", "--new-tokens", "3", "--repeats", "1"], "pinned/native"),
    "explorer_size.py": (["--prompts", "4", "--systems", "2", "--tokens", "5"], "first render (Chromium)"),
    "finite_check.py": (["--batch-size", "2", "--repeats", "1"], "same answer"),
    "generation_overhead.py": (["--batch-sizes", "2", "--new-tokens", "3", "--repeats", "1"], "dev/cpu"),
    "graph_products.py": (["--corpora", "food-reviews", "--batch-sizes", "2", "--repeats", "1"], "same bits"),
    "graphmax_decode.py": (
        ["--corpora", "food-reviews", "--batch-sizes", "2", "--new-tokens", "3", "--repeats", "1", "--show", "1"],
        "graphmax exact",
    ),
    # one thread, as each of the test command's two workers has (its default, 2, made the kernels wait at
    # OpenMP's barriers for a core the other worker held: minutes)
    "graphmax_kernels.py": (
        ["--corpora", "food-reviews", "--batch-sizes", "2", "--repeats", "1", "--threads", "1"],
        "kernels (default)",
    ),
    "head_prepare.py": (["--positions", "64", "--repeats", "1"], "same bits: yes"),
    "head_training.py": (
        ["--budget-tokens", "1000", "--kerbs", "epochs=1", "--threads", "1"],
        "test perplexity",
    ),
    "model_conversion.py": (["--gguf", "{tiny_gguf}"], "same files"),
    "multinomial.py": (
        ["--batch-size", "2", "--repeats", "1"],
        "same tokens and generator states: yes; device generator",
    ),
    "parallel_run.py": (
        ["--prompts", "2", "--batch-size", "2", "--new-tokens", "3", "--schedules", "seq1", "--systems", "softmax"],
        "same generations as seq1",
    ),
    "posg_class_mass.py": (["--repeats", "1"], "bit-identical"),
    "rating_load.py": (
        ["--annotators", "2", "--pages", "2", "--think-ms", "0", "--synchronous", "FULL"],
        "0 lost: met",
    ),
    "self_bleu.py": (["--texts", "20", "--tokens", "20", "--nltk-texts", "3"], "speed-up"),
    "sparsemax_threshold.py": (["--batch-size", "2", "--repeats", "1"], "graphmax paper steps"),
    "top_p.py": (["--batch-size", "2", "--repeats", "1"], "same output: yes"),
    "wiki_markup.py": (["--articles", "3"], "same prose: yes"),
}

# Bad input each script refuses, and what its one line must say.
BAD = [
    ("add_system.py", ["--add", "smollm2-135m/nope(x=1)/top_p=0.9"], "unknown output layer 'nope'"),
    ("add_system.py", ["--add", "smollm2-135m/softmax/top_p=0.9"], "is already a system of the lineup"),
    ("add_system.py", ["--prompts", "0"], "'0' must be 1 or more"),
    ("graphmax_decode.py", ["--corpora", "nope"], "unknown corpus 'nope'"),
    ("graphmax_decode.py", ["--model", "nope"], "unknown base model 'nope'"),
    ("graphmax_decode.py", ["--batch-sizes", "16,,48"], "give comma-separated integers"),
    ("graphmax_decode.py", ["--lam", "-1"], "lam must be a finite number >= 0"),
    ("graphmax_decode.py", ["--decoding", "top_p=7"], "top_p must be in (0, 1]"),
    ("graphmax_decode.py", ["--layers", "softmax,nope"], "unknown layer 'nope'"),
    ("graphmax_kernels.py", ["--batch-sizes", "0"], "'0' must be 1 or more"),
    ("graphmax_kernels.py", ["--solvers", "exact,x"], "exact, paper or both"),
    ("graph_products.py", ["--threads", "1,x"], "'x' is not an integer"),
    ("top_p.py", ["--top-p", "1.5"], "every top-p must lie in (0, 1]"),
    ("finite_check.py", ["--threads", "0"], "'0' must be 1 or more"),
    ("multinomial.py", ["--repeats", "0"], "'0' must be 1 or more"),
    ("sparsemax_threshold.py", ["--batch-size", "-2"], "'-2' must be 1 or more"),
    ("head_training.py", ["--corpus", "nope"], "unknown corpus 'nope'"),
    ("head_training.py", ["--kerbs", "lr_thta=1"], "unknown key 'lr_thta'"),
    ("head_training.py", ["--posg", "lm_prior"], "write key=value"),
    ("generation_overhead.py", ["--suite", "nope"], "unknown suite 'nope'"),
    ("generation_overhead.py", ["--decodings", "greedy,beam"], "unknown decoding 'beam'"),
    ("generation_overhead.py", ["--dtype", "bf16"], "dtype=bf16 is refused on the CPU"),
    ("graphmax_decode.py", ["--generator", "gpu"], "unknown generator 'gpu'; use cpu or device"),
    ("cpu_arithmetic.py", ["--new-tokens", "zero"], "'zero' is not an integer"),
    ("explorer_size.py", ["--systems", "9"], "at most 8 synthetic systems"),
    ("self_bleu.py", ["--texts", "1"], "give 2 or more"),
    ("posg_class_mass.py", ["--vocab", "10"], "at least 5377"),
    ("head_prepare.py", ["--positions", "0"], "'0' must be 1 or more"),
    ("model_conversion.py", ["--gguf", "/nonexistent.gguf"], "/nonexistent.gguf is not a file"),
    ("model_conversion.py", ["--gguf", str(ROOT / "README.md")], "README.md is not a GGUF file"),
    ("adapter_steps.py", ["--adapters", "lora,nope"], "unknown adapter 'nope'"),
    ("adapter_steps.py", ["--adapters", "lora", "--baseline", "fctg"], "--baseline fctg is not among --adapters"),
    ("model_conversion.py", ["--model", "nope"], "invalid choice: 'nope'"),
    ("parallel_run.py", ["--schedules", "w9"], "unknown schedule 'w9'"),
    ("parallel_run.py", ["--systems", "nope(x=1)"], "unknown output layer 'nope'"),
    ("parallel_run.py", ["--workdir", "/proc/maxbench-nope"], "cannot use /proc/maxbench-nope"),
    ("rating_load.py", ["--synchronous", "FAST"], "unknown mode 'FAST'"),
    ("rating_load.py", ["--think-ms", "-3"], "must be a finite number, 0 or more"),
    ("wiki_markup.py", ["--articles", "0"], "'0' must be 1 or more"),
]


@pytest.fixture
def run_script(monkeypatch, capsys):
    """Run benchmarks/<name> as ``__main__`` with the given arguments: (exit code, stdout, stderr)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    threads = torch.get_num_threads()

    def run(name: str, *args: str):
        monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / name), *args])
        with pytest.raises(SystemExit) as stop:
            runpy.run_path(str(BENCHMARKS / name), run_name="__main__")
        out, err = capsys.readouterr()
        return stop.value.code, out, err

    yield run
    torch.set_num_threads(threads)  # the scripts set torch's threads deliberately


def test_every_script_has_a_smoke_run_and_bad_input():
    assert sorted(SMOKE) == SCRIPTS
    assert {name for name, _, _ in BAD} == set(SCRIPTS)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.browser) if n == "explorer_size.py" else n for n in SCRIPTS]
)
def test_the_script_runs_end_to_end_on_a_tiny_setting(name, run_script, request):
    args, expected = SMOKE[name]
    if "{tiny_gguf}" in args:
        args = [str(request.getfixturevalue("tiny_gguf")) if a == "{tiny_gguf}" else a for a in args]
    code, out, err = run_script(name, *args)
    assert code == 0, err[-2000:]
    assert expected in out
    assert "load average" in out
    assert "Traceback" not in err


@pytest.mark.parametrize("name,args,message", BAD, ids=[f"{n}-{' '.join(a)}" for n, a, _ in BAD])
def test_bad_input_is_one_line_and_exit_status_2(name, args, message, run_script):
    code, _, err = run_script(name, *args)
    assert code == 2
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"{name}: error: ") and message in last, err


def test_a_script_run_as_a_program_refuses_bad_input_in_one_line():
    p = subprocess.run(
        [sys.executable, str(BENCHMARKS / "graphmax_decode.py"), "--corpora", "food-reviews,nope"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "graphmax_decode.py: error: unknown corpus 'nope': did you mean 'news'? known corpora: "
        "food-reviews, movie-reviews, news, wikipedia"
    ]


def test_the_harness_argument_types_and_timer(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import harness

    assert harness.positive_ints("16, 48") == [16, 48]
    assert harness.names("food-reviews,movie-reviews") == ["food-reviews", "movie-reviews"]
    assert harness.nonnegative_int("0") == 0 and harness.nonnegative_float("0.5") == 0.5
    for parse, text in (
        (harness.positive_int, "0"),
        (harness.positive_int, "1.5"),
        (harness.positive_ints, "16,"),
        (harness.names, "a,,b"),
        (harness.nonnegative_int, "-1"),
        (harness.nonnegative_float, "nan"),
        (harness.nonnegative_float, "inf"),
    ):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
    order = []
    medians, last = harness.alternate(
        {"a": lambda x: order.append("a") or x + 1, "b": lambda x: order.append("b") or x}, 3, 1
    )
    assert order == ["a", "b", "b", "a", "a", "b"]  # alternating, so noise hits both alike
    assert last == {"a": 2, "b": 1} and set(medians) == {"a", "b"} and all(t >= 0 for t in medians.values())
