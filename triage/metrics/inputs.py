"""The metrics input edge: saved files, a live URL or a Prometheus server -> ordered, timed samples,
one summary per input, and where they came from. Everything after this is the same pure pipeline.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Sequence

from ..errors import InputError
from ..model import InputSummary, MetricsOrigin
from ..redact import Redactor
from ..sources.files import read_small_text
from . import parse, promapi, scrape
from .httpget import HttpOptions, display_url
from .parse import (
    MetricSample,
    SeriesCache,
    Snapshot,
    declared_vllm_metrics,
    given_order_times,
    order_snapshots,
    parse_exposition,
)
from .thinning import ANY_REDACTION, Thinning


@dataclass(frozen=True)
class MetricsRead:
    samples: list[MetricSample]
    inputs: tuple[InputSummary, ...]
    origin: MetricsOrigin | None
    warnings: tuple[str, ...] = ()


def _summary(path: str, samples: Sequence[MetricSample], lines: int, text: str = "") -> InputSummary:
    vllm = sum(s.stands_for for s in samples if s.name.startswith("vllm:"))
    count, first = declared_vllm_metrics(text, path) if not vllm else (0, None)
    return InputSummary(path=path, kind="metrics", lines_read=lines, lines_recognised=vllm, vllm_lines=vllm,
                        declared_only=count, declared_at=first)


def _mtime(path: str) -> float | None:
    try:
        return None if path == "-" else os.stat(path).st_mtime
    except OSError:
        return None              # reading it says what is wrong


def read_files(paths: Sequence[str], interval: float | None, thin: Redactor | None = ANY_REDACTION) -> MetricsRead:
    """Saved snapshots (`curl .../metrics > m.prom`), one server, oldest first unless they say otherwise.
    Counters and histograms are thinned as they are read (metrics/thinning.py), but for the lines `thin`, the
    report's redaction, could touch; `thin` None keeps every sample (a time window cuts them by their time)."""
    clocks = [_mtime(path) for path in paths]
    times, _ = given_order_times(clocks, True, interval)     # unless every one carries timestamps of its own
    distinct = len(times) > 1 and None not in times and len(set(times)) == len(times)
    thinning = Thinning(thin if distinct else None)
    read: list[tuple[str, int, InputSummary]] = []
    series = SeriesCache()
    for path in paths:
        text = read_small_text(path)
        lines = text.count("\n")
        name = "<stdin>" if path == "-" else path
        samples = parse_exposition(text, name, series=series)
        read.append((name, lines, _summary(name, samples, lines, text)))
        thinning.add(samples)
        if thinning.held > parse.MAX_SAMPLES_HELD:
            raise InputError(name, f"brings the snapshots' samples to {thinning.held:,}, more than the "
                             f"{parse.MAX_SAMPLES_HELD:,} vtriage holds at once",
                             "give fewer snapshots: the first and the last of the period are what rates need")
        del text, samples       # the next snapshot is read without them: the thinning holds what is kept
    snapshots = [Snapshot(name, held, lines, clock=clock, clock_is_mtime=True)
                 for (name, lines, _), held, clock in zip(read, thinning.result(), clocks)]
    samples, how = order_snapshots(snapshots, interval)
    inputs = tuple(summary for _, _, summary in read)
    return MetricsRead(samples, inputs, MetricsOrigin("files", ", ".join(paths), ordering=how))


def read_urls(urls: Sequence[str], count: int, interval: float, options: HttpOptions,
              progress: scrape.Progress | None = None, thin: Redactor | None = ANY_REDACTION) -> MetricsRead:
    """`count` rounds of live scrapes; `thin` as for read_files."""
    snapshots = scrape.scrape(urls, count, interval, options, progress, thin)
    warnings = []
    if len(snapshots) < count:
        held = sum(len(s.samples) for s in snapshots)
        warnings.append(f"scraping stopped after {len(snapshots)} of {count} rounds: they hold {held:,} samples, and "
                        f"another would pass the {parse.MAX_SAMPLES_HELD:,} vtriage holds at once (ask for fewer "
                        "--samples, further apart)")
        count = len(snapshots)
    samples, how = order_snapshots(snapshots, interval)
    inputs = []
    for index, url in enumerate(urls):
        shown = display_url(url)
        mine = [s for s in samples if s.path.startswith(f"{shown} #")]
        lines = sum(snapshot.sample_lines[index] for snapshot in snapshots)
        inputs.append(_summary(f"{shown} ({count} scrape(s) {interval:g} s apart)", mine, lines))
    return MetricsRead(samples, tuple(inputs), MetricsOrigin("url", ", ".join(display_url(u) for u in urls),
                                                             ordering=how), tuple(warnings))


def read_prometheus(base_url: str, selector: str | None, job: str | None, instance: str | None,
                    since: str | None, until: str | None, at: str | None, step: str | None,
                    options: HttpOptions) -> MetricsRead:
    window = promapi.query_window(since, until, at, step, time.time())
    matchers = promapi.build_matchers(selector, job, instance)
    samples, warnings = promapi.fetch(base_url, matchers, window, options)
    shown = display_url(base_url)
    steps = len({s.scrape for s in samples})
    origin = MetricsOrigin("prometheus", shown, ordering=f"{steps} query step(s) of {window.step:g} s",
                           selector="{" + matchers + "}", start=promapi.iso(window.start),
                           end=promapi.iso(window.end), step_seconds=window.step if window.end > window.start else None)
    summary = _summary(f"prometheus {shown} {{{matchers}}}", samples, len(samples))
    return MetricsRead(samples, (summary,), origin, tuple(warnings))
