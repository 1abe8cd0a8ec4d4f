"""The command line as a user runs it: exit codes, errors as one line, stdin, -o, colour."""
from __future__ import annotations

import gzip
import json

import pytest

from conftest import ROOT, run_cli

KV_LOG = b"""Loading model weights took 14.9888 GB
# GPU blocks: 1478, # CPU blocks: 2048
The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""  # noqa: E501 - log lines as vLLM prints them
HEALTHY_LOG = b"""INFO 01-22 18:27:20 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.0%, CPU KV cache usage: 0.0%.
"""  # noqa: E501 - log lines as vLLM prints them


def _write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_problem_exits_1_with_the_fix(tmp_path):
    result = run_cli(_write(tmp_path, "kv.log", KV_LOG))
    assert result.returncode == 1
    out = result.stdout.decode()
    assert "KV CACHE TOO SMALL" in out and "--max-model-len 23648" in out
    assert "kv.log:3" in out
    assert result.stderr == b""


def test_healthy_exits_0():
    result = run_cli("-", stdin=HEALTHY_LOG)
    assert result.returncode == 0 and b"HEALTHY" in result.stdout


def test_no_vllm_output_exits_3():
    result = run_cli("-", stdin=b"just some text\n")
    assert result.returncode == 3 and b"Nothing in the input is vLLM's own output" in result.stdout


def test_subcommand_form_and_module_form_agree(tmp_path):
    path = _write(tmp_path, "kv.log", KV_LOG)
    assert run_cli("diagnose", path).stdout == run_cli(path).stdout


@pytest.mark.parametrize("args,needle", [
    (["/nonexistent/server.log"], "no such file"),
    ([str(ROOT)], "is a directory"),
    ([], "no input"),
    (["--format", "pdf", "x.log"], "pdf"),
])
def test_usage_and_input_errors_are_one_line_exit_2(args, needle):
    result = run_cli(*args)
    err = result.stderr.decode()
    assert result.returncode == 2
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert result.stdout == b""


def test_binary_input_is_refused(tmp_path):
    result = run_cli(_write(tmp_path, "core.bin", bytes(range(256)) * 100))
    assert result.returncode == 2 and b"binary" in result.stderr and b"Traceback" not in result.stderr


def test_stdin_gzip_and_several_files(tmp_path):
    result = run_cli("-", stdin=gzip.compress(KV_LOG))
    assert result.returncode == 1 and b"KV CACHE TOO SMALL" in result.stdout
    both = run_cli(_write(tmp_path, "a.log", HEALTHY_LOG), _write(tmp_path, "b.log", KV_LOG), "--format", "json")
    data = json.loads(both.stdout)
    assert [i["path"].rsplit("/", 1)[-1] for i in data["inputs"]] == ["a.log", "b.log"]


def test_json_contract_has_the_documented_keys(tmp_path):
    result = run_cli("--format", "json", _write(tmp_path, "kv.log", KV_LOG))
    data = json.loads(result.stdout)
    for key in ("schema_version", "verdict", "confidence", "attempts", "findings", "ruled_out",
                "fixes", "inputs", "facts"):
        assert key in data
    assert data["verdict"] == "kv_cache_too_small"
    assert data["facts"]["kv_cache_tokens"]["value"] == 23648
    assert data["facts"]["kv_cache_tokens"]["evidence"][0]["line"] == 3
    fix = data["fixes"][0]
    assert fix["flag"] == "--max-model-len" and fix["value"] == 23648 and fix["why"]
    assert data["inputs"][0]["lines_read"] == 3 and data["inputs"][0]["lines_recognised"] == 3


def test_output_file_is_written_atomically_and_never_over_an_input(tmp_path):
    log = _write(tmp_path, "kv.log", KV_LOG)
    target = tmp_path / "report.json"
    result = run_cli(log, "--format", "json", "-o", str(target))
    assert result.returncode == 1 and result.stdout == b""
    assert json.loads(target.read_text())["verdict"] == "kv_cache_too_small"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert target.stat().st_mode & 0o044, "a report is readable by others, like any file the user writes"
    refused = run_cli(log, "-o", log)
    assert refused.returncode == 2 and b"refusing to overwrite" in refused.stderr
    assert (tmp_path / "kv.log").read_bytes() == KV_LOG


def test_colour_only_on_a_terminal_and_never_with_no_color(tmp_path):
    result = run_cli(_write(tmp_path, "kv.log", KV_LOG), env={"NO_COLOR": ""})
    assert b"\x1b[" not in result.stdout  # stdout is a pipe here


def test_bad_rules_directory_is_a_clear_error(tmp_path):
    result = run_cli("--rules", str(tmp_path), _write(tmp_path, "kv.log", KV_LOG))
    assert result.returncode == 2 and b"no rule files" in result.stderr


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith(b"vtriage, version")


def _slow_stdin_run(stderr_is_terminal: bool) -> tuple[int, bytes, bytes]:
    """vtriage - fed ~24 MiB over ~2.5 s, with stderr a pseudo-terminal or a pipe."""
    import os
    import pty
    import subprocess
    import sys
    import time
    chunk = (HEALTHY_LOG * 4096)[:1 << 20]
    master, slave = pty.openpty() if stderr_is_terminal else (None, None)
    proc = subprocess.Popen([sys.executable, "-m", "triage", "--format", "json", "-"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=slave if stderr_is_terminal else subprocess.PIPE,
                            env={**os.environ, "NO_COLOR": "1"})
    for _ in range(24):
        proc.stdin.write(chunk)
        proc.stdin.flush()
        time.sleep(0.1)
    proc.stdin.close()
    out = proc.stdout.read()
    proc.wait(timeout=120)
    if stderr_is_terminal:
        os.close(slave)
        err = _drain(master)
        os.close(master)
    else:
        err = proc.stderr.read()
    return proc.returncode, out, err


def test_a_long_read_shows_progress_on_a_terminal_and_never_in_a_pipe():
    code, out, err = _slow_stdin_run(stderr_is_terminal=True)
    assert code == 0 and json.loads(out)["verdict"] == "healthy"      # stdout stays clean JSON
    text = err.decode()
    assert "\rreading <stdin>: " in text and " MiB, " in text and "MB/s" in text, text
    assert text.endswith("\r\x1b[K")                                    # erased before the report
    code, out, err = _slow_stdin_run(stderr_is_terminal=False)
    assert code == 0 and json.loads(out)["verdict"] == "healthy"
    assert b"reading" not in err and b"\r" not in err


# --- pipes and files, like the tools on-call already uses ------------------------------------------

def test_a_pipe_is_read_without_a_dash(tmp_path):
    """`kubectl logs POD | vtriage` is the first thing people type."""
    piped = run_cli(stdin=KV_LOG)
    assert piped.returncode == 1 and b"KV CACHE TOO SMALL" in piped.stdout and b"<stdin>:3" in piped.stdout
    assert piped.stdout == run_cli("-", stdin=KV_LOG).stdout
    log = _write(tmp_path, "kv.log", KV_LOG)
    import subprocess
    import sys
    with open(log, "rb") as redirected:              # vtriage < kv.log
        result = subprocess.run([sys.executable, "-m", "triage", "--format", "json"], check=False, stdin=redirected,
                                capture_output=True, cwd=ROOT, timeout=120)
    assert result.returncode == 1 and json.loads(result.stdout)["verdict"] == "kv_cache_too_small"


def test_no_file_and_no_pipe_is_a_usage_error_that_shows_the_pipe():
    result = run_cli()          # stdin is /dev/null, as in a job with nothing piped in
    err = result.stderr.decode()
    assert result.returncode == 2 and "no input" in err and "| vtriage" in err and err.count("\n") == 1


@pytest.mark.parametrize("name,starts", [("r.html", "<!DOCTYPE html>"), ("r.htm", "<!DOCTYPE html>"),
                                         ("r.md", "### vtriage: KV cache too small"), ("r.MD", "### vtriage:"),
                                         ("r.json", "{"), ("r.txt", "KV CACHE TOO SMALL"),
                                         ("report", "KV CACHE TOO SMALL")])
def test_the_output_files_extension_picks_the_format(tmp_path, name, starts):
    target = tmp_path / name
    result = run_cli("-o", str(target), _write(tmp_path, "kv.log", KV_LOG))
    assert result.returncode == 1 and result.stdout == b"" and result.stderr == b""
    assert target.read_text().startswith(starts)


def test_a_format_that_contradicts_the_extension_is_a_usage_error(tmp_path):
    target = tmp_path / "report.html"
    result = run_cli("-o", str(target), "--format", "text", _write(tmp_path, "kv.log", KV_LOG))
    err = result.stderr.decode()
    assert result.returncode == 2 and "--format text contradicts -o" in err and err.count("\n") == 1
    assert not target.exists()
    agreeing = run_cli("-o", str(target), "--format", "HTML", _write(tmp_path, "kv.log", KV_LOG))
    assert agreeing.returncode == 1 and target.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("target,needle", [("{tmp}", "is a directory"), ("/sys/report.out", "cannot write in /sys"),
                                           ("{tmp}/missing/report.out", "does not exist")])
def test_an_output_path_that_cannot_be_written_is_a_one_line_usage_error(tmp_path, target, needle):
    target = target.format(tmp=tmp_path)
    for args in ([_write(tmp_path, "kv.log", KV_LOG)], ["diff", str(tmp_path / "kv.log"), str(tmp_path / "kv.log")],
                 ["alerts"], ["whatif", str(tmp_path / "kv.log"), "--max-model-len", "4096"]):
        result = run_cli(*args, "-o", target)
        err = result.stderr.decode()
        assert result.returncode == 2, (args, err)
        assert needle in err and err.count("\n") == 1 and "internal error" not in err and "Traceback" not in err


def _drain(master: int) -> bytes:
    """All a pseudo-terminal's program wrote, until it closed its side (read raises EIO then)."""
    import os
    out = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            return out
        out += data
    return out


