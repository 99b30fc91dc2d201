"""The papers a reproduction knows: their claims, reported numbers and protocols, read from
``benchmark/reproduce/papers/<paper>.toml`` and checked on load.

A claim compares one or more ``methods`` with a ``baseline`` (roles of the protocol's systems; several
baselines: the method is claimed best among them) on ``scores`` in a ``direction`` ("higher" or
"lower" for the method); ``paper_baseline`` and ``paper_method`` are the paper's numbers for its
``paper_model``, score by score, and the verdict holds maxbench's relative difference against the
paper's relative effect (``verdicts.py``). ``kind`` names the claim's kind, one module of
``claims/`` each, which says what the claim reads and on which scale it is judged: ``difference``
(the default); ``ratio``, a ratio measured per fold (``paper_effect``: the paper's ratio;
``measure``: of what); ``correlation``, each of ``scores`` correlated with the score of ``against``
at the same position over the text sources, the paper's r in ``paper_method``; ``convergence``, the
solver's iterations per decoding step against the paper's step budget T in ``paper_method``.
``hardware = true`` marks a quantity that depends on hardware and implementation (not comparable:
shown, never judged). ``models`` restricts a claim to some of the protocol's base models; ``controls``
names control runs (folders under the reproduction's ``runs/``) whose scores the report shows
beside the claim; ``component`` names the trained part an ablation claim removes (``adapters.py``). A claim with ``runnable = false`` cannot be run offline and gives its
``reason``; ``diagnostic = true`` keeps a claim out of the counts.

The protocol's ``diagnostic_roles`` are systems that are a diagnostic of maxbench's reading of the
paper rather than the paper's method (graphmax's ``solver=paper``): their cells are shown in their
own section, with the protocol's ``diagnostics`` text, and kept out of the counts and of Holm's step.

A paper's ``[[controls]]`` entries are seed-paired controls of a trained head, read from files
rather than runs (``controls.py``): ``method`` and ``control`` are the layers compared (KerBS and
its fine-tuned softmax), ``model`` and ``corpus`` the cell, ``claim`` the claim whose direction and
paper effect the control's verdict uses, ``seeds`` the seeds planned, and ``folder``/``file`` (a
pattern with ``{model}``, ``{corpus}``, ``{layer}`` and ``{seed}``) each head's fit meta, relative to
the reproduction's folder. Fewer seeds than planned make the control partial (rendered, labelled);
a folder that does not exist, or no seed with both files, is a control naming a missing run.

``[protocol] beside`` lists scores shown beside every cell (FCTG: attribute accuracy), with their
ceiling where scores.json has one (``SCORE-ceiling``); the rules never read them.

``[protocol.seeds.CORPUS]`` names, per role, its replicates on that corpus: roles of the same system
trained with other seeds (``fctg = ["fctg-seed1", "fctg-seed2"]``). A comparison where either side
has replicates is judged on the seed-averaged scores, paired by position, a side with one seed
repeated (``claims/difference.py``); every role of a corpus has as many replicates.

A paper's ``[[matched]]`` entries are matched-operating-point rows (``matched.py``), a sensitivity
reading outside the counts for claims that trade quality for diversity: ``method`` and ``baseline``
(roles) each swept over one option (``sweeps``: role -> { option = [values] }), compared on the
``quality`` score where their curves share a value of the ``match`` score (``at``: the method's own
operating point, the baseline's, the human row's value, or a number), on ``models`` x ``corpora``.
The sweep points are roles ``ROLE~OPTION=VALUE`` that the protocol plans only when ``--roles`` names
the entry's id (in the first fold: the points are a sensitivity reading, not every fold's work).

Bad input is one line (exit status 2): an unknown direction, kind, base model, corpus or system role,
a score no metric of the protocol computes (``protocol.check_metrics``), a control run that does not
exist (``protocol.check_controls``, ``controls.check``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from maxbench.benchmark.reproduce.kinds import kind_of, kinds
from maxbench.errors import MaxbenchError
from maxbench.registry import unknown_name

PAPER_DIR = Path(__file__).parent / "papers"
DIRECTIONS = ("higher", "lower")
#: what a ratio claim's ratio is of: generation CPU time per token, or an adapter's training CPU time
MEASURES = ("time-per-token", "training")


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
    hardware: bool = False  # the quantity depends on hardware and implementation: never judged
    #: a cost the paper says its method pays (e.g. perplexity): beyond the paper's effect is
    #: "larger than claimed", counted apart from reproduced
    cost: bool = False
    diagnostic: bool = False  # a diagnostic of maxbench's reading, kept out of the counts
    models: tuple[str, ...] = ()  # the base models the claim holds for (default: every one)
    controls: tuple[str, ...] = ()  # control runs (folders under runs/) shown beside the claim
    runnable: bool = True
    reason: str = ""
    differences: tuple[str, ...] = ()
    #: the paper's numbers per system role and corpus (role -> corpus -> one per score), where they
    #: differ by baseline and corpus (FCTG's tables); overrides paper_baseline / paper_method
    paper_values: tuple = ()
    measure: str = "time-per-token"  # a ratio claim's quantity (MEASURES)
    flags: tuple[str, ...] = ()  # labels shown on every cell of the claim (e.g. hardware-dependent)
    #: the trained component an ablation claim removes (FCTG: "mva", "mam", "alm"): a cell whose adapter
    #: records it inert is not comparable (``adapters.hold_inert``)
    component: str = ""

    def numbers(self, i: int, method: str, baseline: str, corpus: str) -> tuple[float | None, float | None]:
        """The paper's (baseline, method) values of score ``i`` for these roles on this corpus."""
        if self.paper_values:
            table = dict(self.paper_values)

            def get(role):
                vals = dict(table.get(role, ())).get(corpus, ())
                return vals[i] if i < len(vals) else None

            return get(baseline), get(method)
        b = self.paper_baseline[i] if i < len(self.paper_baseline) else None
        m = self.paper_method[i] if i < len(self.paper_method) else None
        return b, m

    def relative_for(self, i: int, method: str, baseline: str, corpus: str) -> float | None:
        """``paper_relative`` for these roles on this corpus (``paper_values``, where given)."""
        if not self.paper_values:
            return self.paper_relative(i)
        b, m = self.numbers(i, method, baseline, corpus)
        if b is None or m is None or not b:
            return None
        return kind_of(self.kind).relative(b, m)

    def paper_difference(self, i: int) -> float | None:
        """The paper's method - baseline on score ``i`` (in its kind's terms: ``ClaimKind.paper_difference``)."""
        return kind_of(self.kind).paper_difference(self, i)

    def paper_relative(self, i: int) -> float | None:
        """The paper's effect on score ``i`` on the verdict's scale (``ClaimKind.paper_relative``: (method -
        baseline) / baseline; ratio - 1 for a ratio claim; r for a correlation claim); None where the
        paper prints no number."""
        return kind_of(self.kind).paper_relative(self, i)


