#!/usr/bin/env python3
"""Count the instructions a report costs, for two versions of the code side by side (valgrind's callgrind).

Wall and CPU time on this shared machine move by 1.6x within an hour, so two versions of the code compare
only in interleaved pairs, and a change of a few percent drowns. An instruction count does not move with
the machine: this runs `python -m triage LOG --format json` under callgrind for each tree given (a git
worktree of another commit, say) and prints the instructions, the difference, and the count per line of
the log. Slow (about 50x): give it a cut of a bench log (`head -n 100000`), not the whole of one.

usage: python bench/instructions.py LOG [--tree DIR ...]      (default: this checkout)
       e.g. git worktree add /tmp/before HEAD~3 && python bench/instructions.py /tmp/v1.log --tree /tmp/before
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def instructions(tree: Path, log: str) -> int:
    """Instructions (callgrind's Ir) of one JSON report of `log` with the code in `tree`; the hash seed fixed, so
    that a dict's layout is the same in every run."""
    # Each tree's bytecode compiled first: a module compiled afresh in every run would count as the code's cost.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "triage")], check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/out",
                               sys.executable, "-m", "triage", log, "--format", "json"],
                              check=False, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        sys.exit(f"bench/instructions.py: callgrind gave no count for {tree}: {done.stderr.strip()[-300:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--tree", action="append", default=[], help="a checkout of the code to count (repeatable)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench/instructions.py: valgrind is not installed (apt-get install valgrind)")
    try:
        with open(args.log, "rb") as handle:
            lines = sum(1 for _ in handle)
    except OSError as err:
        sys.exit(f"bench/instructions.py: {args.log}: {err.strerror}; give a log file (a cut of a bench log)")
    trees = [Path(t).resolve() for t in args.tree] + [ROOT]
    counts = [(tree, instructions(tree, args.log)) for tree in trees]
    base = counts[0][1]
    for tree, count in counts:
        change = f"{(count - base) / base:+.1%}" if tree != trees[0] else ""
        print(f"{count / 1e9:8.3f} G  {count / max(lines, 1):9,.0f} a line  {change:>7}  {tree}")


if __name__ == "__main__":
    main()
