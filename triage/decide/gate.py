"""`--fail-on`: which verdicts fail a CI job or a runbook step.

Each value is a verdict (`kv_cache_too_small`) or a severity (`warning`), and a severity means that
severity or worse. Severities are set per verdict in rules/classes/*.toml (docs/oncall.md lists them).
Names are case-insensitive. A gate never passes on input it cannot judge: an empty input, or one with
no vLLM output (a failed `kubectl logs`, the wrong container), keeps exit 3 unless the user opts in.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping

from ..errors import InputError, did_you_mean
from ..model import Report
from ..vocabulary import SEVERITIES, VERDICTS

if TYPE_CHECKING:     # annotations only: importing the rules costs `vtriage --version` its start-up
    from .ruleset import VerdictClass


def verdicts_failing(values: Iterable[str], classes: Mapping[str, VerdictClass]) -> frozenset[str]:
    """The verdicts that match any of `values` (comma-separated lists are split)."""
    names = [v.strip().lower() for value in values for v in value.split(",") if v.strip()]
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
            hint = did_you_mean(name, [*VERDICTS, *SEVERITIES]) or \
                f"a verdict ({', '.join(VERDICTS)}) or a severity ({', '.join(SEVERITIES)})"
            raise InputError("--fail-on", f"unknown verdict or severity {name!r}", hint)
    return frozenset(chosen)


def unjudgeable_input(report: Report) -> str | None:
    """Why a gate must not pass on this input (an empty log, or no vLLM output at all), or None."""
    read = [i for i in report.inputs if i.kind in ("log", "metrics")]
    empty = [i.path for i in read if i.kind == "log" and i.lines_read == 0]
    if empty:
        return f"{', '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty"
    if not any(i.vllm_lines for i in read):
        return f"no vLLM output in {', '.join(i.path for i in read) or 'the input'}"
    return None
