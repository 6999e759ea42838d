"""numba settings in one place: the on-disk cache folder and the jit decorators every kernel uses.

Import this module before numba anywhere in kernels/: NUMBA_CACHE_DIR is read when numba is first
imported. The cache lives in the project's `.cache/numba` (git-ignored) so CI and users reuse compiled
kernels; a user may point NUMBA_CACHE_DIR elsewhere. fastmath is never on: ggml's rounding is the spec.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


NO_SIMD = _flag("SYNAPSE_NO_SIMD")  # kernels/quants/_simd.py: the portable scalar kernels only
NO_AVX512 = _flag("SYNAPSE_NO_AVX512")  # the 256-bit (AVX2) kernels only
# Both change module constants that compiled kernels freeze (which kernel runs, the q32 row-group size): a
# build made under one gets its own cache folder, or a later run in another mode would load its machine code.
# The Makefile exports the default folder; a folder the user chose is left alone.
_DEFAULT_CACHE = str(PROJECT_ROOT / ".cache" / "numba")
_CACHE = str(PROJECT_ROOT / ".cache" / ("numba-nosimd" if NO_SIMD else "numba-noavx512" if NO_AVX512 else "numba"))
if os.environ.get("NUMBA_CACHE_DIR", _DEFAULT_CACHE) == _DEFAULT_CACHE:
    os.environ["NUMBA_CACHE_DIR"] = _CACHE

import numba  # noqa: E402

# numba reads NUMBA_CACHE_DIR when it is first imported: if something imported it before this module (a
# script importing numba first), its cache would land in __pycache__ beside the sources, where a stale entry
# outlives `rm -rf .cache/numba`. Its cache locator reads config.CACHE_DIR per function, so set it here too.
if numba.config.CACHE_DIR in ("", _DEFAULT_CACHE):
    numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]

# The one jit family of every kernel: cached, no fastmath, and IEEE division (error_model="numpy": x/0 gives
# inf/nan as in C instead of numba's Python-style ZeroDivisionError check, a branch that also stops loops
# vectorising).
# serial kernels (called from inside parallel ones, or small)
jit = numba.njit(cache=True, fastmath=False, nogil=True, error_model="numpy")
# small helpers inlined into their callers at numba-IR level (LLVM's inliner may leave a call whose vector
# arguments then travel through memory)
ijit = numba.njit(cache=True, fastmath=False, nogil=True, error_model="numpy", inline="always")
# kernels with a prange over independent output rows
pjit = numba.njit(cache=True, fastmath=False, nogil=True, error_model="numpy", parallel=True)


def _host_features() -> frozenset[str]:
    """The x86 features numba compiles for: the host's, or those NUMBA_CPU_NAME / NUMBA_CPU_FEATURES ask for (a
    portable build, NUMBA_CPU_NAME=generic: no ISA assumptions)."""
    import llvmlite.binding as llvm

    spec = os.environ.get("NUMBA_CPU_FEATURES")
    if spec is None:
        if os.environ.get("NUMBA_CPU_NAME", "host") not in ("host", ""):
            return frozenset()
        return frozenset(k for k, v in llvm.get_host_cpu_features().items() if v)
    return frozenset(f[1:] for f in spec.split(",") if f.startswith("+"))


CPU_FEATURES = _host_features()  # what the kernels may use (kernels/_vec.py, kernels/quants/_simd*.py)


_threads = 0  # last value given to set_num_threads (0: never called -> numba's default, all threads)


def set_num_threads(n: int) -> None:
    """Threads used by every `pjit` kernel (llama.cpp's -t)."""
    global _threads
    _threads = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(_threads)


def work_chunks() -> int:
    """How many static chunks a kernel should split its rows into: the thread count set here, without
    numba.get_num_threads()'s ~2 us ctypes call (matters for ~100 small gemv calls per token). Any value
    gives the same results; a stale one (numba.set_num_threads called directly) only costs speed."""
    return _threads or numba.config.NUMBA_NUM_THREADS


def set_work_chunks(n: int) -> None:
    """work_chunks() = n with numba's active threads left as they are: the kernels then take the paths of n
    threads (their parallel forms, compiled as for n threads) and run every chunk on the threads there are (the
    warm-up helper, synapse_cli/warm.py, on one thread)."""
    global _threads
    _threads = max(1, int(n))


def get_num_threads() -> int:
    return numba.get_num_threads()
