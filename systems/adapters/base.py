"""The adapter contract: a trained change of the base model that output layers then decode on top of.

A system string names an adapter after its base model, ``MODEL[@revision][+ADAPTER(k=v)]/LAYER/DECODING``
(e.g. ``smollm2-135m+prefix(n=10)/softmax/top_k=40``; docs/models.md). An ``Adapter`` subclass says:

- ``name``, its key in ``ADAPTERS`` (``systems/adapters/__init__.py``) and in system strings;
- ``OPTIONS``: every option with its default, in the order the canonical name writes them
  (options at their default are left out of the name); ``CHOICES`` the allowed values of a
  categorical option; ``check()`` the ranges of the others. An unknown option is a one-line
  error with the closest known option, before anything is loaded;
- ``needs_attributes``: it conditions on a suite item's attributes (FCTG, NRP: they subclass
  ``ConditionalAdapter``, ``systems/adapters/conditional.py``); run on a suite without attributes,
  it is refused before any training; on one with them, ``check_attribute_values(suite, examples)``
  may refuse the suite's items against the training data (a no-op here);
- ``version``: the format of what ``train`` makes; raising it retrains every cached adapter of that kind;
- ``train(lm, ctx)``: the trained state (tensors) for the frozen base model ``lm`` on the examples
  of ``ctx`` (a corpus's or a suite's fitting split), deterministic for its ``seed`` option;
- ``apply(lm, tensors)``: the module that decoding calls instead of ``lm.model``, with the call of a
  transformers causal LM (``input_ids``, ``attention_mask``, ``position_ids``, ``past_key_values``,
  ``use_cache``, ``logits_to_keep``, ``output_hidden_states``) and ``config`` and
  ``get_output_embeddings()``. maxbench's own loop (``systems/decoding.py``) decodes it, so any
  output layer composes on top, and reference perplexities, hidden-state caches and trained
  heads see the adapted model.

``Adapter.prepare(ctx)`` is the rest, shared: the trained state is looked up in
``$MAXBENCH_HOME/adapters/<name>/<key>``, the key a hash of ``identity`` (the base model's
identity, which covers every weight shard, the config, the tokenizer and non-default options; the
adapter's name and every option; the training data's hash; the adapter's code), trained and stored
there atomically when missing (under a lock, so parallel workers train it once), and applied. The
adapted model is a new ``LoadedModel`` whose ``hash`` joins the base model's identity with the
adapter's key: an adapter trained for another base model is never reused, and caches keyed on
the model (hidden states, heads) never mix an adapted model with its base.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from maxbench.errors import MaxbenchError
from maxbench.registry import closest


@dataclass(frozen=True)
class TrainingExample:
    """One training text: ``text`` continues ``prompt`` (empty for a plain corpus document, when the
    whole text is learnt); ``attributes`` are a conditional suite item's, for adapters that need them."""

    prompt: str
    text: str
    attributes: dict | None = None


@dataclass
class AdapterFitContext:
    """What an adapter trains on: the base model, the examples, and the data's identity."""

    model: Any  # maxbench.systems.models.LoadedModel, the frozen base model
    examples: list[TrainingExample]
    data: dict  # the training data's identity: e.g. {"corpus": name, "sha256": ..., "split": "fit"}
    options: dict = field(default_factory=dict)  # progress (bool), retrain (bool)


