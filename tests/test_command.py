"""The command to paste is the incident's own launch with the fix applied, and every flag in it is one that
vLLM release's parser accepts (triage/report/vllm_args.json, extracted from the release wheels)."""
from __future__ import annotations

import json
import re
import tomllib

import pytest

from triage.model import Fix
from triage.report.command import (
    API_SERVER,
    SERVE,
    argument_list,
    build_command,
    check_command,
    known_releases,
    read_launch,
    release_key,
)

from conftest import FIXTURES, SHARED, diagnose_files, diagnose_text, run_cli

MANIFEST = tomllib.loads((FIXTURES / "manifest.toml").read_text())["fixture"]
LABELS = [case for name in ("labels.json", "labels-2.json") if (SHARED / "real-logs" / name).exists()
          for case in json.loads((SHARED / "real-logs" / name).read_text())]
README_EXAMPLE = FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log"


def _assert_parses(report, version: str | None) -> None:
    launch = report.launch
    args, _ = argument_list(version)
    assert check_command(report.command, args, launch.complete) == [], report.command
    lead = report.diagnosis.fixes[launch.fix_index - 1]
    assert lead.status == "checked" and lead.flag
    assert all(f.status != "checked" or not f.flag or f.value is None
               for f in report.diagnosis.fixes[:launch.fix_index - 1]), "the first checked flag fix leads"
    words = report.command.replace("LLM(", " ").replace("=", " ").replace(",", " ").split()

    def carried(setting: str) -> bool:                 # a flag, an LLM() keyword, or VAR=value
        return setting in words or setting.lstrip("-").replace("-", "_") in words or \
            ("=" in setting and setting in report.command.split())
    for setting in launch.changed:
        assert carried(setting), (setting, report.command)
    if launch.complete:
        for setting in launch.kept:                # every other setting the incident ran with is carried over
            assert carried(setting), (setting, report.command)


@pytest.mark.parametrize("entry", MANIFEST, ids=lambda e: e["file"])
def test_every_fixture_command_keeps_the_incident_settings_and_parses(kit, entry):
    report = diagnose_files(kit, FIXTURES / "logs" / entry["file"])
    if report.command is None:
        assert not any(f.status == "checked" and f.flag and f.value is not None for f in report.diagnosis.fixes)
        return
    _assert_parses(report, entry.get("vllm_version"))
    if report.launch.complete and "vllm_version" in report.diagnosis.facts:
        assert report.launch.vllm_version == argument_list(entry.get("vllm_version"))[0].release


def _label_version(case: dict) -> str | None:
    m = re.match(r"\s*(\d+\.\d+(?:\.\d+)?(?:\.post\d+)?)", case.get("vllm_version") or "")
    return m.group(1) if m else None


@pytest.mark.skipif(not LABELS, reason="../shared/real-logs is not next to this checkout")
@pytest.mark.parametrize("case", LABELS, ids=[c["file"].rsplit("/", 1)[-1] for c in LABELS])
def test_every_real_excerpt_command_parses_with_its_release(kit, case):
    report = diagnose_files(kit, SHARED / "real-logs" / case["file"])
    if report.command is not None:
        _assert_parses(report, _label_version(case))


def test_the_readme_example_keeps_its_rope_scaling_and_hides_the_token(kit):
    report = diagnose_files(kit, README_EXAMPLE)
    launch = report.launch
    assert launch.complete and launch.vllm_version == "0.10.2" and launch.program == SERVE
    assert report.command == ("vllm serve Qwen/Qwen2.5-7B-Instruct --host 0.0.0.0 --hf-overrides "
                              "'{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                              "\"original_max_position_embeddings\": 32768}}' --max-model-len 75440")
    assert "hf_" not in report.command
    assert launch.not_recovered == ("--hf-token (a secret the log hides: add your own)",)


def test_a_namespace_keeps_what_differs_from_that_release_defaults(kit):
    """0.2.x prints every argument and no version: the Namespace's keys name the release."""
    report = diagnose_files(kit, FIXTURES / "logs" / "v0-old" / "weights_dont_fit-llama2-70b-one-a100-torch20.log.xz")
    launch = report.launch
    assert launch.vllm_version == "0.2.1.post1" and launch.program == API_SERVER
    assert report.command.startswith(f"{API_SERVER} --model meta-llama/Llama-2-70b-chat-hf ")
    assert "--served-model-name llama-2-70b-chat" in report.command and "--dtype float16" in report.command
    assert "--block-size" not in report.command and "--max-num-seqs" not in report.command   # the defaults
    assert report.command.endswith("--tensor-parallel-size 4")
    assert "Namespace lists exactly the arguments of this release" in launch.release_basis


