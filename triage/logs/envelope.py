"""Strip what wraps a vLLM log line, keep what identifies it.

A line reaches us through collectors (kubectl/docker timestamps, docker json-file, Loki, CRI,
docker-compose, CI runners, syslog), colour codes (real and the literal remnants CI leaves), and
vLLM's own prefixes (process, torch rank, logger). This module turns each physical line into one or
more `Record`s: the message text signatures match against, plus the process, level and time.
"""
from __future__ import annotations

import bisect
import functools
import itertools
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

try:        # Aho-Corasick in Rust: every mark of a batch of lines in one pass
    import ahocorasick_rs
except ImportError:         # no wheel for this platform: every line is read the full way
    ahocorasick_rs = None  # type: ignore[assignment]  # checked before use

Read = TypeVar("Read")          # what a reader ahead of `records` made of some lines (logs/statsrun.py)

# Real escape sequences, the caret form a terminal copy leaves (^[[0;36m), the forms a JSON envelope
# escapes (\u001b[32m, as docker json-file writes them), and bare remnants ([36m). An OSC sequence
# (ESC ] ... BEL or ESC \) stops at the next ESC, so a line of many unterminated ones stays linear.
_ANSI = re.compile(r"(?:\x1b|\^\[|\\u001[bB]|\\x1[bB]|\\033|\\e)\[[0-9;?]*[A-Za-z]"
                   r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\[\d{1,3}(?:;\d{1,3})*m")
_ANSI_BARE = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")     # its last alternative: the only one without \x1b or \\


def _holds_ansi(text: str) -> bool:
    """`_ANSI.search(text)`; a line with no escape character or backslash (nearly all) needs only the
    bare `[0m` form, a search led by a literal that the regex engine skips to."""
    if "\x1b" in text or "^[" in text or "\\" in text:
        return _ANSI.search(text) is not None
    return _ANSI_BARE.search(text) is not None

_ISO_TIME = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
_SYSLOG_TIME = r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d"
_SYSLOG_SENDER = r" \S+ [\w./-]+(?:\[\d+\])?: "         # host, then program and pid
# Each outer wrapper: a pattern whose `rest` group is what it wraps.
_CRI = re.compile(rf"^(?P<time>{_ISO_TIME}) (?:stdout|stderr) (?P<tag>[FP]) (?P<rest>.*)$", re.S)
_OUTER = (
    re.compile(rf"^(?P<time>{_ISO_TIME})\s+(?:\|\s?)?(?P<rest>.*)$", re.S),            # kubectl/docker -t, collectors
    re.compile(rf"^\[(?P<time>{_ISO_TIME})\]\s?(?P<rest>.*)$", re.S),                 # CI: [2026-...Z] text
    re.compile(r"^(?P<svc>[A-Za-z0-9][\w.-]*)\s+\|\s?(?P<rest>.*)$", re.S),           # docker-compose
    re.compile(r"^ {0,4}\| (?P<rest>.*)$", re.S),                                     # CI: "  | text"
    # syslog
    re.compile(rf"^(?P<time>{_SYSLOG_TIME}){_SYSLOG_SENDER}(?P<rest>.*)$", re.S),
    # DJL Serving
    re.compile(r"^\[(?:INFO|WARN|ERROR|DEBUG) ?\] PyProcess - W-\S+?-(?:stdout|stderr): (?P<rest>.*)$", re.S),
    # FastChat
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \| (?:stdout|stderr|[\w.]+) \| (?P<rest>.*)$", re.S),
)
_SYSLOG = _OUTER[4]
_JSON_TEXT_KEYS = ("log", "message", "msg", "MESSAGE", "line")
_JSON_TIME_KEYS = ("time", "timestamp", "ts", "@timestamp", "asctime")

# vLLM's own prefixes: any number of "(Name pid=N[, ip=...]) ", torch's "[rankN]: ", then the logger
# prefix "LEVEL MM-DD HH:MM:SS [file.py:N] " (brackets from 0.8.0; a path at DEBUG from 0.10.2).
_PROCESS = re.compile(r"\((?P<name>[^()]*?)\s?pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s*")
# The same group at the start of a line a paste cut into: its "(" lost ("EngineCore_DP0 pid=12) ERROR ...").
_PROCESS_CUT = re.compile(r"(?P<name>[A-Za-z_][\w.-]*(?: [\w.=-]+)*) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s*")
_RANK = re.compile(r"\[rank(?P<rank>\d+)\]:\s?")
_LOGGER = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<date>\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d)(?:[.,]\d+)? "
    r"\[?(?P<file>[^\]\s]+?):(?P<lineno>\d+)\] ?")
