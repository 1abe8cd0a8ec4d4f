"""The capacity model reproduces what vLLM printed, era by era, and moves it the way its equations say."""
from __future__ import annotations

import re
import tomllib

import pytest

from triage.capacity.calibration import calibration_markdown, calibration_row
from triage.capacity.model import ERAS, GIB, calibrate
from triage.capacity.predict import predict

from conftest import FIXTURES, ROOT, diagnose_files, served_specs

MANIFEST = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]
TOLERANCE = 0.02


@pytest.fixture(scope="module")
def fixture_facts(kit):
    return {e["file"]: diagnose_files(kit, FIXTURES / "logs" / e["file"]).diagnosis.facts for e in MANIFEST}


def _rows(fixture_facts, with_configs: bool):
    specs = served_specs() if with_configs else {}
    rows = []
    for name, facts in fixture_facts.items():
        spec = specs.get(facts["model"].value) if "model" in facts else None
        row = calibration_row(name, facts, spec)
        if row is not None:
            rows.append(row)
    return rows


PRINTED = ("kv_cache_tokens", "max_concurrency", "estimated_max_model_len")


@pytest.mark.parametrize("with_configs", [False, True], ids=["bytes-per-token-from-the-log", "from-config.json"])
def test_every_fixture_that_prints_kv_figures_is_reproduced_within_2_percent(fixture_facts, with_configs):
    rows = {r.name: r for r in _rows(fixture_facts, with_configs)}
    for name, facts in fixture_facts.items():
        printed = [f for f in PRINTED if f in facts]
        if not printed:
            continue
        assert name in rows, f"{name} prints {printed} but the model reproduced none of them"
        checked = {c.figure for c in rows[name].checks}
        assert set(printed) <= checked, f"{name}: {set(printed) - checked} not reproduced"
        for c in rows[name].checks:
            assert c.error <= TOLERANCE, f"{name}: {c.figure} logged {c.logged}, model {c.predicted} ({c.error:.2%})"


def test_every_era_is_covered(fixture_facts):
    eras = {r.era for r in _rows(fixture_facts, False)}
    assert eras == set(ERAS), f"no fixture reproduces {set(ERAS) - eras}"


def test_the_budget_equation_reproduces_the_logged_kv_memory(fixture_facts):
    """Where a log prints every term (V0 3-line block, V1 'Actual usage' line), the equation alone gives its KV."""
    checked = 0
    for name, facts in fixture_facts.items():
        g = calibrate(facts)
        kv = g.equation_kv_gib()
        if kv is not None and "kv_cache_gib" in facts:
            assert abs(kv - facts["kv_cache_gib"].value) <= 0.05, name
            checked += 1
    assert checked >= 5


def test_config_bytes_per_token_are_an_independent_check(fixture_facts):
    """With a config.json the tokens are predicted without the log's own KV/tokens ratio."""
    rows = [r for r in _rows(fixture_facts, True) if r.per_token_source.startswith("config")]
    assert len(rows) >= 10
    assert any(c.figure == "kv_needed_gib" for r in rows for c in r.checks)


def test_the_model_says_what_it_had_to_assume(fixture_facts):
    v1 = calibrate(fixture_facts["v1/kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log"])
    said = " | ".join(v1.assumptions())
    assert "block size" in said and "GPU total: unknown" in said
    old = calibrate(fixture_facts["v0-old/kv_cache_too_small-mistral-7b-32k-3090-util085.log"])
    assert any(a.startswith("KV bytes per token: unknown") for a in old.assumptions())
    complete = calibrate(fixture_facts["v1/healthy-llama31-8b-l40s-0102-free-memory-info-hint.log"])
    assert not any("unknown" in a for a in complete.assumptions())


def test_calibration_table_in_the_docs_is_current(fixture_facts, update_golden):
    table = calibration_markdown(_rows(fixture_facts, True))
    path = ROOT / "docs" / "capacity.md"
    text = path.read_text()
    m = re.search(r"<!-- calibration-table -->\n(.*?)<!-- /calibration-table -->", text, re.S)
    assert m, "docs/capacity.md has no calibration-table block"
    if update_golden and m.group(1) != table:
        path.write_text(text[:m.start(1)] + table + text[m.end(1):])
        return
    assert m.group(1) == table, "docs/capacity.md calibration table is stale: pytest --update-golden rewrites it"


