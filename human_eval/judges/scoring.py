"""Label probabilities from a model in this process (G-Eval's scoring, Liu et al. 2023).

For one question (``template.Question``) the judge's answer is a distribution over the labels:

- **single-token**: every label is one token of the judge's tokenizer. One forward pass over
  the page; p(label) is the softmax of the last position's logits at the label's token.
- **sequence**: some label is several tokens. The page is run once and its key-value cache kept;
  each label's later tokens are run on a copy of that cache; p(label) = exp(sum of the label
  tokens' log-probabilities given the page and the label's earlier tokens).

``label_mass`` is the sum of these p(label): how much of the model's next-text probability the
labels hold. The stored probabilities are p(label) / label_mass (normalised over the labels),
the argmax is the label of largest probability (the first of equals), and on a scale the score
is the expectation sum_l value(l) * p(l) / label_mass.

A label the tokenizer turns into no token, or two labels with the same tokens, cannot be told
apart by probabilities: ``label_tokens`` refuses them (MaxbenchError) before anything is judged.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

from maxbench.errors import MaxbenchError
from maxbench.human_eval.judges.template import render, template_hash

SINGLE, SEQUENCE = "single-token", "sequence"


@dataclass(frozen=True)
class Scored:
    probabilities: tuple[float, ...]  # normalised over the labels, in the labels' order
    label_mass: float
    scoring: str

    def argmax(self) -> int:
        return max(range(len(self.probabilities)), key=lambda i: (self.probabilities[i], -i))

    def expectation(self, values: tuple[int, ...]) -> float:
        return float(sum(v * p for v, p in zip(values, self.probabilities, strict=True)))


def label_tokens(tokenizer, labels: tuple[str, ...], judge: str) -> list[list[int]]:
    """Each label's token ids (no special tokens), refusing empty and identical ones."""
    ids = [list(tokenizer(label, add_special_tokens=False)["input_ids"]) for label in labels]
    for label, tokens in zip(labels, ids, strict=True):
        if not tokens:
            raise MaxbenchError(
                f"judge {judge}: its tokenizer turns the label {label!r} into no token, so the label cannot be "
                "scored; use a judge whose tokenizer keeps the rubric's labels (digits, letters); nothing was judged"
            )
    seen: dict[tuple, str] = {}
    for label, tokens in zip(labels, ids, strict=True):
        if tuple(tokens) in seen:
            raise MaxbenchError(
                f"judge {judge}: its tokenizer turns the labels {seen[tuple(tokens)]!r} and {label!r} into the same "
                f"tokens {tokens}, so they cannot be told apart; use a judge whose tokenizer keeps them apart; "
                "nothing was judged"
            )
        seen[tuple(tokens)] = label
    return ids


def judge_model(name: str):
    """The judge's base model and its adapter (None without one), read as a system string's model
    part is read (``MODEL[@REVISION][+ADAPTER(k=v)]``, docs/models.md) and checked before anything
    loads. A judge's adapter is one that needs no training (``peft(path=DIR)``, a folder that
    ``save_pretrained`` wrote, or a plugin adapter that does not train): an adapter maxbench trains
    is trained by a run on that run's corpus, which a study does not name."""
    from maxbench.systems.models import check_model
    from maxbench.systems.system_strings import parse_system

    spec = parse_system(f"{name}/softmax/greedy")
    adapter = spec.build_adapter()
    if adapter is not None:
        if adapter.trains or adapter.needs_attributes:
            raise MaxbenchError(
                f"judge {name}: adapter '{adapter.name}' is trained by a run on its corpus, which a study does not "
                "name; a judge takes an adapter that needs no training: save the trained adapter with peft's "
                "save_pretrained and give MODEL+peft(path=DIR); nothing was judged"
            )
        adapter._plugin_call("check_inputs", adapter.check_inputs)
    check_model(spec.model)
    return spec.model, adapter


