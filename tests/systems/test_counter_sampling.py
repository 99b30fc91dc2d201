"""The device generator (systems/counter_sampling.py): Philox4x32-10's published answers, draws that
follow the probabilities and depend only on a row's seed and draw count, and a decoding loop whose
sampled text is the same at batch 1, 8 and 48."""

from __future__ import annotations

import pytest
import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.counter_sampling import CounterGenerator, philox4x32
from maxbench.systems.decoding import DecodingSetting, decode
from maxbench.systems.layers.softmax import SoftmaxLayer

M = 0xFFFFFFFF


@pytest.mark.parametrize(
    ("counter", "key", "expected"),
    [  # Random123's known-answer vectors for philox4x32_10
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((M, M, M, M), (M, M), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_philox_gives_the_published_known_answers(counter, key, expected):
    assert tuple(int(w) for w in philox4x32(counter, key)) == expected


def test_a_rows_draws_depend_on_its_seed_and_draw_count_not_on_its_batch():
    g = torch.Generator().manual_seed(0)
    probs = torch.softmax(torch.randn(48, 500, generator=g) * 3, -1)
    seeds = [int(s) for s in torch.randint(0, 2**32, (48,), generator=g)]
    together = CounterGenerator(seeds)
    draws = torch.stack([together.draw(probs) for _ in range(5)])
    for i in (0, 17, 47):
        alone = CounterGenerator([seeds[i]])
        assert [int(alone.draw(probs[i : i + 1])[0]) for _ in range(5)] == draws[:, i].tolist()
    assert len({tuple(draws[:, i].tolist()) for i in range(48)}) > 40  # seeds give different streams


def test_draws_follow_the_probabilities_and_never_pick_a_zero():
    probs = torch.tensor([[0.0, 0.1, 0.0, 0.2, 0.7, 0.0]]).repeat(20000, 1)
    gen = CounterGenerator(range(20000))
    drawn = gen.draw(probs)
    counts = torch.bincount(drawn, minlength=6).double() / 20000
    assert counts[[0, 2, 5]].sum() == 0
    # three standard errors of a proportion near 0.7 over 20,000 draws: about 0.01
    assert torch.allclose(counts[[1, 3, 4]], torch.tensor([0.1, 0.2, 0.7], dtype=torch.float64), atol=0.01)
    gen.read("layer 'x'")  # nothing to refuse


def test_the_uniforms_are_53_bit_and_the_last_positive_token_takes_the_top():
    gen = CounterGenerator([1, 2, 3])
    u = gen.uniforms()
    assert u.dtype == torch.float64 and bool(((u >= 0) & (u < 1)).all())
    assert bool((u * 2**53 == torch.floor(u * 2**53)).all())
    one = torch.tensor([[0.0, 0.0, 1.0, 0.0]]).repeat(3, 1)
    assert gen.draw(one).tolist() == [2, 2, 2]


@pytest.mark.parametrize("bad", [float("nan"), -0.5, 0.0])
def test_probabilities_with_no_draw_are_refused_when_read(bad):
    gen = CounterGenerator([1, 2])
    probs = torch.tensor([[0.5, 0.5], [bad, 0.0 if bad == 0.0 else 0.5]])
    gen.draw(probs)  # flagged on the device, not read yet
    with pytest.raises(MaxbenchError, match="layer 'x': sample\\(\\) drew from probabilities"):
        gen.read("layer 'x'")


PROMPTS = [f"Review {i}: the {'soup ' * (i % 5)}was" for i in range(48)]


@pytest.mark.parametrize("decoding", ["sample,max_new_tokens=8", "top_p=0.9,max_new_tokens=8", "temp=0.7,top_k=20"])
def test_device_generator_text_is_the_same_at_batch_1_8_and_48(tiny, decoding):
    setting = DecodingSetting.parse(decoding if "max_new" in decoding else decoding + ",max_new_tokens=8")
    seeds = list(range(1000, 1048))

    def run(batch):
        out = []
        for i in range(0, 48, batch):
            rows = decode(
                tiny, SoftmaxLayer(), PROMPTS[i : i + batch], setting, seeds[i : i + batch], generator="device"
            )
            out += [r["token_ids"] for r in rows]
        return out

    at48 = run(48)
    assert run(8) == at48
    assert [decode(tiny, SoftmaxLayer(), [PROMPTS[i]], setting, [seeds[i]], generator="device")[0]["token_ids"]
            for i in (0, 9, 33, 47)] == [at48[i] for i in (0, 9, 33, 47)]  # fmt: skip
    cpu = decode(tiny, SoftmaxLayer(), PROMPTS[:8], setting, seeds[:8])
    assert [r["token_ids"] for r in cpu] != at48[:8]  # another generator: other draws


def test_an_unknown_generator_is_one_line(tiny):
    with pytest.raises(MaxbenchError, match="unknown generator 'gpu'; use cpu or device"):
        decode(tiny, SoftmaxLayer(), ["abc"], DecodingSetting(), [0], generator="gpu")
