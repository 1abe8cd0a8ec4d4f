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
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from ..redact import Redactor
from .facts import PREEMPTIONS
from .parse import MetricSample, stamped
from .series import unit_labels

CUMULATIVE_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum")
KEPT_WHOLE = frozenset(PREEMPTIONS)      # the preemption counter under each of its names, read per scrape
ANY_REDACTION = Redactor(enabled=True, prompts=True)     # the most a report masks (--redact-prompts)


def thinnable_name(name: str) -> bool:
    return name.endswith(CUMULATIVE_SUFFIXES) and name not in KEPT_WHOLE


@dataclasses.dataclass(frozen=True, slots=True)
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
        self._tails: dict[tuple[str, int], _Tail] = {}
        self._first_labels: dict[int, Mapping[str, str]] = {}      # by the hash of their items
        self._labels_ids: dict[int, int | None] = {}               # by id: the id of the first equal labels seen
        self._labels_seen: list[Mapping[str, str]] = []            # held, so that each id stays its dict's
        self._clean_paths: dict[str, bool] = {}

    def add(self, samples: Sequence[MetricSample]) -> None:
        """The next snapshot, in scrape order."""
        index = len(self.snapshots)
        held = list(samples)
        self.snapshots.append(held)
        self.held += len(held)
        if self.enabled and samples and stamped(samples) is not None:
            self.enabled = False        # its own times may put it before another: every point held stays
        if not self.enabled:
            return
        dropped: set[int] = set()       # the ids of the points dropped, alive until their snapshots are rebuilt
        touched: set[int] = set()       # the snapshots that held them
        for position, (s, may) in enumerate(zip(samples, self._may_drop(samples))):
            key = self._series(s.name, s.labels) if thinnable_name(s.name) else None
            if key is None:
                continue
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
        """Each snapshot's samples held."""
        return [tuple(held) for held in self.snapshots]

    def _may_drop(self, samples: Sequence[MetricSample]) -> list[bool]:
        """Whether each sample may be dropped as a middle point, as far as it alone says (see the module's list)."""
        may = [thinnable_name(s.name) and self._clean_path(s.path) for s in samples]
        answers = iter(self.redaction.leaves_alone_each([s.text for s, m in zip(samples, may) if m]))
        may = [m and next(answers) for m in may]
        units = {unit_labels(s.name, s.labels) for s, m in zip(samples, may) if not m and s.name.startswith("vllm:")}
        return [m and (not s.name.startswith("vllm:") or unit_labels(s.name, s.labels) in units)
                for s, m in zip(samples, may)]

    def _series(self, name: str, labels: Mapping[str, str]) -> tuple[str, int] | None:
        """The series' key, as series.by_series groups samples: its name, and its labels whatever their order (the
        id of the first equal labels dict); once per dict, the snapshots of a series share one. None when other
        labels share the hash of its labels: it is then never thinned."""
        known = self._labels_ids.get(id(labels), -1)
        if known == -1:
            self._labels_seen.append(labels)
            first = self._first_labels.setdefault(hash(frozenset(labels.items())), labels)
            known = self._labels_ids[id(labels)] = id(first) if first == labels else None
        return None if known is None else (name, known)

    def _clean_path(self, path: str) -> bool:
        clean = self._clean_paths.get(path)
        if clean is None:
            clean = self._clean_paths[path] = self.redaction.leaves_alone(path)
        return clean
