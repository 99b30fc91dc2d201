"""The claim kinds a paper file may name (``kind = "..."``), in the one registry mechanism
(``maxbench.registry``): each a ``claims.ClaimKind`` subclass in its own module of ``claims/``,
imported on first use, so that the paper model (``papers``) can name them without importing the
modules that read it. A new kind is one module in ``claims/`` and one line here
(CONTRIBUTING.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from maxbench.registry import Registry

if TYPE_CHECKING:
    from maxbench.benchmark.reproduce.claims import ClaimKind

CLAIM_KINDS: Registry[type[ClaimKind]] = Registry(
    "claim kind",
    {
        "difference": "maxbench.benchmark.reproduce.claims.difference:Difference",
        "ratio": "maxbench.benchmark.reproduce.claims.ratio:Ratio",
        "correlation": "maxbench.benchmark.reproduce.claims.correlation:Correlation",
        "convergence": "maxbench.benchmark.reproduce.claims.convergence:Convergence",
    },
)

_INSTANCES: dict[str, ClaimKind] = {}


def kind_of(name: str) -> ClaimKind:
    """The kind of this name (a claim's or a cell's ``kind``), one instance per kind."""
    if name not in _INSTANCES:
        _INSTANCES[name] = CLAIM_KINDS.get(name)()
    return _INSTANCES[name]


def kinds() -> tuple[str, ...]:
    """The claim kinds a paper file may name."""
    return tuple(CLAIM_KINDS.names())
