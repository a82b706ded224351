"""``clusterenv bench``: measure all-reduce and each node's link against the line rate.

Run on every node at once, like ``preflight``. Each node applies the same plan as ``launch`` and
starts torchrun with :mod:`clusterenv.bench.worker`; every node prints the same verdict. Progress
goes to stderr, the report (or ``--json``) to stdout. Exit 0: no slow node; 1: a slow node or
link was named; 2: the run could not complete (bad options, torch missing, a node that never
joined, the time limit).

What torchrun and its workers print besides the workers' progress lines (torchrun's banner,
torch's C++ log and the stack traces its store prints when a peer leaves first at exit) is
kept out of the terminal: it goes to a log file, removed after a run that ended well and named
in the message of one that did not. ``--debug`` shows it as it comes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from clusterenv._cli._common import (
    add_json,
    add_plan_options,
    emit_json,
    host_context,
    whole_number,
)
from clusterenv.errors import LaunchError

if TYPE_CHECKING:
    from clusterenv.bench.model import BenchResult


#: Seconds torchrun gets after the time limit to write the result and leave.
_GRACE = 10.0
_DEFAULT_TIME_LIMIT = 60.0


def _sizes(text: str) -> tuple[int, ...]:
    from clusterenv.bench.units import parse_sizes

    try:
        return parse_sizes(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_AT_LEAST_1 = whole_number(1, "expected at least 1")
_AT_LEAST_0 = whole_number(0, "expected 0 or more")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: expected a positive number of seconds")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text}: expected a fraction in (0, 1], e.g. 0.5")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``clusterenv bench``."""
    parser.add_argument(
        "--nproc-per-node", type=_AT_LEAST_1, metavar="N", default=None,
        help="processes on this node (default: the visible GPUs, or 1 on a CPU host)",
    )
    parser.add_argument(
        "--backend", choices=("auto", "nccl", "gloo"), default="auto",
        help="auto: NCCL on CUDA tensors when GPUs are visible, else Gloo on CPU tensors",
    )
    parser.add_argument(
        "--sizes", type=_sizes, default=None, metavar="LIST",
        help="all-reduce sizes per rank, e.g. 1M,16M,256M (K/M/G are powers of 1024; default "
        "256K to 1G by x4 on GPU, to 64M on CPU); the largest is also the link transfer size",
    )
    parser.add_argument("--iters", type=_AT_LEAST_1, default=None, metavar="N",
                        help="timed iterations per measurement (default 20 on GPU, 5 on CPU)")
    parser.add_argument("--warmup", type=_AT_LEAST_0, default=None, metavar="N",
                        help="untimed iterations first (default 5 on GPU, 1 on CPU)")
    parser.add_argument(
        "--time-limit", type=_seconds, default=_DEFAULT_TIME_LIMIT, metavar="SECONDS",
        help="for the whole run, start-up included (default 60); iterations shrink to fit, "
        "and a run still going after it is stopped (exit 2)",
    )
    parser.add_argument(
        "--min-fraction", type=_fraction, default=0.5, metavar="F",
        help="a node whose link is below F x the median of the others is slow (default 0.5)",
    )
    parser.add_argument("--plot", metavar="FILE.svg", default=None,
                        help="also write a self-contained SVG picture of the run")
    add_plan_options(parser, debug_help="also set NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET "
                     "when unset, and show everything torchrun and the workers print")
    add_json(parser)


def _torchrun_command() -> list[str]:
    # The worker imports clusterenv and torch, so torchrun must be this very interpreter's.
    if importlib.util.find_spec("torch") is None:
        raise LaunchError(
            f"PyTorch is not installed in the interpreter that runs it ({sys.executable}): "
            "pip install torch (the CPU wheel is enough for --backend gloo)"
        )
    return [sys.executable, "-m", "torch.distributed.run"]


def _choose(args: argparse.Namespace, gpus: int) -> tuple[str, int]:
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if gpus else "gloo"
    if backend == "nccl" and not gpus:
        raise LaunchError(
            "--backend nccl needs GPUs, and this node sees none (check CUDA_VISIBLE_DEVICES and "
            "`nvidia-smi`); use --backend gloo to measure over TCP with CPU tensors"
        )
    nproc = args.nproc_per_node or (gpus if backend == "nccl" else 1)
    if backend == "nccl" and nproc > gpus:
        raise LaunchError(
            f"--nproc-per-node {nproc} with --backend nccl needs {nproc} GPUs, and this node sees "
            f"{gpus}; use --nproc-per-node {gpus}"
        )
    return backend, nproc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM torchrun's process group (it forwards to the workers), then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


#: What the workers print for the user, which is passed on (see clusterenv.bench.worker).
_PROGRESS = b"clusterenv bench: "
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b[^:]*: .+")


class _Output:
    """Reads torchrun's output (its workers' too) as it comes: the workers' progress lines go
    to stderr, everything goes to ``log``, and to stderr as well with ``debug``."""

    def __init__(self, pipe: IO[bytes], log: IO[bytes], debug: bool) -> None:
        self.last_error: str | None = None
        self._pipe, self._log, self._debug = pipe, log, debug
        self._thread = threading.Thread(target=self._relay, name="bench-output", daemon=True)
        self._thread.start()

    def _relay(self) -> None:
        try:
            for line in iter(lambda: self._pipe.readline(64 * 1024), b""):
                self._log.write(line)
                text = line.decode("utf-8", "replace").rstrip("\n")
                if _ERROR_LINE.match(text):
                    self.last_error = text.strip()
                if self._debug or line.startswith(_PROGRESS):
                    print(text, file=sys.stderr, flush=True)
            self._log.flush()
        except (OSError, ValueError):  # the log closed after a stop, or stderr went away
            return

    def finish(self) -> None:
        """Wait for the end of the output (every writer has exited, or was killed)."""
        self._thread.join(timeout=10)


