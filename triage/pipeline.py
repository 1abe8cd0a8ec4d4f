"""The whole pipeline in one place: sources -> parse -> facts -> rules -> findings -> report.

Only `sources` touches files; everything else here is a function of what it is given.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable, Sequence

from . import __version__
from .engine import diagnose
from .facts import FACTS, extract_facts
from .logparse import Attempt, LogParse, merge_events, split_attempts
from .metricfacts import extract_metric_facts, merge_facts, metric_timeline
from .metricparse import MetricSample
from .model import (AttemptSummary, CoverageGroup, Diagnosis, Fact, InputSummary, LogEvent, RankMemory, Report,
                    TimelinePoint)
from .redact import Redactor
from .ruleset import RuleSet
from .signatures import SignatureSet
from .sources import LogInput, iter_lines

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Toolkit:
    """The loaded data the pipeline runs on."""

    rules: RuleSet
    signatures: SignatureSet


def diagnose_attempt(attempt: Attempt, kit: Toolkit, earlier: Sequence[LogEvent], vllm_lines: int | None,
                     metric_facts: dict[str, Fact] | None = None, full: bool = True) -> Diagnosis:
    facts = extract_facts(attempt.events, kit.signatures, earlier)
    if vllm_lines is not None:
        facts["vllm_lines"] = Fact("vllm_lines", vllm_lines, FACTS["vllm_lines"].unit)
    if metric_facts:
        facts = merge_facts(facts, metric_facts)
    return diagnose(kit.rules, facts, full=full)


def metrics_input(path: str, samples: Sequence[MetricSample], lines: int) -> InputSummary:
    vllm = sum(1 for s in samples if s.name.startswith("vllm:"))
    return InputSummary(path=path, kind="metrics", lines_read=lines, lines_recognised=vllm, vllm_lines=vllm)


_SETTINGS_KINDS = frozenset({"args", "engine_config", "version", "max_model_len", "model_name", "load_start"})


def build_report(inputs: Sequence[LogInput], kit: Toolkit, redactor: Redactor,
                 metric_samples: Sequence[MetricSample] = (), metric_inputs: Iterable[InputSummary] = ()) -> Report:
    """Read every log once, diagnose each startup attempt as it completes, and lead with the last one:
    the one on call is looking at. Metrics describe the server as it is now, so they join the last."""
    sigs = kit.signatures
    parses = [LogParse(inp.name, iter_lines(inp, sigs.bulk_patterns), sigs, redactor) for inp in inputs]
    summaries: list[AttemptSummary] = []
    verdicts: list[str] = []
    settings: list[LogEvent] = []          # earlier attempts' settings, for what the last one did not print
    previous: Attempt | None = None
    for attempt in split_attempts(merge_events(parses), sigs):
        if previous is not None:
            early = diagnose_attempt(previous, kit, settings, None, full=False)
            summaries.append(_summary(previous, early))
            verdicts.append(early.verdict)
            settings.extend(e for e in previous.events if e.kind in _SETTINGS_KINDS)
        previous = attempt
    assert previous is not None            # split_attempts always yields one
    logs = [_log_summary(inp, parse, sigs) for inp, parse in zip(inputs, parses)]
    vllm_lines = sum(s.vllm_lines for s in logs) if logs else None
    metric_facts = extract_metric_facts(metric_samples) if metric_samples or metric_inputs else None
    last = diagnose_attempt(previous, kit, settings, vllm_lines, metric_facts)
    summaries.append(_summary(previous, last))
    verdicts.append(last.verdict)
    unrecognised: list[CoverageGroup] = sorted((g for p in parses for g in p.unrecognised),
                                               key=lambda g: (-g.count, g.example.path, g.example.line))
    failure = last.facts.get("failure_message")
    failing = last.facts.get("failing_process")
    return Report(schema_version=SCHEMA_VERSION, tool_version=__version__, diagnosis=last, attempts=tuple(summaries),
                  same_failure_attempts=verdicts.count(last.verdict), inputs=tuple(logs) + tuple(metric_inputs),
                  unrecognised=tuple(unrecognised), command=command_line(last),
                  timeline=timeline(previous.events) or downsample(metric_timeline(metric_samples)),
                  failure_at=failure.evidence[0] if failure else None,
                  ranks=rank_memory(previous.events, failing.value if failing else None),
                  redactions=dict(redactor.counts), warnings=tuple(w for inp in inputs for w in inp.warnings))


def _summary(attempt: Attempt, diagnosis: Diagnosis) -> AttemptSummary:
    phase = diagnosis.facts.get("failed_phase")
    return AttemptSummary(index=attempt.index, first=attempt.events[0].source if attempt.events else None,
                          last=attempt.events[-1].source if attempt.events else None, verdict=diagnosis.verdict,
                          failed_phase=phase.value if phase else None)


def _log_summary(inp: LogInput, parse: LogParse, sigs: SignatureSet) -> InputSummary:
    """The parser saw every line but the bulk ones the reader set aside: add those back."""
    summary = parse.summary
    bulk = sum(inp.bulk_lines)
    bulk_vllm = sum(inp.bulk_lines[:sigs.bulk_vllm_patterns])
    return dataclasses.replace(summary, lines_read=max(inp.lines_read, summary.lines_read),
                               lines_recognised=summary.lines_recognised + bulk,
                               vllm_lines=summary.vllm_lines + bulk_vllm, warnings=tuple(inp.warnings))


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
    """Stats lines as chart points (the report falls back to /metrics snapshots when there are none)."""
    stats = [e for e in events if e.kind == "stats"]
    points = []
    for e in stats:
        f = e.fields
        points.append(TimelinePoint(time=e.timestamp, kv_cache_usage=f.get("kv_usage"), running=f.get("running"),
                                    waiting=f.get("waiting"), preemptions=f.get("preemptions"), source=e.source))
    return downsample(points)


def downsample(points: Sequence[TimelinePoint]) -> tuple[TimelinePoint, ...]:
    """At most MAX_TIMELINE_POINTS: each bucket keeps its fullest KV point, so a saturation spike survives
    downsampling a day of stats."""
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
