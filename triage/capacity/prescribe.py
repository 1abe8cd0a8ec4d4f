"""The prescribe stage: each diagnosis with the fixes its rule names, sized by the capacity model from its facts
and what the user gave, in the order on-call reads them."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..decide.incident import Decided
from ..decide.ruleset import RuleSet
from ..model import Diagnosis
from ..vocabulary import MEMORY_VERDICTS

if TYPE_CHECKING:
    from .registry import UserFigures


def prescribe(decided: Decided, rules: RuleSet, figures: UserFigures | None) -> Decided:
    return dataclasses.replace(decided, diagnoses=tuple(prescribe_one(d, rules, figures)
                                                        for d in decided.diagnoses))


def prescribe_one(diagnosis: Diagnosis, rules: RuleSet, figures: UserFigures | None) -> Diagnosis:
    """Unchanged when no rule chose the verdict."""
    if not diagnosis.rule_path:
        return diagnosis
    names = rules.nodes[diagnosis.rule_path[-1]].fixes
    if not names and diagnosis.verdict not in MEMORY_VERDICTS:
        return dataclasses.replace(diagnosis, fixes=())
    # Every solver and the model they check with: 30 ms of imports that a report with no fix to size skips.
    from .fixes import prescribe as sized_fixes
    from .registry import NO_USER_FIGURES
    fixes = sized_fixes(names, diagnosis.facts, diagnosis.verdict, figures or NO_USER_FIGURES)
    return dataclasses.replace(diagnosis, fixes=fixes)
