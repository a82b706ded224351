"""The catalogue of NCCL's messages (src/clusterenv/nccl_log/messages.json) and the script that
writes it (tools/nccl_messages.py).

The catalogue is generated from NCCL's source at every release tag; these tests check what it
holds (every message classed, every matcher recognising its own format, the releases covered)
and run the script on a small git repository made here, so that the script is tested without
NCCL's repository.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from clusterenv.nccl_log import lookup_message, nccl_log_findings, parse_nccl_log
from clusterenv.nccl_log.catalogue import catalogue_classes, catalogue_entries

ROOT = Path(__file__).parents[1]
TOOLS = ROOT / "tools"
DATA = json.loads((ROOT / "src" / "clusterenv" / "nccl_log" / "messages.json").read_text())
sys.path.insert(0, str(TOOLS))

from c_source import (  # noqa: E402
    format_string,
    format_to_regex,
    log_calls,
    result_names,
    strip_comments,
)

# A value each conversion prints, for rendering a format as NCCL would.
_SAMPLE = {"d": "12", "i": "12", "u": "7", "x": "1f", "X": "1F", "o": "17", "p": "0x7f3a2c",
           "s": "mlx5_0", "m": "Connection refused", "c": "x", "f": "1.5", "e": "1e-05",
           "g": "1.5", "%": "%"}
_CONVERSION = re.compile(
    r"%([-+ #0']*)(\*|[0-9]+)?(?:\.(\*|[0-9]*))?(hh|h|ll|l|L|q|j|z|Z|t)?([diouxXeEfFgGaAcspnm%])"
)


def render(fmt: str) -> str:
    return _CONVERSION.sub(lambda m: _SAMPLE.get(m.group(5), "1"), fmt)


def literal(fmt: str) -> int:
    return sum(ch.isalnum() for ch in _CONVERSION.sub("", fmt))


ENTRIES = catalogue_entries()


def test_every_catalogued_message_has_a_class() -> None:
    classes = catalogue_classes()
    unclassed = [e["format"] for e in ENTRIES if not e["class"]]
    assert unclassed == []
    assert {e["class"] for e in ENTRIES} <= set(classes)
    for cls in classes.values():
        assert cls.meaning and cls.causes, cls.name


def test_every_message_is_recognised_by_its_own_matcher() -> None:
    missed = []
    for entry in ENTRIES:
        text = render(entry["format"])
        found = lookup_message(text)
        # another format may print the same text with more fixed words: that one wins
        if found is None or literal(found.format) < literal(entry["format"]):
            missed.append(entry["format"])
    assert missed == []


def test_the_catalogue_covers_every_release_from_2_12() -> None:
    nccl = DATA["releases"]["nccl"]
    assert "v2.12.7-1" in nccl and "v2.30.7-1" in nccl
    wanted = [t for t in nccl if tuple(map(int, re.findall(r"[0-9]+", t)[:2])) >= (2, 12)]
    project = DATA["projects"].index("nccl")
    per_release: Counter[int] = Counter()
    for message in DATA["messages"]:
        if message[0] != project:
            continue
        for _, first, _, last, _ in message[5]:
            per_release.update(range(first, last + 1))
    for tag in wanted:
        # a few hundred warnings and failure lines per release (2.12.7 has the fewest: 249)
        assert per_release[nccl.index(tag)] > 200, tag
    plugins = {"aws-ofi-nccl", "nccl-rdma-sharp-plugins", "nccl-plugin-gpudirecttcpx",
               "nccl-fastsocket", "rdma-core", "nccl-tests", "pytorch"}
    assert plugins <= set(DATA["projects"])


def test_origins_name_source_files_and_releases() -> None:
    entry = next(e for e in ENTRIES if e["format"] == "socketProgress: Connection closed by "
                 "remote peer %s")
    assert entry["origin"].startswith("src/misc/socket.cc:") and "(v2.16.2-1)" in entry["origin"]
    assert entry["returns"] == "ncclRemoteError"


def test_a_catalogued_warning_is_never_unexplained() -> None:
    warnings = [e for e in ENTRIES if e["level"] == "W" and e["project"] == "nccl"]
    for entry in warnings[::7]:
        line = f"node1:1:1 [0] misc/x.cc:1 NCCL WARN {render(entry['format'])}"
        findings = nccl_log_findings(parse_nccl_log([line]))
        assert "log-nccl-warning" not in {f.code for f in findings}, entry["format"]


def test_loading_is_lazy() -> None:
    code = ("import sys, clusterenv.nccl_log, clusterenv.nccl_log.catalogue as c; "
            "print(c._catalogue.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


# -- the C reading of tools/c_source.py --------------------------------------------------------

SOURCE = r'''
#define PFX "libibverbs: "
// WARN("a commented call");
/* INFO(NCCL_INIT, "a commented
   call"); */
static ncclResult_t f(int fd) {
  if (fd < 0) {
    WARN("Net : Connect to %s failed : %s", addr, strerror(errno));
    return ncclRemoteError;
  }
  INFO(NCCL_NET, "NET/IB : Got %" PRIu64 " bytes, "
       "rank %d", n, rank);
  WARN(buffer);
  WARN("Call to " name " failed: %s", strerror(errno));
  return ncclSuccess;
}
'''


def test_log_calls_read_the_format_and_what_follows() -> None:
    calls = list(log_calls(SOURCE, {"WARN": 0, "INFO": 1}))
    assert [(c.macro, c.line, c.format, c.returns) for c in calls] == [
        ("WARN", 8, "Net : Connect to %s failed : %s", "ncclRemoteError"),
        ("INFO", 11, "NET/IB : Got %lu bytes, rank %d", "continues"),
        ("WARN", 14, "Call to %s failed: %s", "continues"),
    ]
    assert strip_comments("a // b\nc /* d\ne */ f").splitlines() == ["a     ", "c     ", "     f"]
    assert format_string('"a" "b\\n"') == "ab\n" and format_string("cond ? x : y") is None


# The idioms that follow a WARN in NCCL's source, each as a release prints it.
RESULTS_SOURCE = r'''
static ncclResult_t initTransportsRank(struct ncclComm* comm) {
  for (int i = 0; i < nranks; i++) {
    if ((i != rank) && (comm->peerInfo[i].busId == comm->peerInfo[rank].busId)) {
      WARN("Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx", rank, i, b);
      ret = ncclInvalidUsage;
      goto fail;
    }
  }
  if (type != sock->type) {
    WARN("socketFinalizeAccept from %s: wrong type %d != %d", s, type, sock->type);
    sock->state = ncclSocketStateError;
    close(sock->fd);
    return ncclInternalError;
  }
  if (plugin == NULL) {
    WARN("External network plugin %s is unsupported", name);
    goto fail;
  }
  if (info->algorithm == NCCL_ALGO_UNDEF) {
    WARN("No algorithm/protocol available for function %s with datatype %s.%s%s", f, t, a, p);
    return (algoEnv || protoEnv) ? ncclInvalidUsage : ncclInternalError;
  }
  if (ptr == nullptr) {
    WARN("%s:%d Unrecoverable error detected: malloc(size=%llu) returned null.", f, l, n);
    abort();
  }
  if (ncclNet == NULL) {
    INFO(NCCL_INIT|NCCL_NET, "NET/Plugin: Loaded net plugin %s (v10)", ncclNet_v10->name);
    return ncclNet_v10;
  }
}
'''


def test_what_follows_a_call_is_read_with_the_results_the_header_declares() -> None:
    # src/nccl.h.in's enum (v2.27.5-1), comments and all
    header = """/* Error type */
