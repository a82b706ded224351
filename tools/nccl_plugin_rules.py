"""Extract, per NCCL release, how NCCL finds and accepts a network plugin; write the table.

Usage::

    python tools/nccl_plugin_rules.py NCCL_CHECKOUT [--out src/clusterenv/nccl/_plugin_rules.py]

``NCCL_CHECKOUT`` is a clone of NVIDIA's NCCL repository (a bare one works: files are read with
``git show TAG:PATH``). For every release tag ``v2.X.Y-1`` from 2.12 on, the script reads the
code that opens the plugin (``src/net.cc`` up to 2.25, ``src/plugin/plugin_open.cc`` and
``src/plugin/net.cc`` from 2.26) and records:

- ``default``: the file dlopen()ed when ``NCCL_NET_PLUGIN`` is unset (``libnccl-net.so``);
- ``named``: what a set ``NCCL_NET_PLUGIN=NAME`` is tried as, one of
  ``prefixed`` (only ``libnccl-net-NAME.so``), ``name-then-prefixed`` (``NAME``, then
  ``libnccl-net-NAME.so``), ``lib-so-name-else-prefixed`` (``NAME`` when it looks like
  ``lib*.so``, else ``libnccl-net-NAME.so``), ``name-then-prefixed-unless-file`` (``NAME``, then
  ``libnccl-net-NAME.so`` unless ``NAME`` has a ``/`` or looks like ``lib*.so``);
- ``separator``: ``","`` when ``NCCL_NET_PLUGIN`` is a list (each tried in order), else None;
- ``none``: whether ``NCCL_NET_PLUGIN=none`` (any case) means no external plugin;
- ``static``: whether the name ``STATIC_PLUGIN`` means the program itself;
- ``symbols``: the ``ncclNetPlugin_vN`` symbols tried, in NCCL's order.

Consecutive releases with the same rules are written once (the first release of each run).
A code shape the script does not know stops it with the tag and the file: the next release is
read the same way, and a changed loader is noticed, not guessed. Needs ``git`` on PATH.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

_TAG = re.compile(r"v(2)\.(\d+)\.(\d+)-1")
_FIRST = (2, 12)


def git(checkout: str, *args: str) -> str:
    return subprocess.run(["git", "-C", checkout, *args], capture_output=True, text=True,
                          check=True).stdout


def show(checkout: str, tag: str, path: str) -> str | None:
    try:
        return git(checkout, "show", f"{tag}:{path}")
    except subprocess.CalledProcessError:
        return None


def release_tags(checkout: str) -> list[tuple[tuple[int, int, int], str]]:
    tags = []
    for tag in git(checkout, "tag", "--list", "v2.*").split():
        match = _TAG.fullmatch(tag)
        if match:
            version = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
            if version[:2] >= _FIRST:
                tags.append((version, tag))
    return sorted(tags)


def _open_code(checkout: str, tag: str) -> tuple[str, str]:
    """The code that turns NCCL_NET_PLUGIN into file names, and where it is."""
    for path in ("src/plugin/plugin_open.cc", "src/net.cc"):
        text = show(checkout, tag, path)
        if text and ("libnccl-net" in text or "pluginPrefix" in text):
            return path, text
    raise SystemExit(f"{tag}: no plugin-opening code in src/plugin/plugin_open.cc or src/net.cc")


def _named(tag: str, path: str, code: str) -> str:
    prefixed = bool(re.search(r'"libnccl-net-%s\.so"', code) or
                    re.search(r'"%s-%s\.so",\s*pluginPrefix', code))
    raw = bool(re.search(r'snprintf\([^;]*"%s",\s*(envNetPluginName|libName)\)', code))
    lib_so_guard = bool(re.search(r'strncmp\(libName,\s*"lib"', code))
    slash_guard = "strchr(libName, '/')" in code
    if prefixed and not raw:
        return "prefixed"
    if prefixed and raw and slash_guard and lib_so_guard:
        return "name-then-prefixed-unless-file"
    if prefixed and raw and lib_so_guard:
        return "lib-so-name-else-prefixed"
    if prefixed and raw:
        return "name-then-prefixed"
    raise SystemExit(f"{tag}: unknown way of naming the plugin in {path}")


def _symbols(checkout: str, tag: str) -> tuple[str, ...]:
    net = show(checkout, tag, "src/plugin/net.cc")
    if net is None:  # up to 2.25: dlsym calls in src/net.cc, in the order tried
        text = show(checkout, tag, "src/net.cc") or ""
        found = re.findall(r'dlsym\(\s*netPluginLib,\s*"(ncclNetPlugin_v\d+)"\)', text)
    else:  # 2.26 on: one getNcclNet_vN per version, each looking up ncclNetPlugin_vN
        table = re.search(r"getNcclNet\[[^\]]*\]\s*=\s*\{([^}]*)\}", net)
        order = re.findall(r"getNcclNet_v(\d+)", table.group(1)) if table else \
            re.findall(r"getNcclNet_v(\d+)\(\s*\w+\s*\)", net)  # 2.26: calls in order
        found = []
        for version in order:
            source = show(checkout, tag, f"src/plugin/net/net_v{version}.cc") or ""
            found += re.findall(r'(?:ncclOsDlsym|dlsym)\(\s*\w+,\s*"(ncclNetPlugin_v\d+)"\)',
                                source)
    symbols = tuple(dict.fromkeys(found))
    if not symbols:
        raise SystemExit(f"{tag}: no ncclNetPlugin_vN symbol found")
    return symbols


def rules_of(checkout: str, tag: str) -> dict[str, object]:
    path, code = _open_code(checkout, tag)
    net = show(checkout, tag, "src/plugin/net.cc") or ""
    default = "libnccl-net.so" if ('"libnccl-net.so"' in code or '"libnccl-net.so"' in net or
                                   re.search(r'"%s\.so",\s*pluginPrefix', code)) else None
    if default is None:
        raise SystemExit(f"{tag}: no default plugin name in {path}")
    return {
        "default": default,
        "named": _named(tag, path, code),
        "separator": "," if re.search(r'strtok_r\(\s*envNetPluginList,\s*","', net) else None,
        "none": bool(re.search(r'strcasecmp\(\s*envNetPlugin,\s*"none"\)', net)),
        "static": '"STATIC_PLUGIN"' in code,
        "symbols": _symbols(checkout, tag),
    }


def render(rows: list[tuple[tuple[int, int, int], str, dict[str, object]]]) -> str:
    lines = [
        "# ruff: noqa: E501  (generated: one row per line)",
        '"""How each NCCL release finds and accepts a network plugin (generated: do not edit).',
        "",
        "Written by ``tools/nccl_plugin_rules.py`` from NCCL's source at each release tag; one",
        "row per run of releases with the same rules, the first release of the run first. Read",
        "by :mod:`clusterenv.nccl.plugin`.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "#: (first release, source tag, default file, what NCCL_NET_PLUGIN=NAME is tried as,",
        "#: list separator or None, whether 'none' disables, whether STATIC_PLUGIN is known,",
        "#: the ncclNetPlugin_vN symbols in the order NCCL tries them)",
        "RULES: tuple[tuple[tuple[int, int, int], str, str, str, str | None, bool, bool,",
        "                   tuple[str, ...]], ...] = (",
    ]
    for version, tag, rule in rows:
        lines.append(f"    ({version!r}, {tag!r}, {rule['default']!r}, {rule['named']!r},")
        lines.append(f"     {rule['separator']!r}, {rule['none']!r}, {rule['static']!r},")
        lines.append(f"     {rule['symbols']!r}),")
    lines.append(")")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", help="a clone of NVIDIA's NCCL repository")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the table here (default: print it)")
    args = parser.parse_args(argv)
    rows: list[tuple[tuple[int, int, int], str, dict[str, object]]] = []
    for version, tag in release_tags(args.checkout):
        rule = rules_of(args.checkout, tag)
        if not rows or rows[-1][2] != rule:
            rows.append((version, tag, rule))
    text = render(rows)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(f"{len(rows)} rule sets written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
