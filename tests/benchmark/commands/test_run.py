"""maxbench run: lineup validation, kill -9 and resume, shards, re-rendering the leaderboard."""

import json
import signal
import subprocess
import sys
import time

import pytest

SYSTEMS = [
    "tiny-random/softmax/top_p=0.9,max_new_tokens=24",
    "tiny-random/sparsemax/top_p=0.9,max_new_tokens=24",
    "tiny-random/softmax/greedy,max_new_tokens=24",
]


def _registry(tmp_path, systems=SYSTEMS, extra=""):
    rows = [
        {"id": f"p{i:02d}", "prompt": f"Review {i}: the soup was", "reference": f"cold and salty, sadly {i}"}
        for i in range(12)
    ]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.toml").write_text('name = "twelve"\nfile = "p.jsonl"\n')
    reg = tmp_path / "reg.toml"
    reg.write_text(
        f'name = "t"\nsuite = "{tmp_path / "s.toml"}"\nsamples = 2\nbatch_size = 4\n'
        f'baseline = "{systems[0]}"\nmetrics = ["bleu-n", "self-bleu", "rep", "distinct", "rouge-l"]\n'
        f"systems = {json.dumps(systems)}\n{extra}"
    )
    return reg


def _cmd(reg, tmp_path, run_id, out, *extra):
    return [
        sys.executable,
        "-m",
        "maxbench",
        "run",
        "--lineup",
        str(reg),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--run-id",
        run_id,
        "--out",
        str(tmp_path / out),
        "--n-resamples",
        "200",
        "--threads",
        "1",
        "--workers",
        "1",  # one process (tests/test_parallel_run.py covers --workers)
        "--no-progress",
        *extra,
    ]


def _outputs(tmp_path, run_id, out):
    files = {"generations": tmp_path / "runs" / run_id / "generations.jsonl"}
    files |= {p.name: p for p in (tmp_path / out).rglob("*") if p.is_file()}
    return {k: v.read_bytes() for k, v in files.items()}


