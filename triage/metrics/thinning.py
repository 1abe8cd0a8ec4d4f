"""Counters and histograms thinned as snapshots arrive, so that holding many snapshots costs what their gauges cost.

Every fact reads a cumulative series (a counter's `_total` and `_created`, a histogram's `_bucket`, `_count` and
`_sum`) by its increase over the scrapes (series.counter_increase, histogram_window), its first and last points
(capacity/lengths.py, the evidence), or its points at the last scrape (the server's uptime). A point in the middle
of a stretch where its series only rises changes none of these: the increase is taken per stretch, its last point
minus its first (series._grown), so the result is the same to the bit, whole numbers or not. A `_created` series
changes only when the server restarts: a point in the middle of a stretch of one value says what the point before
it says (series._created_at reads the latest at or before a scrape). Such a point is dropped once its series' next
point arrives, and the next point kept stands for it (`MetricSample.stands_for`), so counts of samples read stay
what they were.

A point stays, whatever its series does:
- at the series' first and last point, and on either side of a fall (a restart), or of a `_created` change;
- of the preemption counter: the timeline shows its increase per scrape (pipeline.metric_timeline);
- when the report's redaction could touch its line (labels included) or source: masks are counted per line;
- when no other vLLM sample of its scrape names its instance, model and engine: each unit's scrapes are counted.
Nothing is dropped unless the caller knows the snapshots come in their order, each with a time of its own
(facts._copies drops a scrape that repeats the one before at the same time or none, comparing every sample);
nor with a time window (it cuts samples by their time after reading); nor from the first snapshot that carries
timestamps of its own onwards (they may put it elsewhere in the order).

What is left grows by a level per scrape: each gauge's point and the preemption counter's. Once more than
LEVELS_HELD such points are held, neighbouring snapshots are merged pairwise (all but the first, whose points the
queue's growth and the increases start from; the newest is added after a merge), as the log's stats events are past
their cap. A gauge keeps the larger of its two points (the peak, as the log's merged stats keep it), but the
requests running, which are those of the snapshot whose KV cache was fuller (what ran when the cache was full sizes
--max-num-seqs: peaks of the two taken apart would pair a full cache with a count it never held); the preemption
counter its later one (the next point's increase is from it, and a fall after it is still seen; the timeline shows
the pair's increase at the merged scrape's time), dcgm-exporter's figures those of the snapshot whose GPU was
fuller; the point kept stands for both (`stands_for`: a gauge's point stands for as many scrapes,
series.per_scrape's weight). A counter's or histogram's points held in both stay, the earlier first. The merged
samples are held in the earlier snapshot's place and take its scrape and time; the later one is left empty and
keeps its place in the order. A pair is left as it is where the preemption counter falls before or between them
or a `_created` series changes there: a restart would be lost.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping, Sequence

from ..redact import Redactor
from .names import DCGM_USED, KV_USAGE, PREEMPTIONS, RUNNING
from .parse import MetricSample, stamped
from .series import CUMULATIVE_SUFFIXES, unit_labels

KEPT_WHOLE = frozenset(PREEMPTIONS)      # the preemption counter under each of its names, read per scrape
ANY_REDACTION = Redactor(enabled=True, prompts=True)     # the most a report masks (--redact-prompts)
LEVELS_HELD = 20_000     # gauge and preemption points held before neighbouring snapshots merge: about 3 MiB


def thinnable_name(name: str) -> bool:
    return name.endswith(CUMULATIVE_SUFFIXES) and name not in KEPT_WHOLE


SeriesKey = tuple[str, frozenset[tuple[str, str]]]


def series_key(name: str, labels: Mapping[str, str]) -> SeriesKey:
    """A series as series.by_series groups samples: its name and its labels, whatever their order."""
    return name, frozenset(labels.items())


@dataclass(frozen=True, slots=True)
class _Tail:
    """A series' latest point, the snapshot it is held in, and whether it is dropped if the next point goes on its
    stretch (does not fall; of a `_created` series, has the same value)."""

    sample: MetricSample
    snapshot: int
    droppable: bool


class Thinning:
    """The snapshots added so far, each a list of its samples in file order with the dropped points taken out."""

    def __init__(self, redaction: Redactor | None) -> None:
        """`redaction`: the report's, whose `leaves_alone` says which lines it could touch; None drops nothing."""
        self.enabled = redaction is not None
        self.redaction = redaction or ANY_REDACTION
        self.snapshots: list[list[MetricSample]] = []
        self.held = 0                                        # samples held now, over all snapshots
        self.levels = 0                                      # of them, points held of each scrape (not thinnable)
        self._merge_above = LEVELS_HELD
        self._tails: dict[SeriesKey, _Tail] = {}
        self._clean_paths: dict[str, bool] = {}

    def add(self, samples: Sequence[MetricSample]) -> None:
        """The next snapshot, in scrape order."""
        if self.enabled and samples and stamped(samples) is not None:
            self.enabled = False        # its own times may put it before another: every point held stays
        if self.enabled and self.levels > self._merge_above:
            self._merge_neighbours()
            # where pairs would not merge (restarts), wait for more snapshots before trying again
            self._merge_above = LEVELS_HELD if self.levels <= LEVELS_HELD else self.levels + LEVELS_HELD // 2
        index = len(self.snapshots)
        held = list(samples)
        self.snapshots.append(held)
        self.held += len(held)
        self.levels += sum(1 for s in held if not thinnable_name(s.name))
        if not self.enabled:
            return
        dropped: set[int] = set()       # the ids of the points dropped, alive until their snapshots are rebuilt
        touched: set[int] = set()       # the snapshots that held them
        for position, (s, may) in enumerate(zip(samples, self._may_drop(samples))):
            if not thinnable_name(s.name):
                continue
            key = series_key(s.name, s.labels)
            tail = self._tails.get(key)
            goes_on = tail is not None and (s.value == tail.sample.value if s.name.endswith("_created")
                                            else s.value >= tail.sample.value)
            if tail is not None and goes_on and tail.droppable:
                dropped.add(id(tail.sample))
                touched.add(tail.snapshot)
                self.held -= 1
                s = held[position] = dataclasses.replace(s, stands_for=s.stands_for + tail.sample.stands_for)
            self._tails[key] = _Tail(s, index, may and goes_on)
        for rebuilt in touched:
            self.snapshots[rebuilt] = [s for s in self.snapshots[rebuilt] if id(s) not in dropped]

    def result(self) -> list[tuple[MetricSample, ...]]:
        """Each snapshot's samples held: none for one merged into the snapshot before it."""
        return [tuple(held) for held in self.snapshots]

    def _merge_neighbours(self) -> None:
        """Merge the snapshots held, but the first, pairwise (see the module's docstring)."""
        live = [i for i, held in enumerate(self.snapshots) if held]
        moved: dict[int, int] = {}
        # each `_created` series' and preemption counter's latest value so far
        latest = dict(self._restart_keys(self.snapshots[live[0]]))
        for first, second in zip(live[1::2], live[2::2]):
            marks = self._restart_keys(self.snapshots[first]) + self._restart_keys(self.snapshots[second])
            restarted = _restarted(latest, marks)
            latest.update(marks)
            if restarted:
                continue
            merged = self._merged(self.snapshots[first], self.snapshots[second])
            before = len(self.snapshots[first]) + len(self.snapshots[second])
            self.held -= before - len(merged)
            self.levels -= before - len(merged)
            self.snapshots[first], self.snapshots[second] = merged, []
            moved[second] = first
        if moved:
            self._tails = {key: tail if tail.snapshot not in moved else
                           dataclasses.replace(tail, snapshot=moved[tail.snapshot])
                           for key, tail in self._tails.items()}

    def _restart_keys(self, samples: Sequence[MetricSample]) -> list[tuple[tuple, float]]:
        """(key, value) of the points that tell a restart: `_created` series' and the preemption counter's."""
        out: list[tuple[tuple, float]] = [((series_key(s.name, s.labels),), s.value) for s in samples
                                          if s.name.endswith("_created")]
        out += [(key, samples[position].value) for position, key in _level_keys(samples)
                if samples[position].name in KEPT_WHOLE]
        return out

    def _merged(self, first: list[MetricSample], second: list[MetricSample]) -> list[MetricSample]:
        """Two neighbouring snapshots' samples as one snapshot's. A gauge's k-th point in one pairs with its k-th
        in the other (a round of several URLs holds a series once for each, in the same order every round). A
        counter's or histogram's points held in both stay, the earlier first: an increase is read point after
        point, within a scrape as across them."""
        used = [(s.value, n) for n, held in enumerate((first, second)) for s in held if s.name == DCGM_USED]
        from_second = max(used, default=(0.0, 1))[1] == 1     # the fuller GPU's figures; else the later's
        usage: dict[tuple, list[float]] = {}                   # each unit's KV usage in the first and the second
        for n, held in enumerate((first, second)):
            for s in held:
                if s.name in KV_USAGE:
                    tops = usage.setdefault(unit_labels(s.name, s.labels), [-1.0, -1.0])
                    tops[n] = max(tops[n], s.value)
        merged = list(first)
        points = {key: position for position, key in _level_keys(first)}
        for position, key in _level_keys(second):
            s = second[position]
            at = points.pop(key, None)
            if at is None:
                merged.append(s)
                continue
            earlier = merged[at]
            if s.name in KEPT_WHOLE:
                kept = s                # the count its next point's increase starts from (a restart after it)
            elif not s.name.startswith("vllm:"):
                kept = s if from_second else earlier
            elif s.name in RUNNING and unit_labels(s.name, s.labels) in usage:
                tops = usage[unit_labels(s.name, s.labels)]
                kept = s if tops[1] > tops[0] else earlier      # as many as ran when the cache was as full
            else:
                kept = s if s.value > earlier.value else earlier
            merged[at] = dataclasses.replace(kept, stands_for=earlier.stands_for + s.stands_for)
        merged.extend(s for s in second if thinnable_name(s.name))
        return merged

    def _may_drop(self, samples: Sequence[MetricSample]) -> list[bool]:
        """Whether each sample may be dropped as a middle point, as far as it alone says (see the module's list)."""
        may = [thinnable_name(s.name) and self._clean_path(s.path) for s in samples]
        answers = iter(self.redaction.leaves_alone_each([s.text for s, m in zip(samples, may) if m]))
        may = [m and next(answers) for m in may]
        units = {unit_labels(s.name, s.labels) for s, m in zip(samples, may) if not m and s.name.startswith("vllm:")}
        return [m and (not s.name.startswith("vllm:") or unit_labels(s.name, s.labels) in units)
                for s, m in zip(samples, may)]

    def _clean_path(self, path: str) -> bool:
        clean = self._clean_paths.get(path)
        if clean is None:
            clean = self._clean_paths[path] = self.redaction.leaves_alone(path)
        return clean


def _restarted(latest: Mapping[tuple, float], marks: Sequence[tuple[tuple, float]]) -> bool:
    """Whether the points that tell a restart (`_restart_keys` of two neighbours, in order) show one after
    `latest` (each such series' value before them) or between them: a merged point would hide it. A preemption
    counter restarts where it falls, a `_created` series where it changes (its key has one part)."""
    seen: dict[tuple, float] = {}
    for mark, value in marks:
        before = seen.get(mark, latest.get(mark, value))
        if value < before or (len(mark) == 1 and value != before):
            return True
        seen[mark] = value
    return False


def _level_keys(samples: Sequence[MetricSample]) -> list[tuple[int, tuple[SeriesKey, int]]]:
    """(position, key) of each point that is not thinnable: its series and which of the series' points in the
    snapshot it is (a round of several URLs holds a series once for each)."""
    seen: dict[SeriesKey, int] = {}
    keys: list[tuple[int, tuple[SeriesKey, int]]] = []
    for position, s in enumerate(samples):
        if thinnable_name(s.name):
            continue
        series = series_key(s.name, s.labels)
        nth = seen[series] = seen.get(series, -1) + 1
        keys.append((position, (series, nth)))
    return keys
