"""Options shared by the subcommands that load a model, and the names of run folders."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from maxbench.fileio import plain_name

DEFAULT_RUNS = Path("results") / "runs"


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: CUDA when present, else CPU)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's own choice; set it when the machine is shared)",
    )


def add_generator_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--generator",
        default=None,
        help="the random generator of sampled rows: cpu (torch.multinomial's draw per row, token-exact with "
        "transformers' generate on the CPU) or device (a counter-based generator on the model's device: the "
        "same draws at any batch size, no wait for a GPU); default: device on CUDA, cpu otherwise. Recorded "
        "in the run's manifest; a run resumes only with the generator it was made with",
    )


def add_model_args_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model-args",
        default=None,
        metavar="K=V,...",
        help="options of the run's models: revision=REV, dtype=fp32|bf16|fp16 (half precision on CUDA only), "
        "trust_remote_code=true|false (docs/models.md); recorded in the run's identity. They apply to every "
        "model, over a lineup's own options of one model ([model_args.MODEL]) where both give a key",
    )


def run_id(given: str | None, *parts: str, keep: str = "._=") -> str:
    """``--run-id`` if given (one plain folder name: it cannot climb out of --runs-dir), else ``parts``
    joined by '-', every character that is not alphanumeric or in ``keep`` replaced by '_' (the names
    earlier versions gave: ``generate`` keeps "._=", ``run`` also '-'), shortened with a hash if long."""
    if given is not None:
        return plain_name(given, "--run-id")
    name = "-".join("".join(c if c.isascii() and (c.isalnum() or c in keep) else "_" for c in p) for p in parts)
    if len(name) > 100 or not name[:1].isalnum():
        name = f"run-{name[:80]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"
    return plain_name(name, "the run directory name")


def lineup_run_id(given: str | None, lineup: str, suite: str) -> str:
    """The run directory of ``maxbench run``: ``<lineup>-<suite>``, e.g. ``default-food-reviews``."""
    return run_id(given, lineup, suite, keep="._=-")
