"""Contracts of the forward pass that hold bit for bit, whatever llama.cpp does:

- prefill in any split into micro-batches gives the same logits and KV cache as token-by-token decoding;
- the result does not depend on the thread count.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, TINY_MODELS, at_thread_counts

from synapse_cli.model import Context, Model

PROMPT = [1, 623, 645, 268, 389, 388, 451, 47, 47, 221, 865]
MODELS = ["tiny-llama-Q4_K_M", "tiny-qwen2-Q8_0", "tiny-mistral3-F32", "tiny-llama-Q4_1", "tiny-llama-F16"]


def _load(name: str) -> Model:
    """A fixtures tiny model, or one re-quantized here (tests/reference/models: the IQ4 types)."""
    path = TINY_MODELS / f"{name}.gguf"
    return Model.load(path if path.exists() else REPO / "tests" / "reference" / "models" / path.name)


def _run(model: Model, n_ubatch: int, cache: str, step_tokens: int | None = None, prompt: list[int] = PROMPT,
         fa: bool = True, batched: bool = False):
    """All-token logits of `prompt` evaluated in micro-batches of n_ubatch (or llama_decode calls of
    step_tokens tokens each), plus the filled part of every layer's KV cache; batched: Order.BATCHED."""
    ctx = Context(model, n_ctx=256, n_batch=512, n_ubatch=n_ubatch, cache_type_k=cache, cache_type_v=cache,
                  flash_attn=fa, batched_kernels=batched)
    step = step_tokens or len(prompt)
    logits = [ctx.decode(prompt[s : s + step], all_logits=True) for s in range(0, len(prompt), step)]
    return np.concatenate(logits), [k.copy() for k in ctx.k_cache], [v.copy() for v in ctx.v_cache]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("cache", ["f16", "f32"])
@pytest.mark.parametrize("fa", [True, False], ids=["fa", "no-fa"])
@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
def test_prefill_split_equals_token_by_token(name, cache, fa, batched):
    """Both batch-invariant orders (kernels/order.py): llama.cpp's single-token kernels, or its batched kernels
    for every row (a lone token or a short batch padded with zero rows, or beside its copy in attention)."""
    model = _load(name)
    ref_logits, ref_k, ref_v = _run(model, n_ubatch=512, cache=cache, step_tokens=1, fa=fa, batched=batched)
    for n_ubatch, step in ((512, None), (3, None), (4, 5), (1, None)):
        logits, ks, vs = _run(model, n_ubatch, cache, step, fa=fa, batched=batched)
        bad = np.argwhere(logits != ref_logits)
        assert bad.size == 0, f"ubatch {n_ubatch}/step {step}: logits differ first at (token, id) {bad[0]}"
        for il, (a, b) in enumerate(zip(ks, ref_k)):
            assert np.array_equal(a, b), f"K cache of layer {il} differs for ubatch {n_ubatch}"
        for il, (a, b) in enumerate(zip(vs, ref_v)):
            assert np.array_equal(a, b), f"V cache of layer {il} differs for ubatch {n_ubatch}"


def test_long_prefill_split_equals_token_by_token():
    """A 70-token prompt: micro-batches of 24 and more tokens take the batched Q4_K kernel of large batches
    (q4_k._gemm_vnni with AVX512-VNNI: tokens in the lanes, padded to 48 per pass, up to 192 per token tile)."""
    model = _load("tiny-llama-Q4_K_M")
    prompt = [1] + [50 + (37 * i) % 800 for i in range(69)]
    ref_logits, ref_k, ref_v = _run(model, n_ubatch=512, cache="f16", step_tokens=1, prompt=prompt)
    for n_ubatch, step in ((512, None), (16, None), (33, None), (40, 17)):
        logits, ks, vs = _run(model, n_ubatch, "f16", step, prompt)
        bad = np.argwhere(logits != ref_logits)
        assert bad.size == 0, f"ubatch {n_ubatch}/step {step}: logits differ first at (token, id) {bad[0]}"
        assert all(np.array_equal(a, b) for a, b in zip(ks, ref_k)), f"K cache differs for ubatch {n_ubatch}"
        assert all(np.array_equal(a, b) for a, b in zip(vs, ref_v)), f"V cache differs for ubatch {n_ubatch}"


