"""Runs of stats lines read as one event each, here rather than parsed one by one.

A long log's stats lines (`Engine 000: Avg prompt throughput: ...` every 10 s, V0's `Avg prompt throughput:
...`) are what its events are mostly made of, and making an event costs more than reading its line. The parser
already merges them once an attempt holds more than parse.STATS_CAP (peaks kept, counts summed: `merge_stats`). So
once an attempt has given that many stats lines (counted again after each line that may start another attempt: a
banner, the engine's config), each further run of up to FOLD_LINES lines of the same stats shape, from the same
process, one after the other among the lines the parser receives, is read here and becomes the one event
`merge_stats` would make of them. An attempt's first stats lines, which the parser keeps each as its own event, are
read here too, each as a run of one: the parser's path (envelope, signature search, redaction) costs several times
what a line read here does. A line this cannot prove it reads exactly as the parser would (another anchor in it,
anything redaction could touch, a neighbour that could be its wrapped tail or a collector's partial line) goes the
usual way. What does change is how the attempt's merging groups the intervals past its cap: it merges these runs
pairwise where it would have merged single lines pairwise, so its peaks, sums and counts are the same but a figure
read per merged interval (the median of running requests while the cache was full, the timeline's points) is
taken over other groups.
The lines are taken BATCH_LINES at a time. A line is matched once per digit form (the line with its digits
read as 0s; a stats log's lines take a few hundred forms): the shapes read every digit alike, so a form's other
lines are cut by the slices of its first line's groups, and whether another anchor occurs is answered once per
form too. A run's summed figures (peaks, sums, the saturated intervals) are read a column at a time from those
slices (`_figures`), not by `merge_stats` line after line, which would need each line's event made first.
tests/test_properties.py checks the folded event against merge_stats over the parser's own events.
Pure functions over the lines; the pipeline decides when to fold: not inside a time window, whose edges
fall between lines, nor with several logs, which are interleaved by their lines' times.
"""
from __future__ import annotations

import functools
import itertools
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..model import LogEvent, SourceRef
from ..redact import Redactor
from ..sources.files import LineBlock, numbered_lines
from ..sources.scan import DIGITS_AS_ZERO, digit_forms
from ..vocabulary import KV_SATURATED
from .envelope import process_label
from .signatures import SignatureSet
from .stats_shapes import StatsLineShape, answer_new_keys

try:        # Aho-Corasick in Rust: a batch's text searched for several words in one pass
    import ahocorasick_rs
except ImportError:         # no wheel for this platform: one `in` per word
    ahocorasick_rs = None  # type: ignore[assignment]  # checked before use

# Lines per folded event. Each event is made, numbered and merged downstream, so fewer, longer runs cost less; past
# the cap the parser merges neighbours pairwise anyway (a stats log of 600k lines ends with events of 256 lines
# either way), the timeline keeps 400 points and the facts sums and peaks, so the run length changes only a median
# taken over merged intervals (running_at_saturation), and only on mid-size logs.
FOLD_LINES = 64
MAX_LINE_CHARS = 500            # a stats line is about 260 characters; evidence is cut at 600
BATCH_LINES = 512               # lines tested together: spreads the per-batch steps, small enough for the cache
MAX_FORMS = 4096                # digit forms kept per file (a stats log's lines take a few hundred)
FEW_HOLES = 16                  # a batch with at most this many lines that are no stats line takes the usual path
_Item = tuple[int, str]
_Row = tuple[str, str, str]     # a stats line's name, pid and file; "" where a group took no part
_NAME_FILE = operator.itemgetter(0, 2)
_NAME_PID = operator.itemgetter(0, 1)
_START = operator.attrgetter("start")
_SHAPE = operator.attrgetter("shape")
_ROW = operator.attrgetter("row")
_SUMMED = operator.attrgetter("summed")
# How `_foldable` says each line is read, a byte a line: by the parser as usual, here into a run, or here as an
# event of its own (before the attempt's cap, where the parser keeps each stats line's event).
PARSED, IN_RUN, ALONE = 0, 1, 2
_READ_HERE = re.compile(b"\x01+|\x02+")      # stretches of IN_RUN or of ALONE lines
_BY_CAP = (ALONE, IN_RUN)                       # how a stats line read here is read: before the cap, past it


