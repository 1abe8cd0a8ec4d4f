"""CI hygiene a maintainer notices: the package builds without warnings and ships its data, and
`bash .ci/run` prints pytest's "N passed" line and waits for apt's lock instead of failing on it."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT

CI = (ROOT / ".ci" / "run").read_text()
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


def _commands(pattern: str) -> list[list[str]]:
    lines = CI.replace("\\\n", " ").splitlines()
    return [shlex.split(line.split(" #")[0]) for line in lines if re.search(pattern, line)
            and not line.lstrip().startswith("#")]


def test_ci_runs_pytest_once_so_its_summary_line_shows():
    runs = _commands(r"-m pytest")
    assert len(runs) == 1
    addopts = re.search(r'addopts = "([^"]*)"', (ROOT / "pyproject.toml").read_text()).group(1).split()
    quiet = sum(w.count("q") for w in runs[0] + addopts if re.fullmatch(r"-q+", w) or w == "--quiet")
    assert quiet <= 1, "-q twice hides pytest's 'N passed' line"


def test_ci_silences_only_setuptools_editable_notice():
    install = next(line for line in CI.splitlines() if "pip install" in line and "-e" in line)
    filters = re.findall(r'PYTHONWARNINGS="([^"]*)"', install)
    assert filters == ["ignore:Editable installation"], "a broader filter would hide real packaging warnings"


def test_ci_apt_waits_for_the_dpkg_lock_and_says_what_it_installs():
    assert "apt-get -o DPkg::Lock::Timeout=" in CI
    assert re.search(r'echo "[^"]*installing \$\{missing\[\*\]\}', CI)
    assert not re.search(r"^\s*(\$SUDO )?apt-get (update|install)", CI, re.M), ("every apt-get call goes through "
                                                                                "APT (the lock timeout)")


def test_ci_runs_ruff_and_mypy_on_the_package_before_the_suite():
    lines = [line for line in CI.splitlines() if not line.lstrip().startswith("#")]
    at = {name: next(i for i, line in enumerate(lines) if re.search(pattern, line))
          for name, pattern in (("ruff", r"\bruff check\b.* triage\b"), ("mypy", r"\bmypy\b.* triage\b"),
                                ("pytest", r"-m pytest"))}
    assert at["ruff"] < at["pytest"] and at["mypy"] < at["pytest"], at
    assert not re.search(r"\b(ruff|mypy)\b[^\n]*\|\| *true", CI), "a static check that cannot fail CI checks nothing"
