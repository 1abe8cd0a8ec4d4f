"""`vtriage gpu`: who holds each GPU's memory, and which of them is not the vLLM server.

On the GPU node, NVML (the optional `nvidia-ml-py` package, `pip install 'vtriage[gpu]'`) lists every
GPU's memory and its compute processes. A process is vLLM when its name or command line says so
(`vllm`, `VLLM::EngineCore`, Ray's `RayWorkerWrapper`), or when it is (a child of) a `--vllm-pid`.
The figures become facts (`other_processes_gib`, `other_processes`, `gpu_total_gib`) with the snapshot
as evidence, for `vtriage LOG --gpu-snapshot gpu.json` or `--probe-gpu`. Pasted `nvidia-smi` output is
read by triage/gpu/smi.py into the same GpuSnapshot.
"""
from __future__ import annotations

import json
import math
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import regex

from ..errors import InputError, TriageError
from ..model import SourceRef
from ..redact import Redactor
from ..sources.files import text_lines

EXIT_NO_GPU = 4
SNAPSHOT_FORMAT = 1
_VLLM_NAME = regex.compile(r"vllm|RayWorkerWrapper", regex.I)
_INTERPRETER = regex.compile(r"(?:^|/)(?:python[\d.]*|pt_main_thread|ray::[\w.]*)(?:\.\.\.)?$", regex.I)


class GpuUnavailable(TriageError):
    """No GPU, no driver, or no nvidia-ml-py here: said in one line, exit code 4."""

    exit_code = EXIT_NO_GPU


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str | None
    total_mib: float | None
    used_mib: float | None
    source: SourceRef
    uuid: str | None = None
    free_mib: float | None = None    # as the driver reports it (it keeps some memory back: not total - used)


@dataclass(frozen=True)
class GpuProcess:
    gpu: int | None                  # device index; None when the input does not say
    pid: int
    name: str | None
    used_mib: float | None           # None: the driver did not say (not zero)
    vllm: bool | None                # None: neither its name nor its command line could be read
    why: str
    source: SourceRef
    cmdline: str | None = None
    ppid: int | None = None          # its parent, so --vllm-pid of the API server covers its engine


@dataclass(frozen=True)
class GpuSnapshot:
    devices: tuple[GpuDevice, ...]
    processes: tuple[GpuProcess, ...]
    origin: str                      # "nvml", "nvidia-smi", "csv" or "json"
    path: str                        # where it was read from ("NVML" for a live probe)
    lines: int = 0
    taken_at: str | None = None
    driver: str | None = None
    host: str | None = None


def classify(pid: int, name: str | None, cmdline: str | None, vllm_pids: Iterable[int],
             parent: Callable[[int], int | None] = lambda pid: None) -> tuple[bool | None, str]:
    """Is this process the vLLM server being diagnosed? (True/False, or None when it cannot be told; and why).

    With --vllm-pid the answer is exact: those processes and their children are the server, and
    anything else (another vLLM server included) is not. Without it, the name or command line decides,
    and a bare `python3` seen without its command line (pasted nvidia-smi) cannot be told."""
    wanted = set(vllm_pids)
    if wanted:
        seen, current = set(), pid
        while current and current not in seen:
            if current in wanted:
                return True, "--vllm-pid" if current == pid else f"a child of --vllm-pid {current}"
            seen.add(current)
            current = parent(current) or 0
        return False, "not --vllm-pid " + ", ".join(map(str, sorted(wanted))) + " or one of its children"
    for label, text in (("command line", cmdline), ("name", name)):
        if text and _VLLM_NAME.search(text):
            return True, f"its {label} names vLLM"
    if cmdline:
        return False, "its command line does not name vLLM"
    if name and not _INTERPRETER.search(name):
        return False, "its name is not vLLM's"
    if name:
        return None, f"{name} could be vLLM: its command line is not visible here; --vllm-pid decides"
    return None, "its name and command line are not visible here (another PID namespace?); --vllm-pid decides"


class ProcReader:
    """Reads /proc for a process's command line and parent; absent in another PID namespace."""

    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = root

    def cmdline(self, pid: int) -> str | None:
        try:
            raw = (self.root / str(pid) / "cmdline").read_bytes()
        except OSError:
            return None
        return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip() or None

    def parent(self, pid: int) -> int | None:
        try:
            stat = (self.root / str(pid) / "stat").read_text()
        except OSError:
            return None
        m = regex.search(r"\) \S (\d+)", stat)
        return int(m[1]) if m else None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def import_nvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise GpuUnavailable("nvidia-ml-py is not installed (hint: pip install 'vtriage[gpu]', "
                             "or paste nvidia-smi output: vtriage gpu --from nvidia-smi.txt)") from None
    return pynvml


