"""The input edge: open a path or stdin, undo compression, and yield numbered text lines.

Everything past this module sees only `(line_number, text)`, a line at a time or a block's two columns at a time;
files, stdin and compression stop here.
Lines are streamed, never read whole, and an absurdly long line is cut rather than held in memory.
Each input is opened once and sniffed from the same stream, so a pipe, a FIFO or `<(cmd)` reads like
a file. Decompression is done here in small steps, so a cut archive keeps every line before the cut.
"""
from __future__ import annotations

import bisect
import codecs
import collections
import io
import itertools
import operator
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Generator, Iterable, Iterator, Sequence

from ..errors import InputError
from ..vocabulary import MAX_METRICS_BYTES
from .scan import BulkPattern, QuietLines, Split
from .waiting import open_fifo

if TYPE_CHECKING:
    from .workers import Worker

_NUMBER, _TEXT = operator.itemgetter(0), operator.itemgetter(1)
MAX_LINE_BYTES = 1 << 20          # a longer physical line is cut here; the rest is skipped
MAX_LINES = 100_000_000           # lines read per input (a 1 GiB vLLM log has about 3 million)
MAX_RATIO = 200                   # decompressed / compressed bytes beyond which a stream is a bomb ...
RATIO_FLOOR = 64 << 20            # ... once it has given this much (real logs compress 5-50x)
_SNIFF_BYTES = 64 * 1024
_UTF16_SNIFF_BYTES = 4096         # BOM-less UTF-16 is told by where its NULs fall in this much
UTF16_ASCII_SHARE = 0.7           # ... when this share of its 2-byte units is an ASCII character and a NUL
PADDING_NUL_RUN = 32              # a run of NULs this long is padding; shorter ones are a binary file's bytes
NUL_RUNS_LISTED = 3               # NUL runs warned of one by one; the rest are counted together
_NUL_RUN = re.compile(rb"\x00+")
_LONE_CR = re.compile(rb"\r(?!\n)")
_TEXT_ASCII = frozenset(range(32, 127)) | frozenset(b"\t\n\r\x1b")
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)


@dataclass(frozen=True)
class LogInput:
    """One log given on the command line, opened (`open_log`); reading it (`LineReader`) writes nothing here."""

    name: str                     # as the user gave it ("-" shows as "<stdin>")
    path: str | None              # None for stdin
    compression: str | None = None
    size: int | None = None       # bytes on disk, when known (for progress)
    stream: BinaryIO | None = None   # opened by open_log and read from there: never opened twice


def open_log(path: str, say: Callable[[str], None] | None = None) -> LogInput:
    """Check that `path` can be read as a log, so errors surface before any work is done. `say` is told when a
    FIFO's writer is slow to come (see waiting.py)."""
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
    try:
        if stat.S_ISFIFO(st.st_mode):  # waits here for its writer, as `cat` would, and says so
            handle = os.fdopen(open_fifo(path, os.O_RDONLY, say), "rb")
        else:
            handle = open(path, "rb")
    except OSError as exc:
        raise InputError(path, f"cannot read: {(exc.strerror or str(exc)).lower()}") from None
    stream, head = _with_head(handle)
    return LogInput(name=path, path=path, compression=_compression_of(head),
                    size=st.st_size if stat.S_ISREG(st.st_mode) else None, stream=stream)


def _with_head(raw: BinaryIO) -> tuple[BinaryIO, bytes]:
    """The stream's first bytes, and the stream as it was before they were read (a pipe cannot seek)."""
    head = b""
    while len(head) < 8:
        more = raw.read(8 - len(head))
        if not more:
            break
        head += more
    return io.BufferedReader(_Replay(head, raw), BLOCK_BYTES), head  # type: ignore[arg-type]


