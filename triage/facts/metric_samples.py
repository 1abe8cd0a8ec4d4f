"""Facts from `/metrics` samples, under the same names the log facts use.

Metric names changed across vLLM versions; every alias maps to one fact here, so rules never see a
metric name. One snapshot gives levels and counters since the server started; several give deltas
and, when their times are known, rates. The samples given are those of one engine of one server
(see triage/metrics/units.py, which splits them).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from ..metrics.names import (
    CACHE_CONFIG,
    DCGM_FREE,
    DCGM_RESERVED,
    DCGM_USED,
    HISTOGRAMS,
    KV_USAGE,
    PREEMPTIONS,
    PREFIX_HIT_RATE,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROCESS_START,
    REQUEST_PREEMPTIONS,
    REQUESTS_FINISHED,
    RUNNING,
    SWAPPED,
    V0_ONLY,
    WAITING,
)
from ..metrics.parse import MetricSample, sample_value
from ..metrics.series import (
    Level,
    counter_increase,
    histogram_quantile,
    histogram_window,
    per_scrape,
    scrapes_read,
    time_at_or_above,
    window_seconds,
)
from ..model import Fact, SourceRef
from ..vocabulary import KV_SATURATED
from .registry import FACTS

QUANTILES = (("p50", 0.5), ("p95", 0.95))
MIB_PER_GIB = 1024.0


def _fact(name: str, value, evidence: Sequence[SourceRef], note: str | None = None) -> Fact:
    spec = FACTS[name]
    if spec.type is float:
        value = round(float(value), 4)
    elif spec.type is int:
        value = int(round(value))
    return Fact(name, value, spec.unit, tuple(dict.fromkeys(evidence))[:4], note)


Named = Mapping[str, Sequence[MetricSample]]      # vLLM's samples by metric name, each name's in input order


def _by_name(vllm: Sequence[MetricSample]) -> dict[str, list[MetricSample]]:
    """The samples grouped by name once: each fact reads a few names, and a unit of a large server has
    thousands of samples over its snapshots."""
    named: dict[str, list[MetricSample]] = {}
    for s in vllm:
        named.setdefault(s.name, []).append(s)
    return named


def _of(named: Named, names: Sequence[str]) -> list[MetricSample]:
    """The samples of the first name in `names` that is present (aliases never add up twice)."""
    for name in names:
        found = named.get(name)
        if found:
            return list(found)
    return []


def _base(named: Named, names: Sequence[str]) -> str | None:
    return next((n for n in names if f"{n}_bucket" in named), None)


def _histogram(named: Named, base: str) -> list[MetricSample]:
    """A histogram's buckets, count and sum: all that histogram_window reads."""
    return [*named.get(f"{base}_bucket", ()), *named.get(f"{base}_count", ()), *named.get(f"{base}_sum", ())]


def extract_metric_facts(samples: Sequence[MetricSample], ordering: str | None = None) -> dict[str, Fact]:
    facts: dict[str, Fact] = {}
    vllm = [s for s in samples if s.name.startswith("vllm:")]
    facts["vllm_lines"] = _fact("vllm_lines", sum(s.stands_for for s in vllm), [vllm[0].source] if vllm else [],
                                "vllm: samples in the metrics")
    if not vllm:
        _gpu_memory(facts, samples)
        return facts
    facts["server_up"] = _fact("server_up", True, [vllm[0].source], "the server answered /metrics")
    given = len({s.scrape for s in vllm})
    copies = _copies(vllm)
    if copies:
        samples = [s for s in samples if s.scrape not in copies]
        vllm = [s for s in vllm if s.scrape not in copies]
        ordering = (f"{ordering}; " if ordering else "") + \
            (f"{len(copies)} of the {given} snapshots are copies of the one before (same values, same "
             "or no time): read once")
    scrapes = scrapes_read(vllm, PREEMPTIONS)      # the preemption counter is held one point a scrape
    facts["metrics_snapshots"] = _fact("metrics_snapshots", scrapes, [vllm[0].source], ordering)
    window = window_seconds(vllm)
    if window:
        facts["metrics_window_seconds"] = _fact("metrics_window_seconds", window, [vllm[0].source, vllm[-1].source],
                                                ordering)
    _identity(facts, vllm)
    named = _by_name(vllm)
    _kv_usage(facts, named)
    _queues(facts, named)
    _queue_at_capacity(facts, named)
    _preemptions(facts, named, window, _uptime(samples, vllm))
    _prefix_cache(facts, named)
    _histograms(facts, named, scrapes > 1)
    _request_preemptions(facts, named)
    _preemptions_per_request(facts, named)
    _cache_config(facts, _of(named, CACHE_CONFIG))
    _gpu_memory(facts, samples)
    return facts


