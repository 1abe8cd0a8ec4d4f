"""Set aside the bulk of a large log without parsing it line by line.

A busy vLLM server's log is mostly request logging (`Received request ...: prompt: '...'`) and
uvicorn access lines. Signatures marked `bulk` describe them. Per block of the input, each line's
first HEAD_WINDOW bytes are searched for the bulk anchors, no decoding: in C where `_bulkscan.c` was
compiled (a walk over the block that makes an object only of each line it keeps), else in Python (a regex
search per line, its loop driven from C). Those lines are counted, never parsed, and everything else
(startup, stats, warnings, errors, tracebacks) keeps its line number and goes to the parser. Skipping
request logging is right on its own terms too: a prompt that quotes an error message is not that error.
Pure functions over bytes; reading and processes live in `sources`.
"""
from __future__ import annotations

import bisect
import collections
import functools
import itertools
import operator
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, NamedTuple, Sequence, cast

try:
    import ahocorasick_rs
except ImportError:      # no wheel for this platform: quiet lines are parsed like any other
    ahocorasick_rs = None  # type: ignore[assignment]  # checked before use
try:
    from . import _bulkscan
except ImportError:      # not compiled (no compiler where it was installed): the same split in Python
    _bulkscan = None  # type: ignore[assignment]  # checked before use

HEAD_WINDOW = 240          # a bulk line's anchor sits near its start; past that it is prompt text
QUIET_MAX_BYTES = 4096     # a longer line is parsed (the reader cuts lines far longer; noise is short)


MIN_SHARED = 3             # a shared piece shorter than this is no better than the plain alternation


@dataclass(frozen=True)
class BulkPattern:
    """One search for any of a group of bulk anchors, and a piece of text each of them holds."""

    regex: re.Pattern[bytes]
    needle: bytes               # in every anchor: a block without it holds no bulk line (b"": no such piece)
    anchors: tuple[bytes, ...]

    @property
    def terms(self) -> tuple[bytes, ...]:
        """The needle, then the anchors: the pattern as the compiled split takes it."""
        return (self.needle, *self.anchors)


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

    def mask(self, non_empty: bytes, indexes: list[int], rest: list[bytes]) -> bytes:
        """A byte for each line of `rest` (the block's lines at `indexes` that no bulk pattern claimed), 1 where the
        line is quiet; `non_empty` has a byte per line of the block, 1 where the line is not empty. Compiled where
        _bulkscan.c was built (`_bulkscan.quiet_mask`: 1,550 instructions a line of the bench's DEBUG log, the
        Aho-Corasick search of the stops 680 of them, where `_mask_in_python` takes 6,650), else in Python; the
        same answers (tests/test_properties.py)."""
        if _bulkscan is not None:
            return _bulkscan.quiet_mask(rest, indexes, non_empty, self.prefix_end, QUIET_MAX_BYTES,
                                        _digit_stop_forms(self.stops), _automaton(self.stops).find_matches_as_indexes)
        return bytes(self._mask_in_python(non_empty, indexes, rest))

    def prefix_end(self, line: bytes) -> int:
        """Where the quiet prefix of `line` ends, -1 where it has none."""
        m = self.head.match(line)
        return m.end() if m else -1

    def _mask_in_python(self, non_empty: bytes, indexes: Sequence[int], rest: list[bytes]) -> list[bool]:
        """`mask` in Python, every step's loop over the lines in C (map, compress); the test itself runs once per
        digit form."""
        verdicts = self._verdicts(rest)
        prefixed = list(map(_FIRST, verdicts))
        # A neighbour must be a bulk line (set aside either way) or have the prefix: not empty (the reader
        # drops it, so what follows could be a split line's end), not a line without it (a wrapped tail).
        plain = bytearray(non_empty)
        collections.deque(map(plain.__setitem__, itertools.compress(indexes, map(operator.not_, prefixed)),
                              itertools.repeat(0)), maxlen=0)
        padded = b"\0" + plain + b"\0"            # the block's first and last lines have no neighbour here
        # The line the parser receives before this one (bulk lines are never received) must have the prefix
        # too: a collector's partial line there would take this one as its end, or, were this one set aside,
        # the next line received.
        received_before = [False, *prefixed[:-1]]
        neighbours = map(operator.and_, map(operator.and_, map(padded.__getitem__, indexes),
                                            map(padded.__getitem__, map((2).__add__, indexes))), received_before)
        return list(map(operator.and_, map(_SECOND, verdicts), map(bool, neighbours)))

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
        forms = cast("list[bytes]", digit_forms(rest))      # bytes: never None
        firsts = dict(zip(forms, rest))             # each form's first line
        if any(map(b"\n".join(firsts).__contains__, _digit_stop_forms(self.stops))):
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
        return list(map(answers.__getitem__, forms))


_NOT_PREFIXED, _PREFIXED_NOT_QUIET, _QUIET = (False, False), (True, False), (True, True)


def _holding_any(texts: list[bytes], needles: tuple[bytes, ...]) -> list[bool]:
    """Whether each text (a line, or a piece of one) holds any of the needles: one search over the texts joined by
    newlines (`_automaton` leaves out the needles that hold one, so no match spans two texts)."""
    if not texts:
        return []
    joined = b"\n".join(texts)
    starts = list(itertools.accumulate(map(len, texts[:-1]), lambda at, size: at + size + 1, initial=0))
    holds = [False] * len(texts)
    for _, at, _ in _automaton(needles).find_matches_as_indexes(joined):
        holds[bisect.bisect_right(starts, at) - 1] = True
    return holds


