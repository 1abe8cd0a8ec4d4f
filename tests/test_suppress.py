"""Suppressions: .vtriage.toml and --ignore silence an accepted finding, which the report still lists
as SUPPRESSED; a suppressed deciding rule hands the verdict to the next rule in the tree."""
from __future__ import annotations

import json
import re

import jsonschema
import pytest

from conftest import FIXTURES, run_cli
from test_docs import SCHEMA

PREEMPTING = str(FIXTURES / "logs" / "v1" / "preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log")
KV = str(FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log")

ACCEPT_PREEMPTION = '''\
# the nightly batch window preempts on purpose
[[ignore]]
rule = "preemption-observed"
reason = "nightly batch: preemption is expected"
'''


@pytest.fixture
def repo(tmp_path):
    """A git checkout with a sub-directory, as a team's repository would be."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "deploy" / "vllm").mkdir(parents=True)
    return tmp_path


def _json(*args, cwd, env=None):
    result = run_cli(*args, "--format", "json", cwd=cwd, env=env)
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return result.returncode, data


def test_without_suppression_the_strongest_preemption_rule_decides(repo):
    code, data = _json(PREEMPTING, cwd=repo)
    assert (code, data["verdict"], data["rule_path"][-1], data["confidence"]) == \
        (1, "preemption_slowdown", "preemption-observed", "high")
    assert data["suppressed"] == []


def test_a_suppressed_deciding_rule_hands_the_verdict_to_the_next_rule(repo):
    (repo / ".vtriage.toml").write_text(ACCEPT_PREEMPTION)
    code, data = _json(PREEMPTING, cwd=repo / "deploy" / "vllm")      # found in a parent directory
    assert data["rule_path"][-1] == "preemption-rate" and data["confidence"] == "medium"
    assert code == 1 and data["verdict"] == "preemption_slowdown"
    [item] = data["suppressed"]
    assert item["rule"] == "preemption-observed" and item["fired"] is True
    assert item["origin"] == ".vtriage.toml:3" and item["reason"] == "nightly batch: preemption is expected"
    assert "preempted requests 330 times" in item["finding"]["summary"]
    assert all(f["rule"] != "preemption-observed" for f in data["findings"])


def test_when_every_rule_that_fired_is_suppressed_the_verdict_is_inconclusive_not_healthy(repo):
    (repo / ".vtriage.toml").write_text(ACCEPT_PREEMPTION)
    result = run_cli(PREEMPTING, "--ignore", "preemption-rate", "--ignore", "kv-saturated-queueing",
                     "--ignore", "kv-saturated-queue-brief", "--ignore", "queue-persists-preempting", cwd=repo)
    out = result.stdout.decode()
    assert result.returncode == 3 and out.startswith("INCONCLUSIVE")
    assert "Every rule that fired is suppressed" in out
    assert out.count("SUPPRESSED  ") == 5 and "accepted: accepted on the command line  (--ignore)" in out
    assert re.search(r"preemption_slowdown  suppressed: kv-saturated-queu\S+ fired but is accepted", out)


def test_a_suppression_that_did_not_fire_changes_nothing_and_is_listed(repo):
    (repo / ".vtriage.toml").write_text(ACCEPT_PREEMPTION)
    plain = run_cli(KV, "--no-config", cwd=repo)
    result = run_cli(KV, cwd=repo)
    assert result.returncode == plain.returncode == 1
    assert "did not fire: preemption-observed (.vtriage.toml:3)" in result.stdout.decode()
    assert "Suppressed" not in plain.stdout.decode()


def test_the_search_stops_at_the_git_root(tmp_path):
    (tmp_path / ".vtriage.toml").write_text(ACCEPT_PREEMPTION)
    inner = tmp_path / "checkout"
    (inner / ".git").mkdir(parents=True)
    assert _json(PREEMPTING, cwd=inner)[1]["suppressed"] == []                 # above the git root: not read
    home = tmp_path / "home"
    home.mkdir()
    # no parent folder is read, home included: only ~/.config/vtriage/config.toml (tests/test_config_trust.py)
    assert _json(PREEMPTING, cwd=home, env={"HOME": str(tmp_path)})[1]["suppressed"] == []


def test_config_flag_no_config_and_expiry(repo, tmp_path):
    other = tmp_path / "team.toml"
    other.write_text(ACCEPT_PREEMPTION + "expires = 2000-01-01\n")
    code, data = _json(PREEMPTING, "--config", str(other), cwd=repo)
    assert data["rule_path"][-1] == "preemption-observed" and data["suppressed"] == []
    assert any("preemption-observed (team.toml:3) expired on 2000-01-01" in w for w in data["warnings"])
    other.write_text(ACCEPT_PREEMPTION + "expires = 2999-01-01\n")
    assert _json(PREEMPTING, "--config", str(other), cwd=repo)[1]["suppressed"][0]["expires"] == "2999-01-01"
    (repo / ".vtriage.toml").write_text(ACCEPT_PREEMPTION)
    assert _json(PREEMPTING, "--no-config", cwd=repo)[1]["suppressed"] == []


def test_runbook_url_points_reports_at_the_teams_pages(repo):
    (repo / ".vtriage.toml").write_text('runbook_url = "https://wiki.example.com/vllm/{verdict}"\n')
    data = _json(KV, cwd=repo)[1]
    assert data["runbook"] == "https://wiki.example.com/vllm/kv_cache_too_small"


@pytest.mark.parametrize("content,needle", [
    ('[[ignore]]\nrule = "preemption-observed"\n', "ignore[0].reason: missing: say why"),
    ('[[ignore]]\nrule = "preemption-observd"\nreason = "x"\n',
     "ignore[0].rule: unknown rule 'preemption-observd' (hint: did you mean 'preemption-observed'?)"),
    ('[[ignore]]\nrule = "no-failure"\nreason = "x"\n', "ignore[0].rule: 'no-failure' is a branch of the tree"),
    ('[[ignore]]\nrule = "oom-unplaced"\nreson = "x"\n', "ignore[0].reson: unknown key (hint: did you mean 'reason'?)"),
    ('[[ignore]]\nrule = "oom-unplaced"\nreason = "x"\nexpires = "soon"\n', "ignore[0].expires: must be a date"),
    ('ignores = []\n', "ignores: unknown key (hint: did you mean 'ignore'?)"),
    ('ignore = "oom-unplaced"\n', "ignore: must be a list of tables"),
    ('runbook_url = "https://wiki/x"\n', "runbook_url: must be a string with {verdict} in it"),
    ('[[ignore]\n', "(file): not valid TOML"),
])
def test_a_bad_config_is_one_line_with_file_key_and_hint(repo, content, needle):
    (repo / ".vtriage.toml").write_text(content)
    result = run_cli(PREEMPTING, cwd=repo)
    err = result.stderr.decode()
    assert result.returncode == 2 and result.stdout == b""
    assert err.startswith(f"vtriage: error: {repo / '.vtriage.toml'}: ") and needle in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("args,needle", [
    (["--ignore", "oom"], "--ignore: oom: 'oom' is a branch"),
    (["--ignore", "kv-saturated-queuing"], "did you mean 'kv-saturated-queueing'"),
    (["--config", "/nonexistent/team.toml"], "no such config file"),
    (["--config", "x.toml", "--no-config"], "contradict"),
])
def test_bad_ignore_or_config_flags_are_usage_errors(repo, args, needle):
    result = run_cli(PREEMPTING, *args, cwd=repo)
    err = result.stderr.decode()
    assert result.returncode == 2 and needle in err and err.count("\n") == 1
