"""`vtriage selftest`: diagnose the bundled fixture logs and check each against its manifest.

The fixtures (fixtures/logs, one or more per verdict per vLLM generation, labelled in
fixtures/manifest.toml) ship inside the package as triage.fixtures_data, so an installed vtriage can
check itself; `--fixtures DIR` runs another set laid out the same way (e.g. logs of a new vLLM
release). A case passes when the verdict, the failed phase, the number of startup attempts and
every figure the manifest lists come out as labelled (figures within 1 %).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import tomlread
from .bundled import bundled_dir
from .errors import InputError
from .pipeline import Incident, Toolkit, build_report
from .sources.files import open_log
from .vocabulary import VERDICTS

_REQUIRED = ("file", "verdict")


@dataclass(frozen=True)
class CaseResult:
    file: str
    generation: str              # the fixture's folder: v0-old, v0-late, v1, ...
    expected: str
    got: str
    problems: tuple[str, ...]    # empty when it passed

    @property
    def passed(self) -> bool:
        return not self.problems


def bundled_fixtures() -> Path:
    return bundled_dir("triage.fixtures_data")


def load_manifest(directory: Path) -> list[Mapping[str, Any]]:
    path = directory / "manifest.toml"
    try:
        raw = tomlread.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(str(path), "no manifest", "a fixtures directory holds manifest.toml and logs/") from None
    except tomlread.TOMLDecodeError as exc:
        raise InputError(str(path), f"not valid TOML: {exc}", "check quotes and brackets") from None
    except RecursionError:
        raise InputError(str(path), "nested too deeply to read", "a manifest is [[fixture]] tables") from None
    entries = raw.get("fixture")
    if not isinstance(entries, list) or not entries:
        raise InputError(str(path), "no [[fixture]] entries", 'each has file = "GEN/NAME.log" and verdict = "..."')
    for i, entry in enumerate(entries):
        for key in _REQUIRED:
            if not isinstance(entry.get(key), str):
                raise InputError(str(path), f"fixture[{i}].{key}: missing",
                                 'e.g. file = "v1/my.log", verdict = "healthy"')
        if entry["verdict"] not in VERDICTS:
            raise InputError(str(path), f"fixture[{i}].verdict: unknown verdict {entry['verdict']!r}",
                             f"one of {', '.join(VERDICTS)}")
        if not (directory / "logs" / entry["file"]).is_file():
            raise InputError(str(path), f"fixture[{i}].file: {entry['file']} is not under logs/")
    return entries


def figure_matches(got: Any, want: Any) -> bool:
    """A fixture's expected figure: numbers within 1.1 % (or 0.011: logs print rounded figures), the rest exactly."""
    if isinstance(want, float) or isinstance(got, float):
        try:
            return abs(float(got) - float(want)) <= max(0.011 * abs(float(want)), 0.011)
        except (TypeError, ValueError):
            return False
    return got == want


def run_case(kit: Toolkit, directory: Path, entry: Mapping[str, Any]) -> CaseResult:
    report = build_report(Incident(logs=(open_log(str(directory / "logs" / entry["file"])),)), kit)
    d = report.diagnosis
    problems = []
    if d.verdict != entry["verdict"]:
        problems.append(f"verdict {d.verdict} (rule {d.rule_path[-1] if d.rule_path else '-'}), "
                        f"labelled {entry['verdict']}")
    phase = d.facts["failed_phase"].value if "failed_phase" in d.facts else None
    if entry.get("failed_phase") and phase != entry["failed_phase"]:
        problems.append(f"failed_phase {phase}, labelled {entry['failed_phase']}")
    if entry.get("attempts") and len(report.attempts) != entry["attempts"]:
        problems.append(f"{len(report.attempts)} startup attempts, labelled {entry['attempts']}")
    for name, want in entry.get("facts", {}).items():
        got = d.facts[name].value if name in d.facts else None
        if not figure_matches(got, want):
            problems.append(f"{name} {got if got is not None else 'unknown'}, labelled {want}")
    return CaseResult(entry["file"], entry["file"].split("/")[0], entry["verdict"], d.verdict, tuple(problems))


def run_selftest(kit: Toolkit, directory: Path) -> list[CaseResult]:
    return [run_case(kit, directory, entry) for entry in load_manifest(directory)]


def table(results: Sequence[CaseResult]) -> tuple[list[str], list[str], dict[tuple[str, str], tuple[int, int]]]:
    """Generations (rows), verdicts (columns), and (passed, total) per cell."""
    generations = list(dict.fromkeys(r.generation for r in results))
    cells: dict[tuple[str, str], tuple[int, int]] = {}
    for r in results:
        done, total = cells.get((r.generation, r.expected), (0, 0))
        cells[(r.generation, r.expected)] = (done + r.passed, total + 1)
    return generations, list(VERDICTS), cells