_FLIPPED = bytes.maketrans(b"\0\1", b"\1\0")       # quiet -> kept
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)
_DIGITS = b"0123456789"
DIGITS_AS_ZERO = bytes.maketrans(_DIGITS, b"0" * 10)      # a line's digit form: `line.translate(DIGITS_AS_ZERO)`


def digit_forms(lines: list[bytes] | list[str]) -> list[bytes] | None:
    """Each line's digit form, its bytes with every ASCII digit read as 0 (None when a line of text is not ASCII):
    lines that differ only in their digits share it. Compiled where _bulkscan.c was built."""
    if _bulkscan is not None:
        return _bulkscan.digit_forms(lines)
    if not lines:
        return []
    if isinstance(lines[0], bytes):
        return list(map(bytes.translate, cast("list[bytes]", lines), itertools.repeat(DIGITS_AS_ZERO)))
    texts = cast("list[str]", lines)
    joined = "\n".join(texts)
    if not joined.isascii():
        return None
    forms = joined.encode().translate(DIGITS_AS_ZERO).split(b"\n")
    if len(forms) != len(texts):        # a line of text held a newline: each on its own
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
    """A block split: the lines to parse as two columns (their numbers, their bytes or, decoded already, their
    text), and the counts."""

    numbers: list[int]
    lines: list[bytes] | list[str]
    line_count: int             # lines in the block
    tally: list[int]            # lines each bulk pattern claimed, then, with quiet lines, those set aside


def split_block(block: bytes, patterns: Sequence[BulkPattern], first_line: int,
                quiet: QuietLines | None = None, text_limit: int = 0) -> SplitBlock:
    """Split a block of whole lines into the lines to parse and the bulk and quiet lines to count.

    The lines to parse are the non-empty ones no pattern claimed within their first HEAD_WINDOW bytes and
    `quiet` did not set aside; a line counts for the first pattern that claims it. `first_line` numbers
    the block's first line. The bulk split is compiled (_bulkscan.c) where it was built, else `_split_bulk`.
    The lines are bytes; with a `text_limit` (and no quiet lines to test, which reads bytes) the compiled split
    decodes them where every one is ASCII, holds no NUL, does not end in a carriage return and is at most that
    long, which is how the reader would decode them.
    """
    if _bulkscan is not None:
        unclaimed, rest, line_count, counts, non_empty = _bulkscan.split_bulk(
            block, tuple(pattern.terms for pattern in patterns), HEAD_WINDOW, 0 if quiet else text_limit)
    else:
        unclaimed, rest, line_count, counts, non_empty = _split_bulk(block, patterns, quiet is not None)
    if quiet is not None:
        raws = cast("list[bytes]", rest)    # bytes: no text limit is passed with quiet lines to test
        keep = quiet.mask(non_empty, unclaimed, raws).translate(_FLIPPED)
        unclaimed = list(itertools.compress(unclaimed, keep))
        rest = list(itertools.compress(raws, keep))
        counts.append(len(raws) - len(rest))
    return SplitBlock(list(map(first_line.__add__, unclaimed)), rest, line_count, counts)


def _split_bulk(block: bytes, patterns: Sequence[BulkPattern],
                flags: bool) -> tuple[list[int], list[bytes], int, list[int], bytes]:
    """What `_bulkscan.split_bulk` gives, in Python: the unclaimed lines' places in the block and their bytes, the
    block's line count, the lines each pattern claimed, and (when `flags`) a byte per line, 1 where it is not
    empty."""
    lines = block.split(b"\n")
    if block.endswith(b"\n") or not block:
        lines.pop()
    # map/compress keep the per-line loop in C: this is the hot loop of a large log. Empty lines go
    # first (a block of nothing but newlines must not cost a pattern search per line); then each pattern
    # looks at the lines no earlier pattern claimed, by their index in the block.
    unclaimed: list[int] = list(itertools.compress(range(len(lines)), lines))
    rest: list[bytes] = list(filter(None, lines))
    counts = []
    for pattern in patterns:
        n = len(rest)
        if pattern.needle and pattern.needle not in block:
            counts.append(0)
            continue
        found = map(pattern.regex.search, rest, itertools.repeat(0, n), itertools.repeat(HEAD_WINDOW, n))
        keep = list(map(operator.not_, found))
        unclaimed = list(itertools.compress(unclaimed, keep))
        rest = list(itertools.compress(rest, keep))
        counts.append(n - len(rest))
    return unclaimed, rest, len(lines), counts, bytes(map(bool, lines)) if flags else b""


@dataclass(frozen=True)
class Split:
    """What the block scanner sets aside: the bulk patterns and the quiet lines (split_block, QuietLines)."""

    bulk: tuple[BulkPattern, ...]
    quiet: QuietLines | None

    def block(self, block: bytes, first_line: int, text_limit: int = 0) -> SplitBlock:
        return split_block(block, self.bulk, first_line, self.quiet, text_limit)

    def nothing(self) -> SplitBlock:
        return SplitBlock([], [], 0, [0] * (len(self.bulk) + (self.quiet is not None)))
