"""`vtriage gpu`: GPU memory and its processes from NVML (a fake NVML layer here: CI has no GPU) or
from pasted nvidia-smi output, processes that are not vLLM flagged, and the figures used as
external-pressure evidence by the diagnosis."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from triage.errors import InputError
from triage.facts.gpu_snapshot import snapshot_facts
from triage.gpu.probe import GpuUnavailable, probe
from triage.gpu.smi import parse_nvidia_smi, read_gpu_input

from conftest import ROOT, SHARED, run_cli
from test_docs import SCHEMA

DATA = ROOT / "tests" / "data" / "gpu"
FAKE = ROOT / "tests" / "fake_nvml"
CAPTURES = SHARED / "gpu-captures" / "torch-2.11-h200"
GIB = 2**30
MIB = 2**20
# An OOM whose log shows neither the phase nor who held the memory: on its own, inconclusive.
UNPLACED_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                "capacity of 79.19 GiB of which 1.02 GiB is free.\n")


def _read(name: str, *pids: int):
    return parse_nvidia_smi((DATA / name).read_text(), name, pids)


# --- pasted nvidia-smi ---------------------------------------------------------------------------

def test_line_numbers_are_an_editors_whatever_the_text_holds():
    """A form feed a pager left at the top (str.splitlines ends a line there) and Windows line ends: the evidence
    still names the line an editor shows."""
    text = (DATA / "nvidia-smi-h100-notebook.txt").read_text()
    for pasted in ("\x0c" + text, text.replace("\n", "\r\n")):
        snap = parse_nvidia_smi(pasted, "paste.txt", [41877])
        [ref] = snapshot_facts(snap)[0]["other_processes_gib"].evidence
        assert ref.line == 26 and ref.text.startswith("52210, ") and "\r" not in ref.text


def test_table_and_compute_apps_csv_together():
    snap = _read("nvidia-smi-h100-notebook.txt")
    [gpu] = snap.devices
    assert (gpu.index, gpu.name, gpu.total_mib, gpu.used_mib) == (0, "NVIDIA H100 80GB HBM3", 81559, 79870)
    assert snap.driver == "550.127.05" and snap.taken_at == "Tue Mar 10 09:14:52 2026"
    procs = {p.pid: p for p in snap.processes}
    assert procs[52210].name == "/home/ana/miniconda3/envs/notebook/bin/python"     # the CSV's full name
    assert (procs[41877].used_mib, procs[52210].used_mib) == (63950, 15342)
    # a bare python could be vLLM: without --vllm-pid nothing is counted, and the report says why
    assert {p.vllm for p in snap.processes} == {None}
    facts, warnings = snapshot_facts(snap)
    assert "other_processes_gib" not in facts and "name it with --vllm-pid" in warnings[0]


def test_vllm_pid_makes_every_other_process_external_with_its_line_as_evidence():
    snap = _read("nvidia-smi-h100-notebook.txt", 41877)
    facts, warnings = snapshot_facts(snap)
    assert warnings == []
    assert facts["other_processes_gib"].value == pytest.approx(15342 / 1024, abs=1e-3)
    assert facts["other_processes"].value == 1
    assert facts["gpu_total_gib"].value == pytest.approx(81559 / 1024, abs=1e-3)
    [ref] = facts["other_processes_gib"].evidence
    assert (ref.path, ref.line) == ("nvidia-smi-h100-notebook.txt", 26) and ref.text.startswith("52210, ")


def test_the_old_table_with_two_gpus_picks_the_gpu_under_pressure():
    snap = _read("nvidia-smi-418-two-v100.txt")
    assert [(d.index, d.used_mib, d.total_mib) for d in snap.devices] == [(0, 14528, 16130), (1, 16021, 16130)]
    triton = next(p for p in snap.processes if p.pid == 20999)
    assert (triton.gpu, triton.vllm) == (1, False)                   # its name is not a Python interpreter
    assert snapshot_facts(snap)[0].get("other_processes_gib") is None   # GPU 1's python3 could still be vLLM
    facts, _ = snapshot_facts(_read("nvidia-smi-418-two-v100.txt", 20417, 20418))
    assert facts["other_processes_gib"].value == pytest.approx(4800 / 1024, abs=1e-3)
    assert facts["gpu_total_gib"].value == pytest.approx(16130 / 1024, abs=1e-3)
    assert "on GPU 1" in facts["other_processes_gib"].note


def test_headerless_csv_and_the_gpu_query():
    apps = _read("compute-apps-noheader.csv")
    assert [(p.pid, p.name, p.used_mib, p.vllm) for p in apps.processes] == [
        (7731, "/opt/venv/bin/python3", 38122, None), (9120, "ollama", 6144, False)]
    query = _read("gpu-query.csv")
    [gpu] = query.devices
    assert (gpu.name, gpu.total_mib, gpu.used_mib, gpu.free_mib) == ("NVIDIA L40S", 46068, 44391, 1129)
    assert gpu.uuid == "GPU-5c1a0e31-0a8e-2c4d-94a7-2a3f4f0f9b61"


def test_text_that_shows_no_gpu_is_an_input_error():
    with pytest.raises(InputError, match="shows no GPU and no GPU process"):
        read_gpu_input("Tue Mar 10 09:14:52 2026\nNo devices were found\n", "smi.txt")


@pytest.mark.skipif(not CAPTURES.exists(), reason="../shared/gpu-captures is not next to this checkout")
def test_real_h200_captures():
    idle = parse_nvidia_smi((CAPTURES / "nvidia-smi.txt").read_text(), "nvidia-smi.txt")
    assert [(d.total_mib, d.used_mib) for d in idle.devices] == [(143771, 527)]
    assert [(p.pid, p.used_mib) for p in idle.processes] == [(413, 518)]
    busy = parse_nvidia_smi((CAPTURES / "nvidia-smi-pressure.txt").read_text(), "pressure.txt", (413,))
    # the table cuts pid 437's size to "10291..."; the CSV in the same paste gives it
    assert {p.pid: p.used_mib for p in busy.processes} == {413: 518, 437: 102918}
    assert busy.devices[0].free_mib == 39706
    assert snapshot_facts(busy)[0]["other_processes_gib"].value == pytest.approx(102918 / 1024, abs=1e-3)


# --- NVML, through the fake layer -------------------------------------------------------------

def _scenario(tmp_path: Path, processes, init_error=None) -> Path:
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps({"driver": "550.127.05", "init_error": init_error, "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0f3d", "total": 81559 * MIB, "used": 79870 * MIB,
         "free": 1140 * MIB, "processes": processes}]}))
    return path


def _fake_module(monkeypatch, scenario: Path):
    monkeypatch.setenv("VTRIAGE_FAKE_NVML", str(scenario))
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Proc:
    """/proc as a test wants it: command lines and parents by pid."""

    def __init__(self, cmdlines, parents=None):
        self.cmdlines, self.parents = cmdlines, parents or {}

    def cmdline(self, pid):
        return self.cmdlines.get(pid)

    def parent(self, pid):
        return self.parents.get(pid)


def test_probe_classifies_by_command_line_parent_and_pid(monkeypatch, tmp_path):
    nvml = _fake_module(monkeypatch, _scenario(tmp_path, [
        {"pid": 100, "used": 60 * GIB, "name": "python3"},
        {"pid": 200, "used": 15 * GIB, "name": "python3"},
        {"pid": 300, "used": None, "name": None},
    ]))
    proc = _Proc({100: "/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B",
                  200: "/opt/conda/bin/python -m ipykernel_launcher -f kernel.json"})
    snap = probe(nvml, proc=proc)
    assert nvml.calls == ["init", "shutdown"]
    [gpu] = snap.devices
    assert (gpu.name, gpu.total_mib, gpu.free_mib, gpu.uuid) == ("NVIDIA H100 80GB HBM3", 81559, 1140, "GPU-0f3d")
    got = {p.pid: (p.vllm, p.used_mib) for p in snap.processes}
    assert got == {100: (True, 60 * 1024), 200: (False, 15 * 1024), 300: (None, None)}
    # the engine is a child of the API server: --vllm-pid of the server covers it; the rest is external
    snap = probe(nvml, vllm_pids=[99], proc=_Proc({}, {100: 99}))
    assert {p.pid: p.vllm for p in snap.processes} == {100: True, 200: False, 300: False}
    assert next(p for p in snap.processes if p.pid == 100).why == "a child of --vllm-pid 99"


def test_probe_without_a_driver_is_gpu_unavailable(monkeypatch, tmp_path):
    nvml = _fake_module(monkeypatch, _scenario(tmp_path, [], init_error="Driver Not Loaded"))
    with pytest.raises(GpuUnavailable, match="no usable NVIDIA GPU or driver here: Driver Not Loaded") as err:
        probe(nvml)
    assert err.value.exit_code == 4 and "\n" not in str(err.value)


@pytest.fixture
def node(tmp_path):
    """Two real processes (so /proc has their command lines) that the fake NVML says hold GPU memory."""
    sleeper = "import time; time.sleep(120)"
    server = subprocess.Popen([sys.executable, "-c", sleeper, "vllm", "serve", "Qwen/Qwen3-8B"])
    notebook = subprocess.Popen([sys.executable, "-c", sleeper, "ipykernel_launcher"])
    scenario = _scenario(tmp_path, [{"pid": server.pid, "used": 62 * GIB, "name": sys.executable},
                                    {"pid": notebook.pid, "used": 15 * GIB, "name": sys.executable}])
    env = {"PYTHONPATH": f"{FAKE}:{ROOT}", "VTRIAGE_FAKE_NVML": str(scenario)}
    yield env, server.pid, notebook.pid
    for child in (server, notebook):
        child.kill()
        child.wait()


def test_vtriage_gpu_on_the_node_flags_the_notebook(node):
    env, server, notebook = node
    result = run_cli("gpu", env=env)
    out = result.stdout.decode()
    assert result.returncode == 1
    assert "GPU 0  NVIDIA H100 80GB HBM3  79,870 of 81,559 MiB used, 1,140 free" in out
    assert f"pid {server:<8}    63,488 MiB" in out and "vLLM (its command line names vLLM)" in out
    assert f"pid {notebook:<8}    15,360 MiB" in out and "NOT vLLM (its command line does not name vLLM)" in out
    assert "NOT vLLM: 1 process(es) hold 15.00 GiB" in out


def test_a_snapshot_turns_an_undecided_oom_into_external_pressure(node, tmp_path):
    env, server, notebook = node
    log = tmp_path / "server.log"
    log.write_text(UNPLACED_OOM)
    alone = json.loads(run_cli(str(log), "--format", "json").stdout)
    assert alone["verdict"] == "inconclusive" and "other_processes_gib" not in alone["facts"]
    snapshot = tmp_path / "gpu.json"
    assert run_cli("gpu", "-o", str(snapshot), env=env).returncode == 1       # .json: the snapshot format
    def untimed(text):
        return {k: v for k, v in json.loads(text).items() if k != "taken_at"}
    assert untimed(run_cli("gpu", "--format", "json", env=env).stdout) == untimed(snapshot.read_text()) \
        == untimed(run_cli("gpu", "--json", env=env).stdout)                   # the older spelling still works
    for args in (["--gpu-snapshot", str(snapshot)], ["--probe-gpu"]):
        result = run_cli(str(log), "--format", "json", *args, env=env)
        data = json.loads(result.stdout)
        assert result.returncode == 1 and data["verdict"] == "external_pressure", args
        assert data["rule_path"][-1] == "oom-held-by-other-process"
        fact = data["facts"]["other_processes_gib"]
        assert fact["value"] == 15.0 and data["facts"]["other_processes"]["value"] == 1
        assert str(notebook) in fact["evidence"][0]["text"]
        assert data["facts"]["gpu_total_gib"]["value"] == 79.19             # the log's own figure comes first
    lines = snapshot.read_text().splitlines()
    ref = json.loads(run_cli(str(log), "--format", "json", "--gpu-snapshot", str(snapshot)).stdout)
    where = ref["facts"]["other_processes_gib"]["evidence"][0]
    assert where["source"] == str(snapshot) and f'"pid": {notebook},' in lines[where["line"] - 1]
    assert any(i["kind"] == "gpu" and i["path"] == str(snapshot) for i in ref["inputs"])
    jsonschema.validate(ref, SCHEMA)


def test_pasted_nvidia_smi_is_evidence_too(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(UNPLACED_OOM)
    paste = str(DATA / "nvidia-smi-h100-notebook.txt")
    undecided = json.loads(run_cli(str(log), "--format", "json", "--gpu-snapshot", paste).stdout)
    assert undecided["verdict"] == "inconclusive"
    assert any("name it with --vllm-pid" in w for w in undecided["warnings"])
    decided = run_cli(str(log), "--gpu-snapshot", paste, "--vllm-pid", "41877")
    out = decided.stdout.decode()
    assert decided.returncode == 1 and out.startswith("EXTERNAL MEMORY PRESSURE")
    assert "Find and stop or move process 52210 holding 14.98 GiB on this GPU" in out


@pytest.mark.parametrize("args", [["gpu"], ["-", "--probe-gpu"]])
def test_without_nvidia_ml_py_it_says_so_in_one_line(args):
    code = f"import sys; sys.modules['pynvml'] = None; from triage.cli import main; main({args!r})"
    result = subprocess.run([sys.executable, "-c", code], check=False, input=UNPLACED_OOM.encode(), capture_output=True,
                            cwd=ROOT, timeout=60)
    err = result.stderr.decode()
    assert result.returncode == 4 and err.count("\n") == 1 and result.stdout == b""
    assert "nvidia-ml-py is not installed (hint: pip install 'vtriage[gpu]'" in err


def test_without_a_gpu_the_real_nvml_says_so_in_one_line():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver: the no-GPU path cannot be shown here")
    result = run_cli("gpu")
    err = result.stderr.decode()
    assert result.returncode == 4 and err.count("\n") == 1 and result.stdout == b""
    assert err.startswith("vtriage: error: no usable NVIDIA GPU or driver here: ")


@pytest.mark.parametrize("args,needle", [
    (["x.log", "--vllm-pid", "12"], "it needs --gpu-snapshot or --probe-gpu"),
    (["x.log", "--gpu-snapshot", "g.json", "--probe-gpu"], "give one"),
    (["x.log", "--gpu-snapshot", "/nonexistent.json"], "no such file"),
])
def test_gpu_option_errors(args, needle):
    result = run_cli(*args)
    assert result.returncode == 2 and needle in result.stderr.decode()


def test_a_bad_snapshot_file_is_one_line(tmp_path):
    bad = tmp_path / "gpu.json"
    bad.write_text('{"vtriage_gpu_snapshot": 1, "gpus": [{"name": "x"}], "processes": []}')
    log = tmp_path / "server.log"
    log.write_text(UNPLACED_OOM)
    result = run_cli(str(log), "--gpu-snapshot", str(bad))
    err = result.stderr.decode()
    assert result.returncode == 2 and "a GPU or process entry is malformed" in err and err.count("\n") == 1