@dataclass(frozen=True)
class ControlSpec:
    """A seed-paired control of a trained head (a paper's ``[[controls]]`` entry; see the module docstring)."""

    id: str
    title: str
    statement: str
    claim: str
    model: str
    corpus: str
    method: str
    control: str
    baseline: str
    seeds: tuple[int, ...]
    folder: str
    file: str

    def path(self, root: Path, layer: str, seed: int) -> Path:
        name = self.file.format(model=self.model, corpus=self.corpus, layer=layer, seed=seed)
        return root / self.folder / name


#: a matched entry's sweep point role: the role, "~", OPTION=VALUE (e.g. "mle~top_p=0.7")
POINT_SEP = "~"
#: where a matched comparison is made: the method's operating point's value of the matching score,
#: the baseline's, the human row's, or a number given
MATCH_AT = ("method", "baseline", "human")


@dataclass(frozen=True)
class MatchedSpec:
    """A matched-operating-point entry (a paper's ``[[matched]]``; see the module docstring)."""

    id: str
    title: str
    statement: str
    claims: tuple[str, ...]
    method: str
    baseline: str
    quality: str
    match: str
    at: str | float
    models: tuple[str, ...]
    corpora: tuple[str, ...]
    sweeps: tuple  # ((role, option, (values...)), ...)

    def sweep(self, role: str) -> tuple[str, tuple]:
        """(option, values) of ``role``'s sweep."""
        return next((k, v) for r, k, v in self.sweeps if r == role)

    def point_roles(self) -> dict[str, tuple[str, str, float]]:
        """Each sweep point's role name -> (role, option, value)."""
        return {f"{r}{POINT_SEP}{k}={v:g}": (r, k, v) for r, k, v in self.sweeps for v in sorted(v)}


