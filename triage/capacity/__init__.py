"""The capacity model: vLLM's memory budget calibrated from the incident's own figures, and what uses it.

model (the geometry one startup shows) -> predict (the same GPU under other flags) -> registry, kv_fixes,
memory_fixes, cpu_fixes (the fixes rules name, each verified through the model where it can be; `FIXES` in
fixes.py is the table of them), whatif and check (the two commands), hfconfig (a model's geometry from its
config.json), catalog (common models by name), calibration (does the model reproduce what vLLM printed?).

The pipeline calls two stages here: estimates.py (a known model's weights, for the rules, between facts and
decide) and prescribe.py (the fixes the chosen rule names). This file imports nothing, so those stages load
the model only when they have work.
"""
