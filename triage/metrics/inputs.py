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
from ..sources.files import read_small_text
from . import parse, promapi, scrape
from .httpget import HttpOptions, display_url
from .parse import MetricSample, Snapshot, declared_vllm_metrics, order_snapshots, parse_exposition


@dataclass(frozen=True)
class MetricsRead:
    samples: list[MetricSample]
    inputs: tuple[InputSummary, ...]
    origin: MetricsOrigin | None
    warnings: tuple[str, ...] = ()


def _summary(path: str, samples: Sequence[MetricSample], lines: int, text: str = "") -> InputSummary:
    vllm = sum(1 for s in samples if s.name.startswith("vllm:"))
    count, first = declared_vllm_metrics(text, path) if not vllm else (0, None)
    return InputSummary(path=path, kind="metrics", lines_read=lines, lines_recognised=vllm, vllm_lines=vllm,
                        declared_only=count, declared_at=first)


def read_files(paths: Sequence[str], interval: float | None) -> MetricsRead:
    """Saved snapshots (`curl .../metrics > m.prom`), one server, oldest first unless they say otherwise."""
    snapshots = []
    declared = []
    label_sets: dict = {}
    held = 0
    for path in paths:
        text = read_small_text(path)
        lines = text.count("\n")
        name = "<stdin>" if path == "-" else path
        snapshots.append(Snapshot(name, tuple(parse_exposition(text, name, label_sets=label_sets)), lines,
                                  clock=None if path == "-" else os.stat(path).st_mtime, clock_is_mtime=True))
        declared.append(_summary(name, snapshots[-1].samples, lines, text))
        held += len(snapshots[-1].samples)
        if held > parse.MAX_SAMPLES_HELD:
            raise InputError(name, f"brings the snapshots' samples to {held:,}, more than the "
                             f"{parse.MAX_SAMPLES_HELD:,} vtriage holds at once",
                             "give fewer snapshots: the first and the last of the period are what rates need")
    samples, how = order_snapshots(snapshots, interval)
    inputs = tuple(declared)
    return MetricsRead(samples, inputs, MetricsOrigin("files", ", ".join(paths), ordering=how))


def read_urls(urls: Sequence[str], count: int, interval: float, options: HttpOptions,
              progress: scrape.Progress | None = None) -> MetricsRead:
    snapshots = scrape.scrape(urls, count, interval, options, progress)
    warnings = []
    if len(snapshots) < count:
        held = sum(len(s.samples) for s in snapshots)
        warnings.append(f"scraping stopped after {len(snapshots)} of {count} rounds: they hold {held:,} samples, and "
                        f"another would pass the {parse.MAX_SAMPLES_HELD:,} vtriage holds at once (ask for fewer "
                        "--samples, further apart)")
        count = len(snapshots)
    samples, how = order_snapshots(snapshots, interval)
    inputs = []
    for url in urls:
        shown = display_url(url)
        mine = [s for s in samples if s.source.path.startswith(f"{shown} #")]
        ends: dict[int, int] = {}
        for s in mine:
            ends[s.scrape] = max(ends.get(s.scrape, 0), s.source.line)
        lines = sum(ends.values())
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
