"""The device generator: one draw per row from a counter-based generator, on the probabilities' device.

Each row's random number is a pure function of integers: Philox4x32-10 (Salmon et al. 2011,
"Parallel random numbers: as easy as 1, 2, 3") keyed by the row's seed (which the run derives
from its seed, the prompt and the sample) with the row's draw count as the counter. Nothing is
shared between rows and no state lives on the host, so a row draws the same number at any batch
size, on any device and in any shard, and the draws never wait for the device. The round function
is written with torch's int64 arithmetic on 32-bit words (the 32 x 32-bit products are taken in
16-bit halves, so no intermediate overflows int64), so it runs wherever the probabilities are.

A draw is inverse-CDF sampling: ``u`` in [0, 1) from the first two output words (53 bits), the
row's cumulative sums in float64 (vocabulary order), and the first token whose cumulative sum
exceeds ``u`` times the row's total (strictly below the total, so the token has positive
probability). Float64 cumulative sums make the cut the same for any batch on one device; on
different devices the sums may differ in their last bits, so only the draw ``u`` is promised
to be the same there.

This is not ``torch.multinomial``'s draw: the CPU generator (``maxbench.systems.multinomial``)
stays the CPU's default, token-exact with transformers' ``generate``.
"""

from __future__ import annotations

import torch

from maxbench.errors import MaxbenchError

__all__ = ["CounterGenerator", "philox4x32"]

_MASK = 0xFFFFFFFF
_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # Philox4x32's multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # its key schedule's increments (golden ratio, sqrt(3) - 1)
_ROUNDS = 10


def _mul_hi_lo(m: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The high and low 32-bit words of ``m * x`` for a 32-bit constant ``m`` and 32-bit words
    ``x`` (int64 tensors), without an int64 overflow: ``x`` in 16-bit halves."""
    a = x & 0xFFFF
    b = x >> 16
    low_part = a * m  # < 2^48
    high_part = b * m  # < 2^48
    t = low_part + ((high_part & 0xFFFF) << 16)  # < 2^49
    return (high_part >> 16) + (t >> 32), t & _MASK


def philox4x32(counter: tuple, key: tuple) -> tuple[torch.Tensor, ...]:
    """Philox4x32-10 of four 32-bit counter words and two key words (int64 tensors or ints that
    broadcast together): four 32-bit output words as int64 tensors."""
    c0, c1, c2, c3 = (torch.as_tensor(c, dtype=torch.int64) for c in counter)
    k0, k1 = (torch.as_tensor(k, dtype=torch.int64) for k in key)
    for r in range(_ROUNDS):
        if r:
            k0 = (k0 + _W0) & _MASK
            k1 = (k1 + _W1) & _MASK
        hi0, lo0 = _mul_hi_lo(_M0, c0)
        hi1, lo1 = _mul_hi_lo(_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


class CounterGenerator:
    """The generators of a batch's rows for the device generator: row i's ``n``-th draw is a
    function of ``seeds[i]`` and ``n`` only. Every row draws once per call of :meth:`draw` (a
    finished row too), so a row's ``n`` counts the same draws at any batch size.

    A row whose probabilities have no draw (a negative or non-finite entry, or a zero sum) is
    flagged on the device, not at once (that would wait for the device); :meth:`read` refuses it.
    """

    def __init__(self, seeds: list[int], device: str | torch.device = "cpu"):
        seeds_t = torch.tensor([int(s) for s in seeds], dtype=torch.int64, device=device)
        self.key = (seeds_t & _MASK, (seeds_t >> 32) & _MASK)
        self.draws = 0
        self.flags: list[torch.Tensor] = []

    def __len__(self) -> int:
        return int(self.key[0].shape[0])

    def uniforms(self) -> torch.Tensor:
        """The rows' next uniform numbers in [0, 1), float64, on the generator's device (advances it)."""
        x0, x1, _, _ = philox4x32((self.draws, 0, 0, 0), self.key)
        self.draws += 1
        return ((x0 << 21) | (x1 >> 11)).double() * 2.0**-53

    def draw(self, probs: torch.Tensor) -> torch.Tensor:
        """One token id per row of the (B, V) probabilities (unnormalised allowed), on their device."""
        if self.key[0].device != probs.device:
            self.key = tuple(k.to(probs.device) for k in self.key)
        u = self.uniforms()
        cdf = probs.double().cumsum(-1)
        total = cdf[:, -1]
        drawable = (probs.amin(-1) >= 0) & torch.isfinite(total) & (total > 0)
        self.flags.append((~drawable).any())
        target = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
        return torch.searchsorted(cdf, target[:, None], right=True)[:, 0].clamp_(max=probs.shape[-1] - 1)

    def read(self, what: str) -> None:
        """Refuse a draw from probabilities that have none (one synchronisation; ``what``: the layer)."""
        if self.flags and bool(torch.stack(self.flags).any()):
            raise MaxbenchError(
                f"{what}: sample() drew from probabilities with a negative or non-finite entry, or that sum to "
                "zero; fix the layer"
            )
        self.flags = []
