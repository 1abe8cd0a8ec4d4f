"""Inputs that are not plain files: pipes, FIFOs, process substitution, stdin; and archives that are
cut, corrupt, padded with garbage, in several members, UTF-16, or bombs. Every line that can be read
is read, and a warning says where the damage is."""
from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from triage.sources import files as sources
from triage.sources.files import LineReader, open_log

from conftest import ROOT, run_cli
from hostile_support import run_measured

# 104 lines.
STATS = ("(APIServer pid=1) INFO 09-30 10:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 "
         "tokens/s, Avg generation throughput: 41.7 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: "
         "2.0%, Prefix cache hit rate: 0.0%")
HEAD = [
    "(APIServer pid=1) INFO 09-30 10:00:01 [api_server.py:1816] vLLM API server version 0.10.2",
    "(APIServer pid=1) INFO 09-30 10:00:02 [utils.py:328] non-default args: {'model': 'google/gemma-3-12b-it', "
    "'max_model_len': 131072, 'gpu_memory_utilization': 0.85}",
    "(EngineCore_DP0 pid=310) INFO 09-30 10:00:52 [gpu_model_runner.py:2007] Model loading took 23.32 GiB and "
    "29.104213 seconds",
]
KV = ("(EngineCore_DP0 pid=310) ERROR 09-30 10:01:21 [core.py:708] ValueError: To serve at least one request with the "
      "models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the "
      "available KV cache memory "
      "(7.22 GiB). Based on the available memory, the estimated maximum model length is 59136. Try increasing "
      "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
# The verdict is decided in the first 4 KiB: a reader that drops them sees no vLLM output at all.
LOG = "\n".join([*HEAD, KV, *(f"kubelet: Back-off restarting failed container vllm in pod vllm-0 (attempt {i})"
                              for i in range(100))]) + "\n"


def _report(result) -> dict:
    assert result.returncode in (0, 1, 3), result.stderr
    assert b"Traceback" not in result.stderr
    return json.loads(result.stdout)


def _bash(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], check=False, capture_output=True, cwd=cwd, timeout=120,
                          env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)})


def test_process_substitution_reads_every_byte(tmp_path):
    (tmp_path / "log").write_text(LOG)
    report = _report(_bash(f"{sys.executable} -m triage --format json <(cat log)", tmp_path))
    assert report["verdict"] == "kv_cache_too_small"
    assert report["inputs"][0]["lines_read"] == 104


def test_a_compressed_log_through_process_substitution(tmp_path):
    (tmp_path / "log.gz").write_bytes(gzip.compress(LOG.encode()))
    report = _report(_bash(f"{sys.executable} -m triage --format json <(cat log.gz)", tmp_path))
    assert report["verdict"] == "kv_cache_too_small" and report["inputs"][0]["lines_read"] == 104


def test_a_named_fifo_is_read_once_and_does_not_hang(tmp_path):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "w") as handle:
            handle.write(LOG)
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    report = _report(run_cli("--format", "json", str(fifo)))
    writer.join(10)
    assert report["verdict"] == "kv_cache_too_small" and report["inputs"][0]["lines_read"] == 104


def test_stdin_through_a_pipe(tmp_path):
    report = _report(run_cli("--format", "json", "-", stdin=LOG.encode()))
    assert report["verdict"] == "kv_cache_too_small" and report["inputs"][0]["lines_read"] == 104


def test_a_metrics_snapshot_through_process_substitution(tmp_path):
    (tmp_path / "m.prom").write_text((ROOT / "fixtures" / "metrics"
                                      / "v1-0.11.1-llama31-8b-h100-healthy.prom").read_text())
    report = _report(_bash(f"{sys.executable} -m triage --format json --metrics <(cat m.prom)", tmp_path))
    assert report["facts"]["kv_cache_usage_max"]["value"] is not None


# --- archives -----------------------------------------------------------------------------------

