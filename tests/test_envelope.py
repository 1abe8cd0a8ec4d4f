"""Wrappers are stripped and the process identity is kept, whatever collector the log came through."""
from __future__ import annotations

import json

import pytest

from triage.logs.envelope import records, strip_ansi

LINE = "INFO 09-30 10:01:12 [gpu_model_runner.py:2007] Model loading took 15.2683 GiB and 9.81 seconds"
MESSAGE = "Model loading took 15.2683 GiB and 9.81 seconds"


def one(line: str):
    recs = list(records([(7, line)]))
    assert len(recs) == 1, recs
    return recs[0]


@pytest.mark.parametrize("wrapped", [
    LINE,
    "2025-07-07T15:19:48.123456789Z " + LINE,                                   # kubectl logs --timestamps
    "2025-07-07T15:19:48.1Z stdout F " + LINE,                                   # CRI
    "vllm-1  | " + LINE,                                                          # docker-compose
    "[2026-03-01T10:00:00.123Z] " + LINE,                                         # CI timestamp
    "  | " + LINE,                                                                # CI gutter
    "2026-05-01 18:50:31.839 | " + LINE,                                          # collector
    "Jul 07 15:19:48 gpu-node-3 vllm[1234]: " + LINE,                             # journald / syslog
    json.dumps({"log": LINE + "\n", "stream": "stdout", "time": "2025-07-07T15:19:48Z"}),  # docker json-file
    json.dumps({"message": LINE, "level": "info", "kubernetes": {"pod": "vllm-0"}}),        # Loki / Fluent Bit
    json.dumps({"msg": LINE, "ts": 1733000000}),
    "\x1b[32mINFO\x1b[0m \x1b[90m09-30 10:01:12\x1b[0m \x1b[90m[gpu_model_runner.py:2007]\x1b[0m " + MESSAGE,
    "^[[32mINFO^[[0m 09-30 10:01:12 [gpu_model_runner.py:2007] " + MESSAGE,        # caret remnants
    "[32mINFO[0m 09-30 10:01:12 [gpu_model_runner.py:2007] " + MESSAGE,           # bare remnants
    "[2026-03-01T10:00:00.123Z] 2025-07-07T15:19:48.123Z " + LINE,               # stacked
    "[INFO ] PyProcess - W-174-model-stdout: " + LINE,                            # DJL Serving
    "2024-01-15 09:12:31 | INFO | stdout | " + LINE,                              # FastChat worker
    "[Stage-1] " + LINE,                                                          # a framework's own tag
    "(WorkerDict pid=19114, ip=10.1.4.21) " + LINE + " [repeated 7x across cluster]",  # Ray log dedup
    "INFO:vllm.worker.model_runner:" + MESSAGE,                                   # host logging.basicConfig
    "2024-06-12 10:02:48,118 - vllm.worker.model_runner - INFO - " + MESSAGE,     # host logging format
], ids=["plain", "kubectl", "cri", "compose", "ci-ts", "ci-gutter", "collector", "syslog", "docker-json",
        "loki-message", "json-msg", "ansi", "caret", "bare", "stacked", "djl", "fastchat", "tag", "ray-dedup",
        "host-basic", "host-format"])
def test_wrappers_are_stripped(wrapped):
    rec = one(wrapped)
    assert rec.message == MESSAGE
    assert rec.level == "INFO"
    assert rec.line == 7


@pytest.mark.parametrize("prefix,process", [
    ("(APIServer pid=1) ", "APIServer pid=1"),
    ("(EngineCore_DP0 pid=1133552) ", "EngineCore_DP0 pid=1133552"),
    ("(EngineCore_0 pid=88) ", "EngineCore_0 pid=88"),
    ("(VllmWorker rank=3 pid=3016) ", "VllmWorker rank=3 pid=3016"),
    ("(VllmWorkerProcess pid=811) ", "VllmWorkerProcess pid=811"),
    ("(RayWorkerWrapper pid=206994, ip=192.168.10.25) ", "RayWorkerWrapper pid=206994"),
    ("(Worker_TP1 pid=8123) ", "Worker_TP1 pid=8123"),
    ("(RayWorkerWrapper pid=2, ip=10.0.0.3) (VllmWorker rank=1 pid=77) ", "VllmWorker rank=1 pid=77"),
    ("\x1b[1;36m(VllmWorkerProcess pid=90)\x1b[0;0m ", "VllmWorkerProcess pid=90"),
])
def test_process_prefixes_keep_identity(prefix, process):
    rec = one(prefix + LINE)
    assert rec.process == process
    assert rec.message == MESSAGE


