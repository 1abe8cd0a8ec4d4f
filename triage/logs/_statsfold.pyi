# The figures of a run of stats lines, compiled (_statsfold.c); statsrun.py holds them in Python.
from typing import Any

def figures(texts: list[str], cuts: list[bytes], kinds: bytes, kv: int, waiting: int, swapped: int,
            saturated: float) -> tuple[tuple[Any, ...], tuple[Any, ...], float, int, int, int] | None: ...
