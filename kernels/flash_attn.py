"""Flash attention (ggml FLASH_ATTN_EXT) as ggml's CPU backend computes it, one query row at a time.

ggml-cpu/ops.cpp `ggml_compute_forward_flash_attn_ext_f16_one_chunk`, the path llama.cpp takes for a batch of
fewer than `ggml_fa_tile_config::Q` (64) query rows whose KV view holds fewer than 512 cells, F16 K and V
(llama.cpp's default cache; with an F32 cache its graph casts the K and V views to F16 first). Per query row
(token t, head h, KV head h // (H / Hkv)):

    Q_q = fp16(q)                                        K's vec_dot_type
    S = 0, M = -inf, VKQ = 0 (fp16 accumulator)
    for every KV cell c the mask does not hide:
        s = ggml_vec_dot_f16(K[c], Q_q) * scale          (+ mask value 0)
        if s > M:  M, ms = s, expf(M_old - M);  VKQ = fp16(VKQ * ms)         ggml_vec_scale_f16
        else:      vs = expf(s - M)                      (ms = 1, or vs = 1 on a new maximum)
        VKQ = fp16(fma(V[c], vs, VKQ))                   ggml_vec_mad_f16 (AVX512: _mm512_fmadd_ps)
        S = fma(S, ms, vs)                               (GCC contracts `S = S*ms + vs`)
    out = float(VKQ) * (S == 0 ? 0 : 1/S)                ggml_vec_scale_f32

Every row is independent of the others and of the thread count, so a prompt in any batch split equals
token-by-token decoding. Not ported yet: the tiled path (batches of >= 64 rows) and the split-KV path (one
token, >= 512 cells, chunked by thread count) that llama.cpp takes beyond those sizes.
"""

from __future__ import annotations

import kernels.config  # noqa: F401  (NUMBA_CACHE_DIR before numba)

import math

import numpy as np
from numba import prange

from kernels.attention import _dot_lanes
from kernels.fp16 import f16_bits_to_f32_hw, f32_to_f16_bits_hw, fma_f32, jit, pjit, round_f16_scalar
from kernels.quants.floats import _reduce_add16

FA_TILE_Q = 64  # ggml_fa_tile_config::Q: batches with this many query rows take ggml's tiled kernel
FA_SPLIT_KV_MIN = 512  # one query row over a KV view of this many cells takes ggml's split-KV kernel


@jit
def _row(q, k16, v16, n_kv, kv_pos, qp, scale, t, h, g, qq, vkq, out):
    """One query row: q (T, H, D) f32, k16 / v16 (n_kv, Hkv, D) F16 bits, out (T, H*D)."""
    D = q.shape[2]
    Hkv = k16.shape[1]
    for d in range(D):
        qq[d] = round_f16_scalar(q[t, h, d])
        vkq[d] = 0
    S = np.float32(0.0)
    M = np.float32(-np.inf)
    for c in range(n_kv):
        p = kv_pos[c]
        if p < 0 or p > qp:  # masked: -inf, skipped
            continue
        s = _reduce_add16(_dot_lanes(k16, (c * Hkv + g) * D, qq, 0, D))
        s = np.float32(np.float32(s * scale) + np.float32(0.0))
        ms = np.float32(1.0)
        vs = np.float32(1.0)
        if s > M:
            m_old = M
            M = s
            ms = np.float32(math.exp(np.float32(m_old - M)))
            for d in range(D):
                vkq[d] = f32_to_f16_bits_hw(np.float32(f16_bits_to_f32_hw(vkq[d]) * ms))
        else:
            vs = np.float32(math.exp(np.float32(s - M)))
        for d in range(D):
            vkq[d] = f32_to_f16_bits_hw(fma_f32(f16_bits_to_f32_hw(v16[c, g, d]), vs, f16_bits_to_f32_hw(vkq[d])))
        S = fma_f32(S, ms, vs)
    s_inv = np.float32(0.0) if S == 0.0 else np.float32(np.float32(1.0) / S)
    for d in range(D):
        out[t, h * D + d] = np.float32(f16_bits_to_f32_hw(vkq[d]) * s_inv)


@pjit
def flash_attn_ext(q, k16, v16, n_kv, kv_pos, q_pos, scale, out):
    """out (T, H*D) = FLASH_ATTN_EXT of q (T, H, D) f32 over the first n_kv cells of k16 / v16 (n_ctx, Hkv, D)
    F16 bits; kv_pos (n_kv,) int32 position of each cell (-1: empty), q_pos (T,) int32; causal mask; head_dim
    a multiple of 64 (ggml_vec_dot_f16's 4 x 16 lanes)."""
    T, H, D = q.shape
    r = H // k16.shape[1]
    for item in prange(T * H):
        t = item // H
        h = item % H
        qq = np.empty(D, np.float32)
        vkq = np.empty(D, np.uint16)
        _row(q, k16, v16, n_kv, kv_pos, q_pos[t], np.float32(scale), t, h, h // r, qq, vkq, out)