# --- moving the geometry ---------------------------------------------------------------------------------

A10G = "v0-late/preemption_slowdown-llama31-8b-a10g-recompute-pending.log.gz"   # V0 3-line block, total printed


def test_at_its_own_settings_the_prediction_is_the_incident(fixture_facts):
    facts = fixture_facts[A10G]
    p = predict(calibrate(facts))
    assert p.kv_tokens == facts["kv_cache_tokens"].value and p.kv_gib == facts["kv_cache_gib"].value
    assert p.starts is True and p.assumptions == ()


def test_utilization_moves_kv_by_utilization_times_total(fixture_facts):
    facts = fixture_facts[A10G]
    g = calibrate(facts)
    p = predict(g, g.settings.replace(gpu_memory_utilization=0.95))
    assert p.kv_gib == pytest.approx(facts["kv_cache_gib"].value + 0.03 * facts["gpu_total_gib"].value)
    per_token = g.bytes_per_token.value
    assert p.kv_tokens == int(p.kv_gib * GIB // (16 * per_token)) * 16
    assert any("stay as measured" in a for a in p.assumptions)


def test_fp8_kv_doubles_tokens_and_tensor_parallel_halves_weights(fixture_facts):
    facts = fixture_facts[A10G]
    g = calibrate(facts)
    fp8 = predict(g, g.settings.replace(kv_cache_dtype="fp8"))
    assert fp8.kv_gib == facts["kv_cache_gib"].value
    assert abs(fp8.kv_tokens - 2 * facts["kv_cache_tokens"].value) <= 16
    assert any("fp8" in a for a in fp8.assumptions)
    tp2 = predict(g, g.settings.replace(tensor_parallel_size=2))
    assert tp2.weights_gib == pytest.approx(facts["weights_gib"].value / 2)
    assert tp2.kv_gib == pytest.approx(facts["kv_cache_gib"].value + facts["weights_gib"].value / 2)
    assert tp2.kv_tokens > 4 * facts["kv_cache_tokens"].value        # more memory and half the bytes per token


def test_a_length_the_cache_cannot_hold_does_not_start(fixture_facts):
    facts = fixture_facts[A10G]
    g = calibrate(facts)
    too_long = facts["kv_cache_tokens"].value + 16
    p = predict(g, g.settings.replace(max_model_len=too_long))
    assert p.starts is False and p.problem == "kv_cache_too_small"
    assert predict(g, g.settings.replace(max_model_len=too_long - 16)).starts is True


def test_graph_estimate_is_inside_the_budget_from_0_20(fixture_facts):
    facts = fixture_facts["v1/preemption_slowdown-qwen3-32b-h200-preemptions-in-stats.log"]
    g = calibrate(facts)
    assert g.graph_in_budget and g.total_gib.source == "derived"        # from the 'equivalent to' notice
    eager = predict(g, g.settings.replace(enforce_eager=True))
    assert eager.kv_gib == pytest.approx(facts["kv_cache_gib"].value + facts["cuda_graph_estimate_gib"].value)
    older = calibrate(fixture_facts["v1/healthy-llama31-8b-l40s-0102-free-memory-info-hint.log"])
    assert not older.graph_in_budget
    assert predict(older, older.settings.replace(enforce_eager=True)).kv_gib == older.kv_gib.value


def test_a_weight_fix_counts_the_release_s_default_utilization_when_the_log_gives_none():
    """vLLM's default --gpu-memory-utilization is 0.9, and 0.92 from 0.20 (triage/vocabulary.py)."""
    from triage.capacity.memory_fixes import cpu_offload
    from triage.model import Fact

    def offload_gb(**figures):
        facts = {name: Fact(name, value) for name, value in
                 {"gpu_total_gib": 80.0, "weights_gib": 100.0, **figures}.items()}
        return cpu_offload(facts)[0].value

    assert offload_gb(vllm_version="0.20.1") == offload_gb(vllm_version="0.20.1", gpu_memory_utilization=0.92) == 45
    assert offload_gb(vllm_version="0.10.2") == offload_gb(vllm_version="0.10.2", gpu_memory_utilization=0.9) == 46
