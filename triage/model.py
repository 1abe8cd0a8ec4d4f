"""The types passed between pipeline stages.

sources -> parse (LogEvent) -> facts (Fact) -> rules (Finding, RuledOut) -> Report.
Everything here is a frozen dataclass so stages stay pure: they take these in and give
these out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True, slots=True)
class SourceRef:
    """Where a piece of evidence came from: input name, 1-based line, the (cleaned, redacted) text."""

    path: str
    line: int
    text: str
    span: tuple[int, int] | None = None  # the matched part of `text`, for highlighting

    def where(self) -> str:
        return self.path if self.line == 0 else f"{self.path}:{self.line}"   # 0: a Prometheus series


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One recognised log record: a signature matched it and pulled out typed fields."""

    kind: str
    signature: str
    fields: Mapping[str, Any]
    process: str | None          # e.g. "EngineCore_DP0 pid=12473", "rank1"
    level: str | None            # INFO, WARNING, ERROR, ...
    timestamp: str | None        # vLLM's "MM-DD HH:MM:SS" (no year) or the wrapper's ISO time
    source: SourceRef
    seq: int                     # position in the merged incident stream
    wall_time: str | None = None  # the collector's time when a wrapper gave one (ISO: it has the year)


@dataclass(frozen=True, slots=True)
class Fact:
    """A named observation with the lines that support it. Absent facts are simply not there."""

    name: str
    value: Any
    unit: str | None = None
    evidence: tuple[SourceRef, ...] = ()
    note: str | None = None      # how it was derived, when not read verbatim


@dataclass(frozen=True, slots=True)
class Finding:
    """A decision-tree node that fired, with its explanation filled from facts."""

    rule_id: str
    title: str
    verdict: str | None
    confidence: str | None
    summary: str
    why: str
    references: tuple[str, ...]
    facts: tuple[str, ...]
    evidence: tuple[SourceRef, ...]
    path: tuple[str, ...]        # decision-tree path, root first
    settle: str = ""             # the line that would settle it, when the input lacks the decisive one
    decided_by: str = ""         # the comparison that decided it, when its rule states one


@dataclass(frozen=True, slots=True)
class Suppression:
    """A rule the team accepts (.vtriage.toml or --ignore): when it fires it is listed, never decides."""

    rule_id: str
    reason: str
    origin: str                  # ".vtriage.toml:4", or "--ignore"
    expires: str | None = None   # ISO date after which it no longer applies


@dataclass(frozen=True, slots=True)
class SuppressedFinding:
    """A rule that fired but is suppressed: shown as SUPPRESSED, and the tree moved on past it."""

    finding: Finding
    suppression: Suppression


@dataclass(frozen=True, slots=True)
class RuledOut:
    """A verdict class that was not chosen, and the fact that rules it out (or, not assessed, what is missing)."""

    verdict: str
    reason: str
    facts: tuple[str, ...]
    evidence: tuple[SourceRef, ...]


FIX_STATUSES: tuple[str, ...] = (
    "checked",       # the capacity model predicts it starts and does what it is for
    "unchecked",     # the model cannot tell; `needs` names the input that would let it
    "not_enough",    # the model predicts it fails, or falls short of its goal, on its own
    "advice",        # no number to check: an action (stop a process, fix NCCL, ...)
)


@dataclass(frozen=True, slots=True)
class Fix:
    """One documented remedy. `flag`/`value` are set when it is a vLLM flag with a computed number."""

    action: str                  # one line a human reads
    why: str
    flag: str | None = None
    value: Any = None
    also_set: Mapping[str, Any] = field(default_factory=dict)   # further flags this fix changes together
    computed_from: tuple[str, ...] = ()
    reference: str | None = None
    checked: bool = False        # re-checked against the capacity model (status == "checked")
    predicted: Mapping[str, Any] | None = None   # the capacity model's prediction of applying it ("summary" first)
    status: str = ""             # FIX_STATUSES; "" until the fixes are arranged (capacity.arrange_fixes)
    needs: tuple[str, ...] = ()  # unchecked: the inputs (vtriage options) that would let the model check it


@dataclass(frozen=True, slots=True)
class LaunchCommand:
    """The incident's own launch command, rebuilt from what the log shows, with the headline fix applied."""

    text: str                          # the whole command, or (complete=False) only the flags to add or change
    complete: bool                     # every non-default setting was recovered from the log
    fix_index: int                     # which fix (1-based, as listed) it applies
    changed: tuple[str, ...]           # the flags the fix set or changed
    kept: tuple[str, ...]              # the incident's other settings it carries (flags and env vars)
    not_recovered: tuple[str, ...]     # settings the log shows but the command cannot carry (secrets, objects)
    vllm_version: str | None           # the release whose argument list every flag was checked against
    program: str                       # "vllm serve" | "python -m vllm.entrypoints.openai.api_server" | "LLM(...)"
    source: tuple[SourceRef, ...] = ()  # the lines the settings were read from
    release_basis: str = ""            # how vllm_version was chosen, in words (the log's, the nearest, assumed)


@dataclass(frozen=True, slots=True)
class CoverageGroup:
    """Unrecognised WARNING/ERROR lines that share a shape, so nothing silent hides."""

    level: str
    template: str
    count: int
    example: SourceRef


