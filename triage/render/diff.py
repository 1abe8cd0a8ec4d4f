"""`vtriage diff` output: the comparison side by side (text) or as JSON, from a Comparison only."""
from __future__ import annotations

import json
from typing import Any

from ..report.diff import Comparison, Row
from .json import report_dict

_MARK = {"better": "better", "worse": "WORSE", "changed": "changed", "same": "", "unknown": "",
         "only before": "only BEFORE shows it", "only after": "only AFTER shows it"}


def _show(value: Any, unit: str | None) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        text = f"{value:.0%}" if unit == "ratio" and value <= 1.0 else f"{value:.2f}".rstrip("0").rstrip(".")
    else:
        text = str(value)
    if unit == "x":
        return f"{text}x"
    return f"{text} {unit}" if unit and unit != "ratio" and not isinstance(value, str) else text


def _row(row: Row) -> str:
    delta = ""
    if isinstance(row.before, (int, float)) and isinstance(row.after, (int, float)) and row.before \
            and not isinstance(row.before, bool) and row.change in ("better", "worse"):
        delta = f" ({(row.after - row.before) / abs(row.before):+.0%})"
    mark = _MARK[row.change] + delta if row.change in ("better", "worse") else _MARK[row.change]
    return f"  {row.fact:<26} {_show(row.before, row.unit):<22} {_show(row.after, row.unit):<22} {mark}".rstrip()


def _inputs(report) -> str:
    return ", ".join(i.path for i in report.inputs) or "(nothing)"


def render_diff_text(c: Comparison, **_: Any) -> str:
    b, a = c.before.diagnosis, c.after.diagnosis
    out = [c.headline, *(f"warning: {w}" for w in c.warnings), "", f"  {'':<26} {'BEFORE':<22} AFTER",
           f"  {'verdict':<26} {b.verdict:<22} {a.verdict}",
           f"  {'confidence':<26} {b.confidence:<22} {a.confidence}",
           f"  {'rule':<26} {(b.rule_path or ('-',))[-1]:<22} {(a.rule_path or ('-',))[-1]}"]
    for title, rows in c.sections:
        out.extend(["", title])
        out.extend(_row(r) for r in rows)
    out.append("")
    if c.settings_changed:
        out.append("Settings changed")
        out.extend(f"  {r.fact:<26} {_show(r.before, r.unit)} -> {_show(r.after, r.unit)}" for r in c.settings_changed)
    else:
        out.append("Settings changed: none the logs show")
    if c.settings_same:
        out.append(f"Settings the same: {', '.join(c.settings_same)}")
    if c.after.command and c.outcome not in ("fixed", "still healthy"):
        partial = c.after.launch is not None and not c.after.launch.complete
        out.extend(["", f"Next fix for AFTER: {'add to your command: ' if partial else ''}{c.after.command}"])
    out.extend(["", f"BEFORE: {_inputs(c.before)}", f"AFTER:  {_inputs(c.after)}"])
    if c.after.runbook and c.outcome not in ("fixed", "still healthy"):
        out.append(f"Runbook: {c.after.runbook}  (vtriage explain {a.verdict})")
    return "\n".join(out) + "\n"


def _rows(rows) -> list[dict[str, Any]]:
    return [{"fact": r.fact, "unit": r.unit, "before": r.before, "after": r.after, "change": r.change} for r in rows]


def diff_dict(c: Comparison) -> dict[str, Any]:
    return {"outcome": c.outcome, "headline": c.headline, "warnings": list(c.warnings),
            "sections": {title: _rows(rows) for title, rows in c.sections},
            "settings_changed": _rows(c.settings_changed), "settings_same": list(c.settings_same),
            "before": report_dict(c.before), "after": report_dict(c.after)}


def render_diff_json(c: Comparison, **_: Any) -> str:
    return json.dumps(diff_dict(c), indent=2, ensure_ascii=False, default=str) + "\n"
