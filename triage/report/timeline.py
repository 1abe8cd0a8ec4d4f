"""The report's charts and per-rank memory: stats lines or /metrics scrapes as timeline points, and each
process's memory figures."""
from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Sequence

from ..model import LogEvent, RankMemory, TimelinePoint

if TYPE_CHECKING:
    from ..metrics.parse import MetricSample


def _clock(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    if seconds > 1e9:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"+{seconds:.0f}s"


def metric_timeline(samples: Sequence[MetricSample]) -> tuple[TimelinePoint, ...]:
    """Scrapes as chart points (only when there are several), like stats lines are for a log."""
    if not samples:
        return ()
    from ..metrics.names import KV_USAGE, PREEMPTIONS, RUNNING, WAITING  # only with metrics (20 ms of imports)
    from ..metrics.series import per_scrape

    def level(names: Sequence[str], combine: str = "sum") -> dict[int, tuple]:
        chosen = next(([s for s in samples if s.name == n] for n in names if any(s.name == n for s in samples)), [])
        return {lv.scrape: (lv.time, lv.value, lv.sample) for lv in per_scrape(chosen, combine)}
    usage, running, waiting = level(KV_USAGE, "max"), level(RUNNING), level(WAITING)
    preempted = level(PREEMPTIONS)
    scrapes = sorted(set(usage) | set(running) | set(waiting))
    if len(scrapes) < 2:
        return ()
    points = []
    for i, scrape in enumerate(scrapes):
        anchor = (usage.get(scrape) or running.get(scrape) or waiting[scrape])
        before = preempted.get(scrapes[i - 1]) if i else None
        now = preempted.get(scrape)
        delta = int(now[1] - before[1]) if now and before and now[1] >= before[1] else None
        points.append(TimelinePoint(
            time=_clock(anchor[0]), kv_cache_usage=round(usage[scrape][1], 4) if scrape in usage else None,
            running=int(running[scrape][1]) if scrape in running else None,
            waiting=int(waiting[scrape][1]) if scrape in waiting else None, preemptions=delta, source=anchor[2].source))
    return _downsample(tuple(points))


MAX_TIMELINE_POINTS = 400


def timeline(events: Sequence[LogEvent]) -> tuple[TimelinePoint, ...]:
    """Stats lines as chart points (the report falls back to /metrics snapshots when there are none)."""
    stats = [e for e in events if e.kind == "stats"]
    points = []
    for e in stats:
        f = e.fields
        points.append(TimelinePoint(time=e.timestamp, kv_cache_usage=f.get("kv_usage"), running=f.get("running"),
                                    waiting=f.get("waiting"), preemptions=f.get("preemptions"), source=e.source))
    return _downsample(points)


def _downsample(points: Sequence[TimelinePoint]) -> tuple[TimelinePoint, ...]:
    """At most MAX_TIMELINE_POINTS: each bucket keeps its fullest KV point, so a saturation spike survives
    downsampling a day of stats."""
    if len(points) <= MAX_TIMELINE_POINTS:
        return tuple(points)
    size = len(points) / MAX_TIMELINE_POINTS
    kept = []
    for b in range(MAX_TIMELINE_POINTS):
        bucket = points[int(b * size):int((b + 1) * size)] or points[-1:]
        best = max(bucket, key=lambda p: (p.kv_cache_usage or 0.0, p.waiting or 0))
        preempted = sum(p.preemptions or 0 for p in bucket)
        kept.append(dataclasses.replace(best, preemptions=preempted or best.preemptions))
    return tuple(kept)


def rank_memory(events: Sequence[LogEvent], failing: str | None) -> tuple[RankMemory, ...]:
    """Per-process memory figures, only worth showing when more than one process reported them."""
    ranks: dict[str, dict] = {}
    for e in events:
        if e.process is None and not any(k in e.fields for k in ("weights_gib", "kv_cache_gib", "this_process_gib")):
            continue
        for key in ("weights_gib", "kv_cache_gib", "this_process_gib"):
            if key in e.fields and e.kind in ("weights_loaded", "kv_available", "cuda_oom", "memory_profile"):
                ranks.setdefault(e.process or "main process", {})[key] = e.fields[key]
    if len(ranks) < 2:
        return ()
    return tuple(RankMemory(process=name, failed=(name == (failing or "main process")) and "this_process_gib" in vals,
                            **vals) for name, vals in sorted(ranks.items()))
