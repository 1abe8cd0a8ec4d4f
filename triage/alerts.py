"""`vtriage alerts`: Prometheus alert rules that would catch the diagnosed failure next time.

The metric names depend on the vLLM version (docs/metrics.md): KV usage is
`vllm:gpu_cache_usage_perc` in V0 and in V1 before 0.9.2, `vllm:kv_cache_usage_perc` in V1 from 0.9.2
(the old name is hidden from 0.11 and removed in 0.12); `vllm:num_preemptions_total` exists in V0
from 0.4.3 and V1 from 0.8.0. With no version known the rules use both names. Restarts come from
kube-state-metrics. The output is YAML written here (PyYAML is not a runtime dependency): a
PrometheusRule for the Prometheus Operator, or a plain rules file for `rule_files:`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import regex

from .vocabulary import KV_SATURATED

KV_NEW, KV_OLD = "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"
PREEMPTIONS = "vllm:num_preemptions_total"
WAITING = "vllm:num_requests_waiting"
RESTARTS = "kube_pod_container_status_restarts_total"
BY = "namespace, pod, instance, model_name"
PREEMPTIONS_PER_MIN = 1.0
WAITING_MIN = 5
RESTARTS_IN_15M = 2

# Which alerts would have caught each verdict (the rest are there for the next failure).
CATCHES: Mapping[str, tuple[str, ...]] = {
    "preemption_slowdown": ("VLLMKVCacheNearlyFull", "VLLMPreempting", "VLLMRequestsQueueing"),
    "external_pressure": ("VLLMContainerRestarting", "VLLMKVCacheNearlyFull"),
    "weights_dont_fit": ("VLLMContainerRestarting",),
    "kv_cache_too_small": ("VLLMContainerRestarting",),
    "other_failure": ("VLLMContainerRestarting",),
}
RUNBOOK_OF = {"VLLMKVCacheNearlyFull": "preemption_slowdown", "VLLMPreempting": "preemption_slowdown",
              "VLLMRequestsQueueing": "preemption_slowdown"}


def _version(text: str | None) -> tuple[int, ...] | None:
    m = regex.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g or 0) for g in m.groups()) if m else None


@dataclass(frozen=True)
class MetricNames:
    """The series names one vLLM version exposes, and why they were chosen."""

    kv_usage: tuple[str, ...]          # one name, or both when the version does not decide
    preemptions: str | None            # None: this version exposes no preemption counter
    waiting: str
    why: str


def metric_names(version: str | None, engine: str | None) -> MetricNames:
    v = _version(version)
    where = f"vLLM {version}" + (f" ({engine.upper()} engine)" if engine else "") if v else \
        (f"a {engine.upper()} engine of unknown version" if engine else "an unknown vLLM version")
    if v is None:
        kv = (KV_OLD,) if engine == "v0" else (KV_NEW, KV_OLD)
    elif v >= (0, 12) or (engine == "v1" and v >= (0, 9, 2)):
        kv = (KV_NEW,)
    elif v < (0, 9, 2) or engine == "v0":
        kv = (KV_OLD,)
    else:
        kv = (KV_NEW, KV_OLD)            # 0.9.2 - 0.11: V1 has the new name, V0 only the old one
    if v is None:
        preempt: str | None = PREEMPTIONS
    elif engine == "v1" and v < (0, 8):
        preempt = None                   # V1 0.7.x has no preemption metric
    else:
        preempt = PREEMPTIONS if v >= (0, 4, 3) else None
    why = f"metric names for {where}: KV usage {' or '.join(kv)}; " + \
        (f"preemptions {preempt}" if preempt else "no preemption counter in this version")
    return MetricNames(kv, preempt, WAITING, why)


# Who the alert is about, in words: "pod vllm-0 in llm" on Kubernetes, else the scrape target.
WHO = ("{{ if $labels.pod }}pod {{ $labels.pod }}{{ if $labels.namespace }} in {{ $labels.namespace }}{{ end }}"
       "{{ else }}{{ $labels.instance }}{{ end }}")


def _selector(name: str, matchers: str) -> str:
    return f"{name}{{{matchers}}}" if matchers else name


RunbookFor = Callable[[str], tuple[str, str | None]]     # verdict -> (page, the team's URL or None)


@dataclass(frozen=True)
class AlertSpec:
    """What the command line chose: where the rules go and what the incident was."""

    namespace: str | None = None
    container: str = ".*vllm.*"                       # kube-state-metrics `container` label, a regex
    verdict: str | None = None                        # the diagnosed verdict, when a log was given
    runbook: RunbookFor | None = None
    header: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)   # extra PrometheusRule labels (e.g. release)


def alert_rules(names: MetricNames, spec: AlertSpec) -> list[dict[str, Any]]:
    """The alerting rules, most relevant to the diagnosed verdict first."""
    ns = f'namespace="{spec.namespace}"' if spec.namespace else ""
    kv = " or ".join(f"max by ({BY}) ({_selector(n, ns)})" for n in names.kv_usage)
    rules = [_rule("VLLMKVCacheNearlyFull", f"({kv}) > {KV_SATURATED}", "10m", "warning",
                   f"vLLM KV cache above {KV_SATURATED:.0%} on {WHO}",
                   "The KV cache of {{ $labels.model_name }} has stayed above "
                   f"{KV_SATURATED:.0%} for 10 minutes ({{{{ $value | humanizePercentage }}}}): new requests wait "
                   "and running ones get preempted.", spec)]
    if names.preemptions:
        rate = f"sum by ({BY}) (rate({_selector(names.preemptions, ns)}[5m])) * 60"
        rules.append(_rule("VLLMPreempting", f"{rate} > {PREEMPTIONS_PER_MIN:g}", "10m", "warning",
                           f"vLLM is preempting requests on {WHO}",
                           "{{ $value | humanize }} preemptions per minute for 10 minutes: the KV cache is full and "
                           "requests are recomputed, so latency climbs.", spec))
    waiting = _selector(names.waiting, ns)
    rules.append(_rule("VLLMRequestsQueueing",
                       f"(sum by ({BY}) (avg_over_time({waiting}[5m])) > {WAITING_MIN}) and "
                       f"(sum by ({BY}) (deriv({waiting}[15m])) > 0)", "10m", "warning",
                       f"vLLM request queue growing on {WHO}",
                       f"More than {WAITING_MIN} requests have been waiting for 10 minutes and the queue is still "
                       "growing ({{ $value | humanize }} waiting).", spec))
    restart = ",".join(m for m in (ns, f'container=~"{spec.container}"') if m)
    rules.append(_rule("VLLMContainerRestarting",
                       f"increase({RESTARTS}{{{restart}}}[15m]) >= {RESTARTS_IN_15M}", None, "critical",
                       f"vLLM container {{{{ $labels.container }}}} of {WHO} is restarting",
                       "{{ $value | humanize }} restarts in 15 minutes. Diagnose the failed start: kubectl logs "
                       "-n {{ $labels.namespace }} {{ $labels.pod }} -c {{ $labels.container }} --previous "
                       "--timestamps | vtriage -", spec))
    first = CATCHES.get(spec.verdict or "", ())
    return sorted(rules, key=lambda r: r["alert"] not in first)


def _rule(name: str, expr: str, for_: str | None, severity: str, summary: str, description: str,
          spec: AlertSpec) -> dict[str, Any]:
    """One alerting rule. Its `runbook_url` (the annotation Alertmanager and Grafana link) is the page of
    the verdict it watches for; a restart points at the diagnosed crash's page or, with no diagnosis,
    at the inconclusive page, whose Diagnosis says how to get the failed start's log."""
    crashed = spec.verdict if name in CATCHES.get(spec.verdict or "", ()) else None
    verdict = RUNBOOK_OF.get(name) or crashed or "inconclusive"
    page, url = spec.runbook(verdict) if spec.runbook else (f"docs/runbooks/{verdict}.md", None)
    annotations = {"summary": summary, "description": f"{description} Runbook: vtriage explain {verdict}.",
                   "runbook_url": url or page}
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = annotations
    return rule


