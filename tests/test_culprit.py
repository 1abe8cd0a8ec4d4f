"""Who held the GPU at an out-of-memory error, as a reader of the report sees it: torch's process list is read
against vLLM's own figures before another process is blamed, the fixes follow what the figures allow, and the
sentence that decides an external_pressure verdict says which amount is larger and what that means."""
from __future__ import annotations

from triage.render.html import render_html
from triage.render.json import report_dict
from triage.render.text import render_text

from conftest import FIXTURES, diagnose_files, diagnose_text
from test_reports import parse

LOGS = FIXTURES / "logs"
NVML_ZERO_BYTES = "v1/external_pressure-llama33-70b-fp8-h100-0102-k8s-nvml-zero-bytes-graph-capture.log"
TWO_REPLICAS = "v1/external_pressure-qwen25-14b-a100-01011-two-replicas-host-pids-serving.log"
ONE_UNKNOWN_PID = "v1/external_pressure-mistral-7b-l40s-01011-cri-one-host-pid-unknown-owner-serving.log"
OWN_MEMORY_ONLY = "v1/external_pressure-qwen25-14b-awq-4090-0102-serving-oom-own-memory-only.log"
ROCM_SERVING = "v1/external_pressure-llama31-8b-mi210-rocm-090-hip-oom-serving.log"
SECOND_SERVICE = "v1/external_pressure-llama31-8b-h100-cudagraph-capture-oom-second-service.log"
NOTEBOOK = "v0-old/external_pressure-llama3-8b-l4-notebook-holds-15g.log"
TORCH20_SHARED = "v0-old/external_pressure-llama2-13b-a10g-021-torch20-oom-shared-gpu.log"
FREE_AT_STARTUP = "v1/external_pressure-gemma3-27b-tp2-free-mem-cuda0-worker.log"
SERVING_EXCERPT = "v1/external_pressure-qwen3-8b-l4-0110-serving-oom-excerpt-no-banner.log"


def report_of(kit, name):
    return diagnose_files(kit, LOGS / name)


def facts_of(report) -> dict:
    return {name: fact["value"] for name, fact in report_dict(report)["facts"].items()}


def summary(report) -> str:
    return report_dict(report)["summary"]


def actions(report) -> list[str]:
    return [fix.action for fix in report.diagnosis.fixes]


def test_nvml_zero_bytes_is_no_figure_and_the_gpu_is_vllm_s_own(kit):
    """'this process has 0 bytes memory in use' is NVML giving no figure: what PyTorch allocated and reserved
    (76.94 GiB of the 77.86 GiB in use) is this process, so no other process held 77.86 GiB."""
    report = report_of(kit, NVML_ZERO_BYTES)
    assert report.diagnosis.verdict == "external_pressure"
    assert "other process" not in summary(report)
    assert not any("other process" in action or "Find and stop" in action for action in actions(report))
    text = parse(render_html(report)).text()
    assert "This vLLM process 77.86 GiB" in text and "This vLLM process 0.00 GiB" not in text
    facts = facts_of(report)
    assert (facts["this_process_gib"], facts["other_processes_gib"], facts["other_processes_max_gib"]) == \
        (77.86, 0.0, 0.92)


def test_two_replicas_listed_by_host_pid_blame_neither_pid(kit):
    """Both listed processes match what this replica reserved: one is vLLM, which one the log cannot tell. The
    other's memory is still held outside vLLM, but no fix tells the reader to stop a PID that may be vLLM."""
    report = report_of(kit, TWO_REPLICAS)
    assert report.diagnosis.verdict == "external_pressure"
    assert not any("process 2210" in action or "process 2695" in action for action in actions(report))
    facts = facts_of(report)
    assert facts["unidentified_process_pids"] == "2210, 2695" and facts["other_processes_gib"] == 36.02
    assert "other_process_pids" not in facts
    first = report.diagnosis.fixes[0]
    assert first.action == "Find and stop or move the other process(es) holding 36.02 GiB on this GPU"
    assert first.why.startswith("torch lists processes 2210 (36.02 GiB), 2695 (36.41 GiB); which of them is "
                                "vLLM itself (its host PID) and which another process, the log cannot tell, so "
                                "stop only a process that is not vLLM")
    assert "processes other than vLLM held 36.02 GiB of the 79.25 GiB GPU" in summary(report)


def test_a_utilization_fix_never_raises_the_budget_an_oom_ran_out_of(kit):
    """The other replica leaves 43.23 GiB, but the 9.28 GiB that failed while serving needs room outside the
    budget too: the fix lowers 0.45, never raises it to what the other process leaves."""
    report = report_of(kit, TWO_REPLICAS)
    values = [fix.value for fix in report.diagnosis.fixes if fix.flag == "--gpu-memory-utilization"]
    assert values == [0.40]
    assert "the 9.28 GiB that failed (+0.5 GiB) needs room outside the budget" in report.diagnosis.fixes[1].why