@dataclass(frozen=True)
class Paper:
    name: str
    title: str
    source: str
    protocol: dict
    differences: tuple[str, ...]
    claims: tuple[Claim, ...] = field(default_factory=tuple)
    path: Path | None = None
    diagnostic_roles: tuple[str, ...] = ()
    diagnostics: str = ""  # what the diagnostic roles are, for the report
    seed_controls: tuple[ControlSpec, ...] = ()  # the [[controls]] entries
    matched: tuple[MatchedSpec, ...] = ()  # the [[matched]] entries

    def roles(self) -> dict[str, str]:
        """Every system role of the protocol -> its LAYER/DECODING (one corpus's, where roles differ by corpus)."""
        return all_roles(self.protocol)

    def seed_pairs(self, corpus: str, method: str, baseline: str) -> list[tuple[str, str]]:
        """The seed-paired roles of a comparison on ``corpus`` (``[protocol.seeds.CORPUS]``): (method,
        baseline) first (seed 0), then each replicate of the method with the baseline's of the same
        position; a side without replicates is repeated (its one seed against each of the other's);
        [] where neither side has replicates there (the comparison rests on seed 0)."""
        table = (self.protocol.get("seeds") or {}).get(corpus) or {}
        m, b = table.get(method), table.get(baseline)
        if not m and not b:
            return []
        n = len(m or b)
        return [(method, baseline), *zip(m or [method] * n, b or [baseline] * n)]


def all_roles(protocol: dict) -> dict[str, str]:
    """Every role of a protocol: ``systems``, ``first_fold_systems``, each corpus's ``corpus_systems``
    and each base model's ``model_systems`` (not the sensitivity settings' roles: ``sensitivity_roles``)."""
    roles = dict(protocol.get("systems", {})) | dict(protocol.get("first_fold_systems", {}))
    for extra in (protocol.get("corpus_systems") or {}).values():
        roles |= dict(extra)
    for extra in (protocol.get("model_systems") or {}).values():
        roles |= dict(extra)
    return roles


#: a sensitivity setting's role: the claim's role, "@", the setting (e.g. "graphmax@greedy")
SETTING_SEP = "@"
#: the key of a sensitivity setting that replaces scores instead of systems (the same texts, other
#: references: ``{ scores = { "texygen-bleu-4" = "heldout-bleu-4" } }``)
SCORES_KEY = "scores"


def sensitivity_roles(protocol: dict) -> dict[str, str]:
    """The roles the sensitivity settings add (``ROLE@SETTING`` -> its system), on the base models and
    corpora of ``[protocol.sensitivity]``."""
    settings = (protocol.get("sensitivity") or {}).get("settings") or {}
    return {
        f"{role}{SETTING_SEP}{name}": system
        for name, subs in settings.items()
        for role, system in subs.items()
        if role != SCORES_KEY
    }


