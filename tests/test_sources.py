"""Inputs as they arrive: compressed, CRLF, broken UTF-8, truncated, absurdly long lines."""
from __future__ import annotations

import bz2
import gzip
import lzma

import pytest

from triage.errors import InputError
from triage.sources.files import MAX_LINE_BYTES, LineReader, iter_lines, open_log

BODY = b"INFO 01-01 00:00:00 worker.py:1] first\nsecond line\n"


@pytest.mark.parametrize("suffix,pack", [(".log", lambda b: b), (".gz", gzip.compress), (".bz2", bz2.compress),
                                         (".xz", lzma.compress), (".txt", gzip.compress)])
def test_compressed_inputs_read_by_content(tmp_path, suffix, pack):
    """Compression is recognised from the bytes, not the name."""
    path = tmp_path / f"log{suffix}"
    path.write_bytes(pack(BODY))
    assert [t for _, t in iter_lines(open_log(str(path)))] == ["INFO 01-01 00:00:00 worker.py:1] first", "second line"]


def test_crlf_and_invalid_utf8_and_nul(tmp_path):
    path = tmp_path / "win.log"
    path.write_bytes(b"caf\xe9 latin-1\r\nok\x00 line\r\nlast without newline")
    got = [t for _, t in iter_lines(open_log(str(path)))]
    assert got == ["caf\ufffd latin-1", "ok line", "last without newline"]


def test_truncated_gzip_yields_what_it_has_and_warns(tmp_path):
    data = gzip.compress(b"".join(b"INFO 01-01 00:00:00 w.py:1] line %d\n" % i for i in range(5000)))
    path = tmp_path / "cut.log.gz"
    path.write_bytes(data[: len(data) // 2])
    reader = LineReader(open_log(str(path)))
    lines = list(reader)
    assert 0 < len(lines) < 5000
    warnings = reader.result().warnings
    assert warnings and "ends early" in warnings[0]


def test_very_long_line_is_cut_not_held(tmp_path):
    path = tmp_path / "long.log"
    with path.open("wb") as handle:
        handle.write(b"x" * (MAX_LINE_BYTES * 3) + b"\nafter\n")
    reader = LineReader(open_log(str(path)))
    lines = list(reader)
    assert [n for n, _ in lines] == [1, 2] and lines[1][1] == "after"
    assert len(lines[0][1]) <= MAX_LINE_BYTES
    assert "cut" in reader.result().warnings[0]


@pytest.mark.parametrize("make,needle", [
    (lambda p: None, "no such file"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.write_bytes(bytes(range(256)) * 200), "binary"),
])
def test_bad_inputs_are_one_line_errors(tmp_path, make, needle):
    path = tmp_path / "input"
    make(path)
    with pytest.raises(InputError) as err:
        inp = open_log(str(path))
        list(iter_lines(inp))
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert str(path) in str(err.value)
