"""`vtriage whatif` and `vtriage check` output: a table of the incident next to the prediction, and JSON."""
from __future__ import annotations

import json
import textwrap
from typing import Any, Callable

from ..capacity.model import Figure, honest, shown
from ..capacity.predict import Prediction
from ..capacity.scenario import Scenario
from .text import _Style

SCENARIO_SCHEMA_VERSION = 1
_VERDICT_TEXT = {"fits": "FITS", "weights_dont_fit": "WEIGHTS DON'T FIT", "kv_cache_too_small": "KV CACHE TOO SMALL",
                 "preemption_slowdown": "PREEMPTION RISK", "refused": "vLLM REFUSES THESE FLAGS",
                 "unknown": "CANNOT PREDICT"}


def _num(x: float | None, fmt: str = "{:,.2f}", unit: str = "") -> str:
    return "?" if x is None else fmt.format(x) + unit


def _rows(scn: Scenario) -> list[tuple[str, Callable[[Prediction], str]]]:
    mean = scn.lengths.mean if scn.lengths else None
    p90 = scn.lengths.p90 if scn.lengths else None
    rows: list[tuple[str, Callable[[Prediction], str]]] = [
        ("--gpu-memory-utilization", lambda p: _num(p.settings.gpu_memory_utilization)),
        ("--max-model-len", lambda p: _num(p.settings.max_model_len, "{:,}")),
        ("--max-num-seqs", lambda p: _num(p.settings.max_num_seqs, "{:,}") if p.settings.max_num_seqs else
         _num(scn.max_num_seqs.value, "{:,} (default)") if scn.max_num_seqs else "?"),
        ("--tensor-parallel-size", lambda p: f"{p.settings.tensor_parallel_size}"
         + (f" (x{p.settings.pipeline_parallel_size} PP)" if p.settings.pipeline_parallel_size > 1 else "")),
        ("--kv-cache-dtype", lambda p: p.settings.kv_cache_dtype),
        ("--quantization", lambda p: p.settings.quantization or "none"),
        ("weights per GPU", lambda p: _num(p.weights_gib, unit=" GiB")),
        ("budget (utilization x total)", lambda p: _num(p.budget_gib, unit=" GiB")),
        ("KV cache memory", lambda p: _num(p.kv_gib, unit=" GiB")),
        ("KV cache tokens", lambda p: _num(p.kv_tokens, "{:,}")),
        ("KV bytes per token", lambda p: "?" if p.bytes_per_token is None
         else shown(p.bytes_per_token, _margin(scn, p))),
        ("max concurrency at max_model_len", lambda p: _num(p.max_concurrency, unit="x")),
    ]
    if mean:
        rows.append((f"requests held at ~{mean:,.0f} tokens (mean)", lambda p: _num(scn.held(p), "{:,.1f}")))
    if p90:
        rows.append((f"requests held at ~{p90:,.0f} tokens (p90)", lambda p: _num(scn.held(p, "p90"), "{:,.1f}")))
    rows += [
        ("starts", lambda p: "?" if p.starts is None else "yes" if p.starts else f"no: {p.problem}"),
        ("KV tokens beyond one request", lambda p: ("none" if p.kv_tokens < p.request_tokens else
                                                    _num(p.kv_tokens - p.request_tokens, "{:,.0f}"))
         if p.kv_tokens is not None and p.request_tokens else "?"),
        ("left outside the budget", lambda p: _num(p.outside_budget_gib, unit=" GiB")),
        ("verdict", scn.verdict_of),
    ]
    return rows


def _margin(scn: Scenario, p: Prediction) -> float:
    """The uncertainty of a prediction's KV bytes per token: the calibrated figure's, scaled with it."""
    per_token = scn.geometry.bytes_per_token
    if per_token is None or not per_token.uncertainty or not p.bytes_per_token:
        return 0.0
    return per_token.uncertainty * p.bytes_per_token / per_token.value


