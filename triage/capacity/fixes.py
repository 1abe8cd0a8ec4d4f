"""The fixes a rule may name: `FIXES` is the table of their solvers (`fixes = [...]` in a rule), `prescribe` runs the
chosen rule's and puts them in the order to try them.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from ..model import Fix
from ..vocabulary import MEMORY_VERDICTS
from .cpu_fixes import (
    cpu_kv_space_for_load,
    cpu_kv_space_for_max_model_len,
    cpu_kv_space_within_free,
    cpu_utilization_within_free,
)
from .kv_fixes import (
    kv_cache_dtype_fp8,
    max_model_len_that_fits,
    max_num_seqs_for_kv,
    more_gpus_for_preemption,
    more_kv_for_preemption,
    more_swap_space,
    tensor_parallel_for_kv,
    utilization_for_max_model_len,
)
from .memory_fixes import (
    cpu_offload,
    enforce_eager,
    free_other_processes,
    not_memory_advice,
    smaller_profile_batch,
    smaller_weights,
    tensor_parallel_for_weights,
    utilization_headroom,
    utilization_within_free_memory,
)
from .registry import NO_USER_FIGURES, Facts, FixSolver, UserFigures, names_another_process

FIXES: Mapping[str, FixSolver] = {
    # kv_cache_too_small, preemption_slowdown
    "max_model_len_that_fits": max_model_len_that_fits,
    "utilization_for_max_model_len": utilization_for_max_model_len,
    "kv_cache_dtype_fp8": kv_cache_dtype_fp8,
    "tensor_parallel_for_kv": tensor_parallel_for_kv,
    "max_num_seqs_for_kv": max_num_seqs_for_kv,
    "more_kv_for_preemption": more_kv_for_preemption,
    "more_gpus_for_preemption": more_gpus_for_preemption,
    "more_swap_space": more_swap_space,
    # weights_dont_fit, external_pressure, other_failure
    "tensor_parallel_for_weights": tensor_parallel_for_weights,
    "smaller_weights": smaller_weights,
    "cpu_offload": cpu_offload,
    "utilization_within_free_memory": utilization_within_free_memory,
    "free_other_processes": free_other_processes,
    "utilization_headroom": utilization_headroom,
    "enforce_eager": enforce_eager,
    "smaller_profile_batch": smaller_profile_batch,
    "not_memory_advice": not_memory_advice,
    # vLLM on CPU
    "cpu_kv_space_within_free": cpu_kv_space_within_free,
    "cpu_utilization_within_free": cpu_utilization_within_free,
    "cpu_kv_space_for_max_model_len": cpu_kv_space_for_max_model_len,
    "cpu_kv_space_for_load": cpu_kv_space_for_load,
}

def prescribe(names: Sequence[str], facts: Facts, verdict: str,
              given: UserFigures = NO_USER_FIGURES) -> tuple[Fix, ...]:
    """The fixes the chosen rule names (`names`, in order), sized from the facts and what the user gave, arranged."""
    fixes = [fix for name in names for fix in FIXES[name](facts, given)]
    return arrange_fixes(fixes, facts, verdict)


# Checked fixes before the ones the capacity model could not check; levers that fall short alone last.
_ORDER = {"checked": 0, "unchecked": 1, "advice": 1, "not_enough": 2}


def arrange_fixes(fixes: list[Fix], facts: Facts, verdict: str) -> tuple[Fix, ...]:
    """Every fix with its status, in the order to try them: when the evidence names another process, finding and
    stopping it comes first; then the fixes the capacity model checked, then the ones it could not check (and
    advice), each in the rule's order; then, when torch lists a process that may be vLLM itself, finding out
    which it is; last the levers the model predicts fail or fall short alone (shown as "not enough alone",
    never numbered as a fix)."""
    out: list[Fix] = []
    for fix in fixes:
        if not fix.status:
            fix = dataclasses.replace(fix, status="advice" if fix.value is None else "unchecked")
        if all(fix.action != seen.action for seen in out):
            out.append(fix)
    first: list[Fix] = []
    check_last: list[Fix] = []
    another = names_another_process(facts)
    if verdict in MEMORY_VERDICTS and (another or "unidentified_processes_gib" in facts):
        theirs = [f for f in out if f.computed_from and _ABOUT_OTHERS.intersection(f.computed_from)]
        if not theirs:
            theirs = [dataclasses.replace(f, status="advice") for f in free_other_processes(facts, NO_USER_FIGURES)]
        if another:
            first = theirs
        else:
            check_last = theirs
    rest = sorted((f for f in out if f not in first and f not in check_last), key=lambda f: _ORDER[f.status])
    may_work = [f for f in rest if f.status != "not_enough"]
    return tuple(first + may_work + check_last + [f for f in rest if f.status == "not_enough"])


# What a fix about the other processes on the GPU is computed from.
_ABOUT_OTHERS = frozenset({"other_process_pids", "unidentified_process_pids"})
