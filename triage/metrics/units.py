"""Metric samples split into units: one per instance (the `pod` label, else Prometheus' `instance`, else
the input itself), model (`model_name`) and data-parallel engine (`engine`) that vLLM's own series name;
another exporter's series never makes a unit, whatever its labels (docs/metrics.md). A sample without a label
(cache_config_info has no model_name, V0 has no engine, dcgm-exporter has neither) belongs to every unit of its
instance it does not contradict. Each unit is diagnosed on its own (triage/report/fleet.py leads with one)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .parse import MetricSample
from .series import unit_labels


@dataclass(frozen=True)
class Unit:
    """The samples of one engine of one model on one instance."""

    instance: str                  # "" when the samples carry no instance label: the input itself
    model: str | None
    engine: str | None
    samples: tuple[MetricSample, ...]


def split_units(samples: Sequence[MetricSample]) -> tuple[list[Unit], list[str]]:
    """Units in a stable order, and warnings about samples that belong to none."""
    vllm = [s for s in samples if s.name.startswith("vllm:")]
    named = [s for s in vllm if s.labels.get("model_name")] or vllm
    found = {(unit_labels(s.name, s.labels)[0], s.labels.get("model_name"), s.labels.get("engine")) for s in named}
    # A series without an engine label (admission_rejections_total, its _created) is the server's, not
    # an engine of its own: where the same instance and model have engines, it joins each of them.
    engined = {(k[0], k[1]) for k in found if k[2] is not None}
    keys = sorted((k for k in found if k[2] is not None or (k[0], k[1]) not in engined),
                  key=lambda k: (k[0], k[1] or "", k[2] or ""))
    instances = sorted({k[0] for k in keys})
    members: dict[tuple, list[MetricSample]] = {k: [] for k in keys}
    unmatched: set[str] = set()
    # Which units a sample joins depends only on its instance, model and engine: each such triple is
    # matched against the units once (a server with 140 engines has 70k samples but a few hundred triples).
    units_of: dict[tuple[str, str | None, str | None], list[tuple]] = {}
    for s in samples:
        where, model, engine = unit_labels(s.name, s.labels)
        if where not in instances and not s.name.startswith("vllm:") and len(instances) == 1:
            where = instances[0]       # one server: its GPU's exporter needs no pod label to match
        matched = units_of.get((where, model, engine))
        if matched is None:
            matched = units_of[(where, model, engine)] = [
                k for k in keys if k[0] == where and (not model or model == k[1]) and (not engine or engine == k[2])]
        for k in matched:
            members[k].append(s)
        if not matched and keys:
            unmatched.add(f"{s.name}{{{where}}}" if where else s.name)
    warnings = []
    if unmatched:
        shown = ", ".join(sorted(unmatched)[:3])
        warnings.append(f"{len(unmatched)} metric series matched no vLLM instance (e.g. {shown}); dcgm-exporter "
                        "series need a pod or exported_pod label naming the vLLM pod")
    return [Unit(k[0], k[1], k[2], tuple(members[k])) for k in keys], warnings
