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
Pure functions over the lines; the pipeline decides when to fold: not inside a time window, whose edges
fall between lines, nor with several logs, which are interleaved by their lines' times.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ..model import LogEvent, SourceRef
from ..redact import Redactor
from ..vocabulary import KV_SATURATED
from .envelope import process_label
from .signatures import SignatureSet, StatsLineShape, convert_each

FOLD_LINES = 32                 # lines per folded event: the timeline keeps 400 points, the facts sums and peaks
MAX_LINE_CHARS = 500            # a stats line is about 260 characters; evidence is cut at 600
# (number, text, the shape's match, the shape, the process's name and pid as written)
_Line = tuple[int, str, Any, StatsLineShape, tuple[Any, ...]]
_MATCH = operator.itemgetter(2)


@dataclass(frozen=True, slots=True)
class StatsRun:
    """Consecutive stats lines read as one: the event they make, and the lines they cover."""

    event: LogEvent
    last: int                   # the last line
    count: int


def fold_runs(lines: Iterable[tuple[int, str]], signatures: SignatureSet, redactor: Redactor, name: str,
              after: int) -> Iterator[tuple[int, str] | StatsRun]:
    """The lines as given, but runs of stats lines after the first `after` as one StatsRun each (the event's
    `seq` is 0: the parser numbers it). Masking prompts reads every line, so then none are folded."""
    shapes = signatures.stats_lines
    if not shapes or redactor.prompts:
        yield from lines
        return
    anchor = shapes[0].anchor
    plain = _plain_line(signatures, redactor)
    order = list(shapes)               # the shape the last stats line had is tried first
    seen = 0
    held: _Line | None = None          # a stats line waiting to see what follows it
    run: _Run | None = None
    previous_was_stats = False

    def fold(line: _Line) -> StatsRun | None:
        """Add a line to the run; the run it ended, if any (a new run holds one line: it cannot end here too)."""
        nonlocal run
        ended = None
        if run is not None and not run.takes(line):
            ended, run = run.done(name), None
        if run is None:
            run = _Run(line)
        else:
            run.add(line)
            if len(run.lines) >= FOLD_LINES:
                ended, run = run.done(name), None
        return ended

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
                if (ended := fold(held)) is not None:
                    yield ended
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
    if held is not None and (ended := fold(held)) is not None:
        yield ended
    if run is not None:
        yield run.done(name)


def _plain_line(signatures: SignatureSet, redactor: Redactor) -> Callable[[Any, str], bool]:
    """Whether a whole stats line (a StatsLineShape match) reads as `SignatureSet.match` reads it: no anchor but
    the shape's in its message, nothing redaction could touch.

    Redaction is asked once per process name and file: the rest of such a line is digits and the shape's
    words, none of which a rule or its trigger is made of, and no rule's match runs from the prefix into the
    message (the name and file end at a space), so the prefix alone decides (tests/test_properties.py)."""
    anchor = signatures.stats_lines[0].anchor
    clean: dict[tuple[str | None, str], bool] = {}

    def plain(m: Any, text: str) -> bool:
        key = (m["name"], m["file"])
        alone = clean.get(key)
        if alone is None:
            alone = clean[key] = redactor.leaves_alone(text[:m.start("at")])
        return alone and signatures.only_anchor(text[m.start("at"):], anchor)
    return plain


class _Run:
    """Stats lines being folded: their matches, until the run ends and `done` makes of them what `merge_stats`
    would (the figures converted a field at a time over the run)."""

    def __init__(self, first: _Line) -> None:
        number, text, m, shape, process = first
        self.shape = shape
        self.process_key = process
        self.process = _process(m)
        self.lines: list[tuple[int, str, Any]] = [(number, text, m)]

    def takes(self, line: _Line) -> bool:
        return line[3] is self.shape and line[4] == self.process_key

    def add(self, line: _Line) -> None:
        self.lines.append((line[0], line[1], line[2]))

    def done(self, name: str) -> StatsRun:
        lines = self.lines
        number, text, m = lines[-1]
        shape = self.shape
        fields = shape.fields_of(m)
        best = len(lines) - 1
        if len(lines) > 1:
            plan = shape.summed_plan
            captured = map(operator.methodcaller("group", *(key for key, _, _ in plan)), map(_MATCH, lines))
            values = {key: convert_each(convert, column) for (key, convert, _), column in zip(plan, zip(*captured))}
            for key, _, peak in shape.summed_plan:
                present = [v for v in values[key] if v is not None]
                if peak and present:
                    fields[key] = max(present)
            kv = [0.0 if v is None else v for v in values.get("kv_usage", [None] * len(lines))]
            full = list(map(KV_SATURATED.__le__, kv))
            queued = [bool(w) or bool(s) for w, s in zip(values.get("waiting", [None] * len(lines)),
                                                           values.get("swapped", [None] * len(lines)))]
            fields["intervals"] = len(lines)
            fields["kv_usage_sum"] = sum(kv)
            fields["saturated"] = sum(full)
            fields["saturated_queue"] = sum(map(operator.and_, full, queued))
            preempted = [v for v in values.get("preemptions", ()) if v is not None]
            if preempted:
                fields["preemptions"] = sum(preempted)
            best -= kv[::-1].index(max(kv))      # merge_stats: the later line unless an earlier had more
        best_number, best_text, best_m = lines[best]
        source = SourceRef(name, best_number, best_text, shape.span(best_m))
        event = LogEvent("stats", shape.signature.id, fields, self.process, m["level"], f"{m['date']} {m['time']}",
                         source, 0, None)
        return StatsRun(event, number, len(lines))


def _process(m: Any) -> str | None:
    """The process as the envelope names it, or none."""
    return None if m["pid"] is None else process_label(m["name"], m["pid"])