def test_torch_rank_prefix():
    rec = one("(APIServer pid=1) [rank0]: Traceback (most recent call last):")
    assert rec.process == "APIServer pid=1 rank0"
    assert rec.message == "Traceback (most recent call last):"
    assert one("[rank3]:   File \"x.py\", line 1, in f").process == "rank3"


def test_old_prefix_without_brackets():
    rec = one("WARNING 12-16 21:40:15 scheduler.py:1489] Sequence group 7 is preempted")
    assert rec.level == "WARNING" and rec.timestamp == "12-16 21:40:15"
    assert rec.message == "Sequence group 7 is preempted"


def test_record_glued_after_tqdm_bar_is_split():
    line = ("Processed prompts:   0%|  | 34/10000 [00:29<3:36:54,  1.31s/it]INFO 06-16 21:24:15 metrics.py:341] "
            "Avg prompt throughput: 2706.1 tokens/s")
    recs = list(records([(1, line)]))
    assert [r.message for r in recs] == ["Processed prompts:   0%|  | 34/10000 [00:29<3:36:54,  1.31s/it]",
                                         "Avg prompt throughput: 2706.1 tokens/s"]
    assert all(r.line == 1 for r in recs)


def test_carriage_return_progress_bar_states():
    recs = list(records([(4,
                          "Capturing CUDA graph shapes:  10%|█| 3/35\rCapturing CUDA graph shapes: 100%|█| 35/35\r")]))
    assert len(recs) == 2 and recs[-1].message.endswith("35/35")


def test_docker_json_partial_line_is_joined():
    first = json.dumps({"log": "ValueError: To serve at least one request with the models's max seq",
                        "stream": "stderr"})
    second = json.dumps({"log": " len (131072), (16.00 GiB KV cache is needed\n", "stream": "stderr"})
    recs = list(records([(10, first), (11, second)]))
    assert len(recs) == 1
    assert recs[0].line == 10
    assert "max seq len (131072)" in recs[0].message


def test_cri_partial_line_is_joined():
    recs = list(records([(1, "2025-07-07T15:19:48.1Z stdout P ERROR 07-07 15:19:48 [core.py:1] CUDA out of mem"),
                         (2, "2025-07-07T15:19:48.1Z stdout F ory. Tried to allocate 2.00 GiB.")]))
    assert len(recs) == 1 and recs[0].message == "CUDA out of memory. Tried to allocate 2.00 GiB."


def test_vllm_json_logging_keeps_level_and_process():
    line = json.dumps({"asctime": "2026-01-01 10:00:00", "levelname": "ERROR", "name": "vllm.v1.engine.core",
                       "processName": "EngineCore", "process": 4127, "message": "EngineCore failed to start."})
    rec = one(line)
    assert rec.level == "ERROR" and rec.process == "EngineCore pid=4127"
    assert rec.message == "EngineCore failed to start."


def test_strip_ansi_leaves_plain_brackets():
    assert strip_ansi("[rank0]: x [core.py:12] y") == "[rank0]: x [core.py:12] y"


def test_wrapped_tail_is_marked_as_continuation():
    recs = list(records([(1, "(EngineCore_DP0 pid=5) ERROR 01-01 00:00:00 [core.py:1] GPU 0 has a total capa"),
                         (2, "city of 79.19 GiB of which 1.00 GiB is free.")]))
    assert not recs[0].continues_previous
    assert recs[1].continues_previous
