"""The floor of the one-row attention's V step on this CPU (issue #20): ggml's F16 accumulator chain in isolation.

Every visible cell c of a query row updates its D = 64 accumulators as VKQ = fp16(fma(V[c], vs[c], VKQ))
(ggml_vec_mad_f16): an FMA and a round trip through F16 per lane and cell, in cell order. synapse's default
(a prompt in any batch split equals token-by-token decoding) keeps this arithmetic for every prompt row, so
its time bounds the batch attention kernel (kernels/flash_attn_rows.py). Variants, each over 24 rows x 256
cells of an F32 V chunk in L1/L2, hot, one thread:

    round trip    the kernel's form: fma, then vcvtps2ph + vcvtph2ps (F16C), one row's 64 lanes at a time
    two rows      the same for two rows at once (16 ymm chains on AVX2), V loaded once for both
    three rows    three rows at once, twelve zmm chains: the batch kernel's form on AVX-512 (_vkq_slabs)
    three emul.   three rows with the emulated rounding below
    emulated      the F16 rounding in float/int arithmetic instead of the conversions: (t + C) - C with C
                  1.5 x 2^(e+13) from t's exponent e (clamped at F16's subnormal step); the same bits for
                  finite results below 65520 (the benchmark checks them), not for overflow or a -0
    no rounding   fma only (wrong bits: what the rounding costs)

    python benchmarks/f16_accumulator.py [--rounds 5]

Prints ns per (row, cell) of each (best of --rounds) and whether the exact variants give the round trip's bits.
"""

from __future__ import annotations

from _common import REPO  # noqa: F401  (first: the repository root on the import path)

import argparse
import time

import numpy as np
from llvmlite import ir
from numba import njit
from numba.extending import intrinsic

from kernels._vec import F32x16, _wide, fma16, load16, round_f16_16, splat16, store16

D = 64  # head dimension (SmolLM2)
ROWS, CELLS = 24, 256  # a batch attention work item: 8 tokens x 3 query heads, one chunk of cells


@intrinsic
def _round_f16_emulated(typingctx, a):
    """Each lane rounded to the F16 grid (nearest even) without conversions (module docstring)."""
    if a != F32x16:
        return None

    def codegen(context, builder, sig, args):
        _wide(builder)
        vi = ir.VectorType(ir.IntType(32), 16)
        t = args[0]
        e = builder.and_(builder.bitcast(t, vi), ir.Constant(vi, [0x7F800000] * 16))
        lo = ir.Constant(vi, [(127 - 14) << 23] * 16)  # 2^-14: below it F16's step is fixed (2^-24)
        e = builder.select(builder.icmp_signed(">", e, lo), e, lo)
        c = builder.bitcast(builder.add(e, ir.Constant(vi, [(13 << 23) + (1 << 22)] * 16)), t.type)
        return builder.fsub(builder.fadd(t, c), c)

    return F32x16(a), codegen


def _one_row(rounding):
    @njit(cache=False)
    def run(n, vb, vsv, acc):
        for _ in range(n):
            for r in range(ROWS):
                o = r * D
                a0, a1, a2, a3 = load16(acc, o), load16(acc, o + 16), load16(acc, o + 32), load16(acc, o + 48)
                for c in range(CELLS):
                    vs = splat16(vsv[r, c])
                    v = c * D
                    a0 = rounding(fma16(load16(vb, v), vs, a0))
                    a1 = rounding(fma16(load16(vb, v + 16), vs, a1))
                    a2 = rounding(fma16(load16(vb, v + 32), vs, a2))
                    a3 = rounding(fma16(load16(vb, v + 48), vs, a3))
                store16(acc, o, a0)
                store16(acc, o + 16, a1)
                store16(acc, o + 32, a2)
                store16(acc, o + 48, a3)

    return run


@njit(cache=False)
def _no_rounding(x):
    return x