PACKERS = {"gzip": gzip.compress, "xz": lzma.compress, "bzip2": bz2.compress}
# A log big enough for several bzip2 blocks (900 kB each) so a cut one keeps the blocks before the cut.
BIG = LOG + "".join(STATS.format(m=i // 60 % 60, s=i % 60) + f" #{i}\n" for i in range(12_000))


def _lines(path: Path) -> tuple[list[tuple[int, str]], list[str]]:
    reader = LineReader(open_log(str(path)))
    return list(reader), list(reader.result().warnings)


@pytest.mark.parametrize("kind", sorted(PACKERS))
def test_an_archive_cut_at_90_percent_keeps_the_lines_before_the_cut(tmp_path, kind):
    body = BIG.encode()
    data = PACKERS[kind](body)
    path = tmp_path / f"cut.{kind}"
    path.write_bytes(data[: len(data) * 9 // 10])
    lines, warnings = _lines(path)
    total = body.count(b"\n")
    floor = 0.5 if kind == "bzip2" else 0.85       # bzip2 loses its last (900 kB) block whole
    assert floor * total < len(lines) < total, (len(lines), total)
    assert [text for _, text in lines[:-1]] == body.decode().splitlines()[:len(lines) - 1]
    assert any("ends early" in w and "cut short at byte" in w and f"{len(lines):,} line(s) before it" in w
               for w in warnings), warnings


@pytest.mark.parametrize("kind", ["gzip", "xz"])
def test_a_small_archive_cut_keeps_its_lines(tmp_path, kind):
    """A cut 2 KiB log: the read that hit the cut used to drop everything (0 of 104 lines)."""
    data = PACKERS[kind](LOG.encode())
    path = tmp_path / f"cut.{kind}"
    path.write_bytes(data[: len(data) * 9 // 10])
    result = run_cli("--format", "json", str(path))
    report = _report(result)
    assert report["inputs"][0]["lines_read"] > 52
    assert report["verdict"] == "kv_cache_too_small"
    assert any("ends early" in w for w in report["warnings"])


def test_a_bzip2_cut_inside_its_only_block_is_one_clear_error(tmp_path):
    data = bz2.compress(LOG.encode())
    path = tmp_path / "cut.bz2"
    path.write_bytes(data[: len(data) * 9 // 10])
    result = run_cli(str(path))
    err = result.stderr.decode()
    assert result.returncode == 2 and err.count("\n") == 1 and "nothing could be read" in err and "bzip2" in err


@pytest.mark.parametrize("garbage", [b"garbage after the archive\n", os.urandom(4096), b"\x00" * 1024])
def test_trailing_garbage_is_ignored_like_zcat(tmp_path, garbage):
    path = tmp_path / "log.gz"
    path.write_bytes(gzip.compress(LOG.encode()) + garbage)
    lines, warnings = _lines(path)
    assert len(lines) == 104
    if garbage.strip(b"\x00"):
        assert any("not gzip: ignored" in w for w in warnings), warnings
    else:
        assert warnings == [], "zero padding (tar, dd) is not worth a warning"


@pytest.mark.parametrize("kind", sorted(PACKERS))
def test_several_members_read_as_one(tmp_path, kind):
    lines = LOG.splitlines(keepends=True)
    path = tmp_path / f"multi.{kind}"
    path.write_bytes(b"".join(PACKERS[kind]("".join(lines[i:i + 30]).encode()) for i in range(0, len(lines), 30)))
    got, warnings = _lines(path)
    assert [text for _, text in got] == LOG.splitlines() and warnings == []


def test_a_corrupt_gzip_keeps_what_came_before(tmp_path):
    data = bytearray(gzip.compress(BIG.encode()))
    middle = len(data) // 2
    data[middle:middle + 64] = os.urandom(64)
    path = tmp_path / "corrupt.gz"
    path.write_bytes(bytes(data))
    lines, warnings = _lines(path)
    assert len(lines) > 1000 and any("ends early" in w for w in warnings), warnings


def test_utf16_with_a_bom_is_read(tmp_path):
    """PowerShell's `>` writes UTF-16 with a BOM; it is a text log, not a binary file."""
    for encoding in ("utf-16", "utf-16-be"):
        path = tmp_path / f"log-{encoding}.txt"
        data = LOG.encode(encoding)
        path.write_bytes(data if encoding == "utf-16" else b"\xfe\xff" + data)
        report = _report(run_cli("--format", "json", str(path)))
        assert report["verdict"] == "kv_cache_too_small" and report["inputs"][0]["lines_read"] == 104


def test_a_utf8_bom_is_dropped(tmp_path):
    path = tmp_path / "bom.log"
    path.write_bytes(b"\xef\xbb\xbf" + LOG.encode())
    lines, _ = _lines(path)
    assert lines[0][1] == HEAD[0]


def test_a_gzip_bomb_stops_with_a_warning_in_bounded_time_and_memory(tmp_path):
    """2 GiB of newlines gzip to 2 MiB: reading stops at the ratio cap, not minutes later."""
    member = gzip.compress(b"\n" * (8 << 20), 9)         # 8 MiB in about 8 KiB; 256 of them make 2 GiB
    path = tmp_path / "bomb.log.gz"
    path.write_bytes(gzip.compress(LOG.encode()) + member * 256)
    run = run_measured("--format", "json", str(path), limit_s=240)
    assert run.returncode == 1, run.stderr
    report = run.report()
    assert report["verdict"] == "kv_cache_too_small"
    assert any("decompression bomb" in w for w in report["warnings"]), report["warnings"]
    # generous bounds (a shared, noisy machine): unbounded, this read 2 GiB for minutes
    assert run.seconds < 120 and run.peak_mib < 800, (run.seconds, run.peak_mib)


def test_a_block_that_starts_past_the_line_cap_is_not_read(tmp_path, monkeypatch):
    """The cap is checked after each block: one ending exactly at it is followed by a block all past it, which
    gives no lines (it once raised IndexError)."""
    line = b"INFO 01-02 03:04:05 x.py:1] a line of the log\n"
    path = tmp_path / "long.log"
    path.write_bytes(line * 5000)
    monkeypatch.setattr(sources, "BLOCK_BYTES", 50 * len(line))
    blocks = LineReader(open_log(str(path))).blocks()
    cap = len(next(blocks)[0]) + len(next(blocks)[0])      # the first two blocks' lines
    blocks.close()
    monkeypatch.setattr(sources, "MAX_LINES", cap)
    reader = LineReader(open_log(str(path)))
    lines = list(reader)
    assert len(lines) == cap < 5000 and reader.result().lines_read == cap
    assert any(f"stopped after {cap:,} lines" in w for w in reader.result().warnings)


def test_lines_per_input_are_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "MAX_LINES", 50)
    path = tmp_path / "long.log"
    path.write_text(LOG)
    reader = LineReader(open_log(str(path)))
    lines = list(reader)
    assert len(lines) == 50 and reader.result().lines_read == 50
    assert any("stopped after 50 lines" in w for w in reader.result().warnings)
