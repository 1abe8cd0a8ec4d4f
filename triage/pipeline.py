"""The whole pipeline in one place: build_report(incident, kit) calls the stages in order, each a function that
returns a value and changes nothing it was given (docs/architecture.md draws them)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Callable, Sequence

from .capacity.estimates import with_estimates
from .capacity.prescribe import prescribe
from .decide.incident import decide
from .decide.ruleset import RuleSet
from .facts.combine import incident_facts
from .logs.signatures import SignatureSet
from .model import Report, Suppression
from .read import read
from .redact import Redactor, redacted_report
from .report.assemble import assemble
from .sources.files import LogInput

if TYPE_CHECKING:
    from .capacity.registry import UserFigures
    from .gpu.probe import GpuSnapshot
    from .metrics.inputs import MetricsRead


@dataclass(frozen=True)
class Toolkit:
    """The loaded data the pipeline runs on."""

    rules: RuleSet
    signatures: SignatureSet
    suppressions: tuple[Suppression, ...] = ()     # accepted rules (.vtriage.toml, --ignore)
    runbook_url: str | None = None                 # the team's runbook URL template (.vtriage.toml)
    config_path: str | None = None                 # the config file read, named in every report


@dataclass(frozen=True)
class Incident:
    """What the user gave, as the CLI opened and read it: the logs (opened, not yet read), the metrics read, a GPU
    snapshot, the time window (--since, --until, now), what the input lacks (--gpu, --gpus, --model-config),
    whether to mask secrets and prompts, and the warnings found before any reading (an expired suppression)."""

    logs: tuple[LogInput, ...] = ()
    metrics: MetricsRead | None = None
    gpu: GpuSnapshot | None = None
    window: tuple[str | None, str | None, datetime] | None = None
    user_figures: UserFigures | None = None
    redact: bool = True
    redact_prompts: bool = False
    warnings: tuple[str, ...] = ()


def build_report(incident: Incident, kit: Toolkit, progress: Sequence[Callable[[int], None]] = ()) -> Report:
    """Read every log once and lead with its last startup attempt: the one on call is looking at, joined with the
    metrics (which describe the server as it is now). `progress[i]` (when given) is told the bytes of log i read."""
    figures = incident.user_figures
    redactor = Redactor(enabled=incident.redact, prompts=incident.redact_prompts)
    evidence = read(incident.logs, incident.metrics, incident.window, kit.signatures, redactor, progress)
    found = incident_facts(evidence, incident.metrics, incident.gpu, bool(incident.logs), kit.signatures,
                           figures.gpu_total_gib if figures else None, figures.gpu_source if figures else "")
    found = with_estimates(found, figures.spec if figures else None)
    decided = decide(found, kit.rules, kit.suppressions)
    decided = prescribe(decided, kit.rules, figures)
    report = assemble(evidence, found, decided, kit.rules, kit.suppressions, kit.runbook_url, kit.config_path,
                      incident.metrics, bool(incident.logs), incident.warnings, redactor.counts)
    return redacted_report(report, redactor)
