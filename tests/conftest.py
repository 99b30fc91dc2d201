import os
from collections import Counter

import pytest

import maxbench  # noqa: F401  (pins the CPU arithmetic before any test loads NumPy or torch)
from tests.support.paths import ROOT


def pytest_configure(config):
    """In a pytest-xdist worker, torch (and so graphmax's numba kernels, whose thread count the
    kernel loader sets to torch's) runs on the worker's share of the cores: one thread each for the
    test command's two workers on two cores.

    Without this a worker ran two threads: a test module imports numba, so numba's pool has a thread
    per core, and launching that OpenMP pool sets OpenMP's thread count, which is torch's, to the
    pool's size even under OMP_NUM_THREADS=1. Two workers then ran four threads on two cores, and
    every small parallel kernel waited at OpenMP's barrier for a thread the other worker held (a
    gradcheck of 40k kernel calls ran for minutes). The pool keeps its threads, so a test that sets
    torch's threads to 2 still runs the kernels on two."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    import numba
    import torch

    from maxbench.benchmark.run.workers import cpu_cores

    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)  # launches the pool (and resets OpenMP's count)
    torch.set_num_threads(max(1, cpu_cores() // int(workers)))


#: Test files of a few tests that take a minute or more each (subprocesses, real models, browsers).
#: pytest-xdist would hand the files out most tests first, so these came last and one worker could
#: start one of them while the other had nothing left; the test command passes
#: ``--no-loadscope-reorder`` and they go first, longest first (the rest follow most tests first).
#: A file missing here moves the wall time only, never what runs.
LONG_FILES = (
    "tests/systems/test_assets_gemma.py",
    "tests/end_to_end/test_benchmark_scripts.py",
    "tests/benchmark/run/test_workers.py",
    "tests/end_to_end/test_cpu_independence.py",
    "tests/end_to_end/test_docs_examples.py",
    "tests/end_to_end/test_explorer_browser.py",
    "tests/human_eval/judges/test_judge.py",
    "tests/end_to_end/test_rating_app_browser.py",
    "tests/end_to_end/test_crowd_browser.py",
)


def pytest_collection_modifyitems(config, items):
    """The files in the order the docstring of ``LONG_FILES`` gives; each file's tests in their order."""
    counts = Counter(item.nodeid.split("::")[0] for item in items)
    rank = {name: i for i, name in enumerate(LONG_FILES)}

    def key(item):
        name = item.nodeid.split("::")[0]
        return rank.get(name, len(rank)), -counts[name], name

    items.sort(key=key)


def run_cli(argv, capsys):
    """Run the maxbench CLI in-process; returns (exit code, stdout, stderr)."""
    from maxbench.cli import main

    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def cli(capsys):
    return lambda *argv: run_cli(argv, capsys)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh, empty MAXBENCH_HOME for the test."""
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def no_plugins():
    """No plugin registered before or after the test (a module asks for it with
    ``pytestmark = pytest.mark.usefixtures("no_plugins")``)."""
    from maxbench import plugins

    plugins.forget()
    yield
    plugins.forget()


@pytest.fixture(scope="session")
def smollm2():
    """The real embedded model, loaded once per test session."""
    from maxbench.systems.models import load_model

    return load_model("smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def tiny():
    from maxbench.systems.models import load_model

    return load_model("tiny-random", device="cpu")


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """A GGUF file transformers loads as a one-block Llama: byte-level BPE over 32 tokens, Q8_0
    weights (dequantised on loading, as SmolLM2's Q4_1 are) and fp32 norms, seeded."""
    import gguf
    import numpy as np

    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    hidden, ffn = 32, 64  # Q8_0 packs rows in blocks of 32
    tokens = ["<|endoftext|>", "<|im_end|>"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["Ġ", "Ġa", "Ġb", "ab"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(1)
    w.add_feed_forward_length(ffn)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hidden // 2)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.NORMAL] * (len(tokens) - 2))
    w.add_token_merges(["Ġ a", "Ġ b", "a b"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    rng = np.random.default_rng(0)
    q8 = gguf.GGMLQuantizationType.Q8_0

    def matrix(name, rows, cols):
        data = gguf.quants.quantize((rng.standard_normal((rows, cols)) * 0.1).astype(np.float32), q8)
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=q8)

    matrix("token_embd.weight", len(tokens), hidden)
    for name in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"):
        w.add_tensor(name, np.ones(hidden, np.float32))
    for name, rows, cols in (
        ("attn_q", hidden, hidden),
        ("attn_k", hidden // 2, hidden),
        ("attn_v", hidden // 2, hidden),
        ("attn_output", hidden, hidden),
        ("ffn_gate", ffn, hidden),
        ("ffn_up", ffn, hidden),
        ("ffn_down", hidden, ffn),
    ):
        matrix(f"blk.0.{name}.weight", rows, cols)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def artifacts_dir():
    d = ROOT / os.environ.get("MAXBENCH_TEST_ARTIFACTS", "test-artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def bbc_paragraphs():
    """``bbc_paragraphs(k)``: paragraphs 2-4 (after the headline) of the first k BBC articles of each
    topic (the ``bbc`` asset), real text for the metric tests."""
    from maxbench.systems.assets import fetch

    def paragraphs(per_topic: int) -> list[str]:
        root = fetch("bbc")
        out = []
        for topic in sorted(p for p in root.iterdir() if p.is_dir()):
            for path in sorted(topic.glob("*.txt"))[:per_topic]:
                try:
                    text = path.read_text(encoding="utf-8")
                except UnicodeDecodeError:
                    continue
                out += [p.strip() for p in text.split("\n\n")[1:4] if p.strip()]
        return out

    return paragraphs


@pytest.fixture(scope="session")
def postgres_cluster():
    """One throwaway PostgreSQL server (Debian's, on a private unix socket) per test session."""
    from maxbench.human_eval.testing.postgres import PostgresCluster

    cluster = PostgresCluster().start()
    yield cluster
    from maxbench.human_eval.store.db import dispose_engines

    dispose_engines()
    cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh, empty rating database on each backend the app supports: a SQLite file and a
    PostgreSQL database on the session's throwaway server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    else:
        yield request.getfixturevalue("postgres_cluster").new_database()
    from maxbench.human_eval.store.db import dispose_engines

    dispose_engines()


@pytest.fixture
def sqlite_url(tmp_path):
    """A fresh, empty SQLite rating database (for tests that need one backend only)."""
    yield f"sqlite:///{tmp_path / 'ratings.sqlite3'}"
    from maxbench.human_eval.store.db import dispose_engines

    dispose_engines()


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)
