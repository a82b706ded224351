"""CUDA's errors as NCCL and PyTorch print them, and what to do about those NCCL's users meet.

NCCL prints a CUDA call that failed as ``Cuda failure 'out of memory'`` (a runtime call,
CUDACHECK) or ``Cuda failure 2 'out of memory'`` (a driver call, CUCHECK), PyTorch as ``CUDA
error: out of memory``: the text is CUDA's own (``cudaGetErrorString``). The table of every
error's code, name, text and meaning (``cuda_errors.json``) is written from the CUDA runtime
and its header by ``tools/cuda_errors.py``; the readings below (cause and fix) are ours, for the
errors that end NCCL jobs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["CudaError", "cuda_error", "cuda_reading", "reading_is_the_operations"]

_FAILURE = re.compile(
    r"(?:Cuda|CUDA) failure (?:([0-9]{1,4}) )?'([^']{1,200})'|CUDA error: ([^\n]{1,200})", re.ASCII
)


@dataclass(frozen=True, slots=True)
class CudaError:
    """One of CUDA's errors.

    Attributes:
        code: Its number, e.g. ``101``.
        name: Its name, e.g. ``"cudaErrorInvalidDevice"``.
        text: What ``cudaGetErrorString`` says, e.g. ``"invalid device ordinal"``.
        meaning: The first sentence of CUDA's documentation of it.
    """

    code: int
    name: str
    text: str
    meaning: str


@lru_cache(maxsize=1)
def _table() -> tuple[dict[str, CudaError], dict[int, CudaError]]:
    data = json.loads((Path(__file__).parent / "cuda_errors.json").read_text(encoding="utf-8"))
    errors = [CudaError(*entry) for entry in data["errors"]]
    return {e.text: e for e in errors}, {e.code: e for e in errors}


def cuda_error(message: str) -> CudaError | None:
    """The CUDA error a message reports, e.g. ``Cuda failure 101 'invalid device ordinal'`` ->
    ``cudaErrorInvalidDevice``; None when it reports none CUDA knows."""
    match = _FAILURE.search(message)
    if match is None:
        return None
    by_text, by_code = _table()
    text = (match.group(2) or match.group(3) or "").strip()
    found = by_text.get(text) or by_text.get(text.rstrip("."))
    if found is None and match.group(1):
        found = by_code.get(int(match.group(1)))  # a driver call's code: the runtime's number
    return found


_FAULT = ("a kernel faulted, and CUDA reports it at the next call, often NCCL's: the kernel may be "
          "the application's own",
          "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel that faulted, and check `dmesg` on "
          "that node for Xid errors")

# What each error usually means for an NCCL job, and what to do (by CUDA's name of it).
_READINGS: dict[str, tuple[str, str]] = {
    "cudaErrorMemoryAllocation": (
        "CUDA could not allocate memory (the GPU's, or pinned host memory)",
        "check what holds the GPU's memory (`nvidia-smi`: other processes on that GPU, two ranks "
        "on one GPU) and leave NCCL room (a smaller batch or model shard); NCCL's own buffers "
        "grow with NCCL_BUFFSIZE and the number of channels, and NVLink SHARP adds its own "
        "(NCCL_NVLS_ENABLE=0 leaves them out)"),
    "cudaErrorInitializationError": (
        "CUDA could not initialise in this process (no driver loaded, a process forked after "
        "CUDA started, or a GPU in a bad state)",
        "check that `nvidia-smi` works where the job runs, and start worker processes with "
        "spawn, not fork, once CUDA is in use"),
    "cudaErrorInsufficientDriver": (
        "the driver is older than the CUDA that NCCL or PyTorch was built with",
        "install a driver at least as new as that CUDA (`nvidia-smi` shows the newest CUDA the "
        "driver supports), or use a build for an older CUDA"),
    "cudaErrorNoDevice": (
        "the process sees no GPU",
        "give the container the GPUs (docker --gpus all, the NVIDIA container runtime) and check "
        "CUDA_VISIBLE_DEVICES in the job's environment"),
    "cudaErrorInvalidDevice": (
        "a process asked for a GPU it cannot see (more ranks on the node than visible GPUs, or a "
        "device index beyond CUDA_VISIBLE_DEVICES)",
        "start at most as many processes per node as GPUs they see (`nvidia-smi -L`, "
        "CUDA_VISIBLE_DEVICES) and choose each one's device from LOCAL_RANK"),
    "cudaErrorDevicesUnavailable": (
        "the GPU is busy or unavailable (exclusive-process compute mode with another process on "
        "it, or a GPU in a bad state)",
        "check `nvidia-smi -q -d COMPUTE` (Exclusive_Process lets one process use a GPU), that no "
        "other job holds the GPU, and one rank per GPU"),
    "cudaErrorNoKernelImageForDevice": (
        "the build has no kernels for this GPU's architecture",
        "install an NCCL and PyTorch built for this GPU (a newer wheel for a newer GPU)"),
    "cudaErrorSystemNotReady": (
        "the system is not ready for CUDA work: on NVSwitch systems, the fabric manager is not "
        "running",
        "start nvidia-fabricmanager of the driver's version (`systemctl status "
        "nvidia-fabricmanager`; its log says why it stopped)"),
    "cudaErrorSystemDriverMismatch": (
        "the driver's user-space library (libcuda) and its kernel module are of different "
        "versions",
        "make them one version: reboot after a driver upgrade, and install no driver inside the "
        "container image"),
    "cudaErrorNotSupported": (
        "this GPU, driver or system does not support the operation (a newer memory feature, "
        "or a VM without it)",
        "see where it failed: NCCL_NVLS_ENABLE=0 skips NVLink SHARP and NCCL_CUMEM_ENABLE=0 "
        "NCCL's use of cuMem"),
    "cudaErrorECCUncorrectable": (
        "the GPU has an uncorrectable memory (ECC) error",
        "take the node out of service and reset or replace the GPU (`nvidia-smi -q -d ECC`)"),
    "cudaErrorIllegalAddress": _FAULT,
    "cudaErrorLaunchFailure": _FAULT,
    "cudaErrorIllegalInstruction": _FAULT,
    "cudaErrorMisalignedAddress": _FAULT,
    "cudaErrorHardwareStackError": _FAULT,
}


def cuda_reading(error: CudaError) -> tuple[str, str] | None:
    """What ``error`` usually means for an NCCL job and what to do: ``(cause, fix)``; None for
    an error without a reading of its own."""
    return _READINGS.get(error.name)


# Errors whose meaning depends on the operation that failed (what is not supported is the
# call's): where NCCL failed says more than the error.
_OF_THE_OPERATION = frozenset({"cudaErrorNotSupported"})


def reading_is_the_operations(error: CudaError) -> bool:
    """Whether the operation that failed (the file NCCL failed in) reads ``error`` better than
    its own reading does; False for errors of the process or the GPU (out of memory, an invalid
    device, a fault)."""
    return error.name in _OF_THE_OPERATION
