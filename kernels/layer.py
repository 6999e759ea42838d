"""One block (layer) of llama.cpp's llama/qwen2 graph for ONE token, in one jitted call, and all of a token's
blocks in one call (issue #20).

Decoding a token runs about eleven kernels a layer: the Q/K/V products, rope, two cache stores, flash
attention, the output product, add + norm, gate/up, SwiGLU, down, add + norm. Called from Python one by one
(synapse_cli/graph_ops.py), each costs a numba dispatch and some interpreter work between them: ~1 ms of
SmolLM2's ~8 ms a token (benchmarks/RESULTS.md, issue #20's third session). A block function calls the same
kernels in the same order on the same arrays from compiled code, so it gives the same bits as the op-by-op
path; batches, traces, other caches and llama.cpp's batch order still take that path (GraphOps.block says
when this one applies).

The products arrive as ggml-fused T = 1 calls, (kernel, leading arguments, prefetch distance) as
kernels/matmul.py prepares them (FusedGemv, Weight._solo). The kernels are not arguments: numba types a
dispatcher argument anew on every call (~10 us, four a block) and cannot cache a function that takes one. So
`decode_block_for` makes one block function per combination of product kernels (usually one a model), with
the kernels' kinds as constants, and numba compiles and caches only the kernels it calls.

`decode_layers_for` runs every block of a token from one call: the Python between 30 block calls (a numba
dispatch of 35 arguments and the wrapper, ~15 us a block) cost ~0.45 ms of SmolLM2's ~8 ms token (a /tmp A/B
in one process, benchmarks/RESULTS.md). The layers' own arrays (norm weights, products, biases, KV cache)
travel as one numba typed List of per-layer tuples, made once per context by `layer_list` (unboxing it is
one pointer; a tuple of 30 tuples would be typed element by element on every call).

Inside that call every product and the attention still started a parallel region of its own (1.1-2.5 us each,
~150 a SmolLM2 token). `decode_layers_region_for` runs all of a token's blocks in ONE region where the products
are gemv1's (the 32-weight formats and the K-quants): its threads take the same chunks of every product and the same attention items as those
kernels' own regions would give them, thread 0 does the small serial steps, and they meet at spin barriers
(kernels/spin.py) wherever one reads what another wrote.
"""

from __future__ import annotations

import kernels.config  # noqa: F401  (NUMBA_CACHE_DIR before numba)

import functools

import numba
import numpy as np
from numba import typed

from kernels.activations import _swiglu_serial
from kernels.config import ijit, jit, pjit
from kernels.flash_attn import _one_row_items, in_phases, on_calling_thread, one_row_attend
from kernels.kv_cache import F16, _store_float
from kernels.norm import _add_rms_norm_mul_serial
from kernels.quants.gemv1 import (
    Q32_ENTRIES, gemv_many_q8_K, gemv_q4_0, gemv_q4_1, gemv_q5_0, gemv_q5_1, gemv_q8_0, q32_chunk, q32_prepare,
    q32_scratch, q8K_chunk, q8K_prepare, q8K_scratch,
)
from kernels.quants.fp4 import gemv_mxfp4
from kernels.quants.iq4 import gemv_iq4_nl, gemv_iq4_xs
from kernels.rope import rope_cache_one, rope_qk_one
from kernels.spin import STATE_SIZE, barrier


# The fused one-token product kernels (kernels/quants/gemv1.py), by kind: decode_block_for takes the kinds of a
# block's four products and compiles only those kernels (the others' branches are pruned: kinds are constants).
PRODUCT_KERNELS = (*Q32_ENTRIES, gemv_many_q8_K, gemv_iq4_nl, gemv_iq4_xs, gemv_mxfp4)
N_Q32 = len(Q32_ENTRIES)  # kinds below this: the 32-weight formats (gemv1.q32_layout's entry numbers)
Q8_K_KIND = N_Q32  # gemv_many_q8_K's: the K-quants


def product_kind(kernel) -> int:
    return PRODUCT_KERNELS.index(kernel)


