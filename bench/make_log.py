#!/usr/bin/env python3
"""Write a realistic vLLM server log of a given size and kind, deterministically.

serving (the default): a busy OpenAI-compatible V1 server: a normal startup, then hours of serving
with request logging (prompts of varied length), uvicorn access lines and a stats line every 10 s,
the odd warning, and near the end an out-of-memory error while serving with its traceback and the
engine's death.
stats-v1, stats-v0: a server run with --disable-log-requests and --disable-uvicorn-access-log:
a startup, then nothing but stats lines (V1 `Engine 000: ...` every 10 s; V0 `Avg prompt
throughput ...` every 5 s, the old prefix without brackets), the odd preemption, the same failure.
debug: VLLM_LOGGING_LEVEL=DEBUG: the engine's and the API server's DEBUG chatter (path-style file
tokens), a stats line every 10 s and the request lines between.
nccl: NCCL_DEBUG=INFO: eight ranks' `host:pid:tid [rank] NCCL INFO ...` lines around vLLM's own, a stats
line now and then.
syslog: a node's syslog (kernel, systemd, kubelet, containerd) with the server's lines forwarded into it.
mixed: a serving log with other programs' output interleaved (a training script's prints, torch's C++
warnings, NCCL INFO lines, a shell's echo).

usage: python bench/make_log.py OUT.log [--mb 1024] [--seed 1] [--kind KIND]   (KIND: one of KINDS below)
"""
from __future__ import annotations

import argparse
import datetime
import random

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by "
         "word but not what all were we when your can said there use an each which she do how their if will up "
         "other about out many then them these so some her would make like him into time has look two more write "
         "go see number no way could people my than first water been call who oil its now find long down day did "
         "get come made may part summarise translate explain code function error memory model server").split()

STARTUP = """\
(APIServer pid=1) INFO 11-29 21:00:01 [api_server.py:1885] vLLM API server version 0.10.2
(APIServer pid=1) INFO 11-29 21:00:01 [utils.py:328] non-default args: {{'model_tag': 'Qwen/Qwen2.5-32B-Instruct', 'host': '0.0.0.0', 'model': 'Qwen/Qwen2.5-32B-Instruct', 'max_model_len': 32768, 'gpu_memory_utilization': 0.92, 'tensor_parallel_size': 2, 'api_key': ['sk-FAKE00000000000000000000']}}
(APIServer pid=1) INFO 11-29 21:00:09 [model.py:1510] Using max model len 32768
(EngineCore_DP0 pid=311) INFO 11-29 21:00:12 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: model='Qwen/Qwen2.5-32B-Instruct', speculative_config=None, tokenizer='Qwen/Qwen2.5-32B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=2, pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto, enable_prefix_caching=True
(Worker_TP0 pid=405) INFO 11-29 21:00:31 [gpu_model_runner.py:2338] Starting to load model Qwen/Qwen2.5-32B-Instruct...
(Worker_TP0 pid=405) INFO 11-29 21:01:40 [default_loader.py:267] Loading weights took 67.01 seconds
(Worker_TP0 pid=405) INFO 11-29 21:01:41 [gpu_model_runner.py:2392] Model loading took 30.5316 GiB and 68.212345 seconds
(Worker_TP0 pid=405) INFO 11-29 21:02:10 [gpu_worker.py:298] Available KV cache memory: 39.86 GiB
(EngineCore_DP0 pid=311) INFO 11-29 21:02:11 [kv_cache_utils.py:864] GPU KV cache size: 326,544 tokens
(EngineCore_DP0 pid=311) INFO 11-29 21:02:11 [kv_cache_utils.py:868] Maximum concurrency for 32,768 tokens per request: 9.97x
(Worker_TP0 pid=405) INFO 11-29 21:02:40 [gpu_model_runner.py:3118] Graph capturing finished in 29 secs, took 1.12 GiB
(EngineCore_DP0 pid=311) INFO 11-29 21:02:41 [core.py:218] init engine (profile, create kv cache, warmup model) took 89.02 seconds
(APIServer pid=1) INFO 11-29 21:02:43 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Started server process [1]
(APIServer pid=1) INFO:     Waiting for application startup.
(APIServer pid=1) INFO:     Application startup complete.
"""  # noqa: E501 - log lines as vLLM prints them