def _copies(vllm: Sequence[MetricSample]) -> set[int]:
    """Scrapes that repeat the one before them: every vLLM sample the same, at the same time or none. The
    same file given twice says nothing about time passing; counting it as a scrape would turn a lifetime
    count into an increase of zero."""
    by_scrape: dict[int, list[MetricSample]] = {}
    for s in vllm:
        by_scrape.setdefault(s.scrape, []).append(s)
    copies: set[int] = set()
    before: tuple[list, float | None] | None = None
    for scrape in sorted(by_scrape):
        points = by_scrape[scrape]
        content = sorted((s.name, sorted(s.labels.items()), s.value) for s in points)
        when = points[0].time
        if before is not None and content == before[0] and (when is None or when == before[1]):
            copies.add(scrape)
            continue
        before = (content, when)
    return copies


def _identity(facts: dict[str, Fact], vllm: Sequence[MetricSample]) -> None:
    models = sorted({s.labels["model_name"] for s in vllm if s.labels.get("model_name")})
    if len(models) == 1:
        first = next(s for s in vllm if s.labels.get("model_name"))
        facts["model"] = Fact("model", models[0], None, (first.source,), "the model_name label")
    v0 = next((s for s in vllm if s.name in V0_ONLY), None)
    v1 = next((s for s in vllm if "engine" in s.labels or s.name == KV_USAGE[0]), None)
    if v1 is not None:
        facts["engine"] = Fact("engine", "v1", None, (v1.source,), "V1 metrics: an engine label or kv_cache_usage_perc")
    elif v0 is not None:
        facts["engine"] = Fact("engine", "v0", None, (v0.source,), f"{v0.name} exists only in the V0 engine")


