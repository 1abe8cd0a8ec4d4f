"""Facts from what the user gave on the command line for what the input lacks (--gpu NAME, --gpu-memory-gib)."""
from __future__ import annotations

from typing import Mapping

from ..model import Fact


def gpu_memory_facts(total_gib: float | None, source: str, facts: Mapping[str, Fact]) -> dict[str, Fact]:
    """The GPU's memory the user gave, as the fact the input did not give (and the budget it makes)."""
    out: dict[str, Fact] = {}
    if total_gib and "gpu_total_gib" not in facts:
        out["gpu_total_gib"] = Fact("gpu_total_gib", round(total_gib, 4), "GiB", (), f"given: {source}")
        util = facts.get("gpu_memory_utilization")
        if util is not None and "budget_gib" not in facts:
            out["budget_gib"] = Fact("budget_gib", round(total_gib * util.value, 4), "GiB", util.evidence,
                                     f"gpu_memory_utilization x the given total ({source})")
    return out
