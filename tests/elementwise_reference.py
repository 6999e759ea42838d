"""Slow, obvious references for the non-matmul kernels (norm, rope, activations, soft-max, attention).

Written independently of kernels/: numpy float32 scalar/array arithmetic (IEEE, one rounding per op),
glibc's float functions called through ctypes (expf, cosf, sinf, logf, powf: what ggml calls), and an
exact float32 fused multiply-add built from float64 arithmetic (TwoSum + round-to-odd; no LLVM fma).
Also: ggml's dot-product summation orders as lane arrays, and a float32-weights forward pass of the tiny
fixture models built from these references alone (`TinyF32Forward`, weights read by gguf-py), to compare
with llama.cpp's eval-callback logs and greedy logits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

import numpy as np

from conftest import FIXTURES, TINY_MODELS

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
for _name in ("expf", "cosf", "sinf", "logf"):
    getattr(_libm, _name).restype = ctypes.c_float
    getattr(_libm, _name).argtypes = [ctypes.c_float]
_libm.powf.restype = ctypes.c_float
_libm.powf.argtypes = [ctypes.c_float, ctypes.c_float]

f32 = np.float32


def libm(fn: str, x) -> np.ndarray:
    """Element-wise glibc float function (expf, cosf, sinf, logf) -> float32 array."""
    f = getattr(_libm, fn)
    x = np.asarray(x, np.float32)
    return np.array([f(float(v)) for v in x.reshape(-1)], np.float32).reshape(x.shape)


def powf(a, b) -> np.float32:
    return f32(_libm.powf(float(a), float(b)))


def fma32(a, b, c) -> np.ndarray:
    """Exact float32 fma(a, b, c) (finite inputs): a*b is exact in float64, TwoSum gives the exact error of
    the float64 sum, rounding that sum to odd and then to float32 rounds correctly (53 >= 24 + 2 bits)."""
    a, b, c = (np.asarray(v, np.float32).astype(np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):  # inf / nan operands give p + c's IEEE result
        p = a * b
        s = np.asarray(p + c, np.float64)
        bb = s - p
        err = (p - (s - bb)) + (c - bb)
        even = (s.view(np.int64) & 1) == 0
        fix = np.isfinite(err) & (err != 0) & even
        toward = np.where(err > 0, np.inf, -np.inf)
        s = np.where(fix, np.nextafter(s, toward), s)
        return s.astype(np.float32)


# --------------------------------------------------------------------------------------------------
# activations


_VEXPF = {k: f32(float.fromhex(v)) for k, v in dict(
    r="0x1.8p23", log2e="0x1.715476p+0", ln2_hi="0x1.62e4p-1", ln2_lo="0x1.7f7d1cp-20",
    c5="0x1.0e4020p-7", c4="0x1.573e2ep-5", c3="0x1.555e66p-3", c2="0x1.fffdb6p-2", c1="0x1.ffffecp-1").items()}


def v_expf_ref(x) -> np.ndarray:
    """ggml_v_expf (vec.h, AVX512 variant) lane by lane, in numpy."""
    k = _VEXPF
    x = np.asarray(x, np.float32)
    z = fma32(x, k["log2e"], k["r"])
    n = (z - k["r"]).astype(np.float32)
    b = fma32(-n, k["ln2_lo"], fma32(-n, k["ln2_hi"], x))
    u = (b * b).astype(np.float32)
    j = fma32(fma32(fma32(k["c5"], b, k["c4"]), u, fma32(k["c3"], b, k["c2"])), u, fma32(k["c1"], b, f32(1)))
    big = np.abs(n) > 192
    n_safe = np.where(big, 0, n).astype(np.int64)
    with np.errstate(over="ignore"):
        res = np.ldexp(j.astype(np.float64), n_safe).astype(np.float32)  # scalef: exact scaling, one rounding
    return np.where(big, np.where(n <= 0, f32(0), f32(np.inf)), res).astype(np.float32)


def hsum16_ref(v) -> np.float32:
    """_mm512_reduce_add_ps: (8 + 8), (4 + 4), (2 + 2), (1 + 1)."""
    v = np.asarray(v, np.float32)
    v = v[..., :8] + v[..., 8:]
    v = v[..., :4] + v[..., 4:]
    v = v[..., :2] + v[..., 2:]
    return (v[..., 0] + v[..., 1]).astype(np.float32)


def silu_ref(x, vec: bool) -> np.ndarray:
    x = np.asarray(x, np.float32)
    e = v_expf_ref(f32(0) - x) if vec else libm("expf", -x)
    return (x / (f32(1) + e)).astype(np.float32)


def swiglu_ref(gate, up, vec: bool = True) -> np.ndarray:
    """ggml_vec_swiglu_f32 per row: 16-chunks via ggml_v_silu when vec, the tail (and all when not vec)
    via x / (1 + expf(-x))."""
    gate = np.asarray(gate, np.float32)
    n = gate.shape[-1]
    nv = (n // 16) * 16 if vec else 0
    out = np.empty_like(gate)
    out[..., :nv] = silu_ref(gate[..., :nv], True) * up[..., :nv]
    out[..., nv:] = silu_ref(gate[..., nv:], False) * up[..., nv:]
    return out


def soft_max_row_ref(row, vec: bool = True) -> np.ndarray:
    """ggml_compute_forward_soft_max_f32 after scale+mask for one row (float32 array)."""
    row = np.asarray(row, np.float32)
    mx = f32(-np.inf)
    for v in row:
        mx = mx if mx > v else v
    n = row.shape[0]
    y = np.empty(n, np.float32)
    s = 0.0
    i = 0
    if vec:
        while i + 15 < n:
            y[i:i + 16] = v_expf_ref((row[i:i + 16] - mx).astype(np.float32))
            s += float(hsum16_ref(y[i:i + 16]))
            i += 16
    for k in range(i, n):
        y[k] = libm("expf", f32(row[k] - mx))
        s += float(y[k])
    inv = f32(1.0 / s)
    return (y * inv).astype(np.float32)


def soft_max_ext_ref(x, mask, scale, vec: bool = True) -> np.ndarray:
    """x: (H, R, n); mask: (>= R, n) or None."""
    x = np.asarray(x, np.float32)
    out = np.empty_like(x)
    for h in range(x.shape[0]):
        for r in range(x.shape[1]):
            w = (x[h, r] * f32(scale)).astype(np.float32)
            if mask is not None:
                w = (w + mask[r]).astype(np.float32)
            out[h, r] = soft_max_row_ref(w, vec)
    return out


# --------------------------------------------------------------------------------------------------
# norm


def rms_norm_ref(x, eps) -> np.ndarray:
    """ggml rms_norm: float32 squares widened, summed in double in index order, mean rounded to float."""
    x = np.asarray(x, np.float32)
    out = np.empty_like(x)
    for t in range(x.shape[0]):
        sq = (x[t] * x[t]).astype(np.float32).astype(np.float64)
        s = np.add.accumulate(sq)[-1]  # sequential, unlike np.sum's pairwise summation
        mean = f32(s / x.shape[1])
        scale = f32(1) / f32(np.sqrt(np.float64(mean + f32(eps))))
        out[t] = x[t] * scale
    return out


# --------------------------------------------------------------------------------------------------
# rope


def corr_dims_ref(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow):
    def dim(n_rot):
        d = f32(f32(n_rot) * f32(2)) * f32(np.pi)
        return f32(f32(n_dims) * libm("logf", f32(n_ctx_orig) / d)) / f32(f32(2) * libm("logf", f32(freq_base)))
    start = np.floor(dim(beta_fast))
    end = np.ceil(dim(beta_slow))
    return float(max(0.0, start)), float(min(n_dims - 1, end))


def rope_ref_f32(x, pos, n_dims, neox, freq_base, freq_scale, ext_factor, attn_factor, corr_dims, freq_factors,
                 contract=True) -> np.ndarray:
    """ggml_compute_forward_rope_f32 step by step in float32 (glibc cosf/sinf/logf/powf); `contract`
    fuses a*b+c*d as fma(a, b, c*d) like GCC/clang -ffp-contract."""
    x = np.asarray(x, np.float32)
    fs, ef, af = f32(freq_scale), f32(ext_factor), f32(attn_factor)
    c0, c1 = f32(corr_dims[0]), f32(corr_dims[1])
    theta_scale = powf(f32(freq_base), f32(-2.0) / f32(n_dims))
    out = x.copy()
    for t in range(x.shape[0]):
        theta = f32(pos[t])
        cos_sin = []
        for i0 in range(0, n_dims, 2):
            te = theta / f32(freq_factors[i0 // 2]) if freq_factors is not None else theta
            ti = fs * te
            th, ms = ti, af
            if ef != 0:
                y = (f32(i0 // 2) - c0) / max(f32(0.001), f32(c1 - c0))
                ramp = f32(1) - min(f32(1), max(f32(0), f32(y)))
                rm = f32(ramp * ef)
                lg = libm("logf", f32(1) / fs)
                if contract:
                    th = fma32(ti, f32(1) - rm, f32(te * rm))[()]
                    ms = f32(ms * fma32(f32(0.1), lg, f32(1))[()])
                else:
                    th = f32(f32(ti * (f32(1) - rm)) + f32(te * rm))
                    ms = f32(ms * f32(f32(1) + f32(f32(0.1) * lg)))
            cos_sin.append((f32(libm("cosf", th) * ms), f32(libm("sinf", th) * ms)))
            theta = f32(theta * theta_scale)
        c = np.array([cs[0] for cs in cos_sin], np.float32)  # (n_dims/2,) per pair
        s = np.array([cs[1] for cs in cos_sin], np.float32)
        i = np.arange(n_dims // 2)
        a, b = (i, i + n_dims // 2) if neox else (2 * i, 2 * i + 1)
        x0, x1 = x[t][:, a], x[t][:, b]  # (n_head, n_dims/2): every head rotated by the same pairs
        if contract:
            out[t][:, a] = fma32(x0, c, -(x1 * s))
            out[t][:, b] = fma32(x0, s, x1 * c)
        else:
            out[t][:, a] = (x0 * c) - (x1 * s)
            out[t][:, b] = (x0 * s) + (x1 * c)
    return out


def rope_ref_f64(x, pos, n_dims, neox, freq_base, freq_scale, ext_factor, attn_factor, corr_dims,
                 freq_factors) -> np.ndarray:
    """RoPE / YaRN in float64 from the formulas (theta_i = p * base^(-2i/n_dims) / ff_i)."""
    x = np.asarray(x, np.float64)
    i = np.arange(n_dims // 2)
    theta_extrap = np.asarray(pos, np.float64)[:, None] * float(freq_base) ** (-2.0 * i / n_dims)[None, :]
    if freq_factors is not None:
        theta_extrap = theta_extrap / np.asarray(freq_factors[: n_dims // 2], np.float64)[None, :]
    theta = freq_scale * theta_extrap
    mscale = attn_factor
    if ext_factor != 0:
        y = (i - corr_dims[0]) / max(0.001, corr_dims[1] - corr_dims[0])
        ramp = (1 - np.clip(y, 0, 1)) * ext_factor
        theta = theta * (1 - ramp) + theta_extrap * ramp
        mscale = attn_factor * (1 + 0.1 * np.log(1 / freq_scale))
    c = (np.cos(theta) * mscale)[:, None, :]
    s = (np.sin(theta) * mscale)[:, None, :]
    out = x.copy()
    a, b = (i, i + n_dims // 2) if neox else (2 * i, 2 * i + 1)
    x0, x1 = x[:, :, a], x[:, :, b]
    out[:, :, a] = x0 * c - x1 * s
    out[:, :, b] = x0 * s + x1 * c
    return out


# --------------------------------------------------------------------------------------------------
# dot products in ggml's AVX512 orders (vectorised over leading dims of x / y)


def dot_tinyblas_ref(x, y) -> np.ndarray:
    """llamafile tinyBLAS: lane l = fma chain over x[..., 16m + l] * y[..., 16m + l]; then reduce_add."""
    x, y = np.broadcast_arrays(np.asarray(x, np.float32), np.asarray(y, np.float32))
    k = x.shape[-1]
    assert k % 16 == 0
    acc = np.zeros(x.shape[:-1] + (16,), np.float32)
    for m in range(0, k, 16):
        acc = fma32(x[..., m:m + 16], y[..., m:m + 16], acc)
    return hsum16_ref(acc)


def dot_vec_ref(x, y, f16_tail: bool) -> np.ndarray:
    """ggml_vec_dot_f32 / _f16 (AVX512): 4 accumulators x 16 lanes over steps of 64, acc0+acc2, acc1+acc3,
    then +, reduce_add; leftovers in double (f16) or added in float (f32, as GCC 12 compiles it)."""
    x, y = np.broadcast_arrays(np.asarray(x, np.float32), np.asarray(y, np.float32))
    k = x.shape[-1]
    npart = k - k % 64
    acc = np.zeros(x.shape[:-1] + (64,), np.float32)
    for i in range(0, npart, 64):
        acc = fma32(x[..., i:i + 64], y[..., i:i + 64], acc)
    a0 = acc[..., 0:16] + acc[..., 32:48]
    a1 = acc[..., 16:32] + acc[..., 48:64]
    s = hsum16_ref((a0 + a1).astype(np.float32))
    if f16_tail:
        sd = s.astype(np.float64)
        for i in range(npart, k):
            sd = sd + (x[..., i] * y[..., i]).astype(np.float32).astype(np.float64)
        return sd.astype(np.float32)
    n8 = npart + (k - npart) // 8 * 8  # GCC 12: whole 8-blocks of the tail unfused, the rest FMA'd
    for i in range(npart, k):
        if i < n8:
            s = (s + (x[..., i] * y[..., i]).astype(np.float32)).astype(np.float32)
        else:
            s = fma32(x[..., i], y[..., i], s)
    return np.asarray(s, np.float32)


def matmul_f32_ref(w, x) -> np.ndarray:
    """ggml mul_mat of F32 weights w (n_out, n_in) with F32 activations x (T, n_in) -> (T, n_out), as the
    fixtures' build runs it: llamafile tinyBLAS for T >= 2, ggml_vec_dot_f32 for one column."""
    w = np.asarray(w, np.float32)
    x = np.asarray(x, np.float32)
    if x.shape[0] >= 2 and x.shape[1] % 16 == 0 and w.shape[0] % 4 == 0:
        return np.stack([dot_tinyblas_ref(w, x[t][None, :]) for t in range(x.shape[0])])
    return np.stack([dot_vec_ref(w, x[t][None, :], False) for t in range(x.shape[0])])