def _on_a_terminal(*args: str) -> tuple[int, bytes]:
    """Run vtriage with stdout a pseudo-terminal, as when someone types the command."""
    import os
    import pty
    import subprocess
    import sys
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "triage", *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"})
    os.close(slave)
    out = _drain(master)
    proc.wait(timeout=120)
    os.close(master)
    return proc.returncode, out + proc.stderr.read()


def test_html_on_a_terminal_asks_for_a_file(tmp_path):
    log = _write(tmp_path, "kv.log", KV_LOG)
    code, shown = _on_a_terminal("--format", "html", log)
    assert code == 2 and b"-o report.html" in shown and b"<html" not in shown
    code, shown = _on_a_terminal("--format", "html", "--force", log)
    assert code == 1 and b"<!DOCTYPE html>" in shown
    assert run_cli("--format", "html", log).stdout.startswith(b"<!DOCTYPE html>")     # a pipe is fine


def test_other_commands_infer_the_format_too(tmp_path):
    log = _write(tmp_path, "kv.log", KV_LOG)
    assert run_cli("diff", log, log, "-o", str(tmp_path / "d.json")).returncode == 1
    assert json.loads((tmp_path / "d.json").read_text())["outcome"]
    wrong = run_cli("diff", log, log, "-o", str(tmp_path / "d.html"))
    assert wrong.returncode == 2 and b"writes text or json" in wrong.stderr
    assert run_cli("whatif", log, "--max-model-len", "4096", "-o", str(tmp_path / "w.json")).returncode == 0
    assert json.loads((tmp_path / "w.json").read_text())["schema_version"] == 1


