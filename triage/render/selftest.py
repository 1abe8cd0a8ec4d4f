"""`vtriage selftest` output: the generation x verdict table, then what failed."""
from __future__ import annotations

import json
from typing import Any, Sequence

from .. import __version__
from ..selftest import CaseResult, table


def render_selftest_text(results: Sequence[CaseResult], verbose: bool = False, source: str = "", **_: Any) -> str:
    generations, verdicts, cells = table(results)
    first = max(len(v) for v in verdicts) + 2
    width = max(10, *(len(g) for g in generations)) + 2
    out = [f"vtriage {__version__} selftest: {len(results)} labelled logs from {source}", ""]
    out.append(f"{'verdict':<{first}}" + "".join(f"{g:<{width}}" for g in generations).rstrip())
    for verdict in verdicts:
        row = []
        for gen in generations:
            done, total = cells.get((gen, verdict), (0, 0))
            cell = "-" if not total else (f"pass {done}/{total}" if done == total else f"FAIL {total - done}/{total}")
            row.append(f"{cell:<{width}}")
        out.append(f"{verdict:<{first}}" + "".join(row).rstrip())
    failed = [r for r in results if not r.passed]
    out.append("")
    for r in results if verbose else failed:
        out.append(f"{'ok  ' if r.passed else 'FAIL'} {r.file}: {r.got}"
                   + (f" ({'; '.join(r.problems)})" if r.problems else ""))
    if verbose or failed:
        out.append("")
    out.append(f"{len(results) - len(failed)} of {len(results)} passed." if failed else f"All {len(results)} passed.")
    return "\n".join(out) + "\n"


def render_selftest_json(results: Sequence[CaseResult], source: str = "", **_: Any) -> str:
    generations, verdicts, cells = table(results)
    data = {"tool": {"name": "vtriage", "version": __version__}, "fixtures": source,
            "passed": sum(r.passed for r in results), "total": len(results),
            "table": {gen: {v: {"passed": cells[(gen, v)][0], "total": cells[(gen, v)][1]}
                            for v in verdicts if (gen, v) in cells} for gen in generations},
            "cases": [{"file": r.file, "generation": r.generation, "expected": r.expected, "got": r.got,
                       "passed": r.passed, "problems": list(r.problems)} for r in results]}
    return json.dumps(data, indent=2) + "\n"
