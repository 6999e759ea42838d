"""The Llama-family model: weights bound by llama.cpp's tensor names, a KV-cached context, the forward pass.

One loader for every command (decode, eval-callback, bench). It mirrors, for the architectures
`llama`, `qwen2` and `mistral3` with flash attention off:
  - src/models/llama.cpp, qwen2.cpp, mistral3.cpp (the graphs), src/llama-graph.cpp (build_qkv,
    build_attn without flash attention, build_ffn with SwiGLU),
  - src/llama-kv-cache.cpp (F16/F32 cache, the attention view of n_kv cells padded to 256),
  - src/llama-context.cpp (llama_decode: a batch is split into micro-batches of n_ubatch tokens; only
    the rows whose logits are needed go through the last layer's FFN and the output head).

Reading order: `Model` (hyper-parameters + `LayerWeights`), `Context` (KV cache and scratch
buffers), `Context.decode` (one llama_decode call), `Context._forward_ubatch` (one graph evaluation).

The trace hook (`trace=`) receives every intermediate tensor under llama.cpp's graph name so that
`eval-callback` can print it; when it is None the forward pass does no extra work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from kernels.ggml_type import GGMLType
from kernels.order import Order

from kernels.errors import ModelError
from kernels.quants.base import empty_aligned
from kernels.gguf import GGUFReader, TensorInfo
from .hparams import HParams, RopeParams, attn_temp_scale, load_hparams, with_rope
from .kv_cells import KVCells

# hook(name, op, value, srcs, ggml_type): see synapse_cli/evalcb/
TraceHook = Callable[[str, str, np.ndarray, list, str], None]

_NO_BIAS = np.zeros(0, np.float32)  # a bias the model does not have (kernels/layer.py)


def _read_only(a):
    """a as a read-only array (a view), other values as they are: a weight's packed array is writable where a
    repack made it and read-only where the kernels read the file's rows as stored (Q6_K), two numba types; the
    one-call blocks (kernels/layer.py) take every layer's arrays in one typed List, whose items must share one."""
    if isinstance(a, np.ndarray) and a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


@dataclass
class LayerWeights:
    attn_norm: np.ndarray  # (n_embd,) f32
    attn_q: object  # Weight (n_embd -> n_head * head_dim)
    attn_k: object  # Weight (n_embd -> n_head_kv * head_dim)
    attn_v: object  # Weight (n_embd -> n_head_kv * head_dim)
    attn_output: object  # Weight (n_head * head_dim -> n_embd)
    ffn_norm: np.ndarray  # (n_embd,) f32
    ffn_gate: object  # Weight (n_embd -> n_ff)
    ffn_up: object  # Weight (n_embd -> n_ff)
    ffn_down: object  # Weight (n_ff -> n_embd)
    attn_q_b: Optional[np.ndarray] = None  # (n_head * head_dim,) f32, qwen2
    attn_k_b: Optional[np.ndarray] = None
    attn_v_b: Optional[np.ndarray] = None
    attn_output_b: Optional[np.ndarray] = None
    ffn_gate_b: Optional[np.ndarray] = None
    ffn_up_b: Optional[np.ndarray] = None
    ffn_down_b: Optional[np.ndarray] = None
    # per-tensor weight scales (1,) f32, llama.cpp's *_s (`<weight>.scale`, NVFP4 checkpoints' weight_scale_2):
    # the product is multiplied by it (ggml_mul), Q/K/V/output before their LoRA adapters and biases, the FFN's after
    attn_q_s: Optional[np.ndarray] = None
    attn_k_s: Optional[np.ndarray] = None
    attn_v_s: Optional[np.ndarray] = None
    attn_output_s: Optional[np.ndarray] = None
    ffn_gate_s: Optional[np.ndarray] = None
    ffn_up_s: Optional[np.ndarray] = None
    ffn_down_s: Optional[np.ndarray] = None
    # attn_q/k/v are the row ranges of one fused attn_qkv weight (their .name, and their scales); its bias, if
    # any, came as attn_qkv.bias (True) or as attn_q/k/v.bias (False: llama.cpp concatenates them)
    fused_qkv_bias: Optional[bool] = None

    def __post_init__(self):
        # products sharing an input, computed by one matmul_many call (activations quantized once)
        self.qkv = [self.attn_q, self.attn_k, self.attn_v]
        self.gate_up = [self.ffn_gate, self.ffn_up]
        # the same, one token, as one prepared fused call (None where the weights' formats cannot share one)
        from kernels.matmul import FusedGemv

        self.qkv_gemv = FusedGemv.of(self.qkv)
        self.gate_up_gemv = FusedGemv.of(self.gate_up)
        # the block's four products as those fused calls for kernels/layer.decode_block_for: their kernels' kinds
        # and the rest of each call (None where a product has no fused call)
        self.block_kinds = self.block_products = None
        if None not in (self.qkv_gemv, self.gate_up_gemv, self.attn_output._solo, self.ffn_down._solo):
            from kernels.layer import product_kind

            calls = ((self.qkv_gemv.kern, self.qkv_gemv.pre, self.qkv_gemv.pf), self.attn_output._solo,
                     (self.gate_up_gemv.kern, self.gate_up_gemv.pre, self.gate_up_gemv.pf), self.ffn_down._solo)
            self.block_kinds = tuple(product_kind(kern) for kern, _, _ in calls)
            self.block_products = tuple(a for _, pre, pf in calls for a in (tuple(map(_read_only, pre)), pf))
        if self.has_scales:  # (kernels/layer.py's one-call block has no scale step: such blocks run op by op)
            self.block_kinds = self.block_products = None
        self.block_biases = tuple(_NO_BIAS if b is None else np.array(b, np.float32).reshape(-1) for b in (
            self.attn_q_b, self.attn_k_b, self.attn_v_b, self.attn_output_b, self.ffn_gate_b, self.ffn_up_b,
            self.ffn_down_b))

    @property
    def fused_qkv(self) -> bool:
        return self.attn_q.name.endswith("attn_qkv.weight")

    @property
    def has_scales(self) -> bool:
        return any(x is not None for x in (self.attn_q_s, self.attn_k_s, self.attn_v_s, self.attn_output_s,
                                           self.ffn_gate_s, self.ffn_up_s, self.ffn_down_s))


