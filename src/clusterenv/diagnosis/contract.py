"""Checks of the cluster contract that need this host: spellings of one address compared by
what they resolve to, and the Runpod pod's GPU count against the GPUs in this container.

Reading the environment is pure (``ClusterConfig.from_env`` never resolves a name), so two
spellings that only a resolver can compare (``PRIMARY_ADDR=10.65.0.10`` beside
``MASTER_ADDR=pod-0``, which Runpod's pages allow) are left in ``ConfigCheck.unresolved``. Here
they are resolved the way the job resolves them (:meth:`Facts.resolve`: the system resolver
with a deadline, or a snapshot's ``/etc/hosts``) and agree when they share an address. A name
that cannot be resolved is left to the rendezvous checks, which say so once
(``primary-name-unresolvable``, ``primary-name-unverified``).
"""

from __future__ import annotations

from clusterenv._facts import Facts
from clusterenv._resolve import Resolution
from clusterenv._shell import export
from clusterenv._values import format_host_port, parse_ip
from clusterenv.findings import Finding
from clusterenv.sources._base import Unresolved, plain_int
from clusterenv.sources._fixes import evidenced_value, placeholder

__all__ = ["contract_checks"]


def _resolve(facts: Facts, host: str) -> Resolution:
    ip = parse_ip(host)
    if ip is not None:  # an address is itself; no resolver thread for it
        return Resolution(host, (str(ip),), "resolved", "an IP address")
    return facts.resolve(host)


def _fix(facts: Facts, pair: Unresolved, resolved: tuple[Resolution, Resolution]) -> str:
    """The value one spelling should take: the one a third variable (``HOST_NODE_ADDR``)
    supports, resolved like the others; else a placeholder for both (never a guess)."""
    first, second = pair.first, pair.second
    if pair.code == "worker-primary-addr":
        return f"rendezvous on {first.variable} ({first.host}); clusterenv launch does"
    if pair.code == "config-host-node-addr" and facts.config is not None:
        return export(second.variable, format_host_port(first.host, facts.config.primary_port))
    third = {k: v for k, v in facts.environ.items() if k not in (first.variable, second.variable)}
    arbiter = evidenced_value(first.variable, third)
    if arbiter is not None:
        supported = set(_resolve(facts, arbiter).addresses)
        if supported & set(resolved[1].addresses):
            return export(first.variable, second.host)
        if supported & set(resolved[0].addresses):
            return export(second.variable, first.host)
    return (f"set both to the same value: {export(first.variable, placeholder(first.variable))}; "
            f"export {second.variable}=${first.variable}")


def _unresolved(facts: Facts) -> tuple[Unresolved, ...]:
    """The spellings reading left to a resolver; read again (purely, with the same source) when
    the caller gave the facts a config of its own (``launch``)."""
    if facts.check is not None:
        return facts.check.unresolved
    if facts.config is None:
        return ()
    from clusterenv.config import check_config  # noqa: PLC0415  # pydantic, as _facts does

    return check_config(facts.environ, source=facts.config.source, root=facts.root).unresolved


def _spellings(facts: Facts) -> list[Finding]:
    """Each pair of spellings that resolve to no common address."""
    out: list[Finding] = []
    for pair in _unresolved(facts):
        first, second = _resolve(facts, pair.first.host), _resolve(facts, pair.second.host)
        if first.status != "resolved" or second.status != "resolved":
            continue
        if set(first.addresses) & set(second.addresses):
            continue  # the same host, spelled two ways
        out.append(Finding.of(
            pair.code,
            f"{pair.first.variable}={pair.first.host} and {pair.second.variable}="
            f"{pair.second.host} name different hosts ({', '.join(first.addresses)} and "
            f"{', '.join(second.addresses)}), but both should be {pair.what}: tools that read "
            "one rendezvous where tools that read the other do not",
            (first.describe(), second.describe()),
            _fix(facts, pair, (first, second)),
        ))
    return out


def _pod_gpus(facts: Facts) -> list[Finding]:
    """``RUNPOD_GPU_COUNT`` (the GPUs the pod was given) against the GPUs the NVIDIA driver
    lists in this container. Nothing when the driver lists none: ``gpus-none-visible`` says
    that. ``CUDA_VISIBLE_DEVICES`` narrows what a process sees, not what is installed, so a
    deliberate narrowing is not reported here."""
    pod = plain_int(facts.environ, "RUNPOD_GPU_COUNT")
    if pod is None or pod.value < 1:
        return []
    installed = facts.host.gpus_installed
    if installed in (0, pod.value):
        return []
    return [Finding.of(
        "runpod-gpu-count",
        f"this pod was given RUNPOD_GPU_COUNT={pod.value} GPUs but the NVIDIA driver lists "
        f"{installed} in this container",
        (f"RUNPOD_GPU_COUNT={pod.value}", f"GPUs installed: {installed} (/proc/driver/nvidia)"),
        "check the GPUs with nvidia-smi -L; a container that lost GPUs needs the pod restarted",
    )]


def contract_checks(facts: Facts) -> list[Finding]:
    """doctor's checks of the contract against this host (resolver, GPUs)."""
    return [*_spellings(facts), *_pod_gpus(facts)]