@pytest.mark.parametrize("cache", ["q8_0", "q4_0"])
def test_batched_order_split_equals_token_by_token_with_quantized_cache(cache):
    """Order.BATCHED with a quantized KV cache (flash attention's kernel for other cell types, which llama.cpp
    runs for every batch size; batched products): prefill in any split equals token by token."""
    model = _load("tiny-llama-Q4_K_M")
    ref_logits, _, _ = _run(model, n_ubatch=512, cache=cache, step_tokens=1, batched=True)
    for n_ubatch, step in ((512, None), (3, None), (4, 5)):
        logits, _, _ = _run(model, n_ubatch, cache, step, batched=True)
        assert np.array_equal(logits, ref_logits), f"ubatch {n_ubatch}/step {step}"


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("fa", [True, False], ids=["fa", "no-fa"])
def test_batched_order_is_llamas_on_large_batches(name, fa):
    """Order.BATCHED is llama.cpp's order wherever llama.cpp takes its batched kernels for every row: a
    64-token prompt in one batch (flash attention's tiled kernel or tinyBLAS attention, tinyBLAS products,
    the repacked gemms on multiples of 4 tokens, the K-quants' tiled matmul)."""
    model = _load(name)
    prompt = [1] + [50 + (37 * i) % 800 for i in range(63)]
    batched = Context(model, n_ctx=256, flash_attn=fa, batched_kernels=True).decode(prompt, all_logits=True)
    llama = Context(model, n_ctx=256, flash_attn=fa, batch_invariant=False).decode(prompt, all_logits=True)
    assert np.array_equal(batched, llama)
    if fa:  # (the tiled kernel accumulates V in F32, the one-row kernel in F16; some products sum alike)
        assert not np.array_equal(batched, Context(model, n_ctx=256).decode(prompt, all_logits=True))


def test_last_logits_equal_all_logits_row():
    """Computing only the last row in the last layer (llama.cpp's out_ids) changes nothing."""
    model = _load("tiny-llama-Q4_K_M")
    ctx = Context(model, n_ctx=256)
    last = ctx.decode(PROMPT)
    ctx2 = Context(model, n_ctx=256)
    full = ctx2.decode(PROMPT, all_logits=True)
    assert np.array_equal(last, full[-1])


@pytest.mark.parametrize("single_token_batches", [False, True], ids=["batch", "token-by-token"])
def test_decode_into_a_callers_buffer(single_token_batches):
    """decode(out=buf) (perplexity's reused logits buffer) writes the rows it returns into buf, with the bits of
    a fresh array, in micro-batches too; a row beyond the returned ones is left as it was."""
    model = _load("tiny-llama-Q4_K_M")
    ref_all = Context(model, n_ctx=256).decode(PROMPT, all_logits=True)
    ctx = Context(model, n_ctx=256, n_ubatch=4)
    ctx.single_token_batches = single_token_batches
    buf = np.full((8, ref_all.shape[1]), 7.0, np.float32)
    got = ctx.decode(PROMPT[:5], n_outputs=2, out=buf)
    assert np.shares_memory(got, buf) and got.shape == (2, ref_all.shape[1])
    assert np.array_equal(buf[:2], ref_all[3:5]) and np.all(buf[2:] == 7.0)
    last = ctx.decode(PROMPT[5:], out=buf[2:])
    assert np.array_equal(last, ref_all[-1]) and np.array_equal(buf[2], ref_all[-1])


def test_cold_cache_token_by_token_batches_and_warm_steps():
    """On a cold kernel cache short batches are decoded token by token (Context.single_token_batches): the
    same logits (last, all, a suffix of n_outputs) and cache; the warm-up process's graph steps run in any
    order and, after reset(), leave nothing behind."""
    model = _load("tiny-llama-Q4_K_M")
    ref = Context(model, n_ctx=256)
    ref_all = ref.decode(PROMPT, all_logits=True)
    ctx = Context(model, n_ctx=256)
    for _, step in reversed(ctx.warm_steps()):
        step()
    ctx.reset()
    ctx.single_token_batches = True
    assert np.array_equal(ctx.decode(PROMPT[:5]), ref_all[4])
    assert np.array_equal(ctx.decode(PROMPT[5:], n_outputs=2), ref_all[-2:])
    assert all(np.array_equal(a, b) for a, b in zip(ctx.k_cache, ref.k_cache))
    ctx.reset()
    assert np.array_equal(ctx.decode(PROMPT, all_logits=True), ref_all)


