"""Parse logs into recognised events, coverage counts and startup attempts.

Records come from `envelope`; signatures from `signatures`. This stage adds what needs context:
re-joining lines a terminal wrapped, counting traceback bodies as understood, grouping the
WARNING/ERROR lines nothing recognised, merging several files into one incident, and cutting a
log that holds several startups (a restarting container) into attempts.
"""
from __future__ import annotations

import collections
import dataclasses
import heapq
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..model import CoverageGroup, InputSummary, LogEvent, SourceRef
from ..redact import LineContext, Redactor, clip
from ..sources.files import LineBlock, LineReader, line_blocks, numbered_lines
from ..vocabulary import KV_SATURATED, PHASE_RANK, STATS_PEAKS
from .envelope import OtherLines, Record, records_and_others
from .logtime import month_day_time, year_turned
from .signatures import MatchBudget, Signature, SignatureSet
from .statsrun import StatsRun, fold_runs

MAX_EVIDENCE_CHARS = 600
REDACT_WINDOW = MAX_EVIDENCE_CHARS + 16_384   # what an unrecognised line is redacted over (a secret is < 8 KiB)
MAX_WRAP_JOIN = 64             # physical lines a wrapped record may span
MIN_WRAP_CANDIDATE = 60        # shorter unmatched lines are not worth re-joining, unless they hold an anchor
MAX_COVERAGE_GROUPS = 500
STATS_CAP = 4_000              # stats events an attempt keeps before merging neighbours
KIND_HEAD, KIND_TAIL = 1_000, 1_000   # other events an attempt keeps per kind: the first and the last

_TRACEBACK_BODY = re.compile(r"^(?:\s|[\^~]+\s*$|$)")
_TEMPLATE_MASK = re.compile(r"0x[0-9a-fA-F]+|\d+(?:[.,:]\d+)*|'[^']{24,}'|\"[^\"]{24,}\"")
_BANNER_KINDS = frozenset({"version", "args"})
_RESTART_KINDS = _BANNER_KINDS | {"engine_config"}     # the events split_attempts may start an attempt at
_TRACEBACK_KINDS = frozenset({"traceback_start", "traceback_frame"})


class LogParse:
    """One log file, parsed lazily: iterate it once for events in file order; then `result()` describes
    the whole file (its summary, the lines nothing recognised, its warnings)."""

    def __init__(self, name: str, lines: Iterable[tuple[int, str]] | LineReader, signatures: SignatureSet,
                 redactor: Redactor, fold_stats: bool = True) -> None:
        self.name = name
        self.fold_stats = fold_stats                # read long runs of stats lines a run at a time (statsrun.py)
        self._lines = lines
        self._signatures = signatures
        self._redactor = redactor
        self._coverage = _Coverage()
        self.lines_read = 0
        self.budget = MatchBudget()                 # what slow signature patterns may cost this file
        self.warnings: list[str] = []               # told once the file is parsed
        self.done = False

    def __iter__(self) -> Iterator[LogEvent]:
        return _parse(self)

    def result(self) -> ParseResult:
        if not self.done:
            raise RuntimeError(f"{self.name}: the parse is not finished; iterate every event first")
        summary = InputSummary(path=self.name, kind="log", lines_read=self.lines_read,
                               lines_recognised=self._coverage.recognised, vllm_lines=self._coverage.vllm)
        groups = [CoverageGroup(level=lv, template=t, count=c, example=ref)      # masked as read, and in the Report
                  for (lv, t), (c, ref) in self._coverage.groups.items()]
        groups.sort(key=lambda g: (-g.count, g.level, g.template))
        return ParseResult(summary, tuple(groups), tuple(self.warnings))


@dataclass(frozen=True)
class ParseResult:
    """What parsing one whole log found besides its events."""

    summary: InputSummary
    unrecognised: tuple[CoverageGroup, ...]     # WARNING/ERROR lines nothing recognised, most frequent first
    warnings: tuple[str, ...]


@dataclass
class Attempt:
    """One startup of the server, with the events that belong to it, in incident order."""

    index: int
    events: list[LogEvent] = field(default_factory=list)

    @property
    def first(self) -> SourceRef | None:
        """Where the attempt begins in the log (None for an attempt with no events: metrics alone)."""
        return self.events[0].source if self.events else None

    @property
    def last(self) -> SourceRef | None:
        return self.events[-1].source if self.events else None


