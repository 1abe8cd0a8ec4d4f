"""The input edge: open a path or stdin, undo compression, and yield numbered text lines.

Everything past this module sees only `(line_number, text)`; files, stdin and compression stop here.
Lines are streamed, never read whole, and an absurdly long line is cut rather than held in memory.
"""
from __future__ import annotations

import bz2
import collections
import gzip
import io
import itertools
import lzma
import multiprocessing
import multiprocessing.pool
import os
import re
import stat
import sys
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator

from .errors import InputError
from .scan import split_block

MAX_LINE_BYTES = 1 << 20          # a longer physical line is cut here; the rest is skipped
_SNIFF_BYTES = 64 * 1024
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)


@dataclass
class LogInput:
    """One log given on the command line. `warnings` fills up while it is read."""

    name: str                     # as the user gave it ("-" shows as "<stdin>")
    path: str | None              # None for stdin
    compression: str | None = None
    size: int | None = None       # bytes on disk, when known (for progress)
    warnings: list[str] = field(default_factory=list)
    lines_read: int = 0           # every line, set once the input has been read
    bulk_lines: list[int] = field(default_factory=list)   # lines set aside per bulk key (see scan)
    cut_lines: int = 0            # lines longer than MAX_LINE_BYTES, cut
    progress: Callable[[int], None] | None = None   # told the bytes read so far (a tty progress bar)


def open_log(path: str) -> LogInput:
    """Check that `path` can be read as a log, so errors surface before any work is done."""
    if path == "-":
        return LogInput(name="<stdin>", path=None)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, "no such file", "check the path; use - to read from stdin") from None
    except PermissionError:
        raise InputError(path, "permission denied", "run as a user who can read it, or copy it") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(path, "is a directory, not a log file", "pass the log files inside it, e.g. DIR/*.log")
    if not os.access(path, os.R_OK):
        raise InputError(path, "permission denied", "run as a user who can read it, or copy it")
    inp = LogInput(name=path, path=path, size=st.st_size if stat.S_ISREG(st.st_mode) else None)
    with open(path, "rb") as raw:
        head = raw.read(8)
    inp.compression = _compression_of(head)
    return inp


def _compression_of(head: bytes) -> str | None:
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def _open_binary(inp: LogInput) -> BinaryIO:
    raw: BinaryIO
    if inp.path is None:
        raw = sys.stdin.buffer
        if not hasattr(raw, "peek"):
            raw = io.BufferedReader(raw)  # type: ignore[arg-type]
        inp.compression = _compression_of(raw.peek(8)[:8])
    else:
        raw = open(inp.path, "rb")
    if inp.compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if inp.compression == "bzip2":
        return bz2.BZ2File(raw, mode="rb")  # type: ignore[return-value]
    if inp.compression == "xz":
        return lzma.LZMAFile(raw, mode="rb")  # type: ignore[return-value]
    return raw


def _looks_binary(sample: bytes) -> bool:
    """Binary, not text: NUL-heavy, or mostly bytes that are neither UTF-8 text nor whitespace."""
    if not sample:
        return False
    if sample.count(0) > max(8, len(sample) // 100):
        return True
    text = sample.decode("utf-8", "replace")
    bad = text.count("\ufffd") + sum(1 for ch in text if ch < " " and ch not in "\t\n\r\x1b\x0c\x0b")
    return bad > len(text) * 0.10


BLOCK_BYTES = 4 << 20
COMPRESSED_READ_BYTES = 64 << 10
PIECE_BYTES = 2 << 20             # one worker's share of a large file at a time
WORKERS = 2
IN_FLIGHT = 2 * WORKERS           # pieces handed out ahead of the parser
PARALLEL_MIN_BYTES = 64 << 20     # below this, a second process costs more than it saves
DECIDE_AFTER_LINES = 4_000        # lines read before judging whether the workers set enough aside
_DECOMPRESS_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)


