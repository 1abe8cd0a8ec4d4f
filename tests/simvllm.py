"""A simulated vLLM server's /metrics: prometheus-client's real registry and metric types, served by a
real HTTP server, with counters and gauges that move every tick the way a busy vLLM's do.

Run as a process (the tests start one per instance and read the port it prints):

    python tests/simvllm.py --scenario preempting [--mode ok|html|garbage|json|slow|forbidden] [--token T]
                            [--certfile C --keyfile K] [--dcgm-pod POD --dcgm-util 0.9]

Scenarios: healthy, preempting (V1 0.11+ names, counter climbing, KV pinned, queue growing),
saturating (V1 0.7/0.8 names: gpu_cache_usage_perc, no preemption counter, KV pinned with a queue),
v0-preempting (V0 names, no _created samples), dcgm (only dcgm-exporter's framebuffer gauges, for a
GPU that holds memory beyond vLLM's reservation).
"""
from __future__ import annotations

import argparse
import math
import random
import ssl
import sys
import threading
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

TICK_SECONDS = 0.2
GPU_TOTAL_MIB = 81559.0           # an H100 80GB HBM3 as dcgm-exporter reports it (used + free + reserved)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args) -> None:  # keep the test output clean
        pass


def build(scenario: str, model: str):
    """The registry and a tick() that moves it: everything a scrape sees comes from here."""
    import prometheus_client as pc
    if scenario == "v0-preempting":
        pc.disable_created_metrics()      # V0's vllm/engine/metrics.py does this process-wide
    registry = pc.CollectorRegistry()
    v0, old_v1 = scenario == "v0-preempting", scenario == "saturating"
    names = ["model_name"] if (v0 or old_v1) else ["engine", "model_name"]
    values = [model] if (v0 or old_v1) else ["0", model]
    if scenario == "dcgm":
        return registry, _dcgm(pc, registry)

    def gauge(name, doc):
        return pc.Gauge(name, doc, names, registry=registry).labels(*values)

    running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
    waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
    usage = gauge("vllm:gpu_cache_usage_perc" if (v0 or old_v1) else "vllm:kv_cache_usage_perc",
                  "KV-cache usage. 1 means 100 percent usage.")
    swapped = gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.") if v0 else None
    preemptions = None if old_v1 else pc.Counter(
        "vllm:num_preemptions", "Cumulative number of preemption from the engine.", names, registry=registry
    ).labels(*values)
    config = {"block_size": "16", "cache_dtype": "auto", "enable_prefix_caching": "True",
              "gpu_memory_utilization": "0.9", "num_cpu_blocks": "None", "num_gpu_blocks": "27053", "swap_space": "4"}
    if not (v0 or old_v1):
        config["engine"] = "0"
    info = pc.Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", sorted(config),
                    registry=registry)
    info.labels(**config).set(1)
    ttft = pc.Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", names,
                        buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                                 7.5, 10.0, 20.0, 40.0, 80.0], registry=registry).labels(*values)
    e2e = pc.Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", names,
                       buckets=[0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0],
                       registry=registry).labels(*values)
    per_request = None if (v0 or old_v1) else pc.Histogram(
        "vllm:request_num_preemptions", "Number of preemptions per finished request.", names,
        buckets=[0, 1, 2, 5, 10, 20], registry=registry).labels(*values)
    rng = random.Random(7)
    busy = scenario in ("preempting", "saturating", "v0-preempting")

    def tick(step: int) -> None:
        if busy:
            running.set(240 - step % 7)
            waiting.set(20 + step)                  # a queue that keeps growing
            usage.set(0.97 + 0.03 * abs(math.sin(step / 5)))
            if preemptions is not None:
                preemptions.inc(3)
            if swapped is not None:
                swapped.set(step % 4)
        else:
            running.set(10 + step % 5)
            waiting.set(0)
            usage.set(0.25 + 0.1 * abs(math.sin(step / 9)))
        for _ in range(4):
            ttft.observe(rng.uniform(2.0, 9.0) if busy else rng.uniform(0.03, 0.2))
            e2e.observe(rng.uniform(12.0, 45.0) if busy else rng.uniform(1.0, 4.0))
            if per_request is not None:
                per_request.observe(rng.choice([0, 0, 1, 2]) if busy else 0)
    return registry, tick


def _dcgm(pc, registry):
    labels = {"DCGM_FI_DRIVER_VERSION": "550.54.15", "Hostname": "gpu-node-3", "UUID": "GPU-5a8d3c1e-1f0b-4c2e",
              "device": "nvidia0", "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3"}
    if ARGS.dcgm_pod:
        labels.update({"container": "vllm", "namespace": "llm", "pod": ARGS.dcgm_pod})
    names = sorted(labels)
    used = pc.Gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", names,
                    registry=registry).labels(**labels)
    free = pc.Gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", names,
                    registry=registry).labels(**labels)
    reserved = pc.Gauge("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", names,
                        registry=registry).labels(**labels)

    def tick(step: int) -> None:
        mib = GPU_TOTAL_MIB * ARGS.dcgm_util + 6144 + 64 * (step % 3)   # vLLM's share plus ~6 GiB of someone else
        reserved.set(489)
        used.set(mib)
        free.set(GPU_TOTAL_MIB - mib - 489)
    return tick


def app(metrics_app, mode: str, token: str | None):
    """Wrap the registry's WSGI app with the ways a wrong endpoint answers."""
    def serve(environ, start_response):
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"404 page not found\n"]
        if token and environ.get("HTTP_AUTHORIZATION") != f"Bearer {token}":
            start_response("401 Unauthorized", [("Content-Type", "application/json")])
            return [b'{"error": "Unauthorized"}']
        if mode == "forbidden":
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"RBAC: access denied\n"]
        if mode == "html":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [b"<!DOCTYPE html><html><head><title>Grafana</title></head><body>login</body></html>\n"]
        if mode == "json":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [b'{"object": "list", "data": [{"id": "Qwen/Qwen3-8B"}]}\n']
        if mode == "garbage":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"# HELP x y\nthis is { not metrics at all\n"]
        if mode == "slow":
            time.sleep(5)
        return metrics_app(environ, start_response)
    return serve


def main() -> None:
    import prometheus_client as pc
    registry, tick = build(ARGS.scenario, ARGS.model)
    server = make_server("127.0.0.1", ARGS.port, app(pc.make_wsgi_app(registry), ARGS.mode, ARGS.token),
                         _Server, handler_class=_Quiet)
    if ARGS.certfile:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(ARGS.certfile, ARGS.keyfile)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    tick(0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"PORT {server.server_port}", flush=True)
    step = 1
    while True:
        time.sleep(TICK_SECONDS)
        tick(step)
        step += 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="healthy",
                        choices=["healthy", "preempting", "saturating", "v0-preempting", "dcgm"])
    parser.add_argument("--mode", default="ok", choices=["ok", "html", "json", "garbage", "slow", "forbidden"])
    parser.add_argument("--model", default="Qwen/Qwen3-8B")
    parser.add_argument("--token")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--certfile")
    parser.add_argument("--keyfile")
    parser.add_argument("--dcgm-pod")
    parser.add_argument("--dcgm-util", type=float, default=0.9)
    ARGS = parser.parse_args()
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
