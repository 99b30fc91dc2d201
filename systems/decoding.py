"""The batched decoding loop that puts an output layer between the base model and the sampler.

One forward pass per step over the whole batch (left padding, KV cache, logits of the last
position only), then ``layer.scores`` maps logits (and hidden states, when the layer asks)
to scores, the decoding setting is applied with Hugging Face's own logits warpers in
``generate``'s order (temperature, top-k, top-p, min-p, typical, epsilon, eta; transformers'
``_get_logits_processor``), and each row draws with its own generator seeded for its (prompt,
sample). Because rows never share random numbers, a row's text does not depend on which other
rows share its batch.

Two generators (``GENERATORS``): ``cpu``, one CPU ``torch.Generator`` per row drawing
``torch.multinomial``'s token (token-exact with transformers' ``generate`` on the CPU; on a GPU
the probabilities come to the host every step), the CPU's default; and ``device``, a
counter-based generator on the probabilities' device (``maxbench.systems.counter_sampling``),
CUDA's default, whose draws never wait for the device.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

import torch

from maxbench.errors import MaxbenchError
from maxbench.registry import unknown_name
from maxbench.systems.counter_sampling import CounterGenerator
from maxbench.systems.layers.base import (
    CHECK_EVERY,
    OutputLayer,
    ScoreCheck,
    all_finite,
    check_scores_form,
    require_finite_logits,
)

_STAT_DIGITS = 6  # significant digits: keeps certified gaps near 1e-7 readable

#: the random generators a run may draw with (module docstring)
GENERATORS = ("cpu", "device")
#: on a GPU, decoding reads whether every row has ended once per this many steps (a read waits
#: for the device); the steps past the end decode padding and change no row
EOS_EVERY_GPU = 8


def default_generator(device: str) -> str:
    """The generator a run on ``device`` draws with unless told: ``device`` on CUDA, ``cpu`` elsewhere."""
    return "device" if str(device).startswith("cuda") else "cpu"


def check_generator(name: str) -> str:
    """``name`` if it is one of ``GENERATORS``, else one line naming them."""
    if name not in GENERATORS:
        raise MaxbenchError(f"unknown generator '{name}'; use {' or '.join(GENERATORS)}")
    return name


#: the keys a decoding label may set (``temp`` is short for ``temperature``)
DECODING_KEYS = (
    "greedy",
    "sample",
    "temp",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "epsilon",
    "eta",
    "max_new_tokens",
)
#: the truncation samplers after top-p, in generate's order, each with its "off" value (None: off)
TRUNCATION_KEYS = ("min_p", "typical_p", "epsilon", "eta")


@dataclass(frozen=True)
class DecodingSetting:
    """How tokens are chosen from a layer's distribution."""

    do_sample: bool = True
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0  # Nguyen et al. 2024: keep p >= min_p * max p (0: off)
    typical_p: float = 1.0  # Meister et al. 2023: locally typical mass (1: off)
    epsilon: float = 0.0  # Hewitt et al. 2022: keep p >= epsilon (0: off)
    eta: float = 0.0  # Hewitt et al. 2022: keep p >= min(eta, sqrt(eta) exp(-entropy)) (0: off)
    max_new_tokens: int = 64

    def __post_init__(self):
        if not (0 < self.temperature < math.inf):
            raise MaxbenchError(
                f"temperature must be a finite number > 0, got {self.temperature} (use 'greedy' for argmax)"
            )
        if not 0 < self.top_p <= 1:
            raise MaxbenchError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise MaxbenchError(f"min_p must be in [0, 1] (0 turns it off), got {self.min_p}")
        if not 0 < self.typical_p <= 1:
            raise MaxbenchError(f"typical_p must be in (0, 1] (1 turns it off), got {self.typical_p}")
        for key in ("epsilon", "eta"):
            # transformers' warpers take (0, 1); a cutoff near 1 removes all but the top token
            if not 0 <= getattr(self, key) < 1:
                raise MaxbenchError(f"{key} must be in [0, 1) (0 turns it off), got {getattr(self, key)}")
        if self.top_k < 0:
            raise MaxbenchError(f"top_k must be >= 0, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise MaxbenchError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def label(self) -> str:
        """The decoding part of a system string, e.g. ``top_p=0.9`` or ``greedy``."""
        if not self.do_sample:
            parts = ["greedy"]
        else:
            parts = [f"temp={self.temperature:g}"] if self.temperature != 1.0 else []
            parts += [f"top_k={self.top_k}"] if self.top_k else []
            parts += [f"top_p={self.top_p:g}"] if self.top_p < 1.0 else []
            parts += [f"{k}={getattr(self, k):g}" for k in TRUNCATION_KEYS if self._truncates(k)]
            parts = parts or ["sample"]
        if self.max_new_tokens != 64:
            parts.append(f"max_new_tokens={self.max_new_tokens}")
        return ",".join(parts)

    @classmethod
    def parse(cls, label: str) -> DecodingSetting:
        """The setting a label names, e.g. ``top_p=0.9`` or ``greedy,max_new_tokens=32``. A key given
        twice (``top_p=0.9,top_p=0.5``, ``temp`` and ``temperature``, ``greedy`` and ``sample``) is
        refused: no value silently wins."""
        kw: dict = {}
        seen: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in label.split(","))):
            key = "greedy or sample" if part in ("greedy", "sample") else part.split("=", 1)[0].strip()
            key = {"temp": "temperature"}.get(key, key)
            if key in seen:
                raise MaxbenchError(
                    f"decoding setting '{label}' gives {key} twice ('{seen[key]}' and '{part}'); give it once"
                )
            seen[key] = part
            if part == "greedy":
                kw["do_sample"] = False
            elif part == "sample":
                kw["do_sample"] = True
            else:
                m = re.fullmatch(
                    r"(temp|temperature|top_k|top_p|min_p|typical_p|epsilon|eta|max_new_tokens)=(.+)", part
                )
                if not m:
                    raise unknown_name(
                        "decoding setting",
                        part.split("=", 1)[0],
                        DECODING_KEYS,
                        f"in '{label}'; write greedy, sample, temp=T, top_k=K, top_p=P, min_p=P, typical_p=P, "
                        f"epsilon=E, eta=E, max_new_tokens=N",
                    )
                key = {"temp": "temperature"}.get(m.group(1), m.group(1))
                try:
                    kw[key] = int(m.group(2)) if key in ("top_k", "max_new_tokens") else float(m.group(2))
                except ValueError:
                    raise MaxbenchError(f"decoding setting '{part}': '{m.group(2)}' is not a number") from None
                if not math.isfinite(kw[key]):
                    raise MaxbenchError(f"decoding setting '{part}': {key} must be a finite number")
        return cls(**kw)

    def _truncates(self, key: str) -> bool:
        """Whether the truncation sampler ``key`` is on (its value is not the "off" value)."""
        return getattr(self, key) < 1.0 if key == "typical_p" else getattr(self, key) > 0.0

    def warpers(self):
        """transformers' own warpers, in the order ``generate`` applies them (transformers 5.23
        ``_get_logits_processor``): temperature, top-k, top-p, min-p, typical, epsilon, eta. Top-p
        is :mod:`maxbench.systems.top_p`'s subclass, which gives transformers' output faster on the CPU."""
        import transformers as tf

        from maxbench.systems.top_p import TopPLogitsWarper

        procs = tf.LogitsProcessorList()
        if self.do_sample:
            if self.temperature != 1.0:
                procs.append(tf.TemperatureLogitsWarper(self.temperature))
            if self.top_k:
                procs.append(tf.TopKLogitsWarper(top_k=self.top_k, min_tokens_to_keep=1))
            if self.top_p < 1.0:
                procs.append(TopPLogitsWarper(top_p=self.top_p, min_tokens_to_keep=1))
            if self._truncates("min_p"):
                procs.append(tf.MinPLogitsWarper(min_p=self.min_p, min_tokens_to_keep=1))
            if self._truncates("typical_p"):
                procs.append(tf.TypicalLogitsWarper(mass=self.typical_p, min_tokens_to_keep=1))
            if self._truncates("epsilon"):
                procs.append(tf.EpsilonLogitsWarper(epsilon=self.epsilon, min_tokens_to_keep=1))
            if self._truncates("eta"):
                procs.append(tf.EtaLogitsWarper(epsilon=self.eta, min_tokens_to_keep=1))
        return procs


