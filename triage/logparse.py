"""Parse logs into recognised events, coverage counts and startup attempts.

Records come from `envelope`; signatures from `signatures`. This stage adds what needs context:
re-joining lines a terminal wrapped, counting traceback bodies as understood, grouping the
WARNING/ERROR lines nothing recognised, merging several files into one incident, and cutting a
log that holds several startups (a restarting container) into attempts.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import regex

from .envelope import Record, records
from .model import PHASE_RANK, CoverageGroup, InputSummary, LogEvent, SourceRef
from .redact import Redactor, clip
from .signatures import Signature, SignatureSet

MAX_EVIDENCE_CHARS = 600
MAX_WRAP_JOIN = 64             # physical lines a wrapped record may span
MIN_WRAP_CANDIDATE = 60        # shorter unmatched lines are not worth re-joining
MAX_COVERAGE_GROUPS = 500

_TRACEBACK_BODY = regex.compile(r"^(?:\s|[\^~]+\s*$|$)")
_TEMPLATE_MASK = regex.compile(r"0x[0-9a-fA-F]+|\d+(?:[.,:]\d+)*|'[^']{24,}'|\"[^\"]{24,}\"")
_BANNER_KINDS = frozenset({"version", "args"})


@dataclass
class ParsedInput:
    """What one log file yielded."""

    summary: InputSummary
    events: list[LogEvent]
    unrecognised: list[CoverageGroup]


@dataclass
class Attempt:
    """One startup of the server, with the events that belong to it, in incident order."""

    index: int
    events: list[LogEvent] = field(default_factory=list)


class _Coverage:
    """Counts physical lines once each, and groups unrecognised WARNING/ERROR lines."""

    def __init__(self) -> None:
        self.recognised = 0
        self.vllm = 0
        self._last_recognised = 0
        self._last_vllm = 0
        self.groups: dict[tuple[str, str], list] = {}

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


def _more_fields(new_hits, old_hits) -> bool:
    """Signatures built from lookaheads match a zero-width span; they gain fields instead."""
    before = {sig.id: len(fields) for sig, fields, _ in old_hits}
    return any(len(fields) > before.get(sig.id, len(fields)) for sig, fields, _ in new_hits)


def parse_log(name: str, lines: Iterable[tuple[int, str]], signatures: SignatureSet, redactor: Redactor,
              seq_start: int = 0) -> ParsedInput:
    """Recognise every line of one log; the result keeps the order of the file."""
    events: list[LogEvent] = []
    coverage = _Coverage()
    in_traceback: dict[str | None, bool] = {}
    lines_read = 0

    def counted(source: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        nonlocal lines_read
        for item in source:
            lines_read = item[0]
            yield item

    stream = records(counted(lines))
    lookahead: list[Record] = []

    def next_record() -> Record | None:
        if lookahead:
            return lookahead.pop(0)
        return next(stream, None)

    def peek() -> Record | None:
        if not lookahead:
            rec = next(stream, None)
            if rec is None:
                return None
            lookahead.append(rec)
        return lookahead[0]

    seq = seq_start
    while True:
        rec = next_record()
        if rec is None:
            break
        message = rec.message
        last_line = rec.line
        hits = signatures.match(message) if message else []
        # A terminal or pager may have wrapped a long line. Take the next line as its tail when a
        # signature then matches across the break or pulls out more fields, or when the lines are
        # cut at one fixed width (every piece but the last exactly as wide as the first).
        joined = 0
        width, segment = rec.width, rec.width
        while joined < MAX_WRAP_JOIN and (hits or len(message) >= MIN_WRAP_CANDIDATE):
            nxt = peek()
            if nxt is None or nxt.line != last_line + 1 or not nxt.continues_previous:
                break
            candidate = message + nxt.message
            new_hits = signatures.match(candidate)
            fixed_width = (rec.vllm_prefix and width >= MIN_WRAP_CANDIDATE and segment == width
                           and (joined > 0 or nxt.width == width))
            if not (fixed_width or _spans_boundary(new_hits, len(message)) or _more_fields(new_hits, hits)):
                break
            next_record()
            message, hits, last_line, segment = candidate, new_hits, nxt.line, nxt.width
            rec.text = rec.text + nxt.text
            joined += 1
        proc_key = rec.process
        traceback_body = False
        if not hits and in_traceback.get(proc_key) and _TRACEBACK_BODY.match(message):
            traceback_body = True
        if hits:
            kinds = {sig.kind for sig, _, _ in hits}
            if kinds & {"traceback_start", "traceback_frame"}:
                in_traceback[proc_key] = True
            elif not message[:1].isspace():
                in_traceback[proc_key] = False
        elif not traceback_body:
            in_traceback[proc_key] = False
        recognised = bool(hits) or traceback_body
        from_vllm = rec.vllm_prefix or rec.process is not None or any(not sig.generic for sig, _, _ in hits)
        coverage.mark(rec.line, last_line, recognised=recognised, vllm=from_vllm)
        if hits:
            redacted, to_redacted = redactor.redact_mapped(rec.text)
            offset = len(rec.text) - len(message)
            for sig, fields, (start, end) in hits:
                text, span = clip(redacted, (to_redacted(start + offset), to_redacted(end + offset)),
                                  MAX_EVIDENCE_CHARS)
                events.append(LogEvent(
                    kind=sig.kind, signature=sig.id, fields=redactor.fields(fields), process=rec.process,
                    level=rec.level, timestamp=rec.timestamp,
                    source=SourceRef(name, rec.line, text, span), seq=seq, wall_time=rec.wall_time))
                seq += 1
        elif not traceback_body and rec.level in ("WARNING", "ERROR", "CRITICAL") and message.strip():
            text, _ = clip(redactor.text(rec.text), None, MAX_EVIDENCE_CHARS)
            coverage.unrecognised(rec.level, redactor.text(message), SourceRef(name, rec.line, text))
    groups = [CoverageGroup(level=lv, template=redactor.text(t), count=c, example=ref)
              for (lv, t), (c, ref) in coverage.groups.items()]
    groups.sort(key=lambda g: (-g.count, g.level, g.template))
    summary = InputSummary(path=name, kind="log", lines_read=lines_read, lines_recognised=coverage.recognised,
                           vllm_lines=coverage.vllm)
    return ParsedInput(summary=summary, events=events, unrecognised=groups)


# --- merging several files into one incident ------------------------------------------------------

_VLLM_TIME = regex.compile(r"^(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)$")
_ISO_TIME = regex.compile(r"^\d{4}-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)")


def _time_key(stamp: str | None) -> tuple[int, ...] | None:
    if not stamp:
        return None
    m = _VLLM_TIME.match(stamp) or _ISO_TIME.match(stamp)
    return tuple(int(g) for g in m.groups()) if m else None


def _keyed(events: list[LogEvent], file_index: int) -> Iterator[tuple[tuple, LogEvent]]:
    """Sort keys from vLLM's yearless timestamps: carried forward over lines without one, and a
    year added when the month wraps (12-31 -> 01-01). File order breaks ties."""
    year = 0
    last: tuple[int, ...] = (0, 0, 0, 0, 0)
    for position, event in enumerate(events):
        key = _time_key(event.timestamp)
        if key is not None:
            if key[0] < last[0] and last[0] == 12 and key[0] == 1:
                year += 1
            last = key
        yield (year, *last, file_index, position), event


def merge_events(per_file: list[list[LogEvent]]) -> list[LogEvent]:
    """One incident from several files: interleave by timestamp when there is one, else by file."""
    if len(per_file) == 1:
        return list(per_file[0])
    timed = all(any(_time_key(e.timestamp) for e in events) for events in per_file if events)
    if not timed:
        return [e for events in per_file for e in events]
    return [event for _, event in heapq.merge(*(_keyed(events, i) for i, events in enumerate(per_file)),
                                              key=lambda item: item[0])]


# --- startup attempts ---------------------------------------------------------------------------

def split_attempts(events: list[LogEvent], signatures: SignatureSet) -> list[Attempt]:
    """Cut the incident where the server starts again: a banner after progress, or an engine
    initialising again after it failed or served."""
    attempts = [Attempt(index=1)]
    failed_or_served = False
    progressed = False
    for event in events:
        sig: Signature | None = signatures.by_id.get(event.signature)
        current = attempts[-1]
        restart = False
        if event.kind in _BANNER_KINDS and progressed:
            restart = True
        elif event.kind == "engine_config" and failed_or_served:
            restart = True
        if restart:
            attempts.append(Attempt(index=len(attempts) + 1))
            current = attempts[-1]
            failed_or_served = progressed = False
        current.events.append(event)
        if sig is None:
            continue
        if sig.failure and sig.failure not in ("exception",):
            failed_or_served = True
        if sig.phase == "serving":
            failed_or_served = True
        if sig.phase and PHASE_RANK[sig.phase] >= PHASE_RANK["loading_weights"]:
            progressed = True
        if sig.failure:
            progressed = True
    return [a for a in attempts if a.events] or [Attempt(index=1)]