def sensitivity_claims(paper: Paper) -> list[tuple[str, Claim]]:
    """(setting, claim) for each setting x each claim of ``[protocol.sensitivity]``: the claim with each
    role the setting replaces renamed ``ROLE@SETTING`` (its baselines the setting does not replace keep
    the protocol's systems; its methods are only those the setting replaces), its id ``CLAIM@SETTING``;
    diagnostic, so it is judged on its own and kept out of the counts."""
    from dataclasses import replace

    sens = paper.protocol.get("sensitivity") or {}
    out = []
    for name, subs in (sens.get("settings") or {}).items():
        for cid in sens.get("claims", []):
            claim = next(c for c in paper.claims if c.id == cid)

            roles = {r: v for r, v in subs.items() if r != SCORES_KEY}
            rescored = dict(subs.get(SCORES_KEY) or {})

            def sub(role: str, name: str = name, roles: dict = roles) -> str:
                return f"{role}{SETTING_SEP}{name}" if role in roles else role

            corpora = tuple(c for c in claim.corpora if c in sens.get("corpora", claim.corpora))
            # the methods the setting changes; a setting of scores only keeps every method but the diagnostic ones
            diagnostic = set(paper.protocol.get("diagnostic_roles", []))
            methods = (
                tuple(sub(r) for r in claim.methods if r in roles)
                if roles
                else tuple(r for r in claim.methods if r not in diagnostic)
            )
            if not methods or not corpora or (rescored and not set(claim.scores) & set(rescored)):
                continue
            out.append(
                (
                    name,
                    replace(
                        claim,
                        id=f"{cid}{SETTING_SEP}{name}",
                        methods=methods,
                        baselines=tuple(sub(r) for r in claim.baselines),
                        scores=tuple(rescored.get(x, x) for x in claim.scores),
                        also=() if rescored else claim.also,
                        corpora=corpora,
                        models=tuple(sens.get("models", ())) or claim.models,
                        diagnostic=True,
                    ),
                )
            )
    return out


def _check_sensitivity(protocol: dict, claims: list, path) -> None:
    """``[protocol.sensitivity]``: known base models, corpora, claims and roles, one line each."""
    sens = protocol.get("sensitivity")
    if not sens:
        return
    what = f"paper file {path}: sensitivity"
    for key in ("models", "corpora", "claims", "settings"):
        if not sens.get(key):
            raise MaxbenchError(f"{what}: needs '{key}' (the settings run on the base models and corpora named)")
    for model in sens.get("models", []):
        if model not in protocol.get("models", []):
            raise MaxbenchError(f"{what}: {unknown_name('base model', str(model), protocol.get('models', []))}")
    for corpus in sens.get("corpora", []):
        if corpus not in protocol.get("corpora", []):
            raise MaxbenchError(f"{what}: {unknown_name('corpus', str(corpus), protocol.get('corpora', []))}")
    ids = [c.id for c in claims if c.runnable and c.kind == "difference"]
    for cid in sens.get("claims", []):
        if cid not in ids:
            raise MaxbenchError(f"{what}: {unknown_name('claim', str(cid), ids)} (a runnable difference claim)")
    roles = all_roles(protocol)
    metrics = [str(m) for m in protocol.get("metrics", [])]
    for name, subs in (sens.get("settings") or {}).items():
        if not isinstance(subs, dict) or not subs:
            raise MaxbenchError(
                f"{what}: setting '{name}' must map roles to systems, e.g. {{ softmax = \"softmax/greedy\" }}"
            )
        rescored = subs.get(SCORES_KEY, {})
        if not isinstance(rescored, dict) or not all(isinstance(v, str) for v in rescored.values()):
            raise MaxbenchError(
                f"{what}: setting '{name}': '{SCORES_KEY}' must map scores to scores, e.g. "
                '{ "texygen-bleu-4" = "heldout-bleu-4" }'
            )
        for score in rescored.values():
            if not any(score == m or score.startswith(f"{m}-") for m in metrics):
                raise MaxbenchError(
                    f"{what}: setting '{name}': score '{score}' is not one of the protocol's metrics "
                    f"({', '.join(metrics)}); add its metric to [protocol] metrics"
                )
        for role in (r for r in subs if r != SCORES_KEY):
            if role not in roles:
                raise MaxbenchError(f"{what}: setting '{name}': {unknown_name('system role', role, roles)}")