class Model:
    """Weights of one GGUF file, memory-mapped; built by `Model.load`."""

    def __init__(self, path: str, reader: GGUFReader, hparams: HParams):
        self.path = path
        self.reader = reader
        self.hparams = hparams
        self.layers: list[LayerWeights] = []
        self.output_s = None  # (1,) f32: the output's per-tensor scale (an NVFP4 output's `output.scale`), or None
        self.load_ms = 0.0

    # --- loading -------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path, progress: Callable[[int, int, str], None] | None = None,
             use_mmap: bool = True, kv_overrides: dict | None = None, repack: bool = True) -> "Model":
        """Map `path`, check every tensor llama.cpp would create, and prepare the weights.

        `progress(done, total, name)` is called once per tensor (the CLI draws a Rich bar with it).
        use_mmap=False (llama.cpp's --no-mmap): every matrix product reads its weights from process memory, a
        WeightArena advised for huge pages, the rows its kernels read as stored read there from the file. Tokens
        then take 4-5 % less time; the load takes ~1 s longer for a 1 GB model on this kind of VM, whose 2 MB
        pages are slow to fault in (benchmarks/RESULTS.md). The default keeps them where they are: repacked
        weights in numpy's memory, the others in the file mapping. repack=False: llama.cpp's -nr/--no-repack (no
        weight is repacked; their products follow ggml_vec_dot and, in batches, tinyBLAS or the tiled matmul).
        """
        from kernels.quants.base import repacking

        with repacking(repack):
            return cls._load(path, progress, use_mmap, kv_overrides)

    @classmethod
    def _load(cls, path, progress, use_mmap, kv_overrides) -> "Model":
        t0 = time.perf_counter()
        from kernels.matmul import Weight  # numba import happens here, not at CLI start-up
        from kernels.quants.base import WeightArena, in_layout_only, llama_repacks, packing_into

        path = str(path)
        reader = GGUFReader(path)
        if kv_overrides:  # --override-kv: what every later metadata read sees
            import sys

            reader.set_overrides(kv_overrides, warn=lambda msg: print(msg, file=sys.stderr))
        hp = load_hparams(reader)
        m = cls(path, reader, hp)
        used: set[str] = set()
        total = len(reader.tensors)
        done = [0]

        def tensor(name: str, ne: tuple[int, ...], required: bool = True) -> TensorInfo | None:
            t = reader.tensor(name)
            if t is None:
                if required:
                    raise ModelError(f"{path}: missing tensor {name!r}")
                return None
            ne_file = tuple(t.ne) + (1,) * (len(ne) - len(t.ne))
            if ne_file[: len(ne)] != ne or any(d != 1 for d in ne_file[len(ne):]):
                raise ModelError(f"{path}: tensor {name!r} has shape {list(t.ne)}, expected {list(ne)}")
            used.add(name)
            done[0] += 1
            if progress is not None:
                progress(done[0], total, name)
            return t

        arena = None if use_mmap else WeightArena()  # the products' weights, in the order a token reads them

        def own_rows(w, t: TensorInfo) -> None:
            """A product whose kernels read the rows as stored reads them from the arena (read from the file: a
            copy through the mapping would fault it in 4 KB at a time, several times slower)."""
            if arena is not None and not w.repacked and not in_layout_only():
                rows = arena.empty(w.raw.shape, np.uint8)
                reader.read_into(t, rows)
                w.place(rows)

        def matrix(name: str, n_in: int, n_out: int, required: bool = True, product: bool = True):
            t = tensor(name, (n_in, n_out), required)
            if t is None:
                return None
            with packing_into(arena):  # the repacks write straight into the arena (if any)
                w = Weight(t.ggml_type, t.data, n_in, n_out, name=name)
            if product:
                own_rows(w, t)
            if w.repacked:
                reader.release(t)  # repacked: the kernels never read the mapped bytes (get_rows re-faults them)
            return w

        def vector(name: str, n: int, required: bool = True) -> np.ndarray | None:
            t = tensor(name, (n,), required)
            if t is None:
                return None
            return _as_f32(t)

        def scale(weight: str) -> np.ndarray | None:
            """llama.cpp's optional per-tensor scales of a product's weight: `<w>.scale` (the *_s its graph multiplies
            the product by) and `<w>.input_scale` (loaded, unused on the CPU)."""
            vector(weight + ".input_scale", 1, required=False)
            return vector(weight + ".scale", 1, required=False)

        n_embd, n_ff = hp.n_embd, hp.n_ff
        n_q, n_kv = hp.n_embd_head * hp.n_head, hp.n_embd_k_gqa

        # the embeddings are read by rows (get_rows); a product only when they are the output head too
        m.tok_embd = matrix("token_embd.weight", n_embd, hp.n_vocab, product=False)
        m.output_norm = vector("output_norm.weight", n_embd)
        m.output = matrix("output.weight", n_embd, hp.n_vocab, required=False)
        m.tied_output = m.output is None
        if m.tied_output:  # llama.cpp: "if output is NULL, init from the input tok embed"
            m.output = m.tok_embd
            own_rows(m.output, reader.tensor("token_embd.weight"))
        if m.output.ggml_type == GGMLType.NVFP4:  # llama.cpp looks for the output's scales only then
            m.output_s = scale("output")
            if m.tied_output and (m.output_s is not None or reader.tensor("output.input_scale") is not None):
                raise ModelError(f"{path}: an NVFP4 output tied to token_embd.weight cannot have output.scale or "
                                 "output.input_scale (llama.cpp asserts this at load)")
        m.rope_freqs = None
        if reader.tensor("rope_freqs.weight") is not None:
            m.rope_freqs = vector("rope_freqs.weight", hp.n_rot // 2)

        def fused_qkv(name: str) -> tuple:
            """A fused attn_qkv weight (convert_hf_to_gguf.py --fuse-qkv: the rows of Q, then K, then V) as its three
            row ranges, each a Weight of its own: a product's rows are independent, so they compute what llama.cpp's
            one product computes, where the whole and each part take the same kernels (repacked or not)."""
            t = tensor(name, (n_embd, n_q + 2 * n_kv))
            sizes = (n_q, n_kv, n_kv)
            whole = llama_repacks(t.ggml_type, sum(sizes))
            if any(llama_repacks(t.ggml_type, n) != whole for n in sizes):
                raise ModelError(f"{path}: {name}: its Q/K/V row counts {sizes} would take other kernels than the "
                                 "fused weight's (not supported)")
            rows, r0, parts = t.data.reshape(sum(sizes), -1), 0, []
            for n in sizes:
                with packing_into(arena):
                    parts.append(Weight(t.ggml_type, rows[r0:r0 + n].reshape(-1), n_embd, n, name=name))
                r0 += n
            if whole:
                reader.release(t)
            return tuple(parts)

        for il in range(hp.n_layer):
            p = f"blk.{il}."
            fused = reader.tensor(p + "attn_qkv.weight") is not None
            if fused:  # llama.cpp's create_tensor_qkv: attn_qkv if present, else attn_q/k/v (their scales apart)
                wq, wk, wv = fused_qkv(p + "attn_qkv.weight")
                b_qkv = vector(p + "attn_qkv.bias", n_q + 2 * n_kv, required=False)
                s_qkv = scale(p + "attn_qkv")
                qkv = dict(attn_q=wq, attn_k=wk, attn_v=wv, attn_q_s=s_qkv, attn_k_s=s_qkv, attn_v_s=s_qkv,
                           fused_qkv_bias=b_qkv is not None)
                if b_qkv is not None:
                    qkv.update(attn_q_b=b_qkv[:n_q], attn_k_b=b_qkv[n_q:n_q + n_kv], attn_v_b=b_qkv[n_q + n_kv:])
            else:
                qkv = dict(attn_q=matrix(p + "attn_q.weight", n_embd, n_q),
                           attn_k=matrix(p + "attn_k.weight", n_embd, n_kv),
                           attn_v=matrix(p + "attn_v.weight", n_embd, n_kv),
                           **{f"{w}_s": scale(p + w) for w in ("attn_q", "attn_k", "attn_v")})
            if "attn_q_b" not in qkv:
                qkv.update(attn_q_b=vector(p + "attn_q.bias", n_q, required=False),
                           attn_k_b=vector(p + "attn_k.bias", n_kv, required=False),
                           attn_v_b=vector(p + "attn_v.bias", n_kv, required=False))
            m.layers.append(LayerWeights(
                attn_norm=vector(p + "attn_norm.weight", n_embd),
                **qkv,
                attn_output=matrix(p + "attn_output.weight", n_q, n_embd),
                ffn_norm=vector(p + "ffn_norm.weight", n_embd),
                ffn_gate=matrix(p + "ffn_gate.weight", n_embd, n_ff),
                ffn_up=matrix(p + "ffn_up.weight", n_embd, n_ff),
                ffn_down=matrix(p + "ffn_down.weight", n_ff, n_embd),
                attn_output_b=vector(p + "attn_output.bias", n_embd, required=False),
                ffn_gate_b=vector(p + "ffn_gate.bias", n_ff, required=False),
                ffn_up_b=vector(p + "ffn_up.bias", n_ff, required=False),
                ffn_down_b=vector(p + "ffn_down.bias", n_embd, required=False),
                **{f"{w}_s": scale(p + w) for w in ("attn_output", "ffn_gate", "ffn_up", "ffn_down")},
            ))

        unexpected = [t.name for t in reader.tensors if t.name not in used]
        if unexpected:
            more = f" (and {len(unexpected) - 3} more)" if len(unexpected) > 3 else ""
            raise ModelError(f"{path}: unexpected tensor(s) {', '.join(unexpected[:3])}{more} for arch {hp.arch}")
        m.load_ms = (time.perf_counter() - t0) * 1e3
        return m

    # --- facts for the CLI --------------------------------------------------------------------

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.reader.tensors)

    @property
    def size_bytes(self) -> int:
        return sum(t.nbytes for t in self.reader.tensors)


