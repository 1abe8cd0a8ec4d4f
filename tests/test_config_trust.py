"""Which .vtriage.toml is trusted: the current folder's, the git root's and the user's own
(~/.config/vtriage/config.toml), never one in a parent folder that anyone could have planted, never one
another user owns or anyone may write; and every report names the config it used."""
from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from conftest import FIXTURES, run_cli
from test_docs import SCHEMA

PREEMPTING = str(FIXTURES / "logs" / "v1" / "preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log")
# Accepting every rule that fires turns the verdict into INCONCLUSIVE and lets `--fail-on warning` pass:
# what a planted file would do.
SILENCE = "".join(f'[[ignore]]\nrule = "{rule}"\nreason = "planted"\n'
                  for rule in ("preemption-observed", "preemption-rate", "kv-saturated-queueing",
                               "kv-saturated-queue-brief", "queue-persists-preempting"))


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """A HOME and XDG_CONFIG_HOME of the test's own, so the real user's config never takes part."""
    folder = tmp_path / "home"
    folder.mkdir()
    return {"HOME": str(folder), "XDG_CONFIG_HOME": ""}


def _gate(cwd: Path, env: dict[str, str], *extra: str):
    return run_cli(PREEMPTING, "--fail-on", "warning", *extra, cwd=cwd, env=env)


def _json(cwd: Path, env: dict[str, str], *extra: str) -> dict:
    result = run_cli(PREEMPTING, "--format", "json", *extra, cwd=cwd, env=env)
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return data


def test_a_config_planted_in_a_parent_folder_is_not_read(tmp_path, home):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / ".vtriage.toml").write_text(SILENCE)
    cwd = tmp_path / "shared" / "incident"
    cwd.mkdir()
    result = _gate(cwd, home)
    assert result.returncode == 1, result.stdout.decode()
    data = _json(cwd, home)
    assert data["verdict"] == "preemption_slowdown" and data["suppressed"] == [] and data["config"] is None


def test_the_current_folder_the_git_root_and_the_users_config_are_read(tmp_path, home):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "deploy").mkdir()
    (repo / ".vtriage.toml").write_text(SILENCE)
    assert _gate(repo / "deploy", home).returncode == 0                       # the git root's
    assert _json(repo / "deploy", home)["config"] == str(repo / ".vtriage.toml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    user = Path(home["HOME"]) / ".config" / "vtriage" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(SILENCE)
    assert _json(elsewhere, home)["config"] == str(user)                      # ~/.config/vtriage/config.toml
    xdg = tmp_path / "xdg"
    (xdg / "vtriage").mkdir(parents=True)
    (xdg / "vtriage" / "config.toml").write_text(SILENCE)
    assert _json(elsewhere, {**home, "XDG_CONFIG_HOME": str(xdg)})["config"] == str(xdg / "vtriage" / "config.toml")
    (elsewhere / ".vtriage.toml").write_text('runbook_url = "https://wiki.example.com/{verdict}"\n')
    assert _json(elsewhere, home)["config"] == str(elsewhere / ".vtriage.toml")   # the current folder's first


@pytest.mark.parametrize("mode,why", [(0o666, "writable by others"), (0o664, "writable by its group")])
def test_a_config_anyone_may_write_is_ignored_with_a_warning(tmp_path, home, mode, why):
    config = tmp_path / ".vtriage.toml"
    config.write_text(SILENCE)
    config.chmod(mode)
    result = _gate(tmp_path, home)
    err = result.stderr.decode()
    assert result.returncode == 1
    assert err.startswith(f"vtriage: warning: {config}: ignored: {why}") and err.count("\n") == 1, err
    assert "chmod go-w" in err
    assert _json(tmp_path, home)["config"] is None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root (CI runs as root)")
def test_a_config_another_user_owns_is_ignored_with_a_warning(tmp_path, home):
    config = tmp_path / ".vtriage.toml"
    config.write_text(SILENCE)
    os.chown(config, 4321, 4321)
    result = _gate(tmp_path, home)
    err = result.stderr.decode()
    assert result.returncode == 1
    assert err.startswith(f"vtriage: warning: {config}: ignored: owned by uid 4321") and err.count("\n") == 1, err


def test_an_explicit_config_is_used_but_its_permissions_are_warned_about(tmp_path, home):
    config = tmp_path / "team.toml"
    config.write_text(SILENCE)
    config.chmod(0o666)
    result = _gate(tmp_path, home, "--config", str(config))
    err = result.stderr.decode()
    assert result.returncode == 0
    assert err.startswith(f"vtriage: warning: {config}: writable by others") and err.count("\n") == 1, err
    assert _json(tmp_path, home, "--config", str(config))["config"] == str(config)


def test_every_format_names_the_config_used(tmp_path, home):
    config = tmp_path / ".vtriage.toml"
    config.write_text('runbook_url = "https://wiki.example.com/{verdict}"\n')
    for fmt, needle in (("text", f"Config: {config}"), ("markdown", f"Config: `{config}`"),
                        ("html", f"<code>{config}</code>")):
        with_config = run_cli(PREEMPTING, "--format", fmt, "--force", cwd=tmp_path, env=home).stdout.decode()
        without = run_cli(PREEMPTING, "--format", fmt, "--force", "--no-config", cwd=tmp_path, env=home).stdout.decode()
        assert needle in with_config, fmt
        assert "Config: none" in without and str(config) not in without, fmt
    assert _json(tmp_path, home)["config"] == str(config)
    assert _json(tmp_path, home, "--no-config")["config"] is None


def test_the_config_warning_escapes_control_characters_in_the_path(tmp_path, home):
    folder = tmp_path / "team-\x1b]0;pwned\x07-\u202e"
    folder.mkdir()
    config = folder / "team.toml"
    config.write_text(SILENCE)
    config.chmod(0o666)
    err = _gate(tmp_path, home, "--config", str(config)).stderr.decode()
    assert err.startswith("vtriage: warning: ") and "writable by others" in err, err
    assert not any(char in err for char in "\x1b\x07\u202e") and "\\x1b" in err, err
