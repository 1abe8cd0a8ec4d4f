"""Arithmetic on metric samples over several scrapes: counter increases, gauge levels over time,
histogram quantiles. The same code serves saved snapshots, live scrapes and Prometheus ranges, so
a figure means the same thing whichever way the samples came.

Semantics follow Prometheus: a counter that goes down was reset (the server restarted) and counts
from zero again; a histogram quantile interpolates linearly inside its bucket (histogram_quantile).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

from .parse import MetricSample

CUMULATIVE_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum")    # a counter's or a histogram's series
INSTANCE_LABELS = ("pod", "instance")
GPU_INSTANCE_LABELS = ("exported_pod", "pod", "instance")     # dcgm-exporter's own pod label is renamed on scrape


def unit_labels(name: str, labels: Mapping[str, str]) -> tuple[str, str | None, str | None]:
    """The instance, model and engine a series names (metrics/units.py splits samples into units by them):
    the pod, else Prometheus' instance, else "" (the input itself); None for a label it lacks."""
    keys = GPU_INSTANCE_LABELS if not name.startswith("vllm:") else INSTANCE_LABELS
    return (next((labels[k] for k in keys if labels.get(k)), ""), labels.get("model_name") or None,
            labels.get("engine") or None)


def labels_key(labels: Mapping[str, str], drop: Iterable[str] = ()) -> tuple[tuple[str, str], ...]:
    skip = set(drop)
    return tuple(sorted((k, v) for k, v in labels.items() if k not in skip))


def by_series(samples: Iterable[MetricSample], drop: Iterable[str] = ()) -> dict[tuple, list[MetricSample]]:
    """Samples grouped by name and labels, each series in scrape order."""
    out: dict[tuple, list[MetricSample]] = {}
    for s in samples:
        out.setdefault((s.name, labels_key(s.labels, drop)), []).append(s)
    for points in out.values():
        points.sort(key=lambda s: (s.scrape, s.time or 0.0))
    return out


@dataclass(frozen=True)
class Increase:
    """How much a counter (or the sum of several series) grew over the scrapes."""

    value: float
    resets: int                  # times a series went down or its _created stamp changed: a restart
    first: MetricSample
    last: MetricSample
    scrapes: int                 # distinct scrapes the series were seen in


def counter_increase(samples: Sequence[MetricSample], created: Sequence[MetricSample] = ()) -> Increase | None:
    """Increase over the scrapes, summed over series; one scrape gives the count since the start."""
    if not samples:
        return None
    starts = _created_at(created)
    total, resets = 0.0, 0
    series = by_series(samples)
    scrapes = {s.scrape for s in samples}
    once = len(scrapes) == 1 and len(series) == len(samples)    # a scrape merged from two holds a series twice
    for (_, key), points in series.items():
        total, resets = _grown(points, key, starts, once, total, resets)
    ends = [p[-1] for p in series.values()]
    starts_ = [p[0] for p in series.values()]
    return Increase(total, resets, min(starts_, key=lambda s: s.scrape), max(ends, key=lambda s: s.scrape),
                    len(scrapes))


def _created_at(created: Sequence[MetricSample]) -> Callable[[int, tuple], float | None]:
    """A series' _created value at a scrape, by the scrape and the series' labels: its latest point at or before
    the scrape (the thinning drops the points in the middle of a stretch of one value); None before its first."""
    points_by_labels = {key: ([p.scrape for p in points], [p.value for p in points])
                        for (_, key), points in by_series(created).items()}

    def at(scrape: int, key: tuple) -> float | None:
        scrapes, values = points_by_labels.get(key, ([], []))
        i = bisect.bisect_right(scrapes, scrape)
        return values[i - 1] if i else None
    return at


def _grown(points: Sequence[MetricSample], key: tuple, starts: Callable[[int, tuple], float | None] | None,
           once: bool, total: float, resets: int) -> tuple[float, int]:
    """`total` and `resets` with one series' increase added (its points in scrape order, `key` its labels,
    `starts` its _created value at a scrape, if known); `once`: a single snapshot, the count since the start.

    The increase is taken per stretch between restarts, its last point minus its first (after a restart the
    series counts from zero), so that points in the middle of a stretch change nothing, to the bit: the
    thinning (metrics/thinning.py) drops them."""
    if once:
        return total + points[-1].value, resets
    first = points[0].value
    for before, after in zip(points, points[1:]):
        restarted = starts is not None and starts(after.scrape, key) != starts(before.scrape, key)
        if after.value < before.value or restarted:
            resets += 1
            total += before.value - first
            first = 0.0
    return total + points[-1].value - first, resets


