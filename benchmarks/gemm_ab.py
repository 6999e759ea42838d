"""The products of the block formats at two builds in ONE process (issue #20), the two taking turns. The 32-weight
formats: this tree's kernels/quants/q32.py against an older commit's (with that commit's _simd.py), each format's
own gemm wrapper (`_gemm` and `_gemm_x86` where there is one; `_gemv` / `_gemv_x86` with --tokens 1) compiled
against both. The 256-weight (K-quant) formats: the format's module of each build (kernels/quants/q6_k.py ...,
the base's as q6_k_base, with Q4_K's q4_k_gemm256.py and q4_k_gemm512.py; the rest, _simd.py among it, this tree's), through the
format's gemm (or gemv). On a noisy VM, separate processes differ by
more than such a change; side by side they see the same machine.

    python benchmarks/gemm_ab.py --base a05986e [--types Q4_1,Q5_0,Q5_1,Q8_0] [--shapes 576x1536,1536x576]
                                 [--tokens 512] [--threads 2] [--rounds 15]

The base's files become q32_base / _simd_base (or q6_k_base ...) in .cache/gemm_ab. Weights and activations are random, packed
by this tree (the base must share its layout). Each build runs through the format's own _mm_fast (activation
sums included). Prints GMAC/s (best round) of each and whether the two outputs are the same bits.
"""

from __future__ import annotations

from _common import REPO, base_module, base_q32  # first: the repository root on the import path

import argparse
import importlib
import importlib.util
import inspect
import textwrap
import time

import numpy as np

from kernels import config  # noqa: E402  (numba settings first)


def _gemm_against(fn, fmt_module, q32_module):
    """The format module's gemm wrapper fn compiled with `q32` bound to q32_module (no cache: exec'd source)."""
    import numba
    src = textwrap.dedent(inspect.getsource(fn.py_func)).split("\n", 1)[1]  # without its @pjit line
    scope = dict(vars(fmt_module), q32=q32_module)
    exec(src, scope)
    return numba.njit(parallel=True, fastmath=False)(scope[fn.__name__])


MODULES = {"IQ4_NL": "iq4", "IQ4_XS": "iq4"}  # format modules not named after their type
FORMATS = {"IQ4_NL": "FORMAT_NL", "IQ4_XS": "FORMAT_XS"}  # their BlockFormat records


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="git revision to compare with")
    ap.add_argument("--types", default="Q4_1,Q5_0,Q5_1,Q8_0")
    ap.add_argument("--shapes", default="576x1536,1536x576", help="K x N, comma-separated (SmolLM2's by default)")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()

    from kernels.ggml_type import BLOCK_GEOMETRY, GGMLType
    from kernels.matmul import Weight
    from kernels.quants import q32
    from kernels.quants.base import empty_aligned
    from kernels.quants.vec_dot_type import quantize_activations
    spec = importlib.util.spec_from_file_location("kernels_bench", REPO / "benchmarks" / "kernels.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # its random_weight

    config.set_num_threads(args.threads)
    where = REPO / ".cache" / "gemm_ab"
    base = base_q32(args.base, where)
    rng = np.random.default_rng(0)
    T = args.tokens
    print(f"# {time.strftime('%H:%M', time.gmtime())} UTC, {T} tokens, {args.threads} threads, best of "
          f"{args.rounds} rounds, GMAC/s: base {args.base} -> this tree")
    for tname in args.types.split(","):
        mname = MODULES.get(tname, tname.lower())
        fmt_name = FORMATS.get(tname, "FORMAT")
        mod = importlib.import_module(f"kernels.quants.{mname}")
        if BLOCK_GEOMETRY[GGMLType[tname]][0] == 32 and mname not in MODULES.values():
            kind = "_gemv" if T == 1 else "_gemm"
            names = [n for n in (kind, kind + "_x86") if hasattr(mod, n)]  # the wrappers _mm_fast may call
            own = {n: getattr(mod, n) for n in names}
            builds = {b: {n: _gemm_against(own[n], mod, q) for n in names}
                      for b, q in (("base", base), ("this tree", q32))}
            calls = {name: mod._mm_fast for name in builds}
        else:  # the base's module (and Q4_K's gemm256 module), not registered as the type's format
            own, builds = {}, {"base": {}, "this tree": {}}
            renames = [(f"{f} = register(", f"{f} = (") for f in set(FORMATS.get(t, "FORMAT") for t in (tname,))]
            if tname == "Q4_K":
                base_module(args.base, "kernels/quants/q4_k_gemm256.py", "q4_k_gemm256_base", where)
                renames.append(("from . import q4_k_gemm256", "import q4_k_gemm256_base as q4_k_gemm256"))
                base_module(args.base, "kernels/quants/q4_k_gemm512.py", "q4_k_gemm512_base", where)
                renames.append(("from .q4_k_gemm512 import", "from q4_k_gemm512_base import"))
            if mname == "iq4":  # both formats are in one module: neither registers
                renames = [(f"{f} = register(", f"{f} = (") for f in ("FORMAT_NL", "FORMAT_XS")]
            old = base_module(args.base, f"kernels/quants/{mname}.py", f"{mname}_base", where, renames)
            kind = "gemv" if T == 1 else "gemm"
            calls = {"base": getattr(getattr(old, fmt_name), kind), "this tree": getattr(getattr(mod, fmt_name), kind)}
        for K, N in (tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")):
            w = Weight(GGMLType[tname], bench.random_weight(tname, K, N, rng).reshape(-1), K, N, tname)
            assert BLOCK_GEOMETRY[w.ggml_type][0] != 32 or w.repacked, "a repacked 32-weight format"  # (IQ4_NL too)
            a = quantize_activations(w.fmt.vec_dot_type, rng.standard_normal((T, K), dtype=np.float32))
            outs = {name: empty_aligned((T, N), np.float32) for name in builds}
            best = {name: float("inf") for name in builds}
            for r in range(args.rounds + 1):
                for name in (list(builds) if r % 2 else list(builds)[::-1]):
                    for n, fn in builds[name].items():
                        setattr(mod, n, fn)
                    t0 = time.perf_counter()
                    calls[name](w.packed, a, outs[name])
                    if r:  # (round 0 compiles)
                        best[name] = min(best[name], time.perf_counter() - t0)
            for n, fn in own.items():
                setattr(mod, n, fn)
            g = {name: K * N * T / best[name] / 1e9 for name in builds}
            same = np.array_equal(*(o.view(np.uint32) for o in outs.values()))
            print(f"{tname:5} {K:5}x{N:<5} {g['base']:7.1f} -> {g['this tree']:7.1f}  "
                  f"({best['base'] / best['this tree']:.2f}x)  {'same bits' if same else 'DIFFERENT bits'}")


if __name__ == "__main__":
    main()
