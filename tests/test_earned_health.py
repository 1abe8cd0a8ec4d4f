"""A healthy verdict is earned: a queue that does not drain, an engine that processes nothing, an error after the
last stats line each keep a server from being called healthy, `--fail-on warning` fails on all of them, and the
line that says what decided never cites a figure that argues for another verdict."""
from __future__ import annotations

import pytest

from triage.render.text import render_text

from conftest import FIXTURES, diagnose_text, run_cli

V0 = ("INFO 05-16 14:{m:02d}:{s:02d} metrics.py:334] Avg prompt throughput: {p:.1f} tokens/s, Avg generation "
      "throughput: {g:.1f} tokens/s, Running: {r} reqs, Swapped: {sw} reqs, Pending: {w} reqs, GPU KV cache usage: "
      "{kv:.1f}%, CPU KV cache usage: 0.0%.")
V1 = ("(APIServer pid=1) INFO 05-16 14:{m:02d}:{s:02d} [loggers.py:123] Engine {e:03d}: Avg prompt throughput: {p:.1f} "
      "tokens/s, Avg generation throughput: {g:.1f} tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache "
      "usage: {kv:.1f}%, Prefix cache hit rate: 0.0%")
PREEMPTED = ("WARNING 05-16 14:{m:02d}:{s:02d} scheduler.py:1089] Sequence group 1234 is preempted by PreemptionMode."
             "{mode} mode because there is not enough KV cache space. This can affect the end-to-end performance. "
             "Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
             "total_num_cumulative_preemption=1")