ENGINE_CONFIG_ONLY = """\
INFO 12-16 21:38:44 llm_engine.py:234] Initializing a V0 LLM engine (v0.7.3) with config: model='mistralai/Mistral-7B-Instruct-v0.3', speculative_config=None, tokenizer='mistralai/Mistral-7B-Instruct-v0.3', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, load_format=LoadFormat.AUTO, tensor_parallel_size=1, pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=True, kv_cache_dtype=auto, device_config=cuda, seed=0, served_model_name=mistralai/Mistral-7B-Instruct-v0.3
INFO 12-16 21:39:30 worker.py:267] Memory profiling takes 5.21 seconds
INFO 12-16 21:39:30 worker.py:267] the current vLLM instance can use total_gpu_memory (23.69GiB) x gpu_memory_utilization (0.85) = 20.14GiB
INFO 12-16 21:39:30 worker.py:267] model weights take 13.51GiB; non_torch_memory takes 0.11GiB; PyTorch activation peak memory takes 2.42GiB; the rest of the memory reserved for KV Cache is 4.10GiB.
INFO 12-16 21:39:30 executor_base.py:111] # cuda blocks: 2099, # CPU blocks: 2048
INFO 12-16 21:39:30 executor_base.py:116] Maximum concurrency for 32768 tokens per request: 1.02x
ERROR 12-16 21:39:31 engine.py:366] The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (33584). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""  # noqa: E501 - log lines as vLLM prints them


def test_the_engine_config_alone_gives_what_to_add_not_a_whole_command(kit):
    text = ENGINE_CONFIG_ONLY.replace("(33584)", "(31584)").replace("1.02x", "0.96x").replace("2099", "1974")
    report = diagnose_text(kit, text)
    launch = report.launch
    assert report.diagnosis.verdict == "kv_cache_too_small" and not launch.complete
    assert report.command == "--max-model-len 31584"
    assert "--enforce-eager" in launch.kept             # what it saw, listed, not pretended to be the command
    assert any("engine config, not the command" in item for item in launch.not_recovered)
    out = run_cli("-", stdin=text.encode()).stdout.decode()
    assert "Add to your command (fix 1; the log does not show the whole launch command" in out
    assert "  --max-model-len 31584\n" in out


SECRETS = """\
(APIServer pid=1) INFO 09-30 10:00:01 [api_server.py:1816] vLLM API server version 0.10.2
(APIServer pid=1) INFO 09-30 10:00:02 [utils.py:328] non-default args: {'model_tag': 'Qwen/Qwen2.5-7B-Instruct', 'api_key': ['sk-live-abcdefghijklmnopqrstuvwxyz'], 'model': 'Qwen/Qwen2.5-7B-Instruct', 'max_model_len': 32768, 'hf_token': 'hf_abcdefghijklmnopqrstuvwxyz0123', 'enable_prefix_caching': False, 'served_model_name': ['qwen']}
(EngineCore_DP0 pid=80) INFO 09-30 10:00:40 [gpu_model_runner.py:2007] Model loading took 14.25 GiB and 9.812345 seconds
(EngineCore_DP0 pid=80) INFO 09-30 10:01:05 [gpu_worker.py:298] Available KV cache memory: 1.13 GiB
(EngineCore_DP0 pid=80) ERROR 09-30 10:01:06 [core.py:708] ValueError: To serve at least one request with the models's max seq len (32768), (1.75 GiB KV cache is needed, which is larger than the available KV cache memory (1.13 GiB). Based on the available memory, the estimated maximum model length is 21136. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""  # noqa: E501 - log lines as vLLM prints them


@pytest.mark.parametrize("redact", [True, False])
def test_secrets_never_reach_the_command(kit, redact):
    report = diagnose_text(kit, SECRETS, redact=redact)
    assert report.command == ("vllm serve Qwen/Qwen2.5-7B-Instruct --no-enable-prefix-caching "
                              "--served-model-name qwen --max-model-len 21136")
    assert "--api-key (a secret the log hides: add your own)" in report.launch.not_recovered
    assert "--hf-token (a secret the log hides: add your own)" in report.launch.not_recovered
    assert check_command(report.command, argument_list("0.10.2")[0]) == []


def test_an_embedded_engine_gets_its_llm_call(kit):
    report = diagnose_files(kit, FIXTURES / "logs" / "v1"
                            / "weights_dont_fit-qwen25-14b-l4-offline-inproc-container-pid.log")
    assert report.launch.program == "LLM(...)"
    assert report.command == ("LLM(model='Qwen/Qwen2.5-14B-Instruct', max_model_len=8192, seed=0, "
                              "disable_log_stats=True, enforce_eager=True, tensor_parallel_size=2)")
    assert check_command(report.command, argument_list("0.11.0")[0]) == []


def test_a_fix_the_release_does_not_have_is_not_made_the_command():
    fix = Fix(action="--kv-cache-memory-bytes 8G", why="", flag="--kv-cache-memory-bytes", value="8G", status="checked")
    older, newer = argument_list("0.10.1.1")[0], argument_list("0.10.2")[0]
    launch = read_launch([], older)
    assert build_command(launch, fix, older, 1) is None
    built = build_command(read_launch([], newer), fix, newer, 1)
    assert built is not None and built.text == "--kv-cache-memory-bytes 8G" and not built.complete


