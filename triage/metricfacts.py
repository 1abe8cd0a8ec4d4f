"""Facts from `/metrics` snapshots, under the same names the log facts use.

Metric names changed across vLLM versions; every alias maps to one fact here, so rules never see a
metric name. One snapshot gives levels and counters since the server started; several give deltas.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from .facts import FACTS
from .metricparse import MetricSample
from .model import Fact, SourceRef, TimelinePoint

KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREEMPTIONS = ("vllm:num_preemptions_total",)
RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
SWAPPED = ("vllm:num_requests_swapped",)
CACHE_CONFIG = ("vllm:cache_config_info",)


def _fact(name: str, value, evidence: Sequence[SourceRef], note: str | None = None) -> Fact:
    spec = FACTS[name]
    if spec.type is float:
        value = round(float(value), 4)
    elif spec.type is int:
        value = int(value)
    return Fact(name, value, spec.unit, tuple(evidence)[:4], note)


def _of(samples: Sequence[MetricSample], names: Sequence[str]) -> list[MetricSample]:
    return [s for s in samples if s.name in names]


def extract_metric_facts(samples: Sequence[MetricSample]) -> dict[str, Fact]:
    facts: dict[str, Fact] = {}
    vllm = [s for s in samples if s.name.startswith("vllm:")]
    facts["vllm_lines"] = _fact("vllm_lines", len(vllm), [vllm[0].source] if vllm else [], "vllm: samples in the metrics")
    if not vllm:
        return facts
    facts["server_up"] = _fact("server_up", True, [vllm[0].source], "the server answered /metrics")
    usage = _of(vllm, KV_USAGE)
    if usage:
        top = max(usage, key=lambda s: s.value)
        facts["kv_cache_usage_max"] = _fact("kv_cache_usage_max", top.value, [top.source])
        facts["kv_cache_usage_mean"] = _fact("kv_cache_usage_mean", sum(s.value for s in usage) / len(usage),
                                             [usage[0].source], f"mean of {len(usage)} samples")
        saturated = [s for s in usage if s.value >= 0.95]
        facts["saturated_intervals"] = _fact("saturated_intervals", len(saturated), [s.source for s in saturated])
    for names, fact in ((RUNNING, "running_max"), (WAITING, "waiting_max"), (SWAPPED, "swapped_max")):
        found = _of(vllm, names)
        if found:
            top = max(found, key=lambda s: s.value)
            facts[fact] = _fact(fact, top.value, [top.source])
    _preemptions(facts, _of(vllm, PREEMPTIONS))
    _cache_config(facts, _of(vllm, CACHE_CONFIG))
    models = sorted({s.labels["model_name"] for s in vllm if s.labels.get("model_name")})
    if len(models) == 1:
        first = next(s for s in vllm if s.labels.get("model_name"))
        facts["model"] = Fact("model", models[0], None, (first.source,))
    return facts


def _series(sample: MetricSample) -> tuple:
    return tuple(sorted(sample.labels.items()))


def _preemptions(facts: dict[str, Fact], counters: Sequence[MetricSample]) -> None:
    if not counters:
        return
    by_series: dict[tuple, list[MetricSample]] = {}
    for s in counters:
        by_series.setdefault(_series(s), []).append(s)
    scrapes = {s.scrape for s in counters}
    if len(scrapes) > 1:
        delta = sum(max(0.0, max(v, key=lambda s: s.scrape).value - min(v, key=lambda s: s.scrape).value)
                    for v in by_series.values())
        ends = [max(v, key=lambda s: s.scrape) for v in by_series.values()]
        facts["preemptions"] = _fact("preemptions", delta, [e.source for e in ends],
                                     f"increase over {len(scrapes)} snapshots")
    else:
        total = sum(s.value for s in counters)
        facts["preemptions"] = _fact("preemptions", total, [s.source for s in counters],
                                     "vllm:num_preemptions_total since the server started")


def _cache_config(facts: dict[str, Fact], infos: Sequence[MetricSample]) -> None:
    if not infos:
        return
    info = infos[-1]
    labels: Mapping[str, str] = info.labels
    try:
        if labels.get("gpu_memory_utilization"):
            facts["gpu_memory_utilization"] = _fact("gpu_memory_utilization", float(labels["gpu_memory_utilization"]),
                                                    [info.source])
        blocks, block_size = labels.get("num_gpu_blocks"), labels.get("block_size")
        if blocks and block_size and blocks != "None":
            facts["kv_cache_tokens"] = _fact("kv_cache_tokens", int(blocks) * int(block_size), [info.source],
                                             f"num_gpu_blocks {blocks} x block_size {block_size}")
        if labels.get("cache_dtype"):
            facts["kv_cache_dtype"] = Fact("kv_cache_dtype", labels["cache_dtype"], None, (info.source,))
    except ValueError:
        return  # a label that is not a number is unknown, not zero


def merge_facts(log: Mapping[str, Fact], metrics: Mapping[str, Fact]) -> dict[str, Fact]:
    """Log and metrics of one incident: the log's figures first; peaks and counts take the larger."""
    merged = dict(log)
    for name, fact in metrics.items():
        mine = merged.get(name)
        if mine is None:
            merged[name] = fact
        elif name in ("kv_cache_usage_max", "preemptions", "waiting_max", "running_max", "saturated_intervals") \
                and isinstance(fact.value, (int, float)) and fact.value > mine.value:
            merged[name] = fact
        elif name == "vllm_lines":
            merged[name] = Fact(name, mine.value + fact.value, mine.unit, mine.evidence + fact.evidence)
    return merged


def metric_timeline(samples: Sequence[MetricSample]) -> list[TimelinePoint]:
    """One chart point per snapshot, oldest first: the fullest engine's KV usage, requests summed over
    engines, and the preemptions counted since the previous snapshot (unknown for the first)."""
    points: list[TimelinePoint] = []
    previous: dict[tuple, float] = {}
    for scrape in sorted({s.scrape for s in samples}):
        here = [s for s in samples if s.scrape == scrape]
        usage, running, waiting, counters = (_of(here, names) for names in (KV_USAGE, RUNNING, WAITING, PREEMPTIONS))
        if not (usage or running or waiting or counters):
            continue
        preempted = None
        if counters and previous:
            preempted = int(sum(max(0.0, s.value - previous.get(_series(s), s.value)) for s in counters))
        previous = {_series(s): s.value for s in counters} or previous
        points.append(TimelinePoint(
            time=None, kv_cache_usage=max(s.value for s in usage) if usage else None,
            running=int(sum(s.value for s in running)) if running else None,
            waiting=int(sum(s.value for s in waiting)) if waiting else None,
            preemptions=preempted, source=(usage or running or waiting or counters)[0].source))
    return points
