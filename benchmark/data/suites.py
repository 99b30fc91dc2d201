"""Prompt suites: fixed, versioned prompt/reference files with a manifest and content hash.

A suite is a TOML manifest naming one data file (JSONL, CSV or TXT) and, for the built-in
suites, that file's sha256. Built-in suites live in ``benchmark/suites/`` and were made once
from the corpora's test splits by ``python -m maxbench.benchmark.data.suite_build build`` (deterministic);
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

A **conditional suite** (docs/conditional.md) asks for text with given attributes: its items carry
``attributes`` (a JSON object per item, or a CSV column per attribute), its manifest declares each
attribute, and a ``template`` renders them as the prompt; the reference is the text that has them::

    template = "Rating: {score}. Review:"   # optional: without it every item gives its prompt
    max_new_tokens = 96                     # optional: the generation length the suite is made for
    generation_words = 79                   # optional: that length in words (attr-acc's ceiling)
    corpus = "food-reviews"                 # optional: where attr-acc's classifier is trained (fit split)
    attributes_field = "attributes"         # JSONL field (default shown)

    [attributes.score]                      # categorical: these values only
    values = ["great", "other"]
    labels = { great = "5 stars", other = "1 to 4 stars" }   # how a value is written (default: itself)

    [attributes.headline]                   # free text
    kind = "text"

An item may leave its prompt out (it is rendered); a prompt it gives must be the rendering.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import string
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import os_error

SUITE_DIR = Path(__file__).parents[1] / "suites"  # benchmark/suites/: the built-in suites, package data


@dataclass(frozen=True)
class SuiteItem:
    id: str
    prompt: str
    reference: str
    #: a conditional suite's item: attribute -> value, in the manifest's order (None elsewhere)
    attributes: dict | None = field(default=None, compare=False)


@dataclass(frozen=True)
class AttributeSpec:
    """One attribute of a conditional suite: categorical (``values``; each written in the prompt as
    its label, by default itself) or free text (``values`` None, e.g. a news headline)."""

    name: str
    values: tuple[str, ...] | None = None
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def categorical(self) -> bool:
        return self.values is not None

    def label(self, value: str) -> str:
        return dict(self.labels).get(value, value)

    def describe(self) -> dict:
        if self.values is None:
            return {"kind": "text"}
        out = {"kind": "categorical", "values": list(self.values)}
        return out | ({"labels": dict(self.labels)} if self.labels else {})


@dataclass
class Suite:
    name: str
    version: str
    items: list[SuiteItem]
    sha256: str  # of the data file's bytes
    path: Path
    description: str = ""
    #: a conditional suite's attributes (None: a suite without attributes), prompt template,
    #: generation length (in new tokens, and in words) and the corpus it was drawn from
    attributes: dict[str, AttributeSpec] | None = None
    template: str | None = None
    max_new_tokens: int | None = None
    generation_words: int | None = None
    corpus: str | None = None
    corpus_sha256: str | None = None
    #: the corpus (or fold view, ``NAME@fold=i/k,seed=S``) whose test split the prompts were drawn from:
    #: pool metrics (heldout-bleu) compare every text with all of that split's texts. Not part of
    #: ``describe()`` (a run's identity): scoring reads it from the suite file, so runs made before it
    #: keep their identity
    heldout: str | None = None
    #: the data file the items were read from (None for a suite made in memory)
    data_path: Path | None = None

    @property
    def conditional(self) -> bool:
        return self.attributes is not None

    def inputs(self) -> list[tuple[Path, str]]:
        """The suite's files, as inputs of a command (``maxbench.fileio.check_not_input``)."""
        files = [(self.path, f"suite {self.name}'s manifest")]
        return files + ([(self.data_path, f"suite {self.name}'s prompts")] if self.data_path is not None else [])

    def describe(self) -> dict:
        out = {
            "name": self.name,
            "version": self.version,
            "sha256": self.sha256,
            "n_items": len(self.items),
            "path": str(self.path),
        }
        if self.conditional:  # only then: a suite without attributes is described as it always was
            out["conditional"] = {
                "attributes": {k: a.describe() for k, a in self.attributes.items()},
                "template": self.template,
                "max_new_tokens": self.max_new_tokens,
                "generation_words": self.generation_words,
                "corpus": self.corpus,
                "corpus_sha256": self.corpus_sha256,
            }
        return out


#: the built-in conditional suites (``suite_build.CONDITIONAL_BUILD``), named in messages
CONDITIONAL_SUITES = ("food-attrs", "news-attrs", "movie-attrs")


