"""Run inside a network namespace: our prediction of NCCL's bootstrap interface beside NCCL's own.

Detects the namespace's interfaces once, then answers requests until stdin closes. Each request
is one JSON line ``{"cases": [[NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY, NCCL_COMM_ID], ...]}``
(null: unset); the answer is one JSON line ``{"results": [{"predicted": [name, address] | null,
"unpredictable": reason | null, "nccl": [name, address] | null, "error": text | null, "by":
"nccl 2.32.3"}, ...]}``, one per case, with NCCL asked for all of them in one probe (one
subprocess).

Usage: ``ip netns exec NS python nccl_bootstrap_oracle.py``.
"""

from __future__ import annotations

import json
import os
import sys

from clusterenv._facts import Facts
from clusterenv._root import Root
from clusterenv.host import HostFacts
from clusterenv.nccl.interface import bootstrap_unpredictable, predict_bootstrap
from clusterenv.nccl.probe import ask_nccl, find_nccl_library
from clusterenv.network import NetworkInterfaces

_VARIABLES = ("NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_COMM_ID")


def main() -> int:
    root = Root("/")
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("NCCL_") and k != "CLUSTERENV_NCCL_LIBRARY"}
    network = NetworkInterfaces.detect(root=root)
    host = HostFacts.detect(environ=base, root=root)
    library = find_nccl_library(os.environ).library
    if library is None:
        print(json.dumps({"error": "no libnccl.so.2 found"}), flush=True)
        return 1
    for line in sys.stdin:
        cases = json.loads(line)["cases"]
        environs = []
        for case in cases:
            env = dict(base)
            env.update((k, v) for k, v in zip(_VARIABLES, case, strict=False) if v is not None)
            environs.append(env)
        answers = ask_nccl(environs, library, timeout=60)
        results = []
        for env, answer in zip(environs, answers, strict=True):
            version = ".".join(map(str, answer.version)) if answer.version else None
            facts = Facts(environ=env, root=root, network=network, host=host,
                          nccl_version=version)
            unpredictable = bootstrap_unpredictable(facts)
            predicted = None if unpredictable else predict_bootstrap(facts)
            results.append({
                "predicted": list(predicted) if predicted else None,
                "unpredictable": unpredictable,
                "nccl": [answer.interface, answer.address] if answer.interface else None,
                "error": answer.error,
                "by": answer.by,
            })
        print(json.dumps({"results": results}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