class _Replay(io.RawIOBase):
    """`head`, then the rest of `raw`: the bytes read to sniff a stream are given back, not lost."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        self.head, self.raw = head, raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        if self.head:
            n = min(len(buffer), len(self.head))
            buffer[:n], self.head = self.head[:n], self.head[n:]
            return n
        if hasattr(self.raw, "readinto"):       # straight into the caller's buffer: no copy of a 4 MiB block
            return self.raw.readinto(buffer) or 0
        data = self.raw.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if self.raw is not sys.stdin.buffer:
            self.raw.close()
        super().close()


def _compression_of(head: bytes) -> str | None:
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def _open_binary(inp: LogInput) -> tuple[BinaryIO, str | None]:
    """The input's bytes as they are on disk or in the pipe, opened once, and their compression."""
    if inp.stream is not None:
        return inp.stream, inp.compression
    raw: BinaryIO = sys.stdin.buffer if inp.path is None else open(inp.path, "rb")
    stream, head = _with_head(raw)
    return stream, inp.compression or _compression_of(head)


def _decoder_of(kind: str) -> tuple[Callable[[], Any], tuple[type[Exception], ...]]:
    """How to make a decoder of `kind`, and what it raises on bad data besides OSError and EOFError: imported when
    a compressed input comes (a plain log loads none of the three)."""
    if kind == "gzip":
        import zlib
        return (lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)), (zlib.error,)
    if kind == "bzip2":
        import bz2
        return bz2.BZ2Decompressor, ()
    import lzma
    return lzma.LZMADecompressor, (lzma.LZMAError,)


def _decompressed(raw: BinaryIO, reading: _Reading) -> Iterator[bytes]:
    """Decompress in small steps, keeping every byte decoded before a cut or a corrupt block.

    Several members (or streams) one after the other are read as one, as zcat does; bytes after the
    last one that start no member are trailing garbage, ignored with a warning. A stream that gives
    more than MAX_RATIO times its size (past RATIO_FLOOR) is a decompression bomb: reading stops there.
    Input goes to the decoder FEED_BYTES at a time, so a corrupt block loses the output of that little.
    """
    kind = reading.compression or ""
    make, errors = _decoder_of(kind)
    bad_data: tuple[type[Exception], ...] = (*errors, OSError, EOFError)
    magic = next(magic for magic, name in _MAGIC if name == kind)
    decoder: Any = make()
    taken = given = 0
    data = b""
    while True:
        if not data:
            data = raw.read(COMPRESSED_READ_BYTES)
            taken += len(data)
            if not data:
                if decoder is not None:
                    _damaged(reading, f"the {kind} stream ends early, cut short at byte {taken:,}", cuts=True)
                return
        if decoder is None:                 # between members: another one, or the end of the data
            if len(data) < len(magic) and magic.startswith(data):
                more = raw.read(COMPRESSED_READ_BYTES)
                taken += len(more)
                if more:
                    data += more
                    continue
            if not data.startswith(magic):
                if data.strip(b"\x00") or raw.read(1 << 20).strip(b"\x00"):
                    _damaged(reading, f"the bytes after the {kind} data (from byte {taken - len(data):,}) are not "
                                  f"{kind}: ignored, as zcat does", cuts=False)
                return
            decoder = make()
        while data and decoder is not None:
            piece, data = data[:FEED_BYTES], data[FEED_BYTES:]
            try:
                for out in _feed(decoder, piece):
                    given += len(out)
                    if given > RATIO_FLOOR and given > MAX_RATIO * taken:
                        _damaged(reading, f"the {kind} stream expands over {MAX_RATIO}x (a decompression bomb?): "
                                      f"stopped after {given >> 20:,} MiB", cuts=True)
                        return
                    yield out
            except bad_data as exc:
                at = taken - len(data) - len(piece)
                _damaged(reading, f"the {kind} stream ends early, corrupt near byte {at:,} ({exc})", cuts=True)
                return
            if decoder.eof:                 # this member is complete; what follows it comes next
                data, decoder = decoder.unused_data + data, None


def _damaged(reading: _Reading, what: str, cuts: bool) -> None:
    reading.damage, reading.damage_cuts = what, cuts


