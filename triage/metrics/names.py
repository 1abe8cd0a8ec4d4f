"""The names vLLM (and dcgm-exporter, prometheus-client) give the series vtriage reads, by quantity."""

# Each tuple lists one quantity's names, preferred first; only the first name present is read.
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")
RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
SWAPPED = ("vllm:num_requests_swapped",)
CACHE_CONFIG = ("vllm:cache_config_info",)
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total",
                  "vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total",
               "vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits")
PREFIX_HIT_RATE = ("vllm:gpu_prefix_cache_hit_rate",)            # V0's own gauge, 0-1
REQUEST_PREEMPTIONS = ("vllm:request_num_preemptions",)          # histogram, 0.30+
REQUESTS_FINISHED = ("vllm:request_success_total", "vllm:request_success")
PROCESS_START = "process_start_time_seconds"                     # prometheus-client's process collector (Linux)
# (fact prefix, histogram names, unit suffix of the fact)
HISTOGRAMS = (
    ("ttft", ("vllm:time_to_first_token_seconds",), "_seconds"),
    ("e2e_latency", ("vllm:e2e_request_latency_seconds",), "_seconds"),
    ("queue_time", ("vllm:request_queue_time_seconds", "vllm:time_in_queue_requests"), "_seconds"),
    ("inter_token_latency", ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"), "_seconds"),
    ("prompt_tokens", ("vllm:request_prompt_tokens",), ""),
    ("generation_tokens", ("vllm:request_generation_tokens",), ""),
)
DCGM_USED, DCGM_FREE, DCGM_RESERVED = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"
V0_ONLY = ("vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc", "vllm:gpu_prefix_cache_hit_rate")
