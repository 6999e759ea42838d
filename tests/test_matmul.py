"""kernels.matmul: gemv/gemm against the slow reference (bit for bit, in ggml's generic or x86 order), gemm == gemv rows,
thread-count independence, agreement with float64 dequantize(W) @ x within the activation-quantization error,
get_rows, and bad input."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import other_cpus
import quant_reference as R
from kernels.dequant import dequantize
from kernels.ggml_type import GGMLType as G
from kernels.quants._simd import HAS_AVX2
from kernels.matmul import UnsupportedTypeError, Weight, matmul, matmul_many
from kernels.order import Order
from kernels.quants.base import empty_aligned
from kernels.errors import ModelError
from kernels.gguf import GGUFReader

from conftest import REPO, TINY_MODELS

TYPES = [G.F32, G.F16, G.BF16, G.Q4_0, G.Q4_1, G.Q5_0, G.Q5_1, G.Q8_0, G.Q2_K, G.Q3_K, G.Q4_K, G.Q5_K, G.Q6_K]
# a fixture file holding each type (first tensor of that type is used)
FIXTURE_FILE = {G.F32: "tiny-llama-F32.gguf", G.F16: "tiny-llama-F16.gguf", G.BF16: "tiny-llama-BF16.gguf",
                G.Q4_0: "tiny-llama-Q4_0.gguf", G.Q4_1: "tiny-llama-Q4_1.gguf", G.Q5_0: "tiny-llama-Q5_0.gguf",
                G.Q5_1: "tiny-llama-Q5_1.gguf", G.Q8_0: "tiny-llama-Q8_0.gguf", G.Q4_K: "tiny-llama-Q4_K_M.gguf",
                G.Q6_K: "tiny-llama-Q6_K.gguf"}
ids = [t.name for t in TYPES]
# the fast kernels follow ggml's x86 AVX2 float order where it differs from the generic C (Q4_1, Q5_1, Q5_0,
# Q8_0; see kernels/quants/q32.py); the portable scalar kernels follow the generic C
FLAVOUR = "x86" if HAS_AVX2 else "generic"


def _weight(t, N, K, seed):
    raw = R.random_weight_bytes(t, N, K, np.random.default_rng(seed))
    return raw, Weight(t, raw.reshape(-1), K, N, name=f"test.{t.name}")


def _x(T, K, seed):
    return np.random.default_rng(seed).standard_normal((T, K)).astype(np.float32)


def _run(w, x):
    out = np.full((x.shape[0], w.ne1), np.nan, np.float32)
    matmul(w, x, out)
    return out


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_matches_generic_reference_bitwise(t):
    K, N, T = 512, 13, 5
    raw, w = _weight(t, N, K, 100 + int(t))
    x = _x(T, K, 200 + int(t))
    ref = R.matmul(t, raw, x, FLAVOUR)
    gemm = _run(w, x)
    assert np.array_equal(gemm, ref), f"max diff {np.abs(gemm - ref).max()}"
    for i in range(T):  # gemv path (T == 1) gives the same rows bit for bit
        assert np.array_equal(_run(w, x[i:i + 1])[0], gemm[i])


@pytest.mark.parametrize("t", [G.Q4_0, G.Q4_1, G.Q5_0, G.Q5_1, G.Q8_0], ids=lambda t: t.name)
@pytest.mark.parametrize("K", [544, 96])
def test_odd_block_count_matches_reference(t, K):
    """An odd number of 32-weight blocks per row (17, 3) and a partial last group of rows (19 = 16 + 3)."""
    N, T = 19, 3
    raw, w = _weight(t, N, K, 300 + int(t) + K)
    x = _x(T, K, 400 + int(t) + K)
    ref = R.matmul(t, raw, x, FLAVOUR)
    gemm = _run(w, x)
    assert np.array_equal(gemm, ref), f"max diff {np.abs(gemm - ref).max()}"
    for i in range(T):
        assert np.array_equal(_run(w, x[i:i + 1])[0], gemm[i])


@pytest.mark.parametrize("t", list(FIXTURE_FILE), ids=[t.name for t in FIXTURE_FILE])
def test_fixture_tensor_matches_reference(t):
    path = TINY_MODELS / FIXTURE_FILE[t]
    if not path.exists():
        pytest.skip("fixtures missing")
    tensor = next(ti for ti in GGUFReader(path).tensors if ti.ggml_type == t and len(ti.ne) == 2)
    rows = tensor.rows()[:12]
    K = tensor.ne[0]
    w = Weight(t, np.ascontiguousarray(rows).reshape(-1), K, rows.shape[0], name=tensor.name)
    x = _x(3, K, 5) * 0.5
    assert np.array_equal(_run(w, x), R.matmul(t, rows, x, FLAVOUR))


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_gemm_rows_equal_gemv_larger_shapes(t):
    """Shapes that exercise row/token tiling edges of the fast kernels (N, T not multiples of tiles; T past one
    32-token tile)."""
    K = 1024 if t not in (G.Q2_K, G.Q3_K, G.Q4_K, G.Q5_K, G.Q6_K) else 768
    N, T = 67, 45
    _, w = _weight(t, N, K, 300 + int(t))
    x = _x(T, K, 400 + int(t))
    gemm = _run(w, x)
    for i in (0, 1, 7, 33, T - 1):
        assert np.array_equal(_run(w, x[i:i + 1])[0], gemm[i]), f"token {i}"


@pytest.mark.parametrize("t", [G.Q4_K, G.Q6_K, G.Q8_0, G.Q4_1], ids=lambda t: t.name)
@pytest.mark.parametrize("N,T", [(37, 70), (16, 33)])
def test_gemm_beyond_one_token_tile_matches_reference(t, N, T):
    """T > 32 reaches the second and third 32-token tiles of the AVX512 gemm (and odd N its row tail)."""
    K = 512
    raw, w = _weight(t, N, K, 500 + int(t) + N)
    x = _x(T, K, 600 + int(t) + T)
    gemm = _run(w, x)
    assert np.array_equal(gemm, R.matmul(t, raw, x, FLAVOUR))
    for i in (0, 31, 32, T - 1):
        assert np.array_equal(_run(w, x[i:i + 1])[0], gemm[i]), f"token {i}"


@pytest.mark.parametrize("t", [G.Q4_K, G.Q6_K], ids=lambda t: t.name)
@pytest.mark.parametrize("T", [48, 64, 100, 250])
def test_token_lane_gemm_rows_equal_gemv(t, T):
    """The K-quant gemms with the tokens in the lanes (AVX512-VNNI: q4_k_gemm512._gemm_vnni in units of 32 tokens,
    q6_k._gemm_vnni in units of 48; a tile's last tokens short of a unit run 16 at a time: Q4_K at 48 and 100, Q6_K
    at 64, 100 and 250; elsewhere the other gemms): every token gets the single-token kernel's bits, past one token
    tile (250 at K = 512) and with a partial row tile (Q6_K 37 rows; Q4_K 40, llama.cpp repacking Q4_K only for
    N % 8 == 0)."""
    K, N = 512, (40 if t == G.Q4_K else 37)
    _, w = _weight(t, N, K, 900 + T)
    x = _x(T, K, 1000 + T)
    gemm = _run(w, x)
    for i in range(T):
        assert np.array_equal(_run(w, x[i:i + 1])[0], gemm[i]), f"token {i}"


@pytest.mark.parametrize("t", [G.Q4_0, G.Q4_1, G.Q5_0, G.Q5_1, G.Q8_0], ids=lambda t: t.name)
def test_gemm_in_several_passes_matches_reference(t):
    """K = 32768: the AVX512 gemm of the 32-weight formats runs 1 MB of activations a pass (32 tokens here), so
    69 tokens take passes of 32, 32 and 5 (an odd last token), and 20 rows a whole and a partial 16-row group.
    Every token against the single-token kernel (the reference at this K is minutes of Python; the single-token
    kernels meet it in the tests above)."""
    K, N, T = 32768, 20, 69
    raw, w = _weight(t, N, K, 700 + int(t))
    x = _x(T, K, 800 + int(t))
    gemm = _run(w, x)
    for i in range(T):
        assert np.array_equal(_run(w, x[i:i + 1])[0], gemm[i]), f"token {i}"
    assert np.array_equal(gemm[:1], R.matmul(t, raw, x[:1], FLAVOUR))


@pytest.mark.parametrize("order", [Order.SINGLE, Order.LLAMA], ids=["single", "llama"])
def test_q4_K_gemm_outputs_aligned_or_not(order):
    """The Q4_K gemm writes a full row tile's results a line per token, by streaming stores into 64-byte aligned
    rows (kernels.quants.base.streams_out) and by plain stores otherwise, the rest element by element: every way
    gives the reference's bits. 200 tokens: two token tiles, a last 16-token group of 8; 40 rows: a row tile of 8."""
    K, T = 512, 200
    for N in (48, 40):
        raw, w = _weight(G.Q4_K, N, K, 950 + N)
        x = _x(T, K, 960 + N)
        T4 = T - T % 4
        ref = R.matmul(G.Q4_K, raw, x, "x86-sb" if order is Order.LLAMA else "x86")
        aligned = empty_aligned((T, N), np.float32)
        shifted = empty_aligned((T * N + 4,), np.float32)[4:].reshape(T, N)  # rows 16 bytes off a line
        for out in (aligned, shifted):
            out[:] = np.nan
            matmul(w, x, out, order)
            assert np.array_equal(out[:T4], ref[:T4]), (N, out is aligned)
            assert np.array_equal(out[T4:], R.matmul(G.Q4_K, raw, x[T4:], "x86") if order is Order.LLAMA
                                  else ref[T4:]), (N, out is aligned)