def _kv_usage(facts: dict[str, Fact], named: Named) -> None:
    levels = per_scrape(_of(named, KV_USAGE), "max")
    if not levels:
        return
    top = max(levels, key=lambda lv: lv.value)
    facts["kv_cache_usage_max"] = _fact("kv_cache_usage_max", top.value, [top.sample.source])
    read = _scrapes(levels)
    facts["kv_cache_usage_mean"] = _fact("kv_cache_usage_mean", sum(lv.value * lv.scrapes for lv in levels) / read,
                                         [levels[0].sample.source, levels[-1].sample.source], f"mean of {read} scrapes")
    saturated = [lv for lv in levels if lv.value >= KV_SATURATED]
    facts["saturated_intervals"] = _fact("saturated_intervals", _scrapes(saturated),
                                         [lv.sample.source for lv in saturated],
                                         f"scrapes with KV cache usage >= {KV_SATURATED:.0%}")
    timed = time_at_or_above(levels, KV_SATURATED)
    if timed is not None:
        above, observed = timed
        evidence = [lv.sample.source for lv in saturated] or [levels[0].sample.source]
        facts["saturated_seconds"] = _fact("saturated_seconds", above, evidence,
                                           "each scrape stands for the interval to the next; "
                                           f"{observed:.0f} s observed")
        facts["saturated_share"] = _fact("saturated_share", above / observed, evidence)
    running = {lv.scrape: lv.value for lv in per_scrape(_of(named, RUNNING))}
    busy = sorted(value for lv in saturated if lv.scrape in running for value in [running[lv.scrape]] * lv.scrapes)
    if busy:
        facts["running_at_saturation"] = _fact("running_at_saturation", busy[len(busy) // 2],
                                               [saturated[0].sample.source],
                                               f"median over {len(busy)} saturated scrapes")
    calm = [lv for lv in levels if lv.value < KV_SATURATED and lv.scrape in running]
    if calm:
        top = max(calm, key=lambda lv: running[lv.scrape])
        facts["running_below_saturation"] = _fact("running_below_saturation", int(running[top.scrape]),
                                                  [top.sample.source])


def _scrapes(levels: Sequence[Level]) -> int:
    """The snapshots the levels stand for (more than the levels where neighbours were merged)."""
    return sum(lv.scrapes for lv in levels)


def _queues(facts: dict[str, Fact], named: Named) -> None:
    for names, fact in ((RUNNING, "running_max"), (WAITING, "waiting_max"), (SWAPPED, "swapped_max")):
        levels = per_scrape(_of(named, names))
        if levels:
            top = max(levels, key=lambda lv: lv.value)
            facts[fact] = _fact(fact, top.value, [top.sample.source])
    waiting = per_scrape(_of(named, WAITING))
    if len(waiting) > 1:
        first, last = waiting[0], waiting[-1]
        facts["waiting_growth"] = _fact("waiting_growth", last.value - first.value,
                                        [first.sample.source, last.sample.source],
                                        f"{first.value:.0f} -> {last.value:.0f} requests waiting over "
                                        f"{_scrapes(waiting)} scrapes")


def _queue_at_capacity(facts: dict[str, Fact], named: Named) -> None:
    """Scrapes where the KV cache was full while requests waited (the state preemption comes from), and
    the run of scrapes the metrics end with where requests wait, none runs and the cache is empty (a stall)."""
    usage = {lv.scrape: lv for lv in per_scrape(_of(named, KV_USAGE), "max")}
    waiting = {lv.scrape: lv.value for lv in per_scrape(_of(named, WAITING))}
    running = {lv.scrape: lv.value for lv in per_scrape(_of(named, RUNNING))}
    both = [usage[s] for s in sorted(usage) if s in waiting]
    if not both:
        return
    full = [lv for lv in both if lv.value >= KV_SATURATED and waiting[lv.scrape] > 0]
    refs = [lv.sample.source for lv in full] or [both[-1].sample.source]
    how = f"scrapes with KV cache usage >= {KV_SATURATED:.0%} and requests waiting"
    facts["saturated_queue_intervals"] = _fact("saturated_queue_intervals", _scrapes(full), refs, how)
    facts["saturated_queue_share"] = _fact("saturated_queue_share", _scrapes(full) / _scrapes(both), refs,
                                           f"{_scrapes(full)} of {_scrapes(both)} scrapes")
    stalled = []
    for lv in reversed(both):
        if running.get(lv.scrape) != 0 or waiting[lv.scrape] <= 0 or lv.value > 0.01:
            break
        stalled.append(lv)
    if stalled:
        facts["stalled_intervals"] = _fact("stalled_intervals", _scrapes(stalled),
                                           [lv.sample.source for lv in reversed(stalled)],
                                           "scrapes with requests waiting, none running and the KV cache empty")


def _created(named: Named, counter: str) -> list[MetricSample]:
    stem = counter[:-len("_total")] if counter.endswith("_total") else counter
    return list(named.get(f"{stem}_created", ()))


def _uptime(samples: Sequence[MetricSample], vllm: Sequence[MetricSample]) -> tuple[float, str, list[SourceRef]] | None:
    """How long the server had run at the last scrape: the scrape's own time (a live scrape, or the
    timestamps Prometheus writes) minus when the server started (`process_start_time_seconds`, else the
    earliest `_created` of vLLM's counters). None without both: a saved file carries no time of its own."""
    last = max(s.scrape for s in vllm)
    now = next((s.time for s in vllm if s.scrape == last and s.time is not None), None)
    if now is None or now < 1e9:                 # unknown, or seconds from the first snapshot: not a clock
        return None
    started = [s for s in samples if s.name == PROCESS_START and s.scrape == last and s.value > 1e9]
    how = "process_start_time_seconds"
    if not started:
        started = [s for s in vllm if s.name.endswith("_created") and s.scrape == last and s.value > 1e9]
        how = "the counters' _created time"
    if not started:
        return None
    start = min(started, key=lambda s: s.value)
    if now - start.value <= 0:
        return None
    stamp = next(s for s in vllm if s.scrape == last and s.time is not None)
    return now - start.value, how, [start.source, stamp.source]


def _preemptions(facts: dict[str, Fact], named: Named, window: float | None,
                 uptime: tuple[float, str, list[SourceRef]] | None) -> None:
    """Several scrapes: the counter's increase, a rate over the window. One scrape: a lifetime count, which
    is context, not a verdict; it becomes a rate only with a time base (how long the server has run)."""
    counters = _of(named, PREEMPTIONS)
    grown = counter_increase(counters, _created(named, counters[0].name)) if counters else None
    if grown is None:
        return
    if grown.scrapes == 1:
        evidence = [s.source for s in counters]
        facts["preemptions_since_start"] = _fact(
            "preemptions_since_start", grown.value, evidence,
            f"{grown.last.name} in one snapshot: counted since the server started")
        if uptime is not None:
            seconds, how, where = uptime
            facts["server_uptime_seconds"] = _fact("server_uptime_seconds", seconds, where,
                                                   f"the scrape's time minus {how}")
            facts["preemption_rate_per_min"] = _fact(
                "preemption_rate_per_min", grown.value / (seconds / 60.0), evidence[:2] + where,
                f"{grown.value:.0f} preemptions over the {_duration(seconds)} since the server started "
                f"(from {how}): an average, not the rate now")
        return
    note = f"increase of {grown.first.name} over {_scrapes(per_scrape(counters))} snapshots"   # kept whole
    if grown.resets:
        note += f" (the server restarted {grown.resets} time(s): counted from zero after)"
    evidence = [grown.first.source, grown.last.source]
    facts["preemptions"] = _fact("preemptions", grown.value, evidence, note)
    span = window_seconds(counters) or window
    if span:
        facts["preemption_rate_per_min"] = _fact("preemption_rate_per_min", grown.value / (span / 60.0), evidence,
                                                 f"{grown.value:.0f} preemptions in {span:.0f} s of metrics")


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.0f} hours"
    return f"{seconds / 60:.0f} minutes"


