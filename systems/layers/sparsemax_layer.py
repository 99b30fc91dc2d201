"""The sparsemax output layer: the model's logits projected onto the simplex."""
from __future__ import annotations

import torch

from systems.errors import MaxbenchError

from .base import OutputLayer
from .sparsemax import sparsemax


def require_finite_logits(logits: torch.Tensor, layer: str) -> None:
    """A non-finite logit has no meaning for an output layer; say which rows carry one."""
    finite = torch.isfinite(logits)
    if not bool(finite.all()):
        rows = (~finite).any(-1).nonzero().flatten().tolist()
        kinds = " and ".join(k for k, bad in (("NaN", torch.isnan(logits).any()),
                                             ("infinite", torch.isinf(logits).any())) if bool(bad))
        raise MaxbenchError(f"{layer}: the model's logits contain {kinds} values (batch rows {rows[:8]}); "
                            f"check the model weights and dtype (fp16 overflows: use fp32 on CPU)")


class SparsemaxLayer(OutputLayer):
    """Scores are ``log sparsemax(logits)``: ``-inf`` for the tokens sparsemax zeroes, so the
    decoding loop's softmax of the scores gives back the sparsemax distribution itself."""

    name = "sparsemax"
    can_be_sparse = True

    def scores(self, logits: torch.Tensor, hidden: torch.Tensor | None) -> torch.Tensor:
        require_finite_logits(logits, self.name)
        return torch.log(sparsemax(logits, dim=-1))
