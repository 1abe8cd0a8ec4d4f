"""`vtriage selftest`: the bundled fixtures, a table of generation x verdict, exit 0 only when all
pass; and a built wheel carries the fixtures and the runbooks, so an installed vtriage can use them."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

from triage.vocabulary import VERDICTS

from conftest import FIXTURES, ROOT, run_cli

MANIFEST = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]


def test_selftest_passes_and_prints_the_table():
    result = run_cli("selftest")
    out = result.stdout.decode()
    assert result.returncode == 0, out
    generations = ("v0-old", "v0-late", "v1", "cpu")
    assert re.search(r"^verdict\s+" + r"\s+".join(generations) + "$", out, re.M)
    for verdict in VERDICTS:
        counts = [sum(1 for e in MANIFEST if e["verdict"] == verdict and e["file"].startswith(f"{g}/"))
                  for g in generations]
        cells = r"\s+".join(f"pass {n}/{n}" if n else "-" for n in counts)
        assert re.search(rf"^{verdict}\s+{cells}$", out, re.M), verdict
    assert out.rstrip().endswith(f"All {len(MANIFEST)} passed.")


def _fixture_set(tmp_path, entries):
    """A fixtures folder laid out like the bundled one, with its own labels."""
    (tmp_path / "logs" / "v1").mkdir(parents=True)
    lines = []
    for name, verdict, facts in entries:
        shutil.copy(FIXTURES / "logs" / "v1" / name, tmp_path / "logs" / "v1" / name)
        lines += ["[[fixture]]", f'file = "v1/{name}"', f'verdict = "{verdict}"']
        if facts:
            lines += ["[fixture.facts]", *(f"{k} = {v!r}" for k, v in facts.items())]
    (tmp_path / "manifest.toml").write_text("\n".join(lines).replace("'", '"') + "\n")
    return str(tmp_path)


def test_a_wrong_label_fails_its_cell_and_says_why(tmp_path):
    folder = _fixture_set(tmp_path, [
        ("kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log", "kv_cache_too_small", {"max_model_len": 131072}),
        ("healthy-qwen3-8b-h200-033-tty-colour-logo.log", "external_pressure", {}),
        ("preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log", "preemption_slowdown", {"preemptions": 9999}),
    ])
    result = run_cli("selftest", "--fixtures", folder)
    out = result.stdout.decode()
    assert result.returncode == 1
    assert re.search(r"^external_pressure\s+FAIL 1/1$", out, re.M)
    assert re.search(r"^kv_cache_too_small\s+pass 1/1$", out, re.M)
    assert "FAIL v1/healthy-qwen3-8b-h200-033-tty-colour-logo.log: healthy (verdict healthy (rule healthy-serving), " \
           "labelled external_pressure)" in out
    assert "preemptions 330, labelled 9999" in out
    assert out.rstrip().endswith("1 of 3 passed.")
    data = json.loads(run_cli("selftest", "--fixtures", folder, "--format", "json").stdout)
    assert (data["passed"], data["total"]) == (1, 3)
    assert data["table"]["v1"]["external_pressure"] == {"passed": 0, "total": 1}


@pytest.mark.parametrize("manifest,needle", [
    (None, "manifest.toml: no manifest"),
    ('[[fixture]]\nfile = "v1/x.log"\nverdict = "fine"\n', "fixture[0].verdict: unknown verdict 'fine'"),
    ('[[fixture]]\nverdict = "healthy"\n', "fixture[0].file: missing"),
    ('[[fixture]]\nfile = "v1/absent.log"\nverdict = "healthy"\n', "v1/absent.log is not under logs/"),
])
def test_a_broken_fixture_set_is_one_line_exit_2(tmp_path, manifest, needle):
    if manifest is not None:
        (tmp_path / "manifest.toml").write_text(manifest)
    result = run_cli("selftest", "--fixtures", str(tmp_path))
    err = result.stderr.decode()
    assert result.returncode == 2 and needle in err and err.count("\n") == 1


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel as a user would install it, importable from outside the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(tmp / "dist"), str(ROOT)],
                           check=False, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp / "dist").glob("vtriage-*.whl")
    target = tmp / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                           str(target), str(wheel)],
                          check=False, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return wheel, target


def _from_wheel(target, *args):
    env = {**os.environ, "PYTHONPATH": str(target), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "triage", *args], check=False, capture_output=True, text=True, env=env,
                          cwd=target.parent, timeout=300)


def test_the_wheel_ships_the_fixtures_and_runbooks_once(installed):
    wheel, target = installed
    names = zipfile.ZipFile(wheel).namelist()
    logs = [n for n in names if n.startswith("triage/fixtures_data/logs/")]
    assert len(logs) == len(MANIFEST) and "triage/fixtures_data/manifest.toml" in names
    assert {f"triage/runbooks_data/{v}.md" for v in VERDICTS} <= set(names)
    where = subprocess.run([sys.executable, "-c", "import triage; print(triage.__file__)"], check=False,
                           capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(target)}, cwd=target.parent)
    assert where.stdout.startswith(str(target))           # the installed copy, not the checkout


def test_an_installed_vtriage_runs_selftest_and_explain(installed):
    _, target = installed
    result = _from_wheel(target, "selftest")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"All {len(MANIFEST)} passed." in result.stdout and str(target) in result.stdout
    explain = _from_wheel(target, "explain", "external_pressure", "--format", "markdown")
    assert explain.returncode == 0
    assert explain.stdout == (ROOT / "docs" / "runbooks" / "external_pressure.md").read_text()
    laid_out = _from_wheel(target, "explain", "EXTERNAL_PRESSURE")
    assert laid_out.returncode == 0 and laid_out.stdout.startswith("external_pressure\n=================\n")