def _feed(decoder: Any, data: bytes) -> Iterator[bytes]:
    """All the output of `data`, in pieces of at most COMPRESSED_READ_BYTES x 64 (a bomb stays small)."""
    step = COMPRESSED_READ_BYTES * 64
    if hasattr(decoder, "unconsumed_tail"):       # zlib: a full piece may leave output inside the decoder
        while not decoder.eof:
            out = decoder.decompress(data, step)
            data = decoder.unconsumed_tail
            yield out
            if not data and len(out) < step:
                return
        return
    yield decoder.decompress(data, step)
    while not decoder.eof and not decoder.needs_input:
        yield decoder.decompress(b"", step)


def _text_bytes(chunks: Iterator[bytes], reading: _Reading) -> tuple[Iterator[bytes], bool]:
    """The decoded stream as UTF-8 lines ended by \\n, without NUL bytes, and whether it is still the file's own
    bytes (a large plain file is then split by byte ranges, see `_split_in_parallel`).

    UTF-16 is transcoded: with its BOM (PowerShell's `>`), or without one, told by a NUL beside each ASCII character.
    A UTF-8 BOM is dropped. NUL runs (logrotate's copytruncate, a crash mid-write) are skipped and noted
    (`_without_nuls`). A log whose first 64 KiB end no line with \\n but some with \\r alone (an old Mac's line
    ends, a progress bar captured on its own) has its lone \\r read as line ends; in any other log a lone \\r stays
    inside its line, as vLLM's progress bars redraw one \\n-ended line. The first 64 KiB of text are checked for a
    binary file (or a compressed one that gives nothing) before anything is yielded."""
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head) >= _SNIFF_BYTES:
            break
    if not head and reading.damage and reading.damage_cuts:
        raise InputError(reading.name, f"nothing could be read: {reading.damage}",
                         "check the file is complete (a bzip2 block cut short is lost whole), "
                         "or decompress it yourself")
    rest: Iterator[bytes] = itertools.chain([head], chunks)
    codec = "utf-16" if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else _utf16_without_bom(head)
    if codec:
        decoder = codecs.getincrementaldecoder(codec)("replace")
        rest = (decoder.decode(chunk, final=not chunk).encode("utf-8") for chunk in itertools.chain(rest, [b""]))
    elif head.startswith(codecs.BOM_UTF8):
        rest = itertools.chain([head[3:]], chunks)
    text = _without_nuls(rest, reading)
    head = b""
    for chunk in text:
        head += chunk
        if len(head) >= _SNIFF_BYTES:
            break
    if _looks_binary(head, reading.stray_nuls):
        raise InputError(reading.name, "looks like a binary file, not a text log",
                         "pass the log text (e.g. kubectl logs POD > log.txt); .gz/.bz2/.xz are read directly")
    rest = itertools.chain([head], text)
    sniffed = min(len(head), _SNIFF_BYTES)
    cr_ends = head.find(b"\r", 0, sniffed) != -1 and head.find(b"\n", 0, sniffed - 1) == -1
    if cr_ends:
        rest = _cr_line_ends(rest)
    reading.transcoded = bool(codec)
    return rest, not (codec or cr_ends or reading.nul_runs or reading.compression)


def _utf16_without_bom(head: bytes) -> str | None:
    """The codec of a UTF-16 log without its BOM, or None: most of its first 2-byte units are an ASCII character and a
    NUL, the NUL second (little-endian) or first (big-endian). UTF-8 text has no such NULs, padding has two."""
    sample = head[:_UTF16_SNIFF_BYTES]
    units = len(sample) // 2
    if units < 2:
        return None
    evens, odds = sample[0:2 * units:2], sample[1:2 * units:2]
    for codec, chars, nuls in (("utf-16-le", evens, odds), ("utf-16-be", odds, evens)):
        ascii_units = sum(1 for char, nul in zip(chars, nuls) if nul == 0 and char in _TEXT_ASCII)
        if ascii_units >= UTF16_ASCII_SHARE * units:
            return codec
    return None


@dataclass
class _NulRun:
    """NUL bytes skipped in a row."""

    at: int | None           # where the run starts in the decoded stream (the file's byte, for a plain file)
    size: int
    kept: int                # the text's bytes before it: where it sits among the lines
    line: int | None = None  # the line it was in, once the lines up to it are counted (`_place_nul_runs`)
    at_end: bool = False     # nothing but NULs after it


