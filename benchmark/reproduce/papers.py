"""The papers a reproduction knows: their claims, reported numbers and protocols, read from
``benchmark/reproduce/papers/<paper>.toml`` and checked on load.

A claim compares one or more ``methods`` with a ``baseline`` (roles of the protocol's systems) on
``scores`` in a ``direction`` ("higher" or "lower" for the method); ``paper_baseline`` and
``paper_method`` are the paper's numbers for its ``paper_model``, score by score. ``comparable`` says
whether the paper's effect size can be held against maxbench's (true only where the quantity does
not depend on the base model's absolute quality, e.g. a time ratio). A ``kind = "correlation"``
claim correlates each of ``scores`` with the score of ``against`` at the same position over the text
sources (every system of every run, and the human references), with the paper's r in
``paper_method``. A claim with ``runnable = false`` cannot be run offline and gives its ``reason``.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.errors import MaxbenchError
from maxbench.registry import unknown_name

PAPER_DIR = Path(__file__).parent / "papers"
DIRECTIONS = ("higher", "lower")
KINDS = ("difference", "ratio", "correlation")


@dataclass(frozen=True)
class Claim:
    id: str
    where: str
    statement: str
    corpora: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    baselines: tuple[str, ...] = ()
    scores: tuple[str, ...] = ()
    also: tuple[str, ...] = ()  # maxbench's default variant of each score, shown beside it
    against: tuple[str, ...] = ()  # correlation claims: the score each of ``scores`` is correlated with
    direction: str = "higher"
    kind: str = "difference"
    paper_model: str = ""
    paper_baseline: tuple[float, ...] = ()
    paper_baseline_sd: tuple[float, ...] = ()
    paper_method: tuple[float, ...] = ()
    paper_method_sd: tuple[float, ...] = ()
    paper_effect: float | None = None
    comparable: bool = False
    runnable: bool = True
    reason: str = ""
    differences: tuple[str, ...] = ()

    def paper_difference(self, i: int) -> float | None:
        """The paper's method - baseline on score ``i`` (its effect for a ratio claim, its r for a
        correlation claim)."""
        if self.kind == "correlation":
            return self.paper_method[i] if i < len(self.paper_method) else None
        if self.paper_effect is not None:
            return self.paper_effect
        if i < len(self.paper_method) and i < len(self.paper_baseline):
            return self.paper_method[i] - self.paper_baseline[i]
        return None


@dataclass(frozen=True)
class Paper:
    name: str
    title: str
    source: str
    protocol: dict
    differences: tuple[str, ...]
    claims: tuple[Claim, ...] = field(default_factory=tuple)
    path: Path | None = None

    def roles(self) -> dict[str, str]:
        """Every system role of the protocol -> its LAYER/DECODING."""
        return dict(self.protocol.get("systems", {})) | dict(self.protocol.get("first_fold_systems", {}))


def paper_names() -> list[str]:
    return sorted(p.stem for p in PAPER_DIR.glob("*.toml"))


def _tuple(value, what: str) -> tuple:
    if value is None:
        return ()
    if isinstance(value, (str, int, float)):
        return (value,)
    if not isinstance(value, list):
        raise MaxbenchError(f"{what} must be a value or a list, got {value!r}")
    return tuple(value)


def load_paper(name: str, path: Path | None = None) -> Paper:
    """The paper ``name`` (one of ``paper_names()``; an unknown name is one line with the closest
    known one), or the file at ``path`` (or ``name`` ending in .toml), with every claim checked
    against its protocol."""
    if path is None and name.endswith(".toml"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise MaxbenchError(
                f"paper file {path} does not exist; give a paper name ({', '.join(paper_names())}) or a .toml path"
            )
    if path is None:
        if name not in paper_names():
            raise unknown_name("paper", name, paper_names())
        path = PAPER_DIR / f"{name}.toml"
    try:
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MaxbenchError(f"paper file {path} is unreadable: {exc}") from None
    protocol = spec.get("protocol", {})
    roles = dict(protocol.get("systems", {})) | dict(protocol.get("first_fold_systems", {}))
    claims = []
    for raw in spec.get("claims", []):
        cid = raw.get("id", "?")
        what = f"paper file {path}, claim '{cid}'"
        runnable = bool(raw.get("runnable", True))
        claim = Claim(
            id=cid,
            where=raw.get("where", ""),
            statement=raw.get("statement", ""),
            corpora=_tuple(raw.get("corpus", protocol.get("corpora")), what) if runnable else (),
            methods=_tuple(raw.get("methods"), what),
            baselines=_tuple(raw.get("baseline"), what),
            scores=_tuple(raw.get("scores"), what),
            also=_tuple(raw.get("also"), what),
            against=_tuple(raw.get("against"), what),
            direction=raw.get("direction", "higher"),
            kind=raw.get("kind", "difference"),
            paper_model=raw.get("paper_model", ""),
            paper_baseline=_tuple(raw.get("paper_baseline"), what),
            paper_baseline_sd=_tuple(raw.get("paper_baseline_sd"), what),
            paper_method=_tuple(raw.get("paper_method"), what),
            paper_method_sd=_tuple(raw.get("paper_method_sd"), what),
            paper_effect=raw.get("paper_effect"),
            comparable=bool(raw.get("comparable", False)),
            runnable=runnable,
            reason=raw.get("reason", ""),
            differences=_tuple(raw.get("differences"), what),
        )
        if claim.direction not in DIRECTIONS or claim.kind not in KINDS:
            raise MaxbenchError(f"{what}: direction must be one of {DIRECTIONS} and kind one of {KINDS}")
        if not runnable:
            if not claim.reason:
                raise MaxbenchError(f"{what}: a claim that cannot run needs a 'reason'")
        else:
            for role in claim.methods + claim.baselines:
                if role not in roles:
                    raise MaxbenchError(f"{what}: {unknown_name('system role', role, roles)}")
            if not claim.scores or (claim.also and len(claim.also) != len(claim.scores)):
                raise MaxbenchError(f"{what}: needs 'scores', and 'also' (if given) of the same length")
            if (claim.kind == "correlation") != bool(claim.against) or (
                claim.against and len(claim.against) != len(claim.scores)
            ):
                raise MaxbenchError(f"{what}: a correlation claim (and only one) needs 'against', one per score")
            for corpus in claim.corpora:
                if corpus not in protocol.get("corpora", []):
                    raise MaxbenchError(f"{what}: corpus '{corpus}' is not one of the protocol's corpora")
        claims.append(claim)
    return Paper(
        name=spec.get("paper", name),
        title=spec.get("title", name),
        source=spec.get("source", ""),
        protocol=protocol,
        differences=_tuple(spec.get("differences", {}).get("all"), f"paper file {path}"),
        claims=tuple(claims),
        path=path,
    )