@dataclass(frozen=True, slots=True)
class StatsRun:
    """Consecutive stats lines read as one: what their event holds, and the lines they cover. The event is made
    once the parser numbers it (`event`): one event a run, not one made and then copied with its number."""

    signature: str
    fields: dict[str, Any]
    process: str | None
    level: str
    timestamp: str
    source: SourceRef
    last: int                   # the last line
    count: int

    def event(self, seq: int) -> LogEvent:
        return LogEvent("stats", self.signature, self.fields, self.process, self.level, self.timestamp, self.source,
                        seq, None)


@dataclass(frozen=True, slots=True)
class _Template:
    """How every stats line of one digit form reads: its shape, where its message starts, and the slices that
    cut its row out of it. The shapes read every ASCII digit alike (tests/test_properties.py), so lines that
    differ only in their digits match alike, group for group: one match per form, then slicing."""

    shape: StatsLineShape
    start: int                  # where the message starts
    span: tuple[int, int]       # where the signature matched, as `match` says
    level: str
    row: Callable[[str], _Row]
    when: Callable[[str], tuple[str, str]]      # the date and the time
    fields: Callable[[str], tuple[str, ...]]    # the groups of shape.field_plan
    summed: Callable[[str], tuple[str, ...]]    # the groups of shape.summed_plan

    @classmethod
    def of(cls, shape: StatsLineShape, m: Any) -> _Template:
        def cut(*groups: str) -> Callable[[str], Any]:
            # A group that took no part spans (-1, -1), which slices out "" (each group read here is non-empty
            # when it takes part). Two groups or more: itemgetter then gives a tuple.
            assert len(groups) > 1
            return operator.itemgetter(*(slice(*m.span(group)) for group in groups))
        summed = [field for field, _, _ in shape.summed_plan]
        return cls(shape, m.start("at"), shape.span(m), m["level"], cut("name", "pid", "file"), cut("date", "time"),
                   cut(*(field for field, _ in shape.field_plan)), cut(*summed))


def fold_runs(blocks: Iterable[LineBlock], signatures: SignatureSet, redactor: Redactor, name: str,
              after: int, restarts: Sequence[str]) -> Iterator[_Item | StatsRun]:
    """The lines of the blocks, numbered, but runs of stats lines after the first `after` of an attempt as one
    StatsRun each (the parser numbers its event). The parser counts an attempt's stats lines from its start, which
    only a line holding one of the anchors `restarts` can be: the count starts again at each such line. Masking
    prompts reads every line, so then none are folded."""
    if not signatures.stats_lines or redactor.prompts:
        yield from numbered_lines(blocks)
        return
    folder = _Folder(signatures, redactor, name, after, restarts)
    numbers: list[int] = []         # the window: the line held back from the last batch, then the next batch
    texts: list[str] = []
    for more_numbers, more_texts in _batches(blocks):
        numbers += more_numbers
        texts += more_texts
        # A line's fate depends on the line after it, so the window's last line waits for the next batch.
        decided = len(numbers) - 1
        yield from folder.fold(numbers, texts, decided)
        numbers, texts = numbers[decided:], texts[decided:]
    if numbers:
        yield from folder.fold(numbers, texts, len(numbers))
    yield from folder.finish()


def _batches(blocks: Iterable[LineBlock]) -> Iterator[LineBlock]:
    """The blocks' lines BATCH_LINES at a time (a block's last batch may be shorter)."""
    for numbers, texts in blocks:
        for at in range(0, len(numbers), BATCH_LINES):
            yield numbers[at:at + BATCH_LINES], texts[at:at + BATCH_LINES]


