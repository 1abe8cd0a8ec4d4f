"""The capacity model: vLLM's memory budget calibrated from the incident's own figures, and what uses it.

model (the geometry one startup shows) -> predict (the same GPU under other flags) -> registry, kv_fixes,
memory_fixes, cpu_fixes (the fixes rules name, each verified through the model where it can be), whatif and
check (the two commands), hfconfig (a model's geometry from its config.json), calibration (does the model
reproduce what vLLM printed?).
"""
from . import cpu_fixes, kv_fixes, memory_fixes  # noqa: F401  (registers the solvers)
from .registry import FIXES, solver

__all__ = ["FIXES", "solver"]
