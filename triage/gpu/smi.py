"""Read pasted `nvidia-smi` output into a GpuSnapshot, for on-call engineers who only have that.

Three shapes, in any mix in one file (a ticket often holds all three):

* the default table (`nvidia-smi`): a `| GPU  Name ... |` row per GPU with `USEDMiB / TOTALMiB` on the
  line under it, and a `Processes:` table (`GPU GI CI PID Type Process name GPU Memory`, or the older
  `GPU PID Type Process name GPU Memory`); nvidia-smi cuts long names and sizes with `...`;
* `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv` (any columns, with or
  without `noheader`/`nounits`);
* `nvidia-smi --query-gpu=index,name,memory.total,memory.used,memory.free --format=csv`.

A size cut short (`10291...`) is unknown, never a smaller number.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import regex

from ..errors import InputError
from ..model import SourceRef
from ..sources.files import text_lines
from .probe import GpuDevice, GpuProcess, GpuSnapshot, classify, merge_snapshots, read_snapshot_json

_GPU_ROW = regex.compile(r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s+\|")
_MEMORY = regex.compile(r"(?<!\d)(\d{1,12})\s*MiB\s*/\s*(\d{1,12})\s*MiB")   # more digits: not a GPU
_PROC_ROW = regex.compile(
    r"^\|\s+(\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(\d+)\s+(C\+G|M\+C|C|G|M)\s+(.*?)\s+(\d{1,12}\s*MiB|N/A|\S*\.\.\.)\s*\|$")
_DRIVER = regex.compile(r"Driver Version:\s*([\d.]+)")
_STAMP = regex.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \d{4}\s*$")
_SIZE = regex.compile(r"^\s*(\d{1,12}(?:\.\d{1,6})?)\s*(MiB|GiB|KiB)?\s*$")


def _mib(text: str) -> float | None:
    m = _SIZE.match(text)
    if not m:
        return None                    # [N/A], [Not Supported], or a size nvidia-smi cut short
    return float(m[1]) * {"GiB": 1024.0, "KiB": 1 / 1024}.get(m[2] or "MiB", 1.0)


def _header_key(cell: str) -> str:
    return regex.sub(r"\s*\[.*\]$", "", cell.strip()).lower()


def parse_nvidia_smi(text: str, path: str, vllm_pids: Sequence[int] = ()) -> GpuSnapshot:
    """Every GPU and process the text shows; an error when it shows none."""
    lines = text_lines(text)
    table_devices: list[GpuDevice] = []
    table_procs: list[GpuProcess] = []
    csv_devices: list[GpuDevice] = []
    csv_procs: list[GpuProcess] = []
    driver = taken = None
    columns: list[str] | None = None
    for number, line in enumerate(lines, 1):
        ref = SourceRef(path, number, line.strip())
        if (m := _DRIVER.search(line)) and driver is None:
            driver = m[1]
        if _STAMP.match(line.strip()) and taken is None:
            taken = line.strip()
        if (m := _GPU_ROW.match(line)) and number < len(lines) and (mem := _MEMORY.search(lines[number])):
            table_devices.append(GpuDevice(int(m[1]), m[2].strip(), float(mem[2]), float(mem[1]),
                                           SourceRef(path, number + 1, f"{line.strip()} {lines[number].strip()}")))
            continue
        if m := _PROC_ROW.match(line):
            name = m[4].strip() or None
            vllm, why = classify(int(m[2]), name, None, vllm_pids)
            table_procs.append(GpuProcess(int(m[1]), int(m[2]), name, _mib(m[5]), vllm, why, ref))
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 2 and any(k in _header_key(c) for c in cells for k in ("pid", "memory.total", "index")) \
                and not cells[0].isdigit():
            columns = [_header_key(c) for c in cells]
            continue
        if columns is None and len(cells) == 3 and cells[0].isdigit() and _mib(cells[2]) is not None:
            columns = ["pid", "process_name", "used_memory"]      # --format=csv,noheader
        if columns and len(cells) == len(columns):
            row = dict(zip(columns, cells))
            if "pid" in row and row["pid"].isdigit():
                name = row.get("process_name") or row.get("name")
                used = row.get("used_gpu_memory") or row.get("used_memory") or ""
                vllm, why = classify(int(row["pid"]), name, None, vllm_pids)
                csv_procs.append(GpuProcess(None, int(row["pid"]), name, _mib(used), vllm, why, ref))
                continue
            if "index" in row and row["index"].isdigit():
                csv_devices.append(GpuDevice(int(row["index"]), row.get("name"), _mib(row.get("memory.total", "")),
                                             _mib(row.get("memory.used", "")), ref, row.get("uuid"),
                                             _mib(row.get("memory.free", ""))))
                continue
        if not line.strip() or line.startswith("---"):
            columns = None
    if not (table_devices or table_procs or csv_devices or csv_procs):
        raise InputError(path, "shows no GPU and no GPU process",
                         "paste the output of nvidia-smi, or of nvidia-smi --query-compute-apps="
                         "pid,process_name,used_memory --format=csv, or write it with vtriage gpu --format json")
    devices = table_devices or csv_devices
    if len(devices) == 1:              # a CSV process list does not say which GPU: with one GPU it is that one
        csv_procs = [GpuProcess(devices[0].index, p.pid, p.name, p.used_mib, p.vllm, p.why, p.source)
                     for p in csv_procs]
    csv = GpuSnapshot(tuple(csv_devices), tuple(csv_procs), "csv", path, len(lines), taken, driver)
    table = GpuSnapshot(tuple(table_devices), tuple(table_procs), "nvidia-smi", path, len(lines), taken, driver)
    if not (csv_devices or csv_procs):
        return table
    if not (table_devices or table_procs):
        return csv
    return dataclasses.replace(merge_snapshots(csv, table), origin="nvidia-smi")


def read_gpu_input(text: str, path: str, vllm_pids: Sequence[int] = ()) -> GpuSnapshot:
    """A snapshot from `vtriage gpu --format json`, or pasted nvidia-smi output."""
    if text.lstrip().startswith("{"):
        return read_snapshot_json(text, path, vllm_pids)
    return parse_nvidia_smi(text, path, vllm_pids)