def load_judge_model(name: str, device: str | None = None, threads: int | None = None):
    """The judge's model (``judge_model``) loaded: the base model through ``load_model``, then its
    adapter applied the way a run applies one (``Adapter.prepare``), so an adapted judge is the
    adapted model a run decodes, its ``hash`` the base model's joined with the adapter's."""
    from maxbench.systems.adapters import AdapterFitContext, adapter_code
    from maxbench.systems.models import load_model

    base, adapter = judge_model(name)
    loaded = load_model(base, device=device, threads=threads)
    if adapter is None:
        return loaded
    return adapter.prepare(AdapterFitContext(model=loaded, examples=[], data={}), code=adapter_code(adapter))


class InProcessJudge:
    """A judge backend over a ``maxbench.systems.models.LoadedModel`` (its tokenizer and weights).

    A backend has a ``name``, an ``identity()`` (what ``judge.identity`` hashes), ``prepare(labels)``
    (checks the labels, once per label set, before anything is judged), ``score(page, prepared)``
    and ``concurrency`` (units scored at once)."""

    concurrency = 1

    def __init__(self, loaded):
        self.loaded = loaded
        self.name = loaded.name

    def identity(self) -> dict:
        """The judge's identity. An adapted model's is named ``MODEL+ADAPTER`` and adds its adapter's
        name, key and content hash (the key, which its ``weights`` hash joins too, covers the
        adapter's options and content, not where its folder lies: a moved folder is the same judge)."""
        tok = self.loaded.tokenizer
        chat = getattr(tok, "chat_template", None) or None
        model, adapter = self.loaded.name, (self.loaded.options or {}).get("adapter")
        extra = {}
        if adapter:  # MODEL+ADAPTER without the options (a folder's path): the adapter's key holds what counts
            model = model[: model.rfind("+" + adapter["name"])] + "+" + adapter["name"]
            extra = {"adapter": {k: adapter.get(k) for k in ("name", "key", "sha256", "base_hash")}}
        return extra | {
            "model": model,
            "weights": self.loaded.hash,
            "tokenizer": self.loaded.tokenizer_hash,
            "template": template_hash(chat if isinstance(chat, str) else json.dumps(chat, sort_keys=True)),
            "decoding": {
                "method": "label-probabilities",
                "framing": "chat-template" if chat else "plain",
                "dtype": self.loaded.dtype,
            },
        }

    def prepare(self, labels: tuple[str, ...]) -> list[list[int]]:
        return label_tokens(self.loaded.tokenizer, labels, self.name)

    def score(self, page: str, label_ids: list[list[int]]) -> Scored:
        text, framed = render(page, self.loaded.tokenizer)
        return self.score_text(text, framed, label_ids)

    def score_text(self, text: str, framed: bool, label_ids: list[list[int]]) -> Scored:
        import torch

        tok, model = self.loaded.tokenizer, self.loaded.model
        context = list(tok(text, add_special_tokens=not framed)["input_ids"])
        device = next(model.parameters()).device
        with torch.inference_mode():
            # the page once, logits at its last position only (a large vocabulary's head over every
            # position would cost more than the model's body)
            out = model(torch.tensor([context], device=device), use_cache=True, logits_to_keep=1)
            first = torch.log_softmax(out.logits[0, -1].double(), dim=-1)
            if all(len(ids) == 1 for ids in label_ids):
                label_logp = torch.stack([first[ids[0]] for ids in label_ids])
                scoring = SINGLE
            else:
                sums = []
                for ids in label_ids:
                    total = first[ids[0]]
                    if len(ids) > 1:  # the label's later tokens on a copy of the page's cache
                        cache = copy.deepcopy(out.past_key_values)
                        step = model(torch.tensor([ids[:-1]], device=device), past_key_values=cache, use_cache=True)
                        logp = torch.log_softmax(step.logits[0].double(), dim=-1)
                        total = total + sum(logp[p, t] for p, t in enumerate(ids[1:]))
                    sums.append(total)
                label_logp = torch.stack(sums)
                scoring = SEQUENCE
        mass = float(torch.exp(label_logp).sum())
        probs = torch.softmax(label_logp, dim=0)
        return Scored(tuple(float(p) for p in probs), mass, scoring)