def test_an_environment_variable_fix_leads_the_command():
    fix = Fix(action="VLLM_CPU_KVCACHE_SPACE=8", why="", flag="VLLM_CPU_KVCACHE_SPACE", value=8, status="checked")
    args = argument_list("0.32.0")[0]
    built = build_command(read_launch([], args), fix, args, 1)
    assert built.text == "VLLM_CPU_KVCACHE_SPACE=8" and built.changed == ("VLLM_CPU_KVCACHE_SPACE=8",)


@pytest.mark.parametrize("command,problem", [
    ("vllm serve m --max-model-len", "--max-model-len needs a value"),
    ("vllm serve m --max-modle-len 4096", "--max-modle-len is not an argument of vLLM 0.10.2"),
    ("vllm serve m --enforce-eager=yes", "--enforce-eager is a switch and takes no value"),
    ("vllm serve m --max-model-len 4096 8192", "stray value '8192'"),
    ("vllm serve m --no-max-model-len", "--no-max-model-len is not an argument of vLLM 0.10.2"),
    ("vllm run m", "does not start with"),
])
def test_the_check_refuses_what_vllm_would(command, problem):
    problems = check_command(command, argument_list("0.10.2")[0])
    assert any(p.startswith(problem) for p in problems), problems


def test_the_argument_lists_cover_every_release_and_their_history():
    releases = known_releases()
    assert releases[0] == "0.2.0" and releases[-1] == "0.33.0" and len(releases) >= 90
    for entry in MANIFEST:                               # every fixture's release is there, or its nearest
        if re.match(r"\d", entry.get("vllm_version") or ""):
            release = argument_list(entry["vllm_version"])[0].release
            assert release_key(release) <= release_key(entry["vllm_version"])
    has = {r: argument_list(r)[0].arguments for r in ("0.4.0.post1", "0.10.1.1", "0.10.2", "0.33.0")}
    assert all("--max-model-len" in a and "--gpu-memory-utilization" in a for a in has.values())
    assert "--kv-cache-memory-bytes" not in has["0.10.1.1"] and "--kv-cache-memory-bytes" in has["0.10.2"]
    assert "--hf-overrides" not in has["0.4.0.post1"] and "--hf-overrides" in has["0.10.2"]
    assert has["0.10.2"]["--enforce-eager"]["value"] is False and has["0.10.2"]["--enforce-eager"].get("negatable")
    assert argument_list("0.5.1")[0].program == API_SERVER and argument_list("0.5.2")[0].program == SERVE
    assert argument_list("0.15.2rc1.dev93")[0].release == "0.15.1"         # a dev build runs the release before


def test_a_cut_args_line_is_not_taken_for_the_whole_command(kit):
    whole = (FIXTURES / "logs" / "v0-late" / "kv_cache_too_small-llama31-70b-tp4-a100-40g-128k.log").read_text()
    lines = whole.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "args: Namespace(" in line)
    cut = lines[at][:lines[at].index(", max_model_len=")] + "\n"            # a ticket's paste cut the line
    report = diagnose_text(kit, "".join(lines[:at] + [cut] + lines[at + 1:]))
    assert not report.launch.complete and report.command == "--max-model-len 33872"
    assert "the rest of the args: Namespace line (it is cut)" in report.launch.not_recovered
    full = diagnose_files(kit, FIXTURES / "logs" / "v0-late" / "kv_cache_too_small-llama31-70b-tp4-a100-40g-128k.log")
    assert full.launch.complete and "--tensor-parallel-size 4" in full.command


def test_without_a_version_non_default_args_name_the_newest_release_that_has_them(kit):
    """--rope-scaling left vLLM after 0.11.0: a log that names no version but sets it ran 0.11.0 or before,
    and the command keeps the rope scaling its length needs."""
    report = diagnose_files(kit,
                            FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen3-8b-0105-error-reflowed-and-glued.log")
    assert "vllm_version" not in report.diagnosis.facts
    assert report.launch.vllm_version == "0.11.0" and report.launch.not_recovered == ()
    assert report.command.startswith("vllm serve Qwen/Qwen3-8B --rope-scaling '{\"rope_type\": \"yarn\", ")
    assert "--rope-scaling" not in argument_list("0.33.0")[0].arguments


def test_the_cpu_kv_cache_space_the_log_shows_is_kept_as_its_variable(kit):
    """vLLM's CPU worker says "Explicitly set (1.0/13.59) GiB for KV cache": with no --kv-cache-memory-bytes
    among the non-default args, that was VLLM_CPU_KVCACHE_SPACE=1."""
    embedded = diagnose_files(kit,
                              FIXTURES / "logs" / "cpu" / "kv_cache_too_small-tiny-llama-0320-embedded-llm-128k.log")
    assert embedded.command.startswith("VLLM_CPU_KVCACHE_SPACE=1 LLM(model='/scratch/tiny-llama', ")
    assert "VLLM_CPU_KVCACHE_SPACE=1" in embedded.launch.kept
    flagged = diagnose_files(kit, FIXTURES / "logs" / "cpu"
                             / "kv_cache_too_small-tiny-llama-0320-128k-kv-cache-memory-bytes.log")
    assert "VLLM_CPU_KVCACHE_SPACE" not in flagged.command and "--kv-cache-memory-bytes 1073741824" in flagged.command
    assert "--port 8011" in flagged.command
