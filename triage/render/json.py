"""The JSON contract (docs/json-contract.md, docs/report.schema.json). Bump SCHEMA_VERSION on any breaking change."""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from ..model import CoverageGroup, Fact, Finding, Fix, FleetView, Report, RuledOut, SourceRef
from . import decision
from .common import UNSAFE_CHARS


def _ref(ref: SourceRef) -> dict[str, Any]:
    out: dict[str, Any] = {"source": ref.path, "line": ref.line, "text": ref.text}
    if ref.span is not None:
        out["match"] = list(ref.span)
    return out


def _fact(fact: Fact) -> dict[str, Any]:
    out: dict[str, Any] = {"value": fact.value}
    if fact.unit:
        out["unit"] = fact.unit
    if fact.note:
        out["note"] = fact.note
    out["evidence"] = [_ref(r) for r in fact.evidence]
    return out


def _finding(f: Finding) -> dict[str, Any]:
    return {"rule": f.rule_id, "title": f.title, "verdict": f.verdict, "confidence": f.confidence,
            "summary": f.summary, "why": f.why, "settle": f.settle or None, "path": list(f.path),
            "facts": list(f.facts),
            "evidence": [_ref(r) for r in f.evidence], "references": list(f.references)}


def _ruled_out(r: RuledOut) -> dict[str, Any]:
    return {"verdict": r.verdict, "reason": r.reason, "facts": list(r.facts), "evidence": [_ref(e) for e in r.evidence]}


def _fix(f: Fix) -> dict[str, Any]:
    return {"flag": f.flag, "value": f.value, "why": f.why, "action": f.action, "also_set": dict(f.also_set),
            "computed_from": list(f.computed_from), "reference": f.reference, "checked": f.checked,
            "status": f.status, "needs": list(f.needs), "predicted": dict(f.predicted) if f.predicted else None}


def _group(g: CoverageGroup) -> dict[str, Any]:
    return {"level": g.level, "count": g.count, "template": g.template, "example": _ref(g.example)}


def _fleet(fleet: FleetView | None) -> dict[str, Any] | None:
    if fleet is None:
        return None
    o = fleet.origin
    counts: dict[str, int] = {}
    for inst in fleet.instances:
        counts[inst.verdict] = counts.get(inst.verdict, 0) + 1
    return {
        "source": {"kind": o.kind, "name": o.name, "selector": o.selector, "start": o.start, "end": o.end,
                   "step_seconds": o.step_seconds, "ordering": o.ordering},
        "verdict": fleet.verdict, "confidence": fleet.confidence, "detail": fleet.detail,
        "log_joined": fleet.log_joined, "counts": dict(sorted(counts.items())),
        "instances": [{"name": i.name, "model": i.model, "engine": i.engine, "verdict": i.verdict,
                       "confidence": i.confidence, "rule": i.rule, "summary": i.summary, "figures": dict(i.figures),
                       "stands_out": list(i.stands_out), "evidence": [_ref(r) for r in i.evidence]}
                      for i in fleet.instances],
    }


def _suppressed(report: Report) -> list[dict[str, Any]]:
    fired = {item.suppression.rule_id: item.finding for item in report.diagnosis.suppressed}
    return [{"rule": x.rule_id, "reason": x.reason, "origin": x.origin, "expires": x.expires,
             "fired": x.rule_id in fired, "finding": _finding(fired[x.rule_id]) if x.rule_id in fired else None}
            for x in report.suppressions]


def _figure(f: decision.Figure) -> dict[str, Any]:
    return {"label": f.label, "value": f.value, "unit": f.unit, "fact": f.fact, "note": f.note}


def _headline(report: Report) -> dict[str, Any]:
    first = decision.lead(report)
    return {"decided_by": first.decided_by, "restarts": first.restarts, "impact": first.impact,
            "comparisons": [{"title": c.title, "figures": [_figure(f) for f in c.figures],
                             "limit": _figure(c.limit) if c.limit else None} for c in first.comparisons]}


def report_dict(report: Report) -> dict[str, Any]:
    d = report.diagnosis
    lead = d.findings[0] if d.findings else None
    return {
        "schema_version": report.schema_version,
        "tool": {"name": "vtriage", "version": report.tool_version},
        "verdict": d.verdict,
        "confidence": d.confidence,
        "severity": report.severity,
        "runbook": report.runbook,
        "summary": lead.summary if lead else None,
        "headline": _headline(report),
        "rule_path": list(d.rule_path),
        "attempts": [{"index": a.index, "verdict": a.verdict, "failed_phase": a.failed_phase,
                      "first": _ref(a.first) if a.first else None, "last": _ref(a.last) if a.last else None}
                     for a in report.attempts],
        "same_failure_attempts": report.same_failure_attempts,
        "findings": [_finding(f) for f in d.findings],
        "ruled_out": [_ruled_out(r) for r in d.ruled_out],
        "not_assessed": [{"verdict": r.verdict, "reason": r.reason, "missing": list(r.facts)} for r in d.not_assessed],
        "config": report.config,
        "suppressed": _suppressed(report),
        "fixes": [_fix(f) for f in d.fixes],
        "command": report.command,
        "launch": None if report.launch is None else {
            "complete": report.launch.complete, "fix": report.launch.fix_index, "program": report.launch.program,
            "vllm_version": report.launch.vllm_version, "release_basis": report.launch.release_basis,
            "changed": list(report.launch.changed),
            "kept": list(report.launch.kept), "not_recovered": list(report.launch.not_recovered),
            "source": [_ref(r) for r in report.launch.source]},
        "inputs": [{"path": i.path, "kind": i.kind, "lines_read": i.lines_read, "lines_recognised": i.lines_recognised,
                    "vllm_lines": i.vllm_lines, "warnings": list(i.warnings)} for i in report.inputs],
        "unrecognised": [_group(g) for g in report.unrecognised],
        "facts": {name: _fact(d.facts[name]) for name in sorted(d.facts)},
        "not_evaluated": list(d.not_evaluated),
        "timeline": [{"time": t.time, "kv_cache_usage": t.kv_cache_usage, "running": t.running, "waiting": t.waiting,
                      "preemptions": t.preemptions, "source": t.source.path, "line": t.source.line}
                     for t in report.timeline],
        "metrics_timeline": [{"time": t.time, "kv_cache_usage": t.kv_cache_usage, "running": t.running,
                              "waiting": t.waiting, "preemptions": t.preemptions, "source": t.source.path,
                              "line": t.source.line} for t in report.metrics_timeline],
        "failure_at": _ref(report.failure_at) if report.failure_at else None,
        "ranks": [{"process": r.process, "weights_gib": r.weights_gib, "kv_cache_gib": r.kv_cache_gib,
                   "this_process_gib": r.this_process_gib, "failed": r.failed} for r in report.ranks],
        "window": None if report.window is None else dataclasses.asdict(report.window),
        "redactions": dict(sorted(report.redactions.items())),
        "warnings": list(report.warnings),
        "fleet": _fleet(report.fleet),
    }


_UNSAFE = re.compile(f"[{UNSAFE_CHARS}]")


def render_json(report: Report, **_: Any) -> str:
    """The report as JSON. Control and bidi characters from the input are written as \\u escapes (json
    leaves DEL, C1 and the bidi overrides raw): the same strings to a parser, nothing hidden to a reader."""
    text = json.dumps(report_dict(report), indent=2, ensure_ascii=False, default=str) + "\n"
    return _UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
