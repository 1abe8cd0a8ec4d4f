"""Does the model reproduce what vLLM itself printed? One row per startup log, per figure.

For each log the model recomputes, at the incident's own settings: the KV memory from the budget equation
(where every term is measured), the KV tokens from that memory (bytes per token from a config.json when one
is given, so the check does not lean on the figure it checks), the maximum concurrency with the engine's own
formula, and vLLM's estimate of the longest length that fits. docs/capacity.md shows the table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..model import Fact
from .hfconfig import ModelSpec
from .model import CONFIG, ERAS, GIB, Geometry, calibrate, kv_value_bytes
from .predict import blocks_for


@dataclass(frozen=True)
class Check:
    figure: str
    logged: float
    predicted: float

    @property
    def error(self) -> float:
        """Relative error; an absolute 0.05 GiB counts as exact for memory printed to 0.01 GiB."""
        if self.figure in ("kv_cache_gib", "kv_needed_gib") and abs(self.predicted - self.logged) <= 0.05:
            return 0.0
        if self.figure == "max_concurrency" and abs(self.predicted - self.logged) <= 0.005:
            return 0.0                                   # printed to two decimals
        if self.logged == 0:
            return 0.0 if self.predicted == 0 else 1.0
        return abs(self.predicted - self.logged) / abs(self.logged)


@dataclass(frozen=True)
class CalibrationRow:
    name: str
    era: str
    version: str | None
    per_token_source: str
    checks: tuple[Check, ...]
    assumptions: tuple[str, ...] = field(default=())

    @property
    def worst(self) -> float:
        return max((c.error for c in self.checks), default=0.0)


def _value(facts: Mapping[str, Fact], name: str):
    return facts[name].value if name in facts else None


def calibration_row(name: str, facts: Mapping[str, Fact], spec: ModelSpec | None = None) -> CalibrationRow | None:
    """The model's figures next to the logged ones; None when the log prints none of them."""
    g = calibrate(facts, spec)
    checks: list[Check] = []
    kv_logged = _value(facts, "kv_cache_gib")
    kv_equation = g.equation_kv_gib()
    if kv_logged is not None and kv_equation is not None and facts["kv_cache_gib"].note is None:
        checks.append(Check("kv_cache_gib", kv_logged, round(kv_equation, 4)))
    per_token, source = _per_token(g, spec)
    kv = kv_equation if kv_equation is not None else kv_logged       # never KV rebuilt from the tokens checked
    block = g.block_size.value
    length = _value(facts, "max_model_len")
    tokens_logged = _value(facts, "kv_cache_tokens")
    blocks = None
    if kv is not None and per_token:
        blocks = blocks_for(kv, per_token, block)
    elif tokens_logged is not None and "gpu_blocks" in facts:
        blocks = facts["gpu_blocks"].value                 # V0 <= 0.6.3: the blocks are the measurement
        source = "the log's '# GPU blocks' (no KV memory printed)"
    if blocks is not None and tokens_logged is not None:
        checks.append(Check("kv_cache_tokens", tokens_logged, blocks * block))
    concurrency = _value(facts, "max_concurrency")
    predicted = g.concurrency(blocks, blocks * block, length) if blocks is not None else None
    if predicted is not None and concurrency is not None:
        checks.append(Check("max_concurrency", concurrency, round(predicted, 4)))
    needed = _value(facts, "kv_needed_gib")
    if needed is not None and length and spec is not None:     # from the log itself it would be circular
        checks.append(Check("kv_needed_gib", needed, round(length * per_token / GIB, 4)))
    estimate = _value(facts, "estimated_max_model_len")
    if estimate is not None and kv is not None and per_token:
        checks.append(Check("estimated_max_model_len", estimate, blocks_for(kv, per_token, block) * block))
    if not checks:
        return None
    return CalibrationRow(name=name, era=g.era, version=_value(facts, "vllm_version"), per_token_source=source,
                          checks=tuple(checks), assumptions=tuple(g.assumptions()))


def _per_token(g: Geometry, spec: ModelSpec | None) -> tuple[float | None, str]:
    """Bytes per token for the check: a config's when given (independent of the log), else the log's own."""
    s = g.settings
    if spec is not None:
        return (spec.kv_bytes_per_token(s.tensor_parallel_size, s.pipeline_parallel_size,
                                        kv_value_bytes(s.kv_cache_dtype, s.dtype)),
                f"config {spec.path.rsplit('/', 1)[-1]}")
    if g.bytes_per_token is None:
        return None, "unknown"
    return g.bytes_per_token.value, ("config" if g.bytes_per_token.source == CONFIG else "the log: "
                                     + g.bytes_per_token.note)


def calibration_markdown(rows: list[CalibrationRow]) -> str:
    """The table docs/capacity.md embeds: per era, then per log."""
    lines = ["| era | logs | figures checked | worst error |", "|---|---|---|---|"]
    for era, label in ERAS.items():
        mine = [r for r in rows if r.era == era]
        if mine:
            n = sum(len(r.checks) for r in mine)
            lines.append(f"| {label} | {len(mine)} | {n} | {max(r.worst for r in mine):.2%} |")
    lines += ["", "| log | vLLM | figure: logged -> model | KV bytes/token from |", "|---|---|---|---|"]
    for r in rows:
        figures = "; ".join(f"{c.figure} {_fmt(c.logged)} -> {_fmt(c.predicted)}" for c in r.checks)
        lines.append(f"| `{r.name}` | {r.version or '?'} | {figures} | {r.per_token_source} |")
    return "\n".join(lines) + "\n"


def _fmt(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) or float(x).is_integer() and abs(x) >= 100 else f"{x:.2f}"