class _Folder:
    """What folding has seen so far: the stats lines counted, whether the last line decided was one, the run
    being built, the templates of the digit forms met, and which process names and files redaction leaves
    alone."""

    def __init__(self, signatures: SignatureSet, redactor: Redactor, name: str, after: int,
                 restarts: Sequence[str]) -> None:
        self.signatures, self.redactor, self.name, self.after = signatures, redactor, name, after
        self.anchor = signatures.stats_lines[0].anchor
        self.restarts = tuple(restarts)
        # The anchors have no digits: a form holds one where its lines do.
        self.holds_restart = functools.partial(_holds_any, tuple(anchor.encode() for anchor in self.restarts))
        self.restart_forms: dict[bytes | None, bool] = {}      # by digit form: a restart anchor occurs in it
        self.seen = 0                                           # stats lines since the last line that may restart
        self.previous_found = False
        self.run: _Run | None = None
        self.clean: dict[tuple[str, str], bool] = {}
        self.processes: dict[tuple[str, str], str | None] = {}   # by name and pid: their process label
        self.templates: dict[bytes, _Template | None] = {}     # by digit form
        self.forms_met: dict[bytes, bytes] = {}                 # each digit form, as the object first met
        self.only_anchor: dict[bytes, bool] = {}                # by digit form: no anchor but the stats one
        self.may_hold_digit_anchor: dict[bytes, bool] = {}      # by digit form: an anchor with digits may occur
        # An anchor with digits occurs in a line only where its own digit form occurs in the line's.
        self.may_hold_digit = functools.partial(
            _holds_any, tuple(anchor.encode().translate(DIGITS_AS_ZERO) for anchor in signatures.digit_anchors))
        self.holds_digit_anchor = _WordSearch(signatures.digit_anchors)

    def fold(self, numbers: list[int], texts: list[str], decided: int) -> list[_Item | StatsRun]:
        """The first `decided` lines of the window (`numbers` and `texts`, in step), numbered, with runs of foldable
        ones as StatsRun. A run ends before a line parsed as usual; one that reaches the last line decided stays
        open for the next batch."""
        templates, forms = self._templates(texts)
        if not any(templates):
            # The usual batch of a log that is not all stats lines. previous_found is left as it is: the next
            # batch starts on this one's last line, no stats line, so nothing reads it.
            if self.seen and any(map("\n".join(texts[:decided]).__contains__, self.restarts)):
                self.seen = 0
            return [*self._close(), *zip(numbers[:decided], texts[:decided])] if decided else []
        found = list(map(bool, templates))
        holes = _holes(found)           # the lines no stats shape matches
        restarts = self._restart_lines(texts[:decided], holes, found, forms)
        rows: list[_Row | None]
        if all(found):                  # the usual batch of a stats log: every line is a stats line
            rows = _rows(texts, templates)
        else:                           # a warning among them: the stats lines' rows, shared where alike
            rows = _scattered(found, _rows(list(itertools.compress(texts, found)),
                                           list(itertools.compress(templates, found))))
        foldable = self._foldable(numbers, texts, found, holes, rows, templates, forms, decided, restarts)
        out: list[_Item | StatsRun] = []
        at = 0
        for segment in _READ_HERE.finditer(foldable):
            start, end = segment.span()
            if start > at:
                out += self._close()
                out += zip(numbers[at:start], texts[at:start])
            if foldable[start] == IN_RUN:
                out += self._extend(numbers, texts, rows, templates, start, end)
            else:
                out += self._close()
                out += self._alone(numbers, texts, rows, templates, start, end)
            at = end
        if at < decided:
            out += self._close()
            out += zip(numbers[at:decided], texts[at:decided])
        return out

    def finish(self) -> list[StatsRun]:
        return self._close()

    def _templates(self, texts: list[str]) -> tuple[list[_Template | None], list[bytes | None] | None]:
        """Each line's template (None for a line no stats shape matches), one match per digit form; and each
        line's form where it decides which anchors the line holds: every line holding the stats anchor is ASCII
        and no anchor with digits occurs in the batch (else None)."""
        n = len(texts)
        holding = list(map(operator.contains, texts, itertools.repeat(self.anchor)))
        if not any(holding):
            return [None] * n, None
        held = texts if all(holding) else list(itertools.compress(texts, holding))
        forms = digit_forms(held)
        if forms is None:                           # not all ASCII: matched line by line
            return _scattered(holding, list(map(self._template_of, held))), None
        if len(self.templates) > MAX_FORMS:
            self.templates.clear()
            self.only_anchor.clear()
            self.may_hold_digit_anchor.clear()
            self.restart_forms.clear()
            self.forms_met.clear()
        forms = self._as_met(forms)
        answer_new_keys(self.templates, forms, held, self._template_of)
        found = list(map(self.templates.__getitem__, forms))
        # The lines of the forms that cannot hold an anchor with digits need no search.
        answer_new_keys(self.may_hold_digit_anchor, forms, forms, self.may_hold_digit)
        # One search of the batch's text for each such anchor (a stats line's date holds `-0`, the form of `-9`):
        # joined by newlines, which an anchor holding one could match across, answering "may" where it may not.
        maybe = "\n".join(itertools.compress(held, map(self.may_hold_digit_anchor.__getitem__, forms)))
        digit_free = not self.holds_digit_anchor(maybe)
        return _scattered(holding, found), _scattered(holding, forms) if digit_free else None

    def _as_met(self, forms: list[bytes]) -> list[bytes]:
        """The forms as the objects they were first met as: the lookups by form that follow (four a line) then
        find their keys by identity, where an equal object made for another batch was compared byte by byte."""
        met = self.forms_met
        firsts = dict.fromkeys(forms)       # digit_forms gives the lines of a form one object
        swap = {form: met.setdefault(form, form) for form in firsts}
        return list(map(swap.__getitem__, forms))

    def _restart_lines(self, texts: list[str], holes: list[int], found: list[bool],
                       forms: list[bytes | None] | None) -> list[int]:
        """The places among `texts` of the lines that hold an anchor of `restarts`: the lines no stats shape
        matches (`holes`), each tested; the stats lines once per digit form (the anchors have no digits: a form
        holds one where its lines do), or each when the batch has no forms."""
        places = [hole for hole in holes if hole < len(texts)]
        if any(map("\n".join([texts[hole] for hole in places]).__contains__, self.restarts)):    # seldom
            places = [hole for hole in places if any(map(texts[hole].__contains__, self.restarts))]
        else:
            places = []
        lines = itertools.compress(range(len(texts)), found)
        if forms is None:
            stats = [i for i in lines if any(map(texts[i].__contains__, self.restarts))]
        else:
            stated = list(itertools.compress(forms[:len(texts)], found))
            answer_new_keys(self.restart_forms, stated, stated, self.holds_restart)
            held = any(map(self.restart_forms.__getitem__, stated))
            stats = [i for i, form in zip(lines, stated) if self.restart_forms[form]] if held else []
        return sorted(places + stats)

    def _template_of(self, text: str) -> _Template | None:
        for shape in self.signatures.stats_lines:
            m = shape.line.match(text)
            if m:
                return _Template.of(shape, m)
        return None

    def _foldable(self, numbers: list[int], texts: list[str], found: list[bool], holes: list[int],
                  rows: list[_Row | None], templates: list[_Template | None], forms: list[bytes | None] | None,
                  decided: int, restarts: list[int]) -> bytes:
        """For each of the first `decided` lines, IN_RUN where it is folded into a run, ALONE where it is read
        as its own event here, PARSED where the parser reads it as usual.

        A line is read here when it is a stats line, the line the parser receives before it is a stats line too
        (not a collector's partial line it would end), the one after it is a stats line or follows a gap (it is
        not the line's wrapped tail or split end), it is short, and it holds no other anchor and nothing
        redaction could touch. It is folded into a run when it is past the first `after` since the last line
        that may restart (`restarts`, places in the batch); before, the parser keeps each such line's event."""
        mine = found[:decided]
        previous_found = self.previous_found
        seen = self.seen
        self.seen = sum(mine[restarts[-1] + 1:]) if restarts else self.seen + sum(mine)
        self.previous_found = mine[-1] if mine else previous_found
        if not restarts and seen >= self.after and len(holes) <= FEW_HOLES and max(map(len, texts)) <= MAX_LINE_CHARS:
            return self._usual(numbers, texts, holes, rows, templates, forms, decided, previous_found)
        candidates = list(map(operator.and_, mine, [previous_found, *mine[:-1]]))
        if not any(candidates):
            return bytes(decided)
        past_cap: list[bool]
        if restarts:
            past_cap = self._past_cap(mine, seen, restarts)
        elif seen >= self.after:
            past_cap = [True] * decided
        else:
            past_cap = list(map((self.after - seen).__lt__, itertools.accumulate(mine)))
        if max(map(len, texts)) > MAX_LINE_CHARS:
            candidates = list(map(operator.and_, candidates, map(MAX_LINE_CHARS.__ge__, map(len, texts))))
        if numbers[-1] - numbers[0] == len(numbers) - 1:    # the numbers rise: no gap between these lines
            next_ok = [*found[1:], True]
        else:
            gap = map(operator.lt, map((1).__add__, numbers), numbers[1:])
            next_ok = [*map(operator.or_, found[1:], gap), True]
        plain = self._plain(list(itertools.compress(texts, candidates)), list(itertools.compress(rows, candidates)),
                            list(itertools.compress(templates, candidates)),
                            None if forms is None else list(itertools.compress(forms, candidates)))
        fold_them = list(map(operator.and_, plain, itertools.compress(next_ok, candidates)))
        mask = bytearray(decided)
        chosen = list(itertools.compress(itertools.compress(range(decided), candidates), fold_them))
        _put(mask, chosen, map(_BY_CAP.__getitem__, map(past_cap.__getitem__, chosen)))
        return bytes(mask)

    def _past_cap(self, mine: list[bool], seen: int, restarts: list[int]) -> list[bool]:
        """Whether each line is a stats line past the first `after` of its attempt, counting from `seen` and
        again after each line that may restart (a batch holds few: a line at a time), that line not counted: the
        parser may count it in either attempt."""
        out = []
        count, at = seen, iter(restarts)
        mark = next(at)
        for i, stats in enumerate(mine):
            if i == mark:
                count, mark = 0, next(at, -1)
            else:
                count += stats
            out.append(stats and count > self.after)
        return out

    def _usual(self, numbers: list[int], texts: list[str], holes: list[int], rows: list[Any],
               templates: list[Any], forms: list[Any] | None, decided: int, previous_found: bool) -> bytes:
        """`_foldable` for the usual batch: past the cap, none too long, and a few lines at most that are no
        stats line (the holes), a warning now and then. A stats line then folds unless the line before it is a
        hole, or the line after it is one and follows it with no gap, and it passes `_plain`, which is asked of
        every stats line decided, on slices rather than compressed lists."""
        plain = self._plain(_without(texts[:decided], holes), _without(rows[:decided], holes),
                            _without(templates[:decided], holes),
                            None if forms is None else _without(forms[:decided], holes))
        mask = bytearray(_put_back(plain, holes, False)[:decided])     # a hole at `decided` is the undecided line
        for hole in holes:
            if 0 < hole <= decided and numbers[hole] == numbers[hole - 1] + 1:
                mask[hole - 1] = PARSED     # the next line, no stats line, could be its wrapped tail
            if hole + 1 < decided:
                mask[hole + 1] = PARSED     # the line before, no stats line, could be a partial line it ends
        if decided and not previous_found:
            mask[0] = PARSED
        return bytes(mask)

    def _plain(self, texts: list[str], rows: list[Any], templates: list[Any], forms: list[Any] | None) -> list[bool]:
        """Whether each whole stats line reads as `SignatureSet.match` reads it: no anchor but the shape's in
        its message, nothing redaction could touch.

        Redaction is asked once per process name and file: the rest of such a line is digits and the shape's
        words, none of which a rule or its trigger is made of, and no rule's match runs from the prefix into
        the message (the name and file end at a space), so the prefix alone decides (tests/test_properties.py).
        The anchors are looked for once per digit form: an anchor without digits occurs in a line, or not,
        whatever its digits."""
        starts = list(map(_START, templates))
        if len(self.clean) > MAX_FORMS:              # a hostile log's ever new names and files
            self.clean.clear()
        alone: Iterable[bool]
        if rows and rows.count(rows[0]) == len(rows):   # the usual batch: one process name, pid and file
            key = _NAME_FILE(rows[0])
            if key not in self.clean:
                self.clean[key] = self.redactor.leaves_alone(texts[0][:starts[0]])
            alone = itertools.repeat(self.clean[key])
        else:
            keys = list(map(_NAME_FILE, rows))
            prefixes = map(operator.getitem, texts, map(slice, itertools.repeat(None), starts))  # cut as asked
            answer_new_keys(self.clean, keys, prefixes, self.redactor.leaves_alone)
            alone = map(self.clean.__getitem__, keys)
        messages: Iterable[str] = map(operator.getitem, texts, map(slice, starts, itertools.repeat(None)))
        only: Iterable[bool]
        if forms is None:
            only = map(self.signatures.only_anchor, messages, itertools.repeat(self.anchor))
        else:
            answer_new_keys(self.only_anchor, forms, messages,
                            functools.partial(self.signatures.only_anchor, anchor=self.anchor))
            only = map(self.only_anchor.__getitem__, forms)
        return list(map(operator.and_, alone, only))

    def _extend(self, numbers: list[int], texts: list[str], rows: list[Any], templates: list[Any], start: int,
                end: int) -> list[StatsRun]:
        """Add the foldable lines [start:end] of the window to runs: a run ends at another shape or process, or
        full."""
        done: list[StatsRun] = []
        shapes = list(map(_SHAPE, templates[start:end]))
        stretch = rows[start:end]
        if shapes.count(shapes[0]) == len(shapes) and stretch.count(stretch[0]) == len(stretch):
            bounds = [0, end - start]           # the usual stretch: one shape, one process (and file)
            processes = [_NAME_PID(stretch[0])] * len(stretch)
        else:
            processes = list(map(_NAME_PID, stretch))
            changes = map(operator.or_, map(operator.is_not, shapes[1:], shapes[:-1]),
                          map(operator.ne, processes[1:], processes[:-1]))
            bounds = [0, *itertools.compress(range(1, end - start), changes), end - start]
        for first, stop in zip(bounds, bounds[1:]):
            at = first
            if self.run is not None and not self.run.takes(shapes[first], processes[first]):
                done += self._close()
            while at < stop:
                if self.run is None:
                    self.run = _Run(shapes[first], processes[first], self._process(processes[first]))
                take = min(stop - at, FOLD_LINES - len(self.run.numbers))
                lines = slice(start + at, start + at + take)
                self.run.add(numbers[lines], texts[lines], templates[lines])
                at += take
                if len(self.run.numbers) >= FOLD_LINES:
                    done += self._close()
        return done

    def _alone(self, numbers: list[int], texts: list[str], rows: list[Any], templates: list[Any], start: int,
               end: int) -> list[StatsRun]:
        """The lines [start:end] of the window, each the one event the parser would make of it: a run of one."""
        alone = []
        for at in range(start, end):
            template, text, number = templates[at], texts[at], numbers[at]
            shape = template.shape
            alone.append(StatsRun(shape.signature.id, shape.fields_from(template.fields(text)),
                                  self._process(_NAME_PID(rows[at])), template.level, " ".join(template.when(text)),
                                  SourceRef(self.name, number, text, template.span), number, 1))
        return alone

    def _process(self, key: tuple[str, str]) -> str | None:
        """The process a line's name and pid make, as the envelope names it."""
        label = self.processes.get(key, "")
        if label == "":
            if len(self.processes) > MAX_FORMS:      # a hostile log's ever new names
                self.processes.clear()
            name, pid = key
            label = self.processes[key] = process_label(name or None, pid) if pid else None
        return label

    def _close(self) -> list[StatsRun]:
        """The run being built, ended (none when there is none)."""
        if self.run is None:
            return []
        run, self.run = self.run, None
        return [run.done(self.name)]


