"""The hostile shapes, in one place: the tests in this folder assert on them, and bench/fuzz.py seeds
its coverage-guided run with them (so the fuzzer starts from every known way to hurt the tool).
Plain data and pure functions: no pytest here."""
from __future__ import annotations

import hashlib
import re
import string

# --- the secret matrix's forms ---------------------------------------------------------------------

def random_text(seed: str, n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    """A deterministic random-looking string with at least one upper, lower and digit (vendors' shapes)."""
    digest = hashlib.sha256(seed.encode()).digest() * 8
    body = "".join(alphabet[b % len(alphabet)] for b in digest[:n])
    return body


def mixed(seed: str, n: int) -> str:
    return random_text(seed, n - 2) + "Q7"


# Form -> (template, what to fill in). Placeholders: {s} (and {t}) are the secrets.
FORMS: dict[str, tuple[str, dict[str, tuple[str, int]]]] = {
    "env VLLM_API_KEY": ("VLLM_API_KEY={s}", {"s": ("mixed", 24)}),
    "env OPENAI_API_KEY": ("OPENAI_API_KEY={s}", {"s": ("mixed", 24)}),
    "env DB_PASSWORD": ("DB_PASSWORD={s}", {"s": ("mixed", 16)}),
    "env PGPASSWORD": ("PGPASSWORD={s}", {"s": ("mixed", 16)}),
    "env SECRET_KEY": ("SECRET_KEY={s}", {"s": ("mixed", 20)}),
    "env GITHUB_TOKEN": ("GITHUB_TOKEN={s}", {"s": ("mixed", 20)}),
    "env HF_TOKEN": ("HF_TOKEN={s}", {"s": ("mixed", 20)}),
    "env HUGGING_FACE_HUB_TOKEN": ("HUGGING_FACE_HUB_TOKEN={s}", {"s": ("mixed", 20)}),
    "env AWS_SECRET_ACCESS_KEY": ("AWS_SECRET_ACCESS_KEY={s}", {"s": ("mixed", 40)}),
    "env REDIS_PASS": ("REDIS_PASS={s}", {"s": ("mixed", 14)}),
    "env quoted with spaces": ('DB_PASSWORD="{s} {t}"', {"s": ("mixed", 10), "t": ("mixed", 10)}),
    "dict api_key list": ("'api_key': ['{s}', '{t}']", {"s": ("mixed", 20), "t": ("mixed", 20)}),
    "namespace api_key": ("api_key='{s}'", {"s": ("mixed", 20)}),
    "namespace api_key list": ("api_key=['{s}', '{t}']", {"s": ("mixed", 20), "t": ("mixed", 20)}),
    "json api_key": ('"api_key": "{s}"', {"s": ("mixed", 20)}),
    "json client_secret": ('"client_secret":"{s}"', {"s": ("mixed", 20)}),
    "yaml password": ("password: {s}", {"s": ("mixed", 14)}),
    "flag --api-key": ("--api-key {s}", {"s": ("mixed", 20)}),
    "flag --api-key=": ("--api-key={s}", {"s": ("mixed", 20)}),
    "flag --password": ("--password {s}", {"s": ("mixed", 14)}),
    "flag --token": ("--token {s}", {"s": ("mixed", 20)}),
    "flag --hf-token": ("--hf-token {s}", {"s": ("mixed", 20)}),
    "url user:password": ("https://deploy:{s}@models.corp/llama", {"s": ("mixed", 14)}),
    "url empty user": ("redis://:{s}@redis:6379/0", {"s": ("mixed", 14)}),
    "url token as user": ("https://{s}@github.com/acme/m.git", {"s": ("mixed", 40)}),
    "bare user:password@host": ("admin:{s}@db.internal:5432", {"s": ("mixed", 14)}),
    "url ?token=": ("https://huggingface.co/m/resolve/main/config.json?token={s}", {"s": ("mixed", 20)}),
    "url ?hf=": ("http://mirror.corp/m?hf={s}&rev=main", {"s": ("mixed", 20)}),
    "header bearer": ("Authorization: Bearer {s}", {"s": ("mixed", 30)}),
    "header basic": ("Authorization: Basic {s}", {"s": ("mixed", 24)}),
    "header token scheme": ("authorization: Token {s}", {"s": ("mixed", 24)}),
    "header no scheme": ("{{'Authorization': '{s}'}}", {"s": ("mixed", 24)}),
    "header proxy": ("Proxy-Authorization: Basic {s}", {"s": ("mixed", 24)}),
    "header x-api-key": ("X-Api-Key: {s}", {"s": ("mixed", 24)}),
    "hf_ short": ("hf_{s}", {"s": ("mixed", 8)}),
    "hf_ long": ("hf_{s}", {"s": ("mixed", 34)}),
    "sk- openai": ("sk-proj-{s}", {"s": ("mixed", 40)}),
    "ghp_": ("ghp_{s}", {"s": ("mixed", 36)}),
    "github_pat_": ("github_pat_{s}", {"s": ("mixed", 60)}),
    "AKIA": ("AKIA{s}", {"s": ("upper", 16)}),
    "xoxb": ("xoxb-1234-{s}", {"s": ("mixed", 24)}),
    "glpat": ("glpat-{s}", {"s": ("mixed", 20)}),
    "AIza": ("AIza{s}", {"s": ("mixed", 35)}),
    "jwt": ("eyJhbGciOiJIUzI1NiJ9.eyJ{s}.{t}", {"s": ("mixed", 20), "t": ("mixed", 24)}),
    "pem": ("-----BEGIN RSA PRIVATE KEY-----MIIE{s}{t}-----END RSA PRIVATE KEY-----",
            {"s": ("mixed", 30), "t": ("mixed", 30)}),
    "argv --api-key": ("['vllm', 'serve', 'm', '--api-key', '{s}']", {"s": ("mixed", 20)}),
    "argv --hf-token": ('["vllm", "serve", "--hf-token", "{s}"]', {"s": ("mixed", 20)}),
    "argv --password": ("['psql', '--password', '{s}']", {"s": ("mixed", 14)}),
    "asgi x-api-key": ("[(b'host', b'h:8000'), (b'x-api-key', b'{s}')]", {"s": ("mixed", 24)}),
    "asgi authorization": ("[(b'authorization', b'{s}')]", {"s": ("mixed", 24)}),
    "asgi authorization basic": ("[(b'authorization', b'Basic {s}')]", {"s": ("mixed", 24)}),
    "header cookie": ("Cookie: session={s}; theme=dark; csrf={t}", {"s": ("mixed", 24), "t": ("mixed", 16)}),
    "header set-cookie": ("Set-Cookie: sid={s}; Path=/; HttpOnly", {"s": ("mixed", 24)}),
    "k8s env json": ('{{"name": "API_KEY", "value": "{s}"}}', {"s": ("mixed", 20)}),
    "k8s env python": ("{{'name': 'HF_TOKEN', 'value': '{s}'}}", {"s": ("mixed", 20)}),
    "k8s env object": ("V1EnvVar(name='DB_PASSWORD', value='{s}', value_from=None)", {"s": ("mixed", 14)}),
    "curl -u": ("curl -u admin:{s} https://models.corp/m", {"s": ("mixed", 14)}),
    "mysql -p": ("mysql -h db -uroot -p{s} llm", {"s": ("mixed", 14)}),
    "azure AccountKey": ("AccountKey={s};EndpointSuffix=core.windows.net", {"s": ("mixed", 40)}),
    "azure SharedAccessSignature": ("SharedAccessSignature={s}", {"s": ("mixed", 30)}),
    "odbc Password with a space": ("Server=tcp:db,1433;Password={s} {t};Encrypt=yes",
                                   {"s": ("mixed", 10), "t": ("mixed", 10)}),
}
# Forms without spaces or quotes can stand where a model name does (and become facts.model and the command).
MODEL_FORMS = {name for name, (template, _) in FORMS.items()
               if " " not in template and "'" not in template and '"' not in template}


def fill(form: str, placement: str) -> tuple[str, list[str]]:
    """The form with its own secrets for this placement: (text, the secrets in it)."""
    template, holes = FORMS[form]
    values = {}
    for hole, (kind, n) in holes.items():
        seed = f"{form}/{placement}/{hole}"
        values[hole] = random_text(seed, n, string.ascii_uppercase + string.digits) if kind == "upper" \
            else mixed(seed, n)
    return template.format(**values), list(values.values())


# --- the slow-line set ------------------------------------------------------------------------------

KV = ("(EngineCore_DP0 pid=310) ERROR 09-30 10:01:21 [core.py:708] ValueError: To serve at least one request with the "
      "models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the "
      "available KV cache memory "
      "(7.22 GiB). Based on the available memory, the estimated maximum model length is 59136. Try increasing "
      "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
_ERROR = "(APIServer pid=1) ERROR 09-30 10:00:04 [serving_chat.py:210] "

# name -> one hostile line (each a few hundred KB)
SLOW_LINES = {
    "unterminated OSC escapes": "\x1b]" * 200_000,
    "process groups without a close": "x" + "(pid=1" * 40_000,
    "pid= runs in one group": "x(" + "pid=1" * 40_000,
    "CSI starts": "\x1b[" * 200_000,
    "open parentheses": _ERROR + "(" * 400_000,
    "glued logger records": "INFO 01-01 00:00:00 " * 20_000,
    "deep JSON": '{"log": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "JSON openers": '{"log":' * 50_000,
    "secret lists never closed": _ERROR + "key=[ " * 70_000,
    "secret quotes never closed": _ERROR + "key=' " * 70_000,
    "secret names": _ERROR + "password=" * 50_000,
    "URL schemes": _ERROR + "a://" * 100_000,
    "user:password pieces": _ERROR + "a:b@" * 100_000,
    "query secrets": _ERROR + "?token" * 70_000,
    "authorization headers": _ERROR + "Authorization: " * 30_000,
    "PEM headers": _ERROR + "-----BEGIN PRIVATE KEY-----" * 15_000,
    "dotted words": _ERROR + "a." * 200_000,
    "a wrapped-looking line": "  " + "x" * 400_000,
    "prompt ids never closed": _ERROR + "prompt_ids: [" * 30_000,
    "prompts never closed": _ERROR + "prompt: \"a" + "prompt: 'x" * 40_000,
}


# --- the overflow corpus ----------------------------------------------------------------------------

ABSURD = ["1e400", "-1e400", "inf", "-inf", "nan", "NaN", "+Inf", "1" + "0" * 400, "9" * 5000, "0", "0.0", "-1",
          "1e-320", "999999999999999", "1e15", "-0"]
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
# Every line vLLM prints a figure in, with {n} for the figure ({s} a second, to keep the stats apart).
# The KV error comes first, so it decides, and the OOM line after it still gives the GPU's total.
LOG_LINES = [
    "(APIServer pid=1) INFO 09-30 10:00:02 [utils.py:328] non-default args: {{'model': 'm', 'max_model_len': {n}, "
    "'gpu_memory_utilization': {n}, 'tensor_parallel_size': {n}, 'max_num_seqs': {n}, 'block_size': {n}}}",
    "(EngineCore_DP0 pid=310) INFO 09-30 10:00:52 [gpu_model_runner.py:2007] Model loading took {n} GiB and "
    "{n} seconds",
    "(EngineCore_DP0 pid=310) DEBUG 09-30 10:01:20 [gpu_worker.py:276] Memory profiling takes {n} "
    "seconds. Total non KV "
    "cache memory: {n}GiB; torch peak memory increase: {n}GiB; non-torch forward increase memory: {n}GiB; weights "
    "memory: {n}GiB.",
    "(EngineCore_DP0 pid=310) INFO 09-30 10:01:20 [gpu_worker.py:298] Available KV cache memory: {n} GiB",
    "(EngineCore_DP0 pid=310) INFO 09-30 10:01:20 [kv_cache_utils.py:1150] GPU KV cache size: {n} tokens",
    "(EngineCore_DP0 pid=310) INFO 09-30 10:01:20 [kv_cache_utils.py:1150] Maximum concurrency for {n} tokens per "
    "request: {n}x",
    "(APIServer pid=1) INFO 09-30 10:02:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {n} tokens/s, Avg "
    "generation throughput: {n} tokens/s, Running: {n} reqs, Waiting: {n} reqs, GPU KV cache usage: {n}%, Prefix "
    "cache hit rate: {n}%",
    "(EngineCore_DP0 pid=310) ERROR 09-30 10:01:21 [core.py:708] ValueError: To serve at least one request with the "
    "models's max seq len ({n}), ({n} GiB KV cache is needed, which is larger than the available KV cache memory ({n} "
    "GiB). Based on the available memory, the estimated maximum model length is {n}. Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    "(EngineCore_DP0 pid=310) ERROR 09-30 10:03:00 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to "
    "allocate {n} GiB. GPU 0 has a total capacity of {n} GiB of which {n} MiB is free. Including non-PyTorch memory, "
    "this process has {n} GiB memory in use. Of the allocated memory {n} GiB is allocated by PyTorch, and {n} MiB is "
    "reserved by PyTorch but unallocated.",
]
# A /metrics snapshot with {n} for every value and {t} for a sample timestamp.
SNAPSHOT = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m"}} {n}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{model_name="m"}} {n}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{model_name="m"}} {n}
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{{model_name="m"}} {n}
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="{n}",gpu_memory_utilization="{n}",num_gpu_blocks="{n}",cache_dtype="auto"}} 1.0
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{{le="1.0",model_name="m"}} {n}
vllm:request_prompt_tokens_bucket{{le="+Inf",model_name="m"}} {n}
vllm:request_prompt_tokens_count{{model_name="m"}} {n}
vllm:request_prompt_tokens_sum{{model_name="m"}} {n}
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{gpu="0"}} {n} {t}
"""
