"""Scrape a live vLLM `/metrics` endpoint a few times, some seconds apart, so counters give rates.

Network only through triage/metrics/httpget.py; the bodies become ordinary snapshots, parsed and timed the
same way as saved files. The caller (the CLI) passes `progress` to show a countdown on a terminal.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import requests

from ..errors import InputError
from ..redact import Redactor
from . import parse
from .httpget import HttpOptions, display_url, get
from .parse import MetricSample, SeriesCache, Snapshot, TooManySeries, parse_exposition
from .thinning import ANY_REDACTION, Thinning

WHAT = "a vLLM /metrics endpoint (vLLM serves it on its API port: http://HOST:8000/metrics)"
Progress = Callable[[int, int, float], None]      # (samples taken, samples wanted, seconds to the next)


def read_exposition(response: requests.Response, shown: str) -> str:
    """The body as Prometheus text, or an InputError when it is an HTML page, JSON or empty."""
    kind = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    body = response.content.decode("utf-8", "replace")    # the format is UTF-8; no guessing over megabytes
    head = body.lstrip()[:200].lower()
    if kind == "text/html" or head.startswith(("<!doctype", "<html", "<")):
        raise InputError(shown, "answered with an HTML page, not Prometheus metrics",
                         f"point at {WHAT}, not a dashboard or a proxy's page")
    if kind == "application/json" or head.startswith(("{", "[")):
        raise InputError(shown, "answered with JSON, not Prometheus metrics text",
                         f"point at {WHAT}; the OpenAI API paths (/v1/...) answer JSON")
    if not body.strip():
        raise InputError(shown, "answered with an empty body", f"point at {WHAT}")
    return body


def scrape_once(urls: Sequence[str], options: HttpOptions, index: int, session: requests.Session,
                series: SeriesCache | None = None) -> Snapshot:
    """One round: every URL once, as one snapshot timed by the clock when it was taken."""
    taken = time.time()
    samples: list[MetricSample] = []
    lines = 0
    sample_lines = []
    for url in urls:
        shown = display_url(url)
        body = read_exposition(get(url, options, WHAT, session=session), shown)
        try:
            read = parse_exposition(body, f"{shown} #{index + 1}", series=series)
        except TooManySeries as exc:
            raise InputError(shown, f"answered with an exposition that {exc.what}", exc.hint) from None
        except InputError as exc:
            raise InputError(shown, f"answered with something that is not Prometheus metrics ({exc.where}: {exc.what})",
                             f"point at {WHAT}") from None
        samples.extend(read)
        lines += body.count("\n")
        sample_lines.append(max((s.line for s in read), default=0))
    return Snapshot(name=f"scrape #{index + 1}", samples=tuple(samples), lines=lines, clock=taken,
                    sample_lines=tuple(sample_lines))


def scrape(urls: Sequence[str], count: int, interval: float, options: HttpOptions,
           progress: Progress | None = None, thin: Redactor | None = ANY_REDACTION) -> list[Snapshot]:
    """`count` rounds `interval` seconds apart; the first failure stops with its one-line error. Fewer
    rounds when another as large as the last would hold more than parse.MAX_SAMPLES_HELD samples. Counters
    and histograms are thinned as the rounds come (metrics/thinning.py; each round has a time of its own), but
    for the lines `thin`, the report's redaction, could touch; None keeps every sample."""
    rounds: list[Snapshot] = []
    thinning = Thinning(thin)
    last_read = 0
    series = SeriesCache()              # the same series in every round share one labels dict and head
    with requests.Session() as session:
        for index in range(count):
            if index:
                if thinning.held + last_read > parse.MAX_SAMPLES_HELD:
                    if progress:
                        progress(index, index, 0.0)       # the last round: the countdown line is cleared
                    break
                _wait(interval, index, count, progress)
            taken = scrape_once(urls, options, index, session, series)
            thinning.add(taken.samples)
            last_read = len(taken.samples)
            rounds.append(dataclasses.replace(taken, samples=()))   # its samples are the thinning's now
            del taken               # the next round is read without them
            if progress:
                progress(index + 1, count, 0.0)
    return [dataclasses.replace(taken, samples=held) for taken, held in zip(rounds, thinning.result())]


def _wait(interval: float, taken: int, count: int, progress: Progress | None) -> None:
    deadline = time.monotonic() + interval
    while (left := deadline - time.monotonic()) > 0:
        if progress:
            progress(taken, count, left)
        time.sleep(min(1.0, left))