def test_layout_only_load_packs_nothing_but_keeps_every_kernel_type(monkeypatch):
    """The cold-cache helper's model (kernels.quants.base.layout_only): the same packed arrays (shape, dtype,
    writability, contiguity: what numba compiles for) as a real load, without running a repack kernel."""
    from kernels.quants import base, q32, q4_k

    calls = []
    for mod in (q32, q4_k):
        name = "repack" if mod is q32 else "_repack"
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, real=real: (calls.append(1), real(*a)))
    for name in ("tiny-llama-Q4_K_M", "tiny-llama-Q4_1"):
        calls.clear()
        real = _load(name)
        assert calls, f"{name}: the real load repacks"
        calls.clear()
        with base.layout_only():
            shell = _load(name)
        assert not calls, f"{name}: a layout-only load ran a repack kernel"
        compared = 0
        for a, b in zip(real.layers[0].__dict__.values(), shell.layers[0].__dict__.values()):
            for pa, pb in zip(getattr(a, "packed", ()), getattr(b, "packed", ())):
                if isinstance(pa, np.ndarray):
                    assert (pa.shape, pa.dtype, pa.flags.writeable, pa.flags.c_contiguous) == \
                        (pb.shape, pb.dtype, pb.flags.writeable, pb.flags.c_contiguous)
                    compared += 1
        assert compared >= 7, f"{name}: {compared} packed arrays compared"