def rules_file(groups_rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"groups": [{"name": "vllm-vtriage", "rules": groups_rules}]}


def prometheus_rule(groups_rules: list[dict[str, Any]], spec: AlertSpec) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "vllm-vtriage"}
    if spec.namespace:
        metadata["namespace"] = spec.namespace
    metadata["labels"] = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/managed-by": "vtriage",
                          **spec.labels}
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": metadata,
            "spec": rules_file(groups_rules)}


# --- a small YAML writer: mappings, lists, strings, numbers, booleans -------------------------------

_PLAIN = regex.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$")
_NUMBER_LIKE = regex.compile(r"^[-+]?(?:[0-9_.]+(?:e[-+]?[0-9]+)?|0x[0-9a-f]+|0o[0-7]+|\.inf|\.nan)$", regex.I)
_RESERVED = frozenset({"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"})


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED and not _NUMBER_LIKE.match(text):
        return text
    return json.dumps(text)            # a JSON string is a valid YAML double-quoted scalar


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML of plain data; keys keep their order."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, (Mapping, list)) and item:
                lines.append(f"{pad}{_scalar(key)}:")
                lines.append(to_yaml(item, indent + 2).rstrip("\n"))
            elif isinstance(item, (Mapping, list)):
                lines.append(f"{pad}{_scalar(key)}: {'{}' if isinstance(item, Mapping) else '[]'}")
            else:
                lines.append(f"{pad}{_scalar(key)}: {_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping) and item:
                body = to_yaml(item, indent + 2).rstrip("\n").split("\n")
                lines.append(f"{pad}- {body[0].lstrip()}")
                lines.extend(body[1:])
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    else:
        lines.append(pad + _scalar(value))
    return "\n".join(lines) + "\n"


def render(kind: str, names: MetricNames, spec: AlertSpec) -> str:
    rules = alert_rules(names, spec)
    doc = prometheus_rule(rules, spec) if kind == "prometheusrule" else rules_file(rules)
    header = [f"# {line}" for line in (*spec.header, names.why)]
    return "\n".join(header) + "\n" + to_yaml(doc)


def header_lines(inputs: Sequence[str], verdict: str | None, version_source: str,
                 runbook_template: str | None = None) -> tuple[str, ...]:
    caught = CATCHES.get(verdict or "")
    lines = ["Generated by vtriage alerts" + (f" from {', '.join(inputs)}" if inputs else "") + "."]
    if verdict:
        lines.append(f"Diagnosed: {verdict}; " + (f"would have caught it: {', '.join(caught)}." if caught
                                                    else "no alert below matches it; they watch for the next failure."))
    lines.append(version_source)
    lines.append(f"runbook_url: {runbook_template} (runbook_url in .vtriage.toml)" if runbook_template else
                 "runbook_url: the docs path of each verdict's runbook; set runbook_url = "
                 "\"https://.../{verdict}\" in .vtriage.toml to link your own pages")
    return tuple(lines)
