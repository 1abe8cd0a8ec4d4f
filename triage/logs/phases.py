"""vLLM's functions and the startup or serving phase each runs in: the table a traceback frame is read with.

The rows are data (`[[function]]` in rules/signatures/frames.toml), read from vLLM's source for every release band
(docs/phases.md lists them with the releases each name appears in). A function that runs in one phase only places
a failure in it; one that runs in several (`also`) narrows the phase down with the other frames of its traceback;
a dispatch frame (an executor's RPC, a worker's busy loop) sits above every phase and says nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..errors import RuleError, did_you_mean
from ..vocabulary import PHASE_WORDS, PHASES

_FUNCTION_KEYS = {"name", "phase", "also", "dispatch", "engines", "releases", "why"}
_ENGINES = ("v0", "v1", "both")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True, slots=True)
class FunctionPhase:
    """One row: the phase a vLLM function runs in (`phase`, then `also` where it runs in others too)."""

    name: str
    phases: tuple[str, ...]          # the phase it belongs to first; () for a dispatch frame
    engines: str                     # v0, v1 or both
    releases: str                    # "0.4.0 - current": the first and last release read that define it
    why: str

    @property
    def weak(self) -> bool:
        return len(self.phases) > 1


def parse_functions(where: str, entries: Any) -> list[FunctionPhase]:
    """The `[[function]]` rows of one file, checked: a known phase, an identifier, each key known."""
    if not isinstance(entries, list):
        raise RuleError(where, "function", "must be an array of tables", "write [[function]]")
    rows = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise RuleError(where, f"function[{index}]", "must be a table")
        name = entry.get("name")
        key = f"function {name}" if isinstance(name, str) else f"function[{index}]"
        for field in entry:
            if field not in _FUNCTION_KEYS:
                known = f"known keys: {', '.join(sorted(_FUNCTION_KEYS))}"
                raise RuleError(where, f"{key}.{field}", "unknown key", did_you_mean(field, _FUNCTION_KEYS) or known)
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise RuleError(where, f"{key}.name", "must be a Python function name", 'e.g. name = "profile_run"')
        dispatch = entry.get("dispatch", False)
        if dispatch is not True and dispatch is not False:
            raise RuleError(where, f"{key}.dispatch", "must be true or false")
        phase, also = entry.get("phase"), entry.get("also", [])
        if dispatch and (phase is not None or also):
            raise RuleError(where, f"{key}.phase", "a dispatch frame has no phase",
                            "remove phase and also, or dispatch")
        if not dispatch:
            for field, value in [("phase", phase)] + [(f"also[{i}]", p) for i, p in enumerate(
                    also if isinstance(also, list) else [also])]:
                if value not in PHASES:
                    raise RuleError(where, f"{key}.{field}", f"unknown phase {value!r}",
                                    did_you_mean(str(value), PHASES) or f"one of {', '.join(PHASES)}")
        engines = entry.get("engines", "both")
        if engines not in _ENGINES:
            raise RuleError(where, f"{key}.engines", f"unknown engine {engines!r}", f"one of {', '.join(_ENGINES)}")
        for field in ("releases", "why"):
            if not isinstance(entry.get(field), str) or not entry[field].strip():
                raise RuleError(where, f"{key}.{field}", "missing: say which releases define it and why it is in "
                                "its phase", 'e.g. releases = "0.4.3 - current"')
        phases = () if dispatch else (phase, *also)
        rows.append(FunctionPhase(name, phases, engines, entry["releases"], entry["why"]))
    return rows


def function_table(rows: Iterable[tuple[str, FunctionPhase]]) -> dict[str, FunctionPhase]:
    """Rows by name, each name once (`rows`: where each was read, and the row)."""
    table: dict[str, FunctionPhase] = {}
    seen: dict[str, str] = {}
    for where, row in rows:
        if row.name in table:
            raise RuleError(where, f"function {row.name}.name", f"listed twice (also in {seen[row.name]})",
                            "one row per function: put every phase it runs in into phase and also")
        table[row.name] = row
        seen[row.name] = where
    return table


def traceback_phase(frames: Sequence[tuple[Any, tuple[str, ...]]]) -> tuple[str, Any] | None:
    """The phase a traceback's frames (outermost first, each with the phases it can run in) place a failure in,
    and the innermost frame that runs in it. The innermost frame of one phase decides. Without one, the phases
    every frame can be in are what is left, and the outermost frame whose own phase is among them names it:
    capture_model calling _dummy_run is graph capture, profile_run calling it is memory profiling."""
    placed = [(frame, phases) for frame, phases in frames if phases]
    if not placed:
        return None
    single = [phases[0] for _, phases in placed if len(phases) == 1]
    if single:
        phase = single[-1]
    else:
        common = set(placed[0][1])
        for _, phases in placed[1:]:
            common &= set(phases)
        phase = next((phases[0] for _, phases in placed if phases[0] in common), placed[-1][1][0])
    innermost = [frame for frame, phases in placed if phase in phases][-1]
    return phase, innermost


def phases_markdown(table: Mapping[str, FunctionPhase]) -> str:
    """docs/phases.md's table: each function, the phase it places a failure in, the releases that define it."""
    lines = ["| function | phase | also runs in | engines | releases | why |", "|---|---|---|---|---|---|"]
    order = {phase: i for i, phase in enumerate(PHASES)}
    rows = sorted(table.values(), key=lambda r: (order.get(r.phases[0], len(PHASES)) if r.phases else len(PHASES) + 1,
                                                 r.name.lstrip("_"), r.name))
    for row in rows:
        phase = PHASE_WORDS[row.phases[0]] if row.phases else "none (dispatch: every phase)"
        also = ", ".join(PHASE_WORDS[p] for p in row.phases[1:])
        why = row.why.replace("|", "\\|")
        lines.append(f"| `{row.name}` | {phase} | {also} | {row.engines} | {row.releases} | {why} |")
    return "\n".join(lines) + "\n"
