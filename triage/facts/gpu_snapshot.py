"""Facts from a GPU snapshot (`vtriage gpu`, nvidia-smi, NVML; read by triage/gpu/probe.py): how much
memory processes other than vLLM hold, and the GPU's total. They only fill figures the log and metrics
do not give."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ..model import Fact, InputSummary, SourceRef
from .registry import FACTS

if TYPE_CHECKING:
    from ..gpu.probe import GpuProcess, GpuSnapshot


def _fact(name: str, value: Any, evidence: Sequence[SourceRef], note: str) -> Fact:
    return Fact(name, round(value, 4) if isinstance(value, float) else value, FACTS[name].unit,
                tuple(evidence)[:4], note)


def snapshot_facts(snap: GpuSnapshot) -> tuple[dict[str, Fact], list[str]]:
    """External pressure from the snapshot, on the GPU where processes other than vLLM hold the most.

    The figure is left unknown (with a warning saying why) when a process holding memory cannot be
    told apart from vLLM, or holds an amount the input does not give: unknown is never zero."""
    by_gpu: dict[int | None, list[GpuProcess]] = {}
    for p in snap.processes:
        by_gpu.setdefault(p.gpu if len(snap.devices) > 1 else None, []).append(p)

    def foreign(procs: Sequence[GpuProcess]) -> float:
        return sum(p.used_mib or 0.0 for p in procs if p.vllm is False)

    gpu = max(by_gpu, key=lambda g: foreign(by_gpu[g])) if by_gpu else None
    procs = by_gpu.get(gpu, [])
    others = [p for p in procs if p.vllm is False]
    facts: dict[str, Fact] = {}
    warnings: list[str] = []
    device = next((d for d in snap.devices if d.index == gpu), snap.devices[0] if len(snap.devices) == 1 else None)
    if device is not None and device.total_mib:
        facts["gpu_total_gib"] = _fact("gpu_total_gib", device.total_mib / 1024, [device.source],
                                       f"from the GPU snapshot {snap.path}")
    unidentified = [p for p in procs if p.vllm is None]
    cut = [p for p in others if p.used_mib is None]
    if unidentified:
        warnings.append(f"{snap.path}: cannot tell which GPU process is vLLM ("
                        + ", ".join(f"pid {p.pid} {p.name or '?'}" for p in unidentified)
                        + "); name it with --vllm-pid PID to count the others as external pressure")
        return facts, warnings
    if cut:
        warnings.append(f"{snap.path}: the memory of " + ", ".join(f"pid {p.pid}" for p in cut)
                        + " is not given (nvidia-smi cut it short?); add the --query-compute-apps CSV")
        return facts, warnings
    where = f"GPU {gpu}" if gpu is not None else "the GPU"
    taken = f" (taken {snap.taken_at})" if snap.taken_at else ""
    note = f"GPU snapshot {snap.path}{taken}: {len(others)} process(es) other than vLLM on {where}"
    facts["other_processes_gib"] = _fact("other_processes_gib", foreign(procs) / 1024,
                                         [p.source for p in others] or [d.source for d in snap.devices][:1], note)
    facts["other_processes"] = _fact("other_processes", len(others), [p.source for p in others], note)
    if others:
        facts["other_process_pids"] = _fact("other_process_pids", ", ".join(str(p.pid) for p in others),
                                            [p.source for p in others], note)
    return facts, warnings


@dataclass(frozen=True)
class GpuEvidence:
    """A GPU snapshot's facts (they only fill figures the log and metrics do not give), its warnings, and
    the snapshot as one of the report's inputs."""

    facts: Mapping[str, Fact]
    warnings: tuple[str, ...] = ()
    input: InputSummary | None = None


def gpu_evidence(snapshot: GpuSnapshot | None) -> GpuEvidence:
    if snapshot is None:
        return GpuEvidence({})
    facts, warnings = snapshot_facts(snapshot)
    rows = len(snapshot.devices) + len(snapshot.processes)
    summary = InputSummary(path=snapshot.path, kind="gpu", lines_read=snapshot.lines or rows, lines_recognised=rows,
                           vllm_lines=sum(1 for p in snapshot.processes if p.vllm))
    return GpuEvidence(facts, tuple(warnings), summary)