@ijit
def _product(KIND, pre, x, o0, o1, o2, n_threads, pf):
    """The fused product of kind KIND (a constant of the caller): kernel(*pre, x, o0, o1, o2, n_threads, pf), pre
    unpacked by hand (a call with *args cannot be inlined twice, into _block and on into decode_layers)."""
    if KIND == 5:
        f0, w0, f1, w1, f2, w2, n_w = pre
        gemv_many_q8_K(f0, w0, f1, w1, f2, w2, n_w, x, o0, o1, o2, n_threads, pf)
        return
    w0, w1, w2, n_w = pre
    if KIND == 0:
        gemv_q4_1(w0, w1, w2, n_w, x, o0, o1, o2, n_threads, pf)
    elif KIND == 1:
        gemv_q5_1(w0, w1, w2, n_w, x, o0, o1, o2, n_threads, pf)
    elif KIND == 2:
        gemv_q4_0(w0, w1, w2, n_w, x, o0, o1, o2, n_threads, pf)
    elif KIND == 3:
        gemv_q5_0(w0, w1, w2, n_w, x, o0, o1, o2, n_threads, pf)
    elif KIND == 4:
        gemv_q8_0(w0, w1, w2, n_w, x, o0, o1, o2, n_threads, pf)
    elif KIND == 6:
        gemv_iq4_nl(w0, w1, w2, n_w, x, o0, o1, o2, n_threads, pf)
    elif KIND == 7:
        gemv_iq4_xs(w0, w1, w2, n_w, x, o0, o1, o2, n_threads, pf)
    else:
        gemv_mxfp4(w0, w1, w2, n_w, x, o0, o1, o2, n_threads, pf)


@jit
def _add_bias(out, b):
    """out (1, n) += b (n,) where the model has the bias (b of size 0 where not): ggml_add's one float add."""
    if b.size:
        for i in range(out.shape[1]):
            out[0, i] = out[0, i] + b[i]


@ijit
def _rope_cos_sin(rope_args, pos):
    """The token's rope cache (cos, sin pairs), the same for every layer: made once a token (ggml: per layer)."""
    n_rot, neox, freq_base, freq_scale, ext_factor, attn_factor, corr_dims, freq_factors = rope_args
    return rope_cache_one(pos, n_rot, freq_base, freq_scale, ext_factor, attn_factor, corr_dims, freq_factors)


@ijit
def _qkv_done(q, k, v, q_r, k_r, biases, rope_args, pos, cos_sin, k_cache, v_cache):
    """After the Q/K/V product: the biases, rope of q and k (cos_sin: _rope_cos_sin), the K and V cache cells
    pos[0] (F16)."""
    n_rot, neox = rope_args[0], rope_args[1]
    H, D = q_r.shape[1], q_r.shape[2]
    Hkv = k_r.shape[1]
    _add_bias(q, biases[0])
    _add_bias(k, biases[1])
    _add_bias(v, biases[2])
    rope_qk_one(q.reshape((1, H, D)), k.reshape((1, Hkv, D)), pos, q_r, k_r, n_rot, neox, rope_args[7], cos_sin)
    _store_float(F16, k_cache, k_r, pos)
    _store_float(F16, v_cache, v.reshape((1, Hkv, D)), pos)


@ijit
def _gate_up_done(gate, up, biases):
    """After the gate/up product: the biases, gate = silu(gate) * up."""
    _add_bias(gate, biases[4])
    _add_bias(up, biases[5])
    _swiglu_serial(gate, up, gate, True)


