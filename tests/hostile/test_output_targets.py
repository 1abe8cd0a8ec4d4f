"""-o onto what is not a plain file, and output that cannot be written: the target keeps its kind,
nothing is replaced that should not be, and every failure is one line, never `internal error`."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

LOG = (b"(EngineCore_DP0 pid=310) INFO 09-30 10:01:20 [gpu_worker.py:298] Available KV cache memory: 7.22 GiB\n"
       b"(EngineCore_DP0 pid=310) ERROR 09-30 10:01:21 [core.py:708] ValueError: To serve at least one request with "
       b"the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache "
       b"memory (7.22 GiB). Based on the available memory, the estimated maximum model length is 59136. Try increasing "
       b"`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")


@pytest.fixture
def log(tmp_path: Path) -> str:
    path = tmp_path / "server.log"
    path.write_bytes(LOG)
    return str(path)


def _one_line_error(result, *needles: str) -> str:
    err = result.stderr.decode()
    assert result.returncode == 2, (result.returncode, err)
    assert err.startswith("vtriage: error: ") and err.count("\n") == 1, err
    assert "internal error" not in err and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def _device(tmp_path: Path, name: str, minor: int) -> Path:
    """/dev/NAME as a test may write to it: a private node as root (so a bug cannot replace the
    machine's own: a rename over /dev/full once did), the real one otherwise (a user cannot rename over it)."""
    if os.geteuid() == 0:
        node = tmp_path / name
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        return node
    return Path("/dev") / name


def _null_device(tmp_path: Path) -> Path:
    """A character device that discards writes."""
    return _device(tmp_path, "null", 3)


def test_a_character_device_stays_a_device(tmp_path, log):
    device = _null_device(tmp_path)
    result = run_cli("-q", "-o", str(device), log)
    assert result.returncode == 1, result.stderr
    assert stat.S_ISCHR(device.stat().st_mode), "-o replaced the device with a regular file"
    assert not [p for p in device.parent.iterdir() if p.name.startswith(f".{device.name}.")]


def test_a_symlink_is_refused_and_neither_it_nor_its_target_changes(tmp_path, log):
    """Root writing -o /tmp/report.json must not replace what a link planted there points at."""
    real = tmp_path / "reports" / "latest.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "report.json"
    link.symlink_to(real)
    _one_line_error(run_cli("--format", "json", "-o", str(link), log), "symbolic link")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "old"


def test_a_dangling_symlink_is_refused_and_creates_nothing(tmp_path, log):
    link = tmp_path / "report.txt"
    link.symlink_to(tmp_path / "made.txt")
    _one_line_error(run_cli("-o", str(link), log), "symbolic link")
    assert link.is_symlink() and not (tmp_path / "made.txt").exists()


def test_a_symlink_to_an_input_is_refused(tmp_path, log):
    link = tmp_path / "alias.log"
    link.symlink_to(log)
    _one_line_error(run_cli("-o", str(link), log), "symbolic link")
    assert Path(log).read_bytes() == LOG


def test_a_symlink_loop_is_an_error(tmp_path, log):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    _one_line_error(run_cli("-o", str(tmp_path / "a"), log), "symbolic link")


def test_a_named_pipe_is_written_to_not_replaced(tmp_path, log):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = run_cli("-o", str(fifo), log)
    reader.join(30)
    assert result.returncode == 1, result.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert got and got[0].startswith(b"KV CACHE TOO SMALL")


def test_a_directory_is_an_error(tmp_path, log):
    _one_line_error(run_cli("-o", str(tmp_path), log), "is a directory")


def test_a_missing_directory_is_an_error(tmp_path, log):
    _one_line_error(run_cli("-o", str(tmp_path / "no" / "such" / "r.txt"), log), "does not exist")


def _unwritable_directory(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        return locked
    # root writes through permission bits; sysfs refuses new files even to root.
    try:
        fd = os.open("/sys/vtriage-probe", os.O_CREAT | os.O_WRONLY)
    except OSError:
        return Path("/sys")
    os.close(fd)
    os.unlink("/sys/vtriage-probe")
    pytest.skip("no directory here refuses root a new file")


def test_an_unwritable_directory_is_one_line(tmp_path, log):
    directory = _unwritable_directory(tmp_path)
    _one_line_error(run_cli("-o", str(directory / "report.txt"), log), "cannot write", "permission denied")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_disk_is_one_line_for_o_and_for_stdout(tmp_path, log):
    full = _device(tmp_path, "full", 7)          # a device whose every write fails with ENOSPC
    _one_line_error(run_cli("-o", str(full), log), str(full), "no space left")
    with open(full, "wb") as stdout:
        result = subprocess.run([sys.executable, "-m", "triage", "--format", "html", log], check=False, stdout=stdout,
                                stderr=subprocess.PIPE, cwd=ROOT, timeout=120)
    _one_line_error(result, "<stdout>", "no space left")
    assert stat.S_ISCHR(full.stat().st_mode)


def test_a_closed_pipe_ends_quietly(log):
    """`vtriage log | head -c1`: the reader went away; no traceback, no 'Exception ignored', not exit 0."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", "triage", "--format", "html", log], check=False, stdout=write,
                                stderr=subprocess.PIPE, cwd=ROOT, timeout=120)
    finally:
        os.close(write)
    assert result.returncode != 0 and result.stderr == b""


@pytest.mark.parametrize("command", [
    ["gpu", "--from", "{gpu}"],
    ["alerts", "{log}"],
    ["diff", "{log}", "{log}"],
])
def test_every_subcommand_writes_through_the_same_checks(tmp_path, log, command):
    gpu = tmp_path / "smi.txt"
    gpu.write_text((ROOT / "tests" / "data" / "gpu" / "nvidia-smi-h100-notebook.txt").read_text())
    args = [a.format(log=log, gpu=gpu) for a in command]
    device = _null_device(tmp_path)
    result = run_cli(*args, "-o", str(device))
    assert result.returncode in (0, 1, 3), result.stderr
    assert stat.S_ISCHR(device.stat().st_mode)
    _one_line_error(run_cli(*args, "-o", str(tmp_path)), "is a directory")
