"""The request sizes a server really saw, from vLLM's prompt and generation token histograms.

`vllm:request_prompt_tokens` and `vllm:request_generation_tokens` (V0 0.4.2+, V1 0.7.1+) count finished
requests. Two or more snapshots give what happened between the first and the last; one gives everything
since the server started. The mean says how many requests the KV cache holds on average; the 90th
percentile (the upper edge of its bucket, so an over-estimate) how many it holds when requests run long.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..metrics.parse import MetricSample
from ..model import SourceRef

PROMPT, GENERATION = "vllm:request_prompt_tokens", "vllm:request_generation_tokens"


@dataclass(frozen=True)
class Lengths:
    """Observed tokens per request."""

    requests: int
    prompt_mean: float
    generation_mean: float
    prompt_p90: float | None
    generation_p90: float | None
    evidence: tuple[SourceRef, ...]
    window: str                    # "since the server started" or "between the first and last snapshot"

    @property
    def mean(self) -> float:
        return self.prompt_mean + self.generation_mean

    @property
    def p90(self) -> float | None:
        if self.prompt_p90 is None or self.generation_p90 is None:
            return None
        return self.prompt_p90 + self.generation_p90


@dataclass(frozen=True)
class _Histogram:
    count: float
    total: float
    buckets: tuple[tuple[float, float], ...]     # (upper bound, cumulative count), ascending
    evidence: tuple[SourceRef, ...]


def _histogram(samples: Sequence[MetricSample], name: str, scrape: int) -> _Histogram | None:
    mine = [s for s in samples if s.scrape == scrape and s.name.startswith(name + "_")]
    count = sum(s.value for s in mine if s.name == name + "_count")
    total = sum(s.value for s in mine if s.name == name + "_sum")
    if not count:
        return None
    cumulative: dict[float, float] = {}
    for s in mine:
        if s.name == name + "_bucket" and "le" in s.labels:
            bound = math.inf if s.labels["le"] in ("+Inf", "Inf") else float(s.labels["le"])
            cumulative[bound] = cumulative.get(bound, 0.0) + s.value       # summed over engines
    evidence = tuple(s.source for s in mine if s.name in (name + "_count", name + "_sum"))[:2]
    return _Histogram(count, total, tuple(sorted(cumulative.items())), evidence)


def _minus(last: _Histogram, first: _Histogram | None) -> _Histogram:
    if first is None or last.count <= first.count:
        return last
    before = dict(first.buckets)
    return _Histogram(last.count - first.count, last.total - first.total,
                      tuple((b, c - before.get(b, 0.0)) for b, c in last.buckets), last.evidence + first.evidence)


def _p90(h: _Histogram) -> float | None:
    target = 0.9 * h.count
    for bound, cumulative in h.buckets:
        if cumulative >= target:
            return None if math.isinf(bound) else bound
    return None


def observed_lengths(samples: Sequence[MetricSample]) -> Lengths | None:
    """Mean and 90th-percentile prompt and output tokens per request; None without both histograms."""
    scrapes = sorted({s.scrape for s in samples})
    if not scrapes:
        return None
    last_prompt, last_gen = _histogram(samples, PROMPT, scrapes[-1]), _histogram(samples, GENERATION, scrapes[-1])
    if last_prompt is None or last_gen is None:
        return None
    first = scrapes[0] if len(scrapes) > 1 else None
    prompt = _minus(last_prompt, _histogram(samples, PROMPT, first) if first is not None else None)
    gen = _minus(last_gen, _histogram(samples, GENERATION, first) if first is not None else None)
    window = "between the first and last snapshot" if prompt is not last_prompt else "since the server started"
    return Lengths(requests=int(prompt.count), prompt_mean=prompt.total / prompt.count,
                   generation_mean=gen.total / gen.count, prompt_p90=_p90(prompt), generation_p90=_p90(gen),
                   evidence=prompt.evidence + gen.evidence, window=window)
