"""What clusterenv never shows: secrets, and in a host snapshot hardware identifiers.

Secrets are scrubbed by one set of rules wherever text leaves clusterenv (a snapshot, a
preflight fingerprint or verdict, and every line and ``--json`` document a verb prints, through
:func:`scrub_text` and :func:`scrub_tree`): a variable whose name looks secret
(:func:`is_secret_name`) loses its value, a value shaped like a credential (a JSON Web Token, a
long base64 or hex blob: :func:`is_secret_value`) is replaced, and the userinfo of a URL is
replaced up to the last ``@`` of its authority (passwords hold ``/``, ``#``, ``?`` and ``@``).

A snapshot is meant to be attached to a bug report, so it keeps only cluster-relevant variables
(an explicit allowlist, never a name that looks like a secret), and replaces MAC addresses, GUIDs
and GPU UUIDs with deterministic placeholders of the same shape, so the files still parse and
the same identifier maps to the same placeholder everywhere in one snapshot (a bond and its
slaves keep sharing a MAC; a port's link-local GID still matches its netdev's scrubbed MAC).
IPv4-mapped GIDs and routable IP addresses are kept: NCCL's decisions depend on them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

__all__ = [
    "CLUSTER_VARIABLES",
    "CLUSTER_VARIABLE_PREFIXES",
    "HIDDEN",
    "NOT_CLUSTER_VARIABLES",
    "SECRET_MARKERS",
    "SECRET_WORDS",
    "Scrubber",
    "cluster_environ",
    "is_cluster_name",
    "is_secret_name",
    "is_secret_value",
    "scrub_setting",
    "scrub_text",
    "scrub_tree",
    "scrub_value",
]

#: Variables kept in a snapshot by exact name.
CLUSTER_VARIABLES: frozenset[str] = frozenset(
    {
        "WORLD_SIZE",
        "HOST_NODE_ADDR",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "TP_SOCKET_IFNAME",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "VLLM_HOST_IP",
        "LD_LIBRARY_PATH",  # which libnccl loads
        # what the other environment sources read (docs/environment.md)
        "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "ACCELERATE_TORCH_DEVICE",
        "AZUREML_EXPERIMENT_ID", "AZUREML_RUN_ID", "AZ_BATCH_HOST_LIST", "CLUSTER_SPEC",
        "KUBERNETES_SERVICE_HOST", "JOB_COMPLETION_INDEX", "NPROC_PER_NODE",
        "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKID",
        "MPI_LOCALNRANKS", "SM_HOSTS", "SM_CURRENT_HOST", "SM_NUM_GPUS", "SM_MASTER_ADDR",
        "SM_MASTER_PORT", "SM_CURRENT_HOST_RANK", "SM_HOST_COUNT", "SM_NPROC_PER_NODE",
        "SM_NETWORK_INTERFACE_NAME",
        # launchers' identifying variables not under a prefix below
        "OMPI_UNIVERSE_SIZE", "DSTACK_MPI_HOSTFILE",
        # the Runpod pod (never RUNPOD_API_KEY: a secret, and never read)
        "RUNPOD_POD_ID", "RUNPOD_DC_ID", "RUNPOD_GPU_COUNT",
    }
)
#: Variables kept in a snapshot by prefix (unless their name looks like a secret).
CLUSTER_VARIABLE_PREFIXES: tuple[str, ...] = (
    "PRIMARY_",
    "MASTER_",
    "NODE_",
    "NUM_",
    "ROLE_",
    "TORCHELASTIC_",
    "PET_",
    "NCCL_",
    "GLOO_",
    "TORCH_NCCL_",
    "TORCH_DISTRIBUTED_",
    "UCX_",
    "FI_",
    "OMPI_MCA_btl_tcp_",
    "CLUSTERENV_",
    "SLURM_",
    "OMPI_COMM_WORLD_",
    "MV2_COMM_WORLD_",
    "SKYPILOT_NODE_",
    "SKYPILOT_NUM_",
    "DSTACK_NODE",
    "DSTACK_MASTER_NODE_IP",
    "DSTACK_GPUS_",
)
#: Node.js's own ``NODE_*`` variables, which share the prefix with the cluster's ``NODE_ADDR``.
NOT_CLUSTER_VARIABLES: frozenset[str] = frozenset(
    {
        "NODE_OPTIONS",
        "NODE_PATH",
        "NODE_ENV",
        "NODE_EXTRA_CA_CERTS",
        "NODE_TLS_REJECT_UNAUTHORIZED",
        "NODE_NO_WARNINGS",
        "NODE_DEBUG",
        "NODE_REPL_HISTORY",
    }
)
#: A variable whose upper-cased name contains one of these anywhere is never written, whatever
#: its prefix (``HF_TOKEN``, ``DB_PASSWORD``, ``MY_APIKEY``, ``SSH_AUTH_SOCK``).
SECRET_MARKERS: tuple[str, ...] = (
    "TOKEN",
    "SECRET",
    "PASSW",
    "CREDENTIAL",
    "PRIVATE",
    "COOKIE",
    "SESSION",
    "APIKEY",
    "ACCESSKEY",
    "AUTH",
    "JWT",
    "BEARER",
)
#: … and one whose name has one of these as a whole word (between ``_``) is never written either
#: (``AWS_ACCESS_KEY_ID``, ``MASTER_PASS``, ``NODE_PW``, ``PRIMARY_PWD``, ``FI_EFA_PSK``), while
#: ``NCCL_IB_PKEY``, a partition key that must match across nodes, is kept.
SECRET_WORDS: frozenset[str] = frozenset(
    {"KEY", "KEYS", "PASS", "PW", "PWD", "PSK", "CRED", "CREDS", "PASSPHRASE", "PIN", "OTP"}
)

_WORDS = re.compile(r"[^A-Z0-9]+")
#: What replaces a secret.
HIDDEN = "***"
# scheme://userinfo@host: the userinfo runs to the last "@" before the end of the word, since a
# password may hold "/", "#", "?" and "@" (etcd://root:SEC/RET@h, https://bob:p@SECRET@h).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s'\"<>]*@(?=[^\s@'\"<>]*(?:[\s'\"<>]|$))")
# A JSON Web Token: three base64url parts, the first two JSON objects ("eyJ" is '{"').
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_HEX_BLOB = re.compile(r"(?:0x)?[0-9a-fA-F]{32,}")
_BASE64_BLOB = re.compile(r"[A-Za-z0-9+_-][A-Za-z0-9+/_-]{39,}={0,2}")
# Random bytes in base64 have long runs without a separator; a UUID's longest is 12.
_BASE64_RUN = re.compile(r"[A-Za-z0-9+]{16,}")
# NAME=VALUE (quoted or not), and NCCL's "NAME set by environment to VALUE".
_ASSIGNMENT = re.compile(
    r"\b([A-Za-z_][A-Za-z0-9_]*)(=| set by environment to )"
    r"(\'[^\']*\'?|\"[^\"]*\"?|[^\s,;'\"]*)"
)


def is_secret_name(name: str) -> bool:
    """Whether a variable name looks like it holds a secret, e.g. ``CLUSTERENV_PREFLIGHT_TOKEN``,
    ``MASTER_PASS``, ``SLURM_JWT`` or ``NCCL_IB_KEY``; ``NCCL_IB_PKEY`` (a partition key) is
    not one."""
    upper = name.upper()
    if any(marker in upper for marker in SECRET_MARKERS):
        return True
    return any(word in SECRET_WORDS for word in _WORDS.split(upper))


def is_secret_value(value: str) -> bool:
    """Whether a value is shaped like a credential, whatever its name: a JSON Web Token
    (``eyJ….eyJ….sig``), 32 or more hex digits, or a base64 blob of 40 or more characters
    with a run of 16 or more that mixes upper case, lower case and digits (cloud keys, bearer
    tokens).

    Paths, host lists, GPU UUIDs and MACs are not: they have separators or one letter case.
    """
    text = value.strip().strip("'\"")
    if _JWT.fullmatch(text) or _HEX_BLOB.fullmatch(text):
        return True
    if _BASE64_BLOB.fullmatch(text) is None:
        return False
    return any(
        any(c.isupper() for c in run) and any(c.islower() for c in run)
        and any(c.isdigit() for c in run)
        for run in _BASE64_RUN.findall(text)
    )


def scrub_value(value: str) -> str:
    """``value`` with the credentials of every URL in it and every JSON Web Token replaced by
    ``***``, or ``***`` when the whole value is credential-shaped (:func:`is_secret_value`).

    Examples: ``"etcd://root:SEC/RET@10.65.0.2:2379"`` -> ``"etcd://***@10.65.0.2:2379"``;
    ``"eyJhbGciOi….eyJzdWIi….c2ln"`` -> ``"***"``.
    """
    if is_secret_value(value):
        return HIDDEN
    if "@" in value:
        value = _USERINFO.sub(lambda m: f"{m.group(1)}{HIDDEN}@", value)
    if "eyJ" in value:
        value = _JWT.sub(HIDDEN, value)
    return value


def scrub_setting(name: str, value: str) -> str:
    """The value of variable ``name`` as it may be shown: ``***`` for a secret-looking name,
    else :func:`scrub_value`, e.g. ``scrub_setting("NCCL_IB_KEY", "0x1234")`` -> ``"***"``."""
    return HIDDEN if is_secret_name(name) else scrub_value(value)


def _scrub_assignment(match: re.Match[str]) -> str:
    name, separator, value = match.group(1), match.group(2), match.group(3)
    if not value:
        return match.group(0)
    if is_secret_name(name) or is_secret_value(value):
        quote = value[0] if value[0] in "'\"" else ""
        return f"{name}{separator}{quote}{HIDDEN}{quote}"
    return match.group(0)


def scrub_text(text: str) -> str:
    """Free text (a finding, an NCCL log line, a table) with secrets replaced: the value of a
    secret-looking ``NAME=VALUE`` or ``NAME set by environment to VALUE``, credential-shaped
    values, URL userinfo and JSON Web Tokens.

    Example: ``"NCCL_IB_KEY set by environment to 0x1234"`` ->
    ``"NCCL_IB_KEY set by environment to ***"``.
    """
    if "=" in text or " set by environment to " in text:
        text = _assignments(text) if len(text) > _LONG else _ASSIGNMENT.sub(_scrub_assignment, text)
    if "@" in text:
        text = _USERINFO.sub(lambda m: f"{m.group(1)}{HIDDEN}@", text)
    if "eyJ" in text:
        text = _JWT.sub(HIDDEN, text)
    return text


# A text longer than this (a JSON document of a large log) is searched for its separators first.
_LONG = 4096
_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def _assignments(text: str) -> str:
    """``_ASSIGNMENT.sub(_scrub_assignment, text)``, with the expression tried only where it
    can match: at the start of the word before each ``=`` or `` set by environment to ``.

    Every match is a name ending right at its separator (a shorter name would leave a word
    character where the separator must be), so it starts where the run of word characters
    before that separator starts; the separators are taken in order, and one inside the text a
    match already replaced is skipped, as ``sub`` resumes after each match. A long text with
    few separators then costs a few searches, not an attempt at every character.
    """
    found = []
    for separator in ("=", " set by environment to "):
        at = text.find(separator)
        while at >= 0:
            found.append(at)
            at = text.find(separator, at + 1)
    parts: list[str] = []
    done = 0  # text[:done] is in parts; no match may start before it
    for end in sorted(found):
        start = end
        while start > done and text[start - 1] in _WORD:
            start -= 1
        if start == done and start > 0 and text[start - 1] in _WORD:
            continue  # the word began inside the text a match replaced
        match = _ASSIGNMENT.match(text, start)
        if match is None or match.end(1) != end:
            continue
        parts += (text[done:start], _scrub_assignment(match))
        done = match.end()
    return "".join(parts) + text[done:] if parts else text


def scrub_tree(data: Any) -> Any:
    """A JSON-like value with :func:`scrub_text` applied to every string, and the value under
    every secret-looking key (``{"SLURM_JWT": …}``) replaced by ``***``."""
    if isinstance(data, str):
        return scrub_text(data)
    if isinstance(data, dict):
        return {
            key: (HIDDEN if isinstance(key, str) and is_secret_name(key)
                  and isinstance(value, str) else scrub_tree(value))
            for key, value in data.items()
        }
    if isinstance(data, (list, tuple)):
        return [scrub_tree(item) for item in data]
    return data


def cluster_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The cluster-relevant, non-secret variables of ``environ``, sorted by name.

    Example: ``{"NCCL_DEBUG": "INFO", "PRIMARY_ADDR": "10.65.0.2", "HF_TOKEN": "x"}`` gives
    ``{"NCCL_DEBUG": "INFO", "PRIMARY_ADDR": "10.65.0.2"}``; credentials in a URL are replaced
    (``PET_RDZV_ENDPOINT=etcd://***@10.65.0.2:2379``), and so is a credential-shaped value
    (:func:`scrub_value`).
    """
    return {
        name: scrub_value(environ[name])
        for name in sorted(environ)
        if is_cluster_name(name) and not is_secret_name(name)
    }


