"""Set aside the bulk of a large log without looking at it line by line in Python.

A busy vLLM server's log is mostly request logging (`Received request ...: prompt: '...'`) and
uvicorn access lines. Signatures marked `bulk` describe them; their anchors are searched with
`bytes.find`, which runs in C, and the lines holding one are counted, not parsed. Everything else
(startup, stats, warnings, errors, tracebacks) is handed to the parser as usual. Skipping request
logging is also right on its own terms: a prompt that quotes an error message is not that error.
Pure functions over bytes; reading and processes live in `sources`.
"""
from __future__ import annotations

from typing import Sequence

HEAD_WINDOW = 256          # a bulk line's anchor sits near its start; past that it is prompt text


def bulk_starts(block: bytes, keys: Sequence[bytes]) -> list[tuple[int, int, int]]:
    """(start, end, key index) of each line holding a bulk key within HEAD_WINDOW bytes of its start
    and no WARNING/ERROR/CRITICAL level before the key, sorted. `end` is the offset of its newline."""
    found: dict[int, tuple[int, int]] = {}
    find, rfind, size = block.find, block.rfind, len(block)
    for index, key in enumerate(keys):
        i = find(key)
        while i != -1:
            start = rfind(b"\n", 0, i) + 1
            end = find(b"\n", i)
            if end == -1:
                end = size
            if i - start < HEAD_WINDOW and start not in found:
                prefix = block[start:i]
                if b"ERROR" not in prefix and b"WARNING" not in prefix and b"CRITICAL" not in prefix:
                    found[start] = (end, index)
            if end >= size:
                break
            i = find(key, end + 1)
    return [(start, end, index) for start, (end, index) in sorted(found.items())]


def split_block(block: bytes, keys: Sequence[bytes], first_line: int
                ) -> tuple[list[tuple[int, bytes]], int, list[int]]:
    """Split a block of whole lines into the lines to parse and the bulk lines to count.

    Returns ([(line_number, raw_line), ...] for non-bulk lines, lines in the block, bulk lines per key).
    """
    lines_in_block = block.count(b"\n") + (0 if block.endswith(b"\n") or not block else 1)
    tally = [0] * len(keys)
    rest: list[tuple[int, bytes]] = []
    line_no = first_line
    pos = 0
    for start, end, index in bulk_starts(block, keys) if keys else ():
        if start > pos:
            gap = block[pos:start - 1].split(b"\n")
            rest.extend(zip(range(line_no, line_no + len(gap)), gap))
            line_no += len(gap)
        tally[index] += 1
        line_no += 1
        pos = end + 1
    if pos < len(block):
        gap = block[pos:]
        if gap.endswith(b"\n"):
            gap = gap[:-1]
        pieces = gap.split(b"\n")
        rest.extend(zip(range(line_no, line_no + len(pieces)), pieces))
    return rest, lines_in_block, tally
