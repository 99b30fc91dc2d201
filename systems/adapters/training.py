"""The training loop the built-in adapters share: next-token loss on the examples' texts, AdamW on
the adapter's parameters only (the base model stays frozen), deterministic for a seed.

Each example is encoded as decoding encodes a prompt and ``reference_states`` a reference: the
prompt with the tokenizer's own prefix (Gemma's BOS; SmolLM2 adds none), then ``" " + text``,
then EOS; a plain document (empty prompt) is the tokenizer's prefix, the text and EOS. Only the
text's tokens and EOS are targets. Sequences are cut at ``max_len`` tokens and right-padded
within a batch. The first ``steps x batch`` examples in a fixed order (``training_order``) are
used, permuted by a generator seeded with the adapter's seed (passed over again when there are fewer); the model stays in eval mode (no dropout), so a
training interrupted and run again ends with the same tensors on the same machine and threads.
An adapter with more to learn (FCTG's extra modules and losses, NRP's prompt model) passes
``train_loop`` its own rows, parameters and loss; the loop, its timing and its summary are the same
for every adapter.
"""

from __future__ import annotations

import math
import time

import torch

from maxbench.errors import MaxbenchError
from maxbench.systems.adapters.base import TrainingExample, training_order


def encode_examples(tok, examples: list[TrainingExample], max_len: int) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) per example, labels -100 on the prompt; examples with no target left after
    the cut at ``max_len`` are dropped."""
    eos = tok.eos_token_id
    out = []
    for ex in examples:
        if ex.prompt:
            p = tok(ex.prompt, add_special_tokens=True)["input_ids"]
            t = tok(" " + ex.text.strip(), add_special_tokens=False)["input_ids"]
        else:
            p = tok("", add_special_tokens=True)["input_ids"]
            t = tok(ex.text, add_special_tokens=False)["input_ids"]
        ids = (p + t + [eos])[:max_len]
        labels = ([-100] * len(p) + t + [eos])[:max_len]
        # a label at position 0 predicts nothing (labels are shifted by the model)
        if sum(1 for x in labels[1:] if x != -100) > 0:
            out.append((ids, labels))
    return out


def batches(encoded: list, batch: int, steps: int, seed: int):
    """``steps`` lists of ``batch`` encoded examples: passes over the fixed order, each permuted by a
    generator seeded with ``seed``."""
    gen = torch.Generator().manual_seed(int(seed))
    order: list[int] = []
    for _ in range(steps):
        while len(order) < batch:
            order += torch.randperm(len(encoded), generator=gen).tolist()
        take, order = order[:batch], order[batch:]
        yield [encoded[i] for i in take]


def collate(rows: list, pad: int, device) -> dict:
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (x, y) in enumerate(rows):
        ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(y)] = torch.tensor(y)
        mask[i, : len(x)] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "labels": labels.to(device)}


def training_rows(lm, examples: list[TrainingExample], opts: dict, what: str, encode=encode_examples) -> list:
    """The rows training reads: the first ``opts['steps'] x opts['batch']`` examples in the fixed order
    (``training_order``), encoded by ``encode(tokenizer, examples, max_len)`` (``encode_examples``'
    form; an adapter may add its own fields to each row); an error when steps are asked for and no
    row is left."""
    steps = int(opts["steps"])
    # one pass over at most steps x batch examples, taken in the fixed order
    ordered = [examples[i] for i in training_order(examples)][: steps * int(opts["batch"])]
    encoded = encode(lm.tokenizer, ordered, int(opts["max_len"]))
    if steps and not encoded:
        raise MaxbenchError(f"{what}: no training text (the fitting split is empty)")
    return encoded


def tenth_mean(xs: list[float], last: bool) -> float | None:
    """The mean of the first (or, ``last``, the last) tenth of ``xs`` (at least one), to 4 places;
    None when empty."""
    tenth = max(1, len(xs) // 10)
    return round(sum(xs[-tenth:] if last else xs[:tenth]) / tenth, 4) if xs else None


def train_loop(
    model,
    lm,
    examples: list[TrainingExample],
    opts: dict,
    what: str,
    progress: bool = True,
    *,
    params: list | None = None,
    encoded: list | None = None,
    loss=None,
    on_step=None,
) -> dict:
    """Train for ``opts['steps']`` AdamW steps of ``opts['batch']`` examples at learning rate
    ``opts['lr']``; returns what training measured. ``params``: what it trains (default: ``model``'s
    parameters that require gradients), tensors or AdamW's parameter groups (a group may carry its own
    ``lr``); ``encoded``: the rows (default: ``training_rows`` of ``examples``); ``loss(rows)``: one
    step's loss tensor (default: ``model``'s next-token loss on the collated rows); ``on_step(n)``:
    called after step n (1-based), e.g. to validate; its time is not in the steps' CPU seconds."""
    from maxbench.systems.hidden_cache import progress_bar

    steps = int(opts["steps"])
    if encoded is None:
        encoded = training_rows(lm, examples, opts, what)
    if params is None:
        params = [p for p in model.parameters() if p.requires_grad]

    def next_token_loss(rows):
        return model(**collate(rows, lm.tokenizer.pad_token_id, lm.device)).loss

    loss = next_token_loss if loss is None else loss
    t0, c0 = time.perf_counter(), time.process_time()
    losses: list[float] = []
    step_cpu: list[float] = []  # CPU seconds of each step (the training-time claim's replicates)
    if steps:
        optim = torch.optim.AdamW(params, lr=float(opts["lr"]), weight_decay=0.0)
        model.eval()  # no dropout: the same tensors every time
        bar = progress_bar(steps, f"training {what}", progress, unit="step")
        with torch.enable_grad():
            c_step = time.process_time()
            for rows in batches(encoded, int(opts["batch"]), steps, int(opts["seed"])):
                step_loss = loss(rows)
                value = step_loss.item()
                if not math.isfinite(value):
                    raise MaxbenchError(f"{what}: the training loss became {value}; lower lr")
                optim.zero_grad(set_to_none=True)
                step_loss.backward()
                optim.step()
                losses.append(value)
                c_now = time.process_time()
                step_cpu.append(c_now - c_step)
                if on_step is not None:
                    on_step(len(losses))
                c_step = time.process_time()
                bar.update(1)
                bar.set_postfix(loss=f"{value:.3f}")
        bar.close()
    return {
        "steps": steps,
        "examples": len(encoded),
        "trainable_parameters": sum(p.numel() for g in params for p in (g["params"] if isinstance(g, dict) else [g])),
        "loss_first": tenth_mean(losses, last=False),
        "loss_last": tenth_mean(losses, last=True),
        "train_seconds": round(time.perf_counter() - t0, 1),
        "train_cpu_seconds": round(time.process_time() - c0, 1),
        "step_cpu_seconds": [round(x, 4) for x in step_cpu],
        "step_cpu_median": round(sorted(step_cpu)[len(step_cpu) // 2], 4) if step_cpu else None,
    }
