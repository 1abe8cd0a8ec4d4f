"""Every bundled fixture log is diagnosed as its manifest says: verdict, phase, attempts and figures."""
from __future__ import annotations

import tomllib

import jsonschema
import pytest

from triage.render.json import report_dict
from triage.selftest import figure_matches
from triage.vocabulary import VERDICTS

from conftest import FIXTURES, diagnose_files
from test_docs import SCHEMA

MANIFEST = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_fixture_is_diagnosed_as_labelled(kit, entry):
    report = diagnose_files(kit, FIXTURES / "logs" / entry["file"])
    d = report.diagnosis
    assert d.verdict == entry["verdict"], f"{entry['file']}: {d.verdict} via {d.rule_path}"
    if entry.get("failed_phase"):
        assert d.facts["failed_phase"].value == entry["failed_phase"]
    if entry.get("attempts"):
        assert len(report.attempts) == entry["attempts"]
    wrong = {name: (d.facts[name].value if name in d.facts else None, want)
             for name, want in entry.get("facts", {}).items()
             if name not in d.facts or not figure_matches(d.facts[name].value, want)}
    assert not wrong, f"{entry['file']}: (got, want) {wrong}"
    jsonschema.validate(report_dict(report), SCHEMA)


@pytest.mark.parametrize("entry", [e for e in MANIFEST if e["verdict"] == "healthy"], ids=lambda e: e["file"])
def test_healthy_baseline_fires_nothing_else(kit, entry):
    """On a healthy log no problem rule fires: the only finding is the healthy one."""
    report = diagnose_files(kit, FIXTURES / "logs" / entry["file"])
    assert [f.verdict for f in report.diagnosis.findings] == ["healthy"]
    assert report.diagnosis.fixes == ()


def test_fixtures_cover_every_verdict_in_every_generation():
    seen = {(e["file"].split("/")[0], e["verdict"]) for e in MANIFEST}
    for generation in ("v0-old", "v0-late", "v1"):
        for verdict in VERDICTS:
            assert (generation, verdict) in seen, f"no {verdict} fixture for {generation}"


def test_every_fixture_file_is_in_the_manifest():
    listed = {e["file"] for e in MANIFEST}
    on_disk = {str(p.relative_to(FIXTURES / "logs")) for p in (FIXTURES / "logs").rglob("*") if p.is_file()}
    assert on_disk == listed
