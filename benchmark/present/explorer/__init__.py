"""The results explorer: a static site (HTML + JS + JSON, no server, no CDN) over scored runs and,
optionally, a study's ratings; ``maxbench view`` and ``maxbench run`` write it with
:func:`write_explorer`.

Layout of what it writes (``out_dir``)::

    index.html              the page, with the index data (leaderboard, curves, prompt list) embedded
    explorer.js, .css       the page's own script and style (package data, copied)
    data/prompts-NNN.js     prompt records in chunks of CHUNK, loaded by <script> on demand, so the
                            page works from file:// (where Chromium blocks fetch() of local files)
    .maxbench-explorer      marks the folder as the explorer's, so a rewrite may replace it whole

Generated text is untrusted: the page inserts it with textContent only, and every JSON document
is escaped for a <script> context (``<``, ``>``, ``&``, U+2028, U+2029 as \\u escapes). The output
is a pure function of the inputs: the same runs give the same bytes.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.fileio import atomic_dir

CHUNK = 64  # prompts per data file
MARKER = ".maxbench-explorer"
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(value) -> str:
    """JSON safe to embed in a <script> element or a .js file: no '</script>', no comment openers, no
    line separators that end a JavaScript string."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return "".join(_ESCAPES.get(c, c) for c in text) if any(c in text for c in _ESCAPES) else text


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def write_explorer(run_dirs, out_dir, study=None) -> Path:
    """Write the explorer of ``run_dirs`` (scored run directories) into ``out_dir``; ``study``: the
    path of a study export (``maxbench study export ID --format explorer``) or None. Returns the
    path of index.html. A folder that is not empty and not an explorer is refused, not replaced."""
    from maxbench.benchmark.present.explorer.data import build, load_study

    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / MARKER).exists())):
        raise MaxbenchError(
            f"{out_dir} exists and is not an explorer folder; give --out a new or empty folder (it is replaced whole)"
        )
    index, records = build([Path(r) for r in run_dirs], load_study(study) if study is not None else None)
    index["chunk"] = CHUNK
    index["n_chunks"] = (len(records) + CHUNK - 1) // CHUNK
    fill = {"TITLE": _html_text(index["title"]), "DATA": script_json(index)}
    page = re.sub(r"\{\{(TITLE|DATA)\}\}", lambda m: fill[m.group(1)], _asset("templates/index.html"))
    with atomic_dir(out_dir) as tmp:
        (tmp / "data").mkdir()
        (tmp / "index.html").write_text(page, encoding="utf-8")
        (tmp / "explorer.js").write_text(_asset("static/explorer.js"), encoding="utf-8")
        (tmp / "explorer.css").write_text(_asset("static/explorer.css"), encoding="utf-8")
        for c in range(index["n_chunks"]):
            body = script_json(records[c * CHUNK : (c + 1) * CHUNK])
            (tmp / "data" / f"prompts-{c:03d}.js").write_text(f"maxbenchChunk({c},{body});\n", encoding="utf-8")
        (tmp / MARKER).write_text("written by maxbench view; replaced whole on the next write\n", encoding="utf-8")
    return out_dir / "index.html"


def _html_text(text: str) -> str:
    import html

    return html.escape(text)
