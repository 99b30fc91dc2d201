"""Rubrics: what annotators rate, on which scale, with instructions and worked examples.

A rubric is a TOML file; the presets from the papers live in ``human_eval/studies/rubrics/`` and are
loaded by name through the same validator as a researcher's own file::

    name = "my-study"                 # letters, digits, '-', '_'
    kind = "likert"                   # the judgment type (optional, see below)
    title = "..."                     # shown to annotators
    instructions = "..."              # paragraphs separated by blank lines
    prompt_label = "Prompt"           # optional: the prompt box's label on pages and in examples
    [scale]                           # one integer scale for every criterion
    min = 1
    max = 5
    labels = {"1" = "worst", "5" = "best"}           # optional
    [[criteria]]                      # one or more
    name = "fluency"                  # identifier: a-z, 0-9, '_'
    label = "Fluency"
    question = "How fluent is the text?"
    anchors = {"1" = "...", "5" = "..."}             # optional
    [[examples]]                      # optional worked examples
    prompt = "..."
    text = "..."
    scores = {fluency = 5}
    explanation = "..."
    [check]                           # optional comprehension check
    question = "..."
    options = ["...", "..."]
    answer = 1                        # index into options

``kind`` chooses the judgment type (``JUDGMENT_KINDS``):

- ``likert`` (default): one page per text, an integer scale of at most 11 points;
- ``direct``: direct assessment as in WMT's Appraise, one page per text, a 0-100 slider
  (``[scale]`` may be left out; if given it must be 0..100); the report standardises each
  annotator's scores to z-scores before its tests (``human_eval/analysis/direct.py``);
- ``pairwise``: two texts for the same prompt, "which is better" per criterion, with a
  tie option when ``allow_tie = true`` (statistics in ``human_eval/analysis/pairwise.py``);
- ``best-worst``: a tuple of texts for the same prompt, the best and the worst per
  criterion (statistics in ``human_eval/analysis/best_worst.py``).

Pairwise and best-worst rubrics have no ``[scale]`` and no worked-example scores.

Without a ``[check]`` table the comprehension check asks which score is the best one.
``prompt_label`` names what the prompt box shows when it is not the start of a text (the
``conditional`` preset: "Requested attributes"); it defaults to "Prompt".
The study stores the validated rubric as JSON, so later edits to a file never change a
running study.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from maxbench.errors import MaxbenchError
from maxbench.human_eval.store.models import SLUG_MAX, SLUG_SUFFIX, TITLE_MAX

PRESET_DIR = Path(__file__).resolve().parent / "rubrics"
# A scale with more points than this is no longer a rating scale a person can use.
MAX_SCALE_POINTS = 11
JUDGMENT_KINDS = ("likert", "direct", "pairwise", "best-worst")
BEST_WORST_SIDES = ("_best", "_worst")
# The direct-assessment slider (WMT/Appraise).
SLIDER_MIN, SLIDER_MAX = 0, 100
_CRITERION_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
DEFAULT_PROMPT_LABEL = "Prompt"
PROMPT_LABEL_MAX = 40
# The rubric's name starts each study's slug.
RUBRIC_NAME_MAX = SLUG_MAX - SLUG_SUFFIX
_RUBRIC_NAME = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.-]{{0,{RUBRIC_NAME_MAX - 1}}}$")


@dataclass(frozen=True)
class Criterion:
    name: str
    label: str
    question: str
    anchors: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Example:
    prompt: str
    text: str
    scores: dict[str, int]
    explanation: str


@dataclass(frozen=True)
class Check:
    question: str
    options: list[str]
    answer: int


@dataclass(frozen=True)
class Rubric:
    name: str
    title: str
    instructions: str
    scale_min: int
    scale_max: int
    criteria: list[Criterion]
    scale_labels: dict[int, str] = field(default_factory=dict)
    examples: list[Example] = field(default_factory=list)
    check: Check | None = None
    source: str = ""
    kind: str = "likert"
    allow_tie: bool = False
    prompt_label: str = DEFAULT_PROMPT_LABEL

    @property
    def values(self) -> list[int]:
        return list(range(self.scale_min, self.scale_max + 1))

    @property
    def choices(self) -> list[int]:
        """The values a page offers: pairwise 1 (A better), 2 (B better) and 0 (tie, if allowed)."""
        if self.kind == "pairwise":
            return [1, 2, 0] if self.allow_tie else [1, 2]
        if self.kind == "best-worst":  # the places of a tuple's texts
            return list(range(1, self.scale_max + 1))
        return self.values

    @property
    def stored_criteria(self) -> list[str]:
        """The names ratings are stored under: best-worst stores a best and a worst place per criterion."""
        if self.kind == "best-worst":
            return [f"{c.name}{side}" for c in self.criteria for side in BEST_WORST_SIDES]
        return [c.name for c in self.criteria]

    @property
    def attention_values(self) -> list[int]:
        """What an instructed-response page may ask for: a slider's ends, or any choice."""
        return [self.scale_min, self.scale_max] if self.kind == "direct" else self.choices

    @property
    def criterion_names(self) -> list[str]:
        return [c.name for c in self.criteria]

    def comprehension_check(self) -> Check:
        if self.check is not None:
            return self.check
        options = [str(v) for v in (self.scale_min, (self.scale_min + self.scale_max) // 2, self.scale_max)]
        options = list(dict.fromkeys(options))
        return Check(
            question=f"On this study's scale from {self.scale_min} to {self.scale_max}, which score is the best?",
            options=options,
            answer=len(options) - 1,
        )

    def instruction_paragraphs(self) -> list[str]:
        return [p.strip() for p in re.split(r"\n\s*\n", self.instructions.strip()) if p.strip()]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        # JSON object keys are strings; from_json turns them back into ints.
        data["scale_labels"] = {str(k): v for k, v in self.scale_labels.items()}
        for c in data["criteria"]:
            c["anchors"] = {str(k): v for k, v in c["anchors"].items()}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rubric:
        return cls(
            name=data["name"],
            title=data["title"],
            instructions=data["instructions"],
            scale_min=int(data["scale_min"]),
            scale_max=int(data["scale_max"]),
            criteria=[
                Criterion(c["name"], c["label"], c["question"], {int(k): v for k, v in c.get("anchors", {}).items()})
                for c in data["criteria"]
            ],
            scale_labels={int(k): v for k, v in data.get("scale_labels", {}).items()},
            examples=[Example(**e) for e in data.get("examples", [])],
            check=Check(**data["check"]) if data.get("check") else None,
            source=data.get("source", ""),
            kind=data.get("kind", "likert"),
            allow_tie=bool(data.get("allow_tie", False)),
            # A study stored before prompt labels existed shows "Prompt", as it always did.
            prompt_label=data.get("prompt_label") or DEFAULT_PROMPT_LABEL,
        )


#: names a preset had before it was renamed -> its name now: a command line or script that names the
#: old one still loads it (a study stores its rubric whole, so stored studies never look a name up)
PRESET_ALIASES = {"bestworst-quality": "best-worst-quality"}


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def load_rubric(name_or_path: str | Path) -> Rubric:
    """A preset by name (``graphmax``, ``posg-lm``, ...; an old name by ``PRESET_ALIASES``) or a rubric
    TOML file by path."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if text in PRESET_ALIASES and not path.exists():
        text = PRESET_ALIASES[text]
    if text in preset_names():
        path = PRESET_DIR / f"{text}.toml"
    elif not (text.endswith(".toml") or path.exists()):
        raise MaxbenchError(
            f"unknown rubric {text!r}: use a preset ({', '.join(preset_names())}) or the path of a rubric .toml file"
        )
    if not path.is_file():
        raise MaxbenchError(f"rubric file {path} does not exist: check the path")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MaxbenchError(f"rubric file {path} is not valid TOML ({exc}): fix the syntax") from None
    return parse_rubric(data, where=str(path))


def _require(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise MaxbenchError(f"rubric {where}: {msg}")


def _text(data: dict, key: str, where: str, required: bool = True) -> str:
    value = data.get(key, "")
    _require(isinstance(value, str), where, f"'{key}' must be a string")
    _require(bool(value.strip()) or not required, where, f"'{key}' is missing or empty")
    return value.strip()


def _int(value: Any, where: str, what: str) -> int:
    # bool is an int in Python; a TOML 'true' is never a scale value.
    _require(isinstance(value, int) and not isinstance(value, bool), where, f"{what} must be an integer, got {value!r}")
    return value


def _value_map(raw: Any, lo: int, hi: int, where: str, what: str) -> dict[int, str]:
    if raw is None:
        return {}
    _require(isinstance(raw, dict), where, f'{what} must be a table of value = "text"')
    out: dict[int, str] = {}
    for key, text in raw.items():
        try:
            value = int(key)
        except ValueError:
            raise MaxbenchError(f"rubric {where}: {what} key {key!r} is not an integer") from None
        _require(lo <= value <= hi, where, f"{what} key {value} is outside the scale {lo}..{hi}")
        _require(isinstance(text, str) and text.strip() != "", where, f"{what} {value} needs text")
        out[value] = text.strip()
    return out


def parse_rubric(data: dict[str, Any], where: str = "<rubric>") -> Rubric:
    """Validate a rubric table (parsed TOML) and build the Rubric; MaxbenchError says what to fix."""
    _require(isinstance(data, dict), where, "must be a TOML table")
    known = {
        "name",
        "title",
        "instructions",
        "scale",
        "criteria",
        "examples",
        "check",
        "source",
        "kind",
        "allow_tie",
        "prompt_label",
    }
    unknown = sorted(set(data) - known)
    _require(not unknown, where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
    name = _text(data, "name", where)
    _require(
        bool(_RUBRIC_NAME.match(name)),
        where,
        f"name {name!r} may hold only letters, digits, '.', '-', '_' (at most {RUBRIC_NAME_MAX})",
    )
    title = _text(data, "title", where)
    _require(len(title) <= TITLE_MAX, where, f"title is {len(title)} characters long; at most {TITLE_MAX}")
    instructions = _text(data, "instructions", where)
    prompt_label = _text(data, "prompt_label", where, required=False) or DEFAULT_PROMPT_LABEL
    _require(
        len(prompt_label) <= PROMPT_LABEL_MAX,
        where,
        f"prompt_label is {len(prompt_label)} characters long; at most {PROMPT_LABEL_MAX}",
    )
    kind = data.get("kind", "likert")
    _require(kind in JUDGMENT_KINDS, where, f"kind {kind!r} is not one of {', '.join(JUDGMENT_KINDS)}")
    allow_tie = data.get("allow_tie", False)
    _require(isinstance(allow_tie, bool), where, "allow_tie must be true or false")
    _require(not allow_tie or kind == "pairwise", where, 'allow_tie applies to kind = "pairwise" only')
    relative = kind in ("pairwise", "best-worst")

    scale = data.get("scale")
    if relative:
        _require(scale is None, where, f"a {kind} rubric has no [scale]: annotators choose between texts")
        # The stored value names a text on the page (pairwise: 0 tie, 1 first, 2 second;
        # best-worst: the 1-based place of the chosen text).
        scale = {"min": 0, "max": 2 if kind == "pairwise" else 4}
        if kind == "pairwise":
            scale["labels"] = {"1": "A is better", "2": "B is better", "0": "about the same"}
    elif kind == "direct" and (scale is None or isinstance(scale, dict)):
        scale = {"min": SLIDER_MIN, "max": SLIDER_MAX, **(scale or {})}
    _require(isinstance(scale, dict), where, "a [scale] table with integer 'min' and 'max' is required")
    lo = _int(scale.get("min"), where, "scale.min")
    hi = _int(scale.get("max"), where, "scale.max")
    _require(lo < hi, where, f"scale.min ({lo}) must be below scale.max ({hi})")
    if kind == "direct":
        _require(
            (lo, hi) == (SLIDER_MIN, SLIDER_MAX),
            where,
            f"a direct-assessment slider runs from {SLIDER_MIN} to {SLIDER_MAX}, not {lo}..{hi}: leave [scale] out",
        )
    else:
        _require(
            hi - lo + 1 <= MAX_SCALE_POINTS,
            where,
            f"scale {lo}..{hi} has {hi - lo + 1} points; use at most {MAX_SCALE_POINTS}",
        )
    labels = _value_map(scale.get("labels"), lo, hi, where, "scale.labels")

    raw_criteria = data.get("criteria")
    _require(
        isinstance(raw_criteria, list) and len(raw_criteria) > 0, where, "at least one [[criteria]] entry is required"
    )
    criteria: list[Criterion] = []
    for i, c in enumerate(raw_criteria):
        cw = f"{where} criteria[{i}]"
        _require(isinstance(c, dict), cw, "must be a table")
        cname = _text(c, "name", cw)
        _require(
            bool(_CRITERION_NAME.match(cname)),
            cw,
            f"name {cname!r} must start with a-z and hold only a-z, 0-9, '_' (at most 40)",
        )
        _require(cname not in {x.name for x in criteria}, cw, f"criterion {cname!r} appears twice")
        _require(
            kind != "best-worst" or len(cname) <= 34,
            cw,
            f"a best-worst criterion name ({cname!r}) has at most 34 characters",
        )
        if "scale" in c or "min" in c or "max" in c:
            raise MaxbenchError(
                f"rubric {cw}: one [scale] applies to every criterion; "
                "put criteria on other scales in a separate rubric"
            )
        criteria.append(
            Criterion(
                name=cname,
                label=_text(c, "label", cw),
                question=_text(c, "question", cw, required=False) or _text(c, "label", cw),
                anchors=_value_map(c.get("anchors"), lo, hi, cw, "anchors"),
            )
        )

    examples: list[Example] = []
    for i, e in enumerate(data.get("examples", [])):
        ew = f"{where} examples[{i}]"
        _require(isinstance(e, dict), ew, "must be a table")
        scores = e.get("scores", {})
        _require(isinstance(scores, dict) and (scores or relative), ew, "needs a scores table (criterion = value)")
        _require(not (scores and relative), ew, f"a {kind} rubric's examples have no scores: explain the choice")
        for cname, value in scores.items():
            _require(cname in {c.name for c in criteria}, ew, f"scores name unknown criterion {cname!r}")
            _require(
                lo <= _int(value, ew, f"score of {cname}") <= hi,
                ew,
                f"score {value} of {cname} is outside the scale {lo}..{hi}",
            )
        examples.append(
            Example(
                prompt=_text(e, "prompt", ew, required=False),
                text=_text(e, "text", ew),
                scores=dict(scores),
                explanation=_text(e, "explanation", ew),
            )
        )

    check = None
    if "check" in data:
        cw = f"{where} check"
        raw = data["check"]
        _require(isinstance(raw, dict), cw, "must be a table")
        options = raw.get("options")
        _require(
            isinstance(options, list) and len(options) >= 2 and all(isinstance(o, str) and o.strip() for o in options),
            cw,
            "options must be a list of at least two non-empty strings",
        )
        answer = _int(raw.get("answer"), cw, "answer")
        _require(
            0 <= answer < len(options), cw, f"answer {answer} is not an index into options (0..{len(options) - 1})"
        )
        check = Check(question=_text(raw, "question", cw), options=[o.strip() for o in options], answer=answer)
    _require(
        not relative or check is not None,
        where,
        f"a {kind} rubric needs a [check]: the default question asks about a rating scale",
    )

    return Rubric(
        name=name,
        title=title,
        instructions=instructions,
        scale_min=lo,
        scale_max=hi,
        criteria=criteria,
        scale_labels=labels,
        examples=examples,
        check=check,
        source=str(data.get("source", "")).strip(),
        kind=kind,
        allow_tie=allow_tie,
        prompt_label=prompt_label,
    )