@ijit
def _block(QKV, O, GATE_UP, DOWN, lw, x, cur, eps, normed, shared, bufs, cos_sin):
    """One token through one block, in graph order (synapse_cli/model.py, Context._forward_ubatch):

        q, k, v = Wq cur (+ bq), Wk cur (+ bk), Wv cur (+ bv)       one fused product (qkv_*)
        q_r, k_r = rope(q), rope(k); K, V cache cells pos[0] = k_r, v (F16)
        kqv = flash_attn_ext(q_r, K[:n_kv], V[:n_kv])               the one-row kernel
        ffn_inp = Wo kqv (+ bo) + x;  cur = rms_norm(ffn_inp) * ffn_norm
        gate, up = Wg cur (+ bg), Wu cur (+ bu);  gate = silu(gate) * up
        x = Wd gate (+ bd) + ffn_inp;  normed = rms_norm(x) * next_norm   (the next block's input)

    lw, the layer's arrays: (ffn_norm, next_norm, qkv_pre, qkv_pf, o_pre, o_pf, gu_pre, gu_pf, down_pre, down_pf,
    biases, k_cache, v_cache): each product's leading arguments and prefetch distance; biases: 7 float32 arrays (q,
    k, v, o, gate, up, down), size 0 where absent; k_cache, v_cache (n_ctx, Hkv, D) F16 bits. shared, the
    graph's: (rope_args (rope_qk's parameters after the positions), pos (1,) int32, n_kv, kv_pos (n_kv,) int32
    (-1: empty), kq_scale float32, parts (flash_attn.head_parts), n_threads). bufs, scratch: (q, k, v, q_r, k_r,
    kqv, attn_out, ffn_inp, gate, up, ffn_out). x, cur, ffn_inp, attn_out, ffn_out, normed: (1, n_embd); q,
    kqv: (1, H*D); k, v: (1, Hkv*D); q_r (1, H, D); k_r (1, Hkv, D); gate, up: (1, n_ff).

    QKV, O, GATE_UP, DOWN: the products' kinds (product_kind), constants of the two callers below, which inline
    this body: their closures hold only ints (one over a dispatcher would get a new cache entry, and a
    recompile, in every process). Under 30 arguments and no *args: CPython passes a longer call as one tuple
    (CALL_FUNCTION_EX), which numba cannot inline."""
    (ffn_norm, next_norm, qkv_pre, qkv_pf, o_pre, o_pf, gu_pre, gu_pf, down_pre, down_pf, biases, k_cache,
     v_cache) = lw
    rope_args, pos, n_kv, kv_pos, kq_scale, parts, n_threads = shared
    q, k, v, q_r, k_r, kqv, attn_out, ffn_inp, gate, up, ffn_out = bufs
    _product(QKV, qkv_pre, cur, q, k, v, n_threads, qkv_pf)
    _qkv_done(q, k, v, q_r, k_r, biases, rope_args, pos, cos_sin, k_cache, v_cache)
    one_row_attend(q_r, k_cache[:n_kv], v_cache[:n_kv], n_kv, kv_pos, pos, kq_scale, kqv, parts, n_threads)
    _product(O, o_pre, kqv, attn_out, attn_out, attn_out, n_threads, o_pf)
    _add_bias(attn_out, biases[3])
    _add_rms_norm_mul_serial(attn_out, x, ffn_inp, eps, ffn_norm, cur)
    _product(GATE_UP, gu_pre, cur, gate, up, gate, n_threads, gu_pf)  # (slot 2 unused, as FusedGemv)
    _gate_up_done(gate, up, biases)
    _product(DOWN, down_pre, gate, ffn_out, ffn_out, ffn_out, n_threads, down_pf)
    _add_bias(ffn_out, biases[6])
    _add_rms_norm_mul_serial(ffn_out, ffn_inp, x, eps, next_norm, normed)


@functools.lru_cache(maxsize=None)
def decode_block_for(QKV: int, O: int, GATE_UP: int, DOWN: int):
    """decode_block for products of these kinds (product_kind of the Q/K/V, output, gate/up and down kernels):
    one compiled (and cached) function per combination a model uses, usually one."""

    @jit
    def decode_block(x, cur, eps, ffn_norm, next_norm, normed, qkv_pre, qkv_pf, o_pre, o_pf, gu_pre, gu_pf,
                     down_pre, down_pf, biases, rope_args, pos, k_cache, v_cache, n_kv, kv_pos, kq_scale, parts,
                     n_threads, q, k, v, q_r, k_r, kqv, attn_out, ffn_inp, gate, up, ffn_out):
        """One token through one block (_block, whose tuples' members these are)."""
        lw = (ffn_norm, next_norm, qkv_pre, qkv_pf, o_pre, o_pf, gu_pre, gu_pf, down_pre, down_pf, biases, k_cache,
              v_cache)
        shared = (rope_args, pos, n_kv, kv_pos, kq_scale, parts, n_threads)
        bufs = (q, k, v, q_r, k_r, kqv, attn_out, ffn_inp, gate, up, ffn_out)
        _block(QKV, O, GATE_UP, DOWN, lw, x, cur, eps, normed, shared, bufs, _rope_cos_sin(rope_args, pos))

    return decode_block


