"""The real-service tests skip without their service only outside CI; in CI (.ci/run sets
VTRIAGE_REQUIRE_SERVICES=1) a missing prometheus binary is a failure, never a silent skip."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def _run_without_prometheus(require: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VTRIAGE_REQUIRE_SERVICES"}
    env["PATH"] = str(Path(sys.executable).parent)          # python, but no prometheus on the PATH
    if require:
        env["VTRIAGE_REQUIRE_SERVICES"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/test_prometheus.py::test_fleet_view_json"],
                          check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_missing_prometheus_skips_outside_ci():
    result = _run_without_prometheus(require=False)
    assert result.returncode == 0, result.stdout
    assert "SKIPPED" in result.stdout and "prometheus is not installed" in result.stdout


def test_missing_prometheus_fails_in_ci():
    result = _run_without_prometheus(require=True)
    assert result.returncode != 0, result.stdout
    assert "prometheus is not installed" in result.stdout and "VTRIAGE_REQUIRE_SERVICES=1" in result.stdout
