"""The decide stage over the whole incident: each earlier attempt to its verdict (what the report lists before the
last one), and each diagnosis of the incident now in full (engine.py walks the rules)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..facts.combine import IncidentFacts
from ..logs.parse import Attempt
from ..model import AttemptSummary, Diagnosis, SourceRef, Suppression
from .engine import diagnose
from .ruleset import RuleSet


@dataclass(frozen=True)
class Decided:
    """The earlier attempts' summaries, and one diagnosis per subject of the facts stage, in its order."""

    earlier: tuple[AttemptSummary, ...]
    diagnoses: tuple[Diagnosis, ...]


def decide(found: IncidentFacts, rules: RuleSet, suppressions: Sequence[Suppression]) -> Decided:
    accepted: Mapping[str, Suppression] = {x.rule_id: x for x in suppressions}
    earlier = tuple(_summary(e.index, e.first, e.last, diagnose(rules, e.facts, accepted, full=False))
                    for e in found.earlier)
    return Decided(earlier, tuple(diagnose(rules, s.facts, accepted, full=True) for s in found.subjects))


def attempt_summary(attempt: Attempt, diagnosis: Diagnosis) -> AttemptSummary:
    return _summary(attempt.index, attempt.first, attempt.last, diagnosis)


def _summary(index: int, first: SourceRef | None, last: SourceRef | None, diagnosis: Diagnosis) -> AttemptSummary:
    phase = diagnosis.facts.get("failed_phase")
    return AttemptSummary(index=index, first=first, last=last, verdict=diagnosis.verdict,
                          failed_phase=phase.value if phase else None)
