#!/usr/bin/env python3
"""Write the catalogue of the messages NCCL (and the programs around it) print, from their source.

``clusterenv nccl-log`` recognises a log line by this catalogue: every ``WARN`` format string
of NCCL at every release tag, the ``INFO`` lines that report a failure or a choice that matters,
the same of the network plugins people run (aws-ofi-nccl, nccl-rdma-sharp-plugins,
GPUDirect-TCPX, FastSocket), libibverbs' warnings, nccl-tests' failure lines and PyTorch's
c10d/Gloo messages (``tools/c10d_messages.py``). Each entry has a matcher (a regular expression
derived from the printf format), where it comes from (file and line at the first and last
release that prints it), its meaning class (``tools/nccl_message_rules.py``) and what the code
does after printing it (the ``ncclResult_t`` it returns).

Run it with the checkouts (bare git repositories work: every release tag is read without
checking anything out; a plain directory is read as one release)::

    python tools/nccl_messages.py --nccl ../nccl --aws-ofi-nccl ../aws-ofi-nccl \\
        --nccl-rdma-sharp-plugins ../nccl-rdma-sharp-plugins \\
        --nccl-fastsocket ../nccl-fastsocket --nccl-plugin-gpudirecttcpx ../tcpx \\
        --rdma-core ../rdma-core --nccl-tests ../nccl-tests \\
        --torch-lib .venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so

It writes ``src/clusterenv/nccl_log/messages.json`` (``--out``) and prints the coverage; with
``--check`` it writes nothing and exits 1 when the file would change. docs/nccl-log.md says when
to run it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from c10d_messages import TORCH_MESSAGES, torch_library_strings
from c_source import (
    LogCall,
    first_line,
    format_to_regex,
    literal_length,
    log_calls,
    result_names,
)
from generated import write_generated
from git_tree import Repository
from nccl_message_rules import CLASSES, classify, info_level, override_for, path_class

OUT = Path(__file__).resolve().parents[1] / "src" / "clusterenv" / "nccl_log" / "messages.json"
#: Fewer fixed letters and digits than this and a format matches too much to name a message
#: (``"%s"``, ``"%s: %s"``); such formats are counted and left out.
MIN_LITERAL = 6
_SUFFIXES = (".cc", ".cu", ".cpp", ".c", ".h", ".hpp", ".cuh")
_STRING_MACRO = re.compile(
    r'^[ \t]*#[ \t]*define[ \t]+([A-Z_][A-Z0-9_]*)[ \t]+"([^"\\\n]*)"[ \t]*$', re.M)


@dataclass(frozen=True)
class Project:
    """A source tree to read and how.

    Attributes:
        name: Its name in the catalogue, e.g. ``"nccl"``.
        tag: The release tags read (a full match; groups are the version numbers), or None to
            read only the checked-out commit.
        since: The first version read, e.g. ``(2, 3)``.
        roots: Path prefixes read, e.g. ``("src/",)``.
        skip: Path substrings skipped (vendored or device code, tests).
        macros: Log macro -> ``(level, index of the format argument, text it prints before the
            format)``; level ``W`` (a warning) or ``I`` (information).
        keep: Only formats matching this are catalogued (for projects whose print calls are
            mostly not log messages).
    """

    name: str
    tag: str | None
    since: tuple[int, ...]
    roots: tuple[str, ...]
    macros: dict[str, tuple[str, int, str]]
    skip: tuple[str, ...] = ()
    keep: str | None = None


_NCCL_MACROS = {"WARN": ("W", 0, ""), "INFO": ("I", 1, ""),
                # 2.30: INFO_LOC(flags, fmt) prints "file:line (function) " before the format
                # (INFO_LOC_FN in src/include/debug.h)
                "INFO_LOC": ("I", 1, "%s:%d (%s) ")}
PROJECTS: tuple[Project, ...] = (
    Project("nccl", r"v(\d+)\.(\d+)\.(\d+)-(\d+)", (2, 3), ("src/",), _NCCL_MACROS,
            skip=("nvtx", "/device/")),
    Project("aws-ofi-nccl", r"v(\d+)\.(\d+)\.(\d+)(?:-aws)?", (1, 0), ("src/", "include/"),
            {"NCCL_OFI_WARN": ("W", 0, ""), "NCCL_OFI_INFO": ("I", 1, "")}),
    Project("nccl-rdma-sharp-plugins", r"v(\d+)\.(\d+)\.(\d+)", (1, 0), ("src/", "include/"),
            {"WARN": ("W", 0, ""), "INFO": ("I", 1, "")}),
    Project("nccl-plugin-gpudirecttcpx", None, (), ("src/",),
            {"WARN": ("W", 0, ""), "INFO": ("I", 1, "")}, skip=("test",)),
    Project("nccl-fastsocket", None, (), ("",), {"WARN": ("W", 0, ""), "INFO": ("I", 1, "")}),
    # rdma-core: libibverbs' own warnings on stderr ("libibverbs: Warning: ...")
    Project("rdma-core", None, (), ("libibverbs/",), {"fprintf": ("W", 1, "")},
            keep=r"^libibverbs: "),
    # nccl-tests: the line a failed NCCL or CUDA call prints ("<host>: Test NCCL failure ...")
    Project("nccl-tests", None, (), ("src/common",), {"printf": ("W", 0, "")},
            keep=r"failure"),
)


@dataclass
class Entry:
    """One message: a format of one project and level, wherever and whenever it is printed."""

    project: str
    level: str
    format: str
    seen: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # path -> (release, line)
    returns: Counter[str] = field(default_factory=Counter)


def _version(tag: str, pattern: str) -> tuple[int, ...] | None:
    match = re.fullmatch(pattern, tag)
    return tuple(int(g) for g in match.groups()) if match else None


def releases(repo: Repository, project: Project) -> list[str]:
    """The tags of ``project`` that are read, oldest first (the checked-out commit when the
    project has no release tags or the path is not a git repository)."""
    if project.tag is None or not repo.is_git:
        return [repo.head()]
    tags = [(v, t) for t in repo.tags() if (v := _version(t, project.tag)) and v >= project.since]
    # "v1.4.0" and "v1.4.0-aws" are the same release for aws-ofi-nccl: keep one of each version
    unique: dict[tuple[int, ...], str] = {}
    for version, tag in sorted(tags):
        unique.setdefault(version, tag)
    return [unique[v] for v in sorted(unique)]


def _string_macros(repo: Repository, files: list[tuple[str, str]],
                   cache: dict[str, str]) -> dict[str, str]:
    """``#define NAME "text"`` of the project's headers (``PFX`` -> ``"libibverbs: "``)."""
    found: dict[str, str] = {}
    for path, blob in files:
        if path.endswith((".h", ".hpp")):
            text = cache.setdefault(blob, repo.read(blob))
            found.update(_STRING_MACRO.findall(text))
    return found


