"""The OpenAI-compatible HTTP backend: ``--judge openai:URL:MODEL`` (vLLM, TGI, llama.cpp's server, a
hosted API).

Each question is one ``POST URL/chat/completions`` with the page as the user's message,
``max_tokens`` 1, temperature 0, ``logprobs`` true and ``top_logprobs`` ``TOP_LOGPROBS``; the server
applies its model's chat template. p(label) is the summed probability of the returned top tokens
that are the label once stripped of spaces ("3" and " 3"); labels outside the top tokens get 0.
The scoring is recorded as "top-logprobs": one token per label. A label that is several tokens for
the server's model (e.g. "10" on the slider, for a model that splits digits) cannot be scored so: a top
token that starts a label without being one ("1" for "10") shows the split, and the judgment stops in
one line (judge such a rubric in-process, which scores labels as sequences) rather than give the split
labels a probability of 0.
``label_mass`` is the labels' share of the probability; with none of the labels among the top
tokens it is 0 and the probabilities are uniform (the judge said nothing), which the report's
mean label mass shows.

The key is read from an environment variable (``key_from_env``) and sent only in the
Authorization header; no message, log line or stored identity contains it. Requests are bounded
(``concurrency`` at once, at most ``rate`` per second over all threads) and retried ``retries``
times with exponential backoff (``Retry-After`` when the server gives one) on a refused
connection, a timeout, 429 and 5xx. Whatever still fails is one MaxbenchError naming the cause;
the units judged until then are stored and a rerun resumes after them.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from maxbench.errors import MaxbenchError
from maxbench.human_eval.judges.scoring import Scored
from maxbench.human_eval.judges.template import template_hash

TOP_LOGPROBS = 20
BACKOFF_S = 0.5
TOP_LOGPROBS_SCORING = "top-logprobs"


def parse_endpoint(spec: str) -> tuple[str, str]:
    """``openai:URL:MODEL`` -> (URL without a trailing '/', MODEL); the model is after the last ':'."""
    rest = spec.removeprefix("openai:")
    url, sep, model = rest.rpartition(":")
    parts = urlsplit(url)
    if (
        not sep
        or parts.scheme not in ("http", "https")
        or not parts.netloc
        or not model
        or re.match(r"^\d+(/|$)", model)
    ):
        raise MaxbenchError(
            f"--judge {spec!r}: write openai:URL:MODEL, e.g. openai:http://127.0.0.1:8080/v1:smollm2 (the URL up to "
            "/v1, then ':' and the model name the server knows)"
        )
    return url.rstrip("/"), model


class _RateLimit:
    """At most ``rate`` starts per second over every thread (evenly spaced)."""

    def __init__(self, rate: float):
        self.gap = 1.0 / rate
        self.next = 0.0
        self.lock = threading.Lock()

    def wait(self) -> None:
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next)
            self.next = start + self.gap
        if start > now:
            time.sleep(start - now)


class OpenAIJudge:
    """A judge backend over an OpenAI-compatible chat completions endpoint (module docstring)."""

    def __init__(
        self,
        url: str,
        model: str,
        key: str,
        concurrency: int = 4,
        rate: float = 10.0,
        retries: int = 4,
        timeout: float = 60.0,
    ):
        if concurrency < 1 or rate <= 0 or retries < 0 or timeout <= 0:
            raise MaxbenchError(
                "--concurrency must be >= 1, --rate and --timeout > 0 and --retries >= 0 (e.g. --concurrency 4 "
                "--rate 10 --retries 4 --timeout 60)"
            )
        self.url, self.model, self._key = url, model, key
        self.name = f"openai:{url}:{model}"
        self.concurrency, self.retries, self.timeout = concurrency, retries, timeout
        self._limit = _RateLimit(rate)

    @staticmethod
    def key_from_env(name: str) -> str:
        key = os.environ.get(name, "")
        if not key:
            raise MaxbenchError(
                f"the API key variable {name} is not set: export {name}=<key> (any value for a server that needs "
                "none), or name another variable with --api-key-env; nothing was judged"
            )
        return key

    def __repr__(self) -> str:  # never the key
        return f"OpenAIJudge({self.url!r}, {self.model!r})"

    def identity(self) -> dict:
        return {
            "model": f"openai:{self.model}",
            "weights": f"served by {self.url} as {self.model} (the server's weights are not hashed here)",
            "tokenizer": None,
            "template": template_hash("server chat template"),
            "decoding": {
                "method": TOP_LOGPROBS_SCORING,
                "framing": "chat-completions",
                "top_logprobs": TOP_LOGPROBS,
                "temperature": 0,
            },
        }

    def prepare(self, labels: tuple[str, ...]) -> tuple[str, ...]:
        stripped = [label.strip() for label in labels]
        if any(not s for s in stripped) or len(set(stripped)) < len(stripped):
            raise MaxbenchError(
                f"judge {self.name}: the labels {list(labels)} are empty or not distinct once stripped of spaces; "
                "nothing was judged"
            )
        return tuple(stripped)

    def score(self, page: str, labels: tuple[str, ...]) -> Scored:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": page}],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": TOP_LOGPROBS,
        }
        top = self._top_logprobs(self._post(body))
        split = sorted(
            {(t.strip(), label) for t, _ in top for label in labels if t.strip() not in labels and t.strip()
             and label.startswith(t.strip())}
        )  # fmt: skip
        if split:
            token, label = split[0]
            raise MaxbenchError(
                f"judge {self.name}: the server's model splits the rubric's label {label!r} into several tokens (its "
                f"answer starts with the token {token!r}); this backend reads one token per label, so the labels "
                f"{list(labels)} cannot be scored here: judge this study in-process (--judge MODEL), which scores "
                "labels as sequences; the units judged so far are stored"
            )
        p = [0.0] * len(labels)
        for token, logprob in top:
            if token.strip() in labels:
                p[labels.index(token.strip())] += math.exp(logprob)
        mass = sum(p)
        probs = tuple(x / mass for x in p) if mass > 0 else tuple(1 / len(labels) for _ in labels)
        return Scored(probs, mass, TOP_LOGPROBS_SCORING)

    def _top_logprobs(self, reply: dict) -> list[tuple[str, float]]:
        try:
            logprobs = reply["choices"][0].get("logprobs")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise MaxbenchError(
                f"{self.url}/chat/completions answered without choices: is it an OpenAI-compatible server? "
                "The units judged so far are stored"
            ) from None
        try:
            entries = logprobs["content"][0]["top_logprobs"]
            return [(str(e["token"]), float(e["logprob"])) for e in entries]
        except (KeyError, IndexError, TypeError, ValueError):
            raise MaxbenchError(
                f"{self.url}/chat/completions returned no logprobs for model {self.model}: the judge reads "
                "probabilities, so the server must support logprobs and top_logprobs (vLLM, llama.cpp's server, "
                "OpenAI); the units judged so far are stored"
            ) from None

    def _post(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self._key}"}
        last, delay = "", BACKOFF_S
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(delay)
            self._limit.wait()
            delay = BACKOFF_S * 2**attempt
            request = urllib.request.Request(f"{self.url}/chat/completions", data=data, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
            except urllib.error.HTTPError as exc:
                detail = _first_line(exc.read())
                if exc.code == 429 or exc.code >= 500:
                    retry_after = exc.headers.get("Retry-After", "")
                    if retry_after.replace(".", "", 1).isdigit():
                        delay = min(float(retry_after), 60.0)
                    last = f"HTTP {exc.code} {detail}".strip()
                    continue
                if exc.code in (401, 403):
                    raise MaxbenchError(
                        f"{self.url} refused the API key (HTTP {exc.code}): check the key in the environment "
                        "variable given by --api-key-env; the units judged so far are stored"
                    ) from None
                raise MaxbenchError(
                    f"{self.url}/chat/completions answered HTTP {exc.code} ({detail}): check the URL and the model "
                    f"name {self.model!r}; the units judged so far are stored"
                ) from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                last = str(getattr(exc, "reason", exc))
                continue
            try:
                return json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise MaxbenchError(
                    f"{self.url}/chat/completions returned malformed JSON ({_first_line(raw)!r}): is it an "
                    "OpenAI-compatible server? The units judged so far are stored"
                ) from None
        raise MaxbenchError(
            f"cannot get an answer from {self.url} after {self.retries + 1} tries ({last}): start the server or "
            "check the URL; the units judged so far are stored, run the command again to resume"
        )


def _first_line(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    return (text.splitlines() or [""])[0][:120]
