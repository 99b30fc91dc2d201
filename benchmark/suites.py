"""Prompt suites: fixed, versioned prompt/reference files with a manifest and content hash.

A suite is a TOML manifest naming one data file (JSONL, CSV or TXT) and, for the built-in
suites, that file's sha256. Built-in suites live in ``benchmark/suites/`` and were made once
from the corpora's test splits by ``python -m maxbench.benchmark.suites build`` (deterministic);
their files are committed, and a manifest whose hash no longer matches its file is an
error. A user suite is the same kind of TOML file anywhere on disk::

    name = "my-suite"
    version = "1"
    file = "prompts.jsonl"      # relative to the manifest; .jsonl, .csv or .txt
    prompt_field = "prompt"     # JSONL/CSV column names (defaults shown)
    reference_field = "reference"
    id_field = "id"             # optional; default: <name>-<line number>
    sha256 = "..."              # optional; checked when given

A TXT file holds one prompt per line and no references.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import os_error

SUITE_DIR = Path(__file__).parent / "suites"


@dataclass(frozen=True)
class SuiteItem:
    id: str
    prompt: str
    reference: str


@dataclass
class Suite:
    name: str
    version: str
    items: list[SuiteItem]
    sha256: str  # of the data file's bytes
    path: Path
    description: str = ""

    def describe(self) -> dict:
        return {
            "name": self.name,
            "version": self.version,
            "sha256": self.sha256,
            "n_items": len(self.items),
            "path": str(self.path),
        }


def builtin_suites() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SUITE_DIR.glob("*.toml"))}


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise os_error(path, exc, "read") from None


def _text(path: Path, what: str) -> str:
    """A file's text as UTF-8, with the byte-order mark that spreadsheet programs write dropped."""
    data = _bytes(path)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise MaxbenchError(f"{what} {path} is not UTF-8 text (it starts like UTF-16); save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MaxbenchError(f"{what} {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _lines(text: str) -> list[str]:
    """The file's lines: only ``\\n`` (or ``\\r\\n``) ends one, unlike ``str.splitlines``, which also
    splits on U+2028, U+0085, form feed and other characters that a text may hold."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _kind(value) -> str:
    """A JSON value's kind, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _item_id(row: dict, idf: str, where: str, default: str, fmt: str) -> str:
    """An id is a non-empty string or an integer (``0`` is the id "0"); absent, it is ``default``."""
    if idf not in row or (fmt == "csv" and not (row[idf] or "").strip()):  # CSV: an empty cell is no id
        return default
    value = row[idf]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    got = "an empty string" if isinstance(value, str) else _kind(value)
    raise MaxbenchError(f"{where}: id ('{idf}') is {got}; an id is a non-empty string or an integer")


def _read_items(path: Path, fmt: str, spec: dict, name: str) -> list[SuiteItem]:
    text = _text(path, "suite file")
    pf, rf, idf = (
        spec.get("prompt_field", "prompt"),
        spec.get("reference_field", "reference"),
        spec.get("id_field", "id"),
    )
    rows: list[tuple[int, dict]] = []
    if fmt == "jsonl":
        for n, line in enumerate(_lines(text), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MaxbenchError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise MaxbenchError(f"{path}:{n}: not valid JSON (nested too deeply)") from None
            if not isinstance(row, dict):
                raise MaxbenchError(f"{path}:{n}: expected a JSON object with a '{pf}' field")
            rows.append((n, row))
    elif fmt == "csv":
        # a prompt may be longer than the csv module's default field limit (128 KiB); the model's
        # context, checked before generating, is the limit that matters
        csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
        reader = csv.DictReader(io.StringIO(text))
        try:
            if reader.fieldnames is None or pf not in reader.fieldnames:
                raise MaxbenchError(f"{path}: CSV has no '{pf}' column (columns: {reader.fieldnames})")
            rows = [(n, row) for n, row in enumerate(reader, 2)]
        except csv.Error as exc:
            raise MaxbenchError(f"{path}:{reader.line_num}: not valid CSV ({exc})") from None
    elif fmt == "txt":
        rows = [(n, {pf: line}) for n, line in enumerate(_lines(text), 1) if line.strip()]
    else:
        raise MaxbenchError(f"suite file {path}: unknown format '{fmt}' (use .jsonl, .csv or .txt)")
    items, seen = [], set()
    for n, row in rows:
        where = f"{path}:{n}"
        prompt = row.get(pf)
        if prompt is not None and not isinstance(prompt, str):
            raise MaxbenchError(f"{where}: prompt ('{pf}') is {_kind(prompt)}; a prompt is text")
        if not prompt or not prompt.strip():
            raise MaxbenchError(f"{where}: empty or missing prompt ('{pf}'); every item needs prompt text")
        ref = row.get(rf)  # absent or null: the item has no reference
        if ref is None:
            ref = ""
        elif not isinstance(ref, str):
            raise MaxbenchError(
                f"{where}: reference ('{rf}') is {_kind(ref)}; a reference is text (leave it out or null for none)"
            )
        item_id = _item_id(row, idf, where, f"{name}-{n:05d}", fmt)
        for field, value in ((pf, prompt), (rf, ref), (idf, item_id)):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a JSON escape such as \ud800 that names half a character
                raise MaxbenchError(f"{where}: '{field}' holds an invalid character (a lone surrogate)") from None
        if item_id in seen:
            raise MaxbenchError(f"{where}: duplicate item id '{item_id}'")
        seen.add(item_id)
        items.append(SuiteItem(item_id, prompt, ref))
    if not items:
        raise MaxbenchError(f"suite file {path} holds no prompts")
    return items


def load_suite(name_or_path: str) -> Suite:
    """Load a built-in suite by name or a user suite from its TOML manifest."""
    builtins = builtin_suites()
    if name_or_path in builtins:
        manifest = builtins[name_or_path]
    else:
        manifest = Path(name_or_path).expanduser()
        if manifest.suffix != ".toml" or not manifest.is_file():
            raise MaxbenchError(
                f"unknown suite '{name_or_path}'; built-in suites: {', '.join(builtins)} "
                f"(or give the path of a suite's .toml manifest; see 'maxbench suites')"
            )
    try:
        spec = tomllib.loads(_text(manifest, "suite manifest"))
    except tomllib.TOMLDecodeError as exc:
        raise MaxbenchError(f"suite manifest {manifest} is malformed: {exc}") from None
    for key in ("name", "file"):
        if not isinstance(spec.get(key), str):
            raise MaxbenchError(f"suite manifest {manifest} needs a '{key}' string")
    for key in ("prompt_field", "reference_field", "id_field", "format", "description", "sha256"):
        if key in spec and not isinstance(spec[key], str):
            raise MaxbenchError(f"suite manifest {manifest}: '{key}' must be a string")
    if "version" in spec and (not isinstance(spec["version"], str | int) or isinstance(spec["version"], bool)):
        raise MaxbenchError(f"suite manifest {manifest}: 'version' must be a string or an integer")
    data = (manifest.parent / spec["file"]).resolve()
    if not data.is_file():
        what = "is not a file" if data.exists() else "does not exist"
        raise MaxbenchError(f"suite manifest {manifest} names {spec['file']}, which {what}")
    digest = hashlib.sha256(_bytes(data)).hexdigest()
    if spec.get("sha256") and spec["sha256"] != digest:
        raise MaxbenchError(
            f"suite '{spec['name']}': {data.name} has sha256 {digest[:12]}..., but its manifest "
            f"says {spec['sha256'][:12]}...; the file changed: restore it or bump the suite version"
        )
    fmt = spec.get("format") or data.suffix.lstrip(".").lower()
    items = _read_items(data, fmt, spec, spec["name"])
    return Suite(
        name=spec["name"],
        version=str(spec.get("version", "1")),
        items=items,
        sha256=digest,
        path=manifest,
        description=spec.get("description", ""),
    )


# ---------------------------------------------------------------- building the built-in suites
def _review_items(texts: list[str], prefix: str, n: int, max_prompt_words: int = 8) -> list[dict]:
    """Prompt = the opening words of a held-out review (its first sentence when that is
    shorter than ``max_prompt_words`` words), reference = the rest of that review: the
    continuation the model is asked to write. Reviews of 20-200 words are used."""
    import re

    out = []
    for text in texts:
        words = text.split()
        if not 20 <= len(words) <= 200:
            continue
        first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].split()
        k = len(first) if 3 <= len(first) < max_prompt_words else max_prompt_words
        out.append({"id": f"{prefix}-{len(out):04d}", "prompt": " ".join(words[:k]), "reference": " ".join(words[k:])})
        if len(out) == n:
            break
    return out


def _prefix_items(texts: list[str], prefix: str, n: int, prefix_words: int = 50, ref_words: int = 100) -> list[dict]:
    """POSG-style: a 50-word prefix and the next 100 words as the reference continuation
    (words, not model tokens, so the suite does not depend on a tokenizer)."""
    out = []
    for text in texts:
        words = text.split()
        if len(words) < prefix_words + ref_words:
            continue
        out.append(
            {
                "id": f"{prefix}-{len(out):04d}",
                "prompt": " ".join(words[:prefix_words]),
                "reference": " ".join(words[prefix_words : prefix_words + ref_words]),
            }
        )
        if len(out) == n:
            break
    return out


def _window_items(texts: list[str], prefix: str, n: int, prefix_words: int = 50, ref_words: int = 100) -> list[dict]:
    """POSG's language-modelling protocol on long texts: each text cut into consecutive,
    non-overlapping windows of 150 whitespace words, a window's first 50 words the prefix and
    the next 100 the reference (as the POSG paper cut Wikitext-103's test set into 1,536 prefixes)."""
    out = []
    width = prefix_words + ref_words
    for text in texts:
        words = text.split()
        for start in range(0, len(words) - width + 1, width):
            window = words[start : start + width]
            out.append(
                {
                    "id": f"{prefix}-{len(out):04d}",
                    "prompt": " ".join(window[:prefix_words]),
                    "reference": " ".join(window[prefix_words:]),
                }
            )
            if len(out) == n:
                return out
    return out


BUILD = {
    # name: (corpus, builder, n, description)
    "food-reviews": ("food-reviews", _review_items, 96, "Opening words of held-out Amazon fine food reviews"),
    "movie-reviews": ("movie-reviews", _review_items, 96, "Opening words of held-out IMDB reviews"),
    "news-prefix": (
        "news",
        _prefix_items,
        64,
        "POSG-style: 50-word prefix of held-out BBC articles, 100-word reference",
    ),
    "smoke": ("food-reviews", _review_items, 4, "Four food-review prompts, for tests"),
}


def build_builtin_suites() -> None:
    import random

    from maxbench.benchmark.corpora import load_corpus

    SUITE_DIR.mkdir(exist_ok=True)
    for name, (corpus_name, builder, n, description) in BUILD.items():
        corpus = load_corpus(corpus_name)
        texts = list(corpus.test)
        random.Random(f"maxbench-suite-{name}").shuffle(texts)  # fixed order independent of the source
        items = builder(texts, name, n)
        body = "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in items).encode()
        (SUITE_DIR / f"{name}.jsonl").write_bytes(body)
        (SUITE_DIR / f"{name}.toml").write_text(
            f'name = "{name}"\nversion = "1"\ndescription = "{description}"\nfile = "{name}.jsonl"\n'
            f'corpus = "{corpus_name}"\ncorpus_sha256 = "{corpus.sha256}"\nsplit = "test"\n'
            f'sha256 = "{hashlib.sha256(body).hexdigest()}"\n'
        )
        print(f"{name}: {len(items)} items")


if __name__ == "__main__" and sys.argv[1:] == ["build"]:
    build_builtin_suites()