def test_whatif_without_startup_figures_exits_3_as_its_help_says(tmp_path):
    result = run_cli("whatif", _write(tmp_path, "healthy.log", HEALTHY_LOG), "--max-model-len", "4096")
    err = result.stderr.decode()
    assert result.returncode == 3 and "no startup memory figures" in err and err.count("\n") == 1
    assert "3 the log lacks the figures" in run_cli("whatif", "--help").stdout.decode()


@pytest.mark.parametrize("command", [["alerts"], ["check", "--model-config", "fixtures/configs/qwen3-8b.json",
                                                  "--gpu-memory-gib", "80"]])
def test_one_vllm_version_syntax_everywhere(command):
    for good in ("0.10.2", "0.10", "v0.10.2", "0.10.1.1"):
        assert run_cli(*command, "--vllm-version", good).returncode in (0, 1, 3), good
    bad = run_cli(*command, "--vllm-version", "latest")
    assert bad.returncode == 2 and b"'latest' is not a vLLM release like 0.10.2" in bad.stderr
    assert "--vllm-version X.Y.Z" in run_cli(*command, "--help").stdout.decode()


def test_the_max_bytes_default_is_the_http_readers_limit():
    """--max-bytes' default, shown in --help, is the limit the HTTP reader applies when not given."""
    from triage.cli import _SIZE, DEFAULT_MAX_BYTES
    from triage.metrics.httpget import HttpOptions
    assert _SIZE.convert(DEFAULT_MAX_BYTES, None, None) == HttpOptions().max_bytes
