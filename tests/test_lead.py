"""The report leads with what matters, in every format: the verdict, the comparison that decides it,
the restart history and what users saw, on the first screen (the browser checks the HTML's in
test_browser.py)."""
from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, ROOT, json_report, run_cli

RESTARTING = str(FIXTURES / "logs" / "v0-late" / "weights_dont_fit-mixtral-8x7b-one-a100-restart-x3.log")
KV = str(FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log")
INCIDENT = FIXTURES / "incidents" / "v1-0.10.1-silent-preemption"
SILENT = (str(INCIDENT / "server.log"), *(a for i in (1, 2, 3) for a in ("--metrics",
                                                                         str(INCIDENT / f"metrics-{i}.prom"))),
          "--interval", "30")
FIRST_SCREEN = 12          # lines: what fits above the fold of a terminal


def _first(args, fmt="text") -> str:
    """The first screen, with the text format's wrapped label lines joined back."""
    lines = run_cli("--format", fmt, *args).stdout.decode().splitlines()[:FIRST_SCREEN]
    return "\n".join(lines).replace("\n            ", " ")


def test_a_restart_loop_is_said_under_the_verdict_not_at_line_39():
    text = _first([RESTARTING])
    assert text.startswith("WEIGHTS DON'T FIT")
    assert "Restarts:   all 3 startups in this input ended as weights_dont_fit; this report is about the last" in text
    assert "Impact:     the server never started" in text
    full = run_cli(RESTARTING).stdout.decode()
    assert full.count("all 3 startups") == 1                              # said once, at the top


def test_every_earlier_startup_s_verdict_is_named():
    """Two startups refused for free memory, then one with too small a KV cache: none goes unnamed."""
    log = FIXTURES / "logs" / "v1" / "kv_cache_too_small-llama31-8b-a10g-restarts-after-free-mem-failures.log"
    text = _first([str(log)])
    assert ("Restarts:   3 startups in this input: 1-2 ended as external_pressure, 3 ended as kv_cache_too_small; "
            "this report is about the last") in text


def test_the_deciding_comparison_is_the_incidents_own_figures():
    _, data = json_report(KV)
    head = data["headline"]
    assert head["decided_by"] == "KV cache: 7.00 GiB needed, 4.03 GiB available; 75,440 of the 131,072 tokens asked fit"
    gib, tokens = head["comparisons"]
    assert [(f["fact"], f["value"]) for f in gib["figures"]] == [("kv_needed_gib", 7.0), ("kv_cache_gib", 4.03)]
    assert [(f["fact"], f["value"]) for f in tokens["figures"]] == [("max_model_len", 131072),
                                                                     ("estimated_max_model_len", 75440)]
    for fact, value in ((f["fact"], f["value"]) for c in head["comparisons"] for f in c["figures"]):
        assert data["facts"][fact]["value"] == value                     # nothing invented
    assert f"Decided by: {head['decided_by']}" in _first([KV])


def test_user_visible_impact_leads_instead_of_row_40_of_the_facts():
    _, data = json_report(*SILENT)
    impact = data["headline"]["impact"]
    facts = data["facts"]
    for name, words in (("ttft_p95_seconds", "time to first token p95"), ("queue_time_p95_seconds", "queue time p95"),
                        ("e2e_latency_p95_seconds", "end-to-end latency p95")):
        assert f"{words} {facts[name]['value']:.3g}"[:len(words) + 3] in impact, (name, impact)
    for fmt, marker in (("text", "Impact:"), ("markdown", "- **Impact:**")):
        shown = _first(SILENT, fmt)
        assert f"{marker} " in shown and "time to first token p95" in shown, fmt
    assert "886 preemptions" in data["headline"]["decided_by"]


@pytest.mark.parametrize("case", sorted(p.stem for p in (ROOT / "tests" / "reports" / "inputs").glob("*.log")))
def test_every_verdict_leads_with_what_decided_it_and_the_impact(case):
    log = str(ROOT / "tests" / "reports" / "inputs" / f"{case}.log")
    data = json.loads(run_cli("--format", "json", log).stdout)
    head = data["headline"]
    assert head["decided_by"] and head["impact"], head
    text, md = _first([log]), _first([log], "markdown")
    assert f"Decided by: {head['decided_by']}" in text
    assert "- **Decided by:**" in md and "- **Impact:**" in md


def test_unknown_latency_with_metrics_given_does_not_ask_for_metrics():
    """/metrics without latency histograms: the impact line says so instead of asking for --metrics."""
    snapshot = FIXTURES / "metrics" / "federate-v1-0.11.1-qwen3-8b-one-snapshot-young.prom"
    shown = run_cli("--metrics", str(snapshot)).stdout.decode()
    impact = next(line for line in shown.splitlines() if line.startswith("Impact:"))
    assert "the /metrics given have no latency histograms" in impact and "--metrics" not in impact


def test_an_input_with_no_vllm_output_does_not_ask_for_metrics(tmp_path):
    """Nothing from vLLM at all (the wrong container): the impact says that, not that /metrics would help."""
    log = tmp_path / "wrong-container.log"
    log.write_text("hello\nnginx: started\n")
    shown = run_cli(str(log)).stdout.decode()
    impact = next(line for line in shown.splitlines() if line.startswith("Impact:"))
    assert "no vLLM output" in impact and "--metrics" not in impact