class _Run:
    """Stats lines being folded: their texts and templates, until the run ends and `done` makes of them what
    `merge_stats` would."""

    def __init__(self, shape: StatsLineShape, process_key: tuple[str, ...], process: str | None) -> None:
        self.shape = shape
        self.process_key = process_key
        self.process = process
        self.numbers: list[int] = []
        self.texts: list[str] = []
        self.templates: list[_Template] = []

    def takes(self, shape: StatsLineShape, process_key: tuple[str, ...]) -> bool:
        return shape is self.shape and process_key == self.process_key

    def add(self, numbers: list[int], texts: list[str], templates: Sequence[_Template]) -> None:
        self.numbers += numbers
        self.texts += texts
        self.templates += templates

    def done(self, name: str) -> StatsRun:
        count = len(self.texts)
        shape = self.shape
        last, text = self.templates[-1], self.texts[-1]
        fields = shape.fields_from(last.fields(text))     # the last line's own fields, as the parser reads them
        best = count - 1
        if count > 1:
            tops, sums, kv_sum, best, saturated, saturated_queue = _figures(shape, self.texts, self.templates)
            for (key, _, peak), top in zip(shape.summed_plan, tops):
                if peak and top is not None:
                    fields[key] = top
            fields["intervals"] = count
            fields["kv_usage_sum"] = kv_sum
            fields["saturated"] = saturated
            fields["saturated_queue"] = saturated_queue
            preemptions = shape.summed_place.get("preemptions")
            if preemptions is not None and sums[preemptions] is not None:     # a line of the run has them
                fields["preemptions"] = sums[preemptions]
            fields["since"] = " ".join(self.templates[0].when(self.texts[0]))
        source = SourceRef(name, self.numbers[best], self.texts[best], self.templates[best].span)
        date, time = last.when(text)
        return StatsRun(shape.signature.id, fields, self.process, last.level, f"{date} {time}", source,
                        self.numbers[-1], count)