def nccl_results(repo: Repository, tags: list[str]) -> frozenset[str]:
    """Every value of ``ncclResult_t`` that NCCL's header (``src/nccl.h.in``) declares at any
    of ``tags``: what a call can return after it logs."""
    names: set[str] = set()
    for tag in tags:
        for path, blob in repo.files(tag, (".h.in",)):
            if path == "src/nccl.h.in":
                names |= result_names(repo.read(blob))
    return frozenset(names)


def read_project(repo: Repository, project: Project, progress: Callable[[str], None],
                 results: frozenset[str] = frozenset(),
                 ) -> tuple[list[str], dict[tuple[str, str], Entry]]:
    """Every log call of ``project`` at each release: ``(releases, entries by (level, format))``;
    ``results`` are the values of ``ncclResult_t`` (NCCL's own are read here when it is
    NCCL)."""
    tags = releases(repo, project)
    if project.name == "nccl":
        results = results | nccl_results(repo, tags)
    macros = {name: spec[1] for name, spec in project.macros.items()}
    blobs: dict[str, list[LogCall]] = {}
    texts: dict[str, str] = {}
    entries: dict[tuple[str, str], Entry] = {}
    keep = re.compile(project.keep) if project.keep else None
    for index, tag in enumerate(tags):
        progress(f"{project.name} {tag}")
        files = [(path, blob) for path, blob in repo.files(tag, _SUFFIXES)
                 if path.startswith(project.roots) and not any(s in path for s in project.skip)]
        constants = _string_macros(repo, files, texts) if keep else {}
        for path, blob in files:
            calls = blobs.get(blob)
            if calls is None:
                text = texts.pop(blob, None) or repo.read(blob)
                for name, value in constants.items():  # string constants spelt out first
                    text = re.sub(rf"\b{name}\b(?=\s*\")", f'"{value}"', text)
                calls = blobs[blob] = list(log_calls(text, macros, results))
            for call in calls:
                level, _, before = project.macros[call.macro]
                fmt = first_line(before + call.format)
                if keep is not None and not keep.search(fmt):
                    continue
                entry = entries.get((level, fmt))
                if entry is None:
                    entry = entries[(level, fmt)] = Entry(project.name, level, fmt)
                entry.seen.setdefault(path, []).append((index, call.line))
                entry.returns[call.returns] += 1
    return tags, entries


