"""Set aside the bulk of a large log without parsing it line by line.

A busy vLLM server's log is mostly request logging (`Received request ...: prompt: '...'`) and
uvicorn access lines. Signatures marked `bulk` describe them. Per block of the input, each line's
first HEAD_WINDOW bytes are searched for the bulk anchors, no decoding (one regex search a line, and none
at all in a block that lacks the text every anchor shares). Those lines are counted, never parsed, and everything else
(startup, stats, warnings, errors, tracebacks) keeps its line number and goes to the parser. Skipping
request logging is right on its own terms too: a prompt that quotes an error message is not that error.
Pure functions over bytes; reading and processes live in `sources`.
"""
from __future__ import annotations

import bisect
import functools
import itertools
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

try:
    import ahocorasick_rs
except ImportError:      # no wheel for this platform: quiet lines are parsed like any other
    ahocorasick_rs = None  # type: ignore[assignment]  # checked before use

HEAD_WINDOW = 240          # a bulk line's anchor sits near its start; past that it is prompt text
QUIET_MAX_BYTES = 4096     # a longer line is parsed (the reader cuts lines far longer; noise is short)


MIN_SHARED = 3             # a shared piece shorter than this is no better than the plain alternation


@dataclass(frozen=True)
class BulkPattern:
    """One search for any of a group of bulk anchors, and a piece of text each of them holds."""

    regex: re.Pattern[bytes]
    needle: bytes               # in every anchor: a block without it holds no bulk line (b"": no such piece)
    anchors: tuple[bytes, ...]


def bulk_pattern(anchors: Iterable[bytes]) -> BulkPattern:
    """One search for any of `anchors`.

    When the anchors share a piece of text (`ed re` in `Received request `, `Added request `, ...,
    `Generated response `), the pattern starts with it: the regex engine then jumps from one occurrence
    of that literal to the next instead of trying every alternative at every position, which is two to
    three times faster per line. A lookbehind per anchor checks the whole anchor, so the pattern
    matches exactly where one of the anchors ends, as the plain alternation does. The same piece is the
    needle: a block of stats or DEBUG lines lacks it, and one `in` over the block (at memory speed) then
    spares the search of each line.
    """
    words = sorted(set(anchors), key=len, reverse=True)
    shared = _shared_piece(words)
    if len(shared) < MIN_SHARED:
        return BulkPattern(re.compile(b"|".join(re.escape(a) for a in words)), words[0] if len(words) == 1 else b"",
                           tuple(words))
    branches = []
    for word in words:
        tail = word[word.index(shared) + len(shared):]
        branches.append(re.escape(tail) + b"(?<=" + re.escape(word) + b")")
    return BulkPattern(re.compile(re.escape(shared) + b"(?:" + b"|".join(branches) + b")"), shared, tuple(words))


def _shared_piece(words: Sequence[bytes]) -> bytes:
    """The longest piece of text every word contains (b"" when they share nothing)."""
    if not words:
        return b""
    shortest = min(words, key=len)
    for size in range(len(shortest), 0, -1):
        for start in range(len(shortest) - size + 1):
            piece = shortest[start:start + size]
            if all(piece in word for word in words):
                return piece
    return b""


