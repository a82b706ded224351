"""List the variables a launcher puts into the processes it starts, read from its own source.

The identifying variables that ``clusterenv.sources`` keeps as data come from here, so that the
next release of each launcher can be read the same way and compared:

- ``torchrun TORCH_DIR``: what torchrun's agent writes into each worker's environment, from
  ``LocalElasticAgent._start_workers`` (``distributed/elastic/agent/server/
  local_elastic_agent.py``) and the per-worker error file of the log specs
  (``distributed/elastic/multiprocessing/api.py``). ``TORCH_DIR`` is the ``torch`` package
  directory of an installation (``python -c 'import torch, os;
  print(os.path.dirname(torch.__file__))'``) or of a pytorch checkout. Compare with
  ``clusterenv.sources.torchelastic.TORCHRUN_VARIABLES``.
- ``slurm SLURM_CHECKOUT``: the "OUTPUT ENVIRONMENT VARIABLES" of ``doc/man/man1/srun.1``,
  ``sbatch.1`` and ``salloc.1`` in a checkout of Slurm, grouped as: set by srun only (a step's
  tasks), by srun and sbatch but not salloc (any task Slurm starts, the batch script included),
  and the rest. Compare with ``clusterenv.sources.slurm.STEP_VARIABLES`` and
  ``TASK_VARIABLES``, which keep the ones that name the step, srun, or the task itself.

Usage: ``python tools/launcher_variables.py {torchrun|slurm} PATH``; exit 1 when a file is
missing or holds none of what is looked for (the launcher moved it: read the new place).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

_NAME = re.compile(r"[A-Z][A-Z0-9_]+")


def _dict_keys(function: ast.AST) -> list[str]:
    """String keys of every dict literal in ``function`` that look like variable names."""
    keys: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Dict):
            for key in node.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and (
                        _NAME.fullmatch(key.value)):
                    keys.append(key.value)
    return keys


def _subscript_keys(tree: ast.AST, prefix: str) -> list[str]:
    """``env[...]["NAME"] = ...`` targets whose name starts with ``prefix``."""
    keys: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant)
                        and isinstance(target.slice.value, str)
                        and target.slice.value.startswith(prefix)):
                    keys.append(target.slice.value)
    return keys


def torchrun(torch_dir: Path) -> dict[str, list[str]]:
    """The variables torchrun's agent gives each worker, by the file they are set in."""
    agent = torch_dir / "distributed/elastic/agent/server/local_elastic_agent.py"
    logs = torch_dir / "distributed/elastic/multiprocessing/api.py"
    tree = ast.parse(agent.read_text(encoding="utf-8"))
    functions = [n for n in ast.walk(tree)
                 if isinstance(n, ast.FunctionDef) and n.name == "_start_workers"]
    worker = sorted({k for f in functions for k in _dict_keys(f)})
    error_file = sorted(set(_subscript_keys(
        ast.parse(logs.read_text(encoding="utf-8")), "TORCHELASTIC_")))
    return {str(agent.relative_to(torch_dir)): worker, str(logs.relative_to(torch_dir)): error_file}


def _man_output_variables(page: Path) -> set[str]:
    """The variables a Slurm man page lists under OUTPUT ENVIRONMENT VARIABLES."""
    names: set[str] = set()
    inside = False
    lines = page.read_text(encoding="utf-8", errors="replace").splitlines()
    for index, line in enumerate(lines):
        if line.startswith(".SH"):
            inside = "OUTPUT ENVIRONMENT VARIABLES" in line
            continue
        if inside and line.startswith(".TP") and index + 1 < len(lines):
            head = re.match(r"\\fB([A-Z][A-Z0-9_]+)", lines[index + 1])
            if head:
                names.add(head.group(1))
    return names


def slurm(checkout: Path) -> dict[str, list[str]]:
    """srun's, sbatch's and salloc's output variables, grouped by who sets them."""
    pages = {name: _man_output_variables(checkout / f"doc/man/man1/{name}.1")
             for name in ("srun", "sbatch", "salloc")}
    srun, sbatch, salloc = pages["srun"], pages["sbatch"], pages["salloc"]
    return {
        "srun only (a step's tasks)": sorted(srun - sbatch - salloc),
        "srun and sbatch, not salloc (any task Slurm starts)": sorted(srun & sbatch - salloc),
        "also set by salloc (an allocation, not a task)": sorted(srun & salloc),
    }


def main(argv: list[str]) -> int:
    """Print the groups, one variable per line; 1 when nothing was found."""
    if len(argv) != 2 or argv[0] not in ("torchrun", "slurm"):
        print(__doc__, file=sys.stderr)
        return 2
    kind, path = argv[0], Path(argv[1])
    try:
        groups = torchrun(path) if kind == "torchrun" else slurm(path)
    except OSError as e:
        print(f"{kind}: cannot read {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    for title, names in groups.items():
        print(f"# {title}")
        for name in names:
            print(name)
    return 0 if all(groups.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
