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


def bulk_pattern(anchors: Iterable[bytes]) -> re.Pattern[bytes]:
    """One search for any of `anchors`."""
    return re.compile(b"|".join(re.escape(a) for a in sorted(set(anchors), key=len, reverse=True)))


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
    # first (a block of nothing but newlines must not cost a pattern search per line).
    numbers: Iterable[int] = list(itertools.compress(range(first_line, first_line + len(lines)), lines))
    rest = list(filter(None, lines))
    counts = []
    for pattern in patterns:
        n = len(rest)
        unclaimed = list(map(operator.not_, map(pattern.search, rest, itertools.repeat(0, n),
                                                itertools.repeat(HEAD_WINDOW, n))))
        numbers = list(itertools.compress(numbers, unclaimed))
        rest = list(itertools.compress(rest, unclaimed))
        counts.append(n - len(rest))
    return list(zip(numbers, rest)), len(lines), counts
