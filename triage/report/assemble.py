"""The assemble stage: the Report, every figure a renderer shows. It leads with the diagnosis whose problem is the
most certain (fleet.worst), lists the attempts before it, and adds the fleet view, the timeline, per-rank memory,
the command line to paste (command.py), the runbook link, every input read and every warning."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Mapping, Sequence

from .. import __version__
from ..decide.gate import severity
from ..decide.incident import Decided, attempt_summary
from ..decide.ruleset import RuleSet
from ..facts.combine import IncidentFacts, Subject
from ..model import (
    CoverageGroup,
    Diagnosis,
    FleetView,
    InputSummary,
    MetricsOrigin,
    Report,
    Suppression,
    WeightsEstimate,
)
from ..read import Evidence
from .command import fixes_the_release_has, headline_command
from .fleet import instance_views, key_figures, unit_name, worst
from .runbooks import runbook_link
from .timeline import metric_timeline, rank_memory, timeline

if TYPE_CHECKING:
    from ..metrics.inputs import MetricsRead

SCHEMA_VERSION = 1


def assemble(evidence: Evidence, found: IncidentFacts, decided: Decided, rules: RuleSet,
             suppressions: tuple[Suppression, ...], runbook_url: str | None, config_path: str | None,
             metrics: MetricsRead | None,
             has_logs: bool, warnings: tuple[str, ...], redactions: Mapping[str, int]) -> Report:
    diagnoses = [the_release_has(d) for d in decided.diagnoses]
    metric_inputs = metrics.inputs if metrics else ()
    origin = metrics.origin if metrics else None
    lead = worst(diagnoses, rules.severities())
    chosen, last = found.subjects[lead], diagnoses[lead]
    summaries = (decided.earlier if chosen.with_log else ()) + (attempt_summary(chosen.attempt, last),)
    logs = [log.summary for log in evidence.logs]
    unrecognised: list[CoverageGroup] = sorted((g for log in evidence.logs for g in log.unrecognised),
                                               key=lambda g: (-g.count, g.example.path, g.example.line))
    failure = last.facts.get("failure_message")
    failing = last.facts.get("failing_process")
    version = last.facts["vllm_version"].value if "vllm_version" in last.facts else None
    band = last.facts["release_band"].value if "release_band" in last.facts else None
    launch = headline_command(last.fixes, [*(found.settings if chosen.with_log else ()), *chosen.attempt.events],
                              version, band)
    points = timeline(chosen.attempt.events)
    scraped = metric_timeline(chosen.unit.samples if chosen.unit else evidence.samples)
    if not points:
        points, scraped = scraped, ()
    every_warning = (tuple(w for log in logs for w in log.warnings) + evidence.warnings + found.warnings
                     + found.gpu.warnings + warnings)
    gpu_input = (found.gpu.input,) if found.gpu.input else ()
    return Report(schema_version=SCHEMA_VERSION, tool_version=__version__, diagnosis=last, attempts=summaries,
                  same_failure_attempts=sum(1 for a in summaries if a.verdict == last.verdict),
                  inputs=tuple(logs) + tuple(metric_inputs) + gpu_input,
                  unrecognised=tuple(unrecognised),
                  command=launch.text if launch else None, launch=launch,
                  timeline=points, metrics_timeline=scraped, failure_at=failure.evidence[0] if failure else None,
                  ranks=rank_memory(chosen.attempt.events, failing.value if failing else None),
                  redactions=dict(redactions), warnings=every_warning,
                  fleet=_fleet_view(found.subjects, diagnoses, lead, origin, metric_inputs,
                                    found.joined and has_logs),
                  severity=severity(last, rules.classes),
                  heading=rules.classes[last.verdict].heading,
                  runbook=runbook_link(last.verdict, rules, runbook_url),
                  suppressions=suppressions, config=config_path, window=evidence.window,
                  weights_needed=_weights_needed(last),
                  metrics_figures=key_figures(last) if metric_inputs else {})


def the_release_has(diagnosis: Diagnosis) -> Diagnosis:
    """Only the fixes whose flags the incident's release has: the command line is built for that release."""
    facts = diagnosis.facts
    version = facts["vllm_version"].value if "vllm_version" in facts else None
    band = facts["release_band"].value if "release_band" in facts else None
    if not diagnosis.fixes:
        return diagnosis
    return dataclasses.replace(diagnosis, fixes=fixes_the_release_has(diagnosis.fixes, version, band))


def _weights_needed(diagnosis: Diagnosis) -> WeightsEstimate | None:
    """The weights a model that does not fit needs, as its fixes estimate them: what the report leads with."""
    if diagnosis.verdict != "weights_dont_fit":
        return None
    from ..capacity.registry import weights_needed  # the capacity model (30 ms), only once a weight fix is shown
    needed = weights_needed(diagnosis.facts)
    return WeightsEstimate(needed.gib, needed.how, needed.lower_bound)


def _fleet_view(subjects: Sequence[Subject], diagnoses: Sequence[Diagnosis], lead: int, origin: MetricsOrigin | None,
                metric_inputs: Sequence[InputSummary], log_joined: bool) -> FleetView | None:
    """The per-instance view, when there is more than one unit or the metrics came from Prometheus."""
    units = [i for i, s in enumerate(subjects) if s.unit is not None]
    if not units or (len(units) == 1 and (origin is None or origin.kind != "prometheus")):
        return None
    origin = origin or MetricsOrigin("files", ", ".join(i.path for i in metric_inputs))
    every_unit = [subjects[i].unit for i in units]
    names = [unit_name(u, every_unit, origin.name) for u in every_unit]  # type: ignore[arg-type, misc]
    views = instance_views(names, every_unit, [diagnoses[i] for i in units])  # type: ignore[arg-type]
    detail = names[units.index(lead)] if lead in units else "the log"
    overall = diagnoses[lead]
    return FleetView(origin=origin, verdict=overall.verdict, confidence=overall.confidence, detail=detail,
                     instances=views, log_joined=log_joined)