def require_attributes(suite: Suite, system: str | None = None) -> Suite:
    """The check of a conditional system (one that generates from attributes): ``suite`` must be a
    conditional suite, else one line (``MaxbenchError``: exit status 2) before anything runs."""
    if not suite.conditional:
        who = f"system '{system}'" if system else "this system"
        raise MaxbenchError(
            f"{who} is conditional (it generates from attributes), but suite '{suite.name}' has no attributes; "
            f"run it on a conditional suite ({', '.join(CONDITIONAL_SUITES)}, or one whose manifest declares "
            "[attributes], docs/conditional.md)"
        )
    return suite


def render_prompt(template: str, attributes: dict[str, AttributeSpec], values: dict[str, str]) -> str:
    """A conditional item's prompt: ``template`` with each ``{attribute}`` replaced by its value's label."""
    return template.format_map({k: attributes[k].label(v) for k, v in values.items()})


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


def _other_delimiter(text: str, column: str) -> str | None:
    """The delimiter other than a comma (';', tab, '|') that splits the CSV's header line into a
    ``column`` column (a spreadsheet in a locale with decimal commas saves with ';'), else None."""
    header = _lines(text)[0] if text else ""
    for delimiter in (";", "\t", "|"):
        if delimiter not in header:
            continue
        try:
            columns = {c.strip() for c in next(csv.reader([header], delimiter=delimiter))}
        except (csv.Error, StopIteration):
            continue
        if column in columns:
            return delimiter
    return None


def _item_attributes(row: dict, schema: dict[str, AttributeSpec], af: str, where: str, fmt: str) -> dict:
    """A conditional item's attributes, in the schema's order: each declared attribute, a non-empty
    string, a categorical one among its values; none other."""
    if fmt == "csv":
        got = {k: row[k] for k in schema if k in row and row[k] not in (None, "")}
    else:
        got = row.get(af)
        if not isinstance(got, dict):
            raise MaxbenchError(
                f"{where}: '{af}' is {'missing' if got is None else _kind(got)}; every item of a conditional suite "
                f"carries its attributes as an object (declared: {', '.join(schema)})"
            )
        extra = [k for k in got if k not in schema]
        if extra:
            raise MaxbenchError(f"{where}: unknown attribute '{extra[0]}'; the manifest declares: {', '.join(schema)}")
    out = {}
    for key, attribute in schema.items():
        value = got.get(key)
        if not isinstance(value, str) or not value.strip():
            what = "missing" if value is None else "an empty string" if isinstance(value, str) else _kind(value)
            raise MaxbenchError(f"{where}: attribute '{key}' is {what}; an attribute's value is text")
        if attribute.categorical and value not in attribute.values:
            raise MaxbenchError(
                f"{where}: attribute '{key}' is '{value}', not one of its values ({', '.join(attribute.values)})"
            )
        out[key] = value
    return out


def _read_items(
    path: Path, fmt: str, spec: dict, name: str, schema: dict[str, AttributeSpec] | None = None
) -> list[SuiteItem]:
    text = _text(path, "suite file")
    template, af = spec.get("template"), spec.get("attributes_field", "attributes")
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
            if reader.fieldnames is None:
                raise MaxbenchError(f"{path}: CSV is empty; it needs a header row naming a '{pf}' column")
            if pf not in reader.fieldnames and (schema is None or template is None):  # else: rendered
                delimiter = _other_delimiter(text, pf)
                if delimiter is not None:
                    shown = "tab" if delimiter == "\t" else f"'{delimiter}'"
                    raise MaxbenchError(
                        f"{path}: CSV has no '{pf}' column as read with commas, but its header seems to use {shown} "
                        "as the delimiter; a suite's CSV is comma-separated: save it with commas (or as .jsonl)"
                    )
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
        attributes = None if schema is None else _item_attributes(row, schema, af, where, fmt)
        if attributes is not None and template is not None:
            rendered = render_prompt(template, schema, attributes)
            if not prompt:  # left out (or an empty CSV cell): rendered from the attributes
                prompt = rendered
            elif prompt != rendered:
                raise MaxbenchError(
                    f"{where}: prompt ('{pf}') is not the item's attributes rendered by the manifest's template "
                    f"({rendered!r}); leave the prompt out or correct it"
                )
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
        for key, value in ((pf, prompt), (rf, ref), (idf, item_id), *(attributes or {}).items()):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a JSON escape such as \ud800 that names half a character
                raise MaxbenchError(f"{where}: '{key}' holds an invalid character (a lone surrogate)") from None
        if item_id in seen:
            raise MaxbenchError(f"{where}: duplicate item id '{item_id}'")
        seen.add(item_id)
        items.append(SuiteItem(item_id, prompt, ref, attributes))
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
    for key in ("prompt_field", "reference_field", "id_field", "format", "description", "sha256", "heldout"):
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
    schema = _schema(spec, manifest)
    if schema is not None and fmt == "txt":
        raise MaxbenchError(
            f"suite manifest {manifest} declares attributes, but {data.name} is a TXT file; the items of a "
            "conditional suite carry attributes: use .jsonl (an 'attributes' object per item) or .csv (a column each)"
        )
    items = _read_items(data, fmt, spec, spec["name"], schema)
    return Suite(
        name=spec["name"],
        version=str(spec.get("version", "1")),
        items=items,
        sha256=digest,
        path=manifest,
        data_path=data,
        description=spec.get("description", ""),
        attributes=schema,
        template=spec.get("template") if schema is not None else None,
        max_new_tokens=spec.get("max_new_tokens"),
        generation_words=spec.get("generation_words"),
        corpus=spec.get("corpus"),
        corpus_sha256=spec.get("corpus_sha256"),
        heldout=spec.get("heldout"),
    )