def test_cold_helper_announces_its_one_token_half_then_finishes():
    """synapse_cli/warm.py as session.warm_up starts it: its one-token products, the line the main process
    waits for (wait_one_token), then the batch kernels; and a helper that ends without the line ends the
    wait too."""
    from synapse_cli.warm import ONE_TOKEN_DONE, wait_one_token

    p = subprocess.Popen([sys.executable, "-m", "synapse_cli.warm", str(TINY_MODELS / "tiny-llama-Q4_1.gguf"),
                          "--n-ctx", "256"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err.decode()[-2000:]
    assert out.decode().splitlines() == [ONE_TOKEN_DONE]
    quiet = subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE)
    wait_one_token(quiet)  # returns at the end of its output
    assert quiet.wait(timeout=60) == 0


def _decode_one_by_one(model, tokens, monkeypatch, blocks: bool, cache: str = "f16", fa: bool = True,
                       batch_invariant: bool = True, layers: bool = True):
    """(logits of each token decoded alone, K caches, V caches, blocks run in one-call form) with one token's
    blocks in one jitted call (layers: kernels/layer.decode_layers_for), or each block in one call (blocks, not
    layers), where that applies; or op by op everywhere."""
    from synapse_cli.graph_ops import GraphOps

    calls = []
    real_block, real_layers = GraphOps.block, GraphOps.layers

    def block(self, *args):
        done = real_block(self, *args)
        calls.extend([1] * done)
        return done

    def all_layers(self, *args):
        done = real_layers(self, *args)
        calls.extend([1] * (len(self.ctx.model.layers) * done))
        return done

    monkeypatch.setattr(GraphOps, "block", block if blocks else lambda self, *args: False)
    monkeypatch.setattr(GraphOps, "layers", all_layers if blocks and layers else lambda self, *args: False)
    ctx = Context(model, n_ctx=1024, cache_type_k=cache, cache_type_v=cache, flash_attn=fa,
                  batch_invariant=batch_invariant)
    logits = np.stack([ctx.decode([t]) for t in tokens])
    monkeypatch.undo()
    return logits, [k.copy() for k in ctx.k_cache], [v.copy() for v in ctx.v_cache], len(calls)


LONG_PROMPT = [(7 * i * i + 3 * i + 11) % 1000 + 2 for i in range(140)]


@pytest.mark.parametrize("name", ["tiny-llama-Q4_K_M", "tiny-llama-Q6_K", "tiny-llama-Q4_0", "tiny-llama-Q4_1",
                                  "tiny-llama-Q5_0", "tiny-llama-Q5_1", "tiny-llama-Q8_0", "tiny-qwen2-Q8_0",
                                  "tiny-qwen2-Q4_K_M", "tiny-llama-IQ4_NL", "tiny-llama-IQ4_XS"])
def test_one_call_blocks_equal_the_operations(name, monkeypatch):
    """kernels/layer.py, a token's blocks in one jitted call (decode_layers_for, or in ONE parallel region whose
    threads meet at spin barriers: decode_layers_region_for, the default decode path for gemv1's products) or
    each block in one call (decode_block_for), gives the bits of the op-by-op path: every token's logits and the
    caches, over 140 tokens (the one-row attention leaves the calling thread from 128 cells at these shapes),
    at 1 and 2 threads (the block by block path at 1), with qwen2's biases. Every token of the 32-weight and
    K-quant models runs in the region (a Q4_K_M model's read-only Q6_K arrays among writable Q4_K ones too)."""
    from kernels import layer

    regions = []
    real = layer.decode_layers_region_for

    def counted(*kinds):
        run = real(*kinds)
        return lambda *args: (regions.append(args[-1]), run(*args))

    model = _load(name)
    in_region = all(k <= layer.Q8_K_KIND for k in model.layers[0].block_kinds)
    for threads in (1, 2):
        ref, ref_k, ref_v, n_ref = at_thread_counts(
            lambda: _decode_one_by_one(model, LONG_PROMPT, monkeypatch, blocks=False), (threads,))[0]
        for layers in (True, False)[:3 - threads]:
            regions.clear()

            def run():
                monkeypatch.setattr(layer, "decode_layers_region_for", counted)
                return _decode_one_by_one(model, LONG_PROMPT, monkeypatch, blocks=True, layers=layers)

            got, ks, vs, n_got = at_thread_counts(run, (threads,))[0]
            assert n_ref == 0 and n_got == len(LONG_PROMPT) * len(model.layers)
            assert regions == [threads] * len(LONG_PROMPT) * (layers and in_region)
            bad = np.argwhere(got != ref)
            assert bad.size == 0, f"{threads} threads, layers={layers}: logits differ first at (token, id) {bad[0]}"
            for a, b, c, d in zip(ks, ref_k, vs, ref_v):
                assert np.array_equal(a, b) and np.array_equal(c, d)


def test_one_call_blocks_over_a_long_view_in_three_phases(monkeypatch):
    """Past 512 cells at 3 threads the tiny models' 2 KV heads do not share evenly, and one token's attention
    runs in three phases (flash_attn._one_token_phases) inside the block: the same bits as the op-by-op path with
    the attention cut by heads (its Python entry told never to take the phases)."""
    import kernels.config
    import kernels.flash_attn
    from kernels.flash_attn import head_parts, in_phases

    from kernels import layer

    model = _load("tiny-qwen2-Q8_0")
    assert in_phases(1, 512, 2, head_parts(1, 2, 2, 3), 3)
    tokens = (LONG_PROMPT * 3)[:300]
    runs = []
    for blocks in (False, True):
        monkeypatch.setattr(kernels.config, "_threads", 3)  # 3 chunks of work (on however many cores)
        monkeypatch.setattr(layer, "ONE_REGION", False)  # (decode_layers_region_for: numba's thread count)
        if not blocks:
            monkeypatch.setattr(kernels.flash_attn, "in_phases", lambda *args: False)
        runs.append(_decode_one_by_one(model, tokens, monkeypatch, blocks=blocks))
    (ref, ref_k, ref_v, _), (got, ks, vs, n) = runs
    assert n == len(tokens) * len(model.layers) and np.array_equal(got, ref)
    assert all(np.array_equal(a, b) for a, b in zip(ks + vs, ref_k + ref_v))


def test_long_view_form_compiled_at_the_first_region_token(monkeypatch):
    """Where a context's long views would take the three-phase attention (SmolLM2's 3 KV heads on 2 threads,
    n_ctx >= ONE_TOKEN_PHASES_MIN), its first one-region token compiles (or loads) the form those tokens take,
    decode_layers_for for the same arguments, once: else the first long-view token of a timed run waits for
    the compile (`synapse bench -p 512 -n 64 -d 2048`: SmolLM2's tg64 62 against 104 t/s, benchmarks/RESULTS.md)."""
    import numba

    from kernels import layer
    from synapse_cli import graph_ops

    model = _load("tiny-qwen2-Q8_0")
    ctx = Context(model, n_ctx=512)
    hp = ctx.hp
    nt = numba.get_num_threads()
    parts = graph_ops.head_parts(1, hp.n_head_kv, hp.n_head // hp.n_head_kv, nt)
    if not layer.region_applies(model.layers[0].block_kinds, 1, hp.n_head_kv, parts, nt):
        pytest.skip("one token's blocks do not run in one region here (threading layer)")
    monkeypatch.setattr(graph_ops, "in_phases", lambda *args: True)  # the tiny model's 2 KV heads share evenly
    compiled = []
    real = layer.compile_decode_layers

    def compile_decode_layers(kinds, args):
        real(kinds, args)
        sig = tuple(numba.typeof(a) for a in args)
        compiled.append(sig in layer.decode_layers_for(*kinds).overloads)

    monkeypatch.setattr(layer, "compile_decode_layers", compile_decode_layers)
    for t in PROMPT[:3]:
        ctx.decode([t])
    assert compiled == [True]


def test_one_call_block_functions_close_over_ints_only():
    """numba caches a jitted function whose closure holds a dispatcher per process: each run recompiled it (the
    one-region decode's first form: ~10 s a run). kernels/layer.py's block functions close over the product
    kinds only."""
    from kernels import layer

    for make in (layer.decode_block_for, layer.decode_layers_for, layer.decode_layers_region_for):
        fn = make(0, 0, 0, 5).py_func
        assert all(type(c.cell_contents) is int for c in fn.__closure__ or ()), make.__name__


def test_layers_of_other_types_go_block_by_block(monkeypatch):
    """A layer whose arrays have another numba type (a strided norm weight here) cannot join the others in
    decode_layers' typed List: Context.layer_list says so (None) and tokens go block by block, the same bits."""
    model = _load("tiny-qwen2-Q8_0")
    ref, *_ = _decode_one_by_one(model, PROMPT, monkeypatch, blocks=True)
    L = model.layers[1]
    strided = np.zeros((L.ffn_norm.size, 2), np.float32)
    strided[:, 0] = L.ffn_norm
    monkeypatch.setattr(L, "ffn_norm", strided[:, 0])
    ctx = Context(model, n_ctx=256)
    assert ctx.layer_list() is None
    got = np.stack([ctx.decode([t]) for t in PROMPT])
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("name,settings", [
    ("tiny-llama-Q4_K_M", dict(fa=False)), ("tiny-llama-Q4_K_M", dict(cache="f32")),
    ("tiny-llama-Q4_K_M", dict(cache="q8_0")), ("tiny-llama-F16", {}), ("tiny-llama-Q5_K_M", {}),
    ("tiny-mistral3-Q4_K_M", {}), ("tiny-llama-Q4_K_M", dict(batch_invariant=False))])
def test_blocks_left_to_the_operations(name, settings, monkeypatch):
    """Where decode_block does not apply, one token runs op by op: the soft-max graph, an F32 or quantized cache,
    products without a fused one-token kernel (F16, Q5_K), mistral3's attention temperature, and llama.cpp's
    batch order from a view of 512 cells (its split-KV attention); below, that order's single token takes it."""
    path = TINY_MODELS / f"{name}.gguf"
    model = Model.load(path if path.exists() else REPO / "tests" / "reference" / "models" / f"{name}.gguf")
    llama_order = not settings.get("batch_invariant", True)
    tokens = (LONG_PROMPT * 3)[:300] if llama_order else LONG_PROMPT[:3]
    *_, calls = _decode_one_by_one(model, tokens, monkeypatch, blocks=True, **settings)
    # llama.cpp's order: blocks while the attended view (whole multiples of 256 cells) is under 512 cells
    assert calls == (256 * len(model.layers) if llama_order else 0)


@pytest.mark.parametrize("pending", [True, False], ids=["helper-compiling", "compiled"])
def test_blocks_wait_for_the_cold_cache_helper(pending, monkeypatch):
    """While a cold cache's helper compiles the one-call blocks for later runs (session.warm_up's batch_pending),
    single tokens run op by op, with the same bits; once they are compiled, as blocks."""
    from synapse_cli.session import warm_up

    from synapse_cli.graph_ops import GraphOps

    model = _load("tiny-qwen2-Q8_0")
    ref, *_ = _decode_one_by_one(model, PROMPT, monkeypatch, blocks=True)
    calls = []
    real = GraphOps.layers
    monkeypatch.setattr(GraphOps, "layers", lambda self, *a: (calls.append(1), real(self, *a))[1])
    monkeypatch.setattr(GraphOps, "block", lambda self, *a: calls.append(1))  # (None: not in one call)
    ctx = Context(model, n_ctx=256)
    warm_up(ctx, show_progress=False, batch_pending=pending)
    calls.clear()
    got = np.stack([ctx.decode([t]) for t in PROMPT])
    assert ctx.one_call_blocks is not pending and ctx.single_token_batches is pending
    assert ctx.layer_list() is not None  # one call per token where the blocks are ready, op by op before
    assert len(calls) == (len(PROMPT) * (1 + len(model.layers)) if pending else len(PROMPT))
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("name", ["tiny-llama-Q4_K_M", "tiny-qwen2-Q8_0"])
def test_thread_count_does_not_change_results(name):
    model = _load(name)
    results = at_thread_counts(lambda: Context(model, n_ctx=256).decode(PROMPT, all_logits=True))
    assert np.array_equal(results[0], results[1])


def test_context_full_and_bad_tokens_raise_clear_errors():
    from kernels.errors import ModelError

    model = _load("tiny-llama-Q4_K_M")
    ctx = Context(model, n_ctx=8)
    assert ctx.n_ctx == 256  # padded to a multiple of 256 as llama_context does
    ctx.decode(list(range(3, 253)))
    with pytest.raises(ModelError, match="context is full"):
        ctx.decode(PROMPT)
    with pytest.raises(ModelError, match="out of range"):
        Context(model, n_ctx=8).decode([5000])


def test_save_and_load_state_continue_bit_identically():
    model = _load("tiny-qwen2-Q8_0")
    ctx = Context(model, n_ctx=256)
    ctx.decode(PROMPT[:6])
    state = ctx.save_state()
    a = ctx.decode(PROMPT[6:])
    ctx.decode([5, 6, 7])
    ctx.load_state(state)
    assert np.array_equal(ctx.decode(PROMPT[6:]), a)


_RSS_PROBE = r"""
import os
import sys
from kernels.matmul import Weight
from synapse_cli.model import Model

path = sys.argv[1]
m = Model.load(path)
weights = [m.tok_embd, m.output] + [w for L in m.layers for w in vars(L).values() if isinstance(w, Weight)]
repacked = {id(w.raw): w.raw.nbytes for w in weights if w.repacked}
rss = 0
inside = False
for line in open("/proc/self/smaps"):
    if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
        inside = line.rstrip().endswith(path)
    elif inside and line.startswith("Rss:"):
        rss += int(line.split()[1]) * 1024
print(os.path.getsize(path), sum(repacked.values()), len(m.reader.tensors), rss)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc")
def test_repacked_weights_leave_the_mapping():
    """Issue 5's memory target (resident size within file + KV cache + 300 MB): once a weight is copied into
    a kernel layout, its mapped bytes are released, so the copy and the original are not both resident.
    Measured in a fresh process: the file mapping's resident bytes after Model.load stay below the file size
    minus every repacked tensor (plus two pages per tensor for partial pages)."""
    path = str(TINY_MODELS / "tiny-llama-Q4_K_M.gguf")
    r = subprocess.run([sys.executable, "-c", _RSS_PROBE, path], capture_output=True, text=True, timeout=300,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr
    size, repacked, n_tensors, rss = map(int, r.stdout.split())
    if repacked == 0:
        pytest.skip("no weight is repacked on this machine (portable kernels)")
    assert repacked > size // 2  # the Q4_K matrices: most of the file
    assert rss <= size - repacked + 2 * 4096 * n_tensors, (rss, size, repacked)


@pytest.mark.parametrize("name", ["tiny-llama-Q4_K_M", "tiny-llama-Q6_K", "tiny-qwen2-Q8_0", "tiny-mistral3-F32",
                                  "tiny-llama-Q4_1", "tiny-llama-BF16", "ref/tiny-llama-Q2_K", "ref/tiny-llama-Q3_K_M",
                                  "ref/tiny-llama-Q5_K_M"])
def test_weights_read_into_memory_give_the_same_bits(name):
    """-lm none (Model.load(use_mmap=False): the products' weights in a huge-page arena, the rows read from the
    file) computes what the mapped load does: a prompt's logits in one batch and then token by token, for every
    repack and for rows as stored (ref/: tests/reference/models, the K-quants the fixtures lack)."""
    path = (REPO / "tests" / "reference" / "models" / f"{name[4:]}.gguf" if name.startswith("ref/")
            else TINY_MODELS / f"{name}.gguf")
    outs = []
    for use_mmap in (True, False):
        model = Model.load(path, use_mmap=use_mmap)
        ctx = Context(model, n_ctx=256)
        outs.append((ctx.decode(PROMPT, all_logits=True), np.stack([ctx.decode([t]) for t in PROMPT[:6]])))
    for a, b in zip(*outs):
        assert np.array_equal(a, b)
