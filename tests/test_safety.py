"""Running vtriage as root in a shared folder: no code from the working folder runs, -o writes only the
named regular file, an input is never the output, and FIFOs say what they wait for (docs/safety.md)."""
from __future__ import annotations

import json
import os
import select
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from triage.sources.files import PARALLEL_MIN_BYTES

from conftest import ROOT, run_cli

VTRIAGE = shutil.which("vtriage", path=str(Path(sys.executable).parent)) or "vtriage"

REQUEST = ("(APIServer pid=1) INFO 09-30 10:00:00 [logger.py:43] Received request chatcmpl-{i:08x}: "
           "prompt: 'hello there', params: SamplingParams(n=1, temperature=0.7), prompt_token_ids: None.\n")


def _large_log(path: Path) -> None:
    """A log just over the size that starts worker processes, of request lines the workers set aside."""
    chunk = "".join(REQUEST.format(i=i) for i in range(4096)).encode()
    with open(path, "wb") as out:
        for _ in range(PARALLEL_MIN_BYTES // len(chunk) + 1):
            out.write(chunk)


def test_no_code_from_the_working_folder_runs_while_reading_a_large_log(tmp_path):
    """A `triage/` package planted in the folder vtriage runs in (a shared /tmp) is never imported, neither by
    vtriage nor by the worker processes a large log starts."""
    marker = tmp_path / "ran"
    planted = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    package = tmp_path / "triage"
    (package / "sources").mkdir(parents=True)
    for module in ("__init__.py", "sources/__init__.py", "sources/workers.py"):
        (package / module).write_text(planted + "def serve():\n    pass\n")
    log = tmp_path / "big.log"
    _large_log(log)
    result = subprocess.run([VTRIAGE, "--format", "json", log.name], capture_output=True, cwd=tmp_path,
                            stdin=subprocess.DEVNULL, timeout=300, check=False)
    assert result.returncode in (0, 1, 3), result.stderr.decode()
    assert b'"lines_read": ' in result.stdout
    assert not marker.exists(), marker.read_text()


KV_LOG = (b"Loading model weights took 14.9888 GB\n# GPU blocks: 1478, # CPU blocks: 2048\n"
          b"The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache "
          b"(23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
          b"engine.\n")


def _log(tmp_path: Path) -> str:
    path = tmp_path / "kv.log"
    path.write_bytes(KV_LOG)
    return str(path)


def _one_line_error(result, *needles: str) -> str:
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def test_output_through_a_symlink_is_refused_and_its_target_left_alone(tmp_path):
    """Root running `-o /tmp/report.txt` where someone planted report.txt -> /etc/passwd: the link's target is
    never written or replaced, nor is a file created where a dangling link points."""
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0\n")
    link = tmp_path / "report.txt"
    link.symlink_to(victim)
    nowhere = tmp_path / "cron-job"
    dangling = tmp_path / "report.json"
    dangling.symlink_to(nowhere)
    for output in (link, dangling):
        for args in ([_log(tmp_path)], ["diff", _log(tmp_path), _log(tmp_path)], ["alerts"]):
            result = run_cli(*args, "-o", str(output))
            _one_line_error(result, str(output), "symbolic link", "hint:")
            assert output.is_symlink()
    assert victim.read_text() == "root:x:0:0\n" and not nowhere.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kv.log", "passwd", "report.json", "report.txt"]


def test_output_is_only_ever_a_regular_file(tmp_path):
    """-o writes the named regular file; a directory or a socket there is refused, not replaced."""
    import socket
    log = _log(tmp_path)
    listening = socket.socket(socket.AF_UNIX)
    sock_path = tmp_path / "s.sock"
    listening.bind(str(sock_path))
    try:
        _one_line_error(run_cli(log, "-o", str(sock_path)), str(sock_path), "socket", "hint:")
        assert sock_path.is_socket()
    finally:
        listening.close()
    _one_line_error(run_cli(log, "-o", str(tmp_path)), "is a directory")
    quiet = run_cli(log, "-o", "/dev/null")             # a character device is written to, as the shell's > would
    assert quiet.returncode == 1 and quiet.stdout == b"" and quiet.stderr == b"", quiet.stderr.decode()
    written = run_cli(log, "-o", str(tmp_path / "report.txt"))
    assert written.returncode == 1 and (tmp_path / "report.txt").read_text().startswith("KV CACHE TOO SMALL")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kv.log", "report.txt", "s.sock"]   # no temporary left


def test_the_log_read_on_stdin_is_never_the_output(tmp_path):
    """`vtriage -o x.log < x.log` is refused before anything is written, and the log is unchanged."""
    log = _log(tmp_path)
    for args in ([], ["-"], ["diff", "-", log]):
        with open(log, "rb") as stdin:
            result = subprocess.run([sys.executable, "-m", "triage", *args, "-o", log], stdin=stdin,
                                    capture_output=True, cwd=ROOT, timeout=120, check=False)
        _one_line_error(result, log, "stdin", "hint:")
        assert Path(log).read_bytes() == KV_LOG
    with open(log, "rb") as stdin:      # another output is fine
        result = subprocess.run([sys.executable, "-m", "triage", "-o", str(tmp_path / "r.json")], stdin=stdin,
                                capture_output=True, cwd=ROOT, timeout=120, check=False)
    assert result.returncode == 1 and json.loads((tmp_path / "r.json").read_text())["verdict"] == "kv_cache_too_small"


@pytest.mark.parametrize("output", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_output_to_stdout_by_name_reaches_the_pipe(tmp_path, output):
    """`-o /dev/stdout` with stdout a pipe writes the report into the pipe (a rename cannot replace a pipe)."""
    result = run_cli(_log(tmp_path), "--format", "json", "-o", output)
    assert result.returncode == 1, result.stderr.decode()
    assert json.loads(result.stdout)["verdict"] == "kv_cache_too_small"


def test_output_to_the_file_that_is_stdout_is_written_straight_to_it(tmp_path):
    """`vtriage -o r.json >> r.json`: one report, written where stdout already points, not a second file."""
    target = tmp_path / "r.json"
    with open(target, "ab") as stdout:
        result = subprocess.run([sys.executable, "-m", "triage", _log(tmp_path), "-o", str(target)],
                                stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT,
                                timeout=120, check=False)
        assert os.fstat(stdout.fileno()).st_ino == target.stat().st_ino
    assert result.returncode == 1, result.stderr.decode()
    assert json.loads(target.read_text())["verdict"] == "kv_cache_too_small"


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "triage", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)


def _stderr_line(process: subprocess.Popen, within: float) -> str:
    """The first line vtriage writes on stderr, waiting at most `within` seconds."""
    ready, _, _ = select.select([process.stderr], [], [], within)
    assert ready, f"nothing on stderr within {within} s"
    return process.stderr.readline().decode()     # type: ignore[union-attr]


def test_output_to_a_fifo_says_it_waits_for_a_reader_then_writes_the_report(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    process = _start(_log(tmp_path), "--format", "json", "-o", str(fifo))
    try:
        line = _stderr_line(process, 60)
        assert line == f"vtriage: waiting for a reader on FIFO {fifo}\n"
        assert process.poll() is None                          # still waiting, not given up
        with open(fifo, "rb") as reader:
            report = reader.read()
        assert process.wait(timeout=60) == 1
    finally:
        process.kill()
        process.wait()
    assert json.loads(report)["verdict"] == "kv_cache_too_small"
    assert stat.S_ISFIFO(fifo.lstat().st_mode), "the FIFO is written to, not replaced by a file"
    reader = os.open(fifo, os.O_RDWR)        # a reader already there: nothing to wait for, nothing said
    try:
        result = run_cli(_log(tmp_path), "-o", str(fifo))
        assert result.returncode == 1 and result.stderr == b"", result.stderr.decode()
        assert os.read(reader, 1 << 16).startswith(b"KV CACHE TOO SMALL")
    finally:
        os.close(reader)


def test_a_fifo_input_says_it_waits_for_a_writer_then_reads_the_log(tmp_path):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    process = _start("--format", "json", str(fifo))
    try:
        line = _stderr_line(process, 60)
        assert line == f"vtriage: waiting for a writer on FIFO {fifo}\n"
        assert process.poll() is None
        with open(fifo, "wb") as writer:
            writer.write(KV_LOG)
        out, _ = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 1 and json.loads(out)["verdict"] == "kv_cache_too_small"



def test_the_fifo_notice_escapes_control_characters_and_masks_a_token_in_the_name(tmp_path):
    token = "hf_" + "abcdefghijklmnopqrstuvwxyz123456"
    fifo = tmp_path / f"log-\x1b]0;pwned\x07-{token}.fifo"
    os.mkfifo(fifo)
    process = _start("--format", "json", str(fifo))
    try:
        line = _stderr_line(process, 60)
        with open(fifo, "wb") as writer:
            writer.write(KV_LOG)
        process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert line.startswith("vtriage: waiting for a writer on FIFO ") and line.endswith("\n"), line
    assert "\x1b" not in line and "\x07" not in line and "\\x1b" in line, line
    assert token not in line, line