def render_scenario_text(scn: Scenario, title: str, color: bool = False) -> str:
    s = _Style(color)
    out = [s(f"{title}  {scn.subject}", "bold"), s("per GPU; every figure below is one GPU's", "dim"), ""]
    columns = [("incident", scn.baseline)] if scn.baseline is not None else []
    columns.append(("predicted", scn.predicted))
    rows = _rows(scn)
    width = max(len(label) for label, _ in rows) + 2
    cells = [[fn(p) for _, p in columns] for _, fn in rows]
    col = max([len(c) for row in cells for c in row] + [len(name) for name, _ in columns]) + 2
    out.append("  " + " " * width + "".join(s(name.ljust(col), "bold") for name, _ in columns).rstrip())
    for (label, _), row in zip(rows, cells):
        out.append(("  " + label.ljust(width) + "".join(c.ljust(col) for c in row)).rstrip())
    out.append("")
    colour = "green" if scn.verdict == "fits" else "yellow" if scn.verdict == "unknown" else "red"
    out.append(s(_VERDICT_TEXT[scn.verdict], "bold", colour) + "  " + scn.reason)
    if scn.lengths is not None:
        lengths = scn.lengths
        seen = f"{lengths.requests:,} requests {lengths.window}: " if lengths.requests else ""
        out.append(s(f"Request sizes ({scn.lengths_source}): {seen}prompt ~{lengths.prompt_mean:,.0f} + output "
                     f"~{lengths.generation_mean:,.0f} tokens", "dim"))
    for title_, items in (("Risks", scn.predicted.risks), ("Would fit", scn.suggestions),
                          ("Assumptions", scn.assumptions()), ("Could not predict", scn.predicted.unknown)):
        if items:
            out.append("")
            out.append(s(title_, "bold"))
            for item in items:
                wrapped = textwrap.wrap(item, 96)
                out.append("  - " + wrapped[0])
                out.extend("    " + w for w in wrapped[1:])
    return "\n".join(out) + "\n"


def _figure(f: Figure | None) -> dict[str, Any] | None:
    if f is None:
        return None
    value = honest(f.value, f.uncertainty) if f.uncertainty else f.value
    value = round(value, 4) if isinstance(value, float) else value
    out = {"value": value, "source": f.source, "note": f.note or None}
    if f.uncertainty:
        out["uncertainty"] = float(f"{f.uncertainty:.2g}")
    return out


def scenario_dict(scn: Scenario, kind: str) -> dict[str, Any]:
    g = scn.geometry
    lengths = None
    if scn.lengths is not None:
        lengths = {"source": scn.lengths_source, "requests": scn.lengths.requests, "window": scn.lengths.window,
                   "prompt_mean": round(scn.lengths.prompt_mean, 1),
                   "generation_mean": round(scn.lengths.generation_mean, 1),
                   "prompt_p90": scn.lengths.prompt_p90, "generation_p90": scn.lengths.generation_p90,
                   "requests_held_mean": _round(scn.held(scn.predicted)),
                   "requests_held_p90": _round(scn.held(scn.predicted, "p90"))}
    return {
        "schema_version": SCENARIO_SCHEMA_VERSION, "kind": kind, "subject": scn.subject, "era": g.era,
        "engine": g.engine, "verdict": scn.verdict, "reason": scn.reason, "changes": dict(scn.changes),
        "incident": scn.baseline.as_dict() if scn.baseline is not None else None,
        "predicted": scn.predicted.as_dict(), "observed_lengths": lengths,
        "max_num_seqs": _figure(scn.max_num_seqs),
        "geometry": {name.lower().replace(" + ", "_and_").replace(" ", "_").replace("-", "_"): _figure(fig)
                     for name, fig in g.figures().items()},
        "suggestions": list(scn.suggestions), "assumptions": scn.assumptions(),
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def render_scenario_json(scn: Scenario, kind: str) -> str:
    return json.dumps(scenario_dict(scn, kind), indent=2, ensure_ascii=False, default=str) + "\n"
