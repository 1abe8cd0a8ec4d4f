"""The facts stage: each diagnosis's facts, from the log's events (log_events.py), the metric samples
(metric_samples.py), a GPU snapshot (gpu_snapshot.py) and what the user gave (user_figures.py). The log comes
first; metrics add what the log cannot show; a snapshot and the user's figures only fill what both lack. A
figure no input gives stays absent."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from ..logs.parse import Attempt
from ..logs.signatures import SignatureSet
from ..model import Fact, InputSummary, LogEvent, SourceRef
from ..read import Evidence
from .gpu_snapshot import GpuEvidence, gpu_evidence
from .log_events import extract_facts
from .registry import FACTS
from .user_figures import gpu_memory_facts

if TYPE_CHECKING:
    from ..gpu.probe import GpuSnapshot
    from ..metrics.inputs import MetricsRead
    from ..metrics.units import Unit

_SETTINGS_KINDS = frozenset({"args", "engine_config", "version", "max_model_len", "auto_fit",
                             "model_name", "load_start"})


@dataclass(frozen=True)
class EarlierAttempt:
    """An attempt a restart ended: where it is in the log, and its facts (the settings earlier attempts printed
    fill what it did not). Its events are not kept: a crash-looping log has thousands of attempts."""

    index: int
    first: SourceRef | None
    last: SourceRef | None
    facts: Mapping[str, Fact]


@dataclass(frozen=True)
class Subject:
    """One diagnosis of the incident now: the log's last attempt joined with one unit's metrics, or either alone."""

    attempt: Attempt
    facts: Mapping[str, Fact]
    unit: Unit | None
    with_log: bool


@dataclass(frozen=True)
class IncidentFacts:
    """What the facts stage returns: the earlier attempts' facts, the facts of each diagnosis of the incident now
    (one per metrics unit, or the log alone), whether the log joined the metrics, the GPU snapshot read."""

    earlier: tuple[EarlierAttempt, ...]
    settings: tuple[LogEvent, ...]          # earlier attempts' settings, for what the last one did not print
    subjects: tuple[Subject, ...]
    joined: bool
    gpu: GpuEvidence
    warnings: tuple[str, ...] = ()


def facts_for(attempt: Attempt, signatures: SignatureSet, earlier: Sequence[LogEvent], vllm_lines: int | None,
              metric_facts: Mapping[str, Fact] | None = None, gpu_facts: Mapping[str, Fact] | None = None,
              gpu_total_gib: float | None = None, gpu_source: str = "") -> dict[str, Fact]:
    """Facts of one attempt, joined with metrics and a GPU snapshot when given (the snapshot only fills figures
    the log and metrics do not give). The GPU memory the user gave fills what the input lacks."""
    facts = extract_facts(attempt.events, signatures, earlier)
    if vllm_lines is not None:
        facts["vllm_lines"] = Fact("vllm_lines", vllm_lines, FACTS["vllm_lines"].unit)
    if metric_facts:
        from .metric_samples import merge_facts  # the metrics code: 20 ms of imports a log alone does without
        facts = merge_facts(facts, metric_facts)
    if gpu_facts:
        facts = {**gpu_facts, **facts}
    return {**gpu_memory_facts(gpu_total_gib, gpu_source, facts), **facts}


def incident_facts(evidence: Evidence, metrics: MetricsRead | None, snapshot: GpuSnapshot | None,
                   has_logs: bool, signatures: SignatureSet, gpu_total_gib: float | None = None,
                   gpu_source: str = "") -> IncidentFacts:
    """The facts of every earlier attempt, and of the last attempt once per metrics unit when there are metrics.

    Metrics describe the server as it is now, so they join the last attempt. Each metrics unit (instance, model,
    engine; see triage/metrics/units.py) is diagnosed joined with it. A log is joined only when the metrics are
    of one instance: with several it cannot say which one wrote it."""
    settings: list[LogEvent] = []
    earlier = []
    current: Attempt | None = None
    for attempt in evidence.attempts:
        if current is not None:                # a restart ended it: only its facts are kept, not its events
            earlier.append(EarlierAttempt(current.index, current.first, current.last,
                                          facts_for(current, signatures, settings, None)))
            settings.extend(e for e in current.events if e.kind in _SETTINGS_KINDS)
        current = attempt
    assert current is not None                 # split_attempts always yields one
    last = current
    gpu = gpu_evidence(snapshot)
    vllm_lines, samples = evidence.vllm_lines, evidence.samples
    metric_inputs = metrics.inputs if metrics else ()
    if not (samples or metric_inputs or (metrics and metrics.origin is not None)):
        log_alone = Subject(last, facts_for(last, signatures, settings, vllm_lines, None, gpu.facts, gpu_total_gib,
                                            gpu_source), None, True)
        return IncidentFacts(tuple(earlier), tuple(settings), (log_alone,), False, gpu)
    from ..metrics.units import split_units  # the metrics code: 20 ms of imports a log alone does without
    from .metric_samples import extract_metric_facts
    subjects: list[Subject] = []
    units, unit_warnings = split_units(samples)
    warnings = list(unit_warnings)
    ordering = metrics.origin.ordering if metrics and metrics.origin else None
    joined = not has_logs or len({u.instance for u in units}) <= 1
    if not joined:
        warnings.append(f"the log was diagnosed on its own: the metrics hold {len({u.instance for u in units})} "
                        "instances; select the one the log came from (--instance, --selector) to join them")
        subjects.append(Subject(last, facts_for(last, signatures, settings, vllm_lines, None, gpu.facts,
                                                gpu_total_gib, gpu_source), None, True))
    own = last if joined else Attempt(index=1)
    for unit in units if units else [None]:
        metric_facts = extract_metric_facts(unit.samples if unit else samples, ordering)
        if not any(s.name.startswith("vllm:") for s in samples):
            metric_facts.update(declared_only(metric_inputs))
        facts = facts_for(own, signatures, settings if joined else (), vllm_lines if joined else None, metric_facts,
                          gpu.facts if joined else None, gpu_total_gib, gpu_source)
        subjects.append(Subject(own, facts, unit, joined))
    return IncidentFacts(tuple(earlier), tuple(settings), tuple(subjects), joined, gpu, tuple(warnings))


def declared_only(inputs: Sequence[InputSummary]) -> dict[str, Fact]:
    """A /metrics text of declarations only (# HELP/# TYPE): a registry mounted but never fed."""
    declared = [i for i in inputs if i.declared_only]
    if not declared:
        return {}
    refs = tuple(i.declared_at for i in declared if i.declared_at is not None)
    return {"metrics_declared_only": Fact("metrics_declared_only", max(i.declared_only for i in declared),
                                          FACTS["metrics_declared_only"].unit, refs)}