def warp_rows(warp, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """``warp(input_ids, scores)`` on the rows that have a distribution; a row of -inf only (an
    empty POS class of POSG) has none, is left as it is, and would make eta's entropy NaN. The
    warpers of ``DecodingSetting`` do not read ``input_ids``. Off the CPU nothing is read back: every
    row is warped (a dead row as zeros) and the dead rows are put back, as the warpers work row by row."""
    if scores.device.type != "cpu":
        alive = torch.isfinite(scores).any(-1, keepdim=True)
        return torch.where(alive, warp(input_ids, torch.where(alive, scores, 0.0)), scores)
    if all_finite(scores):  # the common case, in a fraction of the exact check's time
        return warp(input_ids, scores)
    alive = torch.isfinite(scores).any(-1)
    if bool(alive.all()):
        return warp(input_ids, scores)
    out = scores.clone()
    if bool(alive.any()):
        out[alive] = warp(input_ids, scores[alive])
    return out


# ---------------------------------------------------------------- limits of the model and the machine
def context_size(lm) -> int | None:
    """How many positions the base model was trained for (None when its config does not say)."""
    n = getattr(lm.model.config, "max_position_embeddings", None)
    return n if isinstance(n, int) and n > 0 else None


def check_context(lm, positions: int, what: str, advice: str) -> None:
    """Refuse ``positions`` past the model's context: beyond it the model runs on positions it never
    saw in training and its text and probabilities are silently meaningless."""
    limit = context_size(lm)
    if limit is not None and positions > limit:
        raise MaxbenchError(f"{what} needs {positions} positions, more than {lm.name}'s context of {limit}; {advice}")


def memory_estimate(lm, batch: int, positions: int, hidden_states: bool) -> int | None:
    """Bytes that decoding ``batch`` rows of up to ``positions`` tokens needs beyond the weights: the
    KV cache, the widest prefill activations, the attention scores of the prefill (as if materialised,
    which the math and eager kernels do) and, for layers that read them, every layer's hidden states.
    An upper estimate meant to refuse what cannot fit, not to predict; None if the config lacks sizes."""
    cfg = lm.model.config
    try:
        layers, width, heads = int(cfg.num_hidden_layers), int(cfg.hidden_size), int(cfg.num_attention_heads)
    except (AttributeError, TypeError, ValueError):
        return None
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or width // heads)
    inner = int(getattr(cfg, "intermediate_size", None) or 4 * width)
    item = next(lm.model.parameters()).element_size()
    tokens = batch * positions
    kv = 2 * layers * kv_heads * head_dim * tokens * item
    activations = tokens * (4 * width + 2 * inner) * item
    attention = batch * heads * positions * positions * 4
    hidden = (layers + 1) * tokens * width * 4 if hidden_states else 0
    return kv + activations + attention + hidden + 3 * batch * lm.vocab_size * 4


def available_memory(device: str) -> int | None:
    """Free bytes on ``device``: CUDA's own count, or on the CPU the smaller of the kernel's
    MemAvailable and what the cgroup (a container's limit) still allows; None if unknown."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    found = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
                found.append(int(limit) - int(f.read().strip()))
    except (OSError, ValueError, IndexError):
        pass
    return min(found) if found else None


def token_lengths(lm, texts: list[str], chars_per_token: int = 32) -> list[tuple[int, bool]]:
    """(token count, whether the whole text was counted) for each text. A text longer than
    ``chars_per_token`` characters for each position of the context is counted on that much of its
    start when that already overflows the context: a lower bound, enough to refuse it, where
    tokenising all of a 10 MB text takes seconds."""
    limit = context_size(lm)
    cut = None if limit is None else chars_per_token * (limit + 1)
    heads = [t if cut is None else t[:cut] for t in texts]
    counts = [(len(ids), True) for ids in lm.tokenizer(heads, add_special_tokens=False)["input_ids"]]
    for k, text in enumerate(texts):
        if cut is not None and len(text) > cut:
            if counts[k][0] > limit:
                counts[k] = (counts[k][0], False)
            else:  # long tokens: count it whole
                counts[k] = (len(lm.tokenizer(text, add_special_tokens=False)["input_ids"]), True)
    return counts


def model_nan_cause(lm) -> tuple[str, str]:
    """(what gave the logits, what to check) for a non-finite logit: an adapted model's adapter (a
    diverged training, a NaN in a user's adapter weights) rather than the base model's dtype."""
    adapter = (getattr(lm, "options", None) or {}).get("adapter")
    if not isinstance(adapter, dict):
        return "the base model", ""
    name = lm.name
    if adapter.get("name") == "peft":
        advice = "check the adapter folder's weights for NaN or infinite values"
    else:
        advice = "its training diverged or overflowed: lower its lr (or steps) and run again (it retrains)"
    return f"the adapted model {name}", f"the adapter is the cause, not the base model ({advice})"


def check_limits(
    lm,
    prompts: list[str],
    setting: DecodingSetting,
    batch_size: int,
    ids: list[str],
    references: list[str] | None = None,
    hidden_states: bool = False,
) -> None:
    """Before the first token: every prompt plus ``max_new_tokens`` fits the model's context, every
    prompt plus its reference (teacher-forced for ref-ppl, when ``references`` are given) does too,
    and a batch fits in the device's free memory. One line naming the prompt and what to change."""
    counted = token_lengths(lm, list(prompts))
    lengths = [n for n, _ in counted]
    i = max(range(len(lengths)), key=lengths.__getitem__)
    check_context(
        lm,
        lengths[i] + setting.max_new_tokens,
        f"prompt '{ids[i]}' ({'' if counted[i][1] else 'at least '}{lengths[i]} tokens) with "
        f"max_new_tokens={setting.max_new_tokens}",
        "shorten the prompt or lower max_new_tokens",
    )
    if references:
        # a reference longer than the context is scored in strided windows (reference_states); only a
        # prompt that leaves no position for the reference's first token cannot be scored
        j = max((k for k, r in enumerate(references) if r.strip()), key=lengths.__getitem__, default=None)
        if j is not None:
            check_context(
                lm,
                lengths[j] + 1,
                f"prompt '{ids[j]}' with the first token of its reference ({lengths[j]} + 1 tokens, scored for ref-ppl)",
                "shorten the prompt",
            )
    need = memory_estimate(lm, min(batch_size, len(prompts)), lengths[i] + setting.max_new_tokens, hidden_states)
    free = available_memory(lm.device)
    if need is not None and free is not None and need > free:
        raise MaxbenchError(
            f"decoding {min(batch_size, len(prompts))} prompts of up to {lengths[i]} tokens plus "
            f"{setting.max_new_tokens} new ones needs about {need / 2**30:.1f} GiB, but {lm.device} has "
            f"{free / 2**30:.1f} GiB free; lower the batch size or max_new_tokens, or shorten the prompts"
        )


def distribution_stats(scores: torch.Tensor, chosen: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Entropy (nats), support size (tokens with p > 0) and top-1 mass of each row, and with
    ``chosen`` (one token id per row) the probability the layer gave that token (``p_chosen``)."""
    logp = torch.log_softmax(scores.float(), dim=-1)
    p = logp.exp()
    positive = p > 0  # once, and the product in place: the same values as torch.where, in half the time
    ent = -(p * logp).masked_fill_(~positive, 0.0).sum(-1)
    out = {"entropy": ent, "support": positive.sum(-1).float(), "top1": p.max(-1).values}
    if chosen is not None:
        out["p_chosen"] = p.gather(-1, chosen.to(p.device)[:, None])[:, 0]
    return out


def token_pieces(tok, ids: list[int]) -> list[str]:
    """The text each token adds to the decoded text, so that a viewer can mark tokens in it. A token
    that ends inside a multi-byte character adds nothing; the character goes to the token completing
    it. The pieces join to the decoded text wherever decoding a prefix gives a prefix of the text."""
    pieces, shown = [], ""
    for k in range(len(ids)):
        cur = tok.decode(ids[: k + 1], skip_special_tokens=True)
        if cur.startswith(shown) and not cur.endswith("\ufffd"):
            pieces.append(cur[len(shown) :])
            shown = cur
        else:
            pieces.append("")
    return pieces


class LogitCheck:
    """Off the CPU, the base model's logits are checked on the device: one flag per step for the rows
    with a NaN or an infinite logit, read like the layer's :class:`ScoreCheck` every
    ``CHECK_EVERY`` steps and at the end, so that a step never waits for the device. The
    refusal is ``require_finite_logits``'s, naming the first bad step's rows."""

    def __init__(self, what: str, cause: str = "", every: int = CHECK_EVERY):
        self.what, self.cause, self.every = what, cause, every
        self.flags: list[torch.Tensor] = []

    def add(self, logits: torch.Tensor) -> None:
        self.flags.append(~torch.isfinite(logits).all(-1))
        if len(self.flags) >= self.every:
            self.read()

    def read(self) -> None:
        if not self.flags:
            return
        bad = torch.stack(self.flags).cpu()
        self.flags = []
        if bool(bad.any()):
            step = int(bad.any(-1).int().argmax())
            rows = bad[step].nonzero().flatten().tolist()
            raise MaxbenchError(
                f"{self.what}: the model's logits contain NaN or infinite values (batch rows {rows[:8]}); "
                f"{self.cause or 'check the model weights and dtype (fp16 overflows: use fp32 on CPU)'}"
            )


class OutOfMemory(MaxbenchError):
    """CUDA ran out of memory decoding a batch (``out_of_memory``); ``device`` and ``batch`` let a run
    say it again with its own advice."""

    def __init__(self, message: str, device, batch: int):
        super().__init__(message)
        self.device, self.batch = device, batch


def out_of_memory(device, batch: int, resumes_at_any_batch_size: bool | None = None) -> OutOfMemory:
    """The one line for CUDA running out of memory on a batch of ``batch`` prompts: a batch size to try
    (half this one). ``resumes_at_any_batch_size`` is None outside a run; in a run, whether the run can
    resume at that batch size (its rows do not depend on their batch: the device generator), else a new
    run id is what to start. Every row finished before is kept either way."""
    what = f"{device} ran out of memory decoding a batch of {batch} prompt{'s' if batch > 1 else ''}"
    half = max(1, batch // 2)
    if batch == 1:
        advice = "lower max_new_tokens or use a device with more memory"
        if resumes_at_any_batch_size is not None:
            advice = f"every finished row is kept; {advice}"
    elif resumes_at_any_batch_size is None:
        advice = f"try a batch size of {half} (every batch finished before is kept)"
    elif resumes_at_any_batch_size:
        advice = (
            f"resume with --batch-size {half} (in a lineup, batch_size = {half}): every finished row is kept, "
            "and a row's text does not depend on the batch size (the device generator)"
        )
    else:
        advice = (
            f"every finished row is kept, but this run draws with the cpu generator, whose text depends on the "
            f"rest of its batch, so it resumes only at its own batch size: start a new --run-id with --batch-size "
            f"{half} (with --generator device, a run resumes at any batch size)"
        )
    return OutOfMemory(f"{what}; {advice}", device, batch)


@torch.inference_mode()
def decode(
    lm,
    layer: OutputLayer,
    prompts: list[str],
    setting: DecodingSetting,
    seeds: list[int],
    record_stats: bool = True,
    clock: dict | None = None,
    label: str | None = None,
    generator: str = "cpu",
    eos_every: int | None = None,
    kv_cache: str = "dynamic",
) -> list[dict]:
    """Continue each prompt; returns one dict per prompt: token_ids, text, finish, stats.

    Every step's scores are checked (``ScoreCheck``: the form at once, finiteness on the device, read
    every ``CHECK_EVERY`` steps and at the end); a bad step is one line naming the layer (``label``,
    e.g. "plugin output layer 'x' from file ...") and the step, and nothing of the batch is returned.

    ``generator`` is the random generator of sampled rows (``GENERATORS``; row i's seed is
    ``seeds[i]``). Decoding stops once every row has ended, read every ``eos_every`` steps (default:
    every step on the CPU, ``EOS_EVERY_GPU`` elsewhere); the steps decoded past the end change no
    row. Per-step statistics stay on the device until the end. Running out of CUDA memory stops with
    one line naming a smaller batch (the batches written before are kept).

    ``kv_cache`` is ``dynamic`` (transformers' default cache, grown each step) or ``static``
    (transformers' ``StaticCache``, allocated once for the prompt and ``max_new_tokens``: fixed
    shapes, what a captured CUDA graph needs). The two compute the same but for the order of
    attention's sums, which run over the static cache's whole length (its unused positions masked):
    the same tokens unless two are within rounding of each other, statistics equal but for their
    last digits.

    ``clock``, when given, gets the wall seconds of the output layer (``layer.scores`` and
    ``layer.sample``) added under "layer" and of the whole call under "decode" (``maxbench run
    --profile``; on CUDA the layer's figure counts launches, not kernels, unless it synchronises)."""
    t_start = time.perf_counter()
    t_layer = 0.0
    if len(prompts) != len(seeds):
        raise ValueError("one seed per prompt")
    for i, p in enumerate(prompts):
        if not p.strip():
            raise MaxbenchError(f"prompt {i} is empty; every prompt needs text to continue")
    if eos_every is not None and eos_every < 1:
        raise ValueError("eos_every must be >= 1")
    tok, model = lm.tokenizer, lm.model
    # the tokenizer's own prefix (Gemma's BOS; SmolLM2 adds none), as generate() is given
    enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=True)
    input_ids = enc["input_ids"].to(lm.device)
    check_context(
        lm,
        input_ids.shape[1] + setting.max_new_tokens,
        f"a prompt of {input_ids.shape[1]} tokens with max_new_tokens={setting.max_new_tokens}",
        "shorten the prompt or lower max_new_tokens",
    )
    mask = enc["attention_mask"].to(lm.device)
    bsz = input_ids.shape[0]
    eos = tok.eos_token_id
    on_cpu = torch.device(lm.device).type == "cpu"
    eos_every = eos_every or (1 if on_cpu else EOS_EVERY_GPU)
    # Left padding: positions count real tokens only, as generate() does.
    position_ids = (mask.long().cumsum(-1) - 1).clamp_min(0)
    generators: list | CounterGenerator = []
    if check_generator(generator) == "device":
        generators = CounterGenerator(seeds, device=lm.device)
    elif setting.do_sample:
        generators = [torch.Generator(device="cpu").manual_seed(int(s)) for s in seeds]
    warp = setting.warpers()
    out_ids = torch.empty((bsz, 0), dtype=torch.long, device=lm.device)
    finished = torch.zeros(bsz, dtype=torch.bool, device=lm.device)
    pad = torch.tensor(tok.pad_token_id, dtype=torch.long, device=lm.device)
    stats: dict[str, list[torch.Tensor]] = {}
    cache = None
    if kv_cache == "static":
        from transformers import StaticCache

        cache = StaticCache(config=model.config, max_cache_len=input_ids.shape[1] + setting.max_new_tokens)
    elif kv_cache != "dynamic":
        raise MaxbenchError(f"unknown kv_cache '{kv_cache}'; use dynamic or static")
    cur_ids, cur_pos = input_ids, position_ids
    check = ScoreCheck(label or f"output layer '{layer.name}'")
    base_cause = model_nan_cause(lm)
    logit_check = None if on_cpu else LogitCheck(*base_cause)
    try:
        for step in range(setting.max_new_tokens):
            out = model(
                input_ids=cur_ids,
                attention_mask=mask,
                position_ids=cur_pos,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
                output_hidden_states=layer.needs_hidden,
            )
            cache = out.past_key_values
            logits = out.logits[:, -1, :].float()
            if logit_check is None:
                require_finite_logits(logits, base_cause[0], base_cause[1])
            else:
                logit_check.add(logits)
            hidden = out.hidden_states[-1][:, -1, :].float() if layer.needs_hidden else None
            t0 = time.perf_counter()
            try:
                scores = layer.scores(logits, hidden)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as exc:
                if not check.what.startswith("plugin "):
                    raise  # a built-in's failure is maxbench's bug: keep its traceback
                detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise MaxbenchError(
                    f"{check.what}: scores() failed at decoding step {step}: {type(exc).__name__}"
                    + (f": {detail}" if detail else "")
                ) from None
            check.add(scores, logits, step)
            if setting.do_sample:
                try:
                    next_tok = layer.sample(scores, lambda s, ids=out_ids: warp_rows(warp, ids, s), generators)
                except torch.cuda.OutOfMemoryError:
                    raise
                except Exception as exc:
                    check.read()  # a bad step is the cause: name it, not the sampler's failure on it
                    if not check.what.startswith("plugin ") or isinstance(exc, MaxbenchError):
                        raise
                    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    raise MaxbenchError(
                        f"{check.what}: sample() failed at decoding step {step}: {type(exc).__name__}"
                        + (f": {detail}" if detail else "")
                    ) from None
                next_tok = next_tok.to(lm.device)
            else:
                next_tok = scores.argmax(-1)
            t_layer += time.perf_counter() - t0
            if record_stats:  # kept on the device: one copy to the host at the end
                row_stats = distribution_stats(scores, next_tok)
                row_stats.update(layer.step_stats())
                for k, v in row_stats.items():
                    stats.setdefault(k, []).append(v.detach().float())
            next_tok = torch.where(finished, pad, next_tok)
            out_ids = torch.cat([out_ids, next_tok[:, None]], dim=1)
            finished |= next_tok == eos
            if step % eos_every == eos_every - 1 and bool(finished.all()):
                break
            mask = torch.cat([mask, torch.ones((bsz, 1), dtype=mask.dtype, device=mask.device)], dim=1)
            cur_ids, cur_pos = next_tok[:, None], cur_pos[:, -1:] + 1
        check.read()
        if logit_check is not None:
            logit_check.read()
        if isinstance(generators, CounterGenerator):
            generators.read(check.what)
        host_stats = {k: torch.stack(v).cpu() for k, v in stats.items()}
    except torch.cuda.OutOfMemoryError:
        raise out_of_memory(lm.device, bsz) from None
    results = []
    ids_cpu = out_ids.cpu().tolist()
    for i in range(bsz):
        ids = ids_cpu[i]
        n = ids.index(eos) if eos in ids else len(ids)
        steps = n + 1 if n < len(ids) else n  # the EOS step's distribution is recorded too
        row = {
            "token_ids": ids[:n],
            "text": tok.decode(ids[:n], skip_special_tokens=True),
            "n_tokens": n,
            "finish": "eos" if n < len(ids) else "length",
        }
        if record_stats:
            row["stats"] = {k: [_round(float(x)) for x in v[:steps, i]] for k, v in host_stats.items()}
            row["pieces"] = token_pieces(tok, ids[:n])
        results.append(row)
    if clock is not None:
        clock["layer"] = clock.get("layer", 0.0) + t_layer
        clock["decode"] = clock.get("decode", 0.0) + time.perf_counter() - t_start
    return results


def _round(x: float) -> float | None:
    if math.isnan(x):
        return None
    return float(f"{x:.{_STAT_DIGITS}g}") if math.isfinite(x) else x


@dataclass
class ReferenceStates:
    """The base model's side of a reference's teacher-forced log-probabilities: the LM head's
    input (the final hidden state, after the final norm, in the model's dtype and on its device)
    at each position that predicts a reference token, and those tokens. Every output layer over
    the same base model starts from these, so one forward pass serves all of them."""

    hidden: torch.Tensor  # (T, H)
    targets: torch.Tensor  # (T,)

    @property
    def nbytes(self) -> int:
        return self.hidden.numel() * self.hidden.element_size() + self.targets.numel() * 8


def reference_stride(context: int) -> int:
    """The stride of the sliding windows that score a prompt + reference longer than the context:
    half the context, as in Hugging Face's "Perplexity of fixed-length models"."""
    return max(1, context // 2)


def reference_windows(n_prompt: int, n_total: int, context: int | None, stride: int | None = None):
    """The windows ``(start, end, first)`` over a sequence of ``n_total`` tokens whose first
    ``n_prompt`` are the prompt: the model reads tokens ``start:end`` and the tokens ``first:end``
    are scored, each once. One window when everything fits in ``context``; otherwise windows of
    ``context`` tokens whose ends move by ``stride``, so each reference token is scored with at least
    ``context - stride`` tokens of left context (the first window: with all that precedes it).
    A prompt that leaves no position for the first reference token cannot be scored (ValueError)."""
    if context is None or n_total <= context:
        return [(0, n_total, n_prompt)]
    if n_prompt >= context:
        raise ValueError(f"the prompt alone takes {n_prompt} of the {context} positions")
    stride = stride or reference_stride(context)
    windows, end = [(0, context, n_prompt)], context
    while end < n_total:
        new_end = min(end + stride, n_total)
        windows.append((new_end - context, new_end, end))
        end = new_end
    return windows


def reference_stride_used(lm, prompt: str, reference: str) -> int | None:
    """The stride :func:`reference_states` scores this reference with, None when it fits the context."""
    if not reference.strip():
        return None
    tok, limit = lm.tokenizer, context_size(lm)
    n = len(tok(prompt, add_special_tokens=True)["input_ids"])
    n += len(tok(" " + reference.strip(), add_special_tokens=False)["input_ids"])
    return None if limit is None or n <= limit else reference_stride(limit)


@torch.inference_mode()
def reference_states(lm, prompt: str, reference: str, context: int | None = None) -> ReferenceStates | None:
    """The forward pass over ``prompt`` + ``" " + reference`` (None for an empty reference): one
    when it fits the model's context (or ``context``, when given), otherwise strided windows
    (:func:`reference_windows`), the field's sliding-window perplexity."""
    if not reference.strip():
        return None
    tok = lm.tokenizer
    p_ids = tok(prompt, add_special_tokens=True)["input_ids"]  # the prompt as decode() encodes it
    r_ids = tok(" " + reference.strip(), add_special_tokens=False)["input_ids"]
    limit = context if context is not None else context_size(lm)
    try:
        windows = reference_windows(len(p_ids), len(p_ids) + len(r_ids), limit)
    except ValueError as exc:
        raise MaxbenchError(
            f"a prompt with its reference cannot be scored for ref-ppl: {exc} of {lm.name}'s context; shorten the prompt"
        ) from None
    ids = torch.tensor([p_ids + r_ids], device=lm.device)
    hidden = []
    for start, end, first in windows:
        res = lm.model(input_ids=ids[:, start:end], output_hidden_states=True, logits_to_keep=1)
        # the state at position t - 1 (of the window) predicts token t
        hidden.append(res.hidden_states[-1][0, first - 1 - start : end - 1 - start])
    return ReferenceStates(
        hidden=hidden[0] if len(hidden) == 1 else torch.cat(hidden), targets=torch.tensor(r_ids, device=lm.device)
    )


@torch.inference_mode()
def reference_logprobs(
    lm,
    layer: OutputLayer,
    prompts: list[str],
    references: list[str],
    chunk: int = 64,
    states: list[ReferenceStates | None] | None = None,
    label: str | None = None,
) -> list[list[float | None]]:
    """Teacher-forced natural-log probability that the layer gives each token of each reference
    (tokenised as ``" " + reference`` after the prompt), None where it is exactly zero.

    This is the layer's own distribution, before any decoding truncation (top-k/top-p would give
    most reference tokens probability zero), as KerBS reports perplexity. Positions go through
    the LM head and ``layer.scores`` in chunks of ``chunk`` rows, so per-row solvers (graphmax)
    batch them. ``states`` (from :func:`reference_states`, one per prompt) saves the forward
    pass when several layers of one base model score the same references.
    """
    if states is None:
        states = [reference_states(lm, p, r) for p, r in zip(prompts, references)]
    head = lm.model.get_output_embeddings()
    out: list[list[float | None]] = []
    for st in states:
        row: list[float | None] = []
        for i in range(0, 0 if st is None else len(st.targets), chunk):
            h = st.hidden[i : i + chunk]
            logits = head(h).float()
            require_finite_logits(logits, *model_nan_cause(lm))
            scores = layer.scores(logits, h.float() if layer.needs_hidden else None)
            what = label or f"output layer '{layer.name}'"
            check_scores_form(scores, logits, what, "on a reference (ref-ppl)")
            if bool(torch.isnan(scores).any() | torch.isposinf(scores).any()):
                raise MaxbenchError(f"{what}: scores() on a reference (ref-ppl) gave NaN or +inf; fix the layer")
            lp = torch.log_softmax(scores.float(), dim=-1).gather(1, st.targets[i : i + chunk, None])[:, 0]
            row += [float(v) if math.isfinite(v) else None for v in lp.cpu().tolist()]
        out.append(row)
    return out