def v0(i: int, r: int, w: int, kv: float, g: float = 35.0, p: float = 0.0, sw: int = 0) -> str:
    return V0.format(m=10 + i // 6, s=(i % 6) * 10, p=p, g=g, r=r, sw=sw, w=w, kv=kv)


def v1(i: int, r: int, w: int, kv: float, g: float = 900.0, p: float = 0.0, e: int = 0) -> str:
    return V1.format(m=10 + i // 6, s=(i % 6) * 10, e=e, p=p, g=g, r=r, w=w, kv=kv)


def lines(*rows: str) -> str:
    return "\n".join(rows) + "\n"


def diagnosis(kit, text: str):
    return diagnose_text(kit, text).diagnosis


# --- a queue that does not drain --------------------------------------------------------------------------

def test_a_queue_that_never_drains_while_vllm_preempts_is_a_slowdown_below_the_saturation_line(kit):
    text = lines(*(v0(i, 2, 98 + i, 74 + i) for i in range(6)),
                 PREEMPTED.format(m=11, s=5, mode="SWAP"),
                 *(v0(i, 2, 104 + i, 80 + i % 3) for i in range(6, 12)))
    d = diagnosis(kit, text)
    assert (d.verdict, d.confidence) == ("preemption_slowdown", "medium"), d.rule_path
    assert d.facts["queue_persisted_intervals"].value == 12
    assert d.facts["waiting_at_end"].value == 115


def test_the_kv_cache_at_90_percent_with_a_queue_that_persists_is_saturation_without_a_count(kit):
    """vLLM 0.32 never prints its Preemptions count: the state preemption comes from decides."""
    text = lines(v1(0, 40, 0, 61.0), *(v1(i, 30, 18 + i, [91.2, 93.0, 89.4][i % 3]) for i in range(1, 7)))
    d = diagnosis(kit, text)
    assert (d.verdict, d.rule_path[-1]) == ("preemption_slowdown", "kv-saturated-queueing")
    assert "preemptions" not in d.facts            # unknown, never zero


def test_a_queue_that_drains_leaves_the_server_healthy(kit):
    text = lines(*(v1(i, 30, w, kv) for i, (w, kv) in enumerate([(0, 60.0), (4, 91.0), (2, 88.0), (0, 72.0),
                                                                  (0, 65.0), (0, 61.0)])))
    d = diagnosis(kit, text)
    assert d.verdict == "healthy", d.rule_path
    assert d.facts["waiting_at_end"].value == 0


def test_a_queue_that_persists_with_room_in_the_cache_and_no_preemption_is_not_called_healthy(kit):
    text = lines(*(v1(i, 256, 12 + 15 * i, 41.0 + i) for i in range(4)))
    d = diagnosis(kit, text)
    assert (d.verdict, d.rule_path[-1]) == ("inconclusive", "queue-not-draining")


# --- a stall -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kv", [0.0, 0.3, 1.2])
def test_requests_waiting_with_none_running_and_nothing_processed_is_a_hang(kit, kv):
    text = lines(v1(0, 12, 0, 30.0), *(v1(i, 0, 3 * i, kv, g=0.0) for i in range(1, 5)))
    d = diagnosis(kit, text)
    assert (d.verdict, d.rule_path[-1]) == ("other_failure", "engine-stalled")
    assert d.facts["stalled_intervals"].value == 4


def test_one_stalled_engine_among_busy_ones_is_a_hang(kit):
    rows = []
    for i in range(5):
        rows.append(v1(i, 33, 0, 45.0, e=0))
        rows.append(v1(i, 0, 4 + 3 * i, 0.0, g=0.0, e=1))
    d = diagnosis(kit, lines(*rows))
    assert (d.verdict, d.facts["stalled_intervals"].value) == ("other_failure", 5)


def test_a_queue_clients_gave_up_on_without_a_token_processed_is_still_a_hang(kit):
    text = lines(v1(0, 12, 0, 30.0), *(v1(i, 0, 3 * i, 0.0, g=0.0) for i in range(1, 5)), v1(5, 0, 0, 0.0, g=0.0))
    assert diagnosis(kit, text).verdict == "other_failure"


def test_requests_running_without_a_token_for_long_are_a_hang_but_one_slow_prefill_is_not(kit):
    slow = lines(v1(0, 1, 0, 6.0), v1(1, 1, 0, 6.4, g=0.0), v1(2, 3, 0, 20.0, g=80.0, p=300.0))
    assert diagnosis(kit, slow).verdict == "healthy"
    hung = lines(v1(0, 5, 0, 6.0), *(v1(i, 5, 0, 6.4, g=0.0) for i in range(1, 4)))
    assert diagnosis(kit, hung).verdict == "other_failure"


# --- an error after the last stats line -------------------------------------------------------------------

AFTER_STATS = [
    pytest.param("ERROR 05-16 14:11:15 engine.py:135] ValueError('Error in model execution (input dumped to "
                 "/tmp/err_execute_model_input_20240516-141115.pkl): index 4096 is out of bounds for dimension 0 "
                 "with size 4096')", "other_failure", id="v0-repr-of-the-exception"),
    pytest.param("(EngineCore_DP0 pid=200) ERROR 05-16 14:11:15 [dump_input.py:69] Dumping input data for V1 LLM "
                 "engine (v0.10.1) with config: model='Qwen/Qwen3-8B', speculative_config=None", "inconclusive",
                 id="v1-input-dump"),
    pytest.param("ERROR 05-16 14:11:15 worker_base.py:467] Error executing method execute_model. This might cause "
                 "deadlock in distributed execution.", "inconclusive", id="worker-method"),
]


@pytest.mark.parametrize("error,verdict", AFTER_STATS)
def test_an_error_after_the_last_stats_line_outranks_healthy_stats(kit, error, verdict):
    text = lines(v0(0, 48, 0, 87.0), v0(1, 50, 0, 91.0), PREEMPTED.format(m=11, s=10, mode="RECOMPUTE"), error)
    d = diagnosis(kit, text)
    assert d.verdict == verdict, d.rule_path
    assert d.facts["failed_phase"].value == "serving"


def test_an_error_the_server_went_on_serving_after_is_not_the_failure(kit):
    text = lines(v0(0, 48, 0, 57.0),
                 "ERROR 05-16 14:10:12 engine.py:135] ValueError('prompt too long for this adapter')",
                 v0(1, 50, 0, 61.0, g=410.0), v0(2, 44, 0, 58.0, g=402.0))
    d = diagnosis(kit, text)
    assert d.verdict == "healthy", d.rule_path
    assert d.facts["transient_errors"].value == 1


def test_a_hang_after_an_error_is_not_a_recovery(kit):
    text = lines(v0(0, 48, 0, 57.0, g=400.0),
                 "ERROR 05-16 14:10:12 engine.py:135] RuntimeError('NCCL communicator was aborted')",
                 v0(1, 48, 3, 57.0, g=0.0), v0(2, 48, 7, 57.0, g=0.0))
    assert diagnosis(kit, text).verdict == "other_failure"


# --- the gate and the deciding line -----------------------------------------------------------------------

V1_LOGS = FIXTURES / "logs" / "v1"
GATED = {
    "saturation": V1_LOGS / "preemption_slowdown-llama31-8b-a10g-032-kv-90s-queue-persists-no-count.log",
    "stall": V1_LOGS / "other_failure-qwen25-72b-dp2-0111-engine001-stalled-colour.log",
    "error after the stats": V1_LOGS / "other_failure-gemma3-27b-tp2-01011-step-raises-after-input-dump.log",
}


@pytest.mark.parametrize("name", GATED)
def test_fail_on_warning_fails_on_saturation_a_stall_and_an_error_after_the_stats(name):
    result = run_cli("-q", "--fail-on", "warning", str(GATED[name]))
    assert result.returncode == 1, result.stderr.decode()


def test_fail_on_critical_fails_on_a_crash_whose_class_the_excerpt_cannot_tell(tmp_path):
    log = tmp_path / "cut.log"
    log.write_text(lines(v0(0, 48, 0, 87.0), "ERROR 05-16 14:11:15 worker_base.py:467] Error executing method "
                         "execute_model. This might cause deadlock in distributed execution."))
    plain = run_cli("--format", "json", str(log))
    assert plain.returncode == 3 and b'"severity": "critical"' in plain.stdout
    assert run_cli("-q", "--fail-on", "critical", str(log)).returncode == 1
    assert run_cli("-q", "--fail-on", "preemption_slowdown", str(log)).returncode == 0


def test_a_healthy_verdict_never_cites_a_saturated_peak_as_what_decided(kit):
    """One full interval among many is a burst: healthy, but the deciding line must not show the 100 % peak."""
    rows = [v1(i, 30, 0, 60.0 + i % 5) for i in range(20)]
    rows[7] = v1(7, 30, 2, 100.0)
    report = diagnose_text(kit, lines(*rows))
    assert report.diagnosis.verdict == "healthy"
    decided = next(line for line in render_text(report).splitlines() if line.startswith("Decided by:"))
    assert "100 %" not in decided and "above" not in decided
    assert "queue drained" in decided


def test_a_slowdown_below_the_line_never_cites_the_kv_peak_as_what_decided(kit):
    text = lines(*(v0(i, 2, 98 + i, 74 + i) for i in range(4)), PREEMPTED.format(m=11, s=5, mode="SWAP"),
                 v0(4, 2, 104, 80.0))
    report = diagnose_text(kit, text)
    said = render_text(report)
    decided = next(line for line in said.splitlines() if line.startswith("Decided by:"))
    assert "requests waited in the last" in decided and "KV cache peaked" not in decided