FAILURE = """\
(EngineCore_DP0 pid=311) ERROR {ts} [dump_input.py:69] Dumping input data for V1 LLM engine (v0.10.2) with config: model='Qwen/Qwen2.5-32B-Instruct', speculative_config=None, 
(EngineCore_DP0 pid=311) ERROR {ts} [core.py:710] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=311) ERROR {ts} [core.py:710] Traceback (most recent call last):
(EngineCore_DP0 pid=311) ERROR {ts} [core.py:710]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 701, in run_engine_core
(EngineCore_DP0 pid=311) ERROR {ts} [core.py:710]     engine_core.run_busy_loop()
(EngineCore_DP0 pid=311) ERROR {ts} [core.py:710]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 728, in run_busy_loop
(EngineCore_DP0 pid=311) ERROR {ts} [core.py:710]     self._process_engine_step()
(EngineCore_DP0 pid=311) ERROR {ts} [core.py:710]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 237, in execute_model
(EngineCore_DP0 pid=311) ERROR {ts} [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.12 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.31 GiB is free. Including non-PyTorch memory, this process has 77.86 GiB memory in use. Of the allocated memory 74.92 GiB is allocated by PyTorch, and 1.01 GiB is reserved by PyTorch but unallocated.
(APIServer pid=1) ERROR {ts} [async_llm.py:480] AsyncLLM output_handler failed.
(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""  # noqa: E501, W291 - log lines as vLLM prints them, trailing space included


FAILURE_V0 = """\
ERROR {ts} async_llm_engine.py:57] Engine background task failed
ERROR {ts} async_llm_engine.py:57] Traceback (most recent call last):
ERROR {ts} async_llm_engine.py:57]   File "/usr/local/lib/python3.12/dist-packages/vllm/engine/async_llm_engine.py", line 47, in _log_task_completion
ERROR {ts} async_llm_engine.py:57]     return_value = task.result()
ERROR {ts} async_llm_engine.py:57]   File "/usr/local/lib/python3.12/dist-packages/vllm/worker/model_runner.py", line 1654, in execute_model
ERROR {ts} async_llm_engine.py:57]     hidden_or_intermediate_states = model_executable(
ERROR {ts} async_llm_engine.py:57] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.12 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.31 GiB is free. Including non-PyTorch memory, this process has 77.86 GiB memory in use. Of the allocated memory 74.92 GiB is allocated by PyTorch, and 1.01 GiB is reserved by PyTorch but unallocated.
"""  # noqa: E501 - log lines as vLLM prints them

_EPOCH = datetime.datetime(2025, 11, 29)


def stamp(t: int) -> str:
    """vLLM's yearless `MM-DD HH:MM:SS`, `t` seconds into 2025-11-29."""
    return (_EPOCH + datetime.timedelta(seconds=t)).strftime("%m-%d %H:%M:%S")


KINDS = ("serving", "stats-v1", "stats-v0", "debug", "nccl", "syslog", "mixed")

NCCL_LINES = (
    "{host}:{pid}:{tid} [{rank}] NCCL INFO Channel {c:02d}/32 : 0 1 2 3 4 5 6 7",
    "{host}:{pid}:{tid} [{rank}] NCCL INFO Channel {c:02d}/0 : {rank}[{rank}] -> {peer}[{peer}] via P2P/CUMEM/read",
    "{host}:{pid}:{tid} [{rank}] NCCL INFO Connected all rings",
    "{host}:{pid}:{tid} [{rank}] NCCL INFO Connected all trees",
    "{host}:{pid}:{tid} [{rank}] NCCL INFO threadThresholds 8/8/64 | 64/8/64 | 512 | 512",
    "{host}:{pid}:{tid} [{rank}] NCCL INFO {c} coll channels, 0 collnet channels, 0 nvls channels, 32 p2p channels, "
    "32 p2p channels per peer",
    "{host}:{pid}:{tid} [{rank}] NCCL INFO comm 0x{comm:x} rank {rank} nranks 8 cudaDev {rank} nvmlDev {rank} busId "
    "{bus:x}000 commId 0x{comm2:x} - Init COMPLETE",
    "{host}:{pid}:{tid} [{rank}] NCCL INFO P2P Chunksize set to 524288",
    "{host}:{pid}:{tid} [{rank}] NCCL INFO Setting affinity for GPU {rank} to ffff,ffffffff,00000000",
    "{host}:{pid}:{tid} [{rank}] NCCL INFO Trees [0] {peer}/-1/-1->{rank}->{c} [1] {peer}/-1/-1->{rank}->{c}",
)

