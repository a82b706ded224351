"""Check what a release ships: ``python .ci/check_dist.py DIST_DIR`` after ``python -m build``.

The wheel must carry the licence (``*.dist-info/licenses/LICENSE``, the Apache 2.0 text) and
``clusterenv/py.typed`` (PEP 561: type checkers read our annotations), name the licence and the
project URLs in its metadata, and hold nothing but the package (no tests, benchmarks or docs).
The sdist must carry the licence too. Prints one line per problem; exit 1 when there is any.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

LICENCE_HEAD = "Apache License"
URLS = ("Documentation", "Source", "Issues", "Changelog")


def check_wheel(path: Path) -> list[str]:
    problems = []
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        licences = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        if not licences:
            problems.append(f"{path.name}: no .dist-info/licenses/LICENSE")
        elif LICENCE_HEAD not in wheel.read(licences[0]).decode("utf-8", "replace")[:400]:
            problems.append(f"{path.name}: {licences[0]} is not the Apache License text")
        if "clusterenv/py.typed" not in names:
            problems.append(f"{path.name}: no clusterenv/py.typed")
        stray = sorted({n.split("/")[0] for n in names
                        if not n.startswith(("clusterenv/", "gpu_clusterenv-"))})
        if stray:
            problems.append(f"{path.name}: holds more than the package: {', '.join(stray)}")
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(wheel.read(metadata_name).decode("utf-8"))
    if metadata.get("License-Expression") != "Apache-2.0":
        problems.append(f"{path.name}: License-Expression is {metadata.get('License-Expression')!r}")
    if "LICENSE" not in (metadata.get_all("License-File") or []):
        problems.append(f"{path.name}: no License-File: LICENSE in METADATA")
    labels = {url.split(",", 1)[0].strip() for url in metadata.get_all("Project-URL") or []}
    missing = [label for label in URLS if label not in labels]
    if missing:
        problems.append(f"{path.name}: Project-URL missing for {', '.join(missing)}")
    return problems


def check_sdist(path: Path) -> list[str]:
    with tarfile.open(path) as sdist:
        names = sdist.getnames()
    top = names[0].split("/")[0]
    if f"{top}/LICENSE" not in names:
        return [f"{path.name}: no {top}/LICENSE"]
    return []


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python .ci/check_dist.py DIST_DIR", file=sys.stderr)
        return 2
    dist = Path(argv[0])
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    problems = []
    if len(wheels) != 1 or len(sdists) != 1:
        problems.append(f"{dist}: expected one wheel and one sdist, found "
                        f"{[p.name for p in wheels + sdists]}")
    for wheel in wheels:
        problems += check_wheel(wheel)
    for sdist in sdists:
        problems += check_sdist(sdist)
    for problem in problems:
        print(f"check_dist: {problem}", file=sys.stderr)
    if not problems:
        print(f"check_dist: {', '.join(p.name for p in wheels + sdists)}: licence, py.typed, "
              "project URLs, nothing but the package")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
