"""benchmark/reproduce/protocol.py: the wall-time estimate a reproduction prints first."""

from __future__ import annotations

from maxbench.benchmark.reproduce.papers import load_paper
from maxbench.benchmark.reproduce.protocol import ADAPTER_S, Options, estimate_seconds, plan_runs


def _estimate(tmp_path, roles: list[str]) -> float:
    runs = plan_runs(load_paper("fctg"), Options(corpora=["news"], roles=roles), tmp_path / "out")
    return estimate_seconds(runs)


def test_an_adapters_training_is_estimated_at_its_own_measured_cost(tmp_path):
    """FCTG's training (its steps plus the gate's probes) costs several times a LoRA fine-tune's, and the
    estimate says so: one role more adds that role's texts and its adapter's own training, so the
    difference between adding FCTG and adding LoRA is the two adapters' costs apart (the texts cost
    the same: same decoding, same prompts)."""
    base = _estimate(tmp_path, ["zero-shot"])
    with_fctg = _estimate(tmp_path, ["zero-shot", "fctg"]) - base
    with_lora = _estimate(tmp_path, ["zero-shot", "finetuned"]) - base
    assert with_fctg - with_lora == ADAPTER_S["fctg"] - ADAPTER_S["lora"]
    assert ADAPTER_S["fctg"] > 4 * ADAPTER_S["lora"]
