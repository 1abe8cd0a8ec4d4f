"""Logs damaged on their way to the user: NUL padding (logrotate's copytruncate, a crash mid-write), CR-only line
ends, UTF-16 with or without its BOM. Each is diagnosed as the clean log is, with a warning where bytes were
skipped; a file that is not text at all is still refused."""
from __future__ import annotations

import codecs
import json
import random
import struct
import sys
import zlib

import pytest

from conftest import FIXTURES, run_cli

KV_LOG = FIXTURES / "logs/v1/kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log"
WEIGHTS_LOG = FIXTURES / "logs/v1/weights_dont_fit-qwen25-14b-l4-offline-inproc-container-pid.log"   # no \r in it


def _diagnosis(path) -> tuple[int, dict, str]:
    result = run_cli("--format", "json", str(path))
    assert "Traceback" not in result.stderr.decode()
    return result.returncode, json.loads(result.stdout), result.stderr.decode()


def _evidence(report: dict, name: str) -> list:
    """The findings with the file's name taken out: where each was found, by line."""
    return json.loads(json.dumps(report["findings"]).replace(name, "LOG"))


def _mid_line_start(data: bytes) -> int:
    return data.index(b"\n", len(data) // 2) + 1


NUL_DAMAGE = {
    "start": (lambda d: b"\0" * 1_048_576 + d, "skipped 1,048,576 NUL bytes at the start of {}"),
    "mid-file": (lambda d: d[:_mid_line_start(d)] + b"\0" * 4096 + d[_mid_line_start(d):],
                 "skipped 4,096 NUL bytes in line {line} of {}"),
    "end": (lambda d: d + b"\0" * 102_400, "skipped 102,400 NUL bytes at the end of {}"),
}


@pytest.mark.parametrize("where", sorted(NUL_DAMAGE))
def test_nul_padding_is_skipped_with_a_warning_and_the_log_diagnosed(tmp_path, where):
    damage, warning = NUL_DAMAGE[where]
    clean = KV_LOG.read_bytes()
    path = tmp_path / "server.log"
    path.write_bytes(damage(clean))
    code, report, stderr = _diagnosis(path)
    clean_code, clean_report, _ = _diagnosis(KV_LOG)
    assert (code, report["verdict"], report["headline"]) == (clean_code, clean_report["verdict"],
                                                              clean_report["headline"])
    assert _evidence(report, str(path)) == _evidence(clean_report, str(KV_LOG))
    expected = warning.format(path, line=clean[:_mid_line_start(clean)].count(b"\n") + 1)
    assert expected in stderr
    assert any(expected in w for w in report["warnings"])


def test_nul_padding_warning_names_the_byte_and_a_likely_cause(tmp_path):
    clean = KV_LOG.read_bytes()
    path = tmp_path / "server.log"
    path.write_bytes(b"\0" * 65_536 + clean)
    result = run_cli(str(path))
    assert result.returncode == 1 and b"KV CACHE TOO SMALL" in result.stdout
    assert "copytruncate" in result.stderr.decode()
    middle = _mid_line_start(clean)
    path.write_bytes(clean[:middle] + b"\0" * 4096 + clean[middle:])
    assert f"at byte {middle:,}" in run_cli(str(path)).stderr.decode()


def test_a_file_of_nothing_but_nul_bytes_is_an_empty_log_not_a_binary_file(tmp_path):
    path = tmp_path / "zeroed.log"
    path.write_bytes(b"\0" * 200_000)
    result = run_cli(str(path))
    assert result.returncode == 3, result.stderr
    assert "skipped 200,000 NUL bytes" in result.stderr.decode()


@pytest.mark.parametrize("fixture", [KV_LOG, WEIGHTS_LOG], ids=["with-progress-bars", "plain"])
def test_cr_only_line_ends_are_line_ends(tmp_path, fixture):
    clean = fixture.read_bytes()
    path = tmp_path / "mac.log"
    path.write_bytes(clean.replace(b"\r\n", b"\n").replace(b"\n", b"\r"))
    code, report, stderr = _diagnosis(path)
    clean_code, clean_report, _ = _diagnosis(fixture)
    assert (code, report["verdict"], report["headline"]) == (clean_code, clean_report["verdict"],
                                                              clean_report["headline"])
    assert report["inputs"][0]["lines_read"] >= clean_report["inputs"][0]["lines_read"]
    if b"\r" not in clean:        # each line numbered as in the clean log
        assert _evidence(report, str(path)) == _evidence(clean_report, str(fixture))
    assert "Traceback" not in stderr


def test_progress_bars_inside_lf_lines_keep_the_line_numbers(tmp_path):
    """vLLM's tqdm bars redraw with \\r on one \\n-ended line: that line stays one line, as an editor numbers it."""
    clean = KV_LOG.read_bytes()
    assert b"\r" in clean
    _, report, _ = _diagnosis(KV_LOG)
    assert report["inputs"][0]["lines_read"] == clean.count(b"\n") + (not clean.endswith(b"\n"))


@pytest.mark.parametrize("codec,bom", [("utf-16-le", b""), ("utf-16-be", b""),
                                       ("utf-16-le", codecs.BOM_UTF16_LE), ("utf-16-be", codecs.BOM_UTF16_BE)],
                         ids=["le", "be", "le-bom", "be-bom"])
def test_utf16_is_read_with_or_without_its_bom(tmp_path, codec, bom):
    clean = WEIGHTS_LOG.read_bytes()
    path = tmp_path / "powershell.log"
    path.write_bytes(bom + clean.decode("utf-8").encode(codec))
    code, report, _ = _diagnosis(path)
    clean_code, clean_report, _ = _diagnosis(WEIGHTS_LOG)
    assert (code, report["verdict"], report["headline"]) == (clean_code, clean_report["verdict"],
                                                              clean_report["headline"])
    assert _evidence(report, str(path)) == _evidence(clean_report, str(WEIGHTS_LOG))


def _png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    rows = random.Random(7).randbytes(256 * 257)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 256, 256, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("make", [
    lambda: random.Random(1).randbytes(200_000),
    lambda: open(sys.executable, "rb").read(300_000),
    _png,
    lambda: b"\0" * 70_000 + random.Random(2).randbytes(100_000),
], ids=["random", "executable", "png", "nul-padded-random"])
def test_a_binary_file_is_still_refused_in_one_line(tmp_path, make):
    path = tmp_path / "not-a-log.log"
    path.write_bytes(make())
    result = run_cli(str(path))
    err = result.stderr.decode()
    assert result.returncode == 2 and "looks like a binary file" in err and err.count("\n") == 1
    assert str(path) in err
