"""The worker processes that split byte ranges of a large log while the reader parses (see
files._split_in_parallel), and the splitting they do.

A worker is a plain `python -I -c` subprocess (isolated: see _START) that imports only this module and `scan`,
reads jobs from its stdin and writes results to its stdout (pickles). Not a multiprocessing pool: a forked worker
counts the parent's whole memory again (three copies of the imports at 40 MiB each), and a spawned
pool adds a resource-tracker process and imports the parent's main module (the command line).
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import IO, BinaryIO, cast

from .scan import Split, SplitBlock


def split_range(path: str, start: int, end: int, split: Split, max_line_bytes: int) -> SplitBlock:
    """Split the lines that START in [start, end) of a file (the last one may run past end).

    A range with no line start in it gives nothing and reads nothing past its end, so the ends of a
    line longer than many ranges are looked for once, by the range where the line starts."""
    with open(path, "rb") as handle:
        handle.seek(max(0, start - 1))
        data = handle.read(end - max(0, start - 1))
        if start > 0:
            first = data.find(b"\n")              # data[0] is the byte before the range
            if first == -1:
                return split.nothing()
            data = data[first + 1:]
        if data and not data.endswith(b"\n"):
            tail = handle.readline(max_line_bytes)
            if not tail.endswith(b"\n") and len(tail) >= max_line_bytes:
                _skip_rest_of_line(handle, max_line_bytes)   # over the limit: the reader cuts and counts it
            data += tail
    return split.block(data, 1)


def _skip_rest_of_line(stream: BinaryIO, max_line_bytes: int) -> None:
    while True:
        more = stream.readline(max_line_bytes)
        if not more or more.endswith(b"\n"):
            return


# The folder holding this very `triage` package (site-packages, or the source tree of an editable install).
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Isolated mode (-I) keeps the working folder, PYTHON* variables and the user's site-packages off the worker's
# sys.path: vtriage runs as root in shared folders, where a planted `triage/` would otherwise be imported. The
# package's own folder is then put first by hand, so the worker runs the same code as the reader. It is passed
# as an argument, never spliced into the code.
_START = "import sys; sys.path.insert(0, sys.argv[1]); from triage.sources.workers import serve; serve()"


class WorkerFailed(Exception):
    """A worker died or could not split its range: the reader splits that range itself."""


class Worker:
    """One worker process, given the file once and then byte ranges, answering in the order asked."""

    def __init__(self, path: str, max_line_bytes: int) -> None:
        self._process = subprocess.Popen([sys.executable, "-I", "-c", _START, _PACKAGE_PARENT],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._send(("file", path, max_line_bytes))
        self._split: Split | None = None

    def ask(self, start: int, end: int, split: Split) -> None:
        if split is not self._split:       # sent when it changes (the quiet lines may be given up), not per range
            self._send(("split", split))
            self._split = split
        self._send(("range", start, end))

    def answer(self) -> SplitBlock:
        try:
            kind, value = pickle.load(cast(IO[bytes], self._process.stdout))
        except (EOFError, pickle.UnpicklingError, OSError) as err:
            raise WorkerFailed(f"the worker stopped: {err}") from err
        if kind != "ok":
            raise WorkerFailed(value)
        return cast(SplitBlock, value)

    def close(self) -> None:
        """Let it go: its answers still unread are dropped, and so is the range it may be splitting (a reader
        that lets workers go mid-file splits the rest itself), so it is stopped rather than waited for."""
        for stream in (self._process.stdout, self._process.stdin):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass              # a pipe it already broke: nothing left to flush
        self._process.kill()
        self._process.wait()

    def _send(self, message: tuple) -> None:
        try:
            stdin = cast(IO[bytes], self._process.stdin)
            pickle.dump(message, stdin, protocol=pickle.HIGHEST_PROTOCOL)
            stdin.flush()
        except OSError as err:
            raise WorkerFailed(f"the worker stopped: {err}") from err


def serve() -> None:
    """A worker's life: the file, then ranges to split, each answered in turn, until its input ends."""
    read, write = sys.stdin.buffer, sys.stdout.buffer
    path, max_line_bytes, split = "", 0, Split((), None)
    while True:
        try:
            message = pickle.load(read)
        except EOFError:
            return
        if message[0] == "file":
            _, path, max_line_bytes = message
            continue
        if message[0] == "split":
            split = message[1]
            continue
        _, start, end = message
        try:
            answer: tuple = ("ok", split_range(path, start, end, split, max_line_bytes))
        except Exception as err:  # noqa: BLE001 - any failure goes back to the reader, which splits the range itself
            answer = ("error", f"{type(err).__name__}: {err}")
        pickle.dump(answer, write, protocol=pickle.HIGHEST_PROTOCOL)
        write.flush()
