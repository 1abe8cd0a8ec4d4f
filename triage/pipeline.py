"""The whole pipeline in one place: build_report(incident, kit) is

    read (the logs as events cut into attempts, the metric samples: Evidence)
    -> facts_for -> decide (the rules, engine.py) -> prescribe (the fixes, capacity/), per diagnosis: Runs
    -> assemble (the Report: every figure a renderer shows).

Each stage returns a value and writes nothing it was given. Only `sources` touches files; everything
else here is a function of what it is given.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

from . import __version__
from .decide.engine import diagnose
from .decide.gate import severity
from .decide.log_facts import extract_facts
from .decide.ruleset import RuleSet
from .facts import FACTS
from .logs.parse import Attempt, LogParse, merge_events, split_attempts, startup_context
from .logs.signatures import SignatureSet
from .model import (
    AttemptSummary,
    CoverageGroup,
    Diagnosis,
    Fact,
    FleetView,
    InputSummary,
    LogEvent,
    MetricsOrigin,
    RankMemory,
    Report,
    Suppression,
    TimelinePoint,
    TimeWindow,
    WeightsEstimate,
)
from .redact import Redactor, redacted_report
from .report.command import fixes_the_release_has, headline_command
from .report.fleet import Unit, instance_views, key_figures, split_units, unit_name, worst
from .report.runbooks import runbook_link
from .sources.files import LineReader, LogInput
from .vocabulary import MEMORY_VERDICTS

if TYPE_CHECKING:
    from .capacity.registry import Given
    from .gpu.probe import GpuSnapshot
    from .metrics.inputs import MetricsRead
    from .metrics.parse import MetricSample

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Toolkit:
    """The loaded data the pipeline runs on."""

    rules: RuleSet
    signatures: SignatureSet
    suppressions: tuple[Suppression, ...] = ()     # accepted rules (.vtriage.toml, --ignore)
    runbook_url: str | None = None                 # the team's runbook URL template (.vtriage.toml)
    config_path: str | None = None                 # the config file read, named in every report


def diagnose_attempt(attempt: Attempt, kit: Toolkit, earlier: Sequence[LogEvent], vllm_lines: int | None,
                     metric_facts: dict[str, Fact] | None = None, full: bool = True,
                     gpu_facts: Mapping[str, Fact] | None = None, given: Given | None = None) -> Diagnosis:
    """One attempt through the middle stages: facts_for -> decide -> prescribe (`full=False` stops at the verdict)."""
    diagnosis = decide(facts_for(attempt, kit, earlier, vllm_lines, metric_facts, gpu_facts, given), kit, full)
    return prescribe(diagnosis, kit, given) if full else diagnosis


def facts_for(attempt: Attempt, kit: Toolkit, earlier: Sequence[LogEvent], vllm_lines: int | None,
              metric_facts: Mapping[str, Fact] | None = None, gpu_facts: Mapping[str, Fact] | None = None,
              given: Given | None = None) -> dict[str, Fact]:
    """Facts of one attempt, joined with metrics and a GPU snapshot when given (the snapshot only
    fills figures the log and metrics do not give). What the user gave on the command line (`given`:
    the GPU, the model's config) fills what the input lacks."""
    facts = extract_facts(attempt.events, kit.signatures, earlier)
    if vllm_lines is not None:
        facts["vllm_lines"] = Fact("vllm_lines", vllm_lines, FACTS["vllm_lines"].unit)
    if metric_facts:
        from .metrics.facts import merge_facts  # the metrics stages, only with metrics (as below)
        facts = merge_facts(facts, metric_facts)
    if gpu_facts:
        facts = {**gpu_facts, **facts}
    if given is not None:
        facts = {**given_facts(given, facts), **facts}
    if "weights_gib" not in facts and "model" in facts:      # the capacity model, only when it has work
        from .capacity.catalog import estimate_facts
        facts = {**estimate_facts(facts, given.spec if given else None), **facts}
    return facts


def decide(facts: Mapping[str, Fact], kit: Toolkit, full: bool = True) -> Diagnosis:
    """The decision tree over the facts (triage/decide/engine.py): the verdict, its evidence, the classes ruled out."""
    return diagnose(kit.rules, facts, {x.rule_id: x for x in kit.suppressions}, full=full)


def prescribe(diagnosis: Diagnosis, kit: Toolkit, given: Given | None = None) -> Diagnosis:
    """The diagnosis with the fixes its rule names, sized by the capacity model from its facts and what the
    user gave, in the order on-call reads them; unchanged when no rule chose the verdict."""
    if not diagnosis.rule_path:
        return diagnosis
    names = kit.rules.nodes[diagnosis.rule_path[-1]].fixes
    if not names and diagnosis.verdict not in MEMORY_VERDICTS:     # nothing to size: no capacity model to load
        return dataclasses.replace(diagnosis, fixes=())
    from .capacity import NOTHING_GIVEN  # the capacity model, only once a fix is computed
    from .capacity import prescribe as sized_fixes
    fixes = sized_fixes(names, diagnosis.facts, diagnosis.verdict, given or NOTHING_GIVEN)
    facts = diagnosis.facts
    version = facts["vllm_version"].value if "vllm_version" in facts else None
    band = facts["release_band"].value if "release_band" in facts else None
    return dataclasses.replace(diagnosis, fixes=fixes_the_release_has(fixes, version, band))


def given_facts(given: Given, facts: Mapping[str, Fact]) -> dict[str, Fact]:
    """The GPU's memory from --gpu / --gpu-memory-gib, as the fact the input did not give (and the budget it makes)."""
    out: dict[str, Fact] = {}
    if given.gpu_total_gib and "gpu_total_gib" not in facts:
        out["gpu_total_gib"] = Fact("gpu_total_gib", round(given.gpu_total_gib, 4), "GiB", (),
                                    f"given: {given.gpu_source}")
        util = facts.get("gpu_memory_utilization")
        if util is not None and "budget_gib" not in facts:
            out["budget_gib"] = Fact("budget_gib", round(given.gpu_total_gib * util.value, 4), "GiB", util.evidence,
                                     f"gpu_memory_utilization x the given total ({given.gpu_source})")
    return out


@dataclass(frozen=True)
class LogRead:
    """What reading one whole log found besides its events."""

    summary: InputSummary                       # its lines (the bulk ones the reader set aside included), warnings
    unrecognised: tuple[CoverageGroup, ...]


class LogReading:
    """One log being read: iterate it once for its events, lazily (a 1 GiB log is never held whole), then
    `result()` says what the reading found. Nothing it was given is written to."""

    def __init__(self, inp: LogInput, kit: Toolkit, redactor: Redactor,
                 progress: Callable[[int], None] | None = None, fold_stats: bool = True) -> None:
        self.name = inp.name
        self._lines = LineReader(inp, kit.signatures.bulk_patterns, progress, kit.signatures.quiet)
        self._parse = LogParse(inp.name, self._lines, kit.signatures, redactor, fold_stats)
        self._bulk_vllm_patterns = kit.signatures.bulk_vllm_patterns

    def __iter__(self) -> Iterator[LogEvent]:
        return iter(self._parse)

    def result(self) -> LogRead:
        """The parser saw every line but the bulk and quiet ones the reader set aside: add those back (a quiet
        line is vLLM's, recognised by nothing)."""
        lines, parse = self._lines.result(), self._parse.result()
        summary = parse.summary
        bulk = sum(lines.bulk_lines)
        bulk_vllm = sum(lines.bulk_lines[:self._bulk_vllm_patterns])
        return LogRead(dataclasses.replace(summary, lines_read=max(lines.lines_read, summary.lines_read),
                                           lines_recognised=summary.lines_recognised + bulk,
                                           vllm_lines=summary.vllm_lines + bulk_vllm + lines.quiet_lines,
                                           warnings=lines.warnings + parse.warnings, skipped=lines.skipped),
                       parse.unrecognised)


_SETTINGS_KINDS = frozenset({"args", "engine_config", "version", "max_model_len", "auto_fit",
                             "model_name", "load_start"})


@dataclass(frozen=True)
class _History:
    """The log read once: the earlier attempts already diagnosed (to their verdict), and the last one."""

    earlier: list[AttemptSummary]
    settings: list[LogEvent]            # earlier attempts' settings, for what the last one did not print
    last: Attempt


def _read_attempts(streams: Sequence[Iterable[LogEvent]], kit: Toolkit) -> _History:
    summaries: list[AttemptSummary] = []
    settings: list[LogEvent] = []
    previous: Attempt | None = None
    for attempt in split_attempts(merge_events(list(streams)), kit.signatures):
        if previous is not None:
            summaries.append(_summary(previous, diagnose_attempt(previous, kit, settings, None, full=False)))
            settings.extend(e for e in previous.events if e.kind in _SETTINGS_KINDS)
        previous = attempt
    assert previous is not None            # split_attempts always yields one
    return _History(summaries, settings, previous)


@dataclass(frozen=True)
class Incident:
    """What the user gave, as the CLI opened and read it: the logs (opened, not yet read), the metrics read, a GPU
    snapshot, the time window (--since, --until, now), what the input lacks (`given`: --gpu, --model-config),
    whether to mask secrets and prompts, and the warnings found before any reading (an expired suppression)."""

    logs: tuple[LogInput, ...] = ()
    metrics: MetricsRead | None = None
    gpu: GpuSnapshot | None = None
    window: tuple[str | None, str | None, datetime] | None = None
    given: Given | None = None
    redact: bool = True
    redact_prompts: bool = False
    warnings: tuple[str, ...] = ()


def build_report(incident: Incident, kit: Toolkit, progress: Sequence[Callable[[int], None]] = ()) -> Report:
    """Read every log once, diagnose each startup attempt as it completes, and lead with the last one:
    the one on call is looking at. `progress[i]` (when given) is told the bytes of log i read so far.

    Metrics describe the server as it is now, so they join the last attempt. Each metrics unit
    (instance, model, engine; see triage/report/fleet.py) is diagnosed joined with it, and the one whose
    problem is the most certain leads (fleet.worst). A log is joined only when the metrics are of one
    instance: with several it cannot say which one wrote it.
    """
    redactor = Redactor(enabled=incident.redact, prompts=incident.redact_prompts)
    evidence = read(incident, kit, redactor, progress)
    gpu = gpu_evidence(incident.gpu)
    runs = diagnose_runs(evidence, incident, kit, gpu.facts)     # each: facts_for -> decide -> prescribe
    return redacted_report(assemble(incident, kit, evidence, runs, gpu, redactor.counts), redactor)


@dataclass(frozen=True)
class Evidence:
    """What the read stage returns: the logs cut into startup attempts (the earlier ones already judged), what
    reading each log found, the metric samples (secrets masked, cut to the window), and the warnings so far."""

    history: _History
    logs: tuple[LogRead, ...]
    samples: tuple[MetricSample, ...]
    window: TimeWindow | None
    warnings: tuple[str, ...]

    @property
    def vllm_lines(self) -> int | None:
        return sum(log.summary.vllm_lines for log in self.logs) if self.logs else None


def read(incident: Incident, kit: Toolkit, redactor: Redactor,
         progress: Sequence[Callable[[int], None]] = ()) -> Evidence:
    """The read stage: every log read once, as a stream of events cut into attempts; the metric samples.

    A time window (triage/logs/timewindow.py) needs each log's events whole, so with a window they are
    collected before attempts are cut."""
    # A time window cuts between stats lines, and several logs are interleaved by their lines' times: either way
    # each stats line keeps its own time, so runs of them are not read a run at a time (logs/statsrun.py).
    fold = incident.window is None and len(incident.logs) == 1
    readings = [LogReading(inp, kit, redactor, progress[i] if i < len(progress) else None, fold_stats=fold)
                for i, inp in enumerate(incident.logs)]
    metrics = incident.metrics
    samples = _redacted(metrics.samples if metrics else (), redactor)
    warnings = list(metrics.warnings if metrics else ())
    streams: Sequence[Iterable[LogEvent]] = readings
    kept_window: TimeWindow | None = None
    if incident.window is not None:
        from .logs.timewindow import apply_window
        since, until, now = incident.window
        named = [(r.name, list(r)) for r in readings]
        cut, samples, kept_window, window_warnings = apply_window(named, samples, since, until, now)
        contexts = [startup_context(before, kit.signatures) for before, _ in cut]
        streams = [context + inside for context, (_, inside) in zip(contexts, cut)]
        kept_window = dataclasses.replace(kept_window, context_events=sum(len(c) for c in contexts))
        warnings.extend(window_warnings)
    history = _read_attempts(streams, kit)
    return Evidence(history, tuple(r.result() for r in readings), tuple(samples), kept_window, tuple(warnings))


@dataclass(frozen=True)
class GpuEvidence:
    """A GPU snapshot's facts (they only fill figures the log and metrics do not give), its warnings, and
    the snapshot as one of the report's inputs."""

    facts: Mapping[str, Fact]
    warnings: tuple[str, ...] = ()
    input: InputSummary | None = None


def gpu_evidence(snapshot: GpuSnapshot | None) -> GpuEvidence:
    if snapshot is None:
        return GpuEvidence({})
    from .gpu.probe import snapshot_facts  # only with a snapshot: a plain log report loads no GPU code
    facts, warnings = snapshot_facts(snapshot)
    rows = len(snapshot.devices) + len(snapshot.processes)
    summary = InputSummary(path=snapshot.path, kind="gpu", lines_read=snapshot.lines or rows, lines_recognised=rows,
                           vllm_lines=sum(1 for p in snapshot.processes if p.vllm))
    return GpuEvidence(facts, tuple(warnings), summary)


@dataclass(frozen=True)
class _Run:
    """One diagnosis of the incident now: the log's last attempt joined with one unit's metrics, or either alone."""

    attempt: Attempt
    diagnosis: Diagnosis
    unit: Unit | None
    with_log: bool


@dataclass(frozen=True)
class Runs:
    """The diagnoses of the incident now (one per metrics unit, or the log alone), and whether the log joined them."""

    runs: tuple[_Run, ...]
    joined: bool
    warnings: tuple[str, ...] = ()


def diagnose_runs(evidence: Evidence, incident: Incident, kit: Toolkit, gpu_facts: Mapping[str, Fact]) -> Runs:
    """The last attempt through facts_for -> decide -> prescribe, once per metrics unit when there are metrics."""
    history, given, vllm_lines = evidence.history, incident.given, evidence.vllm_lines
    metrics = incident.metrics
    metric_inputs = metrics.inputs if metrics else ()
    samples = evidence.samples
    if not (samples or metric_inputs or (metrics and metrics.origin is not None)):
        return Runs((_Run(history.last, diagnose_attempt(history.last, kit, history.settings, vllm_lines,
                                                         gpu_facts=gpu_facts, given=given), None, True),), False)
    from .metrics.facts import extract_metric_facts
    runs: list[_Run] = []
    units, unit_warnings = split_units(samples)
    warnings = list(unit_warnings)
    ordering = metrics.origin.ordering if metrics and metrics.origin else None
    joined = not incident.logs or len({u.instance for u in units}) <= 1
    if not joined:
        warnings.append(f"the log was diagnosed on its own: the metrics hold {len({u.instance for u in units})} "
                        "instances; select the one the log came from (--instance, --selector) to join them")
        runs.append(_Run(history.last, diagnose_attempt(history.last, kit, history.settings, vllm_lines,
                                                        gpu_facts=gpu_facts, given=given), None, True))
    own = history.last if joined else Attempt(index=1)
    for unit in units if units else [None]:
        facts = extract_metric_facts(unit.samples if unit else samples, ordering)
        if not any(s.name.startswith("vllm:") for s in samples):
            facts.update(_declared_only(metric_inputs))
        runs.append(_Run(own, diagnose_attempt(own, kit, history.settings if joined else (),
                                               vllm_lines if joined else None, facts,
                                               gpu_facts=gpu_facts if joined else None, given=given), unit, joined))
    return Runs(tuple(runs), joined, tuple(warnings))


def assemble(incident: Incident, kit: Toolkit, evidence: Evidence, diagnosed: Runs, gpu: GpuEvidence,
             redactions: Mapping[str, int]) -> Report:
    """The report: the leading diagnosis with the attempts before it, the fleet view, the timeline, per-rank
    memory, the command line, every input read and every warning."""
    runs, history = diagnosed.runs, evidence.history
    metrics = incident.metrics
    metric_inputs = metrics.inputs if metrics else ()
    origin = metrics.origin if metrics else None
    chosen = runs[worst([r.diagnosis for r in runs], kit.rules.severities())]
    last = chosen.diagnosis
    summaries = (history.earlier if chosen.with_log else []) + [_summary(chosen.attempt, last)]
    logs = [log.summary for log in evidence.logs]
    unrecognised: list[CoverageGroup] = sorted((g for log in evidence.logs for g in log.unrecognised),
                                               key=lambda g: (-g.count, g.example.path, g.example.line))
    failure = last.facts.get("failure_message")
    failing = last.facts.get("failing_process")
    version = last.facts["vllm_version"].value if "vllm_version" in last.facts else None
    band = last.facts["release_band"].value if "release_band" in last.facts else None
    launch = headline_command(last.fixes, [*(history.settings if chosen.with_log else ()), *chosen.attempt.events],
                              version, band)
    points = timeline(chosen.attempt.events)
    scraped = metric_timeline(chosen.unit.samples if chosen.unit else evidence.samples)
    if not points:
        points, scraped = scraped, ()
    warnings = (tuple(w for log in logs for w in log.warnings) + evidence.warnings + diagnosed.warnings
                + gpu.warnings + incident.warnings)
    return Report(schema_version=SCHEMA_VERSION, tool_version=__version__, diagnosis=last, attempts=tuple(summaries),
                  same_failure_attempts=sum(1 for a in summaries if a.verdict == last.verdict),
                  inputs=tuple(logs) + tuple(metric_inputs) + ((gpu.input,) if gpu.input else ()),
                  unrecognised=tuple(unrecognised),
                  command=launch.text if launch else None, launch=launch,
                  timeline=points, metrics_timeline=scraped, failure_at=failure.evidence[0] if failure else None,
                  ranks=rank_memory(chosen.attempt.events, failing.value if failing else None),
                  redactions=dict(redactions), warnings=warnings,
                  fleet=_fleet_view(runs, chosen, origin, metric_inputs, diagnosed.joined and bool(incident.logs)),
                  severity=severity(last, kit.rules.classes),
                  heading=kit.rules.classes[last.verdict].heading,
                  runbook=runbook_link(last.verdict, kit.rules, kit.runbook_url),
                  suppressions=kit.suppressions, config=kit.config_path, window=evidence.window,
                  weights_needed=_weights_needed(last),
                  metrics_figures=key_figures(last) if metric_inputs else {})


def _weights_needed(diagnosis: Diagnosis) -> WeightsEstimate | None:
    """The weights a model that does not fit needs, as its fixes estimate them: what the report leads with."""
    if diagnosis.verdict != "weights_dont_fit":
        return None
    from .capacity.registry import weights_needed  # the capacity model, only once a weight fix is shown
    needed = weights_needed(diagnosis.facts)
    return WeightsEstimate(needed.gib, needed.how, needed.lower_bound)


def _declared_only(inputs: Sequence[InputSummary]) -> dict[str, Fact]:
    """A /metrics text of declarations only (# HELP/# TYPE): a registry mounted but never fed."""
    declared = [i for i in inputs if i.declared_only]
    if not declared:
        return {}
    refs = tuple(i.declared_at for i in declared if i.declared_at is not None)
    return {"metrics_declared_only": Fact("metrics_declared_only", max(i.declared_only for i in declared),
                                          FACTS["metrics_declared_only"].unit, refs)}


def _summary(attempt: Attempt, diagnosis: Diagnosis) -> AttemptSummary:
    phase = diagnosis.facts.get("failed_phase")
    return AttemptSummary(index=attempt.index, first=attempt.events[0].source if attempt.events else None,
                          last=attempt.events[-1].source if attempt.events else None, verdict=diagnosis.verdict,
                          failed_phase=phase.value if phase else None)


def _redacted(samples: Sequence[MetricSample], redactor: Redactor) -> list[MetricSample]:
    """Metric evidence is captured text too: secrets in labels or URLs are masked before any fact sees it
    (a model_name label becomes facts.model and the suggested command). Only a line or a source redaction could
    touch is redacted: a snapshot has 20k lines, tested a batch at a time (Redactor.leaves_alone_each)."""
    out = []
    masked: dict[str, str] = {}          # each label value once: a model URL repeats on every series
    relabelled: dict[int, Mapping[str, str]] = {}     # each labels dict once: the snapshots of a series share one
    clean_paths: dict[str, bool] = {}
    for s, clean_line in zip(samples, redactor.leaves_alone_each([s.text for s in samples])):
        clean_path = clean_paths.get(s.path)
        if clean_path is None:
            clean_path = clean_paths[s.path] = redactor.leaves_alone(s.path)
        if not (clean_line and clean_path):
            text, path = redactor.text(s.text), redactor.text(s.path)
            if text != s.text or path != s.path:
                s = dataclasses.replace(s, written=text, path=path)
        labels = relabelled.get(id(s.labels))
        if labels is None:
            labels = {k: masked[v] if v in masked else masked.setdefault(v, redactor.text(v))
                      for k, v in s.labels.items()}
            labels = relabelled[id(s.labels)] = s.labels if labels == s.labels else labels
        if labels is not s.labels:
            s = dataclasses.replace(s, labels=labels)
        out.append(s)
    return out


def _fleet_view(runs: Sequence[_Run], chosen: _Run, origin: MetricsOrigin | None,
                metric_inputs: Sequence[InputSummary], log_joined: bool) -> FleetView | None:
    """The per-instance view, when there is more than one unit or the metrics came from Prometheus."""
    units = [r for r in runs if r.unit is not None]
    if not units or (len(units) == 1 and (origin is None or origin.kind != "prometheus")):
        return None
    origin = origin or MetricsOrigin("files", ", ".join(i.path for i in metric_inputs))
    names = [unit_name(r.unit, [u.unit for u in units], origin.name) for r in units]  # type: ignore[arg-type, misc]
    views = instance_views(names, [r.unit for r in units], [r.diagnosis for r in units])  # type: ignore[misc]
    detail = names[units.index(chosen)] if chosen in units else "the log"
    overall = chosen.diagnosis
    return FleetView(origin=origin, verdict=overall.verdict, confidence=overall.confidence, detail=detail,
                     instances=views, log_joined=log_joined)


def _clock(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    if seconds > 1e9:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"+{seconds:.0f}s"


def metric_timeline(samples: Sequence[MetricSample]) -> tuple[TimelinePoint, ...]:
    """Scrapes as chart points (only when there are several), like stats lines are for a log."""
    if not samples:
        return ()
    from .metrics.facts import KV_USAGE, PREEMPTIONS, RUNNING, WAITING
    from .metrics.series import per_scrape
    def level(names: Sequence[str], combine: str = "sum") -> dict[int, tuple]:
        chosen = next(([s for s in samples if s.name == n] for n in names if any(s.name == n for s in samples)), [])
        return {lv.scrape: (lv.time, lv.value, lv.sample) for lv in per_scrape(chosen, combine)}
    usage, running, waiting = level(KV_USAGE, "max"), level(RUNNING), level(WAITING)
    preempted = level(PREEMPTIONS)
    scrapes = sorted(set(usage) | set(running) | set(waiting))
    if len(scrapes) < 2:
        return ()
    points = []
    for i, scrape in enumerate(scrapes):
        anchor = (usage.get(scrape) or running.get(scrape) or waiting[scrape])
        before = preempted.get(scrapes[i - 1]) if i else None
        now = preempted.get(scrape)
        delta = int(now[1] - before[1]) if now and before and now[1] >= before[1] else None
        points.append(TimelinePoint(
            time=_clock(anchor[0]), kv_cache_usage=round(usage[scrape][1], 4) if scrape in usage else None,
            running=int(running[scrape][1]) if scrape in running else None,
            waiting=int(waiting[scrape][1]) if scrape in waiting else None, preemptions=delta, source=anchor[2].source))
    return _downsample(tuple(points))


MAX_TIMELINE_POINTS = 400


def timeline(events: Sequence[LogEvent]) -> tuple[TimelinePoint, ...]:
    """Stats lines as chart points (the report falls back to /metrics snapshots when there are none)."""
    stats = [e for e in events if e.kind == "stats"]
    points = []
    for e in stats:
        f = e.fields
        points.append(TimelinePoint(time=e.timestamp, kv_cache_usage=f.get("kv_usage"), running=f.get("running"),
                                    waiting=f.get("waiting"), preemptions=f.get("preemptions"), source=e.source))
    return _downsample(points)


def _downsample(points: Sequence[TimelinePoint]) -> tuple[TimelinePoint, ...]:
    """At most MAX_TIMELINE_POINTS: each bucket keeps its fullest KV point, so a saturation spike survives
    downsampling a day of stats."""
    if len(points) <= MAX_TIMELINE_POINTS:
        return tuple(points)
    size = len(points) / MAX_TIMELINE_POINTS
    kept = []
    for b in range(MAX_TIMELINE_POINTS):
        bucket = points[int(b * size):int((b + 1) * size)] or points[-1:]
        best = max(bucket, key=lambda p: (p.kv_cache_usage or 0.0, p.waiting or 0))
        preempted = sum(p.preemptions or 0 for p in bucket)
        kept.append(dataclasses.replace(best, preemptions=preempted or best.preemptions))
    return tuple(kept)


def rank_memory(events: Sequence[LogEvent], failing: str | None) -> tuple[RankMemory, ...]:
    """Per-process memory figures, only worth showing when more than one process reported them."""
    ranks: dict[str, dict] = {}
    for e in events:
        if e.process is None and not any(k in e.fields for k in ("weights_gib", "kv_cache_gib", "this_process_gib")):
            continue
        for key in ("weights_gib", "kv_cache_gib", "this_process_gib"):
            if key in e.fields and e.kind in ("weights_loaded", "kv_available", "cuda_oom", "memory_profile"):
                ranks.setdefault(e.process or "main process", {})[key] = e.fields[key]
    if len(ranks) < 2:
        return ()
    return tuple(RankMemory(process=name, failed=(name == (failing or "main process")) and "this_process_gib" in vals,
                            **vals) for name, vals in sorted(ranks.items()))