def _schema(spec: dict, manifest: Path) -> dict[str, AttributeSpec] | None:
    """The ``[attributes]`` of a conditional suite's manifest (None when it has none), with its other
    conditional keys checked: every mistake is one line naming the manifest."""
    where = f"suite manifest {manifest}"
    for key in ("template", "attributes_field", "corpus", "corpus_sha256"):
        if key in spec and not isinstance(spec[key], str):
            raise MaxbenchError(f"{where}: '{key}' must be a string")
    for key in ("max_new_tokens", "generation_words"):
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise MaxbenchError(f"{where}: '{key}' must be a whole number of at least 1")
    table = spec.get("attributes")
    if table is None:
        if "template" in spec:
            raise MaxbenchError(f"{where} has a 'template' but no [attributes] table declaring what it renders")
        return None
    if not isinstance(table, dict) or not table:
        raise MaxbenchError(f"{where}: 'attributes' must be a table of attributes, e.g. [attributes.score]")
    schema = {}
    for key, entry in table.items():
        if not key.isidentifier():
            raise MaxbenchError(f"{where}: attribute name '{key}' must be a word (letters, digits, '_')")
        if not isinstance(entry, dict):
            raise MaxbenchError(f"{where}: attribute '{key}' must be a table ([attributes.{key}])")
        unknown = [k for k in entry if k not in ("kind", "values", "labels")]
        if unknown:
            raise MaxbenchError(f"{where}: attribute '{key}' has an unknown key '{unknown[0]}' (kind, values, labels)")
        kind = entry.get("kind", "categorical" if "values" in entry else None)
        if kind == "text":
            if "values" in entry or "labels" in entry:
                raise MaxbenchError(
                    f"{where}: attribute '{key}' is free text (kind = \"text\"): it has no values or labels"
                )
            schema[key] = AttributeSpec(key)
            continue
        if kind != "categorical":
            raise MaxbenchError(
                f"{where}: attribute '{key}' needs values = [...] (categorical) or kind = \"text\" (free text)"
            )
        values = entry.get("values")
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) and v.strip() for v in values)
            or len(set(values)) != len(values)
        ):
            raise MaxbenchError(f"{where}: attribute '{key}': 'values' must be a list of distinct, non-empty strings")
        labels = entry.get("labels", {})
        if not isinstance(labels, dict) or not all(k in values and isinstance(v, str) for k, v in labels.items()):
            raise MaxbenchError(f"{where}: attribute '{key}': 'labels' must be a table from some of its values to text")
        schema[key] = AttributeSpec(key, tuple(values), tuple((v, labels[v]) for v in values if v in labels))
    template = spec.get("template")
    if template is not None:
        try:
            fields = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise MaxbenchError(f"{where}: 'template' is malformed ({exc}); write {{name}} for an attribute") from None
        for _, name, spec_, conversion in fields:
            if name is None:
                continue
            if name not in schema or spec_ or conversion:
                raise MaxbenchError(
                    f"{where}: the template's field '{{{name}{'!' + conversion if conversion else ''}"
                    f"{':' + spec_ if spec_ else ''}}}' is not an attribute; write {{name}} for one of: "
                    f"{', '.join(schema)} (and {{{{ }}}} for a brace)"
                )
    return schema


