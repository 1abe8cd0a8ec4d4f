"""Many servers, or many engines of one server, from one set of metric samples.

Samples are split into units (metrics/units.py): one per instance (the `pod` label, else Prometheus' `instance`, else
the input itself), model (`model_name`) and data-parallel engine (`engine`) that vLLM's own series name;
another exporter's series never makes a unit, whatever its labels (docs/metrics.md). Each unit is diagnosed
on its own; nothing is summed across engines or pods. The overall verdict is the unit whose problem is
the most certain (high confidence first; among equals, failures before preemption), else inconclusive,
else healthy; the report shows that unit in full. A sample without a label (cache_config_info has no model_name,
V0 has no engine, dcgm-exporter has neither) belongs to every unit of its instance it does not contradict.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from ..model import Diagnosis, InstanceView, SourceRef
from ..vocabulary import KV_SATURATED, PROBLEM_SEVERITY, SEVERITIES, VERDICTS

if TYPE_CHECKING:
    from ..metrics.units import Unit

CONFIDENCE_RANK = {"high": 0, "medium": 1, "low": 2}
KEY_FIGURES = ("kv_cache_usage_max", "saturated_share", "preemptions", "preemptions_since_start",
               "preemption_rate_per_min", "preemptions_per_request_mean", "requests_preempted_share", "waiting_max",
               "waiting_growth", "ttft_p95_seconds",
               "e2e_latency_p95_seconds", "gpu_memory_used_gib", "gpu_memory_beyond_budget_gib")
BEYOND_BUDGET_NOTABLE_GIB = 1.0
SATURATED_NOTABLE_SHARE = 0.5
SLOW_FACTOR = 3.0


def unit_name(unit: Unit, units: Sequence[Unit], fallback: str) -> str:
    """The instance, plus the model and engine only where they tell units apart; `fallback` (the
    input's name) when nothing does."""
    parts = [unit.instance] if unit.instance else []
    same_instance = [u for u in units if u.instance == unit.instance]
    if len({u.model for u in same_instance}) > 1 and unit.model:
        parts.append(unit.model)
    if len({u.engine for u in same_instance}) > 1 and unit.engine is not None:
        parts.append(f"engine={unit.engine}")
    return " ".join(parts) or fallback


def severity(diagnosis: Diagnosis, severity_of: Mapping[str, str]) -> tuple[int, int, int, int]:
    """Problems (severity warning and up) first, the most certain of them first, then the more severe;
    then the milder classes (inconclusive, healthy), the more severe first. `severity_of`: each verdict's
    severity (its class in rules/classes/)."""
    rank, floor = SEVERITIES.index(severity_of[diagnosis.verdict]), SEVERITIES.index(PROBLEM_SEVERITY)
    return (max(floor - rank, 0), CONFIDENCE_RANK.get(diagnosis.confidence, 3), -rank,
            VERDICTS.index(diagnosis.verdict))


def worst(diagnoses: Sequence[Diagnosis], severity_of: Mapping[str, str]) -> int:
    """Index of the diagnosis that decides the overall verdict."""
    return min(range(len(diagnoses)), key=lambda i: (severity(diagnoses[i], severity_of), i))


def key_figures(diagnosis: Diagnosis) -> dict[str, object]:
    """The figures an instance is compared by (KEY_FIGURES) that its diagnosis has."""
    return {name: diagnosis.facts[name].value for name in KEY_FIGURES if name in diagnosis.facts}


def _median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else None


def _stands_out(figures: Mapping[str, object], everyone: Sequence[Mapping[str, object]],
                diagnosis: Diagnosis) -> list[str]:
    reasons = []
    lifetime = "preemptions" not in figures
    preempted = figures.get("preemptions", figures.get("preemptions_since_start"))
    others_preempting = [f.get("preemptions", f.get("preemptions_since_start")) for f in everyone if f is not figures]
    if isinstance(preempted, (int, float)) and preempted > 0 and (
            diagnosis.verdict == "preemption_slowdown" or not any(others_preempting)):
        rate = figures.get("preemption_rate_per_min")
        per_request = figures.get("preemptions_per_request_mean")
        extra = [f"{rate:.1f}/min"] if isinstance(rate, float) else []
        if lifetime and isinstance(per_request, float):
            extra.append(f"{per_request:.2g} per finished request")
        reasons.append(f"preempting: {preempted} preemptions" + (" since the server started" if lifetime else "")
                       + (f" ({', '.join(extra)})" if extra else ""))
    beyond = figures.get("gpu_memory_beyond_budget_gib")
    if isinstance(beyond, float) and beyond >= BEYOND_BUDGET_NOTABLE_GIB:
        budget = diagnosis.facts.get("budget_gib")
        reasons.append(f"its GPU holds {beyond:.2f} GiB beyond vLLM's reservation"
                       + (f" of {budget.value:.2f} GiB" if budget else ""))
    share = figures.get("saturated_share")
    if isinstance(share, float) and share >= SATURATED_NOTABLE_SHARE:
        reasons.append(f"KV cache >= {KV_SATURATED:.0%} full for {share:.0%} of the window")
    ttft = figures.get("ttft_p95_seconds")
    peers = [t for f in everyone if isinstance(t := f.get("ttft_p95_seconds"), float)]
    typical = _median(peers) if len(peers) >= 3 else None
    if isinstance(ttft, float) and typical and ttft >= SLOW_FACTOR * typical:
        reasons.append(f"time to first token p95 {ttft:.2f} s, {ttft / typical:.0f}x the fleet's median")
    if not reasons and diagnosis.verdict not in ("healthy", "inconclusive") and diagnosis.findings:
        reasons.append(diagnosis.findings[0].title)
    return reasons


def instance_views(names: Sequence[str], units: Sequence[Unit],
                   diagnoses: Sequence[Diagnosis]) -> tuple[InstanceView, ...]:
    figures = [key_figures(d) for d in diagnoses]
    views = []
    for name, unit, diagnosis, figs in zip(names, units, diagnoses, figures):
        lead = diagnosis.findings[0] if diagnosis.findings else None
        evidence: tuple[SourceRef, ...] = lead.evidence[:4] if lead else ()
        views.append(InstanceView(name=name, model=unit.model, engine=unit.engine, verdict=diagnosis.verdict,
                                  confidence=diagnosis.confidence, rule=lead.rule_id if lead else None,
                                  summary=lead.summary if lead else "", figures=figs,
                                  stands_out=tuple(_stands_out(figs, figures, diagnosis)), evidence=evidence))
    return tuple(views)
