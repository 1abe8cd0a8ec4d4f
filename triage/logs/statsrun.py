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
The lines are taken BATCH_LINES at a time and every test runs over the batch in C (map, compress, one
anchor search of the batch's messages joined): per line, only the shape's match costs much.
tests/test_properties.py checks the folded event against merge_stats over the parser's own events.
Pure functions over the lines; the pipeline decides when to fold: not inside a time window, whose edges
fall between lines, nor with several logs, which are interleaved by their lines' times.
"""
from __future__ import annotations

import collections
import itertools
import operator
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

from ..model import LogEvent, SourceRef
from ..redact import Redactor
from ..vocabulary import KV_SATURATED
from .envelope import process_label
from .signatures import SignatureSet, StatsLineShape, answer_new_keys, convert_each

FOLD_LINES = 32                 # lines per folded event: the timeline keeps 400 points, the facts sums and peaks
MAX_LINE_CHARS = 500            # a stats line is about 260 characters; evidence is cut at 600
BATCH_LINES = 128               # lines tested together: a batch's text and matches stay in the CPU's cache
_Item = tuple[int, str]
_NUMBER = operator.itemgetter(0)
_TEXT = operator.itemgetter(1)
_PREFIX_GROUPS = ("name", "pid", "file", "at")
_FOLDED = re.compile(b"\x01+")


@dataclass(frozen=True, slots=True)
class StatsRun:
    """Consecutive stats lines read as one: the event they make, and the lines they cover."""

    event: LogEvent
    last: int                   # the last line
    count: int


def fold_runs(lines: Iterable[_Item], signatures: SignatureSet, redactor: Redactor, name: str,
              after: int) -> Iterator[_Item | StatsRun]:
    """The lines as given, but runs of stats lines after the first `after` as one StatsRun each (the event's
    `seq` is 0: the parser numbers it). Masking prompts reads every line, so then none are folded."""
    if not signatures.stats_lines or redactor.prompts:
        yield from lines
        return
    folder = _Folder(signatures, redactor, name, after)
    stream = iter(lines)
    window: list[_Item] = []
    while True:
        batch = list(itertools.islice(stream, BATCH_LINES))
        window += batch
        if not window:
            return
        # A line's fate depends on the line after it, so the window's last line waits for the next batch.
        decided = len(window) - 1 if batch else len(window)
        yield from folder.fold(window, decided)
        if not batch:
            yield from folder.finish()
            return
        window = window[decided:]


class _Folder:
    """What folding has seen so far: the stats lines counted, whether the last line decided was one, the run
    being built, and which process names and files redaction leaves alone."""

    def __init__(self, signatures: SignatureSet, redactor: Redactor, name: str, after: int) -> None:
        self.signatures, self.redactor, self.name, self.after = signatures, redactor, name, after
        self.anchor = signatures.stats_lines[0].anchor
        self.shapes = list(signatures.stats_lines)       # the shape that matched most in the last batch first
        self.seen = 0
        self.previous_found = False
        self.run: _Run | None = None
        self.clean: dict[tuple[str | None, str], bool] = {}
        # Groups by number where every shape numbers the prefix's alike (by name, a group costs more).
        numbering: set[tuple[int | str, ...]] = {tuple(shape.line.groupindex[group] for group in _PREFIX_GROUPS)
                                                 for shape in self.shapes}
        groups: tuple[int | str, ...] = numbering.pop() if len(numbering) == 1 else _PREFIX_GROUPS
        process_name, pid, file, at = groups
        self.process_of = operator.methodcaller("group", process_name, pid)
        self.redaction_key_of = operator.methodcaller("group", process_name, file)
        self.message_start_of = operator.methodcaller("start", at)

    def fold(self, window: Sequence[_Item], decided: int) -> list[_Item | StatsRun]:
        """The first `decided` lines of `window`, with runs of foldable ones as StatsRun. A run ends before a line
        parsed as usual; one that reaches the last line decided stays open for the next batch."""
        texts = list(map(_TEXT, window))
        matches, shapes = self._matches(texts)
        if not any(matches):
            # The usual batch of a log that is not all stats lines. previous_found is left as it is: the next
            # batch starts on this one's last line, no stats line, so nothing reads it.
            return [*self._close(), *window[:decided]] if decided else []
        foldable = self._foldable(window, texts, matches, decided)
        out: list[_Item | StatsRun] = []
        at = 0
        for segment in _FOLDED.finditer(foldable):
            start, end = segment.span()
            if start > at:
                out += self._close()
                out += window[at:start]
            out += self._extend(window, matches, shapes, start, end)
            at = end
        if at < decided:
            out += self._close()
            out += window[at:decided]
        return out

    def finish(self) -> list[StatsRun]:
        return self._close()

    def _matches(self, texts: list[str]) -> tuple[list[Any], list[StatsLineShape | None]]:
        """Each line's match of a stats shape and that shape, or None and None."""
        n = len(texts)
        holding = list(map(operator.contains, texts, itertools.repeat(self.anchor)))
        first = self.shapes[0]
        if all(holding):                        # a log of stats lines: no line to set apart first
            matches: list[Any] = list(map(first.line.match, texts))
            if all(matches):
                return matches, [first] * n
            holding = list(map(operator.not_, matches))
            shapes: list[StatsLineShape | None] = [first if m else None for m in matches]
            todo_shapes, hits = self.shapes[1:], [(n - sum(holding), first)]
        else:
            matches, shapes, todo_shapes, hits = [None] * n, [None] * n, self.shapes, []
        indexes = list(itertools.compress(range(n), holding))
        todo = list(itertools.compress(texts, holding))
        for shape in todo_shapes:
            if not todo:
                break
            found = list(map(shape.line.match, todo))
            hit = list(map(bool, found))
            hits.append((sum(hit), shape))
            collections.deque(map(matches.__setitem__, itertools.compress(indexes, hit),
                                  itertools.compress(found, hit)), maxlen=0)
            collections.deque(map(shapes.__setitem__, itertools.compress(indexes, hit), itertools.repeat(shape)),
                              maxlen=0)
            missed = list(map(operator.not_, hit))
            indexes = list(itertools.compress(indexes, missed))
            todo = list(itertools.compress(todo, missed))
        best = max(hits, key=operator.itemgetter(0), default=(0, first))[1]
        if best is not first:
            self.shapes = [best, *(shape for shape in self.shapes if shape is not best)]
        return matches, shapes

    def _foldable(self, window: Sequence[_Item], texts: list[str], matches: list[Any], decided: int) -> bytes:
        """b"\\x01" for each of the first `decided` lines folded, b"\\x00" for one parsed as usual.

        A line is folded when it is a stats line past the file's first `after`, the line the parser receives
        before it is a stats line too (not a collector's partial line it would end), the one after it is a
        stats line or follows a gap (it is not the line's wrapped tail or split end), it is short, and it holds
        no other anchor and nothing redaction could touch."""
        found = list(map(bool, matches))
        mine = found[:decided]
        after_stats = list(map(operator.and_, mine, [self.previous_found, *mine[:-1]]))
        seen, self.seen = self.seen, self.seen + sum(mine)
        self.previous_found = mine[-1] if mine else self.previous_found
        if self.seen <= self.after or not any(after_stats):      # the file's first stats lines, or lone ones
            return bytes(decided)
        if seen >= self.after:
            past_cap: Iterable[bool] = itertools.repeat(True)
        else:
            past_cap = map((self.after - seen).__lt__, itertools.accumulate(mine))
        short = map(MAX_LINE_CHARS.__ge__, map(len, texts))
        candidates = list(map(all, zip(after_stats, past_cap, short)))
        numbers = list(map(_NUMBER, window))
        gap = map(operator.lt, map((1).__add__, numbers), numbers[1:])
        next_ok = [*map(operator.or_, found[1:], gap), True]
        plain = self._plain(list(itertools.compress(texts, candidates)), list(itertools.compress(matches, candidates)))
        folded = itertools.compress(itertools.compress(range(decided), candidates),
                                    map(operator.and_, plain, itertools.compress(next_ok, candidates)))
        mask = bytearray(decided)
        collections.deque(map(mask.__setitem__, folded, itertools.repeat(1)), maxlen=0)
        return bytes(mask)

    def _plain(self, texts: list[str], matches: list[Any]) -> list[bool]:
        """Whether each whole stats line reads as `SignatureSet.match` reads it: no anchor but the shape's in
        its message, nothing redaction could touch.

        Redaction is asked once per process name and file: the rest of such a line is digits and the shape's
        words, none of which a rule or its trigger is made of, and no rule's match runs from the prefix into
        the message (the name and file end at a space), so the prefix alone decides (tests/test_properties.py)."""
        keys = list(map(self.redaction_key_of, matches))
        starts = list(map(self.message_start_of, matches))
        prefixes = map(operator.getitem, texts, map(slice, itertools.repeat(None), starts))   # cut as they are asked
        answer_new_keys(self.clean, keys, prefixes, self.redactor.leaves_alone)
        alone = list(map(self.clean.__getitem__, keys))
        messages: list[str] = list(map(operator.getitem, itertools.compress(texts, alone),
                            map(slice, itertools.compress(starts, alone), itertools.repeat(None))))
        single = iter(self.signatures.only_anchor_each(messages, self.anchor))
        return [next(single) if ok else False for ok in alone]

    def _extend(self, window: Sequence[_Item], matches: list[Any], shapes: list[Any], start: int,
                end: int) -> list[StatsRun]:
        """Add the foldable lines window[start:end] to runs: a run ends at another shape or process, or full."""
        done: list[StatsRun] = []
        shapes = shapes[start:end]
        processes = list(map(self.process_of, matches[start:end]))
        changes = map(operator.or_, map(operator.is_not, shapes[1:], shapes[:-1]),
                      map(operator.ne, processes[1:], processes[:-1]))
        bounds = [0, *itertools.compress(range(1, end - start), changes), end - start]
        for first, stop in zip(bounds, bounds[1:]):
            at = first
            if self.run is not None and not self.run.takes(shapes[first], processes[first]):
                done += self._close()
            while at < stop:
                if self.run is None:
                    self.run = _Run(shapes[first], processes[first], matches[start + first])
                take = min(stop - at, FOLD_LINES - len(self.run.numbers))
                self.run.add(window[start + at:start + at + take], matches[start + at:start + at + take])
                at += take
                if len(self.run.numbers) >= FOLD_LINES:
                    done += self._close()
        return done

    def _close(self) -> list[StatsRun]:
        """The run being built, ended (none when there is none)."""
        if self.run is None:
            return []
        run, self.run = self.run, None
        return [run.done(self.name)]


class _Run:
    """Stats lines being folded: their matches, until the run ends and `done` makes of them what `merge_stats`
    would (the figures converted a field at a time over the run)."""

    def __init__(self, shape: StatsLineShape, process_key: tuple[Any, ...], first: Any) -> None:
        self.shape = shape
        self.process_key = process_key
        self.process = _process(first)
        self.numbers: list[int] = []
        self.texts: list[str] = []
        self.matches: list[Any] = []

    def takes(self, shape: StatsLineShape, process_key: tuple[Any, ...]) -> bool:
        return shape is self.shape and process_key == self.process_key

    def add(self, lines: Sequence[_Item], matches: Sequence[Any]) -> None:
        self.numbers += map(_NUMBER, lines)
        self.texts += map(_TEXT, lines)
        self.matches += matches

    def done(self, name: str) -> StatsRun:
        matches, count = self.matches, len(self.matches)
        m = matches[-1]
        shape = self.shape
        fields = shape.fields_of(m)
        best = count - 1
        if count > 1:
            plan = shape.summed_plan
            captured = map(operator.methodcaller("group", *shape.summed_groups), matches)
            values = {key: convert_each(convert, column) for (key, convert, _), column in zip(plan, zip(*captured))}
            for key, _, peak in plan:
                if peak:
                    present = _present(values[key])
                    if present:
                        fields[key] = max(present)
            absent = [None] * count
            kv = values.get("kv_usage", absent)
            if None in kv:
                kv = [0.0 if v is None else v for v in kv]
            full = list(map(KV_SATURATED.__le__, kv))
            waiting, swapped = values.get("waiting", absent), values.get("swapped", absent)
            queued = map(operator.or_, map(bool, waiting), map(bool, swapped))
            fields["intervals"] = count
            fields["kv_usage_sum"] = sum(kv)
            fields["saturated"] = sum(full)
            fields["saturated_queue"] = sum(map(operator.and_, full, queued))
            preempted = _present(values.get("preemptions", ()))
            if preempted:
                fields["preemptions"] = sum(preempted)
            best -= kv[::-1].index(max(kv))      # merge_stats: the later line unless an earlier had more
        source = SourceRef(name, self.numbers[best], self.texts[best], shape.span(matches[best]))
        event = LogEvent("stats", shape.signature.id, fields, self.process, m["level"], f"{m['date']} {m['time']}",
                         source, 0, None)
        return StatsRun(event, self.numbers[-1], count)


def _present(values: Sequence[Any]) -> Sequence[Any]:
    """The values that are there (a field a line lacks, or did not convert, is None)."""
    return values if None not in values else [v for v in values if v is not None]


def _process(m: Any) -> str | None:
    """The process as the envelope names it, or none."""
    return None if m["pid"] is None else process_label(m["name"], m["pid"])