class _Coverage:
    """Counts physical lines once each, and groups unrecognised WARNING/ERROR lines."""

    def __init__(self) -> None:
        self.recognised = 0
        self.vllm = 0
        self._last_recognised = 0
        self._last_vllm = 0
        self.groups: dict[tuple[str, str], list] = {}

    def run_of_lines(self, count: int, last: int) -> None:
        """`count` recognised lines of vLLM's, the last of them `last`, all after every line marked so far."""
        self.recognised += count
        self.vllm += count
        self._last_recognised = self._last_vllm = last

    def mark(self, first: int, last: int, *, recognised: bool, vllm: bool) -> None:
        if recognised and last > self._last_recognised:
            self.recognised += last - max(first, self._last_recognised + 1) + 1
            self._last_recognised = last
        if vllm and last > self._last_vllm:
            self.vllm += last - max(first, self._last_vllm + 1) + 1
            self._last_vllm = last

    def unrecognised(self, level: str, message: str, ref: SourceRef) -> None:
        template = _TEMPLATE_MASK.sub("N", message.strip())[:160]
        key = (level, template)
        group = self.groups.get(key)
        if group is not None:
            group[0] += 1
        elif len(self.groups) < MAX_COVERAGE_GROUPS:
            self.groups[key] = [1, ref]


def _spans_boundary(hits, boundary: int) -> bool:
    return any(start < boundary < end for _, _, (start, end) in hits)


def _strength(hits) -> tuple[int, int]:
    """How much a set of matches says: specific signatures first, then the fields they pulled out."""
    return (sum(1 for sig, _, _ in hits if not (sig.catch_all or sig.generic)),
            sum(len(fields) for _, fields, _ in hits))


def _more_fields(new_hits, old_hits) -> bool:
    """Signatures built from lookaheads match a zero-width span; they gain fields instead."""
    before = {sig.id: len(fields) for sig, fields, _ in old_hits}
    return any(len(fields) > before.get(sig.id, len(fields)) for sig, fields, _ in new_hits)


def _feed_context(context: LineContext, lines: OtherLines) -> None:
    """`context.spans` of each of the lines that could tell it something: those holding a word that may open a
    block, and those after one while a block is open."""
    fed = 0             # the lines before this one were fed, or could tell nothing
    for line in _lines_holding(lines.text, context.OPENING):
        while fed < line and not context.idle_over(""):
            context.spans(lines.record(fed).message)
            fed += 1
        if line >= fed:
            if not context.idle_over(lines.raws[line]):
                context.spans(lines.record(line).message)
            fed = line + 1
    while fed < len(lines.numbers) and not context.idle_over(""):
        context.spans(lines.record(fed).message)
        fed += 1


def _lines_holding(text: str, words: re.Pattern[str]) -> Iterator[int]:
    """The lines of `text` (by newlines, counted from 0) holding a match of `words`, each once, in order."""
    line = at = 0
    last = -1
    for m in words.finditer(text):
        line += text.count("\n", at, m.start())
        at = m.start()
        if line != last:
            yield line
            last = line


