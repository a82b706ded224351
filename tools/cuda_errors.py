#!/usr/bin/env python3
"""Write the table of CUDA's errors that ``clusterenv nccl-log`` reads, from CUDA itself.

NCCL prints a failed CUDA call as ``Cuda failure 'out of memory'`` (runtime API, CUDACHECK) or
``Cuda failure 2 'out of memory'`` (driver API, CUCHECK), and PyTorch as ``CUDA error: out of
memory``: the text is what ``cudaGetErrorString`` returns. This script asks the CUDA runtime for
every code's name and text (``cudaGetErrorName``/``cudaGetErrorString`` need no GPU) and reads
what each means from the documentation comment above it in ``driver_types.h``; both ship in the
``nvidia-cuda-runtime-cu12`` wheel::

    pip download nvidia-cuda-runtime-cu12 --no-deps -d /tmp/cudart
    python -m zipfile -e /tmp/cudart/nvidia_cuda_runtime_cu12-*.whl /tmp/cudart/x
    python tools/cuda_errors.py /tmp/cudart/x/nvidia/cuda_runtime

It writes ``src/clusterenv/nccl_log/cuda_errors.json`` (``--out``): ``[code, name, text,
meaning]`` per error, and the runtime's version; ``--check`` writes nothing and exits 1 when the
file would change. What to do about an error is not CUDA's to say: the readings are in
``clusterenv.nccl_log.cuda`` for the errors NCCL's users meet.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from generated import write_generated

OUT = Path(__file__).resolve().parents[1] / "src" / "clusterenv" / "nccl_log" / "cuda_errors.json"
_ENUM = re.compile(r"enum\s+__device_builtin__\s+cudaError\s*\{(.*?)\};", re.DOTALL)
_ENTRY = re.compile(r"/\*\*((?:(?!\*/).)*)\*/\s*(cudaError\w+)\s*=\s*(\d+)", re.DOTALL)
_MAX_CODE = 1100


def meanings(header: str) -> dict[str, str]:
    """The first sentence of the comment above each ``cudaError*`` value of ``driver_types.h``,
    e.g. ``cudaErrorNoDevice`` -> ``"This indicates that no CUDA-capable devices were detected
    by the installed CUDA driver."``."""
    enum = _ENUM.search(header)
    if enum is None:
        return {}
    out = {}
    for comment, name, _ in _ENTRY.findall(enum.group(1)):
        text = " ".join(line.strip().lstrip("*").strip() for line in comment.splitlines())
        text = re.sub(r"\\(?:ref|p|c)\s+:?:?(\S+)", r"\1", text).replace("\\deprecated", "")
        text = re.sub(r"\s+", " ", text).strip()
        sentence = re.match(r"(.+?\.)(?:\s|$)", text)
        out[name] = (sentence.group(1) if sentence else text)[:300]
    return out


def table(runtime: Path) -> dict[str, object]:
    """Every error the runtime in ``runtime`` (``lib/libcudart.so.12``, ``include/``) names."""
    lib = ctypes.CDLL(str(next((runtime / "lib").glob("libcudart.so.*"))))
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    version = ctypes.c_int()
    lib.cudaRuntimeGetVersion(ctypes.byref(version))
    about = meanings((runtime / "include" / "driver_types.h").read_text(encoding="utf-8"))
    errors = []
    for code in range(1, _MAX_CODE):
        name = (lib.cudaGetErrorName(code) or b"").decode()
        if not name.startswith("cudaError"):
            continue  # "unrecognized error code"
        text = (lib.cudaGetErrorString(code) or b"").decode()
        errors.append([code, name, text, about.get(name, "")])
    major, minor = divmod(version.value // 10, 100)
    return {"runtime": f"{major}.{minor}", "errors": errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runtime", type=Path,
                        help="the wheel's nvidia/cuda_runtime directory (lib/ and include/)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the table would change")
    args = parser.parse_args(argv)
    data = table(args.runtime)
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True) + "\n"
    print(f"CUDA runtime {data['runtime']}: {len(data['errors'])} errors")  # type: ignore[arg-type]
    status = write_generated(args.out, text, check=args.check)
    if not args.check:
        print(f"wrote {args.out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