def _as_f32(t: TensorInfo) -> np.ndarray:
    """A 1-D norm/bias tensor as float32 (a view when it already is F32)."""
    if t.ggml_type == GGMLType.F32:
        return t.data.view(np.float32)
    from kernels.dequant import dequantize

    return dequantize(t.ggml_type, t.data, t.n_elements)


# The one-token graph's steps a cold first run's helper process compiles (Context.warm_steps): the layers'
# products, whose kernels share most of their code (one process compiles it once), with the rope inside "qkv",
# and attention; the main process compiles the others and the weight repacks meanwhile (about half each for
# SmolLM2, issue #16).
WARM_PRODUCTS = frozenset({"qkv", "attention", "attn_out", "gate_up", "ffn_down"})
SINGLE_TOKEN_BATCH_MAX = 32  # the longest batch Context.single_token_batches decodes token by token
LLAMA_MAX_SEQ = 256  # llama-cparams.h: the most sequences a context holds
CACHE_TYPES = {"f16": np.uint16, "f32": np.float32}  # the types of both attention graphs; kv_cache.KV_TYPES: more


def check_cache_types(type_k: str, type_v: str, flash_attn: bool, head_dim: int | None) -> None:
    """llama.cpp's rules for -ctk/-ctv (llama_init_from_model) and what synapse computes: without flash
    attention any K type with an f16/f32 V; with it any of kv_cache.KV_TYPES, K and V may differ."""
    from kernels.kv_cache import KV_TYPES, QUANTIZED

    for flag, t in (("-ctk", type_k), ("-ctv", type_v)):
        if t not in KV_TYPES:
            raise ModelError(f"{flag} {t}: unsupported KV cache type (synapse: {', '.join(KV_TYPES)})")
    if not flash_attn:
        if type_v in QUANTIZED:
            raise ModelError("quantized V cache requires flash_attn to be enabled")
        if type_v not in CACHE_TYPES:
            raise ModelError(f"a {type_v} V cache without flash attention is not supported yet (use -fa on, or "
                             "-ctv f16/f32)")
    for which, t in (("K", type_k), ("V", type_v)):
        if t in QUANTIZED and head_dim is not None and head_dim % 32:
            raise ModelError(f"{which} cache type {t} with block size 32 does not divide n_embd_head={head_dim}")


def kv_cache_bytes(hp: HParams, n_ctx: int, cache_type_k: str, cache_type_v: str) -> int:
    """Bytes of the KV cache of n_ctx cells (every layer, K and V)."""
    from kernels.kv_cache import KV_TYPES

    per_32 = KV_TYPES[cache_type_k][1] + KV_TYPES[cache_type_v][1]  # bytes per 32 values of K plus of V
    return hp.n_layer * n_ctx * hp.n_head_kv * hp.n_embd_head // 32 * per_32


def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def check_cache_memory(hp: HParams, n_ctx: int, cache_type_k: str, cache_type_v: str) -> None:
    """Refuse a KV cache larger than the memory there is, with the sizes, before allocating it."""
    need, avail = kv_cache_bytes(hp, n_ctx, cache_type_k, cache_type_v), available_memory()
    if avail is not None and need > avail:
        gib = 1024 ** 3
        raise ModelError(f"the KV cache of {n_ctx} cells needs {need / gib:.1f} GiB ({cache_type_k}/{cache_type_v}); "
                         f"this machine has {avail / gib:.1f} GiB of memory available (use a smaller -c)")


