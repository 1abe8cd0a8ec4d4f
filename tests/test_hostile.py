"""Hostile input: each one gives a clear one-line error or a partial result with a warning, never a traceback."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_cli


def _one_line_error(result, needle: str) -> None:
    err = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, err)
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_empty_file_is_no_vllm_output_with_a_warning(tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    result = run_cli("--format", "json", str(path))
    data = json.loads(result.stdout)
    assert result.returncode == 3 and data["verdict"] == "inconclusive"
    assert any("empty" in w for w in data["warnings"])


def test_random_bytes_are_refused(tmp_path):
    path = tmp_path / "noise.bin"
    path.write_bytes(os.urandom(100_000))
    _one_line_error(run_cli(str(path)), "binary")


def test_device_of_random_bytes_is_refused():
    if not os.path.exists("/dev/urandom"):
        pytest.skip("no /dev/urandom")
    _one_line_error(run_cli("/dev/urandom"), "binary")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files without permission bits")
def test_unreadable_file(tmp_path):
    path = tmp_path / "secret.log"
    path.write_text("x\n")
    path.chmod(0)
    _one_line_error(run_cli(str(path)), "permission denied")


def test_truncated_gzip_gives_a_partial_result_and_a_warning(tmp_path):
    body = "".join(f"INFO 01-22 18:27:{i % 60:02d} metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg "
                   f"generation throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV "
                   f"cache usage: 2.0%, CPU KV cache usage: 0.0%.\n" for i in range(20000)).encode()
    data = gzip.compress(body)
    path = tmp_path / "cut.log.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    result = run_cli("--format", "json", str(path))
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["verdict"] == "healthy"
    assert any("ends early" in w for w in report["warnings"])
    assert 0 < report["inputs"][0]["lines_read"] < 20000


def test_huge_single_line_is_cut_with_a_warning(tmp_path):
    """A line far longer than anything vLLM prints is cut at the limit; memory stays bounded."""
    script = (
        "import sys; from triage import sources; sources.MAX_LINE_BYTES = 1 << 16; "
        "sources.BLOCK_BYTES = 1 << 14; from triage.cli import main; main()")
    path = tmp_path / "long.log"
    with path.open("wb") as handle:
        handle.write(b"INFO:     Application startup complete.\n")
        handle.write(b"y" * (5 << 20) + b"\n")
        handle.write(b"INFO 01-22 18:27:20 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation "
                     b"throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache "
                     b"usage: 2.0%, CPU KV cache usage: 0.0%.\n")
    result = subprocess.run([sys.executable, "-c", script, "--format", "json", str(path)], check=False,
                            capture_output=True, cwd=ROOT, env={**os.environ, "NO_COLOR": "1"}, timeout=120)
    report = json.loads(result.stdout)
    assert report["verdict"] == "healthy" and report["inputs"][0]["lines_read"] == 3
    assert any("cut" in w for w in report["warnings"])


def test_nul_bytes_and_mixed_encodings(tmp_path):
    path = tmp_path / "mixed.log"
    path.write_bytes(b"INFO:     Application startup complete.\n\x00\x00caf\xe9 \xff\xfe bad bytes\n"
                     + "日本語のログ行\n".encode() + b"ValueError: No available memory for the cache blocks.\n")
    result = run_cli("--format", "json", str(path))
    assert result.returncode == 1 and json.loads(result.stdout)["verdict"] == "kv_cache_too_small"


def test_log_that_ends_mid_traceback(tmp_path):
    path = tmp_path / "cut.log"
    path.write_text("(EngineCore_DP0 pid=7) INFO 09-30 10:00:50 [gpu_model_runner.py:1953] Starting "
                    "to load model m...\n"
                    "(EngineCore_DP0 pid=7) ERROR 09-30 10:01:00 [core.py:708] Traceback (most recent call last):\n"
                    '(EngineCore_DP0 pid=7) ERROR 09-30 10:01:00 [core.py:708]   File '
                    '"/x/vllm/model_executor/model_loader/'
                    'default_loader.py", line 269, in load_wei')
    result = run_cli("--format", "json", str(path))
    report = json.loads(result.stdout)
    # The error's type is cut off, but its frame is the model loader's: the likeliest class, said as such.
    assert result.returncode == 1 and (report["verdict"], report["confidence"]) == ("weights_dont_fit", "low")
    assert report["facts"]["failed_phase"]["value"] == "loading_weights"


@pytest.mark.parametrize("line", [
    "(EngineCore pid=1) INFO 11-30 00:49:12 [kv_cache_utils.py:1150] GPU KV cache size: "
    "1,000,000,000,000,000,000,000,000,000,000 tokens, Maximum concurrency for 32,768 tokens per request: 9e99x",
    "(EngineCore_DP0 pid=2) INFO 09-30 10:01:40 [gpu_worker.py:298] Available KV cache memory: -12345678.9 GiB",
    "ValueError: The model's max seq len (" + "9" * 5000 + ") is larger than the maximum number of tokens that can "
    "be stored in KV cache (12).",
])
def test_absurd_numbers_do_not_crash(tmp_path, line):
    path = tmp_path / "absurd.log"
    path.write_text(line + "\n")
    result = run_cli("--format", "json", str(path))
    assert result.returncode in (0, 1, 3), result.stderr
    json.loads(result.stdout)


def test_settings_vllm_would_refuse_are_unknown_not_used(tmp_path):
    """A mangled log can show tensor_parallel_size=0: no division by it, and the fact is unknown."""
    path = tmp_path / "zero-tp.log"
    path.write_text(
        "INFO 09-04 01:12:55 llm_engine.py:184] Initializing an LLM engine (v0.5.5) with config: "
        "model='meta-llama/Llama-2-13b-chat-hf', tokenizer='meta-llama/Llama-2-13b-chat-hf', dtype=torch.float16, "
        "max_seq_len=0, tensor_parallel_size=0, pipeline_parallel_size=0, gpu_memory_utilization=7.5, seed=0)\n"
        "INFO 09-04 01:13:18 llm_engine.py:357] # GPU blocks: 0, # CPU blocks: 512\n"
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.\n")
    result = run_cli("--format", "json", str(path))
    assert result.returncode == 1, result.stderr
    facts = json.loads(result.stdout)["facts"]
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "gpu_memory_utilization"):
        assert name not in facts or facts[name]["value"] is None, name

