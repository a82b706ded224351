"""Read, from a torch installation, what ``clusterenv.hang.recorder`` knows about the flight
recorder, so a new torch release can be checked the same way.

Usage::

    python tests/scripts/torch_fr_variables.py /path/to/site-packages/torch

Prints one JSON object: the torch version (from its ``version.py``), the buffer-size variables
and default of the ``getCvarInt`` call in its ``FlightRecorder.hpp`` (or ``TraceUtils.h``), the
dump-file and dump-on-timeout variables its library and headers name, and the dump format
version (``version_val``). Nothing is imported from torch; the library is searched, not loaded.
"""

from __future__ import annotations

import json
import mmap
import re
import sys
from pathlib import Path

HEADERS = ("include/torch/csrc/distributed/c10d/FlightRecorder.hpp",
           "include/torch/csrc/distributed/c10d/TraceUtils.h")
NCCL_HEADER = "include/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp"
CANDIDATES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE",
              "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_CPP_STACK",
              "TORCH_NCCL_TRACE_CPP_STACK", "TORCH_FR_DUMP_DYNAMIC_FILE_NAME",
              "TORCH_NCCL_DUMP_ON_TIMEOUT")


def read(torch: Path) -> dict[str, object]:
    """The facts, as a JSON-ready dict."""
    out: dict[str, object] = {}
    version = (torch / "version.py").read_text() if (torch / "version.py").exists() else ""
    found = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", version)
    out["version"] = found[1] if found else None
    for relative in HEADERS:
        path = torch / relative
        if not path.exists():
            continue
        text = path.read_text(errors="replace")
        call = re.search(r"getCvarInt\(\s*\{([^{}]*BUFFER_SIZE[^{}]*)\}\s*,\s*(-?\d+)\s*\)", text)
        if call:
            out["buffer_size"] = re.findall(r'"([A-Z0-9_]+)"', call[1])
            out["default_entries"] = int(call[2])
            out["header"] = relative
        dump_version = re.search(r'DEFINE_CONSTANT\(version_val, "([^"]+)"\)', text)
        if dump_version:
            out["dump_format_version"] = dump_version[1]
    nccl = torch / NCCL_HEADER
    out["nccl_header_names"] = sorted(set(re.findall(
        r'"(TORCH_NCCL_[A-Z_]+)"', nccl.read_text(errors="replace")))) if nccl.exists() else []
    library = torch / "lib" / "libtorch_cpu.so"
    with open(library, "rb") as handle, mmap.mmap(handle.fileno(), 0,
                                                  access=mmap.ACCESS_READ) as data:
        out["library_names"] = [n for n in CANDIDATES if data.find(n.encode() + b"\0") >= 0]
    return out


def main() -> int:
    """Print the facts of the torch directory given."""
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(read(Path(sys.argv[1])), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