def _values(raw, what: str) -> tuple:
    """``paper_values`` (role -> corpus -> list of numbers) as nested tuples, checked."""
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise MaxbenchError(f"{what}: 'paper_values' must be a table of role -> corpus -> [numbers]")
    out = []
    for role, per in raw.items():
        rows = []
        for corpus, vals in per.items():
            vals = vals if isinstance(vals, list) else [vals]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
                raise MaxbenchError(f"{what}: paper_values.{role}.{corpus} must be numbers, got {vals!r}")
            rows.append((corpus, tuple(float(v) for v in vals)))
        out.append((role, tuple(rows)))
    return tuple(out)


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
    roles = all_roles(protocol)
    for corpus in protocol.get("corpus_systems") or {}:
        if corpus not in protocol.get("corpora", []):
            raise MaxbenchError(
                f"paper file {path}: corpus_systems: corpus '{corpus}' is not one of the protocol's corpora"
            )
    for model in protocol.get("model_systems") or {}:
        if model not in protocol.get("models", []):
            raise MaxbenchError(
                f"paper file {path}: model_systems: model '{model}' is not one of the protocol's models"
            )
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
            hardware=bool(raw.get("hardware", False)),
            cost=bool(raw.get("cost", False)),
            diagnostic=bool(raw.get("diagnostic", False)),
            models=_tuple(raw.get("models"), what),
            controls=_tuple(raw.get("controls"), what),
            runnable=runnable,
            reason=raw.get("reason", ""),
            differences=_tuple(raw.get("differences"), what),
            paper_values=_values(raw.get("paper_values"), what),
            measure=raw.get("measure", "time-per-token"),
            flags=_tuple(raw.get("flags"), what),
            component=raw.get("component", ""),
        )
        if not isinstance(claim.component, str):
            raise MaxbenchError(f"{what}: 'component' must be the name of the part it ablates, e.g. \"mva\"")
        if claim.measure not in MEASURES:
            raise MaxbenchError(f"{what}: {unknown_name('measure', str(claim.measure), MEASURES)}")
        for role, per in claim.paper_values:
            if role not in roles:
                raise MaxbenchError(f"{what}: paper_values: {unknown_name('system role', role, roles)}")
            for corpus, _ in per:
                if corpus not in protocol.get("corpora", []):
                    raise MaxbenchError(
                        f"{what}: paper_values.{role}: {unknown_name('corpus', corpus, protocol.get('corpora', []))}"
                    )
        if claim.direction not in DIRECTIONS:
            raise MaxbenchError(f"{what}: {unknown_name('direction', str(claim.direction), DIRECTIONS)}")
        if claim.kind not in kinds():
            raise MaxbenchError(f"{what}: {unknown_name('claim kind', str(claim.kind), kinds())}")
        for model in claim.models:
            if model not in protocol.get("models", []):
                raise MaxbenchError(f"{what}: {unknown_name('base model', str(model), protocol.get('models', []))}")
        if not runnable:
            if not claim.reason:
                raise MaxbenchError(f"{what}: a claim that cannot run needs a 'reason'")
        else:
            if not claim.baselines and kind_of(claim.kind).needs_baseline:
                raise MaxbenchError(f"{what}: has no 'baseline'; name the system role it is compared with")
            for role in claim.methods + claim.baselines:
                if role not in roles:
                    raise MaxbenchError(f"{what}: {unknown_name('system role', role, roles)}")
            if not claim.scores or (claim.also and len(claim.also) != len(claim.scores)):
                raise MaxbenchError(f"{what}: needs 'scores', and 'also' (if given) of the same length")
            wrong = kind_of(claim.kind).check(claim)
            if wrong:
                raise MaxbenchError(f"{what}: {wrong}")
            for corpus in claim.corpora:
                if corpus not in protocol.get("corpora", []):
                    raise MaxbenchError(f"{what}: corpus '{corpus}' is not one of the protocol's corpora")
        claims.append(claim)
    _check_sensitivity(protocol, claims, path)
    diagnostic_roles = _tuple(protocol.get("diagnostic_roles"), f"paper file {path}")
    for role in diagnostic_roles:
        if role not in roles:
            raise MaxbenchError(f"paper file {path}: diagnostic_roles: {unknown_name('system role', role, roles)}")
    _check_seeds(protocol, path)
    beside = protocol.get("beside", [])
    if not isinstance(beside, list) or not all(isinstance(x, str) and x for x in beside):
        raise MaxbenchError(f"paper file {path}: 'beside' must be a list of score names, e.g. [\"attr-acc\"]")
    seed_controls = tuple(_control(raw, path, protocol, claims) for raw in spec.get("controls", []))
    matched = tuple(_matched(raw, path, protocol, claims) for raw in spec.get("matched", []))
    if len({m.id for m in matched}) != len(matched):
        raise MaxbenchError(f"paper file {path}: two [[matched]] entries share an id; give each its own")
    return Paper(
        name=spec.get("paper", name),
        title=spec.get("title", name),
        source=spec.get("source", ""),
        protocol=protocol,
        differences=_tuple(spec.get("differences", {}).get("all"), f"paper file {path}"),
        claims=tuple(claims),
        path=path,
        diagnostic_roles=diagnostic_roles,
        diagnostics=str(protocol.get("diagnostics", "")),
        seed_controls=seed_controls,
        matched=matched,
    )


