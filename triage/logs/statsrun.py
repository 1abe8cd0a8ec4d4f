"""Runs of stats lines folded into one event each before they are parsed one by one.

A long log's stats lines (`Engine 000: Avg prompt throughput: ...` every 10 s, V0's `Avg prompt
throughput: ...`) are what its events are mostly made of, and an event costs about 8 µs to build
whatever is done to read the line. The parser already merges them once an attempt holds more than
parse.STATS_CAP (peaks kept, counts summed: `merge_stats`). So once a file has given that many stats
lines, each further run of up to FOLD_LINES lines of the same stats shape, from the same process,
one after the other among the lines the parser receives, is read here with one match a line and
becomes the one event `merge_stats` would make of them. Nothing else changes: a line this cannot
prove it reads exactly as the parser would (another anchor in it, anything redaction could touch,
a neighbour that could be its wrapped tail or a collector's partial line) goes the usual way.
tests/test_properties.py checks the folded event against merge_stats over the parser's own events.
Pure functions over the lines; the parser decides when to fold (not inside a time window, whose edges
fall between lines).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..model import LogEvent, SourceRef
from ..vocabulary import KV_SATURATED
from .signatures import StatsLineShape

FOLD_LINES = 32                 # lines per folded event: the timeline keeps 400 points, the facts sums and peaks
MAX_LINE_CHARS = 500            # a stats line is about 260 characters; evidence is cut at 600
_QUEUES = frozenset({"waiting", "swapped"})      # requests queued: with a full cache, a saturated queue
# (number, text, the shape's match, the shape, the process's name and pid as written)
_Line = tuple[int, str, Any, StatsLineShape, tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class StatsRun:
    """Consecutive stats lines read as one: the event they make, and the lines they cover."""

    event: LogEvent
    line: int                   # the first line
    last: int
    count: int


def fold_runs(lines: Iterable[tuple[int, str]], shapes: Sequence[StatsLineShape], name: str, after: int,
              plain: Callable[[Any, str], bool]) -> Iterator[tuple[int, str] | StatsRun]:
    """The lines as given, but runs of stats lines after the first `after` as one StatsRun each (the event's
    `seq` is 0: the parser numbers it). `plain(match, text)` says a line's message holds no other anchor and
    its text nothing to redact."""
    anchor = shapes[0].anchor if shapes else ""
    order = list(shapes)               # the shape the last stats line had is tried first
    seen = 0
    held: _Line | None = None          # a stats line waiting to see what follows it
    run: _Run | None = None
    previous_was_stats = False

    def fold(line: _Line) -> Iterator[StatsRun]:
        nonlocal run
        if run is not None and not run.takes(line):
            yield run.done(name)
            run = None
        if run is None:
            run = _Run(line)
        else:
            run.add(line)
        if run.count >= FOLD_LINES:
            yield run.done(name)
            run = None

    for number, text in lines:
        found: _Line | None = None
        if anchor in text:
            for shape in order:
                m = shape.line.match(text)
                if m is not None:
                    found = (number, text, m, shape, m.group("name", "pid"))
                    if shape is not order[0]:
                        order = [shape, *(other for other in order if other is not shape)]
                    break
        if held is not None:
            # What follows a held line decides it: a wrapped tail or a split line's end would be the very
            # next line, so a stats line or a gap proves there is none.
            if found is not None or number > held[0] + 1:
                yield from fold(held)
            else:
                if run is not None:
                    yield run.done(name)
                    run = None
                yield held[0], held[1]
            held = None
        if found is not None:
            seen += 1
            # The first stats lines, and one after any other line (it could end a collector's partial line),
            # are parsed as usual; so is one that holds another anchor or anything redaction could touch.
            if seen > after and previous_was_stats and len(text) <= MAX_LINE_CHARS and plain(found[2], text):
                held = found
                continue
            previous_was_stats = True
        else:
            previous_was_stats = False
        if run is not None:
            yield run.done(name)
            run = None
        yield number, text
    if held is not None:
        yield from fold(held)
    if run is not None:
        yield run.done(name)


class _Run:
    """Stats lines being folded: what `merge_stats` keeps of them, without an event per line."""

    def __init__(self, first: _Line) -> None:
        number, text, m, shape, process = first
        self.shape = shape
        self.process_key = process
        self.process = _process(m)
        self.first = number
        self.count = 0
        self.peaks: dict[str, Any] = {}
        self.kv_sum = 0.0
        self.saturated = self.queued = 0
        self.preemptions: int | None = None
        self.best_kv = 0.0              # merge_stats reads a missing KV usage as 0
        self.best: tuple[int, str, Any] = (number, text, m)
        self.last: tuple[int, str, Any] = (number, text, m)
        self.add(first)

    def takes(self, line: _Line) -> bool:
        return line[3] is self.shape and line[4] == self.process_key

    def add(self, line: _Line) -> None:
        number, text, m, shape, _ = line
        peaks = self.peaks
        kv, queue = 0.0, False
        for key, convert, peak in shape.summed_plan:
            raw = m[key]
            if not raw:
                continue
            try:
                value = convert(raw)
            except (ValueError, OverflowError):
                continue                    # a mangled number is unknown, as fields_of leaves it
            if peak and (key not in peaks or value > peaks[key]):
                peaks[key] = value
            if key == "kv_usage":
                kv = value
            elif key == "preemptions":
                self.preemptions = (self.preemptions or 0) + value
            elif key in _QUEUES and value:
                queue = True
        self.kv_sum += kv
        if kv >= KV_SATURATED:
            self.saturated += 1
            if queue:
                self.queued += 1
        if self.count == 0 or not self.best_kv > kv:    # merge_stats: the later line unless the earlier had more
            self.best = (number, text, m)
        self.best_kv = max(self.best_kv, kv)
        self.last = (number, text, m)
        self.count += 1

    def done(self, name: str) -> StatsRun:
        number, text, m = self.last
        shape = self.shape
        fields = shape.fields_of(m)
        if self.count > 1:
            fields.update(self.peaks)
            fields["intervals"] = self.count
            fields["kv_usage_sum"] = self.kv_sum
            fields["saturated"] = self.saturated
            fields["saturated_queue"] = self.queued
            if self.preemptions is not None:
                fields["preemptions"] = self.preemptions
        best_number, best_text, best_m = self.best
        source = SourceRef(name, best_number, best_text, shape.span(best_m))
        event = LogEvent("stats", shape.signature.id, fields, self.process, m["level"], f"{m['date']} {m['time']}",
                         source, 0, None)
        return StatsRun(event, self.first, number, self.count)


def _process(m: Any) -> str | None:
    """The process as the envelope names it: `Name pid=N`, `pid=N` (Ray), or none."""
    pid = m["pid"]
    if pid is None:
        return None
    return f"{m['name']} pid={pid}" if m["name"] else f"pid={pid}"