def _parse(parse: LogParse) -> Iterator[LogEvent]:
    """Recognise every line of one log, yielding events in the order of the file."""
    signatures, redactor, coverage, name = parse._signatures, parse._redactor, parse._coverage, parse.name
    budget = parse.budget
    in_traceback: dict[str | None, bool] = {}
    context = LineContext() if redactor.enabled else None

    def counted(blocks: Iterable[LineBlock]) -> Iterator[LineBlock]:
        for block in blocks:
            parse.lines_read = block[0][-1]    # the last line seen; the reader may know a larger total
            yield block

    blocks = counted(line_blocks(parse._lines))
    lines: Iterable[tuple[int, str] | StatsRun]
    if parse.fold_stats:
        restarts = sorted({s.anchor for s in signatures.signatures if s.kind in _RESTART_KINDS})
        lines = fold_runs(blocks, signatures, redactor, name, STATS_CAP, restarts)
    else:
        lines = numbered_lines(blocks)
    stream = records_and_others(lines, sorted({sig.anchor for sig in signatures.signatures}))
    lookahead: list[Record | StatsRun | OtherLines] = []

    def next_record() -> Record | StatsRun | OtherLines | None:
        if lookahead:
            return lookahead.pop(0)
        return next(stream, None)

    def peek() -> Record | StatsRun | OtherLines | None:
        if not lookahead:
            rec = next(stream, None)
            if rec is None:
                return None
            lookahead.append(rec)
        return lookahead[0]

    seq = 0
    while True:
        rec = next_record()
        if rec is None:
            break
        if isinstance(rec, StatsRun):
            coverage.run_of_lines(rec.count, rec.last)
            in_traceback[rec.process] = False
            yield rec.event(seq)
            seq += 1
            continue
        if isinstance(rec, OtherLines):
            if in_traceback.get(None):      # its first line may go on a traceback: read it as its own record
                lookahead[:0] = rec.split()
                continue
            # Lines of no process that match nothing: what reading each would leave behind.
            in_traceback[None] = False
            if context is not None:
                _feed_context(context, rec)
            continue
        message = rec.message
        last_line = rec.line
        hits = signatures.match(message, budget) if message and not rec.anchor_free else []
        # A terminal or pager may have wrapped a long line. Take the next line as its tail when a
        # signature then matches across the break or pulls out more fields, or when the lines are
        # cut at one fixed width (every piece but the last exactly as wide as the first).
        joined = 0
        width, segment = rec.width, rec.width
        # Two readings of a wrapped record: a terminal cuts a line anywhere (join as is), a ticket re-flows
        # it at a space it then drops (join with a space). Both are followed; the stronger one is kept.
        spaced, spaced_hits, spaced_text, reflowed = message, hits, rec.text, False
        # A short vLLM message matching nothing may be the head of a line wrapped early: its prefix took most of a
        # terminal's width (fold -w 80 leaves 24 characters of a V1 message, its anchor cut in two), or it holds
        # an anchor whose tail is on the next line.
        anchored = (not hits and rec.vllm_prefix and len(message) < MIN_WRAP_CANDIDATE
                    and (rec.width >= MIN_WRAP_CANDIDATE or bool(signatures.anchors_in(message))))
        while joined < MAX_WRAP_JOIN and (hits or spaced_hits or len(message) >= MIN_WRAP_CANDIDATE or anchored):
            nxt = peek()
            if isinstance(nxt, OtherLines):
                if joined == 0 and rec.anchor_free_with_next:
                    break       # as below: no line of OtherLines holds an anchor
                lookahead[:1] = nxt.split()         # its first line may be this one's tail
                nxt = lookahead[0]
            if nxt is None or isinstance(nxt, (StatsRun, OtherLines)) or nxt.line != last_line + 1 \
                    or not nxt.continues_previous:
                break
            if joined == 0 and rec.anchor_free_with_next and nxt.anchor_free:
                break       # no anchor in the two lines joined, as is or with a space: no signature matches them
            fixed_width = (rec.vllm_prefix and width >= MIN_WRAP_CANDIDATE and segment == width
                           and (joined > 0 or nxt.width == width))
            candidate = message + nxt.message
            new_hits = signatures.match(candidate, budget)
            glue = "" if fixed_width or spaced[-1:].isspace() or nxt.message[:1].isspace() else " "
            spaced_candidate = spaced + glue + nxt.message
            new_spaced_hits = signatures.match(spaced_candidate, budget) if glue else new_hits
            if not (fixed_width or _spans_boundary(new_hits, len(message)) or _more_fields(new_hits, hits)
                    or _spans_boundary(new_spaced_hits, len(spaced)) or _more_fields(new_spaced_hits, spaced_hits)):
                break
            next_record()
            message, hits, last_line, segment = candidate, new_hits, nxt.line, nxt.width
            spaced, spaced_hits = spaced_candidate, new_spaced_hits
            spaced_text, rec.text = spaced_text + glue + nxt.text, rec.text + nxt.text
            reflowed = reflowed or bool(glue)
            joined += 1
        if reflowed and _strength(spaced_hits) >= _strength(hits):
            message, hits, rec.text = spaced, spaced_hits, spaced_text
        proc_key = rec.process
        traceback_body = False
        if not hits and in_traceback.get(proc_key) and _TRACEBACK_BODY.match(message):
            traceback_body = True
        if hits:
            if any(sig.kind in _TRACEBACK_KINDS for sig, _, _ in hits):
                in_traceback[proc_key] = True
            elif not message[:1].isspace():
                in_traceback[proc_key] = False
        elif not traceback_body:
            in_traceback[proc_key] = False
        recognised = bool(hits) or traceback_body
        from_vllm = rec.vllm_prefix or rec.process is not None or any(not sig.generic for sig, _, _ in hits)
        coverage.mark(rec.line, last_line, recognised=recognised, vllm=from_vllm)
        if hits and any(h[0].bulk for h in hits):
            hits = [h for h in hits if not h[0].bulk]   # request traffic: recognised, never an event
        offset = len(rec.text) - len(message)
        known = [(kind, a + offset, b + offset) for kind, a, b in context.spans(message)] if context else []
        if hits:
            redacted, to_redacted = redactor.redact_mapped(rec.text, known)
            for sig, fields, (start, end) in hits:
                text, span = clip(redacted, (to_redacted(start + offset), to_redacted(end + offset)),
                                  MAX_EVIDENCE_CHARS)
                if rec.repeated:
                    fields = {**fields, "repeated": rec.repeated}
                yield LogEvent(sig.kind, sig.id, redactor.fields(fields), rec.process, rec.level, rec.timestamp,
                               SourceRef(name, rec.line, text, span), seq, rec.wall_time)
                seq += 1
        elif not traceback_body and rec.level in ("WARNING", "ERROR", "CRITICAL") and message.strip():
            # Only the start of the line is shown: redact that much (and enough after it for any secret
            # that starts inside it), not a hostile megabyte.
            shown = [(kind, a, min(b, REDACT_WINDOW)) for kind, a, b in known if a < REDACT_WINDOW]
            text, _ = clip(redactor.text(rec.text[:REDACT_WINDOW], shown), None, MAX_EVIDENCE_CHARS)
            in_message = [(kind, a - offset, b - offset) for kind, a, b in shown if a >= offset]
            coverage.unrecognised(rec.level, redactor.text(message[:REDACT_WINDOW], in_message),
                                  SourceRef(name, rec.line, text))
    slow = budget.warning(name)
    if slow:
        parse.warnings.append(slow)
    parse.done = True


