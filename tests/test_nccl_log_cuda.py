"""CUDA's errors (src/clusterenv/nccl_log/cuda_errors.json) and the script that writes it from the
CUDA runtime (tools/cuda_errors.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from clusterenv.nccl_log.cuda import _READINGS, cuda_error, cuda_reading

ROOT = Path(__file__).parents[1]
DATA = json.loads((ROOT / "src" / "clusterenv" / "nccl_log" / "cuda_errors.json").read_text())
sys.path.insert(0, str(ROOT / "tools"))

from cuda_errors import meanings  # noqa: E402

# The shape of driver_types.h (nvidia-cuda-runtime-cu12 12.9.79): a comment above each value,
# the first value without the cudaError prefix, references and deprecation marks inside
HEADER = r"""
enum __device_builtin__ cudaError
{
    /**
     * The API call returned with no errors. In the case of query calls, this
     * also means that the operation being queried is complete (see
     * ::cudaEventQuery() and ::cudaStreamQuery()).
     */
    cudaSuccess                           =      0,

    /**
     * This indicates that one or more of the parameters passed to the API call
     * is not within an acceptable range of values.
     */
    cudaErrorInvalidValue                 =     1,

    /**
     * \deprecated
     * This error return is deprecated as of CUDA 5.0. It is no longer an error
     * to attempt to enable/disable the profiling via ::cudaProfilerStart or
     * ::cudaProfilerStop without initialization.
     */
    cudaErrorProfilerNotInitialized       =     6,
};
"""


def test_meanings_are_the_first_sentence_of_each_values_comment() -> None:
    assert meanings(HEADER) == {
        "cudaErrorInvalidValue": "This indicates that one or more of the parameters passed to "
                                 "the API call is not within an acceptable range of values.",
        "cudaErrorProfilerNotInitialized": "This error return is deprecated as of CUDA 5.0.",
    }


def test_the_table_holds_what_the_runtime_names() -> None:
    errors = {name: (code, text) for code, name, text, _ in DATA["errors"]}
    assert DATA["runtime"].startswith("12.")
    # what cudaGetErrorString says in every CUDA 12 runtime, as NCCL quotes it
    assert errors["cudaErrorMemoryAllocation"] == (2, "out of memory")
    assert errors["cudaErrorInvalidDevice"] == (101, "invalid device ordinal")
    assert errors["cudaErrorSystemNotReady"] == (802, "system not yet initialized")
    # every error read here is one the runtime names (a rename would leave a reading unused)
    assert set(_READINGS) <= set(errors)
    assert all(meaning for *_, meaning in DATA["errors"])


@pytest.mark.parametrize(("message", "name"), [
    ("Cuda failure 'out of memory'", "cudaErrorMemoryAllocation"),  # CUDACHECK (checks.h)
    ("Cuda failure 101 'invalid device ordinal'", "cudaErrorInvalidDevice"),  # CUCHECK
    # PyTorch (c10/cuda/CUDAException.h): "CUDA error: " and the runtime's text
    ("CUDA error: an illegal memory access was encountered", "cudaErrorIllegalAddress"),
    ("Cuda failure 801 'a text no runtime prints'", "cudaErrorNotSupported"),  # by its number
])
def test_a_message_is_read_as_cudas_error(message: str, name: str) -> None:
    error = cuda_error(message)
    assert error is not None and error.name == name


def test_a_message_without_a_cuda_error_is_none() -> None:
    assert cuda_error("Cuda failure 'something else'") is None
    assert cuda_error("NET/IB : Got async event : port error") is None
    error = cuda_error("Cuda failure 'named symbol not found'")
    assert error is not None and cuda_reading(error) is None  # known, without a reading
