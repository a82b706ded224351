"""Preflight compares what each node's NCCL will really load (simulated nodes, namespaces).

Three namespace nodes run the real CLI. The NCCL library every node finds is the NVIDIA wheel
of this environment, except where a node's ``LD_LIBRARY_PATH`` puts a real NCCL 2.21.5 from the
package index first, or a real shared object exporting ``ncclNetPlugin_v8`` (compiled here),
which NCCL would load as its network plugin. Before, preflight exited 0 on every node in both
cases (the pip package said the same version everywhere; the plugin was not looked at).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.nccl_artefacts import OTHER_RELEASE, compiled_plugin, nccl_release
from tests.simcluster import ClusterFactory
from tests.test_preflight_netns import assert_same_verdict_everywhere, node_env, preflight_on


def by_code(verdict: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [p for p in verdict["problems"] if p["code"] == code]


def test_another_nccl_and_a_plugin_on_one_node_are_named(
    sim_cluster: ClusterFactory, tmp_path: Path
) -> None:
    other = nccl_release()
    plugins = compiled_plugin(tmp_path / "plugins", "ncclNetPlugin_v8").parent
    cluster = sim_cluster(3, hosts="cluster")
    odd = cluster.nodes[1]
    env = {n: node_env(n) for n in cluster.nodes}
    env[odd] = node_env(odd, LD_LIBRARY_PATH=f"{other}:{plugins}")
    verdict = assert_same_verdict_everywhere(
        preflight_on(cluster.nodes, "--timeout", "30", env=env, timeout=90), 1)
    (library,) = by_code(verdict, "preflight-nccl-library-differs")
    assert library["severity"] == "error"
    assert [n["rank"] for n in library["nodes"]] == [1]
    assert library["title"].startswith(f"NCCL library loaded differs: rank 1 (10.65.0.3) has "
                                       f"'{OTHER_RELEASE}'")
    assert any(str(other) in e and "LD_LIBRARY_PATH" in e for e in library["evidence"])
    (plugin,) = by_code(verdict, "preflight-net-plugin-differs")
    assert plugin["severity"] == "error" and [n["rank"] for n in plugin["nodes"]] == [1]
    assert "libnccl-net.so (ncclNetPlugin_v8)" in plugin["title"]
    assert "none (NCCL's own IB and socket transports)" in plugin["title"]
    assert [n["nccl"] for n in verdict["nodes"]][1] == OTHER_RELEASE


def test_a_plugin_on_one_node_alone_is_named(sim_cluster: ClusterFactory, tmp_path: Path) -> None:
    plugins = compiled_plugin(tmp_path / "plugins", "ncclNetPlugin_v8").parent
    cluster = sim_cluster(3, hosts="cluster")
    odd = cluster.nodes[2]
    env = {n: node_env(n) for n in cluster.nodes}
    env[odd] = node_env(odd, LD_LIBRARY_PATH=str(plugins))
    verdict = assert_same_verdict_everywhere(
        preflight_on(cluster.nodes, "--timeout", "30", env=env, timeout=90), 1)
    assert by_code(verdict, "preflight-nccl-library-differs") == []
    (plugin,) = by_code(verdict, "preflight-net-plugin-differs")
    assert [n["rank"] for n in plugin["nodes"]] == [2]