_Figures = tuple[tuple[Any, ...], tuple[Any, ...], float, int, int, int]


def _figures(shape: StatsLineShape, texts: list[str], templates: list[_Template]) -> _Figures:
    """What `merge_stats` makes of a run's summed fields: each field's peak and sum (None where no line has it),
    the sum of the KV usage, the line of the fullest cache (the last of equal ones), the intervals where the cache
    was full, and those where it was full with requests queued. The fields are converted as the signature converts
    them, a column at a time."""
    count = len(texts)
    columns = zip(*map(operator.call, map(_SUMMED, templates), texts))
    values: dict[str, list[Any]] = {}
    for (key, value_of, _), column in zip(shape.summed_plan, columns):
        # One text throughout (a queue that stays empty, nothing swapped): converted once.
        same = column[0] == column[-1] and column.count(column[0]) == count
        values[key] = [value_of(column[0])] * count if same else list(map(value_of, column))
    tops = tuple(map(_peak, values.values()))
    sums = tuple(map(_total, values.values()))
    kv = values.get("kv_usage", [0.0] * count)
    if None in kv:
        kv = [0.0 if v is None else v for v in kv]
    fullest = max(kv)
    best = count - 1 - kv[::-1].index(fullest)
    if fullest < KV_SATURATED:          # no line saturated: no line to count
        return tops, sums, sum(kv), best, 0, 0
    absent = [None] * count
    full = list(map(KV_SATURATED.__le__, kv))
    queued = map(operator.or_, map(bool, values.get("waiting", absent)), map(bool, values.get("swapped", absent)))
    return tops, sums, sum(kv), best, sum(full), sum(map(operator.and_, full, queued))


