"""Parse Prometheus text expositions (saved `/metrics` snapshots) into numbered samples.

prometheus-client's parser does the parsing; this wrapper adds what it lacks: the line number of
an error (`m.prom:12: what is wrong`) and of every sample, so metric facts carry evidence too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

import regex
from prometheus_client.parser import text_fd_to_metric_families

from .errors import InputError
from .model import SourceRef

_SAMPLE_LINE = regex.compile(r"^\s*(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(?P<labels>.*)\})?\s+\S")
_LABEL = regex.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One sample of one scrape."""

    name: str
    labels: Mapping[str, str]
    value: float
    scrape: int                # 0 for the first snapshot given, 1 for the next, ...
    source: SourceRef
    time: float | None = None  # when it was scraped (Unix seconds, or seconds from the first snapshot)


class _NumberedLines:
    """Feeds lines to the parser and remembers which one it is on."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.lineno = 0

    def __iter__(self) -> Iterator[str]:
        for self.lineno, line in enumerate(self.lines, start=1):
            yield line


def _unescape(value: str) -> str:
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def _key(name: str, labels: Mapping[str, str]) -> tuple:
    return name, tuple(sorted(labels.items()))


def parse_exposition(text: str, path: str, scrape: int = 0, time: float | None = None) -> list[MetricSample]:
    """All samples of one exposition, each with its line; a malformed file is an InputError.

    A sample's own timestamp (Prometheus /federate writes them) wins over `time`, the snapshot's.
    """
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    feed = _NumberedLines(lines)
    try:
        families = list(text_fd_to_metric_families(feed))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        reason = str(exc) or "malformed line"
        raise InputError(f"{path}:{feed.lineno}", f"not a valid Prometheus metrics line ({reason})",
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
            spots = positions.get(_key(s.name, s.labels)) or [(0, f"{s.name} {s.value}")]
            number, raw = spots.pop(0) if len(spots) > 1 else spots[0]
            when = s.timestamp if s.timestamp is not None else time
            samples.append(MetricSample(s.name, dict(s.labels), float(s.value), scrape, SourceRef(path, number, raw),
                                        float(when) if when is not None else None))
    return samples


def vllm_samples(samples: Iterable[MetricSample]) -> list[MetricSample]:
    return [s for s in samples if s.name.startswith("vllm:")]
