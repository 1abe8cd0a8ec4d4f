"""Set aside the bulk of a large log without looking at it line by line in Python.

A busy vLLM server's log is mostly request logging (`Received request ...: prompt: '...'`) and
uvicorn access lines. Signatures marked `bulk` describe them. Per block of the input, one regex
substitution (it runs in C) blanks every line whose first HEAD_WINDOW bytes hold a bulk anchor;
those lines are counted, never parsed, and everything else (startup, stats, warnings, errors,
tracebacks) keeps its line number and goes to the parser. Skipping request logging is right on its
own terms too: a prompt that quotes an error message is not that error.
Pure functions over bytes; reading and processes live in `sources`.
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

HEAD_WINDOW = 240          # a bulk line's anchor sits near its start; past that it is prompt text


def bulk_pattern(anchors: Iterable[bytes]) -> re.Pattern[bytes]:
    """A pattern matching a whole line that holds one of `anchors` within HEAD_WINDOW bytes."""
    alternation = b"|".join(re.escape(a) for a in sorted(set(anchors), key=len, reverse=True))
    return re.compile(rb"(?m)^[^\n]{0,%d}?(?:%s)[^\n]*" % (HEAD_WINDOW, alternation))


def split_block(block: bytes, patterns: Sequence[re.Pattern[bytes]], first_line: int
                ) -> tuple[list[tuple[int, bytes]], int, list[int]]:
    """Split a block of whole lines into the lines to parse and the bulk lines to count.

    Returns ([(line_number, raw_line), ...] for the non-empty lines no pattern claimed, the number of
    lines in the block, the lines each pattern claimed). `first_line` numbers the block's first line.
    """
    counts = []
    rest = block
    for pattern in patterns:
        rest, claimed = pattern.subn(b"", rest)     # blanked, not removed: line numbers survive
        counts.append(claimed)
    lines = rest.split(b"\n")
    if block.endswith(b"\n") or not block:
        lines.pop()
    return [(first_line + i, line) for i, line in enumerate(lines) if line], len(lines), counts