SYSLOG_LINES = (
    "{when} {host} kernel: [{up}.{frac:06d}] eth0: renamed from veth{comm:x}",
    "{when} {host} kernel: [{up}.{frac:06d}] IPv6: ADDRCONF(NETDEV_CHANGE): cali{comm:x}: link becomes ready",
    "{when} {host} systemd[1]: Started Session {c} of User root.",
    "{when} {host} systemd[1]: run-containerd-runc-k8s.io-{comm:x}-runc.{tid}.mount: Deactivated successfully.",
    "{when} {host} kubelet[{pid}]: I1202 {clock}.{frac:06d} {pid} kubelet_getters.go:187] \"Pod status updated\" "
    "pod=\"serving/vllm-{comm:x}\" status=Running",
    "{when} {host} containerd[{tid}]: time=\"2025-12-02T{clock}.{frac:06d}Z\" level=info msg=\"ImageUpdate event "
    "name:\\\"registry.k8s.io/pause:3.9\\\"\"",
    "{when} {host} dockerd[{tid}]: time=\"2025-12-02T{clock}Z\" level=info msg=\"ignoring event\" module=libcontainerd",
    "{when} {host} CRON[{pid}]: (root) CMD (/usr/local/bin/node-exporter-textfile.sh)",
)

OTHER_LINES = (
    "step {c}: loss={loss:.4f} lr=3.0e-05 grad_norm={grad:.3f} tokens/s={tps}",
    "[W1202 {clock}.{frac:06d} {pid} ProcessGroupNCCL.cpp:4115] Warning: NCCL_BLOCKING_WAIT is deprecated",
    "{host}:{pid}:{tid} [{rank}] NCCL INFO Channel {c:02d}/32 : 0 1 2 3 4 5 6 7",
    "+ echo 'health check {c} ok'",
    "Epoch {rank}: {c}/5000 samples processed in {loss:.2f} s",
)


def _filled(template: str, rnd: random.Random, t: int) -> str:
    """A line of another program, its numbers drawn."""
    clock = stamp(t)[6:]
    return template.format(
        host=f"gpu-node-{rnd.randint(1, 4)}", pid=rnd.randint(1000, 99999), tid=rnd.randint(1000, 99999),
        rank=rnd.randint(0, 7), peer=rnd.randint(0, 7), c=rnd.randint(0, 31), comm=rnd.getrandbits(48),
        comm2=rnd.getrandbits(64), bus=rnd.randint(16, 255), up=rnd.randint(100, 999999), frac=rnd.randint(0, 999999),
        clock=clock, when=_syslog_time(t), loss=rnd.uniform(0.5, 3), grad=rnd.uniform(0.1, 9), tps=rnd.randint(1, 9999))


def _syslog_time(t: int) -> str:
    """syslog's `Mmm dd HH:MM:SS`, the day padded with a space."""
    when = _EPOCH + datetime.timedelta(seconds=t)
    return f"{when:%b} {when.day:2d} {when:%H:%M:%S}"

STARTUP_V0 = """\
INFO 08-06 09:00:01 api_server.py:212] vLLM API server version 0.6.3.post1
INFO 08-06 09:00:01 api_server.py:213] args: Namespace(host=None, port=8000, model='meta-llama/Meta-Llama-3.1-70B-Instruct', max_model_len=32768, gpu_memory_utilization=0.9, tensor_parallel_size=4, swap_space=4, disable_log_requests=True)
INFO 08-06 09:00:09 llm_engine.py:237] Initializing an LLM engine (v0.6.3.post1) with config: model='meta-llama/Meta-Llama-3.1-70B-Instruct', speculative_config=None, tokenizer='meta-llama/Meta-Llama-3.1-70B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=4, pipeline_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto, enable_prefix_caching=False
INFO 08-06 09:01:40 model_runner.py:1067] Loading model weights took 32.8885 GB
INFO 08-06 09:01:52 distributed_gpu_executor.py:57] # GPU blocks: 11021, # CPU blocks: 3276
INFO 08-06 09:01:52 distributed_gpu_executor.py:61] Maximum concurrency for 32768 tokens per request: 5.38x
INFO 08-06 09:02:20 model_runner.py:1523] Graph capturing finished in 28 secs.
INFO 08-06 09:02:21 launcher.py:19] Available routes are:
"""  # noqa: E501 - log lines as vLLM prints them

