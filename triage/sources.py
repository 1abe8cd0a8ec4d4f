"""The input edge: open a path or stdin, undo compression, and yield numbered text lines.

Everything past this module sees only `(line_number, text)`; files, stdin and compression stop here.
Lines are streamed, never read whole, and an absurdly long line is cut rather than held in memory.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import sys
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

from .errors import InputError

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


def iter_lines(inp: LogInput) -> Iterator[tuple[int, str]]:
    """Yield `(line_number, text)` for each physical line, decoded as UTF-8 with replacement.

    The trailing newline is removed (a CRLF's `\\r` too); NUL bytes are dropped. A truncated
    compressed stream yields what it held and records a warning; it is not an error.
    """
    stream = _open_binary(inp)
    where = inp.name
    try:
        try:
            first = stream.peek(_SNIFF_BYTES)[:_SNIFF_BYTES] if hasattr(stream, "peek") else b""
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            raise InputError(where, f"cannot decompress {inp.compression} data: {exc}",
                             "check the file is complete, or decompress it yourself") from None
        if _looks_binary(first):
            raise InputError(where, "looks like a binary file, not a text log",
                             "pass the log text (e.g. kubectl logs POD > log.txt); .gz/.bz2/.xz are read directly")
        number = 0
        cut_lines = 0
        while True:
            try:
                chunk = stream.readline(MAX_LINE_BYTES)
            except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
                inp.warnings.append(
                    f"{where}: the {inp.compression or 'input'} stream ends early after line {number} ({exc}); "
                    "diagnosed what was there")
                break
            if not chunk:
                break
            number += 1
            if not chunk.endswith(b"\n") and len(chunk) >= MAX_LINE_BYTES:
                cut_lines += 1
                _skip_rest_of_line(stream)
            yield number, _decode(chunk)
        if cut_lines:
            inp.warnings.append(f"{where}: {cut_lines} line(s) longer than {MAX_LINE_BYTES >> 20} MiB were cut there")
    finally:
        if inp.path is not None:
            stream.close()


def _skip_rest_of_line(stream: BinaryIO) -> None:
    while True:
        more = stream.readline(MAX_LINE_BYTES)
        if not more or more.endswith(b"\n"):
            return


def _decode(chunk: bytes) -> str:
    if b"\x00" in chunk:
        chunk = chunk.replace(b"\x00", b"")
    text = chunk.decode("utf-8", "replace")
    if text.endswith("\n"):
        text = text[:-1]
    if text.endswith("\r"):
        text = text[:-1]
    return text


MAX_METRICS_BYTES = 64 << 20


def read_small_text(path: str) -> str:
    """A whole small text file (a metrics snapshot), with the same checks and errors as a log."""
    inp = open_log(path)
    if inp.size is not None and inp.size > MAX_METRICS_BYTES:
        raise InputError(path, f"is {inp.size >> 20} MiB; a metrics snapshot is a few hundred KiB",
                         "pass the /metrics body, not a log")
    return "\n".join(text for _, text in iter_lines(inp)) + "\n"


def read_model_config(path: str) -> tuple[str, str]:
    """A model's config.json (or the one inside a model folder): (its text, the path read)."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
        if not os.path.exists(path):
            raise InputError(path, "no such file", "give the model's config.json or the folder that holds it")
    return read_small_text(path), path