@functools.lru_cache(maxsize=None)
def decode_layers_for(QKV: int, O: int, GATE_UP: int, DOWN: int):
    """decode_layers for blocks whose products all have these kinds (decode_block_for)."""

    @jit
    def decode_layers(layers, x, cur, eps, normed_last, shared, bufs):
        """Every block of one token, in order: _block with layer il's arrays layers[il] (layer_list); the last
        block's normed output (with the output norm as its next_norm) goes to normed_last, the others' to cur
        (the next block's input)."""
        n = len(layers)
        cos_sin = _rope_cos_sin(shared[0], shared[1])
        for il in range(n):
            normed = normed_last
            if il < n - 1:
                normed = cur
            _block(QKV, O, GATE_UP, DOWN, layers[il], x, cur, eps, normed, shared, bufs, cos_sin)

    return decode_layers


def compile_decode_layers(kinds, args) -> None:
    """decode_layers_for(*kinds) compiled (or loaded from the cache) now for these arguments, not at its first call
    (GraphOps.layers: the form that tokens over long views take, made ready before a timed token needs it)."""
    fn = decode_layers_for(*kinds)
    sig = tuple(numba.typeof(a) for a in args)
    if sig not in fn.overloads:
        fn.compile(sig)


# ------------------------------------------------------------------ all blocks in ONE parallel region

@ijit
def _product_chunk(KIND, tid, nt, st, gen, pre, x, s, o0, o1, o2, pf):
    """A product inside the region: thread 0 quantizes x into its scratch (s: a q32 and a Q8_K scratch), the
    threads meet, each computes its chunk of the rows, and they meet again (the outputs complete). Returns the
    generation."""
    s32, s8K = s
    if KIND == Q8_K_KIND:
        f0, w0, f1, w1, f2, w2, n_w = pre
        if tid == 0:
            q8K_prepare(x, s8K)
        gen = barrier(st, nt, gen)
        q8K_chunk(tid, nt, f0, w0, f1, w1, f2, w2, n_w, s8K, o0, o1, o2, pf)
    else:
        w0, w1, w2, n_w = pre
        if tid == 0:
            q32_prepare(KIND, x, s32)
        gen = barrier(st, nt, gen)
        q32_chunk(KIND, tid, nt, w0, w1, w2, n_w, s32, o0, o1, o2, pf)
    return barrier(st, nt, gen)


@ijit
def _block_region(QKV, O, GATE_UP, DOWN, tid, nt, st, gen, lw, x, cur, eps, normed, shared, bufs, scratch):
    """_block's operations, in its order, by thread tid of nt inside one parallel region: the products and the
    attention cut into the chunks and items their own parallel kernels give thread tid, the small serial steps
    on thread 0, a barrier wherever a thread reads what another wrote. The same operations on the same values:
    the same bits as _block. Returns the barrier generation."""
    (ffn_norm, next_norm, qkv_pre, qkv_pf, o_pre, o_pf, gu_pre, gu_pf, down_pre, down_pf, biases, k_cache,
     v_cache) = lw
    rope_args, pos, n_kv, kv_pos, kq_scale, parts, _ = shared
    q, k, v, q_r, k_r, kqv, attn_out, ffn_inp, gate, up, ffn_out = bufs
    s_embd, s_attn, s_ff, cos_sin = scratch  # quantized activations of n_embd, H*D and n_ff values; rope cache
    gen = _product_chunk(QKV, tid, nt, st, gen, qkv_pre, cur, s_embd, q, k, v, qkv_pf)
    kc, vc = k_cache[:n_kv], v_cache[:n_kv]
    serial = on_calling_thread(1, q_r.shape[1], q_r.shape[2], n_kv, pos, nt)  # (as one_row_attend)
    if tid == 0:
        _qkv_done(q, k, v, q_r, k_r, biases, rope_args, pos, cos_sin, k_cache, v_cache)
        if serial:
            _one_row_items(q_r, kc, vc, n_kv, kv_pos, pos, kq_scale, kqv, 1, 0, 1)
    if not serial:
        gen = barrier(st, nt, gen)
        _one_row_items(q_r, kc, vc, n_kv, kv_pos, pos, kq_scale, kqv, parts, tid, nt)
        gen = barrier(st, nt, gen)  # (kqv complete before thread 0 quantizes it)
    gen = _product_chunk(O, tid, nt, st, gen, o_pre, kqv, s_attn, attn_out, attn_out, attn_out, o_pf)
    if tid == 0:
        _add_bias(attn_out, biases[3])
        _add_rms_norm_mul_serial(attn_out, x, ffn_inp, eps, ffn_norm, cur)
    gen = _product_chunk(GATE_UP, tid, nt, st, gen, gu_pre, cur, s_embd, gate, up, gate, gu_pf)
    if tid == 0:
        _gate_up_done(gate, up, biases)
    gen = _product_chunk(DOWN, tid, nt, st, gen, down_pre, gate, s_ff, ffn_out, ffn_out, ffn_out, down_pf)
    if tid == 0:
        _add_bias(ffn_out, biases[6])
        _add_rms_norm_mul_serial(ffn_out, ffn_inp, x, eps, next_norm, normed)
    return gen