typedef enum { ncclSuccess                 =  0,
               ncclUnhandledCudaError      =  1,
               ncclInvalidUsage            =  5,  /* the application's fault */
               ncclNumResults              =  8 } ncclResult_t;"""
    results = result_names(header)
    assert results == {"ncclSuccess", "ncclUnhandledCudaError", "ncclInvalidUsage"}
    calls = list(log_calls(RESULTS_SOURCE, {"WARN": 0, "INFO": 1},
                           results | {"ncclInternalError"}))
    assert [c.returns for c in calls] == [
        # src/init.cc:737-739 (v2.27.5-1): the result is assigned, then the jump
        "ncclInvalidUsage",
        # src/misc/socket.cc:533-537 (v2.27.5-1): a socket state is not a result
        "ncclInternalError",
        # a jump with nothing assigned returns what was set before: unknown, not "continues"
        "",
        # src/enqueue.cc:2063-2065 (v2.30.7-1): either error, whichever the condition picks
        "ncclInvalidUsage",
        # src/misc/utils.cc:269-270 (v2.27.5-1): the process ends
        "abort",
        # a pointer of another type, whose name looks like a result: unknown
        "",
    ]
    assert result_names("typedef enum { a, b } other_t;") == frozenset()


# The control flow around a log call that decides what follows it, each as NCCL has it.
FLOW_SOURCE = r'''
static void *bootstrapRoot(void* rargs) {
  ncclResult_t res = ncclSuccess;
  do {
    NCCLCHECKGOTO(bootstrapNetRecv(&sock, &info, sizeof(info)), res, out);
    if (nranks != info.nranks) {
      WARN("Bootstrap Root : mismatch in rank count from procs %d : %d", nranks, info.nranks);
      goto out;
    }
  } while (c < nranks);
out:
  if (listenSock != NULL) free(listenSock);
  return NULL;
}

ncclResult_t buildIbvSymbols(struct ncclIbvSymbols* ibvSymbols) {
  if (envIbVerbsLib) INFO(NCCL_ENV | NCCL_INIT, "NCCL_IBVERBS_LIB set by environment to %s", e);
  for (int i = 0; i < NCCL_IBVERBS_LIBS; i++) {
    ibvhandle = dlopen(ibVerbsLib[i], RTLD_NOW);
  }
  if (ibvhandle == nullptr) goto teardown;
  return ncclSuccess;
teardown:
  return ncclSystemError;
}

ncclResult_t wrap_ibv_symbols(void) {
  ibvhandle=dlopen("libibverbs.so", RTLD_NOW);
  if (!ibvhandle) {
    ibvhandle=dlopen("libibverbs.so.1", RTLD_NOW);
    if (!ibvhandle) {
      WARN("Failed to open libibverbs.so[.1]");
      goto teardown;
    }
  }
  return ncclSuccess;
teardown:
  ibv_internal_get_device_list = NULL;
  return ncclSystemError;
}

ncclResult_t ncclIbInit(ncclDebugLogger_t logFunction) {
      for (int d=0; d<nIbDevs; d++) {
        if (ncclSuccess != wrap_ibv_query_device(context, &devAttr)) {
          WARN("NET/IB : Unable to query device %s", devices[d]->name);
          if (ncclSuccess != wrap_ibv_close_device(context)) { ret = ncclInternalError; goto fail; }
          continue;
        }
      }
fail:
  return ret;
}
'''


def test_what_follows_a_call_follows_its_control_flow() -> None:
    calls = {c.format: c.returns for c in log_calls(FLOW_SOURCE, {"WARN": 0, "INFO": 1},
                                                     frozenset({"ncclSuccess", "ncclSystemError",
                                                                "ncclInternalError"}))}
    # src/bootstrap.cc:140 (v2.22.3-1): the root's thread (a function returning a pointer)
    # jumps to its end: it stops serving the ranks, which then wait
    assert calls["Bootstrap Root : mismatch in rank count from procs %d : %d"] == "stops"
    # src/misc/ibvsymbols.cc:80-88 (v2.30.7-1): a jump under an `if` without braces runs only
    # maybe; the INFO is no failure
    assert calls["NCCL_IBVERBS_LIB set by environment to %s"] == "continues"
    # src/misc/ibvwrap.cc:63-64 (v2.10.3-1): the label's code returns a constant error
    assert calls["Failed to open libibverbs.so[.1]"] == "ncclSystemError"
    # src/transport/net_ib.cc:433-435 (v2.21.5-1): the error is assigned in a nested block
    # that runs only when closing fails too; the loop goes on
    assert calls["NET/IB : Unable to query device %s"] == "continues"


def test_the_catalogue_knows_which_warnings_fail_the_call() -> None:
    # src/init.cc:737 (v2.27.5-1) assigns ncclInvalidUsage and jumps to its exit
    duplicate = lookup_message(
        "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000")
    assert duplicate is not None and duplicate.fails
    # src/misc/socket.cc:533 (v2.27.5-1) returns ncclInternalError, after setting a state
    wrong_type = lookup_message("socketFinalizeAccept from 10.0.0.2<41234>: wrong type 3 != 4")
    assert wrong_type is not None and wrong_type.returns == "ncclInternalError"
    # src/misc/utils.cc:269 (v2.27.5-1) aborts the process after it
    aborted = lookup_message("misc/utils.cc:269 Unrecoverable error detected: malloc(size=64) "
                             "returned null.")
    assert aborted is not None and aborted.returns == "abort" and aborted.fails
    # src/bootstrap.cc:140 (v2.22.3-1): the root's thread stops; the causes are reviewed
    root = lookup_message("Bootstrap Root : mismatch in rank count from procs 16 : 8")
    assert root is not None and root.returns == "stops" and root.fails
    assert "NCCL_COMM_ID" in root.causes and "WORLD_SIZE" in root.causes


@pytest.mark.parametrize(("fmt", "text"), [
    ("Connect to %s failed : %s", "Connect to 10.0.0.2<4242> failed : Connection refused"),
    ("size %zu at %p (%.*s) %5d%%", "size 4096 at 0x7f00 (abc)    12%"),
    ("status=%d len=%lu", "status=-5 len=18446744073709551615"),
])
def test_format_to_regex(fmt: str, text: str) -> None:
    assert re.fullmatch(format_to_regex(fmt), text)


# -- tools/nccl_messages.py on a repository made here --------------------------------------------

def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                        "PATH": "/usr/bin:/bin"})


def release(repo: Path, tag: str, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", tag)
    git(repo, "tag", tag)


def test_the_script_reads_every_release_and_classes_by_rules(tmp_path: Path) -> None:
    repo = tmp_path / "nccl"
    repo.mkdir()
    git(repo, "init", "-q")
    socket = ('ncclResult_t c() {\n  WARN("socketProgress: Connection closed by remote peer %s", '
              'x);\n  return ncclRemoteError;\n}\n')
    release(repo, "v2.12.7-1", {"src/misc/socket.cc": socket,
                                "src/init.cc": 'void i() { INFO(NCCL_INIT, "Init done"); }\n'})
    release(repo, "v2.13.4-1", {"src/misc/socket.cc": "\n\n" + socket,
                                "src/newthing/odd.cc": 'void o() { WARN("A new odd warning"); }\n'})
    out = tmp_path / "messages.json"
    run = subprocess.run([sys.executable, str(TOOLS / "nccl_messages.py"), "--nccl", str(repo),
                          "--out", str(out), "--quiet"], capture_output=True, text=True, check=True)
    data = json.loads(out.read_text())
    assert data["releases"]["nccl"] == ["v2.12.7-1", "v2.13.4-1"]
    fields = data["fields"]
    rows = [dict(zip(fields, row, strict=False)) for row in data["messages"]]
    closed = next(r for r in rows if r["format"].startswith("socketProgress"))
    assert closed["class"] == "socket" and closed["returns"] == "ncclRemoteError"
    # file and line at the first and the last release: the call moved two lines down
    assert closed["origins"] == [[data["paths"].index("src/misc/socket.cc"), 0, 2, 1, 4]]
    assert "extra" in fields and closed.get("extra", {}).get("causes")  # the reviewed override
    # "Init done" reports neither a failure nor a choice: not catalogued
    assert not any(r["format"] == "Init done" for r in rows)
    # no rule knows src/newthing/: the script says so instead of guessing
    assert "UNCLASSED nccl src/newthing/odd.cc: 'A new odd warning'" in run.stdout
    check = subprocess.run([sys.executable, str(TOOLS / "nccl_messages.py"), "--nccl", str(repo),
                            "--out", str(out), "--quiet", "--check"], capture_output=True,
                           check=False)
    assert check.returncode == 0