def _without_nuls(chunks: Iterable[bytes], reading: _Reading) -> Iterator[bytes]:
    """The stream without its NUL bytes, each run noted in `reading` (the first NUL_RUNS_LISTED in full).

    A file rotated with logrotate's copytruncate while its writer kept its offset starts with as many NULs as the
    file held; a crash mid-write leaves a block of NULs where text was to go. A chunk without a NUL (the usual case)
    passes as it is: one search at memory speed."""
    at = kept = 0
    last_end = -1                    # where the last run ended: a run a chunk starts with may continue it
    for chunk in chunks:
        if b"\x00" not in chunk:
            at += len(chunk)
            kept += len(chunk)
            yield chunk
            continue
        pieces, start = [], 0
        for run in _NUL_RUN.finditer(chunk):
            begin, end = run.span()
            pieces.append(chunk[start:begin])
            kept += begin - start
            size = end - begin
            if size < PADDING_NUL_RUN:
                reading.stray_nuls += size
            if at + begin == last_end:
                _grow_last_nul_run(reading, size)
            elif len(reading.nul_runs) < NUL_RUNS_LISTED:
                reading.nul_runs.append(_NulRun(at + begin, size, kept))
            else:
                reading.more_nul_runs += 1
                reading.more_nul_bytes += size
            last_end, start = at + end, end
        pieces.append(chunk[start:])
        kept += len(chunk) - start
        at += len(chunk)
        if text := b"".join(pieces):
            yield text
    if last_end == at and at and reading.nul_runs and not reading.more_nul_runs:
        reading.nul_runs[-1].at_end = True


def _grow_last_nul_run(reading: _Reading, size: int) -> None:
    if reading.more_nul_runs:
        reading.more_nul_bytes += size
    else:
        reading.nul_runs[-1].size += size