def iter_lines(inp: LogInput, bulk: tuple[re.Pattern[bytes], ...] = ()) -> Iterator[tuple[int, str]]:
    """Yield `(line_number, text)` for every line except the bulk ones (see `scan`), which are only
    counted into `inp.bulk_lines`; `inp.lines_read` holds the total once the input is read.

    Lines are decoded as UTF-8 with replacement; newlines, a CRLF's `\r` and NUL bytes are dropped;
    a line over MAX_LINE_BYTES is cut. A truncated compressed stream yields what it held and warns.
    A large plain file is split between two worker processes.
    """
    stream = _open_binary(inp)
    try:
        _refuse_binary(stream, inp)
        inp.bulk_lines = [0] * len(bulk)
        if inp.path is not None and inp.compression is None and (inp.size or 0) >= PARALLEL_MIN_BYTES \
                and (os.cpu_count() or 1) > 1:
            yield from _split_in_parallel(inp, bulk)
        else:
            number = 0
            for block in _blocks(stream, inp):
                rest, count, tally = split_block(block, bulk, number + 1)
                for line_no, raw in rest:
                    yield line_no, _decode(raw, inp)
                number += count
                inp.bulk_lines = [a + b for a, b in zip(inp.bulk_lines, tally)]
            inp.lines_read = number
    finally:
        _warn_cut(inp)
        if inp.path is not None:
            stream.close()
    if inp.lines_read == 0:
        inp.warnings.append(f"{inp.name}: the input is empty")


def _refuse_binary(stream: BinaryIO, inp: LogInput) -> None:
    try:
        first = stream.peek(_SNIFF_BYTES)[:_SNIFF_BYTES] if hasattr(stream, "peek") else b""
    except _DECOMPRESS_ERRORS as exc:
        raise InputError(inp.name, f"cannot decompress {inp.compression} data: {exc}",
                         "check the file is complete, or decompress it yourself") from None
    if _looks_binary(first):
        raise InputError(inp.name, "looks like a binary file, not a text log",
                         "pass the log text (e.g. kubectl logs POD > log.txt); .gz/.bz2/.xz are read directly")


def _blocks(stream: BinaryIO, inp: LogInput) -> Iterator[bytes]:
    """Blocks of whole lines (the last may lack its newline); a line over MAX_LINE_BYTES is cut."""
    carry = b""
    skipping = False
    consumed = 0
    # A cut compressed stream raises on the read that hits the cut and loses that read's data: read
    # compressed input in small steps so little is lost.
    step = BLOCK_BYTES if inp.compression is None else COMPRESSED_READ_BYTES
    while True:
        try:
            chunk = stream.read(step)
        except _DECOMPRESS_ERRORS as exc:
            inp.warnings.append(f"{inp.name}: the {inp.compression or 'input'} stream ends early ({exc}); "
                                "diagnosed what was there")
            chunk = b""
        if not chunk:
            if carry:
                yield carry
            return
        consumed += len(chunk)
        if inp.progress is not None:
            inp.progress(consumed)
        if skipping:
            newline = chunk.find(b"\n")
            if newline == -1:
                continue
            chunk, skipping = chunk[newline + 1:], False
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n") + 1
        block, carry = data[:cut], data[cut:]
        if len(carry) > MAX_LINE_BYTES:
            block += carry[:MAX_LINE_BYTES] + b"\n"
            carry, skipping = b"", True
            inp.cut_lines += 1
        if block:
            yield block


