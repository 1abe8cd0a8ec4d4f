"""`--fail-on`: which verdicts fail a CI job or a runbook step.

Each value is a verdict (`kv_cache_too_small`) or a severity (`warning`), and a severity means that
severity or worse. Severities are set per verdict in rules/classes/*.toml (docs/oncall.md lists them); a report
whose engine failed is critical whatever its verdict, so an inconclusive crash fails `--fail-on critical`.
Names are case-insensitive. A gate never passes on input it cannot judge: an empty input, or one with
no vLLM output (a failed `kubectl logs`, the wrong container), keeps exit 3 unless the user opts in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

from ..errors import InputError, did_you_mean
from ..model import Diagnosis, Report
from ..vocabulary import SEVERITIES, VERDICTS

if TYPE_CHECKING:     # annotations only: importing the rules costs `vtriage --version` its start-up
    from .ruleset import VerdictClass


FAILED_SEVERITY = "critical"       # an engine that failed is critical, even when the input cannot say why


def severity(diagnosis: Diagnosis, classes: Mapping[str, VerdictClass]) -> str:
    """How bad the incident is: its verdict's severity, but never below critical when a failure stopped the
    engine (an inconclusive verdict that names the phase a crash happened in is still a crash). Another
    program's error, in an input with no vLLM output, is not the engine's."""
    own = classes[diagnosis.verdict].severity
    vllm = diagnosis.facts.get("vllm_lines")
    engine_failed = "failure_kind" in diagnosis.facts and not (vllm is not None and vllm.value == 0)
    if engine_failed and SEVERITIES.index(own) < SEVERITIES.index(FAILED_SEVERITY):
        return FAILED_SEVERITY
    return own


@dataclass(frozen=True)
class Gate:
    """What --fail-on fails on: these verdicts, and any report at least as severe as `floor`."""

    verdicts: frozenset[str]
    floor: str | None

    def fails(self, report: Report) -> bool:
        if report.diagnosis.verdict in self.verdicts:
            return True
        return (self.floor is not None and report.severity is not None
                and SEVERITIES.index(report.severity) >= SEVERITIES.index(self.floor))


def gate(values: Iterable[str], classes: Mapping[str, VerdictClass]) -> Gate:
    """The gate `values` set: verdicts and severities (comma-separated lists are split). A severity means that
    severity or worse, of the verdict or of the report (a failure whose class is unknown is critical)."""
    names = [v.strip().lower() for value in values for v in value.split(",") if v.strip()]
    if not names:
        raise InputError("--fail-on", "needs at least one verdict or severity",
                         f"e.g. --fail-on warning; severities: {', '.join(SEVERITIES)}")
    chosen: set[str] = set()
    floor: str | None = None
    for name in names:
        if name in VERDICTS:
            chosen.add(name)
        elif name in SEVERITIES:
            chosen.update(v for v, cls in classes.items()
                          if SEVERITIES.index(cls.severity) >= SEVERITIES.index(name))
            if floor is None or SEVERITIES.index(name) < SEVERITIES.index(floor):
                floor = name
        else:
            hint = did_you_mean(name, [*VERDICTS, *SEVERITIES]) or \
                f"a verdict ({', '.join(VERDICTS)}) or a severity ({', '.join(SEVERITIES)})"
            raise InputError("--fail-on", f"unknown verdict or severity {name!r}", hint)
    return Gate(frozenset(chosen), floor)


def unjudgeable_input(report: Report) -> str | None:
    """Why a gate must not pass on this input (an empty log, or no vLLM output at all), or None."""
    read = [i for i in report.inputs if i.kind in ("log", "metrics")]
    empty = [i.path for i in read if i.kind == "log" and i.lines_read == 0]
    if empty:
        return f"{', '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty"
    if not any(i.vllm_lines for i in read):
        return f"no vLLM output in {', '.join(i.path for i in read) or 'the input'}"
    return None
