"""Run inside a fresh interpreter (``python -I -S``): ask libnccl which interface it bootstraps on.

Never imported by clusterenv: :mod:`clusterenv.nccl.probe` starts it as a script, so NCCL's
state, threads and sockets live and die in this process, never in the caller's.

Usage: ``python -I -S _probe_child.py LIBRARY`` with a JSON list of environments on stdin. The
library is loaded once (loading reads no NCCL variable); then for each environment a forked
worker replaces its environment, calls ``ncclGetVersion`` and ``ncclGetUniqueId`` (which runs
NCCL's bootstrap interface choice and needs no GPU) with ``NCCL_DEBUG=INFO``, and writes what
NCCL printed plus a final marker line ``<MARKER> VERSION RESULT`` (or ``<MARKER> load ERROR``)
into a pipe. The workers run in parallel; their outputs are written to stdout as one JSON list,
in the order given.
"""

import ctypes
import json
import os
import sys

MARKER = "@@clusterenv-nccl-probe"
_UNIQUE_ID_BYTES = 128  # sizeof(ncclUniqueId)


def _worker(nccl: ctypes.CDLL, environ: dict[str, str], write_fd: int) -> None:
    os.dup2(write_fd, 1)
    os.dup2(write_fd, 2)
    os.environ.clear()
    os.environ.update(environ)
    try:
        version = ctypes.c_int(0)
        nccl.ncclGetVersion(ctypes.byref(version))
        unique_id = ctypes.create_string_buffer(_UNIQUE_ID_BYTES)
        result = nccl.ncclGetUniqueId(unique_id)
        tail = f"{version.value} {result}"
    except AttributeError as e:  # not NCCL
        tail = "load " + " ".join(str(e).split())
    ctypes.CDLL(None).fflush(None)  # NCCL logs through stdio
    os.write(1, f"\n{MARKER} {tail}\n".encode())


def main() -> int:
    library = sys.argv[1]
    environs = json.loads(sys.stdin.read())
    try:
        # Loading reads no NCCL variable (NCCL initialises on its first call), so every worker
        # shares this load and still sees only its own environment.
        nccl = ctypes.CDLL(library)
    except OSError as e:
        tail = "load " + " ".join(str(e).split())
        sys.stdout.write(json.dumps([f"\n{MARKER} {tail}\n"] * len(environs)))
        return 0
    readers = []
    for environ in environs:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(read_fd)
            try:
                _worker(nccl, environ, write_fd)
            finally:
                os._exit(0)
        os.close(write_fd)
        readers.append((pid, read_fd))
    outputs = []
    for pid, read_fd in readers:
        chunks = []
        while True:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        text = b"".join(chunks).decode("utf-8", "replace")
        if os.WIFSIGNALED(status):
            text += f"\n{MARKER} signal {os.WTERMSIG(status)}\n"
        outputs.append(text)
    sys.stdout.write(json.dumps(outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
