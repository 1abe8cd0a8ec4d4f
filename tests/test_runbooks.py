"""Runbooks: one page per verdict in the Prometheus runbook shape, printed by `vtriage explain`,
citing the vLLM docs of every fix vtriage gives, and linked from every report."""
from __future__ import annotations

import json
import re
import tomllib

import pytest

from triage.report.runbooks import SECTIONS
from triage.vocabulary import SEVERITIES, VERDICTS

from conftest import FIXTURES, ROOT, diagnose_files, run_cli

RUNBOOKS = ROOT / "docs" / "runbooks"
MANIFEST = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]


@pytest.mark.parametrize("verdict", VERDICTS)
def test_each_verdict_has_a_page_in_the_prometheus_runbook_shape(verdict):
    text = (RUNBOOKS / f"{verdict}.md").read_text()
    assert text.startswith(f"# {verdict}\n")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == list(SECTIONS), f"{verdict}: sections {headings}"
    assert "https://docs.vllm.ai/en/latest/" in text.split("## Mitigation")[1], "Mitigation must cite the vLLM docs"


def test_every_fix_and_rule_reference_is_cited_in_its_verdicts_runbook(kit):
    """Whatever a report tells the user to read, the runbook of that verdict cites too."""
    missing = set()
    for entry in MANIFEST:
        d = diagnose_files(kit, FIXTURES / "logs" / entry["file"]).diagnosis
        page = (RUNBOOKS / f"{d.verdict}.md").read_text()
        refs = {f.reference for f in d.fixes if f.reference} | set(d.findings[0].references if d.findings else ())
        missing |= {(d.verdict, ref) for ref in refs if ref not in page}
    assert not missing


@pytest.mark.parametrize("verdict", VERDICTS)
def test_explain_prints_the_page_laid_out_for_reading(verdict):
    page = (RUNBOOKS / f"{verdict}.md").read_text()
    raw = run_cli("explain", verdict, "--format", "markdown")
    assert raw.returncode == 0 and raw.stdout.decode() == page          # the source, for pasting
    result = run_cli("explain", verdict)
    text = result.stdout.decode()
    assert result.returncode == 0 and text.startswith(f"{verdict}\n{'=' * len(verdict)}\n")
    for section in SECTIONS:
        assert f"\n{section}\n{'-' * len(section)}\n" in text
    assert not re.search(r"\*\*|`|\]\(|^#", text, re.M), "Markdown syntax left in the terminal text"
    for url in re.findall(r"\]\((https?://[^)]+)\)", page):
        assert f"<{url}>" in text                                            # every link keeps its address
    assert all(len(line) <= 100 or "<http" in line for line in text.splitlines())     # re-wrapped
    assert run_cli("explain", verdict.upper()).stdout.decode() == text    # verdicts in any case


def test_explain_takes_a_rule_id_and_lists_verdicts_with_severities():
    by_rule = run_cli("explain", "oom-loading-weights")
    assert by_rule.returncode == 0 and by_rule.stdout.startswith(b"weights_dont_fit\n================\n")
    listing = run_cli("explain").stdout.decode()
    assert re.search(r"^preemption_slowdown\s+warning\s", listing, re.M)
    assert re.search(r"^kv_cache_too_small\s+critical\s", listing, re.M)


@pytest.mark.parametrize("topic,needle", [("kv_cache_to_small", "did you mean 'kv_cache_too_small'"),
                                          ("oom", "a decision-tree branch, not a verdict")])
def test_explain_unknown_topic_is_one_line_exit_2(topic, needle):
    result = run_cli("explain", topic)
    err = result.stderr.decode()
    assert result.returncode == 2 and needle in err and err.count("\n") == 1 and result.stdout == b""


def test_every_verdict_class_names_an_existing_runbook_and_a_severity(kit):
    for verdict, cls in kit.rules.classes.items():
        assert (ROOT / cls.runbook).is_file() and cls.runbook == f"docs/runbooks/{verdict}.md"
        assert cls.severity in SEVERITIES
    assert kit.rules.classes["healthy"].severity == "ok"
    assert kit.rules.classes["preemption_slowdown"].severity == "warning"


def test_report_links_its_runbook_in_text_and_json():
    log = str(FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log")
    text = run_cli(log).stdout.decode()
    assert "Runbook: docs/runbooks/kv_cache_too_small.md  (vtriage explain kv_cache_too_small)" in text
    data = json.loads(run_cli(log, "--format", "json").stdout)
    assert data["runbook"] == "docs/runbooks/kv_cache_too_small.md" and data["severity"] == "critical"


def test_a_class_file_with_an_unknown_severity_is_refused(tmp_path):
    import shutil
    rules = tmp_path / "rules"
    shutil.copytree(ROOT / "rules", rules)
    path = rules / "classes" / "healthy.toml"
    path.write_text(path.read_text().replace('severity = "ok"', 'severity = "fine"'))
    result = run_cli("rules", "--rules", str(rules))
    err = result.stderr.decode()
    assert result.returncode == 2 and "healthy.toml: severity: unknown severity 'fine'" in err and "ok, info" in err


def test_the_verdicts_page_and_each_runbook_give_the_severity_the_class_file_sets(kit):
    text = (ROOT / "docs" / "verdicts.md").read_text()
    for verdict, cls in kit.rules.classes.items():
        assert f"| `{verdict}` | {cls.severity} | [runbooks/{verdict}.md](runbooks/{verdict}.md) |" in text
        assert f"\nSeverity: **{cls.severity}**" in (RUNBOOKS / f"{verdict}.md").read_text()


def test_each_page_names_the_alerts_that_catch_its_verdict():
    from triage.alerts import CATCHES
    for verdict in VERDICTS:
        text = (RUNBOOKS / f"{verdict}.md").read_text()
        m = re.search(r"Alerts that catch it \(`vtriage alerts`\): (.+?)\.?\n", text)
        named = re.findall(r"`(VLLM\w+)`", m[1]) if m else []
        assert sorted(named) == sorted(CATCHES.get(verdict, ())), verdict
