"""`--fail-on`: which verdicts fail a CI job or a runbook step.

Each value is a verdict (`kv_cache_too_small`) or a severity (`warning`), and a severity means that
severity or worse. Severities are set per verdict in rules/classes/*.toml (docs/oncall.md lists them).
"""
from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Iterable, Mapping

from .errors import InputError
from .model import SEVERITIES, VERDICTS

if TYPE_CHECKING:     # annotations only: importing the rules costs `vtriage --version` its start-up
    from .ruleset import VerdictClass


def verdicts_failing(values: Iterable[str], classes: Mapping[str, VerdictClass]) -> frozenset[str]:
    """The verdicts that match any of `values` (comma-separated lists are split)."""
    names = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if not names:
        raise InputError("--fail-on", "needs at least one verdict or severity",
                         f"e.g. --fail-on warning; severities: {', '.join(SEVERITIES)}")
    chosen: set[str] = set()
    for name in names:
        if name in VERDICTS:
            chosen.add(name)
        elif name in SEVERITIES:
            floor = SEVERITIES.index(name)
            chosen.update(v for v, cls in classes.items() if SEVERITIES.index(cls.severity) >= floor)
        else:
            close = difflib.get_close_matches(name, [*VERDICTS, *SEVERITIES], n=1)
            hint = f"did you mean {close[0]!r}?" if close else \
                f"a verdict ({', '.join(VERDICTS)}) or a severity ({', '.join(SEVERITIES)})"
            raise InputError("--fail-on", f"unknown verdict or severity {name!r}", hint)
    return frozenset(chosen)
