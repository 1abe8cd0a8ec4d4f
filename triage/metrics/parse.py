"""Parse Prometheus text expositions (saved `/metrics` snapshots) into numbered, timed samples.

prometheus-client's parser is the reference; this wrapper adds what it lacks: the line number of
an error (`m.prom:12: what is wrong`) and of every sample, so metric facts carry evidence too, and
the order and time of several snapshots of one server, which rates and deltas need.

That parser reads a label character by character (about 40 µs a sample: nearly a second for a 23k-line
snapshot of a large server, for each scrape). The lines a Prometheus client library writes have one
plain shape (`name{k="v",...} value [timestamp]`, no escapes), so those are read by one regex, with the
same results; the first line of any other shape hands the whole exposition to prometheus-client.
"""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field, replace
from typing import Iterator, Mapping, Sequence

from ..errors import InputError
from ..model import SourceRef
from ..sources.files import text_lines

MAX_SERIES = 50_000        # samples in one exposition: a vLLM server has hundreds, a node with its GPUs a few thousand
# Samples held over all the snapshots of one run until the facts are made: 160 to 350 bytes each (less where a
# series' head is shared by its snapshots), so at most some 330 MiB. Counters, histograms and `_created` series
# are thinned as snapshots arrive (metrics/thinning.py), so 100 scrapes of a 140-engine server hold about 130,000
# (2.3 million with a time window, or with snapshots whose times are unknown).
MAX_SAMPLES_HELD = 1_000_000
_SAMPLE_LINE = re.compile(r"^\s*(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(?P<labels>.*)\})?\s+\S")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class SeriesHead:
    """What a series' lines hold before their value (`name{labels} `), one object for all its samples."""

    text: str


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One sample of one scrape, and the line it was read from.

    A line that is its series' head and then the value as Python writes the float (`306.0`, as
    prometheus-client writes it) is held as the head, shared by the series' samples in every snapshot, not as
    a string of its own: the text was most of what a sample held (`text` writes it back, the same)."""

    name: str
    labels: Mapping[str, str]
    value: float
    scrape: int                # 0 for the first snapshot given, 1 for the next, ...
    path: str                  # the input's name
    line: int                  # 1-based; 0 for a series from a Prometheus server
    written: str | SeriesHead  # the line as read (cleaned, redacted), or its series' head
    time: float | None = None  # when it was scraped (Unix seconds, or seconds from the first snapshot)
    stands_for: int = 1        # samples read that this one stands for: itself, the points thinned before it
                               # or merged into it (a gauge's, one a scrape: metrics/thinning.py)

    @property
    def text(self) -> str:
        written = self.written
        return written if isinstance(written, str) else written.text + repr(self.value)

    @property
    def source(self) -> SourceRef:
        return SourceRef(self.path, self.line, self.text)


@dataclass(frozen=True)
class SeriesCache:
    """Given the same for several snapshots of a server, the same series share one labels dict and one head,
    so another snapshot of 23k series costs no new dicts or strings."""

    labels: dict[object, dict[str, str]] = field(default_factory=dict)
    heads: dict[str, SeriesHead] = field(default_factory=dict)


class TooManySeries(InputError):
    """An exposition far larger than any server's: refused before the parser holds it all."""


