"""Network plugins: one that loaded and then failed, one that could not be loaded (and what
that caused), and a libfabric provider without a device."""

from __future__ import annotations

import re

from clusterenv.findings import Code, Finding
from clusterenv.nccl_log.interfaces import MAX_EVIDENCE, finding, labels, quote
from clusterenv.nccl_log.model import INTERNAL_NETWORKS, NcclLog, RankInfo

__all__ = [
    "CODE_OFI_NO_PROVIDER",
    "CODE_PLUGIN_FAILED",
    "CODE_PLUGIN_LOAD",
    "ofi_checks",
    "plugin_checks",
    "plugin_load_checks",
]

CODE_PLUGIN_FAILED: Code = "log-plugin-failed"
CODE_PLUGIN_LOAD: Code = "log-plugin-load"
CODE_OFI_NO_PROVIDER: Code = "log-ofi-no-provider"
_FI_PROVIDER = re.compile(r"provider ([\w;.-]{1,64})", re.ASCII)


def plugin_checks(log: NcclLog) -> list[Finding]:
    """A plugin that loaded, failed to initialise, and left NCCL on its own networks."""
    findings = []
    for plugin in log.plugins:
        if not plugin.failed:
            continue
        users = [r for r in log.ranks if r.plugin == plugin.name]
        fallbacks = sorted({str(r.transport) for r in users if r.transport in INTERNAL_NETWORKS})
        details = [plugin.library, f"version {plugin.version}" if plugin.version else None,
                   f"provider {plugin.provider}" if plugin.provider else None]
        described = ", ".join(d for d in details if d)
        evidence = [f"plugin {plugin.name}" + (f" ({described})" if described else "")]
        evidence += [f"then used network {', '.join(fallbacks)}: {labels(users)}"]
        evidence += list(plugin.evidence[:MAX_EVIDENCE])
        findings.append(finding(
            CODE_PLUGIN_FAILED, "warning",
            f"network plugin {plugin.name} was tried and failed; NCCL fell back to its internal "
            f"{'/'.join(fallbacks)} transport",
            tuple(evidence),
            "if this cluster does not need the plugin, skip it with NCCL_NET_PLUGIN=none (or "
            "remove libnccl-net.so from the library path) on every node, so that every node "
            "makes the same choice; if it does need it, fix the plugin's provider setup "
            "(FI_PROVIDER, its libfabric) so it initialises",
        ))
    return findings


def ofi_checks(log: NcclLog) -> list[Finding]:
    """``fi_getinfo: provider efa output empty list`` in a process whose libfabric plugin then
    found no provider: no usable EFA (or other) device in that process."""
    empty = log.messages("ofi-no-provider")
    if not empty:
        return []
    if any(p.provider for p in log.plugins) or any(p.used for p in log.plugins):
        return []  # another provider was selected: probing this one was normal
    trouble = [m for m in (*log.warnings, *log.notices, *log.errors)
               if ("NET/OFI" in m.text or "ofi" in (m.source or "").lower())
               and m.kind != "ofi-no-provider"]
    fatal = [m for m in log.errors if m.kind in ("error-trace", "nccl-error")]
    providers = sorted({m.group(1) for e in empty
                        if (m := _FI_PROVIDER.search(e.text)) is not None})
    named = ", ".join(providers) or "the requested provider"
    failed = bool(trouble or fatal or log.messages("fatal"))
    evidence = quote(empty) + quote(trouble)
    if not trouble:
        evidence.append("no `NET/OFI Selected Provider` line: the plugin found no provider")
    return [finding(
        CODE_OFI_NO_PROVIDER, "error" if failed else "warning",
        f"libfabric found no usable {named} device in this process (fi_getinfo returned nothing)"
        + (", so the aws-ofi-nccl plugin could not open an endpoint" if failed else ""),
        tuple(evidence),
        "on an instance with EFA, give the process the EFA devices: on Kubernetes request "
        "vpc.amazonaws.com/efa resources, in Docker pass the /dev/infiniband/uverbs* devices; "
        f"check with `fi_info -p {providers[0] if providers else 'efa'}` in the same container "
        "(it must list the devices), and that the process loads the EFA installer's libfabric, "
        "not another one. On a host without EFA, do not load the plugin (NCCL_NET_PLUGIN=none)",
    )]


_MISSING_LIBRARY = re.compile(r"(lib[\w.+-]{1,80}\.so[\w.]{0,20}): cannot open shared object",
                              re.ASCII)
_GLIBC = re.compile(r"GLIBC(?:XX)?_[0-9.]{1,12}", re.ASCII)


def _absent(error: str) -> bool:
    """Whether a loader's error only says the plugin library itself is not installed (the
    normal case without a plugin: NCCL uses its own networks): a dlopen error naming it
    (2.19-2.20), ``Could not find: libnccl-net.so`` (2.22+), ``No plugin found`` (older)."""
    error = error.strip()
    if error.startswith(("Could not find:", "No plugin found")):
        return True
    missing = _MISSING_LIBRARY.match(error)
    return missing is not None and missing.group(1).startswith("libnccl-net")