@dataclass(frozen=True)
class QuietLines:
    """DEBUG and INFO lines no signature needs, set aside like the bulk ones and counted as vLLM's lines.

    A DEBUG log is mostly `EngineCore loop active.` and the like: parsed, such a line only adds one to the
    vLLM lines. A line is quiet when `head` (vLLM's usual prefix at DEBUG or INFO, in a form stricter than
    the parser's: ASCII, no escape code, no record glued into it) matches it, nothing in `stops` (every
    signature's anchor, and what makes a line other than plain: escape codes, a level word or `pid=` of a
    glued record, a carriage return, Ray's repeat marker, a NUL) occurs after it, both neighbours in the
    block are plain too (that prefix, or a bulk line set aside either way), and so is the line before it that
    the parser receives (bulk lines skipped): then no collector split it and no terminal wrapped it, so the
    parser would have read it alone, found nothing and counted it. (Unlike
    the parser, a quiet line does not end a traceback in progress in its process; neither does a bulk line.)
    """

    head: re.Pattern[bytes]
    stops: tuple[bytes, ...]

    def mask(self, lines: list[bytes], places: list[int], rest: list[bytes]) -> list[bool]:
        """For each line of `rest` (the lines of the block `lines` at `places` that no bulk pattern claimed), whether
        it is quiet."""
        verdicts = self._verdicts(rest)
        # A neighbour must be a bulk line (set aside either way) or have the prefix: not empty (the reader
        # drops it, so what follows could be a split line's end), not a line without it (a wrapped tail).
        plain = [bool(line) for line in lines]
        for place, (prefixed, _) in zip(places, verdicts):
            if not prefixed:
                plain[place] = False
        last = len(lines) - 1
        quiet = []
        for at, (place, (_, alone)) in enumerate(zip(places, verdicts)):
            # The line the parser receives before this one (bulk lines are never received) must have the prefix
            # too: a collector's partial line there would take this one as its end, or, were this one set aside,
            # the next line received. The block's first and last lines have no neighbour here.
            received_before = at > 0 and verdicts[at - 1][0]
            quiet.append(alone and received_before and 0 < place < last and plain[place - 1] and plain[place + 1])
        return quiet

    def prefix_end(self, line: bytes) -> int:
        """Where the quiet prefix of `line` ends, -1 where it has none."""
        m = self.head.match(line)
        return m.end() if m else -1

    def _verdicts(self, rest: list[bytes]) -> list[tuple[bool, bool]]:
        """(has the prefix, is quiet but for its neighbours) of each line, asked once per digit form (the line
        with its digits read as 0s). The prefix's pattern reads every digit alike, and so does the search for
        the stops but for those holding digits whose other forms are not stops too (` HTTP/1.1" `): where a
        form holds one's form, each line is asked on its own. DEBUG lines repeat a few forms: three in four lines
        are answered by a lookup (tests/test_properties.py compares this with asking each line).

        The prefix ends at the line's first `]` (nothing before it in the pattern takes one) and the two bytes
        after it, so it is matched once per form of that much; the stops are looked for in what follows the
        prefix of each form, all of a block's in one search."""
        if not rest:
            return []
        forms = [line.translate(DIGITS_AS_ZERO) for line in rest]
        firsts = dict(zip(forms, rest))             # each form's first line
        joined = b"\n".join(firsts)
        if any(stop in joined for stop in _digit_stop_forms(self.stops)):
            forms, firsts = rest, dict(zip(rest, rest))     # a line holding such a stop may: each on its own
        answers: dict[bytes, tuple[bool, bool]] = {}
        prefix_ends: dict[bytes, int] = {}          # by the form of a line's start up to its prefix's end
        asked: list[bytes] = []
        messages: list[bytes] = []
        for form, line in firsts.items():
            close = form.find(b"]")
            start = form[:close + 3] if close >= 0 else b""
            end = prefix_ends.get(start)
            if end is None:
                end = prefix_ends[start] = self.prefix_end(line) if close >= 0 else -1
            if end < 0:
                answers[form] = _NOT_PREFIXED
            elif len(line) > QUIET_MAX_BYTES:
                answers[form] = _PREFIXED_NOT_QUIET
            else:
                asked.append(form)
                messages.append(line[end:])
        for form, holds in zip(asked, _holding_any(messages, self.stops)):
            answers[form] = _PREFIXED_NOT_QUIET if holds else _QUIET
        return [answers[form] for form in forms]


_NOT_PREFIXED, _PREFIXED_NOT_QUIET, _QUIET = (False, False), (True, False), (True, True)


def _holding_any(texts: list[bytes], needles: tuple[bytes, ...]) -> list[bool]:
    """Whether each text (a line, or a piece of one) holds any of the needles: one search over the texts joined by
    newlines (`_automaton` leaves out the needles that hold one, so no match spans two texts)."""
    if not texts:
        return []
    joined = b"\n".join(texts)
    starts = []
    at = 0
    for text in texts:
        starts.append(at)
        at += len(text) + 1
    holds = [False] * len(texts)
    for _, at, _ in _automaton(needles).find_matches_as_indexes(joined):
        holds[bisect.bisect_right(starts, at) - 1] = True
    return holds


_DIGITS = b"0123456789"
DIGITS_AS_ZERO = bytes.maketrans(_DIGITS, b"0" * 10)      # a line's digit form: `line.translate(DIGITS_AS_ZERO)`


