"""PyTorch's messages around NCCL failures, for ``tools/nccl_messages.py``.

PyTorch's source is not read here (it is large, and ProcessGroupNCCL is C++ that a CPU wheel
does not ship): each entry quotes the format at the pytorch/pytorch commit and function named in
its origin. What a CPU wheel can confirm is confirmed: given ``--torch-lib`` (an installed
``libtorch_cpu.so``), every entry whose fixed text is in that library's strings is marked as
found there (TCPStore, the socket layer and Gloo are in it; ProcessGroupNCCL and its NCCL
wrappers are in ``libtorch_cuda.so`` and stay unconfirmed).

The formats use ``%s``/``%d`` where PyTorch's ``fmt``/``c10::str`` insert a value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TORCH_MESSAGES", "TorchMessage", "torch_library_strings"]

_P = "pytorch/pytorch@87602c5"  # ProcessGroupNCCL.cpp, TCPStore.cpp, ProcessGroupGloo.cpp
_U = "pytorch/pytorch@37ee6bc"  # NCCLUtils.cpp (getNcclErrorDetailStr)
_A = "pytorch/pytorch@aac9c44"  # NCCLUtils.hpp (the C10D_NCCL_CHECK macros)
_S = "pytorch/pytorch@056b6f3"  # socket.cpp
_O = "pytorch/pytorch@0007e75"  # ProcessGroupNCCL.cpp of older releases
_G = "pytorch/gloo@5b46c34"  # gloo/transport/tcp/pair.cc
_G2 = "pytorch/gloo@3bc6839"  # gloo/transport/tcp/unbound_buffer.cc
_NCCL = "NVIDIA/nccl src/init.cc ncclGetErrorString"


@dataclass(frozen=True)
class TorchMessage:
    """One message of PyTorch (or Gloo) about a distributed failure.

    Attributes:
        level: ``W`` for a failure, ``I`` for a line that only informs.
        cls: Its class in ``tools/nccl_message_rules.py``.
        format: The text with ``%s``/``%d`` for inserted values.
        origin: Repository, commit and file/function it is quoted from.
        returns: ``"continues"`` for a warning after which PyTorch goes on (``TORCH_WARN``:
            Gloo falling back to loopback), ``""`` for a failure that raises or aborts.
    """

    level: str
    cls: str
    format: str
    origin: str
    returns: str = ""


TORCH_MESSAGES: tuple[TorchMessage, ...] = (
    # NCCLUtils: what a failed NCCL call becomes (N1, N2, N4, N6 and the interpretations)
    TorchMessage("W", "torch-nccl", "NCCL error in: %s:%d, %s, NCCL version %s",
                 f"{_A} NCCLUtils.hpp C10D_NCCL_CHECK"),
    TorchMessage("W", "torch-nccl", "NCCL error: %s, NCCL version %s",
                 f"{_P} ProcessGroupNCCL.cpp checkForNCCLErrorsInternal"),
    TorchMessage("W", "torch-nccl", "NCCL timeout in: %s:%d",
                 f"{_A} NCCLUtils.hpp C10D_CHECK_TIMEOUT"),
    TorchMessage("W", "torch-nccl", "NCCL timeout in communicator initialization.",
                 f"{_P} NCCLUtils.cpp NCCLComm::waitUntilInitialized"),
    TorchMessage("W", "torch-nccl", "NCCL communicator was aborted on rank %d.",
                 f"{_P} NCCLUtils.cpp NCCLComm::getNcclComm"),
    TorchMessage("W", "torch-nccl", "ncclUnhandledCudaError: Call to CUDA function failed.",
                 f"{_U} NCCLUtils.cpp getNcclErrorDetailStr"),
    TorchMessage("W", "torch-nccl", "ncclSystemError: System call (e.g. socket, malloc) or "
                 "external library call failed or device error.",
                 f"{_U} NCCLUtils.cpp getNcclErrorDetailStr"),
    TorchMessage("W", "torch-nccl", "ncclInternalError: Internal check failed.",
                 f"{_U} NCCLUtils.cpp getNcclErrorDetailStr"),
    TorchMessage("W", "torch-nccl", "ncclInvalidArgument: Invalid value for an argument.",
                 f"{_U} NCCLUtils.cpp getNcclErrorDetailStr"),
    TorchMessage("W", "torch-nccl", "ncclInvalidUsage: This usually reflects invalid usage of "
                 "NCCL library.", f"{_U} NCCLUtils.cpp getNcclErrorDetailStr"),
    TorchMessage("W", "torch-nccl", "ncclRemoteError: A call failed possibly due to a network "
                 "error or a remote process exiting prematurely.",
                 f"{_U} NCCLUtils.cpp getNcclErrorDetailStr"),
    # ncclGetErrorString: the <nccl string> inside N1/N2
    TorchMessage("W", "torch-nccl", "unhandled system error (run with NCCL_DEBUG=INFO for "
                 "details)", _NCCL),
    TorchMessage("W", "torch-nccl", "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                 _NCCL),
    TorchMessage("W", "torch-nccl", "internal error - please report this issue to the NCCL "
                 "developers", _NCCL),
    TorchMessage("W", "torch-nccl", "remote process exited or there was a network error", _NCCL),
    # the watchdog (W1, W2, W7, W8, W12)
    TorchMessage("W", "torch-watchdog", "Watchdog caught collective operation timeout: %s ran "
                 "for %d milliseconds before timing out.",
                 f"{_P} ProcessGroupNCCL.cpp WorkNCCL::checkTimeout"),
    TorchMessage("W", "torch-watchdog", "Collective %s raised the following async exception: %s",
                 f"{_P} ProcessGroupNCCL.cpp WorkNCCL::checkAndSetException"),
    TorchMessage("W", "torch-watchdog", "Process group watchdog thread terminated with "
                 "exception: %s", f"{_P} ProcessGroupNCCL.cpp Watchdog::run"),
    TorchMessage("W", "torch-watchdog", "NCCL watchdog thread terminated with exception: %s",
                 f"{_O} ProcessGroupNCCL.cpp ncclCommWatchdog"),
    TorchMessage("W", "torch-watchdog", "Work %s timed out in blocking wait.",
                 f"{_P} ProcessGroupNCCL.cpp WorkNCCL::wait"),
    TorchMessage("W", "torch-watchdog", "Some NCCL operations have failed or timed out. Due to "
                 "the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                 "corrupted/incomplete data.",
                 f"{_P} ProcessGroupNCCL.cpp WorkNCCL::handleException"),
    TorchMessage("W", "torch-watchdog", "ProcessGroupNCCL's watchdog got stuck for %d seconds "
                 "without making progress in monitoring enqueued collectives.",
                 f"{_P} ProcessGroupNCCL.cpp HeartbeatMonitor::runLoop"),
    TorchMessage("W", "torch-store", "[%d] is setting up NCCL communicator and retrieving "
                 "ncclUniqueId from [0] via c10d key-value store by key '%s', but store->get('%s') "
                 "got error: %s", f"{_P} ProcessGroupNCCL.cpp broadcastUniqueNCCLID"),
    # TCPStore and its sockets (T2, T3, T4, T6, T7, T8)
    TorchMessage("W", "torch-store", "TCP client failed to connect/validate to host %s:%s - "
                 "timed out (try=%d, timeout=%dms): %s", f"{_P} TCPStore.cpp"),
    TorchMessage("I", "torch-store", "TCP client failed to connect/validate to host %s:%s - "
                 "retrying (try=%d, timeout=%dms, delay=%dms): %s", f"{_P} TCPStore.cpp"),
    TorchMessage("W", "torch-store", "The client socket has timed out after %s while trying to "
                 "connect to (%s, %s).", f"{_S} socket.cpp"),
    TorchMessage("W", "torch-store", "The client socket has failed to connect to any network "
                 "address of (%s, %s).", f"{_S} socket.cpp"),
    TorchMessage("W", "torch-store", "The server socket has failed to listen on any local "
                 "network address. port: %s, useIpv6: %s, code: %s, name: %s, message: %s",
                 f"{_S} socket.cpp"),
    TorchMessage("W", "torch-store", "Timed out after %d seconds waiting for clients. %d/%d "
                 "clients joined.", f"{_P} TCPStore.cpp waitForWorkers"),
    TorchMessage("W", "torch-store", "wait timeout after %dms, keys: %s", f"{_P} TCPStore.cpp"),
    TorchMessage("W", "torch-store", "recvValue failed on %s: %s", f"{_P} TCPStore.cpp"),
    TorchMessage("W", "torch-store", "Failed to recv, got 0 bytes. Connection was likely closed. "
                 "Did the remote server shutdown or crash?", f"{_P} Utils.hpp tcputil::recvBytes"),
    # Gloo (G1, G2, G3, G5)
    TorchMessage("W", "gloo", "Gloo connectFullMesh failed with %s",
                 f"{_P} ProcessGroupGloo.cpp"),
    TorchMessage("W", "gloo", "Unable to resolve hostname to a (local) address. Using the "
                 "loopback address as fallback. Manually set the network interface to bind to "
                 "with GLOO_SOCKET_IFNAME.", f"{_P} ProcessGroupGloo.cpp", "continues"),
    TorchMessage("W", "gloo", "Connection closed by peer %s", f"{_G} pair.cc Pair::read"),
    TorchMessage("W", "gloo", "Timed out waiting %dms for recv operation to complete",
                 f"{_G2} unbound_buffer.cc"),
)


def torch_library_strings(path: str | Path) -> dict[str, str]:
    """``{"name": "libtorch_cpu.so of torch 2.13.0", "strings": ...}``: every run of printable
    characters in the library (as ``strings`` prints them), for confirming formats."""
    library = Path(path)
    data = library.read_bytes()
    runs = re.findall(rb"[\x20-\x7e]{6,}", data)
    version_file = library.parent.parent / "version.py"
    version = ""
    if version_file.exists():
        match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", version_file.read_text())
        version = f" of torch {match.group(1)}" if match else ""
    # PyTorch builds messages with fmt ("{}") and c10::str (pieces): compare with both
    text = "\n".join(r.decode("ascii") for r in runs)
    return {"name": f"{library.name}{version}", "strings": text.replace("{}", "%s")}