# The logger prefix a paste cut into, its level and the start of its date gone ("3 10:00:45 [core.py:718] ").
_LOGGER_CUT = re.compile(r"(?:\d{1,2}(?:-\d\d)? )?\d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w./-]+\.py:\d+\] ?")
_UVICORN = re.compile(r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
# vLLM's loggers under a host program's logging config (VLLM_CONFIGURE_LOGGING=0, frameworks that own logging):
# "INFO:vllm.worker.worker:msg" (basicConfig) and "- vllm.engine.llm_engine - INFO - msg" (its time stripped).
_HOST_LOGGING = re.compile(r"(?:(?P<level1>DEBUG|INFO|WARNING|ERROR|CRITICAL):vllm[\w.]*:|-?\s*vllm[\w.]*\s+-\s+"
                           r"(?P<level2>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+-\s+)")
# vLLM's own record behind a wrapper vtriage does not know ("[Stage-1] INFO 05-01 ...", a framework's tag).
_EMBEDDED_RECORD = re.compile(r"(?:\([^()]*?pid=\d+[^()]*\)\s*)*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                              r"\d\d-\d\d \d\d:\d\d:\d\d[ .,]")
EMBEDDED_WINDOW = 200    # a wrapper's tag is short: look no further for vLLM's prefix
# Ray's log deduplication appends this to a line several actors printed alike.
_RAY_REPEATED = re.compile(r"\s*\[repeated (?P<times>\d+)x across cluster\]\s*$")
# A logger record glued onto the end of something else (a tqdm bar, another record) with no newline.
# A "(... pid=N ...)" group is read as one run to its ")" and checked for pid= by a lookahead that
# cannot pass a parenthesis: linear, where a lazy scan for each "pid=" was quadratic on "(pid=1pid=1...".
_GLUED = re.compile(
    r"(?<=\S)(?=(?:\((?=[^()]*pid=\d)[^()]*\)\s*)*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d[ .,])")
# A record a paste flattened onto the line before it, after a space: a second logger prefix in one line (as
# _GLUED, with the file token too, so a message that mentions a level word and a time is not cut), or
# uvicorn's "INFO:     " with its run of spaces.
_SPACED = re.compile(
    r"\s+(?=(?:\((?=[^()]*pid=\d)[^()]*\)\s*)*(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: \d\d-\d\d \d\d:\d\d:\d\d"
    r"(?:[.,]\d+)? \[?[^\]\s]+?:\d+\] |:\s{2,}\S))")
# Lines that begin a record of their own, as opposed to the tail of a line a terminal wrapped.
_RECORD_START = re.compile(
    r"^(?:\s\s|\t|Traceback |During handling|The above exception|[\w.]+(?:Error|Exception|Warning|Exit)\b"
    r"|Process \w+:|INFO|WARNING|ERROR|DEBUG|CRITICAL|\[|\([^()]*?pid=\d|#|$)")


@dataclass(slots=True)
class Record:
    """One logical log record, cleaned: what the signatures read and what the evidence shows."""

    line: int                # physical line number of its first line
    text: str                # the line without collector wrappers and colour codes (for evidence)
    message: str             # `text` without vLLM's process and logger prefixes (what signatures match)
    process: str | None
    level: str | None
    timestamp: str | None    # vLLM's "MM-DD HH:MM:SS", or the collector's time when vLLM printed none
    vllm_prefix: bool        # carried vLLM's logger prefix
    prefixed: bool           # carried any prefix at all (so it starts a record)
    width: int = 0           # characters on its physical line, as a terminal shows it (for wrap detection)
    wall_time: str | None = None   # the collector's own time (kubectl/docker ISO, syslog), which may carry a year
    repeated: int = 0        # Ray's "[repeated Nx across cluster]": N more actors printed this line
    anchor_free: bool = False  # its line holds no signature anchor: no signature can match it alone
    # ... nor its line joined to the next one, as is or with a space, or the next line begins a record of its own
    anchor_free_with_next: bool = False

    @property
    def continues_previous(self) -> bool:
        """True when this looks like the tail of a line a terminal or pager wrapped."""
        return not self.prefixed and not _RECORD_START.match(self.message)


def strip_ansi(text: str) -> str:
    if "\x1b" in text or "[" in text:
        return _ANSI.sub("", text)
    return text


def _unwrap_json(text: str) -> tuple[str, str | None, str | None, str | None, bool] | None:
    """A JSON-lines envelope: (content, time, level, process, partial) or None when not JSON."""
    import json  # here: a log without such a line (most) does not load it
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):     # not JSON, or nested deeper than any envelope is
        return None
    if not isinstance(obj, dict):
        return None
    content = None
    for key in _JSON_TEXT_KEYS:
        value = obj.get(key)
        if isinstance(value, str):
            content = value
            break
    if content is None:
        return None
    when = next((str(obj[k]) for k in _JSON_TIME_KEYS if isinstance(obj.get(k), (str, int, float))), None)
    level = obj.get("levelname") or obj.get("level")
    process = None
    if obj.get("processName") and obj.get("process"):
        process = f"{obj['processName']} pid={obj['process']}"
    partial = "log" in obj and not content.endswith("\n")  # docker json-file splits lines over 16 KiB
    content = content.rstrip("\n").rstrip("\r")
    return content, when, str(level).upper() if isinstance(level, str) else None, process, partial


def _unwrap_outer(text: str) -> tuple[str, str | None, str | None, str | None, bool, bool]:
    """Peel collector wrappers: (content, wall time, level, process, partial, was_wrapped)."""
    when = level = process = None
    partial = wrapped = False
    for _ in range(4):  # wrappers stack (a CI prefix around a kubectl timestamp around JSON)
        if text.startswith("{") and text.rstrip().endswith("}") or text.startswith('{"'):
            got = _unwrap_json(text)
            if got is not None:
                text, t, lv, proc, partial = got
                when, level, process = t or when, lv or level, proc or process
                wrapped = True
                continue
        m = _CRI.match(text)
        if m:
            text, when, partial, wrapped = m["rest"], m["time"], m["tag"] == "P", True
            continue
        for pattern in _OUTER:
            m = pattern.match(text)
            if m:
                text = m["rest"]
                when = m.groupdict().get("time") or when
                wrapped = True
                break
        else:
            break
    return text, when, level, process, partial, wrapped


_LEVEL_WORDS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _may_hold_glued_record(piece: str) -> bool:
    """Where _GLUED could split: a non-space right before a "(... pid=N)" group or a level word.
    A cheap check that never says no where _GLUED would split, so most lines skip its slow scan."""
    if "pid=" in piece:
        at = piece.find("(", 1)
        while at != -1:                  # a "(" right after a non-space (str.isspace is the regex's \s)
            if not piece[at - 1].isspace():
                return True
            at = piece.find("(", at + 1)
    for word in _LEVEL_WORDS:
        at = piece.find(word, 1)
        while at != -1:
            if not piece[at - 1].isspace():
                return True
            at = piece.find(word, at + 1)
    return False


def _holds_level_word(window: str) -> bool:
    return any(word in window for word in _LEVEL_WORDS)


def _may_hold_spaced_record(piece: str) -> bool:
    """Where _SPACED could split: a level word after a space, past the line's own prefix."""
    for word in _LEVEL_WORDS:
        if f" {word} " in piece or f" {word}:  " in piece:
            return True
    return False


def _split_segments(text: str) -> list[str]:
    """tqdm rewrites a line with \\r; records get glued onto bars, or a paste flattens them onto one line. One
    piece per record."""
    pieces = [p for p in text.split("\r") if p.strip()] if "\r" in text else [text]
    out: list[str] = []
    for piece in pieces:
        parts = _GLUED.split(piece) if _may_hold_glued_record(piece) else [piece]
        for part in parts:
            if part and _may_hold_spaced_record(part):
                out.extend(_split_spaced(part))
            elif part:
                out.append(part)
    return out or [""]


_PROCESS_END = re.compile(r"\((?=[^()]*pid=\d)[^()]*\)$")
PROCESS_GROUP_MAX = 200          # a "(Name pid=N, ip=...)" group is short: look no further back for one


def _split_spaced(part: str) -> list[str]:
    """A flattened paste's records: cut before every logger prefix after the first one (what comes before the
    first, a process group or a collector's tag, stays with it), never between a record's process group and
    its logger prefix."""
    first = _LOGGER.search(part)
    if first is None:
        return [part]
    pieces, start = [], 0
    for m in _SPACED.finditer(part, first.end()):
        if _PROCESS_END.search(part, max(start, m.start() - PROCESS_GROUP_MAX), m.start()):
            continue
        pieces.append(part[start:m.start()])
        start = m.end()
    pieces.append(part[start:])
    return [p for p in pieces if p]


def process_label(name: str | None, pid: str) -> str:
    """A "(Name pid=N)" group as records name their process: `Name pid=N`, or `pid=N` without a name (Ray)."""
    return f"{name} pid={pid}" if name else f"pid={pid}"


def _process_groups(text: str, pos: int, names: list[str]) -> int:
    """Read "(Name pid=N)" groups from `pos`, nested ones too, into `names`; return where they end."""
    while m := _PROCESS.match(text, pos):
        names.append(process_label(m["name"].strip(), m["pid"]))
        pos = m.end()
    return pos


def _parse_prefixes(text: str, line: int, when: str | None, level: str | None, process: str | None,
                    wrapped: bool, width: int = 0, embedded: bool = False) -> Record:
    """The prefixes of one record; `embedded` when it was found inside another line's text (looked for
    once: a line of nothing but level words must not recurse once per word)."""
    prefixed = wrapped
    names: list[str] = []
    pos = _process_groups(text, 0, names)
    if not names and (m := _PROCESS_CUT.match(text)):
        names.append(process_label(m["name"].strip(), m["pid"]))
        pos = m.end()
    m = _RANK.match(text, pos)
    if m:
        names.append(f"rank{m['rank']}")
        pos = _process_groups(text, m.end(), names)     # a "(Name pid=N)" may follow the rank marker too
    if names:
        prefixed = True
        process = names[-1] if len(names) == 1 or not names[-1].startswith("rank") else " ".join(names[-2:])
    vllm_prefix = False
    timestamp = None
    m = _LOGGER.match(text, pos)
    if m:
        level, timestamp, vllm_prefix, prefixed = m["level"], f"{m['date']} {m['time']}", True, True
        pos = m.end()
    elif m := _UVICORN.match(text, pos):
        level, prefixed = m["level"], True
        pos = m.end()
    elif m := _HOST_LOGGING.match(text, pos):
        level, prefixed, vllm_prefix = m["level1"] or m["level2"], True, True
        pos = m.end()
    elif pos == 0 and (m := _LOGGER_CUT.match(text)):
        prefixed, vllm_prefix = True, True
        pos = m.end()
    elif not names and pos == 0 and not embedded and _holds_level_word(text[:EMBEDDED_WINDOW]):
        inner = _EMBEDDED_RECORD.search(text, 1, EMBEDDED_WINDOW)
        if inner is not None:
            record = _parse_prefixes(text[inner.start():], line, when, level, process, True, width, embedded=True)
            record.text = text
            return record
    message = text[pos:]
    repeated = 0
    if message.endswith("across cluster]") and (m := _RAY_REPEATED.search(message)):
        message, repeated = message[:m.start()], int(m["times"])
    return Record(line=line, text=text, message=message, process=process, level=level, repeated=repeated,
                  timestamp=timestamp or when, vllm_prefix=vllm_prefix, prefixed=prefixed, width=width,
                  wall_time=when)


# The shape nearly every line of a vLLM log has: at most one "(Name pid=N)" group, then the logger
# prefix, no collector wrapper, colour code, carriage return or glued record. Built from the same
# pieces `_parse_prefixes` reads (the process group atomic, as its own match is), so where this
# matches and the checks in `plain_record` pass, the full path gives the very same record.
_PLAIN = re.compile(r"(?>" + _PROCESS.pattern + r")?" + _LOGGER.pattern)


# The same prefix at DEBUG or INFO, as bytes, for the block scanner's quiet lines (sources/scan.py): a
# stricter form of _PLAIN (ASCII words for the process name, an IP of hex digits, dots and colons, a file
# token of word characters, dots, slashes and dashes not starting with a digit where an escape code could
# hide, single spaces), so where it matches _PLAIN matches too and ends at the same place; and the
# message after it starts with a printable character other than ^ or ~, so it is never a traceback's body.
# No part before the file token's closing `]` takes a `]`: scan.QuietLines matches it once per form of a line's
# start up to its first `]` and the two bytes after.
QUIET_HEAD = (rb"(?:\((?:(?!pid=)[A-Za-z_][\w.=-]*+(?: (?!pid=)[A-Za-z_][\w.=-]*+)*+)? ?pid=[0-9]++"
              rb"(?:, ip=[0-9A-Fa-f.:]*+)?\) *+)?"
              rb"(?:DEBUG|INFO) [0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9](?:[.,][0-9]++)? "
              rb"\[?(?![0-9])[\w./-]++:[0-9]++\] ?(?=[!-\]_-}])")     # possessive: no backtracking
# What makes a line with that prefix anything but plain after it (see plain_record): a carriage return, an
# escape code or its bare `[0m` form, a glued record's level word or process group, Ray's repeat marker,
# a NUL byte the reader drops (it could join two pieces into an anchor).
QUIET_STOPS = (b"\r", b"\x1b", b"\\", b"^[", *(b"[%d" % d for d in range(10)), *(w.encode() for w in _LEVEL_WORDS),
               b"pid=", b"across cluster]", b"\x00")


# vLLM's prefix of an INFO line in a form stricter still (ASCII process name and file, one space between the
# parts), for the stats lines logs/statsrun.py reads in one match with what follows it: where it matches,
# _PLAIN matches and ends at the same place, gives the same process, level and time, and no check in
# plain_record can fail on it (tests/test_properties.py). `at` is where the message starts.
STATS_PREFIX = (r"(?:\((?:(?P<name>[A-Za-z_][\w.-]{0,63}) )?pid=(?P<pid>[0-9]{1,10})\) )?"
                r"(?P<level>INFO) (?P<date>[0-9][0-9]-[0-9][0-9]) (?P<time>[0-9][0-9]:[0-9][0-9]:[0-9][0-9])"
                r"(?:[.,][0-9]{1,9})? \[?(?P<file>[A-Za-z_][\w./-]{0,200}):[0-9]{1,9}\] (?P<at>)")


def plain_record(number: int, raw: str) -> Record | None:
    """The record of a line of that common shape, read in one match; None for any other line."""
    m = _PLAIN.match(raw)
    if m is None or "\r" in raw or _holds_ansi(raw) \
            or (_may_hold_glued_record(raw) and _GLUED.search(raw)) or raw.endswith("across cluster]") \
            or (_may_hold_spaced_record(raw[m.end():]) and _SPACED.search(raw, m.end())):
        return None
    process = None if m["pid"] is None else process_label(m["name"].strip(), m["pid"])
    return Record(number, raw, raw[m.end():], process, m["level"], f"{m['date']} {m['time']}", True, True,
                  len(raw), None)


# What the envelope reads in an ASCII line besides its plain text, as literals: a line holding none of them (and no
# anchor) is its own message, and reading it needs no pattern (`unmarked_record`). Each is a superset of what a
# pattern above needs: a collector's wrapper at the line's start (JSON, an ISO time, CI's `[ISO]`, DJL's
# `[LEVEL`; "\n" marks a line's start in the joined batch), colour codes and their remnants (an escape, `^[`, its
# escaped forms, `<digit>m`), a carriage return, a process group or a cut one (`pid=`), torch's rank, the logger
# prefix and its cut form (a level word then two digits and a dash, or a colon; `.py:`), a host program's logging
# (`vllm`) and Ray's repeat marker. A `|` (docker-compose, CI, FastChat) matters only where _PIPED says so, a
# `vllm` only where _HOST_LEAD says so. The patterns' \d and \s take other scripts' digits and spaces too: a line
# that is not ASCII is read the full way.
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_DIGIT_CHARS = "0123456789"
PIPE = "|"
HOST = "vllm"
ENVELOPE_MARKS = (
    "\n{", *(f"\n{d}" for d in _DIGIT_CHARS), *(f"\n[{d}" for d in _DIGIT_CHARS),
    *(f"\n[{level}" for level in ("INFO", "WARN", "ERROR", "DEBUG")),
    "\x1b", "^[", "\\u001b", "\\u001B", "\\x1b", "\\x1B", "\\033", "\\e", *(f"{d}m" for d in _DIGIT_CHARS),
    "\r", "pid=", "[rank", ".py:", HOST, "across cluster]",
    *(f"{level}:" for level in _LEVELS),
    *(f"{level} {d}{e}-" for level in _LEVELS for d in _DIGIT_CHARS for e in _DIGIT_CHARS),
    PIPE,
)
# Where a `|` makes a wrapper: docker-compose's service, CI's and FastChat's prefixes, at the line's start.
_PIPED = re.compile(r"[A-Za-z0-9][\w.-]*\s+\||\s{0,4}\||(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \|")
# Where a `vllm` may begin _HOST_LOGGING's second form (`- vllm.engine.llm_engine - INFO - `): the pattern is
# matched where the prefixes are read, which in a line holding no other mark is the line's start or a syslog
# line's message after its `: `; a dash and spaces may come before it. A `vllm` elsewhere (a pod, image or unit
# name: `pod="serving/vllm-0"`) is text.
_HOST_LEAD = re.compile(r"(?:\A|:)[-\s]*\Z")
# What a syslog line's message may start with that the envelope would unwrap again.
_INNER_WRAPPER = re.compile(rf"\{{|{_ISO_TIME}|\[{_ISO_TIME}\]|\[(?:INFO|WARN|ERROR|DEBUG)|{_PIPED.pattern}|"
                            rf"{_SYSLOG.pattern[1:]}", re.S)
# Syslog lines among a batch's lines joined, each after a newline (the search skips to it), their sender's parts
# possessive (what follows each cannot be in it): such a line begins a record of its own whichever way it is read.
# `wrapping` where its message starts as _INNER_WRAPPER does, which `unmarked_record` leaves to the full way; its
# \s can run on into the next line, which only makes it find more.
_SYSLOG_LINE = re.compile(rf"\n{_SYSLOG_TIME} \S++ [\w./-]++(?:\[\d+\])?: (?P<wrapping>\{{|{_ISO_TIME}|\[{_ISO_TIME}\]|"
                          rf"\[(?:INFO|WARN|ERROR|DEBUG)|{_PIPED.pattern}|{_SYSLOG_TIME}{_SYSLOG_SENDER})?")
BATCH_LINES = 512          # lines searched for the marks in one pass


def records(lines: Iterable[tuple[int, str] | Read], anchors: Sequence[str] = ()) -> Iterator[Record | Read]:
    """Turn numbered physical lines into cleaned records, joining lines a collector split. What is not a
    numbered line (a run of stats lines read already, logs/statsrun.py) is passed on in its place. Given the
    signatures' `anchors`, a line holding none of them nor anything the envelope reads is made a record of in one
    step, marked `anchor_free` (and `anchor_free_with_next` where no anchor spans it and the next line either)."""
    for item in records_and_others(lines, anchors):
        if isinstance(item, OtherLines):
            yield from map(item.record, range(len(item.numbers)))
        else:
            yield item


def records_and_others(lines: Iterable[tuple[int, str] | Read], anchors: Sequence[str] = ()
                       ) -> Iterator[Record | OtherLines | Read]:
    """`records`, but consecutive lines that no signature or envelope pattern can read, alone or joined to the next
    (`OtherLines`), come as one item: a node's syslog, NCCL INFO output, a training script's prints."""
    return _records_unwrapped(_with_marks(lines, _marks_of(tuple(anchors))), plain_record)


@dataclass(frozen=True, slots=True)
class OtherLines:
    """Consecutive lines of other programs, each holding no anchor and nothing the envelope reads, alone or joined
    to the next line, which is one such line too: no signature can match them and no wrapped line continues into
    them, so the parser needs nothing of them but what a line may say about the ones after it (a traceback's body
    goes on, a secret's context). `text` is the lines joined by newlines; a line's record is made where asked."""

    numbers: list[int]
    raws: list[str]
    text: str

    def record(self, at: int) -> Record:
        rec = unmarked_record(self.numbers[at], self.raws[at], True, True)
        assert rec is not None, "a line no wrapper reads inside a syslog message"    # how these lines are chosen
        return rec

    def split(self) -> list[Record | OtherLines]:
        """The first line's record, then the other lines (if any)."""
        rest = OtherLines(self.numbers[1:], self.raws[1:], self.text[len(self.raws[0]) + 1:])
        return [self.record(0), rest] if rest.numbers else [self.record(0)]


def unmarked_record(number: int, raw: str, anchor_free: bool = False, with_next: bool = False) -> Record | None:
    """The record of a line holding none of ENVELOPE_MARKS, as the full way reads it: the line itself, or a
    syslog line's message with its time; None where that message starts with another wrapper (read the full way).
    """
    m = _SYSLOG.match(raw)
    if m is None:
        return Record(number, raw, raw, None, None, None, False, False, len(raw), None, 0, anchor_free, with_next)
    message = m["rest"]
    if _INNER_WRAPPER.match(message):
        return None
    when = m["time"]
    return Record(number, message, message, None, None, when, False, True, len(raw), when, 0, anchor_free, with_next)


@dataclass(frozen=True)
class _Marks:
    """The searches of a batch of lines: `marks` for ENVELOPE_MARKS and the anchors, `anchors` for the anchors alone
    (None, None without the wheel; `anchors` None too when there are none or one holds a newline, which no line
    does: then no line is called anchor free)."""

    marks: Any
    anchors: Any
    pipe: int = -1          # PIPE's index among the marks, -1 where an anchor holds a `|` (then a `|` marks a line)
    host: int = -1          # HOST's index among the marks, -1 where an anchor holds it (then it marks a line)
    # The words the search may have passed over for a HOST found, those that begin inside it: where in HOST they
    # would begin, and those words
    after_host: tuple[tuple[int, tuple[str, ...]], ...] = ()


@functools.lru_cache(maxsize=4)
def _marks_of(anchors: tuple[str, ...]) -> _Marks:
    """Built once per set of anchors (a few milliseconds). The search reports the match that ends first and
    resumes after it: a `|` found could hide an anchor holding one, so a `|` is weighed apart only where no anchor
    holds one; a `vllm` only where none holds it, and a word that begins inside it is looked for where it is
    weighed apart (`after_host`). A word that ends inside it ends first, and is found."""
    if ahocorasick_rs is None:
        return _Marks(None, None)
    usable = bool(anchors) and not any("\n" in anchor for anchor in anchors)
    pipe = -1 if any(PIPE in anchor for anchor in anchors) else ENVELOPE_MARKS.index(PIPE)
    host = -1 if any(HOST in anchor for anchor in anchors) else ENVELOPE_MARKS.index(HOST)
    words = {*ENVELOPE_MARKS, *anchors} - {HOST}
    after_host = tuple((at, found) for at in range(1, len(HOST))
                       if (found := tuple(sorted(word for word in words if word.startswith(HOST[at:])))))
    return _Marks(ahocorasick_rs.AhoCorasick([*ENVELOPE_MARKS, *(anchors if usable else ())]),
                  ahocorasick_rs.AhoCorasick(list(anchors)) if usable else None, pipe, host, after_host)


_Marked = tuple[tuple[int, str], bool, bool, bool]      # a line, unmarked, anchor free, anchor free with the next


@dataclass(frozen=True, slots=True)
class _MarkedBatch:
    """A batch's lines with what the search found (`_marked`), and the lines that make OtherLines (`_others`)."""

    lines: list[_Marked]
    others: bytes           # 1 for a line of OtherLines
    joined: str             # the lines joined, each after a newline
    starts: list[int]       # where each line starts in `joined`


def _with_marks(lines: Iterable[tuple[int, str] | Read], marks: _Marks) -> Iterator[_MarkedBatch | Read]:
    """The lines with what the batch search found (`_marked`), a batch at a time; anything else passed on as it
    is. The lines are searched BATCH_LINES at a time."""
    batch: list[tuple[int, str]] = []
    for item in lines:
        if isinstance(item, tuple):
            batch.append(item)
            if len(batch) < BATCH_LINES:
                continue
            if batch:
                yield _marked(batch, marks)
            batch = []
        else:
            if batch:
                yield _marked(batch, marks)
            batch = []
            yield item
    if batch:
        yield _marked(batch, marks)


def _others(unmarked: list[bool], with_next: list[bool], wrapping: list[int]) -> bytes:
    """Which lines are OtherLines' (1): anchor free with the next line, which is unmarked too (so the parser never
    joins the two), and not among the syslog lines whose message `unmarked_record` leaves to the full way
    (`wrapping`)."""
    others = bytearray(map(operator.and_, with_next, [*unmarked[1:], False]))
    for line in wrapping:
        others[line] = 0
    return bytes(others)


def _marked(batch: list[tuple[int, str]], marks: _Marks) -> _MarkedBatch:
    """Which lines of the batch hold none of the marks, in one search over their text joined; of those, where the
    anchors are among the marks, which hold no anchor joined to the next line either (`_clear_spans`). The batch's
    last line is not known with the next."""
    if marks.marks is None:
        return _MarkedBatch([(item, False, False, False) for item in batch], bytes(len(batch)), "", [])
    texts = [text for _, text in batch]
    joined = "\n" + "\n".join(texts)
    starts = _starts(texts, 1, 1)       # after the newline that leads each line
    found = marks.marks.find_matches_as_indexes(joined) if joined.isascii() else None
    if found is None:
        unmarked = [text.isascii() for text in texts]
        if not any(unmarked):
            return _MarkedBatch([(item, False, False, False) for item in batch], bytes(len(batch)), joined, starts)
        found = marks.marks.find_matches_as_indexes(joined.encode("ascii", "replace").decode())   # each in its place
    else:
        unmarked = [True] * len(batch)
    next_start = 0          # a match ending before this is in a line marked already
    for word, start, end in found:
        if end - 1 >= next_start:       # the match's last character decides its line: "\n{" is the next line's
            line = bisect.bisect_right(starts, end - 1) - 1
            if word == marks.pipe and not _PIPED.match(texts[line]):
                continue        # a `|` no wrapper reads: the line's other marks may still mark it
            if word == marks.host and not _HOST_LEAD.search(texts[line], 0, start - starts[line]) \
                    and not any(joined.startswith(others, start + at) for at, others in marks.after_host):
                continue        # a `vllm` where no host program's logger name begins: likewise
            unmarked[line] = False
            next_start = starts[line + 1] if line + 1 < len(starts) else end
    free = marks.anchors is not None
    with_next = [free and flag for flag in unmarked]
    with_next[-1] = False
    wrapping = []
    if free and any(with_next):
        # A line before a syslog line is never joined to it: only the others need the search for spanning anchors.
        syslog = bytearray(len(batch) + 1)
        for m in _SYSLOG_LINE.finditer(joined):
            line = bisect.bisect_right(starts, m.start() + 1) - 1
            syslog[line] = 1
            if m["wrapping"] is not None:
                wrapping.append(line)
        if any(map(operator.gt, with_next, syslog[1:])):
            _clear_spans(with_next, [text if flag else "\n" for text, flag in zip(texts, unmarked)], marks.anchors)
    lines = [(item, flag, free and flag, together) for item, flag, together in zip(batch, unmarked, with_next)]
    return _MarkedBatch(lines, _others(unmarked, with_next, wrapping), joined, starts)


def _clear_spans(with_next: list[bool], pieces: list[str], anchors: Any) -> None:
    """Mark False in `with_next` each line whose end an anchor may span when the lines are joined as is or with a
    space. `pieces`: the lines, those holding an anchor or a mark as a newline, which no anchor holds: so an anchor
    found in them joined spans two lines free of anchors (or a line and the space after it)."""
    for glue in ("", " "):
        starts = _starts(pieces, len(glue))
        for _, start, end in anchors.find_matches_as_indexes(glue.join(pieces), overlapping=True):
            for line in range(bisect.bisect_right(starts, start) - 1, bisect.bisect_right(starts, end - 1)):
                with_next[line] = False


def _starts(texts: list[str], gap: int, first: int = 0) -> list[int]:
    """Where each text starts in them joined with `gap` characters between, the first at `first`."""
    starts = list(itertools.accumulate(map(gap.__add__, map(len, texts)), initial=first))
    starts.pop()
    return starts


def _records_unwrapped(items: Iterable[_MarkedBatch | Read],
                       plain: Callable[[int, str], Record | None] = lambda number, raw: None
                       ) -> Iterator[Record | OtherLines | Read]:
    """`records_and_others` over batches marked as `_with_marks` marks them, with `plain` reading the common shape
    in one step (None: every line the full way)."""
    pending: tuple[int, str] | None = None      # a partial line (docker 16 KiB split, CRI "P")
    for item in items:
        if not isinstance(item, _MarkedBatch):
            yield item
            continue
        lines, others, end = item.lines, item.others, len(item.lines)
        at = 0
        while at < end:
            if pending is None and others[at]:
                stop = others.find(0, at)
                stop = end if stop == -1 else stop
                last = item.starts[stop - 1] + len(lines[stop - 1][0][1])
                yield OtherLines([number for (number, _), _, _, _ in lines[at:stop]],
                                 [raw for (_, raw), _, _, _ in lines[at:stop]], item.joined[item.starts[at]:last])
                at = stop
                continue
            (number, raw), unmarked, anchor_free, with_next = lines[at]
            at += 1
            if pending is None:
                rec = unmarked_record(number, raw, anchor_free, with_next) if unmarked else plain(number, raw)
                if rec is not None:
                    yield rec
                    continue
            text = strip_ansi(raw)
            content, when, level, process, partial, wrapped = _unwrap_outer(text)
            if wrapped:
                content = strip_ansi(content)
            if pending is not None:
                number, content = pending[0], pending[1] + content
                pending = None
            if partial:
                pending = (number, content)
                continue
            for segment in _split_segments(content):
                yield _parse_prefixes(segment, number, when, level, process, wrapped, len(text))
    if pending is not None:
        yield _parse_prefixes(pending[1], pending[0], None, None, None, True)