DEBUG_LINES = (
    "(EngineCore_DP0 pid=311) DEBUG {ts} [v1/engine/core.py:745] EngineCore loop active.",
    "(EngineCore_DP0 pid=311) DEBUG {ts} [v1/engine/core.py:739] EngineCore waiting for work.",
    "(EngineCore_DP0 pid=311) DEBUG {ts} [v1/core/sched/scheduler.py:{n}] Scheduled {r} requests, {t} tokens "
    "({p} prefill, {d} decode); {w} waiting.",
    "(EngineCore_DP0 pid=311) DEBUG {ts} [v1/worker/gpu_model_runner.py:{n}] Padding batch of {r} "
    "to cudagraph size {c}.",
    "(APIServer pid=1) DEBUG {ts} [v1/engine/async_llm.py:{n}] Called check_health.",
    "(APIServer pid=1) DEBUG {ts} [entrypoints/openai/api_server.py:{n}] Request chatcmpl-{rid} arrived; "
    "{t} prompt tokens, max_tokens={c}.",
    "(APIServer pid=1) DEBUG {ts} [v1/engine/output_processor.py:{n}] Request chatcmpl-{rid} streamed {d} tokens.",
    "(Worker_TP0 pid=405) DEBUG {ts} [distributed/device_communicators/shm_broadcast.py:{n}] Broadcast block {r} "
    "written by the writer; {w} readers pending.",
)


def _stats_line(rnd: random.Random, kind: str, ts: str) -> str:
    kv = min(99.9, max(5.0, rnd.gauss(55, 15)))
    if kind == "stats-v0":
        return (f"INFO {ts} metrics.py:351] Avg prompt throughput: {rnd.uniform(500, 9000):.1f} tokens/s, "
                f"Avg generation throughput: {rnd.uniform(300, 3000):.1f} tokens/s, Running: {rnd.randint(5, 60)} "
                f"reqs, Swapped: 0 reqs, Pending: {rnd.choice((0, 0, 0, rnd.randint(1, 40)))} reqs, GPU KV cache "
                f"usage: {kv:.1f}%, CPU KV cache usage: 0.0%.\n")
    return (f"(APIServer pid=1) INFO {ts} [loggers.py:123] Engine 000: Avg prompt throughput: "
            f"{rnd.uniform(500, 9000):.1f} tokens/s, Avg generation throughput: {rnd.uniform(300, 3000):.1f} "
            f"tokens/s, Running: {rnd.randint(5, 60)} reqs, Waiting: {rnd.choice((0, 0, 0, rnd.randint(1, 40)))} "
            f"reqs, GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: {rnd.uniform(10, 60):.1f}%\n")


def write(path: str, size: int, seed: int, kind: str = "serving") -> int:
    if kind == "serving":
        return _write_serving(path, size, seed)
    if kind == "mixed":
        return _write_serving(path, size, seed, others=True)
    rnd = random.Random(seed)
    written = lines = 0
    t = 21 * 3600 + 2 * 60 + 45
    head = STARTUP_V0 if kind == "stats-v0" else STARTUP.format()
    with open(path, "w", encoding="utf-8") as out:
        out.write(head)
        while written < size - 4096:
            if kind == "debug":
                t += rnd.choice((0, 0, 0, 1))
                ts = stamp(t)
                chunk = "".join(rnd.choice(DEBUG_LINES).format(
                    ts=ts, n=rnd.randint(100, 3000), r=rnd.randint(1, 256), t=rnd.randint(1, 8192),
                    p=rnd.randint(0, 8), d=rnd.randint(1, 256), w=rnd.randint(0, 40), c=rnd.choice((8, 16, 32, 64)),
                    rid=f"{rnd.getrandbits(64):016x}") + "\n" for _ in range(20))
                lines += 20
                if rnd.random() < 0.05:
                    chunk += _stats_line(rnd, "stats-v1", ts)
                    lines += 1
            elif kind in ("nccl", "syslog"):
                t += rnd.choice((0, 0, 0, 1))
                templates = NCCL_LINES if kind == "nccl" else SYSLOG_LINES
                chunk = "".join(_filled(rnd.choice(templates), rnd, t) + "\n" for _ in range(20))
                lines += 20
                if rnd.random() < 0.05:
                    stats = _stats_line(rnd, "stats-v1", stamp(t))
                    chunk += f"{_syslog_time(t)} gpu-node-1 vllm[1]: {stats}" if kind == "syslog" else stats
                    lines += 1
            else:
                t += 10 if kind == "stats-v1" else 5
                ts = stamp(t)
                chunk = _stats_line(rnd, kind, ts)
                lines += 1
                if kind == "stats-v0" and rnd.random() < 0.002:
                    chunk += (f"WARNING {ts} scheduler.py:1489] Sequence group cmpl-{rnd.getrandbits(64):016x}-0 is "
                              "preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
                              "This can affect the end-to-end performance. Increase gpu_memory_utilization or "
                              f"tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption="
                              f"{rnd.randint(1, 5000)}\n")
                    lines += 1
            out.write(chunk)
            written += len(chunk)
        failure = (FAILURE_V0 if kind == "stats-v0" else FAILURE).format(ts=stamp(t + 1))
        out.write(failure)
        lines += failure.count("\n")
    return lines + head.count("\n")


