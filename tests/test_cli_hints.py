"""Every option a hint tells the user to give exists on the command that printed it, and giving it answers it.

A hint is "give --X ..." (a prediction's unknown, a fix's status, a usage or input error) or a NEEDS_* phrase
that a renderer prefixes with "give". The phrases are collected from the package's source, so a new one cannot
be missed; which command prints which is found by running the commands on the fixture logs (and, for the hints
no fixture log reaches, on inputs made to reach them).
"""
from __future__ import annotations

import ast
import functools
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from triage import cli as cli_module
from triage.capacity.predict import NEEDS_GPU
from triage.cli import cli
from triage.errors import TriageError

from conftest import CONFIGS, FIXTURES, ROOT, config_entries, run_cli

PACKAGE = ROOT / "triage"
LOGS = sorted((FIXTURES / "logs").rglob("*.log"))
QWEN_L4 = str(FIXTURES / "logs" / "v1" / "kv_cache_too_small-qwen25-7b-yarn-128k-l4-est-maxlen.log")  # no GPU total
SMI = str(ROOT / "tests" / "data" / "gpu" / "nvidia-smi-h100-notebook.txt")
METRICS = [str(FIXTURES / "metrics" / f"v1-preempting-{i}.prom") for i in (0, 1)]
# A utilization change is sized with the GPU's memory, a quantization change with the model's sizes.
CHANGES = ("--gpu-memory-utilization", "0.95", "--quantization", "awq")
OPTION = re.compile(r"--[a-z][a-z-]+")
GPU_COMMANDS = ("diagnose", "whatif", "check", "diff")


# --- the hints the source can print -------------------------------------------------------------------

def _phrase(text: str) -> str:
    """What a hint asks for, up to the parenthesis, quote or sentence around it: "--gpu NAME or --gpu-memory-gib"
    of "(give --gpu NAME or --gpu-memory-gib): a utilization change cannot be sized"."""
    depth = 0
    for end, char in enumerate(text):
        if depth == 0 and (char in ')";' or text.startswith(". ", end)):
            return text[:end].strip()
        depth += (char == "(") - (char == ")")
    return text.strip().rstrip(".")


