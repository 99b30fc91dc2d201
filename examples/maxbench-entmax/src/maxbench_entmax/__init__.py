"""alpha-entmax as a maxbench output layer, from an installed package (an example plugin).

alpha-entmax (Peters, Niculae and Martins, ACL 2019) maps scores z to the distribution
argmax_p <p, z> + H_alpha(p) over the simplex, with the Tsallis entropy H_alpha: alpha = 1 is
softmax, alpha = 2 is sparsemax, and 1.5-entmax lies between them, sparse like sparsemax but
smoother. The mapping is the ``entmax`` library's (deep-spin/entmax): its exact sort-based
``entmax15`` for alpha = 1.5, its bisection ``entmax_bisect`` for any other alpha > 1.

Installed, this package's entry point (group ``maxbench.layers``) gives maxbench the name
``entmax``: ``smollm2-135m/entmax(alpha=1.5)/top_p=0.9`` works in system strings and lineups as a
built-in layer does, and every run records this distribution and its version as the layer's code.
"""

from __future__ import annotations

import torch
from entmax import entmax15, entmax_bisect

from maxbench.errors import MaxbenchError
from maxbench.systems.layers.base import OutputLayer, require_finite_logits

__all__ = ["EntmaxLayer"]


class EntmaxLayer(OutputLayer):
    """Scores are ``log alpha-entmax(logits)``: ``-inf`` for the tokens entmax zeroes, so the
    decoding loop's softmax of the scores gives back the entmax distribution itself.

    Parameters
    ----------
    alpha : float
        The entmax exponent, > 1 (1.5 by default; 2 is sparsemax; softmax is the limit at 1).
    """

    name = "entmax"
    can_be_sparse = True

    def __init__(self, alpha: float = 1.5):
        if not isinstance(alpha, int | float) or isinstance(alpha, bool) or not alpha > 1:
            raise MaxbenchError(f"entmax: alpha must be a number > 1, got {alpha!r}")
        self.alpha = float(alpha)

    def params(self) -> dict:
        return {"alpha": self.alpha}

    def scores(self, logits: torch.Tensor, hidden: torch.Tensor | None) -> torch.Tensor:
        require_finite_logits(logits, self.name)
        # entmax's threshold search in float32 can leave a row summing to slightly off 1; the
        # decoding loop renormalises, and a float64 pass keeps the support exact
        z = logits.double()
        p = entmax15(z, dim=-1) if self.alpha == 1.5 else entmax_bisect(z, alpha=self.alpha, dim=-1)
        return torch.log(p).to(logits.dtype)
