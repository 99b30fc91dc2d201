"""POSG (POS Guided Softmax and Sampling): the POS head on a frozen base model.

The next token is decomposed through its part of speech (Eq. 2-3 of the paper):

    p(w | h) = sum_rho p(rho | h) p(w | h, rho),
    p(w | h, rho) = softmax of the base logits restricted to V_rho (0 outside it),

where p(rho | h) is a POS head on the base model's final hidden state and V_rho is the set
of tokens observed with tag rho in the fitting split. The base model stays frozen, so
p(w | h, rho) has nothing to train and only the POS head is trained, on the tag part of
Eq. 4 (systems/layers/posg/fit.py). The paper's head is linear, softmax(h^T o_rho); trained
from nothing on the default budget it is a poor guess of what the frozen LM already knows
about the next tag, worse than softmax alone (benchmarks/head_training.py). By default
(``lm_prior``) each class logit also gets the base model's own log-mass of that class's
vocabulary, weighted per class and started at weight 1 with the linear part at 0, so
training starts from the LM's implied tag distribution and corrects it (``--no-lm-prior``
gives the plain linear head).

Catch-all. A token seen with tag rho only in the fitting split gets probability 0 under rho
at test time whenever it appears with another tag, or not at all if it never appeared;
the class ``*`` (CATCH_ALL, last) holds the whole vocabulary (its p(w | h, *) is the base
softmax), so every token keeps mass. Without it, tokens outside every V_rho get exactly zero.
The output layer, with POS Guided Sampling and POS control, is systems/layers/posg/layer.py.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from maxbench.systems.layers.kerbs.head import grouped_logsumexp
from maxbench.systems.layers.workspace import Workspace, logsumexp_rows

CATCH_ALL = "*"


class POSGHead(nn.Module):
    """POS classes (``tags``, the catch-all last when present), class vocabularies as
    (token, class) ``pairs`` and the POS head p(rho | h).

    The head is linear in h (the paper's ``h^T o_rho``). With ``lm_prior`` it also takes, for
    each class, the base model's own log-mass of that class's vocabulary,
    ``log sum_{w in V_rho} softmax(logits)_w`` (a function of h through the frozen LM head),
    weighted per class: logit_rho = o_rho . h + b_rho + gamma_rho * prior_rho. Starting
    from o = 0, b = 0, gamma = 1 the head begins at the tag distribution the base model
    already implies (for disjoint classes covering the vocabulary that is exactly softmax)
    and training corrects it, instead of learning it from nothing."""

    PRIOR_FLOOR = -50.0  # a class with less than e^-50 of the mass counts as having e^-50

    def __init__(
        self,
        vocab_size: int,
        tags: list[str],
        pairs: torch.Tensor,
        hidden_size: int,
        weight: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        prior_weight: torch.Tensor | None = None,
        lm_prior: bool = False,
    ):
        super().__init__()
        self.vocab_size, self.tags, self.lm_prior = int(vocab_size), list(tags), bool(lm_prior)
        self.register_buffer("pairs", pairs.long().clone())  # (P, 2): token id, class id
        self.linear = nn.Linear(hidden_size, len(tags))
        self.prior_weight = nn.Parameter(
            torch.ones(len(tags)) if prior_weight is None else prior_weight.float().clone(), requires_grad=self.lm_prior
        )
        with torch.no_grad():
            self.linear.weight.copy_(torch.zeros(len(tags), hidden_size) if weight is None else weight)
            self.linear.bias.copy_(torch.zeros(len(tags)) if bias is None else bias)
        self._index()

    def _index(self) -> None:
        tok, cls = self.pairs[:, 0], self.pairs[:, 1]
        self.class_members = [tok[cls == c] for c in range(len(self.tags))]
        # the class holding the whole vocabulary in order (the catch-all): its log-mass is the logits'
        # own logsumexp, with no gathered copy of the (B, V) logits
        everything = torch.arange(self.vocab_size, device=tok.device)
        self.whole = next(
            (c for c, m in enumerate(self.class_members) if len(m) == self.vocab_size and torch.equal(m, everything)),
            None,
        )
        self.membership = torch.zeros((self.vocab_size, len(self.tags)), dtype=torch.bool, device=tok.device)
        self.membership[tok, cls] = True  # (V, T): token w is in V_rho
        # the other non-empty classes' members one after the other, gathered by one index_select:
        # (class, start, end) of each class's columns in the gathered block
        parts = [(c, m) for c, m in enumerate(self.class_members) if c != self.whole and len(m)]
        self.gathered = torch.cat([m for _, m in parts]) if parts else tok[:0]
        ends = torch.tensor([len(m) for _, m in parts], dtype=torch.long).cumsum(0).tolist()
        self.gathered_spans = [(c, end - len(m), end) for (c, m), end in zip(parts, ends)]

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self._index()  # keep the derived index on the buffers' device
        return out

    def class_lse(self, logits: torch.Tensor, work: Workspace | None = None) -> torch.Tensor:
        """log sum_{w in V_rho} exp(logit_w) for every class (B, T); -inf for an empty class.

        Every class's value is bit for bit ``torch.logsumexp(logits[:, members], -1)``: the catch-all
        reduces the logits themselves (the same values in the same contiguous layout), the other
        classes are gathered by one ``index_select`` into one block and reduced column range by
        column range. With ``work`` (a caller that loops over chunks of positions passes the same
        one to every call) the temporaries go into its buffers (:func:`logsumexp_rows`); without it
        (a decoding step, a few rows) ``torch.logsumexp`` allocates them, in fewer Python calls."""
        rows = logits.shape[0]
        out = torch.full((rows, len(self.tags)), -math.inf, dtype=logits.dtype, device=logits.device)
        if work is None:
            block = torch.index_select(logits, 1, self.gathered) if self.gathered_spans else None
            if self.whole is not None:
                out[:, self.whole] = torch.logsumexp(logits.contiguous(), dim=-1)
            for c, start, end in self.gathered_spans:
                out[:, c] = torch.logsumexp(block[:, start:end], dim=-1)
            return out
        lse = work.take("lse", (rows,), logits)
        if self.whole is not None:
            out[:, self.whole] = logsumexp_rows(logits.contiguous(), lse, work)
        if self.gathered_spans:
            block = work.take("gathered", (rows, len(self.gathered)), logits)
            torch.index_select(logits, 1, self.gathered, out=block)
            for c, start, end in self.gathered_spans:
                out[:, c] = logsumexp_rows(block[:, start:end], lse, work)
        return out

    def prior(self, logits: torch.Tensor, class_lse: torch.Tensor | None = None) -> torch.Tensor:
        """The base model's log-mass of each class vocabulary (B, T), floored at PRIOR_FLOOR."""
        logits = logits.float()
        class_lse = self.class_lse(logits) if class_lse is None else class_lse
        if self.whole is not None and class_lse.dtype == logits.dtype:
            total = class_lse[:, self.whole, None]  # the whole vocabulary's log-mass, computed once
        else:
            total = torch.logsumexp(logits, dim=-1, keepdim=True)
        return (class_lse - total).clamp_min(self.PRIOR_FLOOR)

    def tag_logits(self, hidden: torch.Tensor, prior: torch.Tensor | None) -> torch.Tensor:
        z = self.linear(hidden.float())
        if self.lm_prior:
            if prior is None:
                raise ValueError("this POS head uses the base model's prior: pass the logits")
            z = z + self.prior_weight * prior
        return z

    def tag_logprobs(
        self,
        hidden: torch.Tensor,
        logits: torch.Tensor | None = None,
        control: int | None = None,
        factor: float = 1.0,
        class_lse: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """log p(rho | h) for every class, optionally with POS control.

        Parameters
        ----------
        hidden : torch.Tensor
            (B, H) the base model's final hidden states.
        logits : torch.Tensor, optional
            (B, V) the base model's logits; required when the head uses ``lm_prior``.
        control : int, optional
            A class index whose probability is multiplied by ``factor`` (then renormalised).
        factor : float
            The control factor (paper section 6.2); 1 changes nothing.
        class_lse : torch.Tensor, optional
            (B, T) :meth:`class_lse` of the logits, when the caller already has it.

        Returns
        -------
        torch.Tensor
            (B, T) log-probabilities over the classes.
        """
        if self.lm_prior and logits is None:
            raise ValueError("this POS head uses the base model's prior: pass the logits")
        prior = self.prior(logits, class_lse) if self.lm_prior else None
        logp = torch.log_softmax(self.tag_logits(hidden, prior), dim=-1)
        if control is not None and factor != 1.0:
            logp = logp.clone()
            logp[:, control] += math.log(factor)
            logp = torch.log_softmax(logp, dim=-1)
        return logp

    def word_logprobs(
        self, logits: torch.Tensor, tag_logp: torch.Tensor, class_lse: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Eq. 2-3: log p(w | h) = logit_w + log sum_{rho containing w} p(rho | h) / Z_rho.

        Parameters
        ----------
        logits : torch.Tensor
            (B, V) the base model's logits.
        tag_logp : torch.Tensor
            (B, T) log p(rho | h), from :meth:`tag_logprobs`.
        class_lse : torch.Tensor, optional
            (B, T) :meth:`class_lse` of the logits, when the caller already has it.

        Returns
        -------
        torch.Tensor
            (B, V) float32 log-probabilities (they sum to 1 in probability); ``-inf`` for a
            token in no class vocabulary (only possible without the catch-all).
        """
        logits = logits.float()
        class_lse = self.class_lse(logits) if class_lse is None else class_lse
        a = tag_logp - class_lse  # log p(rho) - log Z_rho
        tok, cls = self.pairs[:, 0], self.pairs[:, 1]
        mixed = grouped_logsumexp(a[:, cls], tok, self.vocab_size)  # -inf for tokens in no class
        return logits + mixed

    def position_terms(
        self, logits: torch.Tensor, targets: torch.Tensor, work: Workspace | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """For a batch of positions: log p(target | h, rho) for every class (B, T), -inf where the
        target is not in V_rho, and the prior features (B, T); ``work`` as :meth:`class_lse` takes it."""
        logits = logits.float()
        lse = self.class_lse(logits, work)
        member = self.membership[targets]  # (B, T)
        tl = logits.gather(1, targets[:, None])
        return torch.where(member, tl - lse, torch.full_like(lse, -math.inf)), self.prior(logits, lse)

    def state_tensors(self) -> dict[str, torch.Tensor]:
        return {
            "pairs": self.pairs.cpu(),
            "weight": self.linear.weight.detach().cpu(),
            "bias": self.linear.bias.detach().cpu(),
            "prior_weight": self.prior_weight.detach().cpu(),
        }

    @classmethod
    def from_tensors(cls, vocab_size: int, tags: list[str], t: dict[str, torch.Tensor], lm_prior: bool) -> POSGHead:
        return cls(
            vocab_size, tags, t["pairs"], t["weight"].shape[1], t["weight"], t["bias"], t["prior_weight"], lm_prior
        )


__all__ = ["POSGHead", "CATCH_ALL"]