def _origins(entry: Entry, prefix: str) -> list[list[object]]:
    """``[path, first release, line there, last release, line there]`` per source file."""
    out = []
    for path, seen in sorted(entry.seen.items(), key=lambda item: min(item[1])):
        first, last = min(seen), max(seen)
        out.append([prefix + path, first[0], first[1], last[0], last[1]])
    return out


def _returns(entry: Entry) -> str:
    known = [(n, r) for r, n in entry.returns.items() if r]
    return max(known)[1] if known else ""


def catalogue(read: Iterable[tuple[Project, list[str], dict[tuple[str, str], Entry]]],
              torch: dict[str, str] | None) -> tuple[dict[str, object], list[str]]:
    """The catalogue as JSON-ready data, and the coverage report."""
    report: list[str] = []
    messages: list[dict[str, object]] = []
    release_lists: dict[str, list[str]] = {}
    unclassed: list[str] = []
    for project, tags, entries in read:
        release_lists[project.name] = tags
        prefix = "" if project.name == "nccl" else project.name + "/"
        counts: Counter[str] = Counter()
        per_release: Counter[int] = Counter()
        for (called, fmt), entry in sorted(entries.items()):
            level = called if called != "I" else info_level(fmt) or ""
            if not level:
                counts["info not catalogued"] += 1
                continue
            if literal_length(fmt) < MIN_LITERAL:
                counts["too little fixed text"] += 1
                continue
            path = next(iter(sorted(entry.seen, key=lambda p: min(entry.seen[p]))))
            cls = classify(prefix + path, fmt)
            if cls is None:
                unclassed.append(f"{project.name} {path}: {fmt!r}")
            record: dict[str, object] = {
                "project": project.name, "level": level, "class": cls, "format": fmt,
                "regex": format_to_regex(fmt), "origins": _origins(entry, prefix),
            }
            returns = _returns(entry)
            if returns:
                record["returns"] = returns
            _apply_override(record, fmt)
            messages.append(record)
            counts["warn" if level == "W" else "info"] += 1
            if level == "F":
                counts["failure info"] += 1
            for releases_seen in entry.seen.values():
                for index in {r for r, _ in releases_seen}:
                    per_release[index] += 1
        report.append(f"{project.name}: {len(tags)} release(s) {tags[0]} .. {tags[-1]}; "
                      f"{counts['warn']} warning and {counts['info']} info formats catalogued "
                      f"({counts['failure info']} of the info ones report a failure); "
                      f"left out: {counts['info not catalogued']} info lines that report no "
                      f"failure or choice, {counts['too little fixed text']} formats of "
                      f"fewer than {MIN_LITERAL} fixed letters")
        if len(tags) > 1:
            report.append("  entries per release: " + ", ".join(
                f"{tags[i]} {per_release[i]}" for i in range(len(tags))))
    torch_report = _torch_entries(messages, torch)
    report.append(torch_report)
    classed = sum(1 for m in messages if m["class"])
    report.append(f"classed: {classed} of {len(messages)} "
                  f"({100 * classed / max(1, len(messages)):.1f}%)")
    report += [f"UNCLASSED {u}" for u in unclassed]
    data: dict[str, object] = {
        "format": 1,
        "releases": release_lists,
        "classes": {name: {"meaning": c.meaning, "causes": c.causes,
                           "consequence_of": list(c.consequence_of)}
                    for name, c in sorted(CLASSES.items())},
        **_compact(messages),
    }
    return data, report


#: The fields of each message, in the order of its array in the file (the file stays a third of
#: the size it has with a dictionary per message).
FIELDS = ("project", "level", "class", "format", "regex", "origins", "returns", "extra")