def _split_in_parallel(inp: LogInput, bulk: tuple[re.Pattern[bytes], ...]) -> Iterator[tuple[int, str]]:
    """Two worker processes split byte ranges of a large plain file while this one parses.

    At most IN_FLIGHT pieces are handed out ahead of the parser, so a log the parser reads slowly
    (few bulk lines) cannot pile up finished pieces in memory. When the first pieces show that the
    workers set aside less than half the lines (a log of stats or DEBUG lines), every line would come
    back to be parsed here anyway: the workers are let go (their memory with them) and the rest of
    the file is split in this process.
    """
    size = inp.size or 0
    jobs = [(inp.path, start, min(start + PIECE_BYTES, size), bulk) for start in range(0, size, PIECE_BYTES)]
    number = 0
    seen = set_aside = 0
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with context.Pool(WORKERS) as pool:
        pending: collections.deque = collections.deque()
        queue = iter(jobs)
        for job in itertools.islice(queue, IN_FLIGHT):
            pending.append((pool.apply_async(_split_range, (job,)), job[2]))
        workers = running = True
        while pending:
            result, end = pending.popleft()
            rest, count, tally, cut = result.get()
            seen, set_aside = seen + count, set_aside + sum(tally)
            if workers and seen >= DECIDE_AFTER_LINES and 2 * set_aside < seen:
                workers = False
            if not workers and running and not any(isinstance(r, multiprocessing.pool.AsyncResult) for r, _ in pending):
                pool.close()                # nothing more for them: they exit now, not at the end of the file
                pool.join()
                running = False
            for job in itertools.islice(queue, 1):
                pending.append((pool.apply_async(_split_range, (job,)) if workers else _Here(job), job[2]))
            for rel, raw in rest:
                yield number + rel, _decode(raw, inp)
            number += count
            inp.bulk_lines = [a + b for a, b in zip(inp.bulk_lines, tally)]
            inp.cut_lines += cut
            if inp.progress is not None:
                inp.progress(end)
    inp.lines_read = number


class _Here:
    """A piece split in this process when it is due, in place of a worker's result."""

    def __init__(self, job: tuple[str, int, int, tuple[re.Pattern[bytes], ...]]) -> None:
        self.job = job

    def get(self) -> tuple[list[tuple[int, bytes]], int, list[int], int]:
        return _split_range(self.job)


def _split_range(job: tuple[str, int, int, tuple[re.Pattern[bytes], ...]]
                 ) -> tuple[list[tuple[int, bytes]], int, list[int], int]:
    """Worker: split the lines that START in [start, end) of a file (the last one may run past end)."""
    path, start, end, bulk = job
    cut = 0
    with open(path, "rb") as handle:
        if start > 0:
            handle.seek(start - 1)
            if handle.read(1) != b"\n":                 # starts inside a line: the previous range has it
                _skip_rest_of_line(handle)
        begin = handle.tell()
        data = handle.read(end - begin) if begin < end else b""
        if data and not data.endswith(b"\n"):
            tail = handle.readline(MAX_LINE_BYTES)
            if not tail.endswith(b"\n") and len(tail) >= MAX_LINE_BYTES:
                cut += 1
                _skip_rest_of_line(handle)
            data += tail
    rest, count, tally = split_block(data, bulk, 1)
    return rest, count, tally, cut


def _skip_rest_of_line(stream: BinaryIO) -> None:
    while True:
        more = stream.readline(MAX_LINE_BYTES)
        if not more or more.endswith(b"\n"):
            return


def _decode(raw: bytes, inp: LogInput) -> str:
    if len(raw) > MAX_LINE_BYTES:
        raw = raw[:MAX_LINE_BYTES]
        inp.cut_lines += 1
    if b"\x00" in raw:
        raw = raw.replace(b"\x00", b"")
    text = raw.decode("utf-8", "replace")
    return text[:-1] if text.endswith("\r") else text


MAX_METRICS_BYTES = 64 << 20


def read_small_text(path: str) -> str:
    """A whole small text file (a metrics snapshot), with the same checks and errors as a log."""
    inp = open_log(path)
    if inp.size is not None and inp.size > MAX_METRICS_BYTES:
        raise InputError(path, f"is {inp.size >> 20} MiB; a metrics snapshot is a few hundred KiB",
                         "pass the /metrics body, not a log")
    return "\n".join(line for _, line in iter_lines(inp)) + "\n"


def _warn_cut(inp: LogInput) -> None:
    if inp.cut_lines:
        inp.warnings.append(f"{inp.name}: {inp.cut_lines} line(s) longer than {MAX_LINE_BYTES >> 20} MiB were cut")


def read_model_config(path: str) -> tuple[str, str]:
    """A model's config.json (or the one inside a model folder): (its text, the path read)."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
        if not os.path.exists(path):
            raise InputError(path, "no such file", "give the model's config.json or the folder that holds it")
    return read_small_text(path), path
