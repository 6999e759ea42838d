"""What the benchmark scripts share: the import path and the machine facts they print.

Imported first by every script (`import _common`, found beside it): a script run as
`python benchmarks/x.py` has benchmarks/ as sys.path[0], where kernels.py would shadow the `kernels`
package; this takes that folder off the path and puts the repository root first.
"""

from __future__ import annotations

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
