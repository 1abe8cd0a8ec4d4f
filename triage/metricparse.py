"""Parse Prometheus text expositions (saved `/metrics` snapshots) into numbered, timed samples.

prometheus-client's parser does the parsing; this wrapper adds what it lacks: the line number of
an error (`m.prom:12: what is wrong`) and of every sample, so metric facts carry evidence too, and
the order and time of several snapshots of one server, which rates and deltas need.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

from .errors import InputError
from .model import SourceRef

MAX_SERIES = 50_000        # samples in one exposition: a vLLM server has hundreds, a node with its GPUs a few thousand
_SAMPLE_LINE = re.compile(r"^\s*(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(?P<labels>.*)\})?\s+\S")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One sample of one scrape."""

    name: str
    labels: Mapping[str, str]
    value: float
    scrape: int                # 0 for the first snapshot given, 1 for the next, ...
    source: SourceRef
    time: float | None = None  # when it was scraped (Unix seconds, or seconds from the first snapshot)


class TooManySeries(InputError):
    """An exposition far larger than any server's: refused before the parser holds it all."""


class _NumberedLines:
    """Feeds lines to the parser and remembers which one it is on."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.lineno = 0

    def __iter__(self) -> Iterator[str]:
        for self.lineno, line in enumerate(self.lines, start=1):
            yield line


def canonical_name(name: str) -> str:
    """`vllm_x` -> `vllm:x`. prometheus-client escapes the colon to an underscore when a scraper asks for
    OpenMetrics (Prometheus does), so a Prometheus server may store vLLM's series under either name."""
    return "vllm:" + name[5:] if name.startswith("vllm_") else name


def _unescape(value: str) -> str:
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def _key(name: str, labels: Mapping[str, str]) -> tuple:
    return name, tuple(sorted(labels.items()))


_HINT_BODY = "save the /metrics body of vLLM's API port: curl -s http://HOST:8000/metrics > m.prom"


def _refuse_other_formats(lines: Sequence[str], path: str) -> None:
    """An HTML page or a JSON body saved by mistake: say so, rather than 'invalid metric name'."""
    first = next(((n, line.strip()) for n, line in enumerate(lines, start=1) if line.strip()), None)
    if first is None:
        return
    number, text = first
    if text.startswith("<"):
        raise InputError(f"{path}:{number}", "is an HTML page, not Prometheus metrics",
                         _HINT_BODY + " (not a dashboard's or a proxy's page)")
    if text.startswith(("{", "[")):
        raise InputError(f"{path}:{number}", "is JSON, not Prometheus metrics text", _HINT_BODY)


def _offending_line(lines: Sequence[str], reached: int, reason: str) -> int:
    """The parser reads ahead before it complains: find the line that holds what it quotes."""
    fragment = reason.rsplit(":", 1)[-1].strip().strip("'\"")
    if len(fragment) >= 2:
        for number in range(min(reached, len(lines)), 0, -1):
            if fragment in lines[number - 1]:
                return number
    return reached


def parse_exposition(text: str, path: str, scrape: int = 0, time: float | None = None) -> list[MetricSample]:
    """All samples of one exposition, each with its line; a malformed file is an InputError.

    A sample's own timestamp (Prometheus /federate writes them) wins over `time`, the snapshot's.
    """
    from prometheus_client.parser import text_fd_to_metric_families   # only when metrics are given
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    _refuse_other_formats(lines, path)
    series = sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))
    if series > MAX_SERIES:
        raise TooManySeries(path, f"holds {series:,} samples; one vLLM server exports a few thousand (at most "
                            f"{MAX_SERIES:,} are read)", "give one server's /metrics, or select fewer series")
    feed = _NumberedLines(lines)
    try:
        families = list(text_fd_to_metric_families(feed))
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
        reason = str(exc) or "malformed line"
        where = _offending_line(lines, feed.lineno, reason)
        raise InputError(f"{path}:{where}", f"not a valid Prometheus metrics line ({reason})",
                         "save the endpoint's body as is: curl -s http://HOST:8000/metrics > m.prom") from None
    positions: dict[tuple, list[tuple[int, str]]] = {}
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("#"):
            continue
        m = _SAMPLE_LINE.match(line)
        if m:
            labels = {k: _unescape(v) for k, v in _LABEL.findall(m["labels"] or "")}
            positions.setdefault(_key(m["name"], labels), []).append((number, line.rstrip("\n")))
    samples = []
    for family in families:
        for s in family.samples:
            value = sample_value(s.value)
            if value is None:
                continue             # NaN, an infinity or an absurd figure: unknown, not a number to compute with
            spots = positions.get(_key(s.name, s.labels)) or [(0, f"{s.name} {s.value}")]
            number, raw = spots.pop(0) if len(spots) > 1 else spots[0]
            when = sample_time(s.timestamp) if s.timestamp is not None else time
            samples.append(MetricSample(canonical_name(s.name), dict(s.labels), value, scrape,
                                        SourceRef(path, number, raw), when))
    return samples


