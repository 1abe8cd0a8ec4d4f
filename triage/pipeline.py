"""The whole pipeline in one place: sources -> parse -> facts -> rules -> findings -> report.

Only `sources` touches files; everything else here is a function of what it is given.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from . import __version__
from .engine import diagnose
from .facts import FACTS, extract_facts
from .logparse import Attempt, ParsedInput, merge_events, parse_log, split_attempts
from .metricfacts import extract_metric_facts, merge_facts
from .metricparse import MetricSample
from .model import (AttemptSummary, CoverageGroup, Diagnosis, Fact, InputSummary, LogEvent, RankMemory, Report,
                    Suppression, TimelinePoint)
from .redact import Redactor
from .runbooks import runbook_link
from .ruleset import RuleSet
from .signatures import SignatureSet
from .sources import LogInput, iter_lines

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Toolkit:
    """The loaded data the pipeline runs on."""

    rules: RuleSet
    signatures: SignatureSet
    suppressions: tuple[Suppression, ...] = ()     # accepted rules (.vtriage.toml, --ignore)
    runbook_url: str | None = None                 # the team's runbook URL template (.vtriage.toml)


def parse_inputs(inputs: Sequence[LogInput], kit: Toolkit, redactor: Redactor) -> list[ParsedInput]:
    parsed = []
    seq = 0
    for inp in inputs:
        result = parse_log(inp.name, iter_lines(inp), kit.signatures, redactor, seq_start=seq)
        seq += len(result.events)
        if inp.warnings:
            result.summary = dataclasses.replace(result.summary, warnings=tuple(inp.warnings))
        parsed.append(result)
    return parsed


def _resequenced(events: list[LogEvent]) -> list[LogEvent]:
    """Merged events get positions in incident order, which is what `seq` compares."""
    return [dataclasses.replace(e, seq=i) if e.seq != i else e for i, e in enumerate(events)]


def diagnose_attempts(attempts: list[Attempt], kit: Toolkit, log_vllm_lines: int | None,
                      metric_facts: dict[str, Fact] | None = None,
                      gpu_facts: Mapping[str, Fact] | None = None) -> list[Diagnosis]:
    """One diagnosis per attempt. Metrics and a GPU snapshot describe the server as it is now: the
    last attempt. The snapshot only fills figures the log and metrics do not give."""
    results = []
    earlier: list[LogEvent] = []
    for index, attempt in enumerate(attempts):
        facts = extract_facts(attempt.events, kit.signatures, earlier)
        if log_vllm_lines is not None:
            facts["vllm_lines"] = Fact("vllm_lines", log_vllm_lines, FACTS["vllm_lines"].unit)
        if metric_facts and index == len(attempts) - 1:
            facts = merge_facts(facts, metric_facts)
        if gpu_facts and index == len(attempts) - 1:
            facts = {**gpu_facts, **facts}
        results.append(diagnose(kit.rules, facts, {s.rule_id: s for s in kit.suppressions}))
        earlier.extend(attempt.events)
    return results


def metrics_input(path: str, samples: Sequence[MetricSample], lines: int) -> InputSummary:
    vllm = sum(1 for s in samples if s.name.startswith("vllm:"))
    return InputSummary(path=path, kind="metrics", lines_read=lines, lines_recognised=vllm, vllm_lines=vllm)


def build_report(parsed: Sequence[ParsedInput], kit: Toolkit, redactor: Redactor,
                 metric_samples: Sequence[MetricSample] = (), metric_inputs: Iterable[InputSummary] = (),
                 gpu_facts: Mapping[str, Fact] | None = None) -> Report:
    """Diagnose every attempt; the report leads with the last one, the one on call cares about."""
    events = _resequenced(merge_events([p.events for p in parsed]))
    attempts = split_attempts(events, kit.signatures)
    vllm_lines = sum(p.summary.vllm_lines for p in parsed) if parsed else None
    metric_facts = extract_metric_facts(metric_samples) if metric_samples or metric_inputs else None
    diagnoses = diagnose_attempts(attempts, kit, vllm_lines, metric_facts, gpu_facts)
    last = diagnoses[-1]
    summaries = tuple(
        AttemptSummary(index=a.index, first=a.events[0].source if a.events else None,
                       last=a.events[-1].source if a.events else None, verdict=d.verdict,
                       failed_phase=(d.facts["failed_phase"].value if "failed_phase" in d.facts else None))
        for a, d in zip(attempts, diagnoses))
    same = sum(1 for d in diagnoses if d.verdict == last.verdict)
    unrecognised: list[CoverageGroup] = sorted((g for p in parsed for g in p.unrecognised),
                                               key=lambda g: (-g.count, g.example.path, g.example.line))
    warnings = tuple(w for p in parsed for w in p.summary.warnings)
    failure = last.facts.get("failure_message")
    failing = last.facts.get("failing_process")
    return Report(schema_version=SCHEMA_VERSION, tool_version=__version__, diagnosis=last, attempts=summaries,
                  same_failure_attempts=same, inputs=tuple(p.summary for p in parsed) + tuple(metric_inputs),
                  unrecognised=tuple(unrecognised), command=command_line(last),
                  timeline=timeline(attempts[-1].events), failure_at=failure.evidence[0] if failure else None,
                  ranks=rank_memory(attempts[-1].events, failing.value if failing else None),
                  redactions=dict(redactor.counts), warnings=warnings,
                  severity=kit.rules.classes[last.verdict].severity, runbook=runbook_link(last.verdict, kit.rules, kit.runbook_url),
                  suppressions=kit.suppressions)


def command_line(diagnosis: Diagnosis) -> str | None:
    """The first fix that changes flags, as a `vllm serve` line to paste."""
    fix = next((f for f in diagnosis.fixes if f.flag and f.value is not None), None)
    if fix is None:
        return None
    model = diagnosis.facts["model"].value if "model" in diagnosis.facts else "<model>"
    parts = ["vllm", "serve", str(model)]
    for flag, value in ((fix.flag, fix.value), *fix.also_set.items()):
        parts.append(flag if value is True else f"{flag} {value}")
    return " ".join(parts)


MAX_TIMELINE_POINTS = 400


def timeline(events: Sequence[LogEvent]) -> tuple[TimelinePoint, ...]:
    """Stats lines as chart points, at most MAX_TIMELINE_POINTS: each bucket keeps its fullest KV point,
    so a saturation spike survives downsampling a day of stats."""
    stats = [e for e in events if e.kind == "stats"]
    points = []
    for e in stats:
        f = e.fields
        points.append(TimelinePoint(time=e.timestamp, kv_cache_usage=f.get("kv_usage"), running=f.get("running"),
                                    waiting=f.get("waiting"), preemptions=f.get("preemptions"), source=e.source))
    if len(points) <= MAX_TIMELINE_POINTS:
        return tuple(points)
    size = len(points) / MAX_TIMELINE_POINTS
    kept = []
    for b in range(MAX_TIMELINE_POINTS):
        bucket = points[int(b * size):int((b + 1) * size)] or points[-1:]
        best = max(bucket, key=lambda p: (p.kv_cache_usage or 0.0, p.waiting or 0))
        preempted = sum(p.preemptions or 0 for p in bucket)
        kept.append(dataclasses.replace(best, preemptions=preempted or best.preemptions))
    return tuple(kept)


def rank_memory(events: Sequence[LogEvent], failing: str | None) -> tuple[RankMemory, ...]:
    """Per-process memory figures, only worth showing when more than one process reported them."""
    ranks: dict[str, dict] = {}
    for e in events:
        if e.process is None and not any(k in e.fields for k in ("weights_gib", "kv_cache_gib", "this_process_gib")):
            continue
        for key in ("weights_gib", "kv_cache_gib", "this_process_gib"):
            if key in e.fields and e.kind in ("weights_loaded", "kv_available", "cuda_oom", "memory_profile"):
                ranks.setdefault(e.process or "main process", {})[key] = e.fields[key]
    if len(ranks) < 2:
        return ()
    return tuple(RankMemory(process=name, failed=(name == (failing or "main process")) and "this_process_gib" in vals,
                            **vals) for name, vals in sorted(ranks.items()))
