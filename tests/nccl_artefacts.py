"""Real NCCL artefacts for the tests: a second NCCL release from the package index, and a
network plugin compiled here.

- :func:`nccl_release` gives the directory of ``libnccl.so.2`` from the ``nvidia-nccl-cu12``
  wheel of another release than the one installed (``.ci/run`` downloads it with ``pip download
  nvidia-nccl-cu12==2.21.5 --no-deps`` into the cache below; the library is extracted from the
  wheel once).
- :func:`compiled_plugin` compiles a shared object that exports ``ncclNetPlugin_vN`` with the
  system's C compiler, named as NCCL looks for it. Nothing ever loads it: NCCL would, in a job,
  and clusterenv reads its symbols from the file.

Both skip the test when the artefact is missing, and fail it under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from tests.conftest import require_tool, skip_or_fail

__all__ = ["CACHE", "OTHER_RELEASE", "compiled_plugin", "nccl_release"]

#: Where the downloaded wheels are kept between runs (outside the work tree).
CACHE = Path(os.environ.get("CLUSTERENV_TEST_CACHE")
             or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
             / "clusterenv-tests")
#: The NCCL release that stands for "another node's NCCL".
OTHER_RELEASE = "2.21.5"


def nccl_release(version: str = OTHER_RELEASE) -> Path:
    """The directory holding the real ``libnccl.so.2`` of NCCL ``version``."""
    target = CACHE / f"nccl-{version}"
    library = target / "libnccl.so.2"
    if library.is_file():
        return target
    wheels = sorted(CACHE.glob(f"nvidia_nccl_cu12-{version}-*.whl"))
    if not wheels:
        skip_or_fail(f"no nvidia-nccl-cu12 {version} wheel in {CACHE}: `pip download "
                     f"nvidia-nccl-cu12=={version} --no-deps -d {CACHE}` (.ci/run does)")
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[0]) as wheel, wheel.open("nvidia/nccl/lib/libnccl.so.2") as src:
        partial = library.with_suffix(".partial")
        with open(partial, "wb") as out:
            shutil.copyfileobj(src, out)
        partial.replace(library)
    return target


def compiled_plugin(directory: Path, *symbols: str, name: str = "libnccl-net.so") -> Path:
    """``directory/name``: a shared object exporting the data symbols ``symbols`` (what NCCL's
    ``dlsym`` looks up, e.g. ``"ncclNetPlugin_v8"``), compiled with ``cc``."""
    compiler = require_tool("cc", "apt-get install gcc")
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / f"{name}.c"
    source.write_text("struct plugin { const char* name; };\n" + "".join(
        f'struct plugin {symbol} = {{ "clusterenv-test" }};\n' for symbol in symbols))
    out = directory / name
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(source)], check=True,
                   capture_output=True, timeout=60)
    return out