@pytest.mark.skipif(not HAS_AVX2, reason="the x86 orders are those of the AVX2 kernels")
@pytest.mark.parametrize("T", [4, 9, 13, 35])
def test_q4_K_llama_batch_order(T):
    """Order.LLAMA follows x86 llama.cpp's repacked Q4_K: the first T - T % 4 tokens in
    ggml_gemm_q4_K_8x8_q8_K's per-64-weight order, the rest in ggml_gemv_q4_K_8x8_q8_K's per-block order; the
    default (batch-invariant) gives every token the gemv order."""
    K, N = 768, 24
    raw, w = _weight(G.Q4_K, N, K, 700 + T)
    x = _x(T, K, 800 + T)
    out = np.full((T, N), np.nan, np.float32)
    matmul(w, x, out, Order.LLAMA)
    T4 = T - T % 4
    assert np.array_equal(out[:T4], R.matmul(G.Q4_K, raw, x[:T4], "x86-sb"))
    assert np.array_equal(out[T4:], R.matmul(G.Q4_K, raw, x[T4:], "x86"))
    assert not np.array_equal(out[:T4], _run(w, x)[:T4])  # the orders do differ on these inputs


@pytest.mark.skipif(not HAS_AVX2, reason="the x86 orders are those of the AVX2/AVX512 kernels")
@pytest.mark.parametrize("t", [G.F32, G.F16], ids=["F32", "F16"])
def test_float_weights_llama_batch_order(t):
    """Order.LLAMA gives batches (T >= 2) llamafile tinyBLAS's order, as llama.cpp's mul_mat does for
    F32/F16 weights; single tokens keep ggml_vec_dot's."""
    K, N, T = 320, 9, 3
    raw, w = _weight(t, N, K, 900 + int(t))
    x = _x(T, K, 901 + int(t))
    out = np.full((T, N), np.nan, np.float32)
    matmul(w, x, out, Order.LLAMA)
    assert np.array_equal(out, R.matmul(t, raw, x, "x86-tb"))
    one = np.full((1, N), np.nan, np.float32)
    matmul(w, x[:1], one, Order.LLAMA)
    assert np.array_equal(one, R.matmul(t, raw, x[:1], "x86"))


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_batched_order_rows_do_not_depend_on_the_batch(t):
    """Order.BATCHED: every row in llama.cpp's order of large batches, whatever the batch: a lone token and
    batches of 3, 9 and 16 give the rows of a 16-token batch in llama.cpp's order (matmul_many too)."""
    K, N = 512, 24
    raw, w = _weight(t, N, K, 1000 + int(t))
    x = _x(16, K, 1001 + int(t))
    want = np.full((16, N), np.nan, np.float32)
    matmul(w, x, want, Order.LLAMA)
    for T in (1, 3, 9, 16):
        got = np.full((T, N), np.nan, np.float32)
        matmul(w, x[:T], got, Order.BATCHED)
        assert np.array_equal(got, want[:T]), T
    pair = [np.full((3, N), np.nan, np.float32) for _ in range(2)]
    matmul_many([w, w], x[:3], pair, Order.BATCHED)
    assert np.array_equal(pair[0], want[:3]) and np.array_equal(pair[1], want[:3])


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_close_to_float64_dequantized_product(t):
    """|y - W x| <= sum_k |W_nk| |x_k - xq_k| (+ the fp16 rounding of Q8_1's s) + float slack."""
    K, N = 1024, 16
    raw, w = _weight(t, N, K, 500 + int(t))
    x = _x(1, K, 600 + int(t))[0]
    W = dequantize(t, raw.reshape(-1), N * K).reshape(N, K).astype(np.float64)
    y = _run(w, x[None, :])[0].astype(np.float64)
    xq = R.act_values(t, x)
    bound = np.abs(W) @ np.abs(x.astype(np.float64) - xq)
    if R.VEC_DOT_KIND[t] == "Q8_1":  # m * s uses s = fp16(d * sum(q)), not d * sum(q)
        d, s, q = R.q8_blocks(R.quantize_q8_1(x), "Q8_1")
        s_err = np.abs(s.astype(np.float64) - d.astype(np.float64) * q.sum(axis=1))
        _, m, _ = (R.unpack_q4_1 if t == G.Q4_1 else R.unpack_q5_1)(raw[0])
        mins = np.stack([(R.unpack_q4_1 if t == G.Q4_1 else R.unpack_q5_1)(raw[n])[1] for n in range(N)])
        bound += np.abs(mins.astype(np.float64)) @ s_err
    scale = np.abs(W) @ np.abs(xq)
    slack = 1e-5 * scale + 1e-30
    err = np.abs(y - W @ x.astype(np.float64))
    assert (err <= bound + slack).all(), f"err {err.max()} bound {(bound + slack).min()}"
    # and the bound is tight enough to mean something: far below the size of the result terms
    assert (bound + slack < 0.05 * scale).all()