MAX_VALUE = 1e15              # a gauge, counter or bucket beyond this is not a figure of one server
_LATEST_TIME = 1e11           # seconds since 1970: the year 5138


def sample_value(value: object) -> float | None:
    """A sample's value as a float to compute with, or None when it is NaN, infinite or absurd."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return None
    return number if math.isfinite(number) and abs(number) <= MAX_VALUE else None


def sample_time(value: object) -> float | None:
    """A timestamp in Unix seconds, or None when it cannot be one."""
    number = sample_value(value)
    return number if number is not None and 0 <= number <= _LATEST_TIME else None


MIN_MTIME_GAP_SECONDS = 1.0     # closer file times are copies, not scrapes


@dataclass(frozen=True)
class Snapshot:
    """One saved or scraped exposition of a server, before it is put in order."""

    name: str
    samples: tuple[MetricSample, ...]
    lines: int
    clock: float | None = None     # when it was taken, if the caller knows (a live scrape; a file's mtime)
    clock_is_mtime: bool = False


def stamped(snapshot: Snapshot) -> float | None:
    """The scrape time written in the exposition itself (sample timestamps), if every sample has one."""
    times = [s.time for s in snapshot.samples]
    if not times or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


def order_snapshots(snapshots: Sequence[Snapshot], interval: float | None = None) -> tuple[list[MetricSample], str]:
    """Put snapshots of one server in scrape order and give each a time; say how it was decided.

    Order: by the timestamps in the expositions when every snapshot has them, else as given.
    Time: those timestamps; else the scrape clock or the files' modification times when they rise
    (at least a second apart) in that order; else `interval` seconds apart; else unknown (deltas, no rates).
    """
    if not snapshots:
        return [], "no snapshot"
    stamps = [stamped(s) for s in snapshots]
    if len(snapshots) > 1 and all(t is not None for t in stamps):
        order = sorted(range(len(snapshots)), key=lambda i: stamps[i])
        times: list[float | None] = [stamps[i] for i in order]
        how = "ordered and timed by the timestamps in the expositions"
    else:
        order = list(range(len(snapshots)))
        clocks = [s.clock for s in snapshots]
        gap = MIN_MTIME_GAP_SECONDS if snapshots[0].clock_is_mtime else 0.0
        rising = all(c is not None for c in clocks) and all(
            b - a > 0 and b - a >= gap for a, b in zip(clocks, clocks[1:]))  # type: ignore[operator]
        if rising and len(snapshots) > 1:     # one file's mtime says when it was copied, not scraped
            times = list(clocks)
            how = ("in the order given, timed by the files' modification times" if snapshots[0].clock_is_mtime
                   else "in scrape order, timed by the scrape clock")
        elif interval is not None:
            times = [i * interval for i in range(len(snapshots))]
            how = f"in the order given, {interval:g} s apart (--interval)"
        else:
            times = [None] * len(snapshots)
            how = "in the order given; their times are unknown (give --interval SECONDS for rates)"
    samples: list[MetricSample] = []
    for scrape, index in enumerate(order):
        for s in snapshots[index].samples:
            when = s.time if stamps[index] is not None else times[scrape]
            samples.append(dataclasses.replace(s, scrape=scrape, time=when))
    return samples, how