@functools.cache
def source_phrases() -> tuple[str, ...]:
    """Every "give --X ..." in the package's strings (an f-string's too: its literal parts are constants) and
    every NEEDS_* constant; longest first, so that a phrase is matched whole rather than as one it starts with."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.startswith("NEEDS_")
                                                    for t in node.targets):
                found.add(_phrase(ast.literal_eval(node.value)))
            if isinstance(node, ast.Constant) and isinstance(text := node.value, str):
                found.update(_phrase(text[m.end():]) for m in re.finditer(r"\bgive (?=--[a-z])", text))
    return tuple(sorted(found, key=len, reverse=True))


def _pattern(phrase: str) -> str:
    """A phrase as printed: wrapped to the terminal anywhere a space is."""
    return r"\s+".join(re.escape(word) for word in phrase.split())


@functools.cache
def _phrase_regexes() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((phrase, re.compile(_pattern(phrase))) for phrase in source_phrases())


def hints_in(output: str) -> set[str]:
    """The source phrases `output` asks the user to give ("give A", or "give A; B" for a fix that needs two);
    a "give --X" that is none of them fails the test."""
    found = set()
    for give in re.finditer(r"\bgive\s+(?=--[a-z])", output):
        at, matched = give.end(), False
        while phrase_at := next(((p, m) for p, regex in _phrase_regexes() if (m := regex.match(output, at))), None):
            phrase, match = phrase_at
            found.add(phrase)
            matched = True
            separator = re.compile(r";\s+").match(output, match.end())
            if separator is None:
                break
            at = separator.end()
        assert matched, f"a hint the source scan does not know: {output[give.start():give.start() + 80]!r}"
    return found


def alternatives(phrase: str) -> list[str]:
    """The options that answer `phrase` alone: those outside its parentheses ("--model-config config.json
    (with --gpu NAME ...) or --from-log LOG" is answered by --model-config or --from-log; --gpu goes with one)."""
    depth, outside = 0, []
    for char in phrase:
        depth += char == "("
        if depth == 0:
            outside.append(char)
        depth -= char == ")" and depth > 0
    return OPTION.findall("".join(outside))


# --- running the commands --------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _rules_loaded_once(monkeypatch):
    monkeypatch.setattr(cli_module, "load_toolkit", _cached_toolkit)


_cached_toolkit = functools.lru_cache(maxsize=None)(cli_module.load_toolkit)


def _command(args: list[str]) -> str:
    return args[0] if args[0] in cli.commands else "diagnose"


def invoke(args: list[str]) -> tuple[int, str]:
    """The command in-process; a TriageError is printed as `vtriage` prints it (one line with its hint)."""
    result = CliRunner().invoke(cli, args)
    if isinstance(result.exception, TriageError):
        return result.exception.exit_code, f"{result.output}vtriage: error: {result.exception}\n"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: {type(result.exception).__name__}: {result.exception}") from result.exception
    return result.exit_code, result.output


@functools.cache
def _configs_by_model() -> dict[str, str]:
    return {model: str(CONFIGS / entry["file"]) for entry in config_entries() for model in entry["serves"]}


@functools.cache
def _config_for(log: str) -> str | None:
    """The config.json of the model `log` serves, when fixtures/configs has it."""
    _, output = invoke(["--format", "json", log])
    model = json.loads(output)["facts"].get("model")
    return _configs_by_model().get(model["value"]) if model else None


def value_for(option: str, args: list[str]) -> list[str] | None:
    """What to give for `option` on the command line `args`; None when no fixture fits (no config.json of the
    log's model)."""
    if option == "--model-config":
        log = next((a for a in args if a.startswith(str(FIXTURES / "logs"))), None)
        config = _config_for(log) if log else str(CONFIGS / "qwen3-8b.json")   # from a config: any will do
        return [option, config] if config else None
    return {"--gpu": [option, "H100"], "--gpu-memory-gib": [option, "79.19"], "--metrics": [option, METRICS[1]],
            "--from-log": [option, QWEN_L4], "--format": [option, "json"], "--interval": [option, "5"],
            "--since": [option, "2025-01-31T12:00:00Z"], "--until": [option, "2025-01-31T15:00:00Z"]}[option]


def _sweep() -> list[list[str]]:
    """The diagnosis and the what-if (under CHANGES) of every fixture log."""
    return [case for log in map(str, LOGS) for case in ([log], ["whatif", log, *CHANGES])]


def _same_questions(args: list[str]) -> list[list[str]]:
    """The commands that print what `args` printed, and so can ask for the same: diff shows the diagnoses of its
    logs (in JSON, the only form that has the fixes' predictions), check --from-log the what-if of its log."""
    if len(args) == 1:
        return [["diff", args[0], args[0], "--format", "json"]]
    if _command(args) == "whatif":
        return [["check", "--from-log", *args[1:]]]
    return []


def _made_to_reach(tmp: Path) -> list[list[str]]:
    """Hints no fixture log reaches, each on an input made to reach it."""
    same_time = []
    for path in METRICS:                 # snapshots without timestamps, written at the same time: order only
        copy = tmp / Path(path).name
        shutil.copy(path, copy)
        os.utime(copy, (1_700_000_000, 1_700_000_000))
        same_time.append(str(copy))
    return [
        ["check"],
        ["check", "--model-config", str(CONFIGS / "qwen3-8b.json")],
        ["gpu", "--json", "--format", "text", "--from", SMI],
        ["--prometheus", "http://127.0.0.1:9", "--since", "2025-01-31T14:05:00Z", "--until", "2025-01-31T13:00:00Z"],
        ["--format", "json", "--metrics", same_time[0], "--metrics", same_time[1]],
    ]


def test_every_hint_names_an_option_its_command_takes_and_giving_it_answers_the_hint(tmp_path):
    seen: dict[str, set[str]] = {}                         # phrase -> the commands that printed it
    answered: set[tuple[str, str]] = set()                 # (command, option) given and checked at least once
    runs = _sweep() + _made_to_reach(tmp_path)
    while runs:
        args = runs.pop()
        _, output = invoke(args)
        hints = hints_in(output)
        if hints:
            runs.extend(_same_questions(args))
        for phrase in hints:
            seen.setdefault(phrase, set()).add(_command(args))
            answers = alternatives(phrase)
            for option in OPTION.findall(phrase):
                given = value_for(option, args)
                if given is None:
                    continue
                code, again = invoke(args + given)
                assert not (code == 2 and "No such option" in again), (args, option, again)
                if option in answers:
                    still = [p for p in hints_in(again) if option in alternatives(p)]
                    assert not still, (args + given, still)
                answered.add((_command(args), option))
    missing = set(source_phrases()) - set(seen)
    assert not missing, f"hints in the source that no run printed (add an input that reaches them): {missing}"
    asked = {(command, option) for phrase, commands in seen.items() for command in commands
             for option in OPTION.findall(phrase)}
    assert asked <= answered, asked - answered
    asking_for_the_gpu = set().union(*(commands for phrase, commands in seen.items() if "--gpu" in phrase))
    assert {"diagnose", "whatif", "check"} <= asking_for_the_gpu


# --- the three GPU options, where they can be used ----------------------------------------------------------

def _json(*args: str) -> tuple[int, dict]:
    code, output = invoke([*args, "--format", "json"])
    return code, json.loads(output)


@pytest.mark.parametrize("command", [["whatif", QWEN_L4], ["check", "--from-log", QWEN_L4]])
def test_a_gpu_named_sizes_the_utilization_change_the_log_alone_cannot(command):
    code, bare = _json(*command, "--gpu-memory-utilization", "0.95")
    assert code == 3 and bare["verdict"] == "unknown" and bare["predicted"]["kv_cache_gib"] is None
    code, named = _json(*command, "--gpu-memory-utilization", "0.95", "--gpu", "L4")
    incident, predicted = named["incident"], named["predicted"]
    assert code == 1 and named["verdict"] == "kv_cache_too_small"
    assert predicted["kv_cache_gib"] == pytest.approx(incident["kv_cache_gib"] + 0.05 * 22.05, abs=0.01)
    assert predicted["kv_cache_tokens"] > incident["kv_cache_tokens"]
    assert named["geometry"]["gpu_total"]["source"] == "given"
    assert named["geometry"]["gpu_total"]["note"].startswith("--gpu L4 (NVIDIA L4: 22.05 GiB")
    _, by_size = _json(*command, "--gpu-memory-utilization", "0.95", "--gpu-memory-gib", "22.05")
    assert by_size["predicted"] == predicted


def test_a_total_the_log_prints_is_not_replaced_by_the_one_given():
    log = str(FIXTURES / "logs" / "v1" / "healthy-llama31-8b-l40s-0102-free-memory-info-hint.log")
    _, logged = _json("whatif", log, "--gpu-memory-utilization", "0.95")
    _, given = _json("whatif", log, "--gpu-memory-utilization", "0.95", "--gpu", "H200")
    assert logged["geometry"]["gpu_total"]["source"] != "given"
    assert given["geometry"]["gpu_total"] == logged["geometry"]["gpu_total"]
    assert given["predicted"] == logged["predicted"]


def test_check_from_a_config_takes_the_gpu_by_name():
    config = str(CONFIGS / "llama-3.1-8b-instruct.json")
    _, named = _json("check", "--model-config", config, "--gpu", "L4", "--max-model-len", "8192")
    _, sized = _json("check", "--model-config", config, "--gpu-memory-gib", "22.05", "--max-model-len", "8192")
    assert named["predicted"] == sized["predicted"] and named["verdict"] == "fits"
    assert named["geometry"]["gpu_total"]["note"].startswith("--gpu L4 (NVIDIA L4")


def test_the_node_s_gpus_bound_what_whatif_suggests():
    args = ("whatif", QWEN_L4, "--gpu-memory-utilization", "0.95", "--gpu", "L4")
    _, free = _json(*args)
    _, one = _json(*args, "--gpus", "1")
    assert "--tensor-parallel-size 2 fits" in free["suggestions"]
    assert one["suggestions"] and not any("--tensor-parallel-size" in s for s in one["suggestions"])


def test_diff_sizes_and_bounds_the_next_fix_with_the_gpu_given():
    _, bare = _json("diff", QWEN_L4, QWEN_L4)
    assert any(NEEDS_GPU in fix["needs"] for fix in bare["after"]["fixes"])
    _, named = _json("diff", QWEN_L4, QWEN_L4, "--gpu", "L4")
    assert named["after"]["facts"]["gpu_total_gib"]["value"] == 22.05
    assert not any(NEEDS_GPU in fix["needs"] for fix in named["after"]["fixes"])
    weights = str(FIXTURES / "logs" / "v1" / "weights_dont_fit-qwen25-72b-tp2-l40s-both-ranks-oom.log")
    _, eight = _json("diff", weights, weights)
    _, four = _json("diff", weights, weights, "--gpus", "4")
    assert eight["after"]["fixes"][0]["action"] == "--tensor-parallel-size 8"
    assert not any(fix["flag"] == "--tensor-parallel-size" and fix["value"] for fix in four["after"]["fixes"])


COMMANDS = {"diagnose": [QWEN_L4], "whatif": ["whatif", QWEN_L4], "check": ["check", "--from-log", QWEN_L4],
            "check from a config": ["check", "--model-config", str(CONFIGS / "qwen3-8b.json")],
            "diff": ["diff", QWEN_L4, QWEN_L4]}
UNUSABLE = {"an unknown name": (["--gpu", "B300"], "--gpu 'B300' is not a GPU vtriage knows (L4, A10G"),
            "a name and a size": (["--gpu", "h100", "--gpu-memory-gib", "80"],
                                  "--gpu and --gpu-memory-gib both give the GPU's memory; give one"),
            "not a number": (["--gpu-memory-gib", "nan"], "'nan' is not a number of GiB")}


@pytest.mark.parametrize("command,bad", [(command, bad) for command in COMMANDS for bad in UNUSABLE
                                         if bad != "not a number" or command == "diagnose"])   # one shared type
def test_a_gpu_it_cannot_use_is_a_one_line_error(command, bad):
    args, needle = UNUSABLE[bad]
    result = run_cli(*COMMANDS[command], *args)
    err = result.stderr.decode()
    assert result.returncode == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_the_commands_that_size_with_the_gpu_offer_the_same_three_options():
    def gpu_options(command: str) -> list[tuple]:
        return [(p.opts, p.help, repr(p.type)) for p in cli.commands[command].params
                if set(p.opts) & {"--gpu", "--gpu-memory-gib", "--gpus"}]
    assert len(gpu_options("diagnose")) == 3
    assert all(gpu_options(command) == gpu_options("diagnose") for command in GPU_COMMANDS)