class _NumberedLines:
    """Feeds lines to the parser and remembers which one it is on."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.lineno = 0

    def __iter__(self) -> Iterator[str]:
        for number, line in enumerate(self.lines, start=1):
            self.lineno = number
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


_DECLARED = re.compile(r"^# (?:TYPE|HELP) (vllm:\S+)[^\n]*", re.M)


def declared_vllm_metrics(text: str, path: str) -> tuple[int, SourceRef | None]:
    """How many vLLM metrics the exposition declares (# HELP / # TYPE), and the first declaration:
    what is left of a registry that was mounted but never reported a sample."""
    names, first = set(), None
    for m in _DECLARED.finditer(text):
        names.add(m.group(1))
        if first is None:
            first = SourceRef(path, text.count("\n", 0, m.start()) + 1, m.group(0))
    return len(names), first


def parse_exposition(text: str, path: str, scrape: int = 0, time: float | None = None,
                     series: SeriesCache | None = None) -> list[MetricSample]:
    """All samples of one exposition, each with its line; a malformed file is an InputError.

    A sample's own timestamp (Prometheus /federate writes them) wins over `time`, the snapshot's.
    `series`: the cache the snapshots of one server share.
    """
    lines = [line + "\n" for line in text_lines(text)]
    _refuse_other_formats(lines, path)
    shared = SeriesCache() if series is None else series
    plain = parse_plain_lines(lines, path, scrape, time, shared)
    return plain if plain is not None else parse_with_client(lines, path, scrape, time, shared.labels)


_PLAIN_SAMPLE = re.compile(
    r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z][a-zA-Z0-9_]*|_[a-zA-Z0-9][a-zA-Z0-9_]*)="[^"\\]*"'
    r'(?:,(?:[a-zA-Z][a-zA-Z0-9_]*|_[a-zA-Z0-9][a-zA-Z0-9_]*)="[^"\\]*")*)\})? ([^ _\t]+)(?: ([^ _\t]+))?')
_PLAIN_LABEL = re.compile(r'([a-zA-Z0-9_]+)="([^"]*)"')
_PLAIN_DECLARATION = re.compile(r"# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*)(?: (.*))?")
_FAMILY_SUFFIXES = {"counter": ("",), "gauge": ("",), "untyped": ("",), "summary": ("_count", "_sum", ""),
                    "histogram": ("_count", "_sum", "_bucket")}


def parse_plain_lines(lines: Sequence[str], path: str, scrape: int, time: float | None,
                      series: SeriesCache) -> list[MetricSample] | None:
    """The samples of an exposition whose every line has the plain shape, as prometheus-client reads them
    (a counter's sample named without `_total` gets it, as its parser does); None at the first line of
    another shape (escapes, exemplars, tabs, a quoted name, a HELP or TYPE line it would refuse, ...)."""
    samples: list[MetricSample] = []
    shared, heads = series.labels, series.heads
    family, kind, filled = "", "untyped", False
    members: tuple[str, ...] = ()
    read = 0
    for number, line in enumerate(lines, start=1):
        body = line.strip()
        if not body:
            continue
        if body[0] == "#":
            declared = _PLAIN_DECLARATION.fullmatch(body)
            if declared is None:
                if '"' in body or "HELP" in body or "TYPE" in body:
                    return None           # a comment prometheus-client might read otherwise
                continue
            keyword, name, rest = declared.groups()
            if keyword == "TYPE" and rest not in _FAMILY_SUFFIXES:
                return None                   # prometheus-client refuses a type it does not know
            if name != family:
                family, kind, members, filled = name, "untyped", (name,), False
            if keyword == "TYPE":
                if filled:
                    return None               # its type would rename the samples read before it
                kind = rest
                members = tuple(name + suffix for suffix in _FAMILY_SUFFIXES[kind])
            continue
        m = _PLAIN_SAMPLE.fullmatch(body)
        read += 1
        if m is None or read > MAX_SERIES:
            return None                       # another shape; or too many, refused with the count
        name, label_text, value_text, stamp_text = m.groups()
        try:      # prometheus-client tries int() first: the same figure wherever sample_value keeps one
            raw, stamp = float(value_text), (float(stamp_text) / 1000 if stamp_text is not None else None)
        except ValueError:
            return None
        if name in members:
            filled = True
            if kind == "counter" and not family.endswith("_total"):
                name += "_total"
        else:
            family, kind, members, filled = "", "untyped", (), False
        labels = shared.get(label_text or "")
        if labels is None:
            pairs = _PLAIN_LABEL.findall(label_text) if label_text else []
            labels = dict(pairs)
            if len(labels) != len(pairs):
                return None                 # a label given twice
            shared[label_text or ""] = labels
        value = sample_value(raw)
        if value is None:
            continue
        when = sample_time(stamp) if stamp is not None else time
        text = line.rstrip("\n")
        written: str | SeriesHead = text
        if stamp_text is None and text.endswith(value_text) and repr(value) == value_text:
            head = text[:-len(value_text)]
            written = heads.get(head) or heads.setdefault(head, SeriesHead(head))
        samples.append(MetricSample(sys.intern(canonical_name(name)), labels, value, scrape, path, number, written,
                                    when))
    return samples


def parse_with_client(lines: list[str], path: str, scrape: int, time: float | None,
                      shared: dict[object, dict[str, str]]) -> list[MetricSample]:
    """prometheus-client's parse, each sample numbered by its line; what it refuses is an InputError."""
    from prometheus_client.parser import text_fd_to_metric_families  # only for lines of another shape
    # The parser reads every line that is neither blank nor a comment as exactly one sample and yields
    # them in file order (families in order, a family's samples in order), so the n-th sample comes
    # from the n-th such line. Counting those lines is all it takes to number them, and the families
    # are turned into samples as they come, so the parser's own objects never pile up.
    numbered = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()[:1] not in ("", "#")]
    if len(numbered) > MAX_SERIES:
        raise TooManySeries(path, f"holds {len(numbered):,} samples; one vLLM server exports a few thousand (at most "
                            f"{MAX_SERIES:,} are read)", "give one server's /metrics, or select fewer series")
    samples: list[MetricSample] = []
    seen = 0
    feed = _NumberedLines(lines)
    try:
        for family in text_fd_to_metric_families(feed):  # type: ignore[arg-type]  # it only iterates its argument
            for s in family.samples:
                number, line = numbered[seen] if seen < len(numbered) else (0, "")
                seen += 1
                sample = _sample(s, path, number, line, scrape, time, shared)
                if sample is not None:
                    samples.append(sample)
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
        reason = str(exc) or "malformed line"
        where = _offending_line(lines, feed.lineno, reason)
        raise InputError(f"{path}:{where}", f"not a valid Prometheus metrics line ({reason})",
                         "save the endpoint's body as is: curl -s http://HOST:8000/metrics > m.prom") from None
    if seen != len(numbered):          # not expected; then find each sample's line by its series
        parsed = [s for family in text_fd_to_metric_families(_NumberedLines(lines))  # type: ignore[arg-type]
                  for s in family.samples]
        redone = (_sample(s, path, number, line, scrape, time, shared)
                  for s, (number, line) in zip(parsed, _lines_by_series(lines, parsed)))
        samples = [sample for sample in redone if sample is not None]
    return samples


def _sample(s, path: str, number: int, line: str, scrape: int, time: float | None,
            shared: dict[object, dict[str, str]]) -> MetricSample | None:
    """One sample with its line; None for NaN, an infinity or an absurd figure:
    unknown, not a number to compute with."""
    value = sample_value(s.value)
    if value is None:
        return None
    key = tuple(s.labels.items())
    labels = shared.get(key)
    if labels is None:
        labels = shared[key] = dict(s.labels)
    when = sample_time(s.timestamp) if s.timestamp is not None else time
    return MetricSample(sys.intern(canonical_name(s.name)), labels, value, scrape, path, number, line.rstrip("\n"),
                        when)


def _lines_by_series(lines: Sequence[str], parsed: Sequence) -> list[tuple[int, str]]:
    """Each sample's line found by its name and labels (the k-th sample of a series on its k-th line)."""
    positions: dict[tuple, list[tuple[int, str]]] = {}
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("#"):
            continue
        m = _SAMPLE_LINE.match(line)
        if m:
            labels = {k: _unescape(v) for k, v in _LABEL.findall(m["labels"] or "")}
            positions.setdefault(_key(m["name"], labels), []).append((number, line.rstrip("\n")))
    out = []
    for s in parsed:
        spots = positions.get(_key(s.name, s.labels)) or [(0, f"{s.name} {s.value}")]
        out.append(spots.pop(0) if len(spots) > 1 else spots[0])
    return out


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
    sample_lines: tuple[int, ...] = ()   # a live round: the last sample line of each URL's answer


def stamped(samples: Sequence[MetricSample]) -> float | None:
    """The scrape time written in an exposition itself (sample timestamps), if every vLLM sample has one.

    Only vLLM's own samples time a snapshot of vLLM: a body also holds other series (the process collector's,
    a sidecar's, what Prometheus adds), which may carry no timestamp or one of their own, and one of those
    must neither untime the snapshot (its rates would be lost) nor move it. A body without vLLM samples
    (dcgm-exporter's alone) is timed by its own samples."""
    vllm = [s for s in samples if s.name.startswith("vllm:")]
    times = [s.time for s in vllm or samples]
    if not times or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


def clocks_rise(clocks: Sequence[float | None], clock_is_mtime: bool) -> bool:
    """Whether snapshots' clocks time them: each after the one before (modification times a second after)."""
    gap = MIN_MTIME_GAP_SECONDS if clock_is_mtime else 0.0
    return all(c is not None for c in clocks) and all(
        b - a > 0 and b - a >= gap for a, b in zip(clocks, clocks[1:]))  # type: ignore[operator]


def given_order_times(clocks: Sequence[float | None], clock_is_mtime: bool,
                      interval: float | None) -> tuple[list[float | None], str]:
    """The times of snapshots in the order given, and how they were decided: their clocks (the scrape clock, the
    files' modification times) when they rise, else `interval` seconds apart, else unknown."""
    # one file's mtime says when it was copied, not scraped; one live scrape's clock is its time
    if clocks_rise(clocks, clock_is_mtime) and (len(clocks) > 1 or not clock_is_mtime):
        return list(clocks), ("in the order given, timed by the files' modification times" if clock_is_mtime
                              else "in scrape order, timed by the scrape clock")
    if interval is not None:
        return [i * interval for i in range(len(clocks))], f"in the order given, {interval:g} s apart (--interval)"
    return [None] * len(clocks), "in the order given; their times are unknown (give --interval SECONDS for rates)"


def order_snapshots(snapshots: Sequence[Snapshot], interval: float | None = None) -> tuple[list[MetricSample], str]:
    """Put snapshots of one server in scrape order and give each a time; say how it was decided.

    Order: by the timestamps in the expositions when every snapshot's vLLM samples have them (`stamped`),
    else as given.
    Time: those timestamps (a sample without one takes its snapshot's); else the scrape clock or the files'
    modification times when they rise (at least a second apart) in that order; else `interval` seconds apart;
    else unknown (deltas, no rates).
    """
    if not snapshots:
        return [], "no snapshot"
    stamps = [stamped(s.samples) for s in snapshots]
    known = [t for t in stamps if t is not None]
    if len(snapshots) > 1 and len(known) == len(stamps):
        order = sorted(range(len(known)), key=known.__getitem__)
        times: list[float | None] = [known[i] for i in order]
        how = "ordered and timed by the timestamps in the expositions"
    else:
        order = list(range(len(snapshots)))
        times, how = given_order_times([s.clock for s in snapshots], snapshots[0].clock_is_mtime, interval)
    samples: list[MetricSample] = []
    for scrape, index in enumerate(order):
        stamp = stamps[index]
        for s in snapshots[index].samples:
            if stamp is None:
                when = times[scrape]
            else:     # a sample written without a timestamp (another exporter's) was scraped with the rest
                when = s.time if s.time is not None else stamp
            samples.append(s if s.scrape == scrape and s.time == when else replace(s, scrape=scrape, time=when))
    return samples, how
