"""What the benchmark scripts share: the import path and the machine facts they print.

Imported first by every script (`import _common`, found beside it): a script run as
`python benchmarks/x.py` has benchmarks/ as sys.path[0], where kernels.py would shadow the `kernels`
package; this takes that folder off the path and puts the repository root first.
"""

from __future__ import annotations

import importlib
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures"

_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(REPO)] + [p for p in sys.path if Path(p or ".").resolve() not in (_HERE, REPO)]


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def file_at(rev: str, path: str) -> str:
    """The text of the repository's file `path` at git revision rev (the A/B scripts' base builds)."""
    return subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], check=True, capture_output=True,
                          text=True).stdout


# a kernels/quants/ module's relative imports, made absolute for a copy outside the package
_ABSOLUTE = (("from .. import", "from kernels import"), ("from ..", "from kernels."),
             ("from . import", "from kernels.quants import"), ("from .", "from kernels.quants."))


def base_module(rev: str, path: str, name: str, where: Path, renames=()):
    """Module `name`: the repository's file `path` at revision rev, written to where/name.py after the (old, new)
    text replacements `renames` (pointing its imports at other base modules) and with relative imports made
    absolute (the rest comes from this tree's kernels package). The A/B scripts' base builds; `where` is kept
    between runs, so that numba's cache serves the next one."""
    text = file_at(rev, path)
    for old, new in tuple(renames) + _ABSOLUTE:
        text = text.replace(old, new)
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{name}.py").write_text(text)
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    return importlib.import_module(name)


def base_q32(rev: str, where: Path):
    """rev's kernels/quants/q32.py as module q32_base, on rev's _simd.py (_simd_base)."""
    base_module(rev, "kernels/quants/_simd.py", "_simd_base", where)
    return base_module(rev, "kernels/quants/q32.py", "q32_base", where, [("from ._simd import", "from _simd_base import")])