class Level(NamedTuple):
    """One value of a quantity at one scrape, over its series."""

    scrape: int
    time: float | None
    value: float
    sample: MetricSample         # the sample that stands for it (the largest)
    scrapes: int                 # the snapshots it stands for: more than one where neighbours were merged


def per_scrape(samples: Sequence[MetricSample], combine: str = "sum") -> list[Level]:
    """One value per scrape over all series (`sum` for request counts, `max` for a usage). A gauge's point
    merged with its neighbours' (metrics/thinning.py) holds their peak and stands for their scrapes."""
    grouped: dict[int, list[MetricSample]] = {}
    for s in samples:
        grouped.setdefault(s.scrape, []).append(s)
    out = []
    for scrape in sorted(grouped):
        points = grouped[scrape]
        top = max(points, key=lambda s: s.value)
        value = sum(s.value for s in points) if combine == "sum" else top.value
        out.append(Level(scrape, top.time, value, top, max(s.stands_for for s in points)))
    return out


def scrapes_read(samples: Iterable[MetricSample], kept_whole: Iterable[str] = ()) -> int:
    """How many snapshots the samples were read from: each scrape held counts for the snapshots merged into it,
    which its gauges' points and those of the counters `kept_whole` (one point a scrape) stand for; another
    counter's point stands for the points thinned before it instead."""
    whole = frozenset(kept_whole)
    scrapes: dict[int, int] = {}
    for s in samples:
        weight = 1 if s.name.endswith(CUMULATIVE_SUFFIXES) and s.name not in whole else s.stands_for
        if weight > scrapes.get(s.scrape, 0):
            scrapes[s.scrape] = weight
    return sum(scrapes.values())


def time_at_or_above(levels: Sequence[Level], threshold: float) -> tuple[float, float] | None:
    """Seconds a level spent at or above `threshold`, and the seconds observed, from its scrapes.

    Each scrape stands for the interval up to the next one (the last for a typical interval, a gap's
    share of each snapshot merged into the scrape before it), as Prometheus' step semantics do; None
    when the scrapes have no times or span none."""
    timed = [(lv.time, lv.value, lv.scrapes) for lv in levels if lv.time is not None]
    if len(timed) < 2 or len(timed) != len(levels):
        return None
    gaps = [b[0] - a[0] for a, b in zip(timed, timed[1:])]
    shares = sorted(gap / a[2] for gap, a in zip(gaps, timed))
    spans = gaps + [shares[len(shares) // 2] * timed[-1][2]]
    above, observed = sum(span for span, (_, v, _) in zip(spans, timed) if v >= threshold), sum(spans)
    return (above, observed) if observed > 0 else None      # the same snapshot twice spans no time


def window_seconds(samples: Iterable[MetricSample]) -> float | None:
    times = [s.time for s in samples if s.time is not None]
    if len(times) < 2:
        return None
    span = max(times) - min(times)
    return span if span > 0 else None


@dataclass(frozen=True)
class HistogramWindow:
    """A histogram's observations within the window: cumulative buckets, count and sum."""

    buckets: tuple[tuple[float, float], ...]     # (upper bound, cumulative count), ascending, +Inf last
    count: float
    total: float
    evidence: tuple[MetricSample, ...]


def histogram_window(samples: Sequence[MetricSample], base: str) -> HistogramWindow | None:
    """Observations of histogram `base` over the scrapes (increase of each bucket), summed over series."""
    buckets: dict[float, float] = {}
    evidence: list[MetricSample] = []
    for (_, labels), points in by_series((s for s in samples if s.name == f"{base}_bucket"), drop=()).items():
        le = dict(labels).get("le")
        try:
            bound = math.inf if le in ("+Inf", "Inf", "inf") else float(le or "nan")
        except ValueError:
            continue
        if math.isnan(bound):
            continue
        grown, _ = _grown(points, labels, None, len(points) == 1, 0.0, 0)
        buckets[bound] = buckets.get(bound, 0.0) + grown
        evidence.append(points[-1])
    count = counter_increase([s for s in samples if s.name == f"{base}_count"])
    total = counter_increase([s for s in samples if s.name == f"{base}_sum"])
    if not buckets or math.inf not in buckets:
        return None
    ordered = tuple(sorted(buckets.items()))
    return HistogramWindow(ordered, count.value if count else ordered[-1][1], total.value if total else math.nan,
                           tuple(evidence[-1:]) + ((count.last,) if count else ()))


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """PromQL's histogram_quantile on cumulative buckets; None without observations."""
    if not buckets or buckets[-1][0] != math.inf:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == math.inf:
                return lower_bound          # above the highest finite bucket: its bound is all we know
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return None