def _preemptions_per_request(facts: dict[str, Fact], named: Named) -> None:
    """Preemptions per finished request from the counters, over the same span as the preemption count
    (the window, or since the start), when the per-request histogram (0.30+) did not already give it."""
    count = facts.get("preemptions") or facts.get("preemptions_since_start")
    if count is None or "preemptions_per_request_mean" in facts:
        return
    finished = counter_increase(_of(named, REQUESTS_FINISHED))
    if finished is None:
        base = _base(named, HISTOGRAMS[1][1])                   # every finished request has an e2e latency
        finished = counter_increase(list(named.get(f"{base}_count", ()))) if base else None
    if finished is None or finished.value <= 0:
        return
    evidence = list(count.evidence[:2]) + [finished.last.source]
    facts.setdefault("requests_finished", _fact("requests_finished", finished.value, evidence, finished.last.name))
    facts["preemptions_per_request_mean"] = _fact(
        "preemptions_per_request_mean", count.value / finished.value, evidence,
        f"{count.value} preemptions / {finished.value:.0f} finished requests ({finished.last.name})")


def _prefix_cache(facts: dict[str, Fact], named: Named) -> None:
    queries, hits = counter_increase(_of(named, PREFIX_QUERIES)), counter_increase(_of(named, PREFIX_HITS))
    if queries is not None and hits is not None and queries.value > 0:
        facts["prefix_cache_hit_rate"] = _fact("prefix_cache_hit_rate", hits.value / queries.value,
                                               [hits.last.source, queries.last.source],
                                               f"hits / queries ({hits.last.name}), in tokens or "
                                               "blocks as vLLM counts them")
        return
    gauge = per_scrape(_of(named, PREFIX_HIT_RATE), "max")
    if gauge:
        facts["prefix_cache_hit_rate"] = _fact("prefix_cache_hit_rate", gauge[-1].value, [gauge[-1].sample.source],
                                               "V0's gpu_prefix_cache_hit_rate at the last scrape")


