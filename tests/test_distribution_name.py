"""The name users install (``gpu-clusterenv``) and the names they use (``clusterenv``).

``clusterenv`` on the package index is an unrelated project (a Gym environment), so the
distribution has a name of its own; the import name, the console script and the docs' commands
stay ``clusterenv``.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTION = "gpu-clusterenv"


def test_the_distribution_installs_the_clusterenv_package_and_command() -> None:
    # Read as text: tomllib is 3.11+, and the project supports 3.10.
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project]", 1)[1].split("\n[", 1)[0]
    assert re.search(rf'^name = "{DISTRIBUTION}"$', section, re.MULTILINE), section
    assert '[project.scripts]\nclusterenv = "clusterenv.cli:main"\n' in text
    assert 'packages = ["src/clusterenv"]' in text
    assert re.search(rf'"{DISTRIBUTION}\[test(,docs)?\]"', text), "dev installs the test extra"


def test_the_docs_install_the_right_distribution() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    wrong = [f"{page.name}: {line.strip()}" for page in pages
             for line in page.read_text(encoding="utf-8").splitlines()
             if re.search(r"pip install (-U )?clusterenv\b(?![-\w])", line)]
    assert not wrong, wrong
    for page in ("README.md", "docs/quickstart.md"):
        assert f"pip install {DISTRIBUTION}" in (REPO / page).read_text(encoding="utf-8"), page