@pytest.mark.parametrize("t", TYPES[3:], ids=ids[3:])
def test_portable_scalar_path_matches_reference(t):
    """The scalar kernels used on CPUs without AVX2 (selected at import) agree with the reference too."""
    from kernels.quants import FORMATS, readonly
    from kernels.quants.vec_dot_type import quantize_activations
    import importlib
    pack, mm = importlib.import_module(f"kernels.quants.{t.name.lower()}").SCALAR
    K, N, T = 512, 5, 3
    raw, _ = _weight(t, N, K, 800 + int(t))
    x = _x(T, K, 900 + int(t))
    out = np.empty((T, N), np.float32)
    mm(pack(readonly(raw), K), quantize_activations(FORMATS[int(t)].vec_dot_type, x), out)
    assert np.array_equal(out, R.matmul(t, raw, x))


def test_dpbusd_with_and_without_vnni_is_exact():
    """The vpdpbusd intrinsic and its non-VNNI emulation both give exact 4-byte-group sums, also at the
    extremes where vpmaddubsw would saturate (255 * -128 * 2)."""
    from kernels.config import jit
    from kernels.quants import _simd as S
    if not S.HAS_AVX2:
        pytest.skip("no AVX2")

    @jit
    def both(u, s, out):
        for i in range(u.shape[0] // 32):
            a = S.dpbusd(S.splat32(7), S.load32(u, 32 * i), S.load32(s, 32 * i))
            b = S.dpbusd_emulated(S.splat32(7), S.load32(u, 32 * i), S.load32(s, 32 * i))
            S.store8xf32(out, 4 * (8 * i), S.cvt_f32(a))
            S.store8xf32(out, 4 * (out.shape[1] + 8 * i), S.cvt_f32(b))

    rng = np.random.default_rng(3)
    u = rng.integers(0, 256, 256).astype(np.uint8)
    s_ = rng.integers(-128, 128, 256).astype(np.int8)
    u[:32], s_[:32] = 255, -128
    out = np.zeros((2, 64), np.float32)  # lane sums < 2^24: exact as float32
    both(u, s_, out)
    expect = (u.astype(np.int64) * s_).reshape(64, 4).sum(axis=1) + 7
    assert np.array_equal(out[0], expect.astype(np.float32))
    assert np.array_equal(out[1], expect.astype(np.float32))


def test_small_operand_dot_products_are_exact():
    """dpbusd_u7 (4/5-bit quants: u < 128) and dpbssd_sign (signed Q8 x Q8 activations in [-127, 127]) give the
    exact 4-byte-group sums at their extremes: u = 127 or q = -128 against a = +-127 (vpmaddubsw's int16 pair
    sums at their largest, 2 * 128 * 127)."""
    from kernels.config import jit
    from kernels.quants import _simd as S
    if not S.HAS_AVX2:
        pytest.skip("no AVX2")

    @jit
    def both(u, q, a, out):
        for i in range(u.shape[0] // 32):
            x = S.dpbusd_u7(S.splat32(-5), S.load32(u, 32 * i), S.load32(a, 32 * i))
            y = S.dpbssd_sign(S.splat32(-5), S.load32(q, 32 * i), S.load32(a, 32 * i))
            S.store8xf32(out, 4 * (8 * i), S.cvt_f32(x))
            S.store8xf32(out, 4 * (out.shape[1] + 8 * i), S.cvt_f32(y))

    rng = np.random.default_rng(4)
    u = rng.integers(0, 128, 256).astype(np.uint8)
    q = rng.integers(-128, 128, 256).astype(np.int8)
    a = rng.integers(-127, 128, 256).astype(np.int8)
    u[:32], q[:32], a[:32] = 127, -128, -127
    u[32:64], q[32:64], a[32:64] = 127, -128, 127
    out = np.zeros((2, 64), np.float32)
    both(u, q, a, out)
    assert np.array_equal(out[0], ((u.astype(np.int64) * a).reshape(64, 4).sum(axis=1) - 5).astype(np.float32))
    assert np.array_equal(out[1], ((q.astype(np.int64) * a).reshape(64, 4).sum(axis=1) - 5).astype(np.float32))


def test_thread_count_does_not_change_results():
    """1, 2 and 3 threads give bit-identical gemv and gemm (7 and 100 tokens) for every type (subprocess: the
    thread pool size is fixed when numba starts)."""
    code = textwrap.dedent("""
        import sys, numpy as np
        sys.path.insert(0, "tests")
        import quant_reference as R
        from kernels import config
        from kernels.matmul import Weight, matmul
        from kernels.ggml_type import GGMLType as G
        bad = []
        for t in [G.F32, G.F16, G.BF16, G.Q4_0, G.Q4_1, G.Q5_0, G.Q5_1, G.Q8_0, G.Q2_K, G.Q3_K, G.Q4_K,
                  G.Q5_K, G.Q6_K]:
            K, N = 512, 41
            raw = R.random_weight_bytes(t, N, K, np.random.default_rng(int(t)))
            w = Weight(t, raw.reshape(-1), K, N, "w")
            x = np.random.default_rng(1).standard_normal((7, K)).astype(np.float32)
            xl = np.random.default_rng(2).standard_normal((100, K)).astype(np.float32)
            res = []
            for n in (1, 2, 3):
                config.set_num_threads(n)
                assert config.get_num_threads() == n
                o1 = np.empty((1, N), np.float32); matmul(w, x[:1], o1)
                o2 = np.empty((7, N), np.float32); matmul(w, x, o2)
                o3 = np.empty((100, N), np.float32); matmul(w, xl, o3)  # the large-batch gemms
                res.append((o1, o2, o3))
            for o1, o2, o3 in res[1:]:
                if not (np.array_equal(o1, res[0][0]) and np.array_equal(o2, res[0][1])
                        and np.array_equal(o3, res[0][2])):
                    bad.append(t.name)
        print("BAD", bad)
    """)
    env = dict(os.environ, NUMBA_NUM_THREADS="3")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "BAD []" in p.stdout, p.stdout


@pytest.mark.skipif(not other_cpus.applies("avx2"), reason="no AVX-512 here: the 256-bit kernels are the default "
                                                         "ones, which every other test of this file checks")
def test_avx2_kernels_without_avx512_match_reference():
    """The 256-bit kernels a machine without AVX512 runs (SYNAPSE_NO_AVX512=1 selects them here, compiled into
    their own numba cache; tests/other_cpus.py): gemm and gemv bit-identical to the reference, for the formats
    whose fast paths differ between the two (q32 8-row groups, the Q4_K / Q6_K ymm gemms, Q4_K's tokens in the
    lanes in both orders), on shapes with partial tiles."""
    p = other_cpus.run("avx2")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "BAD []" in p.stdout, p.stdout


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_get_rows(t):
    K, N = 512, 9
    raw, w = _weight(t, N, K, 700 + int(t))
    full = dequantize(t, raw.reshape(-1), N * K).reshape(N, K)
    for dtype in (np.int32, np.int64):
        ids_ = np.array([3, 0, 8, 3], dtype=dtype)
        out = np.empty((4, K), np.float32)
        w.get_rows(ids_, out)
        assert np.array_equal(out.view(np.uint32), full[ids_].view(np.uint32))


def test_bad_input():
    raw, w = _weight(G.Q4_K, 4, 512, 1)
    with pytest.raises(ValueError, match=r"test\.Q4_K.*\(T, 512\)"):
        matmul(w, np.zeros((2, 256), np.float32), np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"test\.Q4_K.*float32"):
        matmul(w, np.zeros((2, 512), np.float64), np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"test\.Q4_K.*\(2, 4\)"):
        matmul(w, np.zeros((2, 512), np.float32), np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match=r"test\.Q4_K.*\(3, 512\)"):
        w.get_rows(np.array([0, 1, 2]), np.zeros((3, 256), np.float32))
    with pytest.raises(ValueError, match="out of range"):
        w.get_rows(np.array([4]), np.zeros((1, 512), np.float32))
    with pytest.raises(ValueError, match=r"blk\.0\.x.*bytes"):
        Weight(G.Q4_K, raw.reshape(-1)[:-1], 512, 4, name="blk.0.x")
    with pytest.raises(ValueError, match=r"blk\.0\.x.*multiple of 256"):
        Weight(G.Q4_K, raw.reshape(-1), 500, 4, name="blk.0.x")
    with pytest.raises(UnsupportedTypeError, match=r"blk\.0\.ffn_up.*F64") as e:  # (a type without kernels)
        Weight(G.F64, np.zeros(8 * 256 * 4, np.uint8), 256, 4, name="blk.0.ffn_up")
    assert isinstance(e.value, ModelError)


# matmul_many: x converted once; for T == 1 up to 3 weights per fused call (kernels/quants/gemv1.py), the
# products split between threads per weight. N values cover a weight with fewer rows than an 8-row group,
# rows not a multiple of 8 / of the thread count, and 4 weights (two fused calls).
MANY_N = (3, 41, 8, 67)


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_matmul_many_equals_reference_and_matmul(t):
    K = 512
    ws = [_weight(t, N, K, 1000 + 7 * int(t) + N) for N in MANY_N]
    x = _x(3, K, 1100 + int(t))
    for T in (1, 3):
        xt = x[:T]
        outs = [np.full((T, w.ne1), np.nan, np.float32) for _, w in ws]
        got = matmul_many([w for _, w in ws], xt, outs)
        assert len(got) == len(outs) and all(g is o for g, o in zip(got, outs))  # it returns the outputs
        for (raw, w), o in zip(ws, outs):
            assert np.array_equal(o, R.matmul(t, raw, xt, FLAVOUR)), f"T={T} N={w.ne1}"
            assert np.array_equal(o, _run(w, xt))
    # 1-D x / out as in matmul
    outs = [np.empty(w.ne1, np.float32) for _, w in ws[:2]]
    matmul_many([w for _, w in ws[:2]], x[0], outs)
    assert np.array_equal(outs[1], R.matmul(t, ws[1][0], x[:1], FLAVOUR)[0])


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_fused_gemv_equals_reference(t):
    """FusedGemv (decoding's prepared Q/K/V and gate/up call): the reference's bits for 1..3 weights of a fused
    format; None for a type without a fused kernel, a mix of groups, or more than 3 weights."""
    from kernels.matmul import FusedGemv

    K = 512
    ws = [_weight(t, N, K, 1400 + 7 * int(t) + N) for N in MANY_N[:3]]
    x = _x(1, K, 1500 + int(t))
    for n in (1, 2, 3):
        f = FusedGemv.of([w for _, w in ws[:n]])
        if ws[0][1].fused is None:
            assert f is None
            continue
        outs = [np.full((1, w.ne1), np.nan, np.float32) for _, w in ws[:n]]
        f(x, outs)
        for (raw, w), o in zip(ws, outs):
            assert np.array_equal(o, R.matmul(t, raw, x, FLAVOUR)), f"n={n} N={w.ne1}"
    if ws[0][1].fused is not None:
        assert FusedGemv.of([w for _, w in ws] + [ws[0][1]]) is None  # 4 weights: two calls
        with pytest.raises(ValueError, match="x must be"):
            FusedGemv.of([ws[0][1]])(_x(2, K, 1), [np.empty((1, ws[0][1].ne1), np.float32)])
        with pytest.raises(ValueError, match="outputs must be"):
            FusedGemv.of([ws[0][1]])(x, [np.empty((1, ws[0][1].ne1 + 1), np.float32)])


def test_fused_gemv_needs_one_group():
    from kernels.matmul import FusedGemv

    K = 512
    assert FusedGemv.of([_weight(G.Q4_K, 8, K, 1)[1], _weight(G.Q6_K, 8, K, 2)[1]]) is not None  # one Q8_K call
    assert FusedGemv.of([_weight(G.Q4_0, 8, K, 1)[1], _weight(G.Q4_1, 8, K, 2)[1]]) is None  # Q8_0 and Q8_1


def test_matmul_many_mixed_types():
    """Q4_K and Q6_K share one fused call (per-weight format codes); Q4_0 / Q8_0 / Q5_0 share the Q8_0
    conversion; a type without a fused kernel (F16) and a different vec_dot_type (Q4_1) in the same list."""
    K = 512
    for types_ in ([G.Q4_K, G.Q6_K, G.Q4_K, G.Q6_K], [G.Q4_0, G.Q8_0, G.F16, G.Q5_0, G.Q4_1, G.Q8_0]):
        ws = [_weight(t, 19 + 8 * i, K, 1200 + i) for i, t in enumerate(types_)]
        x = _x(1, K, 1300)
        outs = [np.full((1, w.ne1), np.nan, np.float32) for _, w in ws]
        matmul_many([w for _, w in ws], x, outs)
        for t, (raw, w), o in zip(types_, ws, outs):
            assert np.array_equal(o, R.matmul(t, raw, x, FLAVOUR)), t.name


def test_matmul_many_bad_input():
    _, a = _weight(G.Q4_K, 4, 512, 1)
    _, b = _weight(G.Q4_K, 4, 256, 2)
    with pytest.raises(ValueError, match="share K"):
        matmul_many([a, b], np.zeros((1, 512), np.float32), [np.zeros((1, 4), np.float32)] * 2)
    with pytest.raises(ValueError, match="2 weights but 1"):
        matmul_many([a, a], np.zeros((1, 512), np.float32), [np.zeros((1, 4), np.float32)])
    with pytest.raises(ValueError, match=r"test\.Q4_K.*\(1, 4\)"):
        matmul_many([a, a], np.zeros((1, 512), np.float32), [np.zeros((1, 4), np.float32), np.zeros((1, 5), np.float32)])


def _vm_flags(addr: int) -> list[str] | None:
    """The VmFlags of this process's mapping that holds `addr` (/proc/self/smaps), None where there is none."""
    inside = False
    for line in open("/proc/self/smaps"):
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(v, 16) for v in head.split("-"))
            inside = lo <= addr < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    return None


def _huge_page_advised(a: np.ndarray) -> bool:
    flags = _vm_flags(a.ctypes.data) or []
    return "hg" in flags and "sh" not in flags


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="no /proc/self/smaps (not Linux)")
def test_weight_arena_places_arrays_in_order_on_huge_page_advised_memory(monkeypatch):
    """WeightArena.empty: 64-byte aligned arrays one after the other, zero (fresh pages), a new chunk when one is
    full, in a private mapping advised for huge pages ("hg"; a shared anonymous mapping gets no THP); inside
    packing_into() the repacks' empty_aligned allocates from it, outside it does not."""
    from kernels.quants.base import WeightArena, empty_aligned, packing_into

    monkeypatch.setattr(WeightArena, "CHUNK", 4 << 20)
    arena = WeightArena()
    a = arena.empty(1000, np.uint8)
    b = arena.empty((7, 111), np.float32)
    big = [arena.empty((3, 1 << 20), np.uint8) for _ in range(2)]
    for x, shape, dtype in ((a, (1000,), np.uint8), (b, (7, 111), np.float32), (big[0], (3, 1 << 20), np.uint8)):
        assert x.shape == shape and x.dtype == dtype and x.flags.c_contiguous and x.flags.writeable
        assert x.ctypes.data % 64 == 0 and not x.any() and _huge_page_advised(x)
    assert b.ctypes.data == a.ctypes.data + 1024  # in the order made
    assert len(arena._maps) == 2  # a chunk holds CHUNK + up to 2 MB: the second 3 MB array did not fit
    with packing_into(arena):
        inside = empty_aligned((5, 64), np.int8)
    outside = empty_aligned((5, 64), np.int8)
    chunks = [np.frombuffer(m, np.uint8) for m in arena._maps]
    assert np.may_share_memory(inside, chunks[-1]) and not any(np.may_share_memory(outside, c) for c in chunks)


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="no /proc/self/smaps (not Linux)")
def test_model_products_read_their_weights_from_the_arena():
    """Model.load(use_mmap=False) (-lm none) puts every matrix product's weights in its WeightArena: the repacked
    ones packed there, the ones whose kernels read the rows as stored (Q6_K, F32, ...) read there from the file
    (the same bytes), and the prepared one-token calls use those arrays; the default load uses none."""
    from synapse_cli.model import Model

    kinds = set()
    ref = REPO / "tests" / "reference" / "models"  # the K-quant repacks the fixtures' files lack (Q2_K, Q3_K, Q5_K)
    for path in [TINY_MODELS / f"{n}.gguf" for n in ("tiny-llama-Q4_K_M", "tiny-qwen2-Q8_0", "tiny-mistral3-F32")] + \
            [ref / f"{n}.gguf" for n in ("tiny-llama-Q2_K", "tiny-llama-Q3_K_M", "tiny-llama-Q5_K_M")]:
        name = path.stem
        mapped = Model.load(path)  # the default: the rows as stored stay in the mapping
        assert all(w.repacked != np.may_share_memory(w.packed[0], w.raw)
                   for L in mapped.layers for w in L.qkv + [L.attn_output] + L.gate_up + [L.ffn_down])
        kinds |= {"mapped rows"} if any(not w.repacked for L in mapped.layers for w in L.qkv + L.gate_up) else set()
        m = Model.load(path, use_mmap=False)
        products = [m.output] + [w for L in m.layers for w in L.qkv + [L.attn_output] + L.gate_up + [L.ffn_down]]
        for w in products:
            arrays = [p for p in w.packed if isinstance(p, np.ndarray)]
            assert arrays and all(_huge_page_advised(p) for p in arrays), w.name
            assert w.repacked, w.name  # the kernels do not read the file's mapping
            if np.may_share_memory(w.fmt.pack(w.raw, w.ne0)[0], w.raw):  # a format that reads the rows as stored
                assert np.array_equal(arrays[0].reshape(-1).view(np.uint8), w.raw.reshape(-1)), w.name
                assert not arrays[0].flags.writeable, w.name  # as the mapping's: one numba type per kernel
                kinds.add("rows")
            else:
                kinds.add("repacked")
            if w._solo is not None:  # the prepared one-token call
                assert any(q is w.packed[0] for q in w._solo[1]), w.name
    assert kinds == {"mapped rows", "rows", "repacked"}