def test_one_process_that_may_be_vllm_is_checked_not_stopped(kit):
    """One host PID holding more than vLLM reserved while the unlisted rest could be vLLM: the report says the
    log cannot tell and offers to check which it is, never to stop it. Checking comes after every fix that may
    work; here the only other one is not enough alone, so it is listed first."""
    report = report_of(kit, ONE_UNKNOWN_PID)
    assert report.diagnosis.verdict == "external_pressure"
    assert "other_processes_gib" not in report.diagnosis.facts
    assert not any(action.startswith("Find and stop") for action in actions(report))
    check = report.diagnosis.fixes[0]
    assert check.action == "Check whether process 3127794 (24.80 GiB) is vLLM itself before stopping anything"
    assert check.why.startswith("torch lists process 3127794 with 24.80 GiB; whether that is vLLM itself (its host "
                                "PID) or another process, the log cannot tell")
    assert all(fix.status == "not_enough" for fix in report.diagnosis.fixes[1:])
    text = render_text(report).replace("\n     ", " ")
    assert "1. Check whether process 3127794 (24.80 GiB) is vLLM itself" in text
    page = parse(render_html(report)).text()
    assert "Process(es) that may be vLLM itself (the log cannot tell) 24.80 GiB" in page


def test_no_other_process_fix_when_torch_s_figures_leave_none(kit):
    """'this process has 23.57 GiB' of a 23.64 GiB card with 0.04 GiB free: no other process can hold more than
    0.03 GiB, so stopping one is not offered."""
    report = report_of(kit, OWN_MEMORY_ONLY)
    assert report.diagnosis.verdict == "external_pressure"
    assert actions(report) == ["--gpu-memory-utilization 0.92"]
    assert "other process" not in render_text(report).split("Ruled out")[0].split("Fix\n")[1]


def test_an_excerpt_cut_at_a_serving_oom_is_not_said_never_to_have_served(kit):
    """The excerpt starts at the failure: no banner, but the traceback places it while serving. The report neither
    says the server never served nor offers to stop a process torch's figures leave no room for."""
    report = report_of(kit, SERVING_EXCERPT)
    text = render_text(report)
    assert "The server was up and serving when" in text and "never started serving" not in text
    assert "preemption_slowdown  it failed while serving (CUDA out of memory), and the input shows no stats line or " \
           "preemption before that" in text
    assert not any("other process" in action for action in actions(report))


def test_no_other_process_fix_when_stopping_them_could_not_have_made_room(kit):
    """ROCm names no process: what PyTorch holds leaves at most 1.22 GiB to others, and with 4.12 GiB free that
    is still far from the 15.66 GiB that failed."""
    report = report_of(kit, ROCM_SERVING)
    assert not any("other process" in action for action in actions(report))
    assert report.diagnosis.facts["other_processes_max_gib"].value == 1.22


def test_other_processes_under_the_headroom_say_how_little_they_left(kit):
    data = report_dict(report_of(kit, SECOND_SERVICE))
    assert data["headline"]["decided_by"] == (
        "other processes held 7.53 GiB of the 7.92 GiB that vLLM's budget leaves of the GPU, leaving only 0.39 GiB "
        "for what vLLM allocates outside its budget")


def test_other_processes_over_the_headroom_say_the_budget_cannot_fit(kit):
    data = report_dict(report_of(kit, NOTEBOOK))
    assert data["headline"]["decided_by"] == (
        "other processes held 15.38 GiB, more than the 3.31 GiB that vLLM's budget leaves of the GPU: the budget "
        "and they cannot both fit")


def test_free_memory_at_startup_is_said_only_of_the_startup_check(kit):
    """0.10.2+ prints what it requested at every start; free memory at an OOM while serving is not 'free at
    startup', and where vLLM's check refused to start, the sentence says which is larger."""
    own = report_dict(report_of(kit, OWN_MEMORY_ONLY))["headline"]["decided_by"]
    refused = report_dict(report_of(kit, FREE_AT_STARTUP))["headline"]["decided_by"]
    assert own == "an allocation of 0.13 GiB failed with 0.04 GiB free"
    assert refused == "vLLM asked for 72.85 GiB at startup, but only 39.84 GiB was free"


def test_memory_outside_pytorch_too_small_to_be_another_process_does_not_decide(kit):
    """On ROCm the 0.22 GiB left after PyTorch's figures and a device context is no process of note: the allocation
    that failed decides, not a comparison with the headroom."""
    log = (LOGS / ROCM_SERVING).read_text()
    args = ("INFO 06-17 11:20:06 [api_server.py:1288] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', "
            "'gpu_memory_utilization': 0.9}\n")
    report = diagnose_text(kit, args + log)
    assert report.diagnosis.facts["other_processes_gib"].value == 0.22
    assert report_dict(report)["headline"]["decided_by"] == "an allocation of 15.66 GiB failed with 4.12 GiB free"


def test_the_summary_counts_no_process_it_cannot_name(kit):
    named = summary(report_of(kit, NOTEBOOK))
    unnamed = summary(report_of(kit, TORCH20_SHARED))
    assert "while processes other than vLLM (pid 2231) held 15.38 GiB of the 22.05 GiB GPU" in named
    assert "while processes other than vLLM held 11.24 GiB of the 22.20 GiB GPU" in unnamed
