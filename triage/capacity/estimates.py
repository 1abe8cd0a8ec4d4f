"""The step between facts and decide: when the weights never loaded, a known model's parameters and the weights
one GPU would hold (catalog.estimate_facts), as facts the rules can weigh."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Mapping

from ..facts.combine import IncidentFacts
from ..model import Fact

if TYPE_CHECKING:
    from .hfconfig import ModelSpec


def with_estimate(facts: Mapping[str, Fact], spec: ModelSpec | None) -> Mapping[str, Fact]:
    if "weights_gib" in facts or "model" not in facts:
        return facts
    from .catalog import estimate_facts  # the model table and config reader: 10 ms, only when there is a model
    return {**estimate_facts(facts, spec), **facts}


def with_estimates(found: IncidentFacts, spec: ModelSpec | None) -> IncidentFacts:
    """Every diagnosis's facts with the estimate where it has work: `spec` (--model-config) sizes the incident
    now; an earlier attempt is estimated from the model's name alone."""
    earlier = tuple(dataclasses.replace(e, facts=with_estimate(e.facts, None)) for e in found.earlier)
    subjects = tuple(dataclasses.replace(s, facts=with_estimate(s.facts, spec)) for s in found.subjects)
    return dataclasses.replace(found, earlier=earlier, subjects=subjects)