# --- merging several files into one incident ------------------------------------------------------

def _keyed(events: Iterable[LogEvent], file_index: int) -> Iterator[tuple[tuple, LogEvent]]:
    """Sort keys from vLLM's yearless timestamps: carried forward over lines without one, and a
    year added when the month wraps (12-31 -> 01-01). File order breaks ties; a file with no
    timestamps at all sorts before the timed ones, in its own order."""
    year = 0
    last: tuple[int, ...] = (0, 0, 0, 0, 0)
    for position, event in enumerate(events):
        key = month_day_time(event.timestamp)
        if key is not None:
            if year_turned(last[0], key[0]):
                year += 1
            last = key
        yield (year, *last, file_index, position), event


def merge_events(per_file: list[Iterable[LogEvent]]) -> Iterator[LogEvent]:
    """One incident from several files, lazily: interleaved by timestamp, renumbered in that order."""
    if len(per_file) == 1:
        yield from per_file[0]
        return
    merged = heapq.merge(*(_keyed(events, i) for i, events in enumerate(per_file)), key=lambda item: item[0])
    for seq, (_, event) in enumerate(merged):
        yield dataclasses.replace(event, seq=seq) if event.seq != seq else event


# --- startup attempts ---------------------------------------------------------------------------

def split_attempts(events: Iterable[LogEvent], signatures: SignatureSet) -> Iterator[Attempt]:
    """Cut the incident where the server starts again: a banner after progress, or an engine
    initialising again after it failed or served. Yields each attempt once it is complete, so a
    crash-looping container's log never has to be held whole; long runs of stats lines and floods of
    one kind are bounded (see `_Bounded`)."""
    current = _Bounded(1)
    failed_or_served = progressed = False
    for event in events:
        sig: Signature | None = signatures.by_id.get(event.signature)
        restart = (event.kind in _BANNER_KINDS and progressed) or (event.kind == "engine_config" and failed_or_served)
        if restart:
            yield current.attempt()
            current = _Bounded(current.index + 1)
            failed_or_served = progressed = False
        current.add(event)
        if sig is None:
            continue
        if (sig.failure and sig.failure != "exception") or sig.phase == "serving":
            failed_or_served = True
        if sig.failure or (sig.phase and PHASE_RANK[sig.phase] >= PHASE_RANK["loading_weights"]):
            progressed = True
    yield current.attempt()