def _compact(messages: list[dict[str, object]]) -> dict[str, object]:
    """Messages as arrays of :data:`FIELDS`; source paths and projects as indices into tables.

    ``origins`` holds ``[path index, first release, line, last release, line]`` per file, the
    releases as indices into ``releases[project]``; ``extra`` holds the reviewed overrides
    (``fatal``, ``causes``, ``consequence_of``) and ``confirmed_in``, or is absent.
    """
    projects: dict[str, int] = {}
    paths: dict[str, int] = {}
    rows = []
    for message in messages:
        origins = [[paths.setdefault(str(o[0]), len(paths)), *o[1:]]
                   for o in message["origins"]]  # type: ignore[attr-defined]
        extra = {k: message[k] for k in ("fatal", "causes", "consequence_of", "confirmed_in")
                 if k in message}
        row: list[object] = [projects.setdefault(str(message["project"]), len(projects)),
                             message["level"], message["class"], message["format"],
                             message["regex"], origins, message.get("returns", "")]
        if extra:
            row.append(extra)
        rows.append(row)
    # what each file does, for a return trace that names it (``transport/nvls.cc:174 -> 1``)
    classes = [path_class(path) or "" for path in paths]
    return {"fields": list(FIELDS), "projects": list(projects), "paths": list(paths),
            "path_classes": classes, "messages": rows}


def _apply_override(record: dict[str, object], fmt: str) -> None:
    override = override_for(fmt)
    if override is None:
        return
    if override.fatal:
        record["fatal"] = True
    if override.causes:
        record["causes"] = override.causes
    if override.consequence_of:
        record["consequence_of"] = list(override.consequence_of)


def _torch_entries(messages: list[dict[str, object]], torch: dict[str, str] | None) -> str:
    """Append PyTorch's messages; say which the installed library confirms."""
    confirmed = 0
    for message in TORCH_MESSAGES:
        record: dict[str, object] = {
            "project": "pytorch", "level": message.level, "class": message.cls,
            "format": message.format, "regex": format_to_regex(message.format),
            "origins": [[message.origin, 0, 0, 0, 0]],
        }
        if message.returns:
            record["returns"] = message.returns
        _apply_override(record, message.format)
        if torch is not None:
            pieces = [p for p in re.split(r"%[-0-9.]*[a-z]", message.format) if len(p) >= 12]
            if pieces and all(p.strip() in torch["strings"] for p in pieces):
                record["confirmed_in"] = torch["name"]
                confirmed += 1
        messages.append(record)
    where = f"; {confirmed} of them found in {torch['name']}" if torch else \
        " (no --torch-lib given: none confirmed against a library)"
    return f"pytorch: {len(TORCH_MESSAGES)} formats from c10d's source{where}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for project in PROJECTS:
        parser.add_argument(f"--{project.name}", metavar="DIR",
                            help=f"a checkout or bare clone of {project.name}")
    parser.add_argument("--torch-lib", metavar="FILE",
                        help="libtorch_cpu.so of an installed torch, to confirm c10d's messages")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the catalogue would change")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    given = [(p, getattr(args, p.name.replace("-", "_"))) for p in PROJECTS]
    if not given[0][1]:
        parser.error("--nccl DIR is required (a clone of github.com/NVIDIA/nccl)")

    def progress(text: str) -> None:
        if not args.quiet:
            print(f"reading {text}", file=sys.stderr, end="\r")

    read = []
    results: frozenset[str] = frozenset()  # NCCL's ncclResult_t, read first: plugins return it
    for project, path in given:
        if not path:
            continue
        repo = Repository(path)
        try:
            if project.name == "nccl":
                results = nccl_results(repo, releases(repo, project))
            tags, entries = read_project(repo, project, progress, results)
        finally:
            repo.close()
        read.append((project, tags, entries))
    torch = torch_library_strings(args.torch_lib) if args.torch_lib else None
    data, report = catalogue(read, torch)
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True) + "\n"
    print("\n".join(report))
    status = write_generated(args.out, text, check=args.check)
    if not args.check:
        print(f"wrote {args.out} ({len(text) / 1e3:.0f} kB, {len(data['messages'])} messages)")  # type: ignore[arg-type]
    return status


if __name__ == "__main__":
    sys.exit(main())