def digit_forms(texts: list[str]) -> list[bytes] | None:
    """Each line's digit form, its bytes with every ASCII digit read as 0 (None when a line is not ASCII): lines
    that differ only in their digits share it."""
    joined = "\n".join(texts)
    if not joined.isascii():
        return None
    forms = joined.encode().translate(DIGITS_AS_ZERO).split(b"\n")
    if len(forms) != len(texts):        # a line held a newline: each on its own
        forms = [text.encode().translate(DIGITS_AS_ZERO) for text in texts]
    return forms


@functools.lru_cache(maxsize=4)
def _digit_stop_forms(stops: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """The digit forms of the stops whose occurrence a line's digit form does not decide: those holding a digit
    but not with every other digit in its place (the ten `[0` to `[9` are stops alike; ` HTTP/1.1" ` is one of
    its form). A line holding such a stop has a form holding the stop's form."""
    known = set(stops)

    def variants(stop: bytes) -> Iterator[bytes]:
        places = [i for i, byte in enumerate(stop) if byte in _DIGITS]
        for digits in itertools.product(_DIGITS, repeat=len(places)):
            out = bytearray(stop)
            for place, digit in zip(places, digits):
                out[place] = digit
            yield bytes(out)
    return tuple(stop.translate(DIGITS_AS_ZERO) for stop in stops
                 if any(byte in _DIGITS for byte in stop) and not all(variant in known for variant in variants(stop)))


def quiet_lines_possible() -> bool:
    """Quiet lines need the automaton; without the wheel every line is parsed."""
    return ahocorasick_rs is not None


@functools.lru_cache(maxsize=4)
def _automaton(stops: tuple[bytes, ...]) -> Any:
    """Built once per process (a worker builds its own: the automaton does not pickle). A stop holding a newline
    cannot occur in a line; left out, none spans two of the lines `_holding_any` joins."""
    return ahocorasick_rs.BytesAhoCorasick([stop for stop in stops if b"\n" not in stop])


class SplitBlock(NamedTuple):
    """A block split: the lines to parse as two columns (their numbers and their bytes), and the counts."""

    numbers: list[int]
    lines: list[bytes]
    line_count: int             # lines in the block
    tally: list[int]            # lines each bulk pattern claimed, then, with quiet lines, those set aside


def split_block(block: bytes, patterns: Sequence[BulkPattern], first_line: int,
                quiet: QuietLines | None = None) -> SplitBlock:
    """Split a block of whole lines into the lines to parse and the bulk and quiet lines to count.

    The lines to parse are the non-empty ones no pattern claimed within their first HEAD_WINDOW bytes and
    `quiet` did not set aside; a line counts for the first pattern that claims it. `first_line` numbers
    the block's first line.
    """
    lines = block.split(b"\n")
    if block.endswith(b"\n") or not block:
        lines.pop()
    # Empty lines go first (a block of nothing but newlines must not cost a pattern search per line); then each
    # pattern looks at the lines no earlier pattern claimed, and not at all at a block without its shared piece.
    places = [place for place, line in enumerate(lines) if line]
    rest = [lines[place] for place in places]
    tally = []
    for pattern in patterns:
        if pattern.needle and pattern.needle not in block:
            tally.append(0)
            continue
        # The hot loop of a serving log (a search per line): map and compress run it without a bytecode step a line.
        found = map(pattern.regex.search, rest, itertools.repeat(0), itertools.repeat(HEAD_WINDOW))
        unclaimed = [m is None for m in found]
        tally.append(len(rest) - sum(unclaimed))
        places = list(itertools.compress(places, unclaimed))
        rest = list(itertools.compress(rest, unclaimed))
    if quiet is not None:
        quiet_ones = quiet.mask(lines, places, rest)
        tally.append(sum(quiet_ones))
        places = [place for place, set_aside in zip(places, quiet_ones) if not set_aside]
        rest = [line for line, set_aside in zip(rest, quiet_ones) if not set_aside]
    return SplitBlock([first_line + place for place in places], rest, len(lines), tally)


@dataclass(frozen=True)
class Split:
    """What the block scanner sets aside: the bulk patterns and the quiet lines (split_block, QuietLines)."""

    bulk: tuple[BulkPattern, ...]
    quiet: QuietLines | None

    def block(self, block: bytes, first_line: int) -> SplitBlock:
        return split_block(block, self.bulk, first_line, self.quiet)

    def nothing(self) -> SplitBlock:
        return SplitBlock([], [], 0, [0] * (len(self.bulk) + (self.quiet is not None)))