def _rows(texts: list[str], templates: list[Any]) -> list[Any]:
    """Each stats line's name, pid and file (every line has a template)."""
    return [template.row(text) for template, text in zip(templates, texts)]


class _WordSearch:
    """Whether a text holds any of `words`: one Aho-Corasick pass where the wheel is installed (a batch of stats lines
    is some 120 KB, which `in` reads once per word), else one `in` per word."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = tuple(words)
        self.automaton = ahocorasick_rs.AhoCorasick(list(self.words)) if ahocorasick_rs and self.words else None

    def __call__(self, text: str) -> bool:
        if self.automaton is not None:
            try:
                return bool(self.automaton.find_matches_as_indexes(text))
            except UnicodeEncodeError:      # a lone surrogate: not UTF-8
                pass
        return any(word in text for word in self.words)


def _holds_any(anchors: tuple[bytes, ...], form: bytes | None) -> bool:
    """Whether one of `anchors` occurs in a digit form (None: a line with no form)."""
    return form is not None and any(anchor in form for anchor in anchors)


def _scattered(chosen: list[bool], values: list[Any], other: Any = None) -> list[Any]:
    """`values`, one for each chosen line, at their lines' places; `other` at the others. A stats batch has few
    others (a warning now and then): the values then go in slices between them."""
    if len(values) == len(chosen):
        return values
    if len(chosen) - len(values) > FEW_HOLES:
        out: list[Any] = [other] * len(chosen)
        _put(out, itertools.compress(range(len(chosen)), chosen), values)
        return out
    return _put_back(values, _holes(chosen), other)


def _put_back(values: list[Any], holes: list[int], other: Any) -> list[Any]:
    """`values` with `other` put in at the places `holes` (rising), in slices: what `_without` took out."""
    out: list[Any] = []
    taken = 0
    for placed, hole in enumerate(holes):
        out += values[taken:hole - placed]
        out.append(other)
        taken = hole - placed
    out += values[taken:]
    return out


def _without(values: list[Any], holes: list[int]) -> list[Any]:
    """`values` less those at the places `holes` (rising; one past the end, the window's undecided line, is no
    value to leave out), in slices."""
    if not holes:
        return values
    out: list[Any] = []
    start = 0
    for hole in holes:
        out += values[start:hole]
        start = hole + 1
    out += values[start:]
    return out


def _holes(chosen: list[bool]) -> list[int]:
    """The places of the lines not chosen, each found by one search in C: as bytes, by memchr (`list.index`
    compared True with False through a call a line)."""
    flags = bytes(chosen)
    holes: list[int] = []
    at = flags.find(0)
    while at != -1:
        holes.append(at)
        at = flags.find(0, at + 1)
    return holes


def _put(target: Any, indexes: Iterable[int], values: Iterable[Any]) -> None:
    """target[i] = v for each index and value in step."""
    for index, value in zip(indexes, values):
        target[index] = value


def _peak(values: list[Any]) -> Any:
    """The largest of the values that are there (None when none is). max fails on a None among two values or
    more, so a field every line has is taken in one step."""
    try:
        return max(values)
    except TypeError:
        return max(_present(values), default=None)


def _total(values: list[Any]) -> Any:
    """The sum of the values that are there (None when none is). sum fails on a None, so a field every line has is
    added in one step."""
    try:
        return sum(values)
    except TypeError:
        present = _present(values)
        return sum(present) if present else None


def _present(values: Sequence[Any]) -> Sequence[Any]:
    """The values that are there (a field a line lacks, or did not convert, is None)."""
    return values if None not in values else [v for v in values if v is not None]