def is_cluster_name(name: str) -> bool:
    """Whether a variable is cluster-relevant by the allowlist, e.g. ``NCCL_DEBUG``."""
    if name in NOT_CLUSTER_VARIABLES:
        return False
    return name in CLUSTER_VARIABLES or name.startswith(CLUSTER_VARIABLE_PREFIXES)


def _bytes_of(text: str, separator: str, width: int) -> bytes | None:
    groups = text.strip().lower().split(separator)
    if not groups or any(len(g) != width for g in groups):
        return None
    try:
        return bytes.fromhex("".join(groups))
    except ValueError:
        return None


def _colon_hex(data: bytes) -> str:
    return ":".join(f"{b:02x}" for b in data)


_GPU_UUID = re.compile(r"GPU-[0-9a-fA-F-]{36}")


class Scrubber:
    """Replaces hardware identifiers with placeholders, the same one for the same identifier.

    Placeholders count up in the order identifiers are met, so scrubbing the same host twice
    gives the same snapshot. MACs become locally administered ``02:00:00:00:00:NN``.
    """

    def __init__(self) -> None:
        self._macs: dict[bytes, bytes] = {}
        self._guids: dict[bytes, bytes] = {}
        self._other: dict[bytes, bytes] = {}
        self._uuids: dict[str, str] = {}

    def mac_bytes(self, raw: bytes) -> bytes:
        """A 6-byte MAC; all-zero and broadcast are kept."""
        if raw in (bytes(6), b"\xff" * 6):
            return raw
        if raw not in self._macs:
            self._macs[raw] = b"\x02\x00\x00\x00" + (len(self._macs) + 1).to_bytes(2, "big")
        return self._macs[raw]

    def guid_bytes(self, raw: bytes) -> bytes:
        """An 8-byte GUID or IPv6 interface identifier; an EUI-64 built from a MAC is rebuilt
        from the scrubbed MAC, so link-local addresses and GIDs stay consistent with it."""
        if raw == bytes(8):
            return raw
        if raw[3:5] == b"\xff\xfe":
            mac = self.mac_bytes(bytes([raw[0] ^ 0x02]) + raw[1:3] + raw[5:8])
            return bytes([mac[0] ^ 0x02]) + mac[1:3] + b"\xff\xfe" + mac[3:6]
        if raw not in self._guids:
            self._guids[raw] = bytes(6) + (len(self._guids) + 1).to_bytes(2, "big")
        return self._guids[raw]

    def hardware_address(self, text: str) -> str:
        """``address`` of a netdev: MAC, 20-byte IPoIB (flags + GID: its GUID half is scrubbed),
        or another length (replaced whole); text that is not an address is blanked."""
        raw = _bytes_of(text, ":", 2)
        if raw is None:
            return ""
        if len(raw) == 6:
            return _colon_hex(self.mac_bytes(raw))
        if len(raw) == 20:
            return _colon_hex(raw[:12] + self.guid_bytes(raw[12:]))
        if raw.strip(b"\x00") == b"" or raw.strip(b"\xff") == b"":
            return text.strip().lower()
        if raw not in self._other:
            number = (len(self._other) + 1).to_bytes(2, "big")
            self._other[raw] = (bytes(len(raw)) + number)[-len(raw) :]
        return _colon_hex(self._other[raw])

    def guid(self, text: str) -> str:
        """``node_guid`` / ``sys_image_guid`` (``0c42:a103:0063:5a20``); garbage is zeroed."""
        raw = _bytes_of(text, ":", 4)
        if raw is None or len(raw) != 8:
            return "0000:0000:0000:0000"
        hexed = self.guid_bytes(raw).hex()
        return ":".join(hexed[i : i + 4] for i in range(0, 16, 4))

    def gid(self, text: str, keep: AbstractSet[ipaddress.IPv6Address] = frozenset()) -> str:
        """A GID in the kernel's spelling; IPv4-mapped, empty and ``keep`` GIDs are unchanged,
        others keep their 64-bit prefix and get a scrubbed interface identifier."""
        try:
            address = ipaddress.IPv6Address(text.strip())
        except ValueError:
            return "0000:0000:0000:0000:0000:0000:0000:0000"
        if int(address) == 0 or address.ipv4_mapped is not None or address in keep:
            return address.exploded
        packed = address.packed
        return ipaddress.IPv6Address(packed[:8] + self.guid_bytes(packed[8:])).exploded

    def ipv6_interface(self, address: ipaddress.IPv6Interface) -> ipaddress.IPv6Interface:
        """An IPv6 address whose interface identifier was built from a MAC (EUI-64) gets the
        scrubbed one; other addresses (configured, routable) are kept."""
        packed = address.ip.packed
        if packed[11:13] != b"\xff\xfe":
            return address
        scrubbed = ipaddress.IPv6Address(packed[:8] + self.guid_bytes(packed[8:]))
        return ipaddress.IPv6Interface((scrubbed, address.network.prefixlen))

    def gpu_information(self, text: str) -> str:
        """``proc/driver/nvidia/gpus/*/information`` with the GPU UUID replaced."""

        def replace(match: re.Match[str]) -> str:
            uuid = match.group(0).lower()
            if uuid not in self._uuids:
                self._uuids[uuid] = f"GPU-00000000-0000-0000-0000-{len(self._uuids):012x}"
            return self._uuids[uuid]

        return _GPU_UUID.sub(replace, text)
