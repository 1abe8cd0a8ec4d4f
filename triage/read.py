"""The read stage: every log read once (sources/ turns a file, pipe or archive into lines; logs/ turns lines into
events and cuts them into startup attempts), and the metric samples masked and cut to the time window.

Reading and parsing run as one stream: a 1 GiB log is never held whole, only the events recognised in it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

from .logs.parse import Attempt, LogParse, merge_events, split_attempts, startup_context
from .logs.signatures import SignatureSet
from .model import CoverageGroup, InputSummary, LogEvent, TimeWindow
from .redact import Redactor
from .sources.files import LineReader, LogInput

if TYPE_CHECKING:
    from .metrics.inputs import MetricsRead
    from .metrics.parse import MetricSample


@dataclass(frozen=True)
class LogRead:
    """What reading one whole log found besides its events."""

    summary: InputSummary                       # its lines (the bulk ones the reader set aside included), warnings
    unrecognised: tuple[CoverageGroup, ...]


class LogReading:
    """One log being read: iterate it once for its events, lazily (a 1 GiB log is never held whole), then
    `result()` says what the reading found. Nothing it was given is written to."""

    def __init__(self, inp: LogInput, signatures: SignatureSet, redactor: Redactor,
                 progress: Callable[[int], None] | None = None, fold_stats: bool = True) -> None:
        self.name = inp.name
        self._lines = LineReader(inp, signatures.bulk_patterns, progress, signatures.quiet)
        self._parse = LogParse(inp.name, self._lines, signatures, redactor, fold_stats)
        self._bulk_vllm_patterns = signatures.bulk_vllm_patterns

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


@dataclass(frozen=True)
class Evidence:
    """What the read stage returns: the logs' startup attempts, read as the facts stage asks for them, what
    reading each log found (once its attempts are read), the metric samples (secrets masked, cut to the window),
    and the warnings so far.

    The attempts are a stream, read once: a crash-looping container's log holds thousands of startups, and only
    each one's facts are kept once it has ended, never all their events together."""

    attempts: Iterator[Attempt]
    readings: tuple[LogReading, ...]
    samples: tuple[MetricSample, ...]
    window: TimeWindow | None
    warnings: tuple[str, ...]

    @cached_property
    def logs(self) -> tuple[LogRead, ...]:
        """What reading each log found: asked once every attempt has been read."""
        return tuple(reading.result() for reading in self.readings)

    @property
    def vllm_lines(self) -> int | None:
        return sum(log.summary.vllm_lines for log in self.logs) if self.logs else None


def read(logs: Sequence[LogInput], metrics: MetricsRead | None,
         window: tuple[str | None, str | None, datetime] | None, signatures: SignatureSet, redactor: Redactor,
         progress: Sequence[Callable[[int], None]] = ()) -> Evidence:
    """Every log read once, as a stream of events cut into attempts; the metric samples. `progress[i]` (when
    given) is told the bytes of log i read so far.

    A time window (triage/logs/timewindow.py) needs each log's events whole, so with a window they are
    collected before attempts are cut."""
    # A time window cuts between stats lines, and several logs are interleaved by their lines' times: either way
    # each stats line keeps its own time, so runs of them are not read a run at a time (logs/statsrun.py).
    fold = window is None and len(logs) == 1
    readings = [LogReading(inp, signatures, redactor, progress[i] if i < len(progress) else None, fold_stats=fold)
                for i, inp in enumerate(logs)]
    samples = masked_samples(metrics.samples if metrics else (), redactor)
    warnings = list(metrics.warnings if metrics else ())
    streams: Sequence[Iterable[LogEvent]] = readings
    kept_window: TimeWindow | None = None
    if window is not None:
        from .logs.timewindow import apply_window  # only with --since/--until (10 ms of imports)
        since, until, now = window
        named = [(r.name, list(r)) for r in readings]
        cut, samples, kept_window, window_warnings = apply_window(named, samples, since, until, now)
        contexts = [startup_context(before, signatures) for before, _ in cut]
        streams = [context + inside for context, (_, inside) in zip(contexts, cut)]
        kept_window = dataclasses.replace(kept_window, context_events=sum(len(c) for c in contexts))
        warnings.extend(window_warnings)
    attempts = split_attempts(merge_events(list(streams)), signatures)   # always at least one
    return Evidence(attempts, tuple(readings), tuple(samples), kept_window, tuple(warnings))


def masked_samples(samples: Sequence[MetricSample], redactor: Redactor) -> list[MetricSample]:
    """Metric evidence is captured text too: secrets in labels or URLs are masked before any fact sees it
    (a model_name label becomes facts.model and the suggested command). Only a line or a source redaction could
    touch is redacted: a snapshot has 20k lines, tested a batch at a time (Redactor.leaves_alone_each)."""
    out = []
    masked: dict[str, str] = {}          # each label value once: a model URL repeats on every series
    # Each set of labels once: the snapshots of a series repeat it. None: nothing in it to mask.
    relabelled: dict[tuple[tuple[str, str], ...], Mapping[str, str] | None] = {}
    clean_paths: dict[str, bool] = {}
    for s, clean_line in zip(samples, redactor.leaves_alone_each([s.text for s in samples])):
        clean_path = clean_paths.get(s.path)
        if clean_path is None:
            clean_path = clean_paths[s.path] = redactor.leaves_alone(s.path)
        if not (clean_line and clean_path):
            text, path = redactor.text(s.text), redactor.text(s.path)
            if text != s.text or path != s.path:
                s = dataclasses.replace(s, written=text, path=path)
        key = tuple(s.labels.items())
        if key not in relabelled:
            masked_labels = {k: masked[v] if v in masked else masked.setdefault(v, redactor.text(v))
                             for k, v in s.labels.items()}
            relabelled[key] = None if masked_labels == s.labels else masked_labels
        labels = relabelled[key]
        if labels is not None:
            s = dataclasses.replace(s, labels=labels)
        out.append(s)
    return out
