"""The Q4_K single-token dot in its two forms side by side in one process (alternating calls, best of 60):
q4_k.row_dot_x86 (ymm, the AVX2 form) and q4_k_gemm512.row_dot_z (zmm, what AVX512BW machines run), on two of
Qwen2.5-Coder-1.5B's matrices (1.4 MB: in L2 per core; 8 MB: in L3), 1 and 2 threads. GB/s of weights. Without
AVX512BW, row_dot_x86 alone (row_dot_z does not compile there).

    python benchmarks/q4k_rowdot.py        (needs `make models-large`)
"""

from __future__ import annotations

from _common import REPO  # first: the repository root on the import path

import time

import numpy as np
from numba import prange

from kernels.config import pjit, set_num_threads
from kernels.gguf import GGUFReader
from kernels.matmul import Weight
from kernels.quants import kquants, q4_k
from kernels.quants._simd512 import HAS_AVX512
from kernels.quants.q4_k_gemm512 import row_dot_z
from kernels.quants.vec_dot_type import quantize_activations


@pjit
def _gemv_x86(w, qp, yd, bs32, out):
    for n in prange(w.shape[0]):
        out[0, n] = q4_k.row_dot_x86(w, n, qp, 0, yd, bs32, False, kquants.GEMV_PF)


@pjit
def _gemv_z(w, qp, yd, bs32, out):
    for n in prange(w.shape[0]):
        out[0, n] = row_dot_z(w, n, qp, 0, yd, bs32, kquants.GEMV_PF)


def main() -> None:
    r = GGUFReader(REPO / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    for name in ("blk.0.attn_q.weight", "blk.0.ffn_up.weight"):
        t = r.tensor(name)
        w = Weight(t.ggml_type, t.data, t.ne[0], t.ne[1], name=t.name)
        x = np.random.default_rng(0).standard_normal((1, w.ne0)).astype(np.float32)
        k = kquants.prepare(quantize_activations(w.fmt.vec_dot_type, x), 0)
        packed = w.packed[0]
        outs = [np.empty((1, w.ne1), np.float32) for _ in range(2)]
        forms = (_gemv_x86, _gemv_z) if HAS_AVX512 else (_gemv_x86,)
        for nt in (1, 2):
            set_num_threads(nt)
            best = [float("inf")] * len(forms)
            for _ in range(60):
                for i, f in enumerate(forms):
                    t0 = time.perf_counter()
                    f(packed, k.qp, k.d, k.bs32, outs[i])
                    best[i] = min(best[i], time.perf_counter() - t0)
            line = (f"{name} {w.ne0}x{w.ne1} ({packed.nbytes / 1e6:.1f} MB), {nt} thread(s): row_dot_x86 "
                    f"{packed.nbytes / best[0] / 1e9:.1f} GB/s")
            if HAS_AVX512:
                line += (f", row_dot_z {packed.nbytes / best[1] / 1e9:.1f} GB/s, "
                         f"{'same bits' if np.array_equal(outs[0], outs[1]) else 'DIFFERENT bits'}")
            print(line)

if __name__ == "__main__":
    main()
