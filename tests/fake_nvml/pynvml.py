"""A stand-in for nvidia-ml-py's `pynvml`, for machines without a GPU (CI).

It implements exactly the calls triage/gpu/probe.py makes, with the same shapes (bytes where NVML gives
bytes, `usedGpuMemory` None when the driver cannot say). The GPUs it reports come from the JSON
file named by VTRIAGE_FAKE_NVML:

    {"driver": "550.127.05", "init_error": null,
     "gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...", "total": BYTES, "used": BYTES, "free": BYTES,
               "processes": [{"pid": 123, "used": BYTES or null, "name": "python3" or null}]}]}

Put this directory first on PYTHONPATH to use it; a `name` of null makes nvmlSystemGetProcessName
fail as it does for a process in another PID namespace.
"""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
calls: list[str] = []            # what was called, for tests that check init/shutdown pairing


class NVMLError(Exception):
    def __init__(self, value: int, text: str = "") -> None:
        super().__init__(value)
        self.value = value
        self.text = text

    def __str__(self) -> str:
        return self.text or f"NVML error {self.value}"


def _scenario() -> dict:
    with open(os.environ["VTRIAGE_FAKE_NVML"], encoding="utf-8") as handle:
        return json.load(handle)


def nvmlInit() -> None:
    calls.append("init")
    error = _scenario().get("init_error")
    if error:
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED, error)


def nvmlShutdown() -> None:
    calls.append("shutdown")


def nvmlSystemGetDriverVersion() -> str:
    return _scenario()["driver"]


def nvmlDeviceGetCount() -> int:
    return len(_scenario()["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetName(handle: int) -> bytes:
    return _scenario()["gpus"][handle]["name"].encode()


def nvmlDeviceGetUUID(handle: int) -> str:
    return _scenario()["gpus"][handle]["uuid"]


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    gpu = _scenario()["gpus"][handle]
    return SimpleNamespace(total=gpu["total"], used=gpu["used"], free=gpu["free"])


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used"]) for p in _scenario()["gpus"][handle]["processes"]]


def nvmlSystemGetProcessName(pid: int) -> bytes:
    for gpu in _scenario()["gpus"]:
        for p in gpu["processes"]:
            if p["pid"] == pid and p.get("name"):
                return p["name"].encode()
    raise NVMLError(NVML_ERROR_NOT_FOUND, "Not Found")
