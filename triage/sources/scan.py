"""Set aside the bulk of a large log without parsing it line by line.

A busy vLLM server's log is mostly request logging (`Received request ...: prompt: '...'`) and
uvicorn access lines. Signatures marked `bulk` describe them. Per block of the input, each line's
first HEAD_WINDOW bytes are searched for the bulk anchors (a C-level search per line, driven from
C too, no decoding); those lines are counted, never parsed, and everything else (startup, stats, warnings,
errors, tracebacks) keeps its line number and goes to the parser. Skipping request logging is
right on its own terms too: a prompt that quotes an error message is not that error.
Pure functions over bytes; reading and processes live in `sources`.
"""
from __future__ import annotations

import itertools
import operator
import re
from typing import Iterable, Sequence

HEAD_WINDOW = 240          # a bulk line's anchor sits near its start; past that it is prompt text


MIN_SHARED = 3             # a shared piece shorter than this is no better than the plain alternation


def bulk_pattern(anchors: Iterable[bytes]) -> re.Pattern[bytes]:
    """One search for any of `anchors`.

    When the anchors share a piece of text (`ed re` in `Received request `, `Added request `, ...,
    `Generated response `), the pattern starts with it: the regex engine then jumps from one occurrence
    of that literal to the next instead of trying every alternative at every position, which is two to
    three times faster per line. A lookbehind per anchor checks the whole anchor, so the pattern
    matches exactly where one of the anchors ends, as the plain alternation does.
    """
    words = sorted(set(anchors), key=len, reverse=True)
    shared = _shared_piece(words)
    if len(shared) < MIN_SHARED:
        return re.compile(b"|".join(re.escape(a) for a in words))
    branches = []
    for word in words:
        tail = word[word.index(shared) + len(shared):]
        branches.append(re.escape(tail) + b"(?<=" + re.escape(word) + b")")
    return re.compile(re.escape(shared) + b"(?:" + b"|".join(branches) + b")")


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


def split_block(block: bytes, patterns: Sequence[re.Pattern[bytes]], first_line: int
                ) -> tuple[list[tuple[int, bytes]], int, list[int]]:
    """Split a block of whole lines into the lines to parse and the bulk lines to count.

    Returns ([(line_number, raw_line), ...] for the non-empty lines no pattern claimed within their
    first HEAD_WINDOW bytes, the number of lines in the block, the lines each pattern claimed, a line
    counting for the first pattern that claims it). `first_line` numbers the block's first line.
    """
    lines = block.split(b"\n")
    if block.endswith(b"\n") or not block:
        lines.pop()
    # map/compress keep the per-line loop in C: this is the hot loop of a large log. Empty lines go
    # first (a block of nothing but newlines must not cost a pattern search per line); then each pattern
    # looks at the lines no earlier pattern claimed, by their index in the block.
    unclaimed: Sequence[int] = list(itertools.compress(range(len(lines)), lines))
    rest: Sequence[bytes] = list(filter(None, lines))
    counts = []
    for pattern in patterns:
        n = len(rest)
        found = map(pattern.search, rest, itertools.repeat(0, n), itertools.repeat(HEAD_WINDOW, n))
        keep = list(map(operator.not_, found))
        unclaimed = list(itertools.compress(unclaimed, keep))
        rest = list(itertools.compress(rest, keep))
        counts.append(n - len(rest))
    return [(first_line + index, line) for index, line in zip(unclaimed, rest)], len(lines), counts
