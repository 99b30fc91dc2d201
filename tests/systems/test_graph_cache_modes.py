"""Caches that maxbench writes atomically (a corpus graph, a converted model folder, an unpacked asset)
get the mode the umask gives, as a plain open() or mkdir would, so colleagues sharing a cache can read
them: a temporary file or folder alone would leave them 0600 / 0700."""

from __future__ import annotations

import os
import stat

import pytest

from maxbench.systems.graph import build_graph, save_graph


@pytest.fixture
def umask_022(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXBENCH_HOME", str(tmp_path))
    old = os.umask(0o022)
    yield tmp_path
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_saved_graph_file_gets_the_umasks_mode(umask_022):
    g = build_graph([[0, 1, 2, 1]], vocab_size=3, tokenizer_hash="t" * 64, corpus_sha256="c" * 64)
    path = save_graph(g, umask_022 / "graphs" / "x.npz")
    assert _mode(path) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["x.npz"]  # no temporary left beside it


def test_a_converted_model_folder_gets_the_umasks_mode(umask_022, monkeypatch):
    """gguf_cache with the conversion itself replaced by the tiny random model: what is checked is
    how the folder is put in place, not transformers' GGUF reader."""
    import transformers

    from maxbench.systems import models

    model, tok, _ = models.tiny_random_model()
    src = umask_022 / "asset"
    src.mkdir()
    (src / models.GGUF_MODELS["smollm2-135m"].gguf).write_bytes(b"not read")
    monkeypatch.setattr(models, "fetch", lambda name: src)
    monkeypatch.setattr(models, "require_conversion_space", lambda *a: None)  # it reads the GGUF header
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: model)
    out = models.gguf_cache("smollm2-135m")
    assert out == umask_022 / "models" / "smollm2-135m" and (out / "maxbench.json").is_file()
    assert _mode(out) == 0o755
    assert _mode(out / "model.safetensors") == 0o644
    assert [p.name for p in out.parent.iterdir()] == ["smollm2-135m"]


def test_an_interrupted_folder_leaves_the_old_one_and_no_temporary(umask_022):
    from maxbench.fileio import atomic_dir

    final = umask_022 / "cache"
    final.mkdir()
    (final / "old").write_text("kept")
    with pytest.raises(RuntimeError), atomic_dir(final) as tmp:
        (tmp / "new").write_text("half")
        raise RuntimeError("interrupted")
    assert [p.name for p in umask_022.iterdir() if p.name != "cache"] == []
    assert [p.name for p in final.iterdir()] == ["old"]