def _cr_line_ends(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Each \\r not followed by \\n made a \\n, byte for byte (a CRLF keeps its \\r, which the reader drops): a
    chunk's last \\r waits for the next chunk's first byte."""
    held = b""
    for chunk in chunks:
        data = held + chunk if held else chunk
        held = b""
        if data.endswith(b"\r"):
            data, held = data[:-1], b"\r"
        if data:
            yield _LONE_CR.sub(b"\n", data)
    if held:
        yield b"\n"


def _looks_binary(sample: bytes, stray_nuls: int = 0) -> bool:
    """Binary, not text: NULs outside padding runs (`stray_nuls`, already taken out of `sample`) over 1% of it, or
    mostly bytes that are neither UTF-8 text nor whitespace in its first 64 KiB."""
    if stray_nuls > max(8, len(sample) // 100):
        return True
    sample = sample[:_SNIFF_BYTES]
    if not sample:
        return False
    text = sample.decode("utf-8", "replace")
    bad = text.count("\ufffd") + sum(1 for ch in text if ch < " " and ch not in "\t\n\r\x1b\x0c\x0b")
    return bad > len(text) * 0.10


BLOCK_BYTES = 4 << 20
COMPRESSED_READ_BYTES = 64 << 10
FEED_BYTES = 4 << 10              # compressed bytes given to the decoder at a time
PIECE_BYTES = 1 << 20             # one worker's share of a large file at a time
WORKERS = 2
IN_FLIGHT = 2 * WORKERS           # pieces handed out ahead of the parser
PARALLEL_MIN_BYTES = 64 << 20     # below this, a second process costs more than it saves
DECIDE_AFTER_LINES = 4_000        # lines read before judging whether the workers set enough aside
QUIET_WORTH = 0.1                 # ... and whether looking for quiet lines pays (a stats log has none)


@dataclass(frozen=True)
class LinesRead:
    """What reading one input found besides its lines."""

    lines_read: int               # every line, the bulk ones included
    bulk_lines: tuple[int, ...]   # lines set aside per bulk key (see scan), never yielded
    cut_lines: int                # lines longer than MAX_LINE_BYTES, cut
    warnings: tuple[str, ...]
    quiet_lines: int = 0          # DEBUG and INFO lines set aside (see scan.QuietLines), never yielded
    skipped: tuple[str, ...] = () # the warnings that say what bytes were skipped to read the rest (among `warnings`)


@dataclass
class _Reading:
    """The reader's own tally while it reads one input (what `LineReader.result()` reports)."""

    name: str
    path: str | None
    size: int | None
    compression: str | None
    progress: Callable[[int], None] | None
    bulk_lines: list[int]
    warnings: list[str] = field(default_factory=list)
    quiet_lines: int = 0
    lines_read: int = 0
    cut_lines: int = 0
    damage: str | None = None        # how a compressed stream ended badly (a warning once it is read)
    damage_cuts: bool = False        # ... and whether the lines after that point are lost
    transcoded: bool = False         # from UTF-16: a byte of the text read is not the input's
    nul_runs: list[_NulRun] = field(default_factory=list)   # the first NUL runs skipped
    placed_nul_runs: int = 0         # ... of which the line is known
    more_nul_runs: int = 0           # runs skipped past those
    more_nul_bytes: int = 0
    stray_nuls: int = 0              # NULs in runs too short to be padding (a binary file has many)
    done: bool = False


LineBlock = tuple[list[int], list[str]]     # a block's line numbers and its lines' texts, in step


class LineReader:
    """Yield `(line_number, text)` for every line of one input except the bulk and quiet ones (see `scan`), which are
    only counted; iterate it once (or its `blocks()`), then `result()` says what the reading found besides the lines.

    Lines are decoded as UTF-8 with replacement (UTF-16 is transcoded first); newlines, a CRLF's `\r` and NUL
    bytes are dropped (each run of NULs is warned of, with where it was); a lone `\\r` ends a line only in a log
    whose first 64 KiB end none with `\\n`;
    a line over MAX_LINE_BYTES is cut; reading stops after MAX_LINES. A compressed stream that is cut
    or corrupt yields every line before the damage and warns where it was.
    A large plain file is split between two worker processes. `progress` is told the bytes read so far.
    """

    def __init__(self, inp: LogInput, bulk: tuple[BulkPattern, ...] = (),
                 progress: Callable[[int], None] | None = None, quiet: QuietLines | None = None) -> None:
        self._reading = _Reading(inp.name, inp.path, inp.size, inp.compression, progress, [0] * len(bulk))
        self._blocks = _read_blocks(inp, Split(bulk, quiet), self._reading)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        try:
            yield from numbered_lines(self._blocks)
        finally:
            self._blocks.close()        # a reading given up half-way lets its workers go now

    def blocks(self) -> Iterator[LineBlock]:
        """The lines a block at a time, as two columns: a reader of many lines (the stats fold) takes them so,
        without a tuple and a step of iteration per line."""
        return self._blocks

    def result(self) -> LinesRead:
        reading = self._reading
        if not reading.done:
            raise RuntimeError(f"{reading.name}: the reading is not finished; iterate every line first")
        skipped = _nul_warnings(reading)
        return LinesRead(reading.lines_read, tuple(reading.bulk_lines), reading.cut_lines,
                         tuple(reading.warnings) + skipped, reading.quiet_lines, skipped)


def line_blocks(lines: Iterable[tuple[int, str]] | LineReader, size: int = 512) -> Iterator[LineBlock]:
    """Lines as blocks of columns: a reader's own blocks, or numbered lines taken `size` at a time."""
    if isinstance(lines, LineReader):
        yield from lines.blocks()
        return
    stream = iter(lines)
    while batch := list(itertools.islice(stream, size)):
        yield list(map(_NUMBER, batch)), list(map(_TEXT, batch))


def numbered_lines(blocks: Iterable[LineBlock]) -> Iterator[tuple[int, str]]:
    """The blocks' lines one at a time, `(line_number, text)`: what `line_blocks` took apart."""
    return itertools.chain.from_iterable(itertools.starmap(zip, blocks))


def iter_lines(inp: LogInput, bulk: tuple[BulkPattern, ...] = ()) -> Iterator[tuple[int, str]]:
    """The lines alone, for a reader that needs no more (see LineReader)."""
    return iter(LineReader(inp, bulk))


def _judged(split: Split, reading: _Reading, lines: int) -> Split:
    """Once DECIDE_AFTER_LINES are read: without the quiet lines when they are too few to pay for the
    search (about 2.5 µs a line). Either way the lines parsed give the same report."""
    if split.quiet is None or lines < DECIDE_AFTER_LINES or reading.quiet_lines >= QUIET_WORTH * lines:
        return split
    return Split(split.bulk, None)


def _tally(reading: _Reading, tally: list[int]) -> None:
    """Add one block's set-aside counts: per bulk pattern, then the quiet lines."""
    bulk = len(reading.bulk_lines)
    reading.bulk_lines = [a + b for a, b in zip(reading.bulk_lines, tally[:bulk])]
    reading.quiet_lines += sum(tally[bulk:])


def _read_blocks(inp: LogInput, split: Split, reading: _Reading) -> Generator[LineBlock, None, None]:
    raw, reading.compression = _open_binary(inp)
    try:
        chunks = _decompressed(raw, reading) if reading.compression else iter(lambda: raw.read(BLOCK_BYTES), b"")
        text, own_bytes = _text_bytes(chunks, reading)
        if reading.path is not None and own_bytes and (reading.size or 0) >= PARALLEL_MIN_BYTES \
                and (os.cpu_count() or 1) > 1:
            yield from _split_in_parallel(reading, split)
        else:
            number = 0
            for block in _blocks(text, reading):
                split = _judged(split, reading, number)
                numbers, raws, count, tally = split.block(block, number + 1)
                if (lines := _decoded(numbers, raws, 0, reading)) is not None:
                    yield lines
                number += count
                reading.lines_read = number     # where a NUL run the next block holds is placed from
                _tally(reading, tally)
                if number > MAX_LINES:
                    number = MAX_LINES
                    _warn_too_many(reading)
                    break
            reading.lines_read = number
    finally:
        _warn_cut(reading)
        if reading.damage:
            lost = f"; diagnosed the {reading.lines_read:,} line(s) before it" if reading.damage_cuts else ""
            reading.warnings.append(f"{reading.name}: {reading.damage}{lost}")
        raw.close()
    if reading.lines_read == 0:
        reading.warnings.append(f"{reading.name}: the input is empty")
    reading.done = True


def _warn_too_many(reading: _Reading) -> None:
    reading.warnings.append(f"{reading.name}: stopped after {MAX_LINES:,} lines (far more than a vLLM log holds): "
                        "the rest is not read; cut the log to the incident (tail -n, --since)")


def _blocks(chunks: Iterable[bytes], reading: _Reading) -> Iterator[bytes]:
    """Blocks of whole lines (the last may lack its newline); a line over MAX_LINE_BYTES is cut."""
    carry = b""
    skipping = False
    consumed = 0
    for chunk in chunks:
        if not chunk:
            continue
        consumed += len(chunk)
        if reading.progress is not None:
            reading.progress(consumed)
        if reading.placed_nul_runs < len(reading.nul_runs):
            _place_nul_runs(reading, chunk, consumed)
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
            reading.cut_lines += 1
        if block:
            yield block
    if carry:
        yield carry


def _place_nul_runs(reading: _Reading, chunk: bytes, consumed: int) -> None:
    """The line of each NUL run that sat before the end of `chunk` (the text up to `consumed`): the lines of the
    blocks before it are counted, and the lines in the chunk up to the run."""
    start = consumed - len(chunk)
    for run in reading.nul_runs[reading.placed_nul_runs:]:
        if run.kept > consumed:
            return
        run.line = reading.lines_read + chunk.count(b"\n", 0, max(0, run.kept - start)) + 1
        reading.placed_nul_runs += 1


def _nul_warnings(reading: _Reading) -> tuple[str, ...]:
    """A warning per NUL run skipped (the first NUL_RUNS_LISTED), saying where, how much and the likely cause."""
    warnings = []
    name = reading.name
    for run in reading.nul_runs:
        skipped = f"skipped {run.size:,} NUL byte{'s' if run.size != 1 else ''}"
        if run.at == 0 and run.at_end:
            warnings.append(f"{skipped}: {name} holds nothing else (zeroed by a crash or a rotation?)")
        elif run.at == 0:
            warnings.append(f"{skipped} at the start of {name} (log rotated with copytruncate?)")
        elif run.at_end:
            warnings.append(f"{skipped} at the end of {name}, after line {reading.lines_read:,} "
                            "(a crash mid-write, or space allocated ahead?)")
        else:
            line = f" in line {run.line:,}" if run.line is not None else ""
            byte = f", at byte {run.at:,}" if run.at is not None and not (reading.compression or reading.transcoded) \
                else ""
            warnings.append(f"{skipped}{line} of {name}{byte} (a crash mid-write, or a rotation?)")
    if reading.more_nul_runs:
        warnings.append(f"skipped {reading.more_nul_bytes:,} NUL bytes in {reading.more_nul_runs:,} more place(s) "
                        f"in {name}")
    return tuple(warnings)


def _split_in_parallel(reading: _Reading, split: Split) -> Iterator[LineBlock]:
    """Two worker processes split byte ranges of a large plain file while this one parses.

    At most IN_FLIGHT pieces are handed out ahead of the parser, so a log the parser reads slowly
    (few bulk lines) cannot pile up finished pieces in memory. The file's first DECIDE_AFTER_LINES lines
    are split here: when less than half of them are set aside (a log of stats lines), every line would
    come back to be parsed here anyway, so no worker is started; otherwise the workers take the pieces
    from then on, and are let go (their memory with them) should the share set aside fall below half. A
    worker that fails is let go too, and its range split here.
    """
    from .workers import WorkerFailed, split_range  # only a large file starts workers (subprocess, pickle)
    assert reading.path is not None, "only a named plain file is split in parallel"
    size = reading.size or 0
    path = reading.path
    ranges = iter([(start, min(start + PIECE_BYTES, size)) for start in range(0, size, PIECE_BYTES)])
    number = seen = set_aside = handed = 0
    workers: list[Worker] = []           # started once the first lines show they pay
    decided = False
    pending: collections.deque[tuple[Worker | None, int, int, Split]] = collections.deque()

    def let_go() -> None:
        """Without workers from here on: the ranges they were asked for are split here as they come due."""
        nonlocal workers, pending
        workers = _let_go(workers)
        pending = collections.deque((None, start, end, asked) for _, start, end, asked in pending)

    def ask(start: int, end: int, asked: Split) -> Worker | None:
        """The worker given the range, or None (no workers, or it failed): split here when it comes due. The
        workers take the pieces in turn, so each holds its share of the pieces in flight."""
        nonlocal handed
        if not workers:
            return None
        worker = workers[handed % len(workers)]
        handed += 1
        try:
            worker.ask(start, end, asked)
        except WorkerFailed:
            return None
        return worker

    def hand_out(count: int) -> None:
        for start, end in itertools.islice(ranges, count):
            pending.append((ask(start, end, split), start, end, split))

    try:
        hand_out(IN_FLIGHT)
        while pending:
            worker, start, end, asked = pending.popleft()
            result = None
            if worker is not None:
                try:
                    result = worker.answer()
                except WorkerFailed:
                    let_go()
            if result is None:
                result = split_range(path, start, end, asked, MAX_LINE_BYTES)
            numbers, raws, count, tally = result
            seen, set_aside = seen + count, set_aside + sum(tally)
            _tally(reading, tally)
            if not decided and seen >= DECIDE_AFTER_LINES:
                decided = True
                if 2 * set_aside >= seen:
                    workers = _start_workers(path)
                    pending = collections.deque((ask(start, end, asked), start, end, asked)
                                                for _, start, end, asked in pending)
            elif workers and 2 * set_aside < seen:
                let_go()
            split = _judged(split, reading, seen)
            hand_out(1)
            if (lines := _decoded(numbers, raws, number, reading)) is not None:
                yield lines
            number += count
            if reading.progress is not None:
                reading.progress(end)
            if number > MAX_LINES:
                number = MAX_LINES
                _warn_too_many(reading)
                break
    finally:
        _let_go(workers)
    reading.lines_read = number


def _start_workers(path: str) -> list[Worker]:
    """WORKERS processes, or none where they cannot start (no interpreter to run): the file is then
    split in this process."""
    from .workers import Worker, WorkerFailed
    started: list[Worker] = []
    try:
        for _ in range(WORKERS):
            started.append(Worker(path, MAX_LINE_BYTES))
    except (OSError, WorkerFailed):
        return _let_go(started)
    return started


def _let_go(workers: list[Worker]) -> list[Worker]:
    for worker in workers:
        worker.close()
    return []


def _decoded(numbers: list[int], raws: Sequence[bytes], base: int, reading: _Reading) -> LineBlock | None:
    """A block's lines to parse, numbered from `base` and decoded, up to MAX_LINES; None when none is left (a block
    may start past MAX_LINES: the count is checked after each block). The usual block (no line too long, no NUL,
    no carriage return ending a line) is decoded in one step; any other line by line."""
    if not raws:
        return None
    if base:
        numbers = list(map(base.__add__, numbers))
    if numbers[-1] > MAX_LINES:
        kept = bisect.bisect_right(numbers, MAX_LINES)
        if not kept:
            return None
        numbers, raws = numbers[:kept], raws[:kept]
    joined = b"\n".join(raws)
    if max(map(len, raws), default=0) <= MAX_LINE_BYTES and b"\x00" not in joined and (
            b"\r" not in joined or (b"\r\n" not in joined and not joined.endswith(b"\r"))):
        # ASCII lines decode one by one faster than joined text splits again; other text is decoded joined, in one
        # step, which is each line's decode: a newline is never part of a UTF-8 sequence.
        texts = list(map(bytes.decode, raws)) if joined.isascii() else joined.decode("utf-8", "replace").split("\n")
    else:
        texts = list(map(_decode, raws, numbers, itertools.repeat(reading)))
    return numbers, texts


def _decode(raw: bytes, number: int, reading: _Reading) -> str:
    if len(raw) > MAX_LINE_BYTES:
        raw = raw[:MAX_LINE_BYTES]
        reading.cut_lines += 1
    if b"\x00" in raw:       # only where workers split the file: the reader's own stream is without NULs
        size = raw.count(0)
        raw = raw.replace(b"\x00", b"")
        if len(reading.nul_runs) < NUL_RUNS_LISTED:
            reading.nul_runs.append(_NulRun(None, size, 0, number))
        else:
            reading.more_nul_runs += 1
            reading.more_nul_bytes += size
    text = raw.decode("utf-8", "replace")
    return text[:-1] if text.endswith("\r") else text




def text_lines(text: str) -> list[str]:
    """A small input's lines as every editor numbers them: ended at \\n only (str.splitlines also ends one at
    \\x0c, \\x85, \\u2028 ..., which puts every later line number off), without a Windows line end's \\r."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_small_text(path: str) -> str:
    """A whole small text file (a metrics snapshot), with the same checks and errors as a log; a pipe
    or an archive is read only as far as MAX_METRICS_BYTES."""
    inp = open_log(path)
    if inp.size is not None and inp.size > MAX_METRICS_BYTES:
        raise InputError(path, f"is {inp.size >> 20} MiB; a metrics snapshot is a few hundred KiB",
                         "pass the /metrics body, not a log")
    lines, size = [], 0
    for _, line in iter_lines(inp):
        size += len(line) + 1
        if size > MAX_METRICS_BYTES:
            raise InputError(inp.name, f"is over {MAX_METRICS_BYTES >> 20} MiB of text; a metrics snapshot is a few "
                             "hundred KiB", "pass the /metrics body, not a log")
        lines.append(line)
    return "\n".join(lines) + "\n"


def _warn_cut(reading: _Reading) -> None:
    if reading.cut_lines:
        reading.warnings.append(f"{reading.name}: {reading.cut_lines} line(s) longer than "
                                f"{MAX_LINE_BYTES >> 20} MiB were cut")


def read_model_config(path: str) -> tuple[str, str]:
    """A model's config.json (or the one inside a model folder): (its text, the path read)."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
        if not os.path.exists(path):
            raise InputError(path, "no such file", "give the model's config.json or the folder that holds it")
    return read_small_text(path), path
