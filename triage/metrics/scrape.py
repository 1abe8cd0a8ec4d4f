"""Scrape a live vLLM `/metrics` endpoint a few times, some seconds apart, so counters give rates.

Network only through triage/metrics/httpget.py; the bodies become ordinary snapshots, parsed and timed the
same way as saved files. The caller (the CLI) passes `progress` to show a countdown on a terminal.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import requests

from ..errors import InputError
from . import parse
from .httpget import HttpOptions, display_url, get
from .parse import MetricSample, Snapshot, TooManySeries, parse_exposition

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
                label_sets: dict | None = None) -> Snapshot:
    """One round: every URL once, as one snapshot timed by the clock when it was taken."""
    taken = time.time()
    samples: list[MetricSample] = []
    lines = 0
    for url in urls:
        shown = display_url(url)
        body = read_exposition(get(url, options, WHAT, session=session), shown)
        try:
            samples.extend(parse_exposition(body, f"{shown} #{index + 1}", label_sets=label_sets))
        except TooManySeries as exc:
            raise InputError(shown, f"answered with an exposition that {exc.what}", exc.hint) from None
        except InputError as exc:
            raise InputError(shown, f"answered with something that is not Prometheus metrics ({exc.where}: {exc.what})",
                             f"point at {WHAT}") from None
        lines += body.count("\n")
    return Snapshot(name=f"scrape #{index + 1}", samples=tuple(samples), lines=lines, clock=taken)


def scrape(urls: Sequence[str], count: int, interval: float, options: HttpOptions,
           progress: Progress | None = None) -> list[Snapshot]:
    """`count` rounds `interval` seconds apart; the first failure stops with its one-line error. Fewer
    rounds when another as large as the last would hold more than parse.MAX_SAMPLES_HELD samples."""
    snapshots: list[Snapshot] = []
    label_sets: dict = {}               # the same series in every round share one labels dict
    held = 0
    with requests.Session() as session:
        for index in range(count):
            if index:
                if held + len(snapshots[-1].samples) > parse.MAX_SAMPLES_HELD:
                    if progress:
                        progress(index, index, 0.0)       # the last round: the countdown line is cleared
                    break
                _wait(interval, index, count, progress)
            snapshots.append(scrape_once(urls, options, index, session, label_sets))
            held += len(snapshots[-1].samples)
            if progress:
                progress(index + 1, count, 0.0)
    return snapshots


def _wait(interval: float, taken: int, count: int, progress: Progress | None) -> None:
    deadline = time.monotonic() + interval
    while (left := deadline - time.monotonic()) > 0:
        if progress:
            progress(taken, count, left)
        time.sleep(min(1.0, left))