def _load_fix(error: str) -> str:
    glibc = _GLIBC.search(error)
    if glibc:
        return (f"the plugin needs {glibc.group(0)}, newer than the image's C library: use a "
                "plugin built for this image (or a newer base image)")
    missing = _MISSING_LIBRARY.search(error)
    if missing:
        return (f"install {missing.group(1)} in the image or add its directory to "
                "LD_LIBRARY_PATH (the plugin links against it)")
    if "undefined symbol" in error:
        return ("the plugin was built against another version of a library it uses (NCCL, "
                "libfabric, CUDA): install the build that matches the image")
    return "fix what the loader reports, or skip the plugin with NCCL_NET_PLUGIN=none"


_DEFAULT_LIBRARY = "libnccl-net.so"  # what NCCL loads when NCCL_NET_PLUGIN names nothing


def _requested(rank: RankInfo, error: str) -> bool:
    """Whether the process was told to load a network plugin: NCCL_NET_PLUGIN naming one, or a
    loader's error naming another library than the default (NCCL tries another name only when
    NCCL_NET_PLUGIN gives it: src/plugin/plugin_open.cc, src/net.cc)."""
    value = rank.env.get("NCCL_NET_PLUGIN", "").strip()
    if value:
        return value.lower() != "none"
    if error.startswith("Could not find:"):  # 2.22+: every name tried, then a fallback
        tried = error.split(":", 1)[1].split(". ", 1)[0].split()
    elif error.startswith("No plugin found"):  # older: "No plugin found (%s), using internal"
        tried = re.findall(r"\(([^()]{1,200})\)", error)[:1]
    else:
        missing = _MISSING_LIBRARY.match(error)
        tried = [missing.group(1)] if missing else []
    return any(t.rstrip(".") != _DEFAULT_LIBRARY for t in tried)


def _not_found(log: NcclLog, asked: list[tuple[RankInfo, str]]) -> list[Finding]:
    """Processes told to load a network plugin (NCCL_NET_PLUGIN) that NCCL did not find: it
    carried on with its own networks, which on a fabric only a plugin drives (EFA, TCPX) are
    TCP sockets."""
    if not asked:
        return []
    ranks = [r for r, _ in asked]
    used = sorted({str(r.transport) for r in ranks if r.transport})
    loader = asked[0][1].split(": ", 1)[1]
    names = sorted({r.env.get("NCCL_NET_PLUGIN") or loader for r in ranks})
    evidence = [f"NCCL_NET_PLUGIN={', '.join(names)}: {labels(ranks)}",
                f"the loader: {loader}"]
    if used:
        evidence.append(f"then used network {', '.join(used)}")
    return [finding(
        CODE_PLUGIN_LOAD, "warning",
        f"NCCL_NET_PLUGIN asks for a network plugin NCCL did not find ({names[0][:60]})"
        + (f"; NCCL used {', '.join(used)} instead" if used else ""),
        evidence,
        "install the plugin where NCCL looks for it (the library libnccl-net-<name>.so, or the "
        "path NCCL_NET_PLUGIN names, on LD_LIBRARY_PATH) on every node, or unset "
        "NCCL_NET_PLUGIN if NCCL's own networks are meant",
    )]


def plugin_load_checks(log: NcclLog) -> list[Finding]:
    """A network plugin that could not be loaded (the loader's own error) or was rejected as
    too old, and what it caused: ``network X not found`` when NCCL_NET asked for its network."""
    failed = [(r, r.facts["net plugin"]) for r in log.ranks
              if r.facts.get("net plugin", "").startswith(("not loaded: ", "rejected: "))]
    asked = [(r, value) for r, value in failed
             if _absent(value.split(": ", 1)[1]) and _requested(r, value.split(": ", 1)[1])]
    failed = [(r, value) for r, value in failed if not _absent(value.split(": ", 1)[1])]
    if not failed:
        return _not_found(log, asked)
    loaded = [r for r in log.ranks if r.plugin]
    missing = [m for m in (*log.warnings, *log.errors)
               if ("network" in m.text and "not found" in m.text)
               or "Failed to initialize any NET plugin" in m.text]
    reason = failed[0][1]
    error = reason.split(": ", 1)[1]
    evidence = [f"{labels([r for r, _ in failed])}: {reason}"]
    evidence += quote([m for m in log.notices if m.kind == "plugin-load"])
    if loaded:
        evidence.append(f"the plugin loaded elsewhere: {labels(loaded)}")
    if missing:
        evidence += ["what followed from it:", *quote(missing)]
        return [finding(
            CODE_PLUGIN_LOAD, "error",
            f"the network plugin could not be loaded ({error[:100]}), so the network NCCL_NET "
            "asks for does not exist",
            evidence, _load_fix(error),
        )]
    used = sorted({str(r.transport) for r, _ in failed if r.transport})
    return [finding(
        CODE_PLUGIN_LOAD, "error" if loaded else "warning",
        f"the network plugin could not be loaded ({error[:100]})"
        + (f"; NCCL used {', '.join(used)} instead" if used else ""),
        evidence,
        _load_fix(error) + ("" if not loaded else "; until then the nodes that loaded it use "
                            "another network than the others"),
    )]