def test_kill_9_during_run_then_rerun_is_byte_identical(tmp_path):
    reg = _registry(tmp_path)
    subprocess.run(_cmd(reg, tmp_path, "clean", "lb-clean"), check=True, capture_output=True)
    proc = subprocess.Popen(
        _cmd(reg, tmp_path, "killed", "lb-killed"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    gen = tmp_path / "runs" / "killed" / "generations.jsonl"
    deadline = time.time() + 180
    while time.time() < deadline and (not gen.exists() or gen.read_bytes().count(b"\n") < 6):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 0 < gen.read_bytes().count(b"\n") < 3 * 12 * 2, "the kill must land mid-generation"
    assert not (tmp_path / "lb-killed" / "leaderboard.md").exists()
    subprocess.run(_cmd(reg, tmp_path, "killed", "lb-killed"), check=True, capture_output=True)
    clean, killed = _outputs(tmp_path, "clean", "lb-clean"), _outputs(tmp_path, "killed", "lb-killed")
    assert (
        set(clean)
        == set(killed)
        >= {"generations", "leaderboard.md", "leaderboard.csv", "leaderboard.html", "tradeoff.png", "steps.png"}
    )
    for name in clean:
        if name in ("leaderboard.md", "index.html"):  # name their source run directory (index.html: the explorer's)
            assert clean[name].replace(b"clean", b"X") == killed[name].replace(b"killed", b"X")
        elif name == "leaderboard.html":
            continue  # same table; embeds the same PNGs, compared above
        else:
            assert clean[name] == killed[name], name
    md = clean["leaderboard.md"].decode()
    # three systems in the compact table that leads and again in the full table under "All metrics"
    assert md.count("| `tiny-random/") == 6 and "\n## All metrics\n" in md
    assert "bleu-4" in md and "self-bleu-4" in md


def test_shards_then_merge_equal_one_process(tmp_path):
    reg = _registry(tmp_path)
    subprocess.run(_cmd(reg, tmp_path, "one", "lb-one"), check=True, capture_output=True)
    for i in range(2):
        p = subprocess.run(_cmd(reg, tmp_path, "sh", "lb-sh", "--shard", f"{i}/2"), capture_output=True, text=True)
        assert p.returncode == 0 and "without --shard" in p.stdout
    subprocess.run(_cmd(reg, tmp_path, "sh", "lb-sh"), check=True, capture_output=True)
    one, sh = _outputs(tmp_path, "one", "lb-one"), _outputs(tmp_path, "sh", "lb-sh")
    assert one["generations"] == sh["generations"] and one["leaderboard.csv"] == sh["leaderboard.csv"]


def test_leaderboard_rerenders_without_generating(tmp_path, cli):
    reg = _registry(tmp_path, SYSTEMS[:2])
    subprocess.run(_cmd(reg, tmp_path, "r", "lb"), check=True, capture_output=True)
    before = {n: (tmp_path / "lb" / n).read_bytes() for n in ("leaderboard.csv", "leaderboard.html")}
    rc, out, _ = cli("leaderboard", tmp_path / "runs" / "r", "--out", tmp_path / "lb2")
    assert rc == 0
    for name, data in before.items():
        assert (tmp_path / "lb2" / name).read_bytes() == data, name
    assert (tmp_path / "lb2" / "leaderboard.md").read_text().startswith("# maxbench leaderboard: t on twelve\n")
    rows = (tmp_path / "lb2" / "leaderboard.csv").read_text().splitlines()
    assert rows[0].startswith("system,bleu-2,bleu-2_ci_low,bleu-2_ci_high,bleu-2_p_vs_baseline")
    html = (tmp_path / "lb2" / "leaderboard.html").read_text()
    assert "data:image/png;base64," in html and "<script" not in html


@pytest.mark.parametrize(
    "systems, extra, words",
    [
        (["tiny-random/nosuch/greedy"], "", "unknown output layer 'nosuch'"),
        (["tiny-random/grapmax/greedy"], "", "unknown output layer 'grapmax': did you mean 'graphmax'?"),
        (["tiny-random/graphmax(lamb=1.0)/greedy"], "", "has no parameter 'lamb': did you mean 'lam'?"),
        (["tiny-random/graphmax(lam=-1.0)/greedy"], "", "lam"),
        (["tiny-random/softmax/greedy", "tiny-random/softmax/greedy"], "", "lists a system twice"),
        # a misspelled model in the second system fails before the first one generates
        (["tiny-random/softmax/greedy", "tiny-randon/softmax/greedy"], "", "did you mean 'tiny-random'?"),
        (SYSTEMS, "colour = 3\n", "unknown key 'colour'"),
        (SYSTEMS, "smaples = 3\n", "unknown key 'smaples': did you mean 'samples'?"),
        (SYSTEMS, "seed = 'one'\n", "'seed' must be a whole number >= 0"),
        (SYSTEMS, "", "unknown metric 'rouge': did you mean 'rouge-l'?"),
    ],
)
def test_bad_registries_exit_2(tmp_path, cli, systems, extra, words):
    reg = _registry(tmp_path, systems, extra)
    if "rouge" in words:
        reg.write_text(reg.read_text().replace('"rouge-l"]', '"rouge"]'))
    if "twice" in words:
        reg.write_text(reg.read_text().replace(f'baseline = "{systems[0]}"\n', ""))
    rc, _, err = cli("run", "--lineup", reg, "--runs-dir", tmp_path / "runs", "--out", tmp_path / "lb")
    assert rc == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "runs").exists()


def test_run_dir_of_another_registry_is_refused(tmp_path, cli):
    reg = _registry(tmp_path, SYSTEMS[:1])
    assert subprocess.run(_cmd(reg, tmp_path, "r", "lb"), capture_output=True).returncode == 0
    before = (tmp_path / "runs" / "r" / "generations.jsonl").read_bytes()
    other = _registry(tmp_path, SYSTEMS[1:2])
    rc, _, err = cli(
        "run",
        "--lineup",
        other,
        "--runs-dir",
        tmp_path / "runs",
        "--run-id",
        "r",
        "--out",
        tmp_path / "lb",
        "--no-progress",
    )
    assert rc == 2 and "was made by a different run" in err
    assert (tmp_path / "runs" / "r" / "generations.jsonl").read_bytes() == before


def test_builtin_lineups_are_valid():
    from maxbench.benchmark.run.lineup import builtin_lineups, load_lineup

    assert list(builtin_lineups()) == [
        "base-lms",
        "conditional",
        "decoding-baselines",
        "default",
        "frontier",
        "lambda-sweep",
    ]
    conditional = load_lineup("conditional")
    assert conditional.suite == "food-attrs" and "attr-acc" in conditional.metrics
    assert [s.adapter for s in conditional.systems] == [None, "lora", "prefix", "fctg"]
    assert {s.decoding.max_new_tokens for s in conditional.systems} == {96}
    reg = load_lineup("default")
    layers = [s.layer for s in reg.systems]
    assert layers == ["softmax", "sparsemax", "graphmax", "graphmax", "kerbs", "posg"]
    assert reg.baseline == reg.systems[0].name and reg.suite == "food-reviews"
    assert reg.name == "default" and reg.samples == 1 and reg.batch_size == 48 and "ms-jaccard" in reg.metrics
    baselines = load_lineup("decoding-baselines")
    samplers = {s.decoding.label for s in baselines.systems if s.layer == "softmax"}
    assert samplers == {"top_p=0.9", "typical_p=0.95", "epsilon=0.0006", "eta=0.002", "min_p=0.1"}
    assert {s.layer for s in baselines.systems} == {"softmax", "sparsemax", "graphmax", "kerbs", "posg"}
    assert {"mauve", "coherence", "diversity"} <= set(baselines.metrics) and baselines.suite == "food-reviews"
    sweep = load_lineup("lambda-sweep")
    assert sorted({dict(s.params).get("lam") for s in sweep.systems if s.layer == "graphmax"}) == [
        0.3,
        1.0,
        3.0,
        10.0,
        30.0,
    ]