def probe(nvml: Any, vllm_pids: Sequence[int] = (), proc: ProcReader | None = None,
          now: datetime | None = None) -> GpuSnapshot:
    """Ask NVML for every GPU's memory and compute processes."""
    proc = proc or ProcReader()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise GpuUnavailable(f"no usable NVIDIA GPU or driver here: {exc} "
                             "(hint: run it on the GPU node, e.g. kubectl debug node/NODE, "
                             "or in the vLLM pod)") from None
    try:
        devices, processes = [], []
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            name = _text(nvml.nvmlDeviceGetName(handle))
            ref = SourceRef("NVML", 0,
                            f"GPU {index} {name}: {memory.used / 2**20:.0f} MiB / {memory.total / 2**20:.0f} MiB used")
            devices.append(GpuDevice(index, name, memory.total / 2**20, memory.used / 2**20, ref,
                                     _text(nvml.nvmlDeviceGetUUID(handle)), memory.free / 2**20))
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                try:
                    pname: str | None = _text(nvml.nvmlSystemGetProcessName(p.pid))
                except nvml.NVMLError:
                    pname = None
                cmdline = proc.cmdline(p.pid)
                used = None if p.usedGpuMemory is None else p.usedGpuMemory / 2**20
                vllm, why = classify(p.pid, pname, cmdline, vllm_pids, proc.parent)
                shown = f"{used:.0f} MiB" if used is not None else "memory unknown"
                ref = SourceRef("NVML", 0, f"GPU {index} pid {p.pid} {pname or '?'} {shown}")
                shown_cmdline = Redactor().text(cmdline) if cmdline else cmdline   # `vllm serve --api-key K`
                processes.append(GpuProcess(index, p.pid, pname, used, vllm, why, ref, shown_cmdline,
                                            proc.parent(p.pid)))
    finally:
        nvml.nvmlShutdown()
    when = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return GpuSnapshot(tuple(devices), tuple(processes), "nvml", "NVML", 0, when, driver, socket.gethostname())


# --- the snapshot file: JSON, one GPU or process per line, so evidence can point at its line --------

def snapshot_json(snap: GpuSnapshot) -> str:
    head = {"vtriage_gpu_snapshot": SNAPSHOT_FORMAT, "taken_at": snap.taken_at, "host": snap.host,
            "driver": snap.driver, "source": snap.origin}
    gpus = [{"index": d.index, "name": d.name, "uuid": d.uuid, "total_mib": _round(d.total_mib),
             "used_mib": _round(d.used_mib), "free_mib": _round(d.free_mib)} for d in snap.devices]
    procs = [{"gpu": p.gpu, "pid": p.pid, "ppid": p.ppid, "name": p.name, "used_mib": _round(p.used_mib),
              "vllm": p.vllm, "why": p.why, "cmdline": p.cmdline} for p in snap.processes]
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines.append('  "gpus": [' + ",".join(f"\n    {json.dumps(g, ensure_ascii=False)}" for g in gpus)
                 + ("\n  ]," if gpus else "],"))
    lines.append('  "processes": [' + ",".join(f"\n    {json.dumps(p, ensure_ascii=False)}" for p in procs)
                 + ("\n  ]" if procs else "]"))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def read_snapshot_json(text: str, path: str, vllm_pids: Sequence[int] = ()) -> GpuSnapshot:
    """A file written by `vtriage gpu --format json`; each entry's evidence is its own line."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        why = exc if isinstance(exc, ValueError) else "nested too deeply"
        raise InputError(path, f"not valid JSON: {why}", "write it with vtriage gpu --format json > gpu.json") from None
    if not isinstance(data, dict) or data.get("vtriage_gpu_snapshot") != SNAPSHOT_FORMAT:
        raise InputError(path, "not a vtriage GPU snapshot",
                         "write it with vtriage gpu --format json, or pass nvidia-smi output")
    lines = text_lines(text)
    try:
        devices = tuple(GpuDevice(int(g["index"]), g.get("name"), _mib(g.get("total_mib")), _mib(g.get("used_mib")),
                                  _line_ref(path, lines, f'"index": {int(g["index"])},'), g.get("uuid"),
                                  _mib(g.get("free_mib")))
                        for g in data.get("gpus", []))
        entries = data.get("processes", [])
        parents = {int(p["pid"]): p.get("ppid") for p in entries}
        processes = []
        for p in entries:
            vllm, why = p.get("vllm"), p.get("why") or ""
            if vllm_pids:                # the command line decides again, exactly
                vllm, why = classify(int(p["pid"]), p.get("name"), p.get("cmdline"), vllm_pids, parents.get)
            processes.append(GpuProcess(p.get("gpu"), int(p["pid"]), p.get("name"), _mib(p.get("used_mib")), vllm, why,
                                        _line_ref(path, lines, f'"pid": {int(p["pid"])},'), p.get("cmdline"),
                                        p.get("ppid")))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(path, f"a GPU or process entry is malformed ({exc})",
                         "write it with vtriage gpu --format json") from None
    return GpuSnapshot(devices, tuple(processes), "json", path, len(lines), data.get("taken_at"), data.get("driver"),
                       data.get("host"))


def _mib(value: Any) -> float | None:
    """A memory figure from a snapshot file: a number of MiB a GPU can hold, else unknown (not NaN, not 1e308)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and 0 <= value <= 1e9 else None


def _line_ref(path: str, lines: Sequence[str], needle: str) -> SourceRef:
    for number, line in enumerate(lines, 1):
        if needle in line:
            return SourceRef(path, number, line.strip())
    return SourceRef(path, 0, needle)


def merge_snapshots(first: GpuSnapshot, second: GpuSnapshot) -> GpuSnapshot:
    """Two views of one node (a table and a CSV query): the second fills what the first left unknown."""
    devices = {d.index: d for d in second.devices}
    devices.update({d.index: _fill(d, devices.get(d.index)) for d in first.devices})
    procs = {p.pid: p for p in second.processes}
    procs.update({p.pid: _fill(p, procs.get(p.pid)) for p in first.processes})
    return GpuSnapshot(tuple(sorted(devices.values(), key=lambda d: d.index)),
                       tuple(sorted(procs.values(), key=lambda p: (p.gpu or 0, p.pid))),
                       first.origin, first.path, max(first.lines, second.lines), first.taken_at or second.taken_at,
                       first.driver or second.driver, first.host or second.host)


def _fill(item: Any, other: Any) -> Any:
    if other is None:
        return item
    values: Mapping[str, Any] = {k: getattr(item, k) if getattr(item, k) is not None else getattr(other, k)
                                 for k in item.__dataclass_fields__}
    return type(item)(**values)
