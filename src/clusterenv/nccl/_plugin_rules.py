# ruff: noqa: E501  (generated: one row per line)
"""How each NCCL release finds and accepts a network plugin (generated: do not edit).

Written by ``tools/nccl_plugin_rules.py`` from NCCL's source at each release tag; one
row per run of releases with the same rules, the first release of the run first. Read
by :mod:`clusterenv.nccl.plugin`.
"""

from __future__ import annotations

#: (first release, source tag, default file, what NCCL_NET_PLUGIN=NAME is tried as,
#: list separator or None, whether 'none' disables, whether STATIC_PLUGIN is known,
#: the ncclNetPlugin_vN symbols in the order NCCL tries them)
RULES: tuple[tuple[tuple[int, int, int], str, str, str, str | None, bool, bool,
                   tuple[str, ...]], ...] = (
    ((2, 12, 7), 'v2.12.7-1', 'libnccl-net.so', 'prefixed',
     None, False, False,
     ('ncclNetPlugin_v5', 'ncclNetPlugin_v4')),
    ((2, 13, 4), 'v2.13.4-1', 'libnccl-net.so', 'prefixed',
     None, False, False,
     ('ncclNetPlugin_v6', 'ncclNetPlugin_v5', 'ncclNetPlugin_v4')),
    ((2, 19, 1), 'v2.19.1-1', 'libnccl-net.so', 'prefixed',
     None, False, False,
     ('ncclNetPlugin_v7', 'ncclNetPlugin_v6', 'ncclNetPlugin_v5')),
    ((2, 20, 3), 'v2.20.3-1', 'libnccl-net.so', 'prefixed',
     None, False, False,
     ('ncclNetPlugin_v8', 'ncclNetPlugin_v7', 'ncclNetPlugin_v6', 'ncclNetPlugin_v5')),
    ((2, 21, 5), 'v2.21.5-1', 'libnccl-net.so', 'name-then-prefixed',
     None, False, False,
     ('ncclNetPlugin_v8', 'ncclNetPlugin_v7', 'ncclNetPlugin_v6', 'ncclNetPlugin_v5')),
    ((2, 22, 3), 'v2.22.3-1', 'libnccl-net.so', 'name-then-prefixed',
     None, False, True,
     ('ncclNetPlugin_v8', 'ncclNetPlugin_v7', 'ncclNetPlugin_v6', 'ncclNetPlugin_v5')),
    ((2, 24, 3), 'v2.24.3-1', 'libnccl-net.so', 'name-then-prefixed',
     None, False, True,
     ('ncclNetPlugin_v9', 'ncclNetPlugin_v8', 'ncclNetPlugin_v7', 'ncclNetPlugin_v6', 'ncclNetPlugin_v5')),
    ((2, 26, 2), 'v2.26.2-1', 'libnccl-net.so', 'name-then-prefixed',
     None, False, True,
     ('ncclNetPlugin_v10', 'ncclNetPlugin_v9', 'ncclNetPlugin_v8', 'ncclNetPlugin_v7', 'ncclNetPlugin_v6')),
    ((2, 27, 3), 'v2.27.3-1', 'libnccl-net.so', 'lib-so-name-else-prefixed',
     ',', False, True,
     ('ncclNetPlugin_v10', 'ncclNetPlugin_v9', 'ncclNetPlugin_v8', 'ncclNetPlugin_v7', 'ncclNetPlugin_v6')),
    ((2, 27, 5), 'v2.27.5-1', 'libnccl-net.so', 'name-then-prefixed-unless-file',
     ',', False, True,
     ('ncclNetPlugin_v10', 'ncclNetPlugin_v9', 'ncclNetPlugin_v8', 'ncclNetPlugin_v7', 'ncclNetPlugin_v6')),
    ((2, 28, 3), 'v2.28.3-1', 'libnccl-net.so', 'name-then-prefixed-unless-file',
     ',', True, True,
     ('ncclNetPlugin_v11', 'ncclNetPlugin_v10', 'ncclNetPlugin_v9', 'ncclNetPlugin_v8', 'ncclNetPlugin_v7', 'ncclNetPlugin_v6')),
    ((2, 30, 3), 'v2.30.3-1', 'libnccl-net.so', 'name-then-prefixed-unless-file',
     ',', True, True,
     ('ncclNetPlugin_v12', 'ncclNetPlugin_v11', 'ncclNetPlugin_v10', 'ncclNetPlugin_v9', 'ncclNetPlugin_v8', 'ncclNetPlugin_v7', 'ncclNetPlugin_v6')),
)