_NOT_CONTEXT = frozenset({"stats", "preemption", "request", "traceback_start", "traceback_frame", "exception",
                          "engine_died"})


def startup_context(before: Sequence[LogEvent], signatures: SignatureSet) -> list[LogEvent]:
    """The settings of the startup still running when a time window begins (`before`: the records before
    it): no failures, no serving."""
    if not before:
        return []
    running = list(split_attempts(before, signatures))[-1].events
    return [e for e in running if e.kind not in _NOT_CONTEXT
            and not ((sig := signatures.by_id.get(e.signature)) and sig.failure)]


class _Bounded:
    """An attempt's events with memory bounded whatever the log size.

    Consecutive stats lines beyond STATS_CAP are merged pairwise into one event per pair (peaks kept:
    the highest KV usage, running and waiting; preemptions and intervals summed), which is what the
    facts and the timeline need. Any other kind keeps its first KIND_HEAD and last KIND_TAIL events.
    """

    def __init__(self, index: int) -> None:
        self.index = index
        self.events: list[LogEvent] = []
        self.stats = 0
        self.per_kind: dict[str, int] = {}
        self.tails: dict[str, collections.deque[LogEvent]] = {}

    def add(self, event: LogEvent) -> None:
        if event.kind == "stats":
            self.stats += 1
            self.events.append(event)
            if self.stats > STATS_CAP:
                self._compact_stats()
            return
        seen = self.per_kind.get(event.kind, 0)
        self.per_kind[event.kind] = seen + 1
        if seen < KIND_HEAD:
            self.events.append(event)
        else:
            self.tails.setdefault(event.kind, collections.deque(maxlen=KIND_TAIL)).append(event)

    def _compact_stats(self) -> None:
        out: list[LogEvent] = []
        pending: LogEvent | None = None
        for event in self.events:
            if event.kind != "stats":
                if pending is not None:
                    out.append(pending)
                    pending = None
                out.append(event)
            elif pending is None:
                pending = event
            else:
                out.append(merge_stats(pending, event))
                pending = None
        if pending is not None:
            out.append(pending)
        self.events = out
        self.stats = sum(1 for e in out if e.kind == "stats")

    def attempt(self) -> Attempt:
        events = self.events
        if self.tails:
            events = sorted(events + [e for tail in self.tails.values() for e in tail], key=lambda e: e.seq)
        return Attempt(index=self.index, events=events)


def merge_stats(a: LogEvent, b: LogEvent) -> LogEvent:
    """Two stats intervals as one: peaks kept, counts summed, the fuller interval's line as evidence, the time of
    the first (`since`) and of the last (its timestamp).

    Called once per stats line of a long log (see _Bounded), so written out rather than generic."""
    fa, fb = a.fields, b.fields
    fields = dict(fb)
    for key in STATS_PEAKS:
        if key in fa:
            if key in fb:
                low, high = fa[key], fb[key]
                fields[key] = high if high > low else low       # max(): the first of equal values
            else:
                fields[key] = fa[key]
    kv_a, kv_b = fa.get("kv_usage", 0.0), fb.get("kv_usage", 0.0)
    fields["intervals"] = fa.get("intervals", 1) + fb.get("intervals", 1)
    fields["kv_usage_sum"] = fa.get("kv_usage_sum", kv_a) + fb.get("kv_usage_sum", kv_b)
    fields["saturated"] = fa.get("saturated", int(kv_a >= KV_SATURATED)) \
        + fb.get("saturated", int(kv_b >= KV_SATURATED))
    fields["saturated_queue"] = _saturated_queue(fa) + _saturated_queue(fb)
    if "preemptions" in fa or "preemptions" in fb:
        fields["preemptions"] = fa.get("preemptions", 0) + fb.get("preemptions", 0)
    since = fa.get("since") or a.timestamp
    if since:
        fields["since"] = since         # the first interval's time: the merged event carries the last one's
    source = a.source if kv_a > kv_b else b.source
    return LogEvent(b.kind, b.signature, fields, b.process, b.level, b.timestamp, source, b.seq, b.wall_time)


def _saturated_queue(fields: Mapping[str, Any]) -> int:
    """Intervals of a (possibly merged) stats event where the cache was full and requests queued."""
    if "saturated_queue" in fields:
        return fields["saturated_queue"]
    return int(fields.get("kv_usage", 0.0) >= KV_SATURATED and bool(fields.get("waiting") or fields.get("swapped")))