class Context:
    """A KV cache of `n_ctx` cells plus scratch buffers: llama_context for one sequence.

    `decode(tokens)` appends tokens at the next positions (llama_decode with a one-sequence batch)
    and returns the logits of the last token (or of every token with `all_logits=True`).
    """

    def __init__(self, model: Model, n_ctx: int = 4096, n_batch: int = 2048, n_ubatch: int = 512,
                 cache_type_k: str = "f16", cache_type_v: str = "f16", n_threads: int | None = None,
                 batch_invariant: bool = True, flash_attn: bool = True, batched_kernels: bool = False,
                 rope: RopeParams | None = None, n_seq_max: int = 1, kv_unified: bool = False):
        hp = model.hparams if rope is None else with_rope(model.hparams, rope)  # rope: the --rope-*/--yarn-* flags
        if n_ctx <= 0:
            n_ctx = hp.n_ctx_train
        from kernels.attention import N_KV_PAD

        n_ctx = -(-n_ctx // N_KV_PAD) * N_KV_PAD  # llama_context pads n_ctx to a multiple of 256
        if not 1 <= n_seq_max <= LLAMA_MAX_SEQ:
            raise ModelError(f"n_seq_max must be <= {LLAMA_MAX_SEQ}" if n_seq_max > LLAMA_MAX_SEQ
                             else "n_seq_max must be >= 1")
        # n_ctx_total: llama_n_ctx, what llama-completion checks prompts and a full context against; with -np N
        # (and no unified cache) each sequence's cache has n_ctx / N cells (padded), this one sequence's included
        self.n_ctx_total = n_ctx
        self.n_seq_max = n_seq_max
        self.n_stream = 1 if kv_unified else n_seq_max  # llama_kv_cache's streams: one per sequence unless unified
        if n_seq_max > 1 and not kv_unified:
            n_ctx = -(-(n_ctx // n_seq_max) // N_KV_PAD) * N_KV_PAD  # n_ctx_seq
            self.n_ctx_total = n_ctx * n_seq_max
        check_cache_types(cache_type_k, cache_type_v, flash_attn, hp.n_embd_head)
        check_cache_memory(hp, n_ctx, cache_type_k, cache_type_v)
        self.model = model
        self.hp = hp
        self.n_ctx = n_ctx
        self.n_batch = max(1, n_batch)
        self.n_ubatch = max(1, min(n_ubatch, self.n_batch))
        self.cache_type = cache_type_k
        # llama.cpp sums attention in tinyBLAS order for batches of >= 2 tokens and in ggml_vec_dot order
        # for single tokens, and its repacked Q4_K products per 64 weights in groups of 4 tokens but per
        # 256 alone, so its logits depend on batching (fixtures README 5). By default we use the
        # single-token orders always: prefill in any split equals token-by-token decoding bit for bit.
        # batch_invariant=False follows llama.cpp's choices (eval-callback uses it to line up with logs).
        # batched_kernels: batch-invariant too, but llama.cpp's kernels of large batches for every row (its FA
        # tiled kernel, tinyBLAS, the repacked and tiled gemms), whatever the batch: perplexity, whose batches
        # all are large in llama.cpp, uses them.
        self.batch_invariant = batch_invariant
        self.order = Order.LLAMA if not batch_invariant else Order.BATCHED if batched_kernels else Order.SINGLE
        # decode short batches token by token (set on a cold kernel cache, batch-invariant order only)
        self.single_token_batches = False
        # one token's blocks as one jitted call each (kernels/layer.py, GraphOps.block); off on a cold kernel
        # cache, whose helper compiles them for later runs (op by op gives the same bits)
        self.one_call_blocks = True
        # flash attention: llama.cpp's FLASH_ATTN_EXT graph (kernels/flash_attn.py), whose V cache is not
        # transposed; off: the soft_max graph (kernels/attention.py)
        self.flash_attn = flash_attn
        if flash_attn and hp.n_embd_head % 64:
            raise ModelError(f"flash attention: head size {hp.n_embd_head} is not a multiple of 64 (not supported yet)")
        if n_threads is not None:
            from kernels.config import set_num_threads

            set_num_threads(n_threads)
        self.cache_type_v = cache_type_v
        # llama.cpp rotates Q/K (quantized K cache) and V/output (quantized V cache) by a Hadamard matrix
        from kernels.kv_cache import QUANTIZED, ROT_SIZE_V, rot_size_k

        d = hp.n_embd_head
        self.rot_k = rot_size_k(d) if cache_type_k in QUANTIZED and d % 64 == 0 else 0  # (with or without FA)
        self.rot_v = ROT_SIZE_V if flash_attn and cache_type_v in QUANTIZED and d % 64 == 0 else 0
        self.k_cache = []
        self.v_cache = []
        dtype = CACHE_TYPES.get(cache_type_v)  # (without flash attention V is F16 or F32; K may be quantized)
        from kernels.kv_cache import cell_array

        for _ in range(hp.n_layer):
            # layouts of llama.cpp's buffers (kernels/attention.py, kernels/kv_cache.py); np.zeros: unwritten
            # cells read as 0
            if flash_attn:  # (cell, head, dim), V too
                self.k_cache.append(cell_array(cache_type_k, n_ctx, hp.n_head_kv, hp.n_embd_head))
                self.v_cache.append(cell_array(cache_type_v, n_ctx, hp.n_head_kv, hp.n_embd_head))
            else:
                self.k_cache.append(cell_array(cache_type_k, n_ctx, hp.n_head_kv, hp.n_embd_head))  # (cell, head, dim)
                self.v_cache.append(np.zeros((hp.n_head_kv, hp.n_embd_head, n_ctx), dtype=dtype))  # V^T: (head, dim, cell)
        self.n_past = 0  # the next position; cells 0..n_past-1 hold positions 0..n_past-1 while cells is None
        # llama.cpp's cell placement once a context shift or self-extend moved positions (kv_cells.KVCells)
        self.cells: KVCells | None = None
        # control vectors (llama_adapter_cvec, synapse_cli/adapters.py): per layer the (n_embd,) direction its
        # block adds to its output, or None; None: none at all
        self.cvec: list[np.ndarray | None] | None = None
        # LoRA adapters (synapse_cli/adapters.py): (adapter, scale) in the order the graph adds them, or None
        self.loras: list | None = None
        self._layer_list = None  # layer_list(): made on first use (False: not possible)
        self.long_view_form_ready = False  # GraphOps.layers: the long views' block form compiled ahead
        self._k_zero, self._k_zero_key = None, None  # (_k_stand_in)
        self.cell_pos = np.arange(n_ctx, dtype=np.int32)
        self._kv_pos_key = None  # (n_used, n_kv) of the cached _kv_positions array
        self.t_prompt_ms = 0.0
        self.t_eval_ms = 0.0

    def layer_list(self):
        """The layers' arguments of kernels/layer.decode_layers_for in this context (made on first use), or None
        where one call cannot take them: blocks without a one-call form or whose products differ in kind, or
        per-layer arrays of different numba types."""
        if self._layer_list is None:
            from kernels.layer import layer_list

            self._layer_list = False
            m = self.model
            if len({L.block_kinds for L in m.layers}) == 1 and m.layers[0].block_kinds is not None:
                norms = [L.attn_norm for L in m.layers[1:]] + [m.output_norm]  # each block's next norm
                made = layer_list(tuple(
                    (L.ffn_norm, nxt, *L.block_products, L.block_biases, self.k_cache[il], self.v_cache[il])
                    for il, (L, nxt) in enumerate(zip(m.layers, norms))))
                self._layer_list = False if made is None else made  # (no truth test: a List's len is jitted)
        return self._layer_list if self._layer_list is not False else None

    def save_state(self):
        """A copy of everything decode() changes (the KV cache, the cells and the position), for load_state()."""
        return ([k.copy() for k in self.k_cache], [v.copy() for v in self.v_cache], self.n_past,
                None if self.cells is None else self.cells.copy())

    def load_state(self, state) -> None:
        ks, vs, n_past, cells = state
        for dst, src in zip(self.k_cache + self.v_cache, ks + vs):
            dst[...] = src
        self.n_past = n_past
        self.cells = None if cells is None else cells.copy()

    # --- llama_memory_seq_* of the one sequence: a context shift and self-extend move positions

    def _moved_cells(self) -> KVCells:
        if self.cells is None:
            self.cells = KVCells(self.n_ctx, self.n_past)
        return self.cells

    def seq_pos_max(self) -> int:
        """llama_memory_seq_pos_max: the largest position the cache holds, -1 when empty."""
        if self.cells is None:
            return self.n_past - 1
        return int(self.cells.pos.max()) if self.cells.used() else -1

    def seq_rm(self, p0: int, p1: int) -> None:
        """llama_memory_seq_rm(mem, 0, p0, p1): empty the cells of positions [p0, p1) (p1 < 0: to the end). The
        caller sets n_past, the position of the next token (llama.cpp's batch positions are the caller's)."""
        self._moved_cells().seq_rm(p0, p1)

    def seq_add(self, p0: int, p1: int, delta: int) -> None:
        """llama_memory_seq_add: positions [p0, p1) move by delta; their K is rotated at the next decode."""
        self._moved_cells().seq_add(p0, p1, delta)

    def seq_div(self, p0: int, p1: int, d: int) -> None:
        """llama_memory_seq_div: positions [p0, p1) are divided by d (self-extend)."""
        self._moved_cells().seq_div(p0, p1, d)

    def apply_k_shift(self) -> None:
        """llama_kv_cache::update's K-shift graph: every cell's K (all n_ctx of them, moved or not, as llama.cpp's
        view) goes through ROPE by its pending shift, with the context's rope parameters; F16 rounded back (ggml's
        F16 rope), a quantized cache dequantized, rotated back by the Hadamard matrix, roped, rotated again and
        quantized (build_rope_shift)."""
        from kernels.kv_cache import KV_TYPES, QUANTIZED, fwht_rows, store, to_f32
        from kernels.rope import rope

        cells, hp = self.cells, self.hp
        if self.cache_type == "bf16":
            raise ModelError("the context shift needs an F16, F32 or quantized K cache: llama.cpp's ROPE has no "
                             "BF16 kernel")
        rope_args = self._rope_args()
        shape = (self.n_ctx, hp.n_head_kv, hp.n_embd_head)
        code = KV_TYPES[self.cache_type][0]
        every = np.arange(self.n_ctx, dtype=np.int32)
        for k in self.k_cache:
            if self.cache_type in QUANTIZED:
                x = np.empty(shape, np.float32)
                to_f32(code, k, self.n_ctx, x)
                if self.rot_k:
                    fwht_rows(x, self.rot_k)
            else:
                x = k.view(np.float16).astype(np.float32) if k.dtype == np.uint16 else k.copy()
            out = np.empty(shape, np.float32)
            rope(x, cells.shift, out, *rope_args)
            if self.cache_type in QUANTIZED:
                if self.rot_k:
                    fwht_rows(out, self.rot_k)
                store(code, k, out, every)
            elif k.dtype == np.uint16:
                k[...] = out.astype(np.float16).view(np.uint16)
            else:
                k[...] = out
        cells.reset_shift()

    def truncate(self, n: int) -> None:
        """Forget the positions from n on (llama_memory_seq_rm(seq, n, -1)); their cells are zeroed as llama.cpp's
        buffer clear does (only cells below n_past were written: the rest are still zero, and untouched pages)."""
        if self.cells is not None:  # (moved cells: only emptied, as llama.cpp's seq_rm)
            self.cells.seq_rm(n, -1)
            self.n_past = min(self.n_past, n)
            return
        n_past = self.n_past
        if n >= n_past:
            return
        for k, v in zip(self.k_cache, self.v_cache):
            k[n:n_past] = 0
            if self.flash_attn:
                v[n:n_past] = 0
            else:
                v[:, :, n:n_past] = 0  # (V transposed)
        self.n_past = n

    def reset(self) -> None:
        """Forget the sequence (llama_memory_clear)."""
        if self.cells is not None:
            for a in self.k_cache + self.v_cache:
                a[...] = 0
            self.cells, self.n_past = None, 0
        self.truncate(0)

    # --- llama_decode -------------------------------------------------------------------------

    def decode(self, tokens, all_logits: bool = False, trace: TraceHook | None = None,
               n_outputs: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Evaluate `tokens` at positions n_past.. and return logits: (n_vocab,) for the last token,
        or (len(tokens), n_vocab) with `all_logits`, or (n_outputs, n_vocab) for the last n_outputs tokens (a
        llama_batch whose output flags are set on a suffix: only those rows go through the last layer's FFN and
        the head, as llama.cpp computes them). Splits into micro-batches of n_ubatch. out: a (>= rows, n_vocab)
        float32 array to write the returned rows into, for a caller that decodes many batches (a new array of
        a batch's logits, over 100 MB for a large vocabulary, costs its page faults every time)."""
        tokens = np.asarray(tokens, dtype=np.int32)
        n = len(tokens)
        if n == 0:
            raise ModelError("decode: empty batch")
        if self.single_token_batches and 1 < n <= SINGLE_TOKEN_BATCH_MAX and trace is None:
            logits = self._decode_token_by_token(tokens, all_logits, n_outputs)
            if out is None:
                return logits
            out[: len(logits) if logits.ndim == 2 else 1] = logits
            return out[: len(logits)] if logits.ndim == 2 else out[0]
        if n > self.n_batch:
            raise ModelError(f"decode: batch of {n} tokens exceeds n_batch {self.n_batch}")
        if self.cells is None and self.n_past + n > self.n_ctx:
            raise ModelError(f"context is full: {self.n_past} + {n} tokens > n_ctx {self.n_ctx}")
        if tokens.min() < 0 or tokens.max() >= self.hp.n_vocab:
            bad = int(tokens[(tokens < 0) | (tokens >= self.hp.n_vocab)][0])
            raise ModelError(f"token id {bad} out of range [0, {self.hp.n_vocab})")
        outs = []
        rows = 0  # logits rows written so far (into `out` when given)
        for s in range(0, n, self.n_ubatch):
            ub = tokens[s : s + self.n_ubatch]
            last = s + len(ub) == n
            want = "all" if all_logits else ("last" if last else "none")
            if n_outputs is not None:  # rows of this micro-batch among the last n_outputs of the batch
                k = max(0, s + len(ub) - max(s, n - n_outputs))
                want = "all" if k == len(ub) else ("none" if k == 0 else k)
            logits = self._forward_ubatch(ub, want, trace, None if out is None else out[rows:])
            if logits is not None:
                outs.append(logits)
                rows += len(logits)
        if out is not None:
            return out[:rows] if all_logits or n_outputs is not None else out[rows - 1]
        if all_logits or n_outputs is not None:
            if len(outs) == 1:
                return outs[0]  # (no copy of up to n_ubatch x n_vocab floats)
            return np.concatenate(outs, axis=0) if outs else np.empty((0, self.hp.n_vocab), np.float32)
        return outs[-1][-1]

    def _decode_token_by_token(self, tokens, all_logits: bool, n_outputs: int | None) -> np.ndarray:
        """decode() of a short batch one token at a time: the same bits in the batch-invariant order (synapse's
        contract), through the single-token kernels only - a first run on a cold kernel cache uses it instead
        of compiling the batch kernels (synapse_cli/session.warm_up)."""
        n = len(tokens)
        rows = []
        for i in range(n):
            wanted = all_logits or (i == n - 1 if n_outputs is None else i >= n - n_outputs)
            r = self.decode(tokens[i:i + 1], n_outputs=1 if wanted else 0)
            if wanted:
                rows.append(r)
        if all_logits or n_outputs is not None:
            return np.concatenate(rows, axis=0) if rows else np.empty((0, self.hp.n_vocab), np.float32)
        return rows[-1][-1]

    def _graph_ops(self, T: int, trace: TraceHook | None):
        """The operations of one graph evaluation of T tokens at positions n_past.. (traced with a hook)."""
        from kernels.attention import n_kv_padded

        from .graph_ops import GraphOps, TracedGraphOps

        hp = self.hp
        pos = np.arange(self.n_past, self.n_past + T, dtype=np.int32)  # (T,) one sequence
        if self.cells is None:  # cell i = position i
            cells, n_used = pos, self.n_past + T
            n_kv = n_kv_padded(n_used, self.n_ctx)  # attended cells, as llama_kv_cache::get_n_kv
            kv_pos = self._kv_positions(n_used, n_kv)
        else:  # llama.cpp's placement: a pending K-shift first, then the cells its slot search picks
            if self.cells.has_shift:
                self.apply_k_shift()
            cells = self.cells.find_slot(T)
            if cells is None:
                raise ModelError(f"decode: no room for {T} tokens in the KV cache")
            self.cells.apply(cells, pos)
            n_used = self.cells.used_max_p1()
            n_kv = n_kv_padded(n_used, self.n_ctx)
            kv_pos = self.cells.pos[:n_kv].copy()
        rope_args = self._rope_args()
        temp = attn_temp_scale(hp, pos) if hp.f_attn_temp_scale != 0.0 else None  # (T,) mistral3
        args = (self, T, pos, cells, n_used, n_kv, kv_pos, rope_args, temp)
        if trace is None:
            return GraphOps(*args)
        from .graph_trace import GraphTrace

        return TracedGraphOps(GraphTrace(trace, hp.arch, T, self.n_ctx, n_kv, self.cache_type_v), *args)

    def _rope_args(self) -> tuple:
        """The trailing arguments of kernels/rope.py's rope for this context (ROPE's parameters)."""
        from kernels.rope import rope_yarn_corr_dims

        hp = self.hp
        corr_dims = rope_yarn_corr_dims(hp.n_rot, hp.n_ctx_orig_yarn, hp.rope_freq_base,
                                        hp.yarn_beta_fast, hp.yarn_beta_slow)
        return (hp.n_rot, hp.rope_neox, hp.rope_freq_base, hp.rope_freq_scale, hp.yarn_ext_factor,
                hp.yarn_attn_factor, corr_dims, self.model.rope_freqs)

    def warm_steps(self) -> list[tuple[str, Callable[[], None]]]:
        """A one-token graph cut into its operations (GraphOps method name, call), layer by layer in graph
        order, on scratch buffers: a cold first run compiles them in two processes, the products
        (WARM_PRODUCTS) in the helper (synapse_cli/warm.py), the rest in the main one. The results mean nothing
        (call reset() after)."""
        m, hp = self.model, self.hp
        H, Hkv, D, E, F = hp.n_head, hp.n_head_kv, hp.n_embd_head, hp.n_embd, hp.n_ff
        ops = self._graph_ops(1, None)
        x, cur, a, fi, fo = (np.zeros((1, E), np.float32) for _ in range(5))
        q, k, v, kqv = (np.zeros((1, n * D), np.float32) for n in (H, Hkv, Hkv, H))
        q_r, k_r = np.zeros((1, H, D), np.float32), np.zeros((1, Hkv, D), np.float32)
        gate, up = np.zeros((1, F), np.float32), np.zeros((1, F), np.float32)
        logits = np.zeros((1, hp.n_vocab), np.float32)
        steps = [("embd", lambda: ops.embd(np.zeros(1, np.int32), x)),
                 ("norm", lambda: ops.norm(x, m.layers[0].attn_norm, cur, ("", ""), ""))]
        for il, L in enumerate(m.layers):
            nxt = m.layers[il + 1].attn_norm if il + 1 < hp.n_layer else m.output_norm
            steps += [("qkv", lambda il=il, L=L: ops.qkv(il, L, cur, q, k, v, q_r, k_r)),
                      ("attention", lambda il=il: ops.attention(il, q_r, k_r, v.reshape(1, Hkv, D), kqv)),
                      ("attn_out", lambda il=il, L=L: ops.attn_out(il, L, kqv, a)),
                      ("add_norm", lambda L=L: ops.add_norm("", a, x, fi, L.ffn_norm, cur, ("", ""), "")),
                      ("gate_up", lambda il=il, L=L: ops.gate_up(il, L, cur, gate, up)),
                      ("swiglu", lambda il=il: ops.swiglu(il, gate, up)),
                      ("ffn_down", lambda il=il, L=L: ops.ffn_down(il, L, gate, fo)),
                      ("add_norm", lambda w=nxt: ops.add_norm("", fo, fi, x, w, cur, ("", ""), ""))]
        steps += [("logits", lambda: ops.logits(cur, logits))]
        return steps

    def _forward_ubatch(self, tokens: np.ndarray, want: str | int, trace: TraceHook | None,
                        out: np.ndarray | None = None):
        """One graph evaluation of a micro-batch (llama.cpp's graph for llama/qwen2/mistral3).

        want: "all" (logits of every token), an int n (the last n tokens), "last" (only the last token goes through the last
        layer's FFN and the head, as llama.cpp's out_ids) or "none" (fill the cache only). With a trace
        hook, every node of llama.cpp's graph is also handed to it (synapse_cli/graph_ops.py). out: an array
        whose first rows receive the logits.
        """
        m, hp = self.model, self.hp
        T = len(tokens)
        H, Hkv, D, E, F = hp.n_head, hp.n_head_kv, hp.n_embd_head, hp.n_embd, hp.n_ff
        ops = self._graph_ops(T, trace)

        x = empty_aligned((T, E), dtype=np.float32)  # (T, n_embd) residual stream
        cur = empty_aligned((T, E), dtype=np.float32)  # normed input of the current block
        q, k, v = (empty_aligned((T, n * D), dtype=np.float32) for n in (H, Hkv, Hkv))
        q_r = empty_aligned((T, H, D), dtype=np.float32)  # after rope
        k_r = empty_aligned((T, Hkv, D), dtype=np.float32)
        kqv_out = empty_aligned((T, H * D), dtype=np.float32)
        attn_out = empty_aligned((T, E), dtype=np.float32)
        ffn_inp = empty_aligned((T, E), dtype=np.float32)
        gate, up = empty_aligned((T, F), dtype=np.float32), empty_aligned((T, F), dtype=np.float32)
        ffn_out = empty_aligned((T, E), dtype=np.float32)

        ops.embd(tokens, x)
        ops.norm(x, m.layers[0].attn_norm, cur, ("norm-0", "attn_norm-0"), "blk.0.attn_norm.weight")
        out_norm = None
        blocks = enumerate(m.layers)
        if T == 1 and (want in ("all", "last") or want == 1):  # the last block keeps its row: maybe one call
            normed = empty_aligned((T, E), dtype=np.float32)
            if ops.layers(x, cur, normed, q, k, v, q_r, k_r, kqv_out, attn_out, ffn_inp, gate, up, ffn_out):
                out_norm, blocks = normed, ()
        for il, L in blocks:
            last = il == hp.n_layer - 1
            if not last or want in ("all", "last") or want == 1:  # the block keeps its rows: maybe one call
                normed = cur if not last else empty_aligned((T, E), dtype=np.float32)
                if ops.block(il, L, x, cur, m.output_norm if last else m.layers[il + 1].attn_norm, normed, q, k,
                             v, q_r, k_r, kqv_out, attn_out, ffn_inp, gate, up, ffn_out):
                    out_norm = normed if last else None
                    continue
            # attention block: (its norm is done) Q/K/V with rope, KV cache, attention, output projection
            ops.qkv(il, L, cur, q, k, v, q_r, k_r)
            ops.attention(il, q_r, k_r, v.reshape(T, Hkv, D), kqv_out)
            ops.attn_out(il, L, kqv_out, attn_out)
            a_rows, x_rows, Tn = attn_out, x, T
            if last and want != "all":
                if want == "none" and trace is None:
                    break
                # only the rows whose logits are needed go on (llama.cpp's out_ids); a micro-batch without
                # outputs still runs that tail of the graph on 0 rows, and traces it
                Tn = want if isinstance(want, int) else (1 if want == "last" else 0)
                a_rows, x_rows = ops.out_rows(attn_out, x, Tn)
            fi = ffn_inp[:Tn]
            fcur, gt, u, fo = cur[:Tn], gate[:Tn], up[:Tn], ffn_out[:Tn]
            # residual, then the feed-forward block: norm, SwiGLU FFN, residual and the next block's norm
            ops.add_norm(f"ffn_inp-{il}", a_rows, x_rows, fi, L.ffn_norm, fcur, (f"norm-{il}", f"ffn_norm-{il}"),
                         f"blk.{il}.ffn_norm.weight")
            ops.gate_up(il, L, fcur, gt, u)
            ops.swiglu(il, gt, u)
            ops.ffn_down(il, L, gt, fo)
            x = empty_aligned((Tn, E), dtype=np.float32)
            if il + 1 < hp.n_layer:
                w, normed, names = m.layers[il + 1].attn_norm, cur, (f"norm-{il + 1}", f"attn_norm-{il + 1}")
                w_name = f"blk.{il + 1}.attn_norm.weight"
            else:  # the rows that reach the output head: its norm
                out_norm = empty_aligned((Tn, E), dtype=np.float32)
                w, normed, names, w_name = m.output_norm, out_norm, ("norm", "result_norm"), "output_norm.weight"
            direction = None if self.cvec is None else self.cvec[il]
            if direction is None:
                ops.add_norm(f"l_out-{il}", fo, fi, x, w, normed, names, w_name)
            else:  # a control vector: the residual, then the layer's direction (build_cvec), then the norm
                ops.add(None if hp.arch == "qwen2" else f"ffn_out-{il}", fo, fi, x)  # (qwen2 leaves it unnamed)
                ops.add(f"l_out-{il}", x, direction, x)
                ops.norm(x, w, normed, names, w_name)

        self.n_past += T
        if out_norm is None:  # a micro-batch without outputs stopped before the last layer's FFN
            return None
        if out is None:
            logits = empty_aligned((x.shape[0], hp.n_vocab), dtype=np.float32)
        else:
            logits = out[: x.shape[0]]
        ops.logits(out_norm, logits)
        return logits if want != "none" else None

    def store_and_attend(self, il: int, q_r, k_r, v3, pos, cells, n_used: int, n_kv: int, kv_pos, kqv_out, kq=None,
                         kq_sm=None):
        """Write K/V (T, Hkv, D) at the batch's cells (T,) and attend over the first n_kv cells, of positions kv_pos
        (n_kv,) (-1: empty; n_used: the cells up to the last used one): kqv_out (T, H*D).
        Flash attention (kernels/flash_attn.py) or the soft-max graph (kernels/attention.py; kq, kq_sm
        (H, T, n_kv) receive its intermediate tensors when given)."""
        from kernels import kv_cache
        from kernels.attention import kv_store
        from kernels.config import work_chunks
        from kernels.flash_attn import flash_attn_any, flash_attn_ext

        hp = self.hp
        if self.flash_attn:
            kv_cache.store(kv_cache.KV_TYPES[self.cache_type][0], self.k_cache[il], k_r, cells)
            kv_cache.store(kv_cache.KV_TYPES[self.cache_type_v][0], self.v_cache[il], v3, cells)
            if self._fa_plain:
                k16, v16 = self._fa_operands(il, n_kv)
                flash_attn_ext(q_r, k16, v16, n_kv, kv_pos, pos, hp.kq_scale, kqv_out, self.order, work_chunks())
            else:
                flash_attn_any(q_r, *self._fa_operands_any(il, n_kv), kv_pos, pos, hp.kq_scale, kqv_out)
        else:
            k_cache = self.k_cache[il]
            if self.cache_type == self.cache_type_v:
                kv_store(k_cache, self.v_cache[il], k_r, v3, cells)
            else:  # K of another type (quantized, bf16, or the other float): its cells, then V^T's columns
                kv_cache.store(kv_cache.KV_TYPES[self.cache_type][0], k_cache, k_r, cells)
                v = v3.astype(np.float16).view(np.uint16) if self.v_cache[il].dtype == np.uint16 else v3
                self.v_cache[il][:, :, cells] = v.transpose(1, 2, 0)
            if self.order == Order.BATCHED and q_r.shape[0] == 1:
                # the batched kernels (from 2 rows) for a lone row: computed beside a copy of itself
                q_r, pos = np.concatenate([q_r, q_r]), np.concatenate([pos, pos])
                out2 = np.empty((2, kqv_out.shape[1]), np.float32)
                kq2, sm2 = (None if a is None else np.empty((a.shape[0], 2, a.shape[2]), np.float32) for a in (kq, kq_sm))
                self._attend_softmax(il, q_r, n_used, kv_pos, pos, out2, kq2, sm2, True)
                kqv_out[:] = out2[:1]
                for a, a2 in ((kq, kq2), (kq_sm, sm2)):
                    if a is not None:
                        a[:] = a2[:, :1]
                return
            self._attend_softmax(il, q_r, n_used, kv_pos, pos, kqv_out, kq, kq_sm, self.order != Order.SINGLE)

    def _attend_softmax(self, il: int, q_r, n_used: int, kv_pos, pos, out, kq, kq_sm, batch_paths: bool):
        """The soft_max graph (kernels/attention.py). With a K cache of another type than V's F16/F32 (quantized,
        BF16, the other float) its kq products are the model's matmul of that type (kq_product), handed to the
        kernel."""
        from kernels.attention import attention, n_kv_padded

        k_cache, v_cache = self.k_cache[il], self.v_cache[il]
        kq_in = None
        if self.cache_type != self.cache_type_v:
            kq_in = self.kq_product(il, q_r, n_kv_padded(n_used, self.n_ctx))
            k_cache = self._k_stand_in(v_cache.dtype)
        attention(q_r, k_cache, v_cache, n_used, kv_pos, pos, self.hp.kq_scale, out, kq, kq_sm, batch_paths, kq_in)

    def kq_product(self, il: int, q_r, n_kv: int) -> np.ndarray:
        """kq = ggml_mul_mat(K view, Q) for a K cache of type ctk (n_kv cells, each KV head's rows a weight of that
        type, never repacked: a cache buffer): q_r (T, H, D) -> (H, T, n_kv), in the context's order (vec_dot or,
        for llama.cpp's batches, tinyBLAS)."""
        from kernels.ggml_type import GGMLType
        from kernels.matmul import Weight, matmul
        from kernels.quants.base import repacking

        T, H, D = q_r.shape
        G = self.hp.n_head_kv
        k = self.k_cache[il]
        kq = np.empty((H, T, n_kv), np.float32)
        with repacking(False):
            for g in range(G):
                w = Weight(GGMLType[self.cache_type.upper()], np.ascontiguousarray(k[:n_kv, g]).view(np.uint8).reshape(-1),
                           D, n_kv)
                for h in range(g * (H // G), (g + 1) * (H // G)):
                    matmul(w, np.ascontiguousarray(q_r[:, h, :]), kq[h], self.order)
        return kq

    def _k_stand_in(self, dtype) -> np.ndarray:
        """A zero K cache of V's type: the soft_max kernel's K argument when kq comes from kq_product (it reads
        only its shape and type)."""
        key = (self.n_ctx, dtype)
        if self._k_zero_key != key:
            self._k_zero = np.zeros((self.n_ctx, self.hp.n_head_kv, self.hp.n_embd_head), dtype)
            self._k_zero_key = key
        return self._k_zero

    def _kv_positions(self, n_used: int, n_kv: int) -> np.ndarray:
        """(n_kv,) int32: the position of each attended cell, -1 where it is empty (the mask's input); the same
        array for every layer of a graph."""
        if self._kv_pos_key != (n_used, n_kv):
            self._kv_pos = np.where(self.cell_pos[:n_kv] < n_used, self.cell_pos[:n_kv], -1).astype(np.int32)
            self._kv_pos_key = (n_used, n_kv)
        return self._kv_pos

    def cache_views(self, il: int, n_kv: int):
        """Float32 copies of layer il's cache as llama.cpp's graph views show them: the whole K cache
        (n_ctx, n_embd_k_gqa), the whole V^T cache in memory order (n_embd_v_gqa * n_ctx,), the K view of
        n_kv cells (n_kv, Hkv, D) and the V view (D, Hkv, n_kv) (ne {n_kv, Hkv, D})."""
        from kernels.kv_cache import KV_TYPES, to_f32

        k, v = self.k_cache[il], self.v_cache[il]
        if self.cache_type not in CACHE_TYPES:  # a quantized or BF16 K (its values as float32; they are not printed)
            f = np.empty((self.n_ctx, self.hp.n_head_kv, self.hp.n_embd_head), np.float32)
            to_f32(KV_TYPES[self.cache_type][0], k, self.n_ctx, f)
            k = f
        elif k.dtype == np.uint16:
            k = k.view(np.float16).astype(np.float32)
        if v.dtype == np.uint16:
            v = v.view(np.float16).astype(np.float32)
        k_all = k.reshape(self.n_ctx, -1)
        v_flat = v.reshape(-1)
        return k_all, v_flat, k[:n_kv], v[:, :, :n_kv].transpose(1, 0, 2)

    @property
    def _fa_plain(self) -> bool:
        """F16/F32 K and V of one type: flash attention on F16 operands (all three of ggml's kernels)."""
        return self.cache_type == self.cache_type_v and self.cache_type in CACHE_TYPES

    def _fa_operands_any(self, il: int, n_kv: int):
        """(K F16/BF16 bits, K blocks, K type code, V F16 bits, V float32 values, V type code) for flash_attn_any: an F32 cache
        is cast to F16 first (the graph's CPY), F16 V is accumulated in F16, other V types as float32."""
        from kernels.kv_cache import F16, KV_TYPES, to_f32

        k, v = self.k_cache[il][:n_kv], self.v_cache[il][:n_kv]
        kcode, vcode = KV_TYPES[self.cache_type][0], KV_TYPES[self.cache_type_v][0]
        if k.dtype == np.float32:
            k, kcode = k.astype(np.float16).view(np.uint16), F16
        k16, kq8 = (k, np.zeros((1, 1, 1), np.uint8)) if k.dtype == np.uint16 else (np.zeros((1, k.shape[1], 1), np.uint16), k)
        v16 = np.zeros((1, 1, 1), np.uint16)
        v32 = np.zeros((1, 1, 1), np.float32)
        if v.dtype == np.float32:
            v16, vcode = v.astype(np.float16).view(np.uint16), F16
        elif vcode == F16:
            v16 = v
        else:
            v32 = np.empty((n_kv, v.shape[1], self.hp.n_embd_head), np.float32)
            to_f32(vcode, v, n_kv, v32)
        return k16, kq8, kcode, v16, v32, vcode

    def _fa_operands(self, il: int, n_kv: int):
        """FLASH_ATTN_EXT's K and V operands: the first n_kv cells as F16 bits (an F32 cache is cast to F16
        first, the graph's CPY nodes)."""
        k, v = self.k_cache[il][:n_kv], self.v_cache[il][:n_kv]
        if k.dtype == np.uint16:
            return k, v
        return k.astype(np.float16).view(np.uint16), v.astype(np.float16).view(np.uint16)

    def trace_attention(self, g, il, k_r, v3, q_r, temp, n_kv, kq, kq_sm, kqv_out):
        """The cache and attention nodes of llama.cpp's graph (GraphTrace.kv_store/attention/attention_fa)."""
        hp, T = self.hp, q_r.shape[0]
        H, D = hp.n_head, hp.n_embd_head
        q_name = ("Qcur_attn_temp_scaled" if temp is not None else "Qcur") + f"-{il}"
        if self.flash_attn:
            from kernels.kv_cache import KV_TYPES, to_f32

            vals = []  # every cell as float32 (the printed values, for the printable types)
            for cache, t in ((self.k_cache[il], self.cache_type), (self.v_cache[il], self.cache_type_v)):
                if t in CACHE_TYPES:
                    vals.append(cache.view(np.float16).astype(np.float32) if t == "f16" else cache)
                else:
                    f = np.empty((self.n_ctx, hp.n_head_kv, D), np.float32)
                    to_f32(KV_TYPES[t][0], cache, self.n_ctx, f)
                    vals.append(f)
            k, v = vals
            rotated = " (reshaped)"  # the name of a Hadamard-rotated Q, K or V (GraphTrace.rotation)
            g.attention_fa(il, rotated if self.rot_k else q_name, q_r, k_r, v3, k.reshape(self.n_ctx, -1),
                           v.reshape(self.n_ctx, -1), k[:n_kv], v[:n_kv], k[:n_kv].astype(np.float16).astype(np.float32),
                           v[:n_kv].astype(np.float16).astype(np.float32), kqv_out,
                           rotated if self.rot_k else None, rotated if self.rot_v else None,
                           (self.cache_type, self.cache_type_v))
            return
        k_all, v_flat, k_view, v_view = self.cache_views(il, n_kv)
        rotated = " (reshaped)" if self.rot_k else None  # the name of a Hadamard-rotated Q and K (GraphTrace.rotation)
        g.kv_store(il, k_r, v3, k_all, v_flat, self.cache_type, rotated)
        kqv = kqv_out.reshape(T, H, D).transpose(1, 0, 2)  # (H, T, D)
        g.attention(il, rotated or q_name, q_r, k_view, v_view, kq, kq_sm, kqv, kqv_out, self.cache_type)