@njit(cache=False)
def _two_rows(n, vb, vsv, acc):
    for _ in range(n):
        for r in range(0, ROWS, 2):
            o, p = r * D, (r + 1) * D
            a0, a1, a2, a3 = load16(acc, o), load16(acc, o + 16), load16(acc, o + 32), load16(acc, o + 48)
            b0, b1, b2, b3 = load16(acc, p), load16(acc, p + 16), load16(acc, p + 32), load16(acc, p + 48)
            for c in range(CELLS):
                va, vb_ = splat16(vsv[r, c]), splat16(vsv[r + 1, c])
                v = c * D
                v0, v1, v2, v3 = load16(vb, v), load16(vb, v + 16), load16(vb, v + 32), load16(vb, v + 48)
                a0 = round_f16_16(fma16(v0, va, a0))
                a1 = round_f16_16(fma16(v1, va, a1))
                a2 = round_f16_16(fma16(v2, va, a2))
                a3 = round_f16_16(fma16(v3, va, a3))
                b0 = round_f16_16(fma16(v0, vb_, b0))
                b1 = round_f16_16(fma16(v1, vb_, b1))
                b2 = round_f16_16(fma16(v2, vb_, b2))
                b3 = round_f16_16(fma16(v3, vb_, b3))
            for k, x in enumerate((a0, a1, a2, a3)):
                store16(acc, o + 16 * k, x)
            for k, x in enumerate((b0, b1, b2, b3)):
                store16(acc, p + 16 * k, x)


def _three_rows(rounding):
    @njit(cache=False)
    def run(n, vb, vsv, acc):
        for _ in range(n):
            for r in range(0, ROWS, 3):
                o, p, q = r * D, (r + 1) * D, (r + 2) * D
                a0, a1, a2, a3 = load16(acc, o), load16(acc, o + 16), load16(acc, o + 32), load16(acc, o + 48)
                b0, b1, b2, b3 = load16(acc, p), load16(acc, p + 16), load16(acc, p + 32), load16(acc, p + 48)
                e0, e1, e2, e3 = load16(acc, q), load16(acc, q + 16), load16(acc, q + 32), load16(acc, q + 48)
                for c in range(CELLS):
                    va, vb_, vc = splat16(vsv[r, c]), splat16(vsv[r + 1, c]), splat16(vsv[r + 2, c])
                    v = c * D
                    v0, v1, v2, v3 = load16(vb, v), load16(vb, v + 16), load16(vb, v + 32), load16(vb, v + 48)
                    a0, a1 = rounding(fma16(v0, va, a0)), rounding(fma16(v1, va, a1))
                    a2, a3 = rounding(fma16(v2, va, a2)), rounding(fma16(v3, va, a3))
                    b0, b1 = rounding(fma16(v0, vb_, b0)), rounding(fma16(v1, vb_, b1))
                    b2, b3 = rounding(fma16(v2, vb_, b2)), rounding(fma16(v3, vb_, b3))
                    e0, e1 = rounding(fma16(v0, vc, e0)), rounding(fma16(v1, vc, e1))
                    e2, e3 = rounding(fma16(v2, vc, e2)), rounding(fma16(v3, vc, e3))
                for k, x in enumerate((a0, a1, a2, a3)):
                    store16(acc, o + 16 * k, x)
                for k, x in enumerate((b0, b1, b2, b3)):
                    store16(acc, p + 16 * k, x)
                for k, x in enumerate((e0, e1, e2, e3)):
                    store16(acc, q + 16 * k, x)

    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    vb = (rng.standard_normal((CELLS, D)) * 3).astype(np.float16).astype(np.float32)  # V: F16 values
    vsv = rng.random((ROWS, CELLS)).astype(np.float32)  # soft-max weights in [0, 1)
    variants = {"round trip": _one_row(round_f16_16), "two rows": _two_rows, "three rows": _three_rows(round_f16_16),
                "three emul.": _three_rows(_round_f16_emulated),
                "emulated": _one_row(_round_f16_emulated), "no rounding": _one_row(_no_rounding)}
    bits, times = {}, {}
    for name, f in variants.items():
        acc = np.zeros(ROWS * D, np.float32)
        f(1, vb, vsv, acc)  # compile
        acc[:] = 0
        f(3, vb, vsv, acc)
        bits[name] = acc.view(np.uint32).copy()
        best = float("inf")
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            f(200, vb, vsv, acc)
            best = min(best, time.perf_counter() - t0)
        times[name] = best / 200 / (ROWS * CELLS) * 1e9
    print(f"# {time.strftime('%H:%M', time.gmtime())} UTC, F16 accumulator of D = {D}, {ROWS} rows x {CELLS} cells, "
          f"one thread, ns per (row, cell), best of {args.rounds}")
    for name, ns in times.items():
        same = "" if name == "no rounding" else (
            "  same bits" if np.array_equal(bits[name], bits["round trip"]) else "  DIFFERENT bits")
        print(f"{name:12s} {ns:7.3f}  ({ns / times['round trip']:.2f}x){same}")


if __name__ == "__main__":
    main()