ONE_REGION = True  # region_applies may say yes (the warm-up helper turns it off to compile decode_layers_for too)
_threads_at_once = None  # _layer_runs_threads_at_once(), once known


def _layer_runs_threads_at_once() -> bool:
    """Whether numba's threading layer runs a prange's chunks on that many threads at once, as the barriers need:
    OpenMP and numba's workqueue do; TBB tasks may run one after another on one thread."""
    global _threads_at_once
    if _threads_at_once is None:
        try:
            _threads_at_once = numba.threading_layer() in ("omp", "workqueue")
        except ValueError:  # no parallel kernel has run yet: not known
            return False
    return _threads_at_once


def region_applies(kinds, n_kv: int, G: int, parts: int, n_threads: int) -> bool:
    """Whether decode_layers_region_for runs a token's blocks: gemv1's products (32-weight formats, K-quants), an
    attention the one-row items cover (not _one_token_phases' long views, which stay with decode_layers_for) and
    a threading layer whose threads meet at barriers."""
    return (ONE_REGION and all(k <= Q8_K_KIND for k in kinds) and not in_phases(1, n_kv, G, parts, n_threads)
            and (n_threads == 1 or _layer_runs_threads_at_once()))


@functools.lru_cache(maxsize=None)
def decode_layers_region_for(QKV: int, O: int, GATE_UP: int, DOWN: int):
    """decode_layers in ONE parallel region (gemv1's products, region_applies): its nt threads go through
    every block together, meeting at spin barriers (kernels/spin.py, 0.05-0.3 us) instead of starting the ~5
    parallel regions a block (1.1-2.5 us each; SmolLM2: ~150 a token). nt must be the number of threads numba runs
    the prange on (numba.get_num_threads()), or the barriers wait forever; any nt gives the same bits."""

    @pjit
    def decode_layers_region(layers, x, cur, eps, normed_last, shared, bufs, nt):
        st = np.zeros(STATE_SIZE, np.int64)
        # the tuples the threads share, in a typed List: a parfor passes arrays and lists to its threads, not
        # tuples of arrays
        box = typed.List()
        K_embd, K_attn, K_ff = cur.shape[1], bufs[5].shape[1], bufs[8].shape[1]  # (n_embd, H*D, n_ff)
        scratch = ((q32_scratch(K_embd), q8K_scratch(K_embd)), (q32_scratch(K_attn), q8K_scratch(K_attn)),
                   (q32_scratch(K_ff), q8K_scratch(K_ff)), _rope_cos_sin(shared[0], shared[1]))
        box.append((shared, bufs, scratch))
        n = len(layers)
        # thread tid's part of every block (the body here, not a jitted closure: a function whose closure holds
        # a dispatcher gets a new cache entry, and a recompile, in every process)
        for tid in numba.prange(nt):
            sh, bu, sc = box[0]
            gen = 0
            for il in range(n):
                normed = normed_last
                if il < n - 1:
                    normed = cur
                gen = _block_region(QKV, O, GATE_UP, DOWN, tid, nt, st, gen, layers[il], x, cur, eps, normed, sh, bu,
                                    sc)

    return decode_layers_region


@jit
def _list_of_one(item):
    """A numba typed List holding item, built in compiled (cached) code: made from Python, a typed List compiles
    its methods for the item type anew in every process (~1 s)."""
    out = typed.List()
    out.append(item)
    return out


@jit
def _append(items, item):
    items.append(item)


def layer_list(items: tuple):
    """decode_layers' `layers` from one tuple per layer, _block's lw; None unless all have one numba type (the
    List's append would cast, a strided array to a contiguous one among them). One item per call: a loop over
    the 30-tuple in compiled code took 100 s to compile."""
    if len({numba.typeof(item) for item in items}) != 1:
        return None
    out = _list_of_one(items[0])
    for item in items[1:]:
        _append(out, item)
    return out