def _histograms(facts: dict[str, Fact], named: Named, several_scrapes: bool) -> None:
    for prefix, names, suffix in HISTOGRAMS:
        base = _base(named, names)
        observed = histogram_window(_histogram(named, base), base) if base else None
        if observed is None or observed.count <= 0:
            continue
        scope = "over the window" if several_scrapes else "since the server started"
        for label, q in QUANTILES:
            value = histogram_quantile(q, observed.buckets)
            if value is not None:
                facts[f"{prefix}_{label}{suffix}"] = _fact(
                    f"{prefix}_{label}{suffix}", value, [s.source for s in observed.evidence],
                    f"{base} {label} of {observed.count:.0f} requests {scope} (interpolated in its bucket)")


def _request_preemptions(facts: dict[str, Fact], named: Named) -> None:
    base = _base(named, REQUEST_PREEMPTIONS)
    observed = histogram_window(_histogram(named, base), base) if base else None
    if observed is None or observed.count <= 0:
        return
    evidence = [s.source for s in observed.evidence]
    facts["requests_finished"] = _fact("requests_finished", observed.count, evidence, f"{base}_count")
    if not math.isnan(observed.total):
        facts["preemptions_per_request_mean"] = _fact("preemptions_per_request_mean", observed.total / observed.count,
                                                      evidence, f"{base}_sum / _count")
    none = next(((b, c) for b, c in observed.buckets if b < 1), None)
    if none is not None:
        facts["requests_preempted_share"] = _fact("requests_preempted_share", 1 - none[1] / observed.count, evidence,
                                                  f"finished requests outside the le=\"{none[0]:g}\" bucket of {base}")
        return
    once = next(((b, c) for b, c in observed.buckets if b == 1), None)
    if once is not None:
        facts["requests_preempted_share"] = _fact(
            "requests_preempted_share", 1 - once[1] / observed.count, evidence,
            f"at least this share: the first bucket of {base} (le=\"1\") holds requests preempted 0 or 1 times, "
            "so only those preempted more than once are counted")


def _cache_config(facts: dict[str, Fact], infos: Sequence[MetricSample]) -> None:
    """vllm:cache_config_info: a constant 1 whose labels are the engine's CacheConfig."""
    if not infos:
        return
    info = max(infos, key=lambda s: s.scrape)
    labels: Mapping[str, str] = info.labels
    where = [info.source]

    def number(key: str, kind: type):
        raw = labels.get(key)
        if raw in (None, "", "None"):
            return None
        value = sample_value(raw)   # a label that is not a number (or NaN, inf, absurd) is unknown, not zero
        return None if value is None else kind(value)

    util = number("gpu_memory_utilization", float)
    if util is not None:
        facts["gpu_memory_utilization"] = _fact("gpu_memory_utilization", util, where, "vllm:cache_config_info label")
    blocks, block_size = number("num_gpu_blocks", int), number("block_size", int)
    if block_size:
        facts["block_size"] = _fact("block_size", block_size, where)
    if blocks:
        facts["gpu_blocks"] = _fact("gpu_blocks", blocks, where)
    tokens = number("kv_cache_size_tokens", int)
    if tokens:
        facts["kv_cache_tokens"] = _fact("kv_cache_tokens", tokens, where, "kv_cache_size_tokens label")
    elif blocks and block_size:
        facts["kv_cache_tokens"] = _fact("kv_cache_tokens", blocks * block_size, where,
                                         f"num_gpu_blocks {blocks} x block_size {block_size}")
    concurrency = number("kv_cache_max_concurrency", float)
    if concurrency:
        facts["max_concurrency"] = _fact("max_concurrency", concurrency, where)
    if labels.get("cache_dtype"):
        facts["kv_cache_dtype"] = Fact("kv_cache_dtype", labels["cache_dtype"], None, tuple(where))
    if labels.get("enable_prefix_caching") in ("True", "False"):
        facts["enable_prefix_caching"] = Fact("enable_prefix_caching", labels["enable_prefix_caching"] == "True",
                                              None, tuple(where))


