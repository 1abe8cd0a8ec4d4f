"""Packaging a maintainer notices: the package builds without warnings and ships its data."""
from __future__ import annotations

import re
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT

SETUPTOOLS_WARNINGS = re.compile(r"BuildBackendWarning|SetuptoolsDeprecationWarning|Package would be ignored|"
                                 r"absent from the `packages`|is deprecated", re.I)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
                            check=False, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result, next(out.glob("vtriage-*.whl"))


def test_the_package_builds_without_setuptools_warnings(wheel):
    result, _ = wheel
    assert not SETUPTOOLS_WARNINGS.search(result.stdout + result.stderr), result.stderr


def test_the_wheel_ships_every_fixture_log_runbook_rule_and_template(wheel):
    _, path = wheel
    names = set(zipfile.ZipFile(path).namelist())
    for folder, packaged in (("fixtures/logs", "triage/fixtures_data/logs"), ("docs/runbooks", "triage/runbooks_data"),
                             ("rules", "triage/rules_data"), ("triage/render/templates", "triage/render/templates")):
        for source in (ROOT / folder).rglob("*"):
            if source.is_file() and source.suffix != ".py" and "__pycache__" not in source.parts:
                assert f"{packaged}/{source.relative_to(ROOT / folder).as_posix()}" in names, source


def test_the_wheel_is_pure_python(wheel):
    """vtriage is Python only: the wheel carries no compiled module, so it installs wherever Python 3.11 runs."""
    _, path = wheel
    names = zipfile.ZipFile(path).namelist()
    assert not [name for name in names if name.endswith((".so", ".pyd", ".c"))], names
    assert path.name.endswith("-py3-none-any.whl"), path.name

