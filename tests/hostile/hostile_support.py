"""Running vtriage as a user does, with its wall time and the peak memory of its whole process tree."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A fresh interpreter runs the command and reports what its children used: RUSAGE_CHILDREN there
# counts this command's process tree and nothing else the test run started.
_MEASURE = """
import json, resource, subprocess, sys, time
start = time.monotonic()
try:
    done = subprocess.run(sys.argv[2:], capture_output=True, timeout=float(sys.argv[1]))
    rc, out, err = done.returncode, done.stdout, done.stderr
except subprocess.TimeoutExpired as exc:
    rc, out, err = -9, exc.stdout or b"", exc.stderr or b""
seconds = time.monotonic() - start
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
sys.stdout.buffer.write(json.dumps({"rc": rc, "seconds": seconds, "peak_mib": peak,
                                    "out": out.decode("utf-8", "replace"),
                                    "err": err.decode("utf-8", "replace")}).encode())
"""


@dataclass
class Measured:
    returncode: int          # -9 when it ran past the limit and was killed
    seconds: float
    peak_mib: float          # the largest resident set of any process in its tree
    stdout: str
    stderr: str

    def report(self) -> dict:
        return json.loads(self.stdout)


def run_measured(*args: str, limit_s: float = 120, cwd: Path | None = None, env: dict | None = None) -> Measured:
    """`vtriage ARGS...` in a fresh process; killed after `limit_s` (returncode -9)."""
    full_env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(limit_s), sys.executable, "-m", "triage", *args],
                          check=False, capture_output=True, cwd=cwd or ROOT, env=full_env, timeout=limit_s + 60)
    got = json.loads(done.stdout)
    return Measured(got["rc"], got["seconds"], got["peak_mib"], got["out"], got["err"])
