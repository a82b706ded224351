"""What a release needs beyond the code: a licence, project URLs, a README whose links work on
the package index page, and a ``docs`` extra with nothing but MkDocs.

What the built wheel and sdist hold (the licence, ``py.typed``, no tests) is checked on the
artefacts themselves by ``.ci/check_dist.py`` in ``.ci/run``, after ``twine check --strict``.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def _pyproject() -> dict[str, Any]:
    try:  # Python 3.11+; the project supports 3.10, where these checks are skipped
        tomllib = importlib.import_module("tomllib")
    except ModuleNotFoundError:
        pytest.skip("tomllib is Python 3.11+; the checks read pyproject.toml with it")
    data: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return data


def _mkdocs_value(key: str) -> str:
    match = re.search(rf"^{key}: (\S+)$", (REPO / "mkdocs.yml").read_text(encoding="utf-8"),
                      re.MULTILINE)
    assert match, f"mkdocs.yml has no {key}"
    return match.group(1)


def test_the_licence_is_the_apache_text_and_ships_with_the_package() -> None:
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text[:200] and "Version 2.0, January 2004" in text[:200]
    assert "END OF TERMS AND CONDITIONS" in text
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]


def test_project_urls_agree_with_the_docs_site_and_the_repository() -> None:
    urls = _pyproject()["project"]["urls"]
    assert set(urls) >= {"Source", "Documentation", "Changelog", "Issues"}
    assert all(url.startswith("https://") for url in urls.values()), urls
    assert urls["Source"] == _mkdocs_value("repo_url")
    assert urls["Documentation"] == _mkdocs_value("site_url")
    assert urls["Issues"] == urls["Source"] + "/issues"
    assert urls["Changelog"].startswith(urls["Source"] + "/") and urls["Changelog"].endswith(
        "CHANGELOG.md")


def test_readme_links_are_absolute_and_name_pages_that_exist() -> None:
    # The package index shows the README without the repository around it: a relative link
    # (`docs/quickstart.md`) leads nowhere there.
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", readme) + re.findall(r'src="([^"]+)"', readme)
    assert targets, "the README links to the documentation"
    relative = [t for t in targets if not t.startswith("https://")]
    assert not relative, relative
    site = _mkdocs_value("site_url")
    pages = [t.removeprefix(site).strip("/") for t in targets if t.startswith(site)]
    assert "quickstart" in pages
    missing = [p for p in pages if p and not (REPO / "docs" / f"{p}.md").is_file()]
    assert not missing, f"README links to pages docs/ does not have: {missing}"
    repository = _mkdocs_value("repo_url")
    files = [t.removeprefix(f"{repository}/blob/main/") for t in targets
             if t.startswith(f"{repository}/blob/main/")]
    assert all((REPO / f).is_file() for f in files), files


def test_the_docs_extra_is_mkdocs_and_its_plugins_only() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    names = [re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0] for requirement in extras["docs"]]
    assert names and all(name.startswith(("mkdocs", "pymdown")) for name in names), names
    # The theme and every plugin mkdocs.yml uses come from the extra.
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert "name: material" in config and "mkdocs-material" in names
    assert "- mkdocstrings:" in config and "mkdocstrings" in names
    assert any("gpu-clusterenv[" in r and "docs" in r and "test" in r for r in extras["dev"])


def test_the_changelog_has_a_dated_section_for_the_version_with_one_heading_of_each_kind() -> None:
    # Keep a Changelog: [Unreleased] first, then the releases, newest first, each dated, each
    # kind of change under one heading, compare links at the end; a released version (no .devN)
    # has its own section, a development version comes after the newest one
    from clusterenv import __version__

    assert _pyproject()["project"]["version"] == __version__
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    assert sections and sections[0].startswith("[Unreleased]\n")
    released = [re.match(r"\[([0-9]+\.[0-9]+\.[0-9]+)\] - [0-9]{4}-[0-9]{2}-[0-9]{2}\n", s)
                for s in sections[1:]]
    assert released and all(released), "every section after [Unreleased] is '[X.Y.Z] - DATE'"
    versions = [m.group(1) for m in released if m]
    base = __version__.split(".dev")[0]
    assert versions[0] == base if ".dev" not in __version__ else versions[0] != base
    kinds = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    for section in sections:
        headings = re.findall(r"^### (.+)$", section, flags=re.MULTILINE)
        assert len(headings) == len(set(headings)), f"a kind opened twice in ## {section[:20]}"
        assert set(headings) <= kinds, set(headings) - kinds
    repository = _pyproject()["project"]["urls"]["Source"]
    assert f"[Unreleased]: {repository}/compare/v{versions[0]}...HEAD" in text
    for version in versions:
        assert f"[{version}]: {repository}/" in text