def _measure(args: argparse.Namespace, started: float) -> BenchResult:
    from clusterenv._gpus import visible_gpu_count
    from clusterenv.bench.model import BenchResult
    from clusterenv.bench.worker import RESULT_ENV
    from clusterenv.launch import plan_launch

    environ, root = host_context(args)
    backend, nproc = _choose(args, visible_gpu_count(environ, root))
    torchrun = _torchrun_command()
    with tempfile.TemporaryDirectory(prefix="clusterenv-bench-") as tmp:
        result_file = Path(tmp) / "result.json"
        deadline = time.time() + args.time_limit - (time.monotonic() - started)
        worker = ["--module", "clusterenv.bench.worker", "--backend", backend,
                  "--deadline", f"{deadline:.3f}",
                  "--min-fraction", str(args.min_fraction),
                  "--init-timeout", str(args.time_limit)]
        if args.sizes:
            worker += ["--sizes", ",".join(str(s) for s in args.sizes)]
        if args.iters is not None:
            worker += ["--iters", str(args.iters)]
        if args.warmup is not None:
            worker += ["--warmup", str(args.warmup)]
        plan = plan_launch(environ, command=worker, root=root, nproc_per_node=nproc,
                           override=args.override, debug=args.debug, torchrun=torchrun)
        env = dict(plan.environ)
        env[RESULT_ENV] = str(result_file)
        # torchrun leaves a torchelastic_* directory in the temporary directory: ours is
        # removed with everything in it.
        env["TMPDIR"] = tmp
        if backend == "nccl" and "NCCL_DEBUG" not in env:
            # The workers read their own log to say which transport NCCL used.
            env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET",
                       NCCL_DEBUG_FILE=str(Path(tmp) / "nccl.%h.%p.log"))
        _say(f"starting {backend}, {nproc} process"
             f"{'es' if nproc != 1 else ''} on node {plan.config.node_rank} of "
             f"{plan.config.num_nodes}, time limit {args.time_limit:g} s")
        for finding in plan.findings:
            if finding.severity != "info":
                _say(f"{finding.severity}: [{finding.code}] {finding.title}")
        stop_at = started + args.time_limit + _GRACE
        # Kept where the user can read it when the run goes wrong; removed when it goes well.
        fd, log_name = tempfile.mkstemp(prefix="clusterenv-bench-", suffix=".log")
        with os.fdopen(fd, "wb") as log:
            proc = subprocess.Popen(
                list(plan.command), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
            output = _Output(cast("IO[bytes]", proc.stdout), log, args.debug)  # stdout=PIPE
            try:
                code = proc.wait(timeout=max(stop_at - time.monotonic(), 1.0))
            except subprocess.TimeoutExpired:
                _stop(proc)
                output.finish()
                raise LaunchError(
                    f"the run did not finish within --time-limit {args.time_limit:g} s "
                    f"(+{_GRACE:g} s to shut down): a node that never started or a link too "
                    "slow for the sizes; start it on every node at once, or give smaller "
                    f"--sizes or a longer --time-limit{_where_output(log_name, output)}"
                ) from None
            except BaseException:
                _stop(proc)
                raise
            output.finish()
        if not result_file.is_file():
            raise LaunchError(
                f"the workers did not report a result (torchrun exited {code}): a node that "
                "did not join, or a connection refused (run `clusterenv doctor` and "
                f"`clusterenv preflight` on every node){_where_output(log_name, output)}"
            )
        if code != 0:
            _say(f"torchrun exited {code} after the result was written, while shutting down"
                 f"{_where_output(log_name, output)}")
        else:
            os.unlink(log_name)
        return BenchResult.from_dict(json.loads(result_file.read_text(encoding="utf-8")))


def _where_output(log_name: str, output: _Output) -> str:
    said = f"; the last error it printed: {output.last_error}" if output.last_error else ""
    return f"{said}; torchrun's whole output is in {log_name} (--debug shows it as it runs)"


def _say(text: str) -> None:
    print(f"clusterenv bench: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Measure, print the report (or JSON), write the plot; the exit code of the verdict."""
    from clusterenv.bench.report import render_report
    from clusterenv.bench.svg import nothing_to_draw, write_svg

    started = time.monotonic()
    if os.environ.get("RANK") is not None and os.environ.get("LOCAL_RANK") is not None:
        raise LaunchError(
            "this process is already a launched worker (RANK and LOCAL_RANK are set): run "
            "`clusterenv bench` from a shell on every node, or call clusterenv.bench.run() "
            "inside your process group"
        )
    result = _measure(args, started)
    if args.plot:
        empty = nothing_to_draw(result)
        if empty:
            _say(f"--plot {args.plot}: no picture written: {empty}")
        else:
            try:
                write_svg(result, args.plot)
            except OSError as e:
                raise LaunchError(
                    f"--plot {args.plot!r}: cannot write it: {e.strerror or e}") from e
    if args.json:
        emit_json(result.to_dict())
    else:
        print(render_report(result, sys.stdout))
    return result.exit_code
