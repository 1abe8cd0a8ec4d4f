"""The phase table: every row places a traceback frame in its phase, a traceback's frames narrow down a function
that runs in several, a fragment cut above its header is a failure in that phase, and the table is data checked
when it loads and documented in docs/phases.md."""
from __future__ import annotations

import re
import shutil

import pytest

from triage.cli import load_toolkit
from triage.errors import RuleError
from triage.logs.phases import phases_markdown
from triage.vocabulary import PHASES

from conftest import ROOT, RULES_DIR, diagnose_text

TOOLKIT = load_toolkit(str(RULES_DIR))
ROWS = sorted(TOOLKIT.signatures.functions.values(), key=lambda r: r.name)
PREFIX = "(EngineCore_DP0 pid=41) ERROR 03-04 05:06:07 [core.py:708] "
# The class a fragment whose error line is cut off gets in each phase (docs/phases.md, docs/verdicts.md).
LIKELIEST = {"initialization": "other_failure", "loading_weights": "weights_dont_fit",
             "memory_profiling": "kv_cache_too_small", "kv_cache_allocation": "kv_cache_too_small",
             "cuda_graph_capture": "external_pressure", "serving": "inconclusive"}
# Functions whose own failure says more than their phase: vLLM's free-memory check at startup.
LIKELIEST_OWN = {"request_memory": "external_pressure"}


def frame(function: str, path: str = "vllm/worker/worker_base.py") -> str:
    return f'{PREFIX}  File "/usr/local/lib/python3.12/dist-packages/{path}", line 311, in {function}'


def fragment(*functions: str) -> str:
    return "".join(frame(f) + "\n" + PREFIX + "    self.call()\n" for f in functions)


def test_the_phase_table_in_the_docs_is_current():
    text = (ROOT / "docs" / "phases.md").read_text()
    m = re.search(r"<!-- phase-table -->\n(.*?)<!-- /phase-table -->", text, re.S)
    assert m and m.group(1) == phases_markdown(TOOLKIT.signatures.functions), \
        "docs/phases.md is stale: put the output of `vtriage rules --phases` between its phase-table markers"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_every_row_places_a_fragment_in_its_phase(kit, row):
    """A fragment whose only vLLM frame is this function: a failure in the function's own phase, decided as the
    phase says, or no phase at all for a dispatch frame."""
    d = diagnose_text(kit, fragment(row.name)).diagnosis
    assert d.facts["failure_kind"].value == "unidentified_error"
    if not row.phases:
        assert "failed_phase" not in d.facts, f"{row.name} is a dispatch frame: it says nothing of the phase"
        return
    assert d.facts["failed_phase"].value == row.phases[0]
    assert d.facts["failed_function"].value == row.name
    assert d.verdict == LIKELIEST_OWN.get(row.name, LIKELIEST[row.phases[0]]), d.rule_path


@pytest.mark.parametrize("functions,phase,failed", [
    (("capture_model", "_dummy_run", "forward"), "cuda_graph_capture", "forward"),
    (("profile_run", "_dummy_run", "forward"), "memory_profiling", "forward"),
    (("determine_available_memory", "profile_run", "_dummy_run"), "memory_profiling", "_dummy_run"),
    (("initialize_from_config", "initialize_kv_cache", "_allocate_kv_cache_tensors"), "kv_cache_allocation",
     "_allocate_kv_cache_tensors"),
    (("compile_or_warm_up_model", "_dummy_run"), "cuda_graph_capture", "_dummy_run"),
    (("worker_main", "collective_rpc", "load_model", "load_weights", "weight_loader"), "loading_weights",
     "weight_loader"),
    (("run_busy_loop", "step", "execute_model", "_model_forward"), "serving", "_model_forward"),
])
def test_a_tracebacks_frames_narrow_the_phase_down(kit, functions, phase, failed):
    d = diagnose_text(kit, fragment(*functions)).diagnosis
    assert (d.facts["failed_phase"].value, d.facts["failed_function"].value) == (phase, failed)


def test_frames_of_other_programs_say_nothing(kit):
    """verl's vllm_rollout folder is not vLLM; a function of that name there places nothing."""
    text = frame("load_model", "verl/workers/rollout/vllm_rollout/vllm_rollout_spmd.py") + "\n"
    assert "failed_phase" not in diagnose_text(kit, text).diagnosis.facts


def test_a_stack_printed_with_a_warning_is_not_a_failure(kit):
    text = fragment("load_model").replace(" ERROR ", " WARNING ")
    assert "failure_kind" not in diagnose_text(kit, text).diagnosis.facts


@pytest.mark.parametrize("row,key,message", [
    ('name = "profile_run"\nphase = "profiling"\nengines = "v1"\nreleases = "0.8.5 - current"\nwhy = "x"',
     "function profile_run.phase", "unknown phase 'profiling'"),
    ('name = "worker_main"\ndispatch = true\nphase = "serving"\nengines = "v1"\nreleases = "0.8.5"\nwhy = "x"',
     "function worker_main.phase", "a dispatch frame has no phase"),
    ('name = "profile_run"\nphase = "memory_profiling"\nengines = "v1"\nwhy = "x"',
     "function profile_run.releases", "missing"),
    ('name = "init_device"\nphase = "initialization"\nengines = "v1"\nreleases = "0.4.0"\nwhy = "x"',
     "function init_device.name", "listed twice"),
])
def test_a_bad_row_is_refused_with_its_file_key_and_a_hint(tmp_path, row, key, message):
    rules = tmp_path / "rules"
    shutil.copytree(RULES_DIR, rules, ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    (rules / "signatures" / "zz-rows.toml").write_text("[[function]]\n" + row + "\n")
    with pytest.raises(RuleError) as caught:
        load_toolkit(str(rules))
    error = caught.value
    assert "zz-rows.toml" in str(error) or "frames.toml" in str(error)
    assert key in str(error) and message in str(error)


def test_every_phase_has_functions_that_place_it():
    placed = {row.phases[0] for row in ROWS if row.phases}
    assert placed == set(PHASES)