def _check_seeds(protocol: dict, path: Path) -> None:
    """``[protocol.seeds.CORPUS]``: role -> its replicates (roles trained with seeds 1, 2, ...), on one
    of the protocol's corpora; every role known on that corpus, no role twice, and as many replicates
    for every role of a corpus (they pair by position)."""
    seeds = protocol.get("seeds") or {}
    if not isinstance(seeds, dict):
        raise MaxbenchError(f"paper file {path}: 'seeds' must be a table of corpora; see docs/reproductions.md")
    for corpus, table in seeds.items():
        what = f"paper file {path}, seeds of '{corpus}'"
        if corpus not in protocol.get("corpora", []):
            raise MaxbenchError(f"{what}: '{corpus}' is not one of the protocol's corpora")
        known = dict(protocol.get("systems", {})) | dict(protocol.get("first_fold_systems", {}))
        known |= dict((protocol.get("corpus_systems") or {}).get(corpus) or {})
        for extra in (protocol.get("model_systems") or {}).values():
            known |= dict(extra)
        if not isinstance(table, dict) or not table:
            raise MaxbenchError(f'{what}: give each role\'s replicates, e.g. fctg = ["fctg-seed1", "fctg-seed2"]')
        named = []
        for role, reps in table.items():
            if not isinstance(reps, list) or not reps or not all(isinstance(r, str) for r in reps):
                raise MaxbenchError(f"{what}: role '{role}' needs a list of replicate roles, got {reps!r}")
            for r in (role, *reps):
                if r not in known:
                    raise MaxbenchError(f"{what}: {unknown_name('system role', r, known)}")
            named += [role, *reps]
        if len(set(named)) != len(named):
            raise MaxbenchError(f"{what}: a role is named twice; each replicate belongs to one role")
        if len({len(reps) for reps in table.values()}) != 1:
            raise MaxbenchError(f"{what}: every role needs as many replicates (they pair by position)")


