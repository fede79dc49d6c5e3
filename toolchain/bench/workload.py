"""Prompts with a known number of tokens (built with the deployment's tokenizer), length distributions,
shared-prefix workloads, JSONL datasets, and request arrival schedules."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.errors import UserInputError

if TYPE_CHECKING:
    from toolchain.artifacts.bench_result import Load


@dataclass(frozen=True)
class Dist:
    kind: str  # fixed | normal | uniform | file
    mean: float = 0
    std: float = 0
    lo: int = 1
    hi: int = 1 << 20
    values: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Dist:
        """'128', 'normal:512:64', 'uniform:100:900', 'file:lengths.txt'."""
        try:
            if text.isdigit():
                return cls("fixed", int(text), lo=int(text), hi=int(text))
            kind, _, rest = text.partition(":")
            if kind == "normal":
                m, s = rest.split(":")
                return cls("normal", float(m), float(s))
            if kind == "uniform":
                lo, hi = rest.split(":")
                return cls("uniform", (int(lo) + int(hi)) / 2, lo=int(lo), hi=int(hi))
            if kind == "file":
                vals = tuple(int(x) for x in Path(rest).read_text().split())
                return cls("file", sum(vals) / len(vals), values=vals)
        except (ValueError, OSError, ZeroDivisionError):
            pass
        raise UserInputError(
            f"cannot read the length distribution {text!r}", "use N, normal:MEAN:STD, uniform:LO:HI or file:PATH"
        )

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.mean)
        if self.kind == "normal":
            return max(1, min(self.hi, round(rng.gauss(self.mean, self.std))))
        if self.kind == "uniform":
            return rng.randint(self.lo, self.hi)
        return rng.choice(self.values)


@dataclass
class Request:
    prompt: str
    prompt_tokens: int
    max_tokens: int
    shared_prefix: bool | None = None
    num_draft_tokens: int | None = None  # draft-target through the BLS model: drafts per verify step
    at: float | None = None  # trace replay: seconds after the trace's start at which it arrives


class PromptMaker:
    """Builds text whose tokenization has exactly N tokens (no special tokens counted)."""

    def __init__(self, tokenizer: Any, seed: int) -> None:
        self.tok = tokenizer
        self.rng = random.Random(seed)
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        ids = [i for i in range(min(len(tokenizer), 50000)) if i not in special]
        words, roundtrip = [], []
        for i in ids:
            d = tokenizer.decode([i])
            if "\ufffd" in d or tokenizer.encode(d, add_special_tokens=False) != [i]:
                continue
            roundtrip.append(i)
            if d.startswith(" ") and d[1:].isalpha():
                words.append(i)  # " word" tokens rarely merge with their neighbours
        self.pool = words if len(words) >= 20 else (roundtrip or ids)

    def count(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False))

    def make(self, n: int) -> str:
        for _ in range(20):  # decode/encode is not a bijection; trim or pad until exactly n
            text = str(self.tok.decode([self.rng.choice(self.pool) for _ in range(n)]))
            for _ in range(6):
                got = self.tok.encode(text, add_special_tokens=False)
                if len(got) == n:
                    return text
                if len(got) > n:
                    text = str(self.tok.decode(got[:n]))
                else:
                    text = text + self.tok.decode([self.rng.choice(self.pool) for _ in range(n - len(got))])
        raise UserInputError(
            f"could not build a prompt of exactly {n} tokens with this tokenizer",
            "use a --dataset of real prompts instead",
        )


def synthetic(tokenizer: Any, n: int, inp: Dist, out: Dist, seed: int) -> list[Request]:
    return list(islice(synthetic_stream(tokenizer, inp, out, seed), n))


def synthetic_stream(tokenizer: Any, inp: Dist, out: Dist, seed: int) -> Iterator[Request]:
    """The endless sequence ``synthetic`` takes its first n from (the same seed gives the same requests)."""
    pm = PromptMaker(tokenizer, seed)
    rng = random.Random(seed + 1)
    while True:
        k = inp.sample(rng)
        text = pm.make(k)
        yield Request(text, pm.count(text), out.sample(rng))


def shared_prefix(
    tokenizer: Any, n: int, prompts: int, prefix_tokens: int, fraction: float, suffix: Dist, out: Dist, seed: int
) -> list[Request]:
    """K system prompts of P tokens; ``fraction`` of requests start with one of them, the rest are unique."""
    return list(islice(shared_prefix_stream(tokenizer, prompts, prefix_tokens, fraction, suffix, out, seed), n))


def shared_prefix_stream(
    tokenizer: Any, prompts: int, prefix_tokens: int, fraction: float, suffix: Dist, out: Dist, seed: int
) -> Iterator[Request]:
    """The endless sequence ``shared_prefix`` takes its first n from."""
    if not 0 <= fraction <= 1 or prompts < 1 or prefix_tokens < 1:
        raise UserInputError("shared prefix needs K >= 1 prompts, P >= 1 tokens and a fraction in [0, 1]")
    pm = PromptMaker(tokenizer, seed)
    rng = random.Random(seed + 2)
    systems = [pm.make(prefix_tokens) for _ in range(prompts)]
    while True:
        tail = pm.make(suffix.sample(rng))
        if rng.random() < fraction:
            text = rng.choice(systems) + tail
            shared = True
        else:
            text = pm.make(prefix_tokens) + tail
            shared = False
        yield Request(text, pm.count(text), out.sample(rng), shared)


class RequestSource:
    """The first n requests of one endless, reproducible sequence, each made when it is first asked for."""

    def __init__(self, items: Iterator[Request]) -> None:
        self._items = items
        self._made: list[Request] = []

    def first(self, n: int) -> list[Request]:
        self._made.extend(islice(self._items, max(0, n - len(self._made))))
        return self._made[:n]


def dataset(path: Path, tokenizer: Any, out: Dist, seed: int, limit: int) -> list[Request]:
    """JSONL with {"prompt": "...", "max_tokens": N (optional)} per line."""
    rng = random.Random(seed)
    reqs = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            prompt = str(obj["prompt"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise UserInputError(f"{path}:{n}: expected a JSON object with a 'prompt'") from exc
        mt = int(obj.get("max_tokens") or out.sample(rng))
        reqs.append(Request(prompt, len(tokenizer.encode(prompt, add_special_tokens=False)), mt))
        if len(reqs) >= limit:
            break
    if not reqs:
        raise UserInputError(f"{path} holds no prompts")
    return reqs


def arrivals(n: int, rate: float, *, poisson: bool, seed: int) -> list[float]:
    """Send offsets in seconds: constant spacing 1/rate, or exponential gaps (Poisson process)."""
    if rate <= 0:
        raise UserInputError("request rate must be positive")
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate) if poisson else 1.0 / rate
    return out


def send_offsets(load: Load, todo: list[Request], seed: int) -> list[float]:
    """Send offsets (seconds after the start) of an open-loop load: the trace's times, or the rate's."""
    if load.trace is not None:
        ats = [r.at or 0.0 for r in todo]
        first = min(ats, default=0.0)
        return [(a - first) / load.speed for a in ats]
    assert load.rate is not None
    return arrivals(len(todo), load.rate, poisson=load.poisson, seed=seed)