def _gpu_memory(facts: dict[str, Fact], samples: Sequence[MetricSample]) -> None:
    """dcgm-exporter's framebuffer figures (MiB) against vLLM's reservation (utilization x total)."""
    used = [s for s in samples if s.name == DCGM_USED]
    if not used:
        return
    other = {(s.name, s.scrape, s.labels.get("gpu"), s.labels.get("UUID")): s.value
             for s in samples if s.name in (DCGM_FREE, DCGM_RESERVED)}
    util = facts.get("gpu_memory_utilization")
    top_used = max(used, key=lambda s: s.value)
    facts["gpu_memory_used_gib"] = _fact("gpu_memory_used_gib", top_used.value / MIB_PER_GIB, [top_used.source],
                                         f"{DCGM_USED} (MiB), the fullest GPU and scrape")
    worst: tuple[float, MetricSample, float] | None = None
    for s in used:
        key = (s.scrape, s.labels.get("gpu"), s.labels.get("UUID"))
        free = other.get((DCGM_FREE, *key))
        if free is None:
            continue
        total = (s.value + free + other.get((DCGM_RESERVED, *key), 0.0)) / MIB_PER_GIB
        if "gpu_total_gib" not in facts:
            facts["gpu_total_gib"] = _fact("gpu_total_gib", total, [s.source], "DCGM used + free (+ reserved)")
        if util is not None:
            beyond = s.value / MIB_PER_GIB - util.value * total
            if worst is None or beyond > worst[0]:
                worst = (beyond, s, total)
    if worst is not None and util is not None:
        beyond, sample, total = worst
        budget = util.value * total
        facts.setdefault("budget_gib", _fact("budget_gib", budget, [sample.source, *util.evidence],
                                             "gpu_memory_utilization x total"))
        facts["gpu_memory_beyond_budget_gib"] = _fact(
            "gpu_memory_beyond_budget_gib", beyond, [sample.source, *util.evidence],
            f"{sample.value / MIB_PER_GIB:.2f} GiB used on the GPU, vLLM reserves {util.value:g} x {total:.2f} = "
            f"{budget:.2f} GiB")


_PEAKS = ("kv_cache_usage_max", "preemptions", "waiting_max", "running_max", "saturated_intervals",
          "preemption_rate_per_min", "swapped_max")


def merge_facts(log: Mapping[str, Fact], metrics: Mapping[str, Fact]) -> dict[str, Fact]:
    """Log and metrics of one incident: the log's figures first; peaks and counts take the larger."""
    merged = dict(log)
    for name, fact in metrics.items():
        mine = merged.get(name)
        if mine is None:
            merged[name] = fact
        elif name in _PEAKS and isinstance(fact.value, (int, float)) and fact.value > mine.value:
            merged[name] = fact
        elif name == "vllm_lines":
            merged[name] = Fact(name, mine.value + fact.value, mine.unit, mine.evidence + fact.evidence)
    return merged
