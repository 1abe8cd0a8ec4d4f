"""Strip what wraps a vLLM log line, keep what identifies it.

A line reaches us through collectors (kubectl/docker timestamps, docker json-file, Loki, CRI,
docker-compose, CI runners, syslog), colour codes (real and the literal remnants CI leaves), and
vLLM's own prefixes (process, torch rank, logger). This module turns each physical line into one or
more `Record`s: the message text signatures match against, plus the process, level and time.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, TypeVar

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
# Each outer wrapper: a pattern whose `rest` group is what it wraps.
_CRI = re.compile(rf"^(?P<time>{_ISO_TIME}) (?:stdout|stderr) (?P<tag>[FP]) (?P<rest>.*)$", re.S)
_OUTER = (
    re.compile(rf"^(?P<time>{_ISO_TIME})\s+(?:\|\s?)?(?P<rest>.*)$", re.S),            # kubectl/docker -t, collectors
    re.compile(rf"^\[(?P<time>{_ISO_TIME})\]\s?(?P<rest>.*)$", re.S),                 # CI: [2026-...Z] text
    re.compile(r"^(?P<svc>[A-Za-z0-9][\w.-]*)\s+\|\s?(?P<rest>.*)$", re.S),           # docker-compose
    re.compile(r"^ {0,4}\| (?P<rest>.*)$", re.S),                                     # CI: "  | text"
    # syslog
    re.compile(r"^(?P<time>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) \S+ [\w./-]+(?:\[\d+\])?: (?P<rest>.*)$", re.S),
    # DJL Serving
    re.compile(r"^\[(?:INFO|WARN|ERROR|DEBUG) ?\] PyProcess - W-\S+?-(?:stdout|stderr): (?P<rest>.*)$", re.S),
    # FastChat
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \| (?:stdout|stderr|[\w.]+) \| (?P<rest>.*)$", re.S),
)
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


def records(lines: Iterable[tuple[int, str] | Read]) -> Iterator[Record | Read]:
    """Turn numbered physical lines into cleaned records, joining lines a collector split. What is not a
    numbered line (a run of stats lines read already, logs/statsrun.py) is passed on in its place."""
    return _records_unwrapped(lines, plain_record)


def _records_unwrapped(lines: Iterable[tuple[int, str] | Read],
                       plain: Callable[[int, str], Record | None] = lambda number, raw: None
                       ) -> Iterator[Record | Read]:
    """`records`, with `plain` reading the common shape in one step (None: every line the full way)."""
    pending: tuple[int, str] | None = None      # a partial line (docker 16 KiB split, CRI "P")
    for item in lines:
        if not isinstance(item, tuple):
            yield item
            continue
        number, raw = item
        if pending is None:
            rec = plain(number, raw)
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