def _typed(kind: type, name: str, option: str, value):
    """``value`` as ``kind`` (the type of the option's default), or a one-line error."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("true", "false"):
            return str(value).lower() == "true"
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    else:
        return str(value)
    raise MaxbenchError(f"adapter '{name}': option {option}={value} must be {kind.__name__}")


class Adapter:
    #: the name in system strings, e.g. "prefix"; must equal its key in ADAPTERS
    name: str = "base"
    #: every option and its default, in the order the canonical name writes them
    OPTIONS: dict[str, Any] = {}
    #: the allowed values of categorical options
    CHOICES: dict[str, tuple] = {}
    #: the adapter conditions on a suite item's attributes
    needs_attributes: bool = False
    #: the format of the trained state; raising it retrains every cached adapter of this kind
    version: str = "1"
    #: the adapter is trained by maxbench (on a fitting corpus); False for one loaded as it is (``peft``)
    trains: bool = True

    def __init__(self, **options):
        unknown = [k for k in options if k not in self.OPTIONS]
        if unknown:
            near = closest(unknown[0], self.OPTIONS)
            raise MaxbenchError(
                f"adapter '{self.name}' has no option '{unknown[0]}'"
                + (f": did you mean '{near}'?" if near else ";")
                + f" its options: {', '.join(self.OPTIONS) or 'none'}"
            )
        self.options = dict(self.OPTIONS)
        for key, value in options.items():
            default = self.OPTIONS[key]
            kind = type(default) if default is not None else str
            self.options[key] = _typed(kind, self.name, key, value)
            if key in self.CHOICES and self.options[key] not in self.CHOICES[key]:
                allowed = ", ".join(str(c) for c in self.CHOICES[key])
                near = closest(str(value), [str(c) for c in self.CHOICES[key]])
                raise MaxbenchError(
                    f"adapter '{self.name}': unknown {key} '{value}'"
                    + (f": did you mean '{near}'?" if near else ";")
                    + f" known values: {allowed}"
                )
        self.check()
        self.meta: dict = {}

    # ------------------------------------------------------------------ what a subclass declares
    def check(self) -> None:
        """Refuse out-of-range options (one line, ``MaxbenchError``); types and choices are checked already."""

    def check_inputs(self) -> None:
        """Before any model loads, in a run's preflight: refuse missing or invalid inputs the adapter
        reads from outside (files), one line (``MaxbenchError``). Not called to read a system string,
        so a recorded run's names still read where those files are gone."""

    def check_attribute_values(self, suite, examples: list[TrainingExample]) -> None:
        """Before any model loads, in a run's preflight, for an adapter that ``needs_attributes`` on a
        suite that has them: refuse, one line (``MaxbenchError``), a suite item whose attributes the
        adapter cannot condition on given ``examples``, what it trains on (its training data; empty
        for an adapter that does not train). Accepts every suite here; ``ConditionalAdapter``
        refuses a categorical value the examples never carry."""

    def train(self, lm, ctx: AdapterFitContext) -> tuple[dict, dict]:
        """Train on ``ctx.examples`` for the frozen base model ``lm``; returns (tensors, measurements),
        the tensors being everything ``apply`` needs."""
        raise NotImplementedError

    def apply(self, lm, tensors: dict):
        """The module decoding calls instead of ``lm.model`` (see the module's docstring)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared
    @classmethod
    def canonical_params(cls, params) -> tuple:
        """The options as the canonical name writes them: checked, typed, those at their default
        left out, in ``OPTIONS`` order. ``params``: (key, value) pairs or a dict."""
        adapter = cls(**dict(params))
        return tuple((k, adapter.options[k]) for k in cls.OPTIONS if adapter.options[k] != cls.OPTIONS[k])

    def params(self) -> dict:
        """The non-default options (what the system string shows)."""
        return {k: v for k, v in self.options.items() if v != self.OPTIONS[k]}

    def identity(self, lm, data: dict, code: dict) -> dict:
        """What the trained state depends on: hashed into its folder's name and stored beside it."""
        return {
            "adapter": self.name,
            "version": self.version,
            "model_hash": lm.hash,
            "tokenizer_hash": lm.tokenizer_hash,
            "options": dict(self.options),
            "data": dict(data),
            "code": dict(code),
        }

    def prepare(self, ctx: AdapterFitContext, code: dict | None = None):
        """The adapted model: the trained state loaded from the cache, or trained now and cached, then
        applied. ``code`` is where the adapter's code comes from (``ADAPTERS.origin``); a built-in's
        is its ``version`` only, so upgrading maxbench does not retrain."""
        import torch

        from maxbench.locks import exclusive
        from maxbench.systems import hidden_cache as hc

        lm = ctx.model
        ident = self.identity(lm, ctx.data, code or {})
        key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]
        directory = adapter_directory(self.name, key)
        what = self.described()
        unserialisable: list[str] = []
        with exclusive(directory):  # a second process waits for the first one's training and loads it
            loaded = None if ctx.options.get("retrain") else hc.load_head(directory, lm)
            if loaded is not None:
                tensors, meta = loaded
            else:
                got = self._plugin_call("train", self.train, lm, ctx)
                if not (isinstance(got, tuple) and len(got) == 2 and all(isinstance(x, dict) for x in got)):
                    raise MaxbenchError(
                        f"{what}: train returned {type(got).__name__}; return (tensors, measurements), two dicts"
                    )
                tensors, measured = got
                bad = [k for k, v in tensors.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
                if bad:
                    raise MaxbenchError(
                        f"{what}: train's tensors hold {bad[0]!r}, which is not a tensor named by a string"
                    )
                tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
                # measurements go to meta.json: what JSON cannot hold is refused, after the tensors are kept
                kept = {}
                for k, v in measured.items():
                    try:
                        json.dumps(v, allow_nan=False)
                        kept[str(k)] = v
                    except (TypeError, ValueError):
                        unserialisable.append(str(k))
                meta = hc.save_head(directory, tensors, {**ident, "layer": self.name, "key": key, **kept})
        if unserialisable:
            raise MaxbenchError(
                f"{what}: train's measurements {', '.join(unserialisable)} are not JSON numbers, strings, lists or "
                f"dicts; the trained state is kept in {directory} (the next run uses it without them): return "
                "plain values there"
            )
        self.meta = meta
        module = self._plugin_call("apply", self.apply, lm, tensors)
        if not callable(module) or not callable(getattr(module, "get_output_embeddings", None)):
            raise MaxbenchError(
                f"{what}: apply returned {type(module).__name__}; return the module decoding calls instead of the "
                "model (with config and get_output_embeddings())"
            )
        return adapted_model(lm, self, module, key, meta.get("sha256", ""))

    def described(self) -> str:
        """The adapter as messages name it: a plugin's with its origin."""
        from maxbench.registry import describe_origin
        from maxbench.systems.adapters import ADAPTERS

        if self.name in ADAPTERS and not ADAPTERS.is_builtin(self.name):
            return f"plugin adapter '{self.name}' from {describe_origin(ADAPTERS.origin(self.name))}"
        return f"adapter '{self.name}'"

    def _plugin_call(self, method: str, fn, *args):
        """``fn(*args)``; a plugin's failure (not a ``MaxbenchError``) is one line naming it and ``method``."""
        from maxbench.systems.adapters import ADAPTERS

        if self.name not in ADAPTERS or ADAPTERS.is_builtin(self.name):
            return fn(*args)
        try:
            return fn(*args)
        except MaxbenchError:
            raise
        except Exception as exc:  # noqa: BLE001 - a plugin's own failure, as one line
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise MaxbenchError(
                f"{self.described()}: {method} failed: {type(exc).__name__}" + (f": {detail}" if detail else "")
            ) from None

    def suffix(self) -> str:
        """``+name(k=v,...)`` as the canonical system string writes it."""
        return adapter_suffix(self.name, tuple(self.params().items()))


def adapter_directory(name: str, key: str):
    from maxbench.fileio import maxbench_home

    return maxbench_home() / "adapters" / name / key


def _fmt(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return repr(v)
    return str(v)


def adapter_suffix(name: str | None, params: tuple) -> str:
    """The adapter part of a system string: '' without an adapter, else ``+name`` or ``+name(k=v,...)``."""
    if not name:
        return ""
    return f"+{name}" + (f"({','.join(f'{k}={_fmt(v)}' for k, v in params)})" if params else "")


def adapted_model(lm, adapter: Adapter, module, key: str, weights_sha256: str, extra: dict | None = None):
    """``lm`` with ``module`` in place of its model: named ``base+adapter(...)``, its identity the base
    model's joined with the adapter's key, the adapter recorded in ``describe()``'s options (with
    ``extra``'s entries)."""
    from maxbench.systems.models import LoadedModel

    suffix = adapter.suffix()
    ident = hashlib.sha256(json.dumps({"base": lm.hash, "adapter": key}, sort_keys=True).encode()).hexdigest()
    return LoadedModel(
        name=lm.name + suffix,
        model=module,
        tokenizer=lm.tokenizer,
        hash=ident,
        tokenizer_hash=lm.tokenizer_hash,
        device=lm.device,
        dtype=lm.dtype,
        options=dict(lm.options)
        | {
            "adapter": {
                "name": adapter.name,
                "options": adapter.params(),
                "base_hash": lm.hash,
                "key": key,
                "sha256": weights_sha256,
            }
            | dict(extra or {})
        },
    )


def shorter_context(config, positions: int):
    """A copy of ``config`` whose context is ``positions`` shorter (a prefix takes them), so the
    loop's checks of prompt + new tokens against the context count them."""
    out = copy.copy(config)
    n = getattr(config, "max_position_embeddings", None)
    if isinstance(n, int):
        require_positions(n, positions)
        out.max_position_embeddings = n - positions
    return out


def require_positions(context: int | None, positions: int, what: str = "prefix") -> None:
    """Refuse an adapter that takes ``positions`` of a context of ``context`` and leaves no position
    for a prompt and its new tokens: the model would run on positions it never saw in training."""
    if isinstance(context, int) and positions >= context:
        raise MaxbenchError(
            f"adapter '{what}': n={positions} takes {positions} positions, and the model's context is {context}; "
            f"give n below {context} minus the prompt and its new tokens"
        )


def training_order(examples: list[TrainingExample]) -> list[int]:
    """A fixed order of the examples that does not depend on how they were listed: by the sha256 of
    their text (as the hidden-state cache orders documents)."""
    key: Callable[[int], str] = lambda i: hashlib.sha256(  # noqa: E731
        (examples[i].prompt + "\0" + examples[i].text).encode()
    ).hexdigest()
    return sorted(range(len(examples)), key=key)
