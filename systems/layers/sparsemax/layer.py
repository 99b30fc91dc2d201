"""The sparsemax output layer: the model's logits projected onto the simplex."""

from __future__ import annotations

import torch

from maxbench.systems.layers.base import OutputLayer, require_finite_logits
from maxbench.systems.layers.sparsemax.operator import sparsemax


class SparsemaxLayer(OutputLayer):
    """Scores are ``log sparsemax(logits)``: ``-inf`` for the tokens sparsemax zeroes, so the
    decoding loop's softmax of the scores gives back the sparsemax distribution itself."""

    name = "sparsemax"
    can_be_sparse = True

    def scores(self, logits: torch.Tensor, hidden: torch.Tensor | None) -> torch.Tensor:
        require_finite_logits(logits, self.name)
        return torch.log(sparsemax(logits, dim=-1))