def _write_serving(path: str, size: int, seed: int, others: bool = False) -> int:
    """The serving log; with `others`, as many lines of other programs' output interleaved with it."""
    rnd = random.Random(seed)
    written = 0
    lines = 0
    t = 21 * 3600 + 2 * 60 + 45
    next_stats = t + 10
    with open(path, "w", encoding="utf-8") as out:
        out.write(STARTUP.format())
        request = 0
        while written < size - 4096:
            t += rnd.choice((0, 0, 0, 1))
            ts = stamp(t)
            request += 1
            rid = f"chatcmpl-{rnd.getrandbits(128):032x}"
            prompt = " ".join(rnd.choice(WORDS) for _ in range(int(rnd.expovariate(1 / 120)) + 5))
            chunk = (f"(APIServer pid=1) INFO {ts} [logger.py:43] Received request {rid}: prompt: '<|im_start|>user\\n"
                     f"{prompt}<|im_end|>\\n<|im_start|>assistant\\n', params: SamplingParams(n=1, "
                     "presence_penalty=0.0, "
                     f"frequency_penalty=0.0, temperature=0.7, top_p=0.8, max_tokens={rnd.randint(64, 2048)}), "
                     f"prompt_token_ids: None, prompt_embeds shape: None, lora_request: None.\n"
                     f"(APIServer pid=1) INFO {ts} [async_llm.py:317] Added request {rid}.\n"
                     "(APIServer pid=1) INFO:     "
                     f"10.42.{rnd.randint(0, 255)}.{rnd.randint(1, 254)}:{rnd.randint(30000, 60000)}"
                     f" - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n")
            lines += 3
            if t >= next_stats:
                next_stats = t + 10
                kv = min(99.9, max(5.0, rnd.gauss(55, 15)))
                chunk += (f"(APIServer pid=1) INFO {ts} [loggers.py:123] Engine 000: Avg prompt throughput: "
                          f"{rnd.uniform(500, 9000):.1f} tokens/s, Avg generation throughput: "
                          f"{rnd.uniform(300, 3000):.1f} "
                          f"tokens/s, Running: {rnd.randint(5, 60)} reqs, Waiting: 0 reqs, GPU KV "
                          f"cache usage: {kv:.1f}%, "
                          f"Prefix cache hit rate: {rnd.uniform(10, 60):.1f}%\n")
                lines += 1
            if others:
                chunk += "".join(_filled(rnd.choice(OTHER_LINES), rnd, t) + "\n" for _ in range(3))
                lines += 3
            if request % 50_000 == 0:
                chunk += (f"(APIServer pid=1) WARNING {ts} [protocol.py:81] The following fields were present in the "
                          f"request but ignored: {{'reasoning_effort'}}\n")
                lines += 1
            out.write(chunk)
            written += len(chunk)
        failure = FAILURE.format(ts=stamp(t + 1))
        out.write(failure)
        lines += failure.count("\n")
    return lines + STARTUP.count("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--mb", type=int, default=1024, help="size in MiB (default 1024)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kind", choices=KINDS, default="serving")
    args = parser.parse_args()
    lines = write(args.out, args.mb << 20, args.seed, args.kind)
    print(f"wrote {args.out}: {lines:,} lines")


if __name__ == "__main__":
    main()