@dataclass(frozen=True, slots=True)
class InputSummary:
    """How much of one input was read and understood."""

    path: str
    kind: str                    # "log" | "metrics"
    lines_read: int
    lines_recognised: int
    vllm_lines: int              # lines that carry vLLM's logger prefix or a vLLM signature
    warnings: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()            # the warnings that say what bytes were skipped to read the rest
    declared_only: int = 0                   # metrics: vLLM metrics declared (# HELP/# TYPE) while none has a sample
    declared_at: SourceRef | None = None     # the first such declaration


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The verdict for one startup attempt (or for the metrics alone)."""

    verdict: str
    confidence: str
    rule_path: tuple[str, ...]
    findings: tuple[Finding, ...]
    ruled_out: tuple[RuledOut, ...]          # classes a fact in the input rules out
    fixes: tuple[Fix, ...]
    facts: Mapping[str, Fact]
    not_evaluated: tuple[str, ...] = ()
    suppressed: tuple[SuppressedFinding, ...] = ()
    not_assessed: tuple[RuledOut, ...] = ()  # classes nothing in the input speaks for or against


@dataclass(frozen=True, slots=True)
class AttemptSummary:
    """One startup attempt found in the log, with its own verdict."""

    index: int
    first: SourceRef | None
    last: SourceRef | None
    verdict: str
    failed_phase: str | None


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    """One stats interval (a log stats line or a metrics scrape), for the report's charts."""

    time: str | None
    kv_cache_usage: float | None     # 0-1
    running: int | None
    waiting: int | None
    preemptions: int | None          # preemptions counted in this interval / since the last point
    source: SourceRef


@dataclass(frozen=True, slots=True)
class RankMemory:
    """What one process (TP/PP rank) reported about its GPU memory."""

    process: str
    weights_gib: float | None = None
    kv_cache_gib: float | None = None
    this_process_gib: float | None = None   # at its OOM
    failed: bool = False


@dataclass(frozen=True, slots=True)
class MetricsOrigin:
    """Where the metrics came from, for the report's header: files, a live URL or a Prometheus range."""

    kind: str                          # "files" | "url" | "prometheus"
    name: str                          # the file(s), URL or Prometheus server, credentials removed
    ordering: str | None = None        # how the snapshots were ordered and timed
    selector: str | None = None        # the PromQL selector (prometheus)
    start: str | None = None           # the window, RFC 3339 (prometheus)
    end: str | None = None
    step_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class InstanceView:
    """One server (or one engine of it) in the fleet view: its verdict and the figures that matter."""

    name: str                          # pod, Prometheus instance, or the input's name
    model: str | None
    engine: str | None                 # vLLM's `engine` label (data-parallel index)
    verdict: str
    confidence: str
    rule: str | None
    summary: str
    figures: Mapping[str, Any]         # fact name -> value, the key figures only
    stands_out: tuple[str, ...]        # why this one differs from the rest
    evidence: tuple[SourceRef, ...]


@dataclass(frozen=True, slots=True)
class FleetView:
    """Several servers or engines diagnosed one by one; the report's diagnosis is the worst one's."""

    origin: MetricsOrigin
    verdict: str                       # the overall verdict (the most severe instance's)
    confidence: str
    detail: str                        # the instance whose diagnosis the report shows in full
    instances: tuple[InstanceView, ...]
    log_joined: bool                   # whether the log(s) were joined with the metrics


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """The --since/--until window a report covers, and how the log's times were read."""

    since: str | None            # resolved, "YYYY-MM-DD HH:MM:SS" in the log's clock
    until: str | None
    basis: str                   # how the year (and the clock) of the log's timestamps was decided
    events_kept: int             # recognised log records inside the window
    events_total: int
    context_events: int = 0      # settings lines of the running startup, kept from before the window
    samples_kept: int = 0        # metric samples inside the window (timestamped ones only)
    samples_total: int = 0


@dataclass(frozen=True, slots=True)
class WeightsEstimate:
    """The weights a model needs over all its GPUs, as the weight fixes estimate them (capacity.weights_needed)."""

    gib: float | None
    how: str                    # how it was found: the log's figure, a parameter count, or what the GPU held
    lower_bound: bool           # at least this much


@dataclass(frozen=True, slots=True)
class Report:
    """Everything a renderer needs, and nothing it would have to compute."""

    schema_version: int
    tool_version: str
    diagnosis: Diagnosis                   # of the last attempt: the one the engineer is looking at
    attempts: tuple[AttemptSummary, ...]
    same_failure_attempts: int             # how many attempts ended with the same verdict as the last
    inputs: tuple[InputSummary, ...]
    unrecognised: tuple[CoverageGroup, ...]
    command: str | None = None             # the first checked flag fix applied to the incident's own command
    launch: LaunchCommand | None = None    # how `command` was built: complete or partial, what it kept and lacks
    timeline: tuple[TimelinePoint, ...] = ()   # the last attempt's stats, downsampled
    metrics_timeline: tuple[TimelinePoint, ...] = ()  # /metrics snapshots beside a log's stats lines
    failure_at: SourceRef | None = None        # where the root failure is, to mark on the timeline
    ranks: tuple[RankMemory, ...] = ()         # per-process memory, when the log shows several
    redactions: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    fleet: FleetView | None = None             # several instances or engines, or a Prometheus query
    severity: str | None = None                # the verdict's severity (vocabulary.SEVERITIES), for gating
    heading: str | None = None                 # the verdict's short title (its class's `heading`), to lead with
    runbook: str | None = None                 # the verdict's runbook page (docs/runbooks/) or the team's URL
    suppressions: tuple[Suppression, ...] = ()  # every suppression in force, fired or not
    config: str | None = None                  # the .vtriage.toml (or --config) read; None: none was
    window: TimeWindow | None = None           # --since/--until, when given
    weights_needed: WeightsEstimate | None = None   # weights_dont_fit: the weights the model needs
    metrics_figures: Mapping[str, Any] = field(default_factory=dict)  # key /metrics figures (fleet.KEY_FIGURES)
