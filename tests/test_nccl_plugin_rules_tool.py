"""``tools/nccl_plugin_rules.py`` reads NCCL's plugin loader from a repository, release by
release.

The repository here is made in the test: release tags whose ``src/net.cc`` /
``src/plugin/*.cc`` have the shapes of NCCL's own code at 2.19 (only ``libnccl-net-NAME.so``),
2.21 (the name first), 2.28 (lists, ``none``, a table of interface versions) and one whose
loader the script has never seen, which must stop it rather than be guessed. The committed
table (``clusterenv/nccl/_plugin_rules.py``) is what the script wrote from NCCL's repository.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from clusterenv.nccl import _plugin_rules

TOOL = Path(__file__).resolve().parents[1] / "tools" / "nccl_plugin_rules.py"

NET_2_19 = """
  const char* envPluginName = getenv("NCCL_NET_PLUGIN");
  if (envPluginName && strlen(envPluginName)) {
    snprintf(ncclNetPluginName, 128, "libnccl-net-%s.so", envPluginName);
  } else {
    sprintf(ncclNetPluginName, "libnccl-net.so");
  }
  ncclNets[0] = (ncclNet_v7_t*)dlsym(netPluginLib, "ncclNetPlugin_v7");
    ncclNet_v6 = (ncclNet_v6_t*)dlsym(netPluginLib, "ncclNetPlugin_v6");
"""
NET_2_21 = """
  const char *envNetPluginName = getenv("NCCL_NET_PLUGIN");
  if (envNetPluginName && strlen(envNetPluginName)) {
    snprintf(netPluginLibName, PATH_MAX, "%s", envNetPluginName);
    snprintf(netPluginLibName, PATH_MAX, "libnccl-net-%s.so", envNetPluginName);
  } else {
    snprintf(netPluginLibName, PATH_MAX, "libnccl-net.so");
  }
  ncclNets[0] = (ncclNet_v8_t*)dlsym(netPluginLib, "ncclNetPlugin_v8");
"""
OPEN_2_28 = """
static const char *pluginPrefix[NUM_LIBS] = { "libnccl-net", "libnccl-tuner" };
  if (strncasecmp(name, "STATIC_PLUGIN", strlen(name)) == 0) {
  if (libName && strlen(libName)) {
    snprintf(libName_, MAX_STR_LEN, "%s", libName);
  } else {
    snprintf(libName_, MAX_STR_LEN, "%s.so", pluginPrefix[type]);
  }
  if (libName && strlen(libName) && strchr(libName, '/') == nullptr &&
      (strncmp(libName, "lib", strlen("lib")) || strlen(libName) < strlen(".so"))) {
    snprintf(libName_, MAX_STR_LEN, "%s-%s.so", pluginPrefix[type], libName);
"""
NET_CC_2_28 = """
getNcclNet_t* getNcclNet[NCCL_NET_VERSION_COUNT] = {getNcclNet_v11, getNcclNet_v10};
    if (strcasecmp(envNetPlugin, "none") == 0)
    netPluginName = strtok_r(envNetPluginList, ",", &savePtr);
"""


def _repository(path: Path, releases: dict[str, dict[str, str]]) -> str:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)

    path.mkdir()
    git("init", "-q")
    for tag, files in releases.items():
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        git("add", "-A")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
            "-m", tag)
        git("tag", tag)
    return str(path)


def _run(checkout: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), checkout], capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_tool_reads_each_release_shape(tmp_path: Path) -> None:
    checkout = _repository(tmp_path / "nccl", {
        "v2.19.3-1": {"src/net.cc": NET_2_19},
        "v2.20.5-1": {"src/net.cc": NET_2_19},  # the same rules: folded into 2.19's row
        "v2.21.5-1": {"src/net.cc": NET_2_21},
        "v2.28.3-1": {"src/net.cc": "", "src/plugin/plugin_open.cc": OPEN_2_28,
                      "src/plugin/net.cc": NET_CC_2_28,
                      "src/plugin/net/net_v11.cc": 'ncclOsDlsym(lib, "ncclNetPlugin_v11");',
                      "src/plugin/net/net_v10.cc": 'dlsym(lib, "ncclNetPlugin_v10");'},
    })
    result = _run(checkout)
    assert result.returncode == 0, result.stderr
    namespace: dict[str, object] = {}
    exec(compile(result.stdout, "rules", "exec"), namespace)  # noqa: S102  # the tool's output
    rules = namespace["RULES"]
    assert rules == (
        ((2, 19, 3), "v2.19.3-1", "libnccl-net.so", "prefixed", None, False, False,
         ("ncclNetPlugin_v7", "ncclNetPlugin_v6")),
        ((2, 21, 5), "v2.21.5-1", "libnccl-net.so", "name-then-prefixed", None, False, False,
         ("ncclNetPlugin_v8",)),
        ((2, 28, 3), "v2.28.3-1", "libnccl-net.so", "name-then-prefixed-unless-file", ",",
         True, True, ("ncclNetPlugin_v11", "ncclNetPlugin_v10")),
    )


def test_an_unknown_loader_shape_stops_the_tool(tmp_path: Path) -> None:
    changed = NET_2_21.replace('"libnccl-net-%s.so"', '"nccl-plugin-%s.so"')
    checkout = _repository(tmp_path / "nccl", {"v2.99.1-1": {"src/net.cc": changed}})
    result = _run(checkout)
    assert result.returncode != 0
    assert "v2.99.1-1: unknown way of naming the plugin in src/net.cc" in result.stderr


def test_the_committed_table_covers_the_releases_it_names() -> None:
    releases = [row[0] for row in _plugin_rules.RULES]
    assert releases == sorted(releases) and releases[0] == (2, 12, 7)
    assert all(row[3] in {"prefixed", "name-then-prefixed", "lib-so-name-else-prefixed",
                          "name-then-prefixed-unless-file"} for row in _plugin_rules.RULES)
