"""`vtriage gpu` in the terminal: each GPU's memory, the processes holding it, and which are not vLLM."""
from __future__ import annotations

from typing import Any

from ..gpu.probe import GpuSnapshot


def _mib(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"


def _verdict(vllm: bool | None, why: str) -> str:
    return {True: f"vLLM ({why})", False: f"NOT vLLM ({why})", None: f"unknown ({why})"}[vllm]


def render_gpu_text(snap: GpuSnapshot, **_: Any) -> str:
    out: list[str] = []
    gpus = sorted({d.index for d in snap.devices} | {p.gpu for p in snap.processes if p.gpu is not None})
    names = {d.index: d for d in snap.devices}
    for index in gpus if gpus else [None]:
        d = names.get(index) if index is not None else None
        if d is not None:
            free = f", {d.free_mib:,.0f} free" if d.free_mib is not None else ""
            out.append(f"GPU {index}  {d.name or '?'}  {_mib(d.used_mib)} of {_mib(d.total_mib)} MiB used{free}")
        else:
            out.append(f"GPU {index if index is not None else '?'}")
        procs = [p for p in snap.processes if p.gpu == index or (index is None and p.gpu is None)]
        if not procs:
            out.append("  no compute process")
        for p in procs:
            out.append(f"  pid {p.pid:<8} {_mib(p.used_mib):>9} MiB  {(p.name or '?')[:28]:<28}  "
                       f"{_verdict(p.vllm, p.why)}")
    foreign = [p for p in snap.processes if p.vllm is False]
    unknown = [p for p in snap.processes if p.vllm is None]
    out.append("")
    if foreign:
        held = sum(p.used_mib or 0.0 for p in foreign) / 1024
        cut = " (at least: some sizes are not given)" if any(p.used_mib is None for p in foreign) else ""
        out.append(f"NOT vLLM: {len(foreign)} process(es) hold {held:.2f} GiB{cut}. vLLM's --gpu-memory-utilization is "
                   "a share of the whole GPU, so this memory is taken from it (external_pressure).")
    if unknown:
        out.append(f"Cannot tell {len(unknown)} process(es) apart from vLLM: name the server with --vllm-pid PID.")
    if not foreign and not unknown:
        out.append("Only vLLM holds GPU memory here." if snap.processes else "No process holds GPU memory.")
    where = "NVML" + (f" on {snap.host}" if snap.host else "") if snap.origin == "nvml" else snap.path
    extra = ", ".join(x for x in (f"driver {snap.driver}" if snap.driver else "", snap.taken_at or "") if x)
    out.append(f"Read from {where}" + (f" ({extra})" if extra else "") + ".")
    out.append("For a diagnosis: vtriage gpu --format json > gpu.json; vtriage LOG --gpu-snapshot gpu.json")
    return "\n".join(out) + "\n"