def _control(raw: dict, path: Path, protocol: dict, claims: list[Claim]) -> ControlSpec:
    """One ``[[controls]]`` entry, checked: its claim, base model and corpus known, its seeds
    integers, its file pattern naming the layer and the seed."""
    cid = raw.get("id", "?")
    what = f"paper file {path}, control '{cid}'"
    ids = [c.id for c in claims]
    if raw.get("claim") not in ids:
        raise MaxbenchError(f"{what}: {unknown_name('claim', str(raw.get('claim')), ids)}")
    if raw.get("model") not in protocol.get("models", []):
        raise MaxbenchError(f"{what}: {unknown_name('base model', str(raw.get('model')), protocol.get('models', []))}")
    if raw.get("corpus") not in protocol.get("corpora", []):
        raise MaxbenchError(f"{what}: {unknown_name('corpus', str(raw.get('corpus')), protocol.get('corpora', []))}")
    seeds = _tuple(raw.get("seeds"), what)
    if (
        not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise MaxbenchError(f"{what}: 'seeds' must be distinct integers, got {raw.get('seeds')!r}")
    pattern = str(raw.get("file", ""))
    if "{seed}" not in pattern or "{layer}" not in pattern:
        raise MaxbenchError(f"{what}: 'file' must be a pattern naming {{layer}} and {{seed}}, got {pattern!r}")
    try:
        pattern.format(model="m", corpus="c", layer="l", seed=0)
    except (KeyError, IndexError, ValueError) as exc:
        raise MaxbenchError(f"{what}: 'file' {pattern!r} is not a valid pattern: {exc}") from None
    for key in ("method", "control", "folder"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise MaxbenchError(f"{what}: needs '{key}'")
    return ControlSpec(
        id=cid,
        title=str(raw.get("title", f"Control: {raw['control']}")),
        statement=str(raw.get("statement", f"{raw['method']} improves on its {raw['control']} control")),
        claim=raw["claim"],
        model=raw["model"],
        corpus=raw["corpus"],
        method=raw["method"],
        control=raw["control"],
        baseline=str(raw.get("baseline", "softmax")),
        seeds=tuple(seeds),
        folder=raw["folder"],
        file=pattern,
    )


def _matched(raw: dict, path: Path, protocol: dict, claims: list[Claim]) -> MatchedSpec:
    """One ``[[matched]]`` entry, checked: its claims, roles, base models and corpora known, one option
    swept per role with two numbers or more, ``at`` one of ``MATCH_AT`` or a number (its scores are
    checked against the protocol's metrics with the claims', ``protocol.check_metrics``)."""
    mid = raw.get("id", "?")
    what = f"paper file {path}, matched '{mid}'"
    roles = all_roles(protocol)
    ids = [c.id for c in claims]
    for key in ("id", "method", "baseline", "quality", "match"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise MaxbenchError(f"{what}: needs '{key}' (a string)")
    for cid in _tuple(raw.get("claims"), what):
        if cid not in ids:
            raise MaxbenchError(f"{what}: {unknown_name('claim', str(cid), ids)}")
    for key in ("method", "baseline"):
        if raw[key] not in roles:
            raise MaxbenchError(f"{what}: {key}: {unknown_name('system role', raw[key], roles)}")
    models = _tuple(raw.get("models", protocol.get("models")), what)
    corpora = _tuple(raw.get("corpora", protocol.get("corpora")), what)
    for model in models:
        if model not in protocol.get("models", []):
            raise MaxbenchError(f"{what}: {unknown_name('base model', str(model), protocol.get('models', []))}")
    for corpus in corpora:
        if corpus not in protocol.get("corpora", []):
            raise MaxbenchError(f"{what}: {unknown_name('corpus', str(corpus), protocol.get('corpora', []))}")
    form = "sweeps = { ROLE = { OPTION = [value, value, ...] } } for the method and the baseline"
    sweeps = raw.get("sweeps")
    if not isinstance(sweeps, dict) or set(sweeps) != {raw["method"], raw["baseline"]}:
        raise MaxbenchError(f"{what}: needs {form}")
    out = []
    for role in (raw["method"], raw["baseline"]):
        table = sweeps[role]
        if not isinstance(table, dict) or len(table) != 1:
            raise MaxbenchError(f"{what}: the sweep of {role} must vary exactly one option ({form})")
        ((option, values),) = table.items()
        if (
            not isinstance(values, list)
            or len(values) < 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            or len(set(values)) != len(values)
        ):
            raise MaxbenchError(
                f"{what}: the sweep of {role} over {option} needs two distinct numbers or more, got {values!r}"
            )
        out.append((role, str(option), tuple(sorted(values))))
    at = raw.get("at", "method")
    if not (at in MATCH_AT or (isinstance(at, (int, float)) and not isinstance(at, bool))):
        raise MaxbenchError(f"{what}: 'at' must be one of {', '.join(MATCH_AT)} or a number, got {at!r}")
    return MatchedSpec(
        id=raw["id"],
        title=str(raw.get("title", f"Matched operating point: {raw['quality']} at equal {raw['match']}")),
        statement=str(raw.get("statement", "")),
        claims=_tuple(raw.get("claims"), what),
        method=raw["method"],
        baseline=raw["baseline"],
        quality=raw["quality"],
        match=raw["match"],
        at=at if isinstance(at, str) else float(at),
        models=models,
        corpora=corpora,
        sweeps=tuple(out),
    )