# --------------------------------------------------------------------------------------------------
# attention


def f16_round(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def attention_ref(q, k_cells, v_cells, n_kv, kv_pos, q_pos, kq_scale, n_kv_pad, f16):
    """llama.cpp's non-FA attention in float32, the obvious way: q (T, H, D); k_cells, v_cells:
    (n_kv_pad, G, D) float32 values of the cache cells (already F16-rounded for an F16 cache).
    Returns (out (T, H*D), kq (H, T, n_kv_pad), kq_soft_max (H, T, n_kv_pad))."""
    T, H, D = q.shape
    G = k_cells.shape[1]
    gqa = H // G
    # llamafile_sgemm takes a batch (T >= 2) when k % 16 == 0 and m % 4 == 0 (m = rows of the weight side)
    kq_gemm = T >= 2 and f16 and D % 16 == 0 and n_kv_pad % 4 == 0
    kqv_gemm = T >= 2 and n_kv_pad % 16 == 0 and D % 4 == 0
    kq = np.zeros((H, T, n_kv_pad), np.float32)
    sm = np.zeros((H, T, n_kv_pad), np.float32)
    out = np.zeros((T, H * D), np.float32)
    for h in range(H):
        g = h // gqa
        for t in range(T):
            qv = f16_round(q[t, h]) if f16 else q[t, h]
            if kq_gemm:
                kq[h, t] = dot_tinyblas_ref(k_cells[:, g, :], qv[None, :])
            else:
                kq[h, t] = dot_vec_ref(k_cells[:, g, :], qv[None, :], f16)
            masked = (np.arange(n_kv_pad) >= n_kv) | (kv_pos[:n_kv_pad] < 0) | (kv_pos[:n_kv_pad] > q_pos[t])
            w = (kq[h, t] * f32(kq_scale)).astype(np.float32)
            w = np.where(masked, f32(-np.inf), w + f32(0)).astype(np.float32)
            sm[h, t] = soft_max_row_ref(w, True)
            p = f16_round(sm[h, t]) if f16 else sm[h, t]
            vt = v_cells[:, g, :].T  # (D, n_kv_pad)
            if kqv_gemm:
                out[t, h * D:(h + 1) * D] = dot_tinyblas_ref(vt, p[None, :])
            else:
                out[t, h * D:(h + 1) * D] = dot_vec_ref(vt, p[None, :], f16)
    return out, kq, sm


# --------------------------------------------------------------------------------------------------
# the tiny fixture models with F32 weights, end to end


def n_kv_padded_ref(n_kv, n_ctx, pad=256) -> int:
    """The KV cells llama.cpp's non-FA graph attends over (llama-kv-cache.cpp, get_n_kv):
    min(n_ctx, max(pad, GGML_PAD(n_kv, pad)))."""
    return min(n_ctx, max(pad, -(-n_kv // pad) * pad))


class TinyF32Forward:
    """Forward pass of a tiny F32 fixture model (llama / qwen2 / mistral3) built from this file's numpy
    references only (no kernels/ code: GGUF read by gguf-py), recording named nodes like llama-eval-callback.

    Every step is float32 in ggml's operation order (rms_norm_ref, rope_ref_f32, attention_ref, swiglu_ref,
    matmul_f32_ref, and plain float32 adds / multiplies for ADD / MUL), so its nodes can be held to
    llama.cpp's logged sums and greedy logits bit for bit. `vec_swiglu` / `rope_contract` select the
    variants to compare: swiglu with AVX512 ggml_v_expf or libm expf, rope with or without FMA contraction.
    The KV cache keeps float32 cell values (F16-rounded for an F16 cache): `k_cells[il]`, `v_cells[il]`
    (n_ctx, n_head_kv, head_dim)."""

    def __init__(self, path: Path, kv_f16: bool, n_ctx: int = 256, *, vec_swiglu=True, rope_contract=True):
        from gguf import GGMLQuantizationType, GGUFReader

        r = GGUFReader(path)

        def get(key, default=None):
            field = r.get_field(key)
            return default if field is None else field.contents()

        self.arch = arch = get("general.architecture")
        g = lambda k, d=None: get(f"{arch}.{k}", d)  # noqa: E731
        self.n_embd = g("embedding_length")
        self.n_layer = g("block_count")
        self.n_head = g("attention.head_count")
        self.n_head_kv = g("attention.head_count_kv")
        self.hd = self.n_embd // self.n_head
        self.n_rot = g("rope.dimension_count", self.hd)
        self.eps = g("attention.layer_norm_rms_epsilon")
        self.freq_base = g("rope.freq_base", 10000.0)
        self.neox = arch == "qwen2"
        self.vec_swiglu = vec_swiglu
        self.rope_contract = rope_contract

        tensors = {ti.name: ti for ti in r.tensors}

        def t(name):
            ti = tensors.get(name)
            if ti is None:
                return None
            assert ti.tensor_type == GGMLQuantizationType.F32, f"{name}: F32 weights only"
            return np.asarray(ti.data)  # numpy order: (ne[1], ne[0]) for a matrix, a view of the mmap

        self.t = t
        self.freq_factors = t("rope_freqs.weight")
        self.freq_scale, self.ext_factor, self.attn_factor = 1.0, 0.0, 1.0
        self.n_ctx_orig = g("context_length")
        self.beta_fast, self.beta_slow = 32.0, 1.0
        self.temp_scale = g("attention.temperature_scale", 0.0)
        if g("rope.scaling.type") == "yarn":
            factor = g("rope.scaling.factor")
            self.freq_scale = float(f32(1.0) / f32(factor))
            self.n_ctx_orig = g("rope.scaling.original_context_length")
            self.beta_fast = g("rope.scaling.yarn_beta_fast")
            self.beta_slow = g("rope.scaling.yarn_beta_slow")
            self.ext_factor = 1.0
            log_mul = f32(g("rope.scaling.yarn_log_multiplier"))
            fct = f32(1.0) / f32(self.freq_scale)
            lg = libm("logf", fct)
            mscale = lambda m: fma32(f32(f32(0.1) * f32(m)), lg, f32(1))  # noqa: E731  (0.1f*m*logf(s) + 1.0f)
            af = f32(mscale(1.0) / mscale(log_mul))
            af = f32(af * f32(f32(1) / fma32(f32(0.1), lg, f32(1))))
            self.attn_factor = float(af)
        self.corr_dims = corr_dims_ref(self.n_rot, self.n_ctx_orig, self.freq_base, self.beta_fast, self.beta_slow)
        # rope's arguments after (x, pos), in the order of rope_ref_f32 and kernels.rope.rope (tests run the
        # kernel on this model's inputs)
        self.rope_args = (self.n_rot, self.neox, self.freq_base, self.freq_scale, self.ext_factor, self.attn_factor,
                          self.corr_dims, self.freq_factors)
        self.kv_f16 = kv_f16
        self.n_ctx = n_ctx
        G = self.n_head_kv
        self.k_cells = [np.zeros((n_ctx, G, self.hd), np.float32) for _ in range(self.n_layer)]
        self.v_cells = [np.zeros((n_ctx, G, self.hd), np.float32) for _ in range(self.n_layer)]
        self.kv_pos = np.full(n_ctx, -1, np.int32)
        self.n_used = 0
        self.trace: dict[str, list[np.ndarray]] = {}

    def _rec(self, name, value):
        self.trace.setdefault(name, []).append(np.array(value, np.float32, copy=True))

    def _rms_norm_mul(self, x, w) -> np.ndarray:
        """RMS_NORM then MUL by the norm weight (one float32 multiply each)."""
        return (rms_norm_ref(x, self.eps) * w).astype(np.float32)

    def decode(self, ids) -> np.ndarray:
        """Evaluate `ids` as one batch at the next positions; returns the last token's logits."""
        T = len(ids)
        H, G, D = self.n_head, self.n_head_kv, self.hd
        pos = np.arange(self.n_used, self.n_used + T, dtype=np.int32)
        cells = pos.copy()
        self.kv_pos[cells] = pos
        self.n_used += T
        t = self.t
        cache_round = f16_round if self.kv_f16 else (lambda a: a)
        x = t("token_embd.weight")[np.asarray(ids)].copy()
        self._rec("embd", x)
        for il in range(self.n_layer):
            p = f"blk.{il}."
            self._rec(f"norm-{il}", rms_norm_ref(x, self.eps))
            cur = self._rms_norm_mul(x, t(p + "attn_norm.weight"))
            self._rec(f"attn_norm-{il}", cur)
            qkv = []
            for name in ("q", "k", "v"):
                y = matmul_f32_ref(t(p + f"attn_{name}.weight"), cur)
                b = t(p + f"attn_{name}.bias")
                if b is not None:
                    y = (y + b).astype(np.float32)
                qkv.append(y)
            q = qkv[0].reshape(T, H, D)
            k = qkv[1].reshape(T, G, D)
            v = qkv[2].reshape(T, G, D)
            self._rec(f"Qcur-{il}", q)
            self._rec(f"Kcur-{il}", k)
            qr = rope_ref_f32(q, pos, *self.rope_args, contract=self.rope_contract)
            kr = rope_ref_f32(k, pos, *self.rope_args, contract=self.rope_contract)
            self._rec(f"Qcur-{il}", qr)
            self._rec(f"Kcur-{il}", kr)
            if self.temp_scale != 0.0:
                floor_scale = self.n_ctx_orig
                s = np.log(np.floor(pos.astype(np.float32) / f32(floor_scale)).astype(np.float64) + 1.0)
                s = (s * float(f32(self.temp_scale)) + 1.0).astype(np.float32)
                qr = (qr * s[:, None, None]).astype(np.float32)
                self._rec(f"Qcur_attn_temp_scaled-{il}", qr)
            self.k_cells[il][cells] = cache_round(kr)  # SET_ROWS: F16 conversion rounds to nearest even
            self.v_cells[il][cells] = cache_round(v)
            n_kv = self.n_used
            n_pad = n_kv_padded_ref(n_kv, self.n_ctx)
            kq_scale = float(f32(1.0) / f32(np.sqrt(np.float32(D))))
            attn, kq, sm = attention_ref(qr, self.k_cells[il][:n_pad], self.v_cells[il][:n_pad], n_kv, self.kv_pos,
                                         pos, kq_scale, n_pad, self.kv_f16)
            self._rec(f"kq-{il}", kq)
            self._rec(f"kq_soft_max-{il}", sm)
            self._rec(f"kqv_out-{il}", attn)
            a = matmul_f32_ref(t(p + "attn_output.weight"), attn)
            self._rec(f"attn_out-{il}", a)
            inp = x
            if il == self.n_layer - 1:  # GET_ROWS(out_ids): only the last token goes on
                a = a[-1:]
                inp = x[-1:]
            ffn_inp = (a + inp).astype(np.float32)
            self._rec(f"ffn_inp-{il}", ffn_inp)
            cur = self._rms_norm_mul(ffn_inp, t(p + "ffn_norm.weight"))
            self._rec(f"ffn_norm-{il}", cur)
            gate = matmul_f32_ref(t(p + "ffn_gate.weight"), cur)
            up = matmul_f32_ref(t(p + "ffn_up.weight"), cur)
            self._rec(f"ffn_gate-{il}", gate)
            self._rec(f"ffn_up-{il}", up)
            sw = swiglu_ref(gate, up, vec=self.vec_swiglu)
            self._rec(f"ffn_swiglu-{il}", sw)
            down = matmul_f32_ref(t(p + "ffn_down.weight"), sw)
            x = (down + ffn_inp).astype(np.float32)
            self._rec(f"l_out-{il}", x)
        cur = self._rms_norm_mul(x, t("output_norm.weight"))
        out_w = t("output.weight")
        if out_w is None:
            out_w = t("token_embd.weight")
        logits = matmul_f32_ref(out_w, cur)[0]
        self._rec("result_output", logits)
        return logits


# --------------------------------------------------------------------------------------------------
# fixture runs shared by the test files (one prompt decode per model / cache type per session)

TINY_F32 = {arch: TINY_MODELS / f"tiny-{arch}-F32.gguf" for arch in ("llama", "qwen2", "mistral3")}
_RUNS: dict = {}


def evalcb_log(arch: str, kv: str) -> Path:
    return FIXTURES / "tiny" / "evalcb" / f"tiny-{arch}-F32__pub__{kv}.log"


def greedy_json(arch: str, kv: str) -> Path:
    return FIXTURES / "tiny" / "greedy" / f"tiny-{arch}-F32__pub{'__kvf32' if kv == 'kvf32' else ''}.json"


def prompt_run(arch: str, kv: str):
    """TinyF32Forward of `arch` with an F16 (kv='kvf16') or F32 cache after decoding the fixtures' public
    prompt as one batch: (model, logits of the last prompt token). Cached per session."""
    import json

    key = (arch, kv)
    if key not in _RUNS:
        g = json.loads(greedy_json(arch, kv).read_text())
        m = TinyF32Forward(TINY_F32[arch], kv_f16=(kv == "kvf16"))
        logits = m.decode(g["prompt_ids"])
        _RUNS[key] = (m, logits, g)
    return _RUNS[key]


def log_records(arch: str, kv: str) -> dict:
    """name -> list of TensorRecord (in log order) of a fixture eval-callback log."""
    from synapse_cli.evalcb import load_trace

    out: dict = {}
    for r in load_trace(evalcb_log(arch, kv)):
        out.setdefault(r.name, []).append(r)
    return out


def check_against_record(value: np.ndarray, rec) -> tuple[bool, float]:
    """(sum printed identically with %f, max |printed value - ours|) for a full tensor vs a log record."""
    from synapse_cli.evalcb import ggml_sum, shown_block

    v = np.asarray(value, np.float32).reshape(-1)
    same_sum = f"{ggml_sum(v):.6f}" == f"{rec.sum:.6f}"
    diff = float(np.max(np.abs(shown_block(v, rec.ne) - rec.shown)))
    return same_sum, diff