def _toml(value) -> str:
    """A TOML value: strings as JSON writes them (ASCII, the escapes TOML shares), lists, inline tables."""
    if isinstance(value, dict):
        bare = re.compile(r"[A-Za-z0-9_-]+")
        keys = {k: k if bare.fullmatch(k) else json.dumps(k) for k in value}
        return "{ " + ", ".join(f"{keys[k]} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def suite_files(suite: Suite, file: str | None = None, extra: dict | None = None) -> tuple[bytes, str]:
    """The JSONL body and TOML manifest that ``load_suite`` reads back as ``suite`` (attributes,
    template, generation length and corpus included); ``extra`` adds informational keys."""
    rows = []
    for it in suite.items:
        row = {"id": it.id} | ({"attributes": it.attributes} if it.attributes is not None else {})
        rows.append(row | {"prompt": it.prompt, "reference": it.reference})
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    head = {
        "name": suite.name,
        "version": suite.version,
        "description": suite.description,
        "file": file or f"{suite.name}.jsonl",
        "corpus": suite.corpus,
        "corpus_sha256": suite.corpus_sha256,
    } | (extra or {})
    if suite.conditional:
        head |= {
            "template": suite.template,
            "max_new_tokens": suite.max_new_tokens,
            "generation_words": suite.generation_words,
        }
    head["sha256"] = hashlib.sha256(body).hexdigest()
    text = "".join(f"{k} = {_toml(v)}\n" for k, v in head.items() if v is not None)
    for key, attribute in (suite.attributes or {}).items():
        text += f"\n[attributes.{key}]\n"
        if attribute.categorical:
            text += f"values = {_toml(attribute.values)}\n"
            if attribute.labels:
                text += f"labels = {_toml(dict(attribute.labels))}\n"
        else:
            text += 'kind = "text"\n'
    return body, text


def save_suite(suite: Suite, folder: str | Path, extra: dict | None = None) -> Path:
    """Write ``suite`` as ``<folder>/<name>.jsonl`` and ``.toml`` (atomically; ``extra``: informational
    keys of the manifest) and return the manifest's path: the one writer of suite files, for the
    built-in suites (``build_suites``) and a derived suite (``flipped_suite``) alike."""
    from maxbench.fileio import atomic_write, ensure_dir

    folder = ensure_dir(Path(folder), "suite folder")
    body, manifest = suite_files(suite, extra=extra)
    atomic_write(folder / f"{suite.name}.jsonl", body)
    atomic_write(folder / f"{suite.name}.toml", manifest)
    return folder / f"{suite.name}.toml"


def opposite(attribute: AttributeSpec, value: str) -> str:
    """The opposite of a categorical value: the other one of two, else the next in the declared order
    (the last one's is the first)."""
    values = attribute.values
    return values[(values.index(value) + 1) % len(values)]


def flipped_suite(suite: Suite, attribute: str | None = None) -> Suite:
    """``suite`` with each item's categorical ``attribute`` (by default the suite's only categorical
    one) set to its ``opposite`` and the prompt rendered again: the flipped-attribute check generates
    from it and counts how often attr-acc's classifier follows the flip
    (``maxbench.benchmark.metrics.attributes.flip_check``). Items keep their ids (a run of the flipped
    suite pairs with a run of the suite by prompt id) and have no reference (the reference has the
    attribute that is not asked for). Write it with ``save_suite`` before running it. An attribute of
    one value has no opposite: refused, rather than a copy of the suite under a flipped name."""
    if not suite.conditional or suite.template is None:
        raise MaxbenchError(f"suite '{suite.name}' has no attributes rendered by a template: nothing to flip")
    categorical = [k for k, a in suite.attributes.items() if a.categorical]
    if attribute is None:
        if len(categorical) != 1:
            raise MaxbenchError(
                f"suite '{suite.name}' has {len(categorical)} categorical attributes; name the one to flip"
            )
        attribute = categorical[0]
    if attribute not in categorical:
        raise MaxbenchError(
            f"suite '{suite.name}' has no categorical attribute '{attribute}' (categorical: {', '.join(categorical)})"
        )
    spec = suite.attributes[attribute]
    if len(spec.values) < 2:  # its opposite is itself: the "flipped" suite would be the suite again
        raise MaxbenchError(
            f"suite '{suite.name}': attribute '{attribute}' has one value ('{spec.values[0]}'), nothing to flip to; "
            f"declare its other values under [attributes.{attribute}] in the suite's manifest, or flip another attribute"
        )
    items = []
    for it in suite.items:
        attributes = dict(it.attributes) | {attribute: opposite(spec, it.attributes[attribute])}
        items.append(SuiteItem(it.id, render_prompt(suite.template, suite.attributes, attributes), "", attributes))
    name = f"{suite.name}-flipped-{attribute}"
    out = Suite(
        name=name,
        version=suite.version,
        items=items,
        sha256="",
        path=Path(f"{name}.toml"),
        description=f"{suite.name} with {attribute} flipped to its opposite (flipped-attribute check)",
        attributes=suite.attributes,
        template=suite.template,
        max_new_tokens=suite.max_new_tokens,
        generation_words=suite.generation_words,
        corpus=suite.corpus,
        corpus_sha256=suite.corpus_sha256,
    )
    out.sha256 = hashlib.sha256(suite_files(out)[0]).hexdigest()
    return out
