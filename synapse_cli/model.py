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

from .errors import ModelError
from .gguf import GGUFReader, TensorInfo
from .hparams import HParams, attn_temp_scale, load_hparams

# hook(name, op, value, srcs, ggml_type): see synapse_cli/evalcb.py
TraceHook = Callable[[str, str, np.ndarray, list, str], None]

KV_PAD = 256  # llama_kv_cache::get_n_kv pads the attended cells to a multiple of 256


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


class Model:
    """Weights of one GGUF file, memory-mapped; built by `Model.load`."""

    def __init__(self, path: str, reader: GGUFReader, hparams: HParams):
        self.path = path
        self.reader = reader
        self.hparams = hparams
        self.layers: list[LayerWeights] = []
        self.load_ms = 0.0

    # --- loading -------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path, progress: Callable[[int, int, str], None] | None = None) -> "Model":
        """Map `path`, check every tensor llama.cpp would create, and prepare the weights.

        `progress(done, total, name)` is called once per tensor (the CLI draws a Rich bar with it).
        """
        t0 = time.perf_counter()
        from kernels.matmul import Weight  # numba import happens here, not at CLI start-up

        path = str(path)
        reader = GGUFReader(path)
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

        def matrix(name: str, n_in: int, n_out: int, required: bool = True):
            t = tensor(name, (n_in, n_out), required)
            if t is None:
                return None
            return Weight(t.ggml_type, t.data, n_in, n_out, name=name)

        def vector(name: str, n: int, required: bool = True) -> np.ndarray | None:
            t = tensor(name, (n,), required)
            if t is None:
                return None
            return _as_f32(t)

        n_embd, n_ff = hp.n_embd, hp.n_ff
        n_q, n_kv = hp.n_embd_head * hp.n_head, hp.n_embd_k_gqa

        m.tok_embd = matrix("token_embd.weight", n_embd, hp.n_vocab)
        m.output_norm = vector("output_norm.weight", n_embd)
        m.output = matrix("output.weight", n_embd, hp.n_vocab, required=False)
        m.tied_output = m.output is None
        if m.tied_output:  # llama.cpp: "if output is NULL, init from the input tok embed"
            m.output = m.tok_embd
        m.rope_freqs = None
        if reader.tensor("rope_freqs.weight") is not None:
            m.rope_freqs = vector("rope_freqs.weight", hp.n_rot // 2)

        for il in range(hp.n_layer):
            p = f"blk.{il}."
            m.layers.append(LayerWeights(
                attn_norm=vector(p + "attn_norm.weight", n_embd),
                attn_q=matrix(p + "attn_q.weight", n_embd, n_q),
                attn_k=matrix(p + "attn_k.weight", n_embd, n_kv),
                attn_v=matrix(p + "attn_v.weight", n_embd, n_kv),
                attn_output=matrix(p + "attn_output.weight", n_q, n_embd),
                ffn_norm=vector(p + "ffn_norm.weight", n_embd),
                ffn_gate=matrix(p + "ffn_gate.weight", n_embd, n_ff),
                ffn_up=matrix(p + "ffn_up.weight", n_embd, n_ff),
                ffn_down=matrix(p + "ffn_down.weight", n_ff, n_embd),
                attn_q_b=vector(p + "attn_q.bias", n_q, required=False),
                attn_k_b=vector(p + "attn_k.bias", n_kv, required=False),
                attn_v_b=vector(p + "attn_v.bias", n_kv, required=False),
                attn_output_b=vector(p + "attn_output.bias", n_embd, required=False),
                ffn_gate_b=vector(p + "ffn_gate.bias", n_ff, required=False),
                ffn_up_b=vector(p + "ffn_up.bias", n_ff, required=False),
                ffn_down_b=vector(p + "ffn_down.bias", n_embd, required=False),
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

    def weight_bytes_per_token(self) -> int:
        """Bytes of weights one decoded token reads (every matrix once, one embedding row)."""
        hp = self.hparams
        emb_row = self.tok_embd.data.nbytes // hp.n_vocab
        total = sum(t.nbytes for t in self.reader.tensors if t.name != "token_embd.weight") + emb_row
        if self.tied_output:
            total += self.tok_embd.data.nbytes
        return total


def _as_f32(t: TensorInfo) -> np.ndarray:
    """A 1-D norm/bias tensor as float32 (a view when it already is F32)."""
    if t.ggml_type == GGMLType.F32:
        return t.data.view(np.float32)
    from kernels.dequant import dequantize

    return dequantize(t.ggml_type, t.data, t.n_elements)


CACHE_TYPES = {"f16": np.uint16, "f32": np.float32}


class Context:
    """A KV cache of `n_ctx` cells plus scratch buffers: llama_context for one sequence.

    `decode(tokens)` appends tokens at the next positions (llama_decode with a one-sequence batch)
    and returns the logits of the last token (or of every token with `all_logits=True`).
    """

    def __init__(self, model: Model, n_ctx: int = 4096, n_batch: int = 2048, n_ubatch: int = 512,
                 cache_type_k: str = "f16", cache_type_v: str = "f16", n_threads: int | None = None):
        from kernels import attention as attn_k

        hp = model.hparams
        if n_ctx <= 0:
            n_ctx = hp.n_ctx_train
        if cache_type_k not in CACHE_TYPES or cache_type_v not in CACHE_TYPES:
            raise ModelError(f"unsupported cache type {cache_type_k}/{cache_type_v} (f16 and f32 are)")
        if cache_type_k != cache_type_v:
            raise ModelError("-ctk and -ctv must be the same type")
        self.model = model
        self.hp = hp
        self.n_ctx = n_ctx
        self.n_batch = max(1, n_batch)
        self.n_ubatch = max(1, min(n_ubatch, self.n_batch))
        self.cache_type = cache_type_k
        if n_threads is not None:
            from kernels.config import set_num_threads

            set_num_threads(n_threads)
        self.k_cache = []
        self.v_cache = []
        for _ in range(hp.n_layer):
            k, v = attn_k.new_kv_cache(n_ctx, hp.n_head_kv, hp.n_embd_head, cache_type_k)
            self.k_cache.append(k)
            self.v_cache.append(v)
        self.n_past = 0  # cells 0..n_past-1 hold positions 0..n_past-1
        self.cell_pos = np.arange(n_ctx, dtype=np.int32)
        self.t_prompt_ms = 0.0
        self.t_eval_ms = 0.0

    def reset(self) -> None:
        """Forget the sequence (llama_memory_clear); cells are zeroed as llama.cpp's buffer clear does."""
        for k, v in zip(self.k_cache, self.v_cache):
            k[...] = 0
            v[...] = 0
        self.n_past = 0

    # --- llama_decode -------------------------------------------------------------------------

    def decode(self, tokens, all_logits: bool = False, trace: TraceHook | None = None) -> np.ndarray:
        """Evaluate `tokens` at positions n_past.. and return logits: (n_vocab,) for the last token,
        or (len(tokens), n_vocab) with `all_logits`. Splits into micro-batches of n_ubatch."""
        tokens = np.asarray(tokens, dtype=np.int32)
        n = len(tokens)
        if n == 0:
            raise ModelError("decode: empty batch")
        if n > self.n_batch:
            raise ModelError(f"decode: batch of {n} tokens exceeds n_batch {self.n_batch}")
        if self.n_past + n > self.n_ctx:
            raise ModelError(f"context is full: {self.n_past} + {n} tokens > n_ctx {self.n_ctx}")
        if tokens.min() < 0 or tokens.max() >= self.hp.n_vocab:
            bad = int(tokens[(tokens < 0) | (tokens >= self.hp.n_vocab)][0])
            raise ModelError(f"token id {bad} out of range [0, {self.hp.n_vocab})")
        outs = []
        for s in range(0, n, self.n_ubatch):
            ub = tokens[s : s + self.n_ubatch]
            last = s + len(ub) == n
            want = "all" if all_logits else ("last" if last else "none")
            logits = self._forward_ubatch(ub, want, trace)
            if logits is not None:
                outs.append(logits)
        if all_logits:
            return np.concatenate(outs, axis=0)
        return outs[-1][-1]

    def _forward_ubatch(self, tokens: np.ndarray, want: str, trace: TraceHook | None):
        from kernels.activations import swiglu
        from kernels.attention import attention, kv_store
        from kernels.matmul import matmul
        from kernels.norm import add, mul_rows, rms_norm
        from kernels.rope import rope, rope_yarn_corr_dims

        m, hp = self.model, self.hp
        T = len(tokens)
        H, Hkv, D = hp.n_head, hp.n_head_kv, hp.n_embd_head
        E, F = hp.n_embd, hp.n_ff
        pos = np.arange(self.n_past, self.n_past + T, dtype=np.int32)  # (T,)
        cells = pos  # one sequence: cell i holds position i
        n_used = self.n_past + T
        n_kv = min(self.n_ctx, max(KV_PAD, -(-n_used // KV_PAD) * KV_PAD))
        corr_dims = rope_yarn_corr_dims(hp.n_rot, hp.n_ctx_orig_yarn, hp.rope_freq_base,
                                        hp.yarn_beta_fast, hp.yarn_beta_slow)
        tr = trace

        def rope_(x, out):  # x: (T, n_heads, D)
            rope(x, pos, out, hp.n_rot, hp.rope_neox, hp.rope_freq_base, hp.rope_freq_scale,
                 hp.yarn_ext_factor, hp.yarn_attn_factor, corr_dims, m.rope_freqs)

        x = np.empty((T, E), dtype=np.float32)  # (T, n_embd) residual stream
        m.tok_embd.get_rows(tokens, x)
        if tr:
            tr("embd", "GET_ROWS", x, [("token_embd.weight", (E, hp.n_vocab, 1, 1)), ("inp_tokens", (T, 1, 1, 1))], "f32")

        cur = np.empty((T, E), dtype=np.float32)
        q = np.empty((T, H * D), dtype=np.float32)
        k = np.empty((T, Hkv * D), dtype=np.float32)
        v = np.empty((T, Hkv * D), dtype=np.float32)
        q_r = np.empty((T, H, D), dtype=np.float32)
        k_r = np.empty((T, Hkv, D), dtype=np.float32)
        kqv_out = np.empty((T, H * D), dtype=np.float32)
        gate = np.empty((T, F), dtype=np.float32)
        up = np.empty((T, F), dtype=np.float32)
        temp = attn_temp_scale(hp, pos) if hp.f_attn_temp_scale != 0.0 else None
        kq = kq_sm = None
        if tr:
            kq = np.empty((H, T, n_kv), dtype=np.float32)
            kq_sm = np.empty((H, T, n_kv), dtype=np.float32)

        for il, L in enumerate(m.layers):
            last_layer = il == hp.n_layer - 1
            sfx = f"-{il}"
            # attention block
            rms_norm(x, hp.f_norm_rms_eps, cur)
            if tr:
                tr("norm" + sfx, "RMS_NORM", cur, [(_prev_name(il), (E, T, 1, 1))], "f32")
            mul_rows(cur, L.attn_norm, cur)
            if tr:
                tr("attn_norm" + sfx, "MUL", cur, [("norm" + sfx, (E, T, 1, 1)), (f"blk.{il}.attn_norm.weight", (E, 1, 1, 1))], "f32")
            for name, W, b, out in (("Qcur", L.attn_q, L.attn_q_b, q), ("Kcur", L.attn_k, L.attn_k_b, k),
                                    ("Vcur", L.attn_v, L.attn_v_b, v)):
                matmul(W, cur, out)
                if tr:
                    tr(name + sfx, "MUL_MAT", out, [(W.name, (E, out.shape[1], 1, 1)), ("attn_norm" + sfx, (E, T, 1, 1))], "f32")
                if b is not None:
                    add(out, b, out)
                    if tr:
                        tr(name + sfx, "ADD", out, [(name + sfx, (out.shape[1], T, 1, 1)), (f"blk.{il}.{W.name.split('.')[2]}.bias", (out.shape[1], 1, 1, 1))], "f32")
            q3 = q.reshape(T, H, D)
            k3 = k.reshape(T, Hkv, D)
            v3 = v.reshape(T, Hkv, D)
            if tr:
                tr("Qcur" + sfx, "RESHAPE", q3, [("Qcur" + sfx, (H * D, T, 1, 1))], "f32")
                tr("Kcur" + sfx, "RESHAPE", k3, [("Kcur" + sfx, (Hkv * D, T, 1, 1))], "f32")
                tr("Vcur" + sfx, "RESHAPE", v3, [("Vcur" + sfx, (Hkv * D, T, 1, 1))], "f32")
            rope_(q3, q_r)
            rope_(k3, k_r)
            if tr:
                tr("Qcur" + sfx, "ROPE", q_r, [("Qcur" + sfx, (D, H, T, 1)), ("inp_pos", (T, 1, 1, 1))], "f32")
                tr("Kcur" + sfx, "ROPE", k_r, [("Kcur" + sfx, (D, Hkv, T, 1)), ("inp_pos", (T, 1, 1, 1))], "f32")
            if temp is not None:
                q_r *= temp[:, None, None]  # ggml_mul(Qcur, inp_attn_scale): one float multiply each
                if tr:
                    tr("Qcur_attn_temp_scaled" + sfx, "MUL", q_r, [("Qcur" + sfx, (D, H, T, 1)), ("attn_scale", (1, 1, T, 1))], "f32")
            kv_store(self.k_cache[il], self.v_cache[il], k_r, v3, cells)
            attention(q_r, self.k_cache[il], self.v_cache[il], n_kv, self.cell_pos[:n_kv], pos,
                      hp.kq_scale, kqv_out, kq, kq_sm)
            if tr:
                qname = ("Qcur_attn_temp_scaled" if temp is not None else "Qcur") + sfx
                kname = f"cache_k_l{il} (view) (permuted)"
                vname = f"cache_v_l{il} (view) (permuted)"
                tr("kq" + sfx, "MUL_MAT", kq, [(kname, (D, n_kv, Hkv, 1)), (qname + " (view) (permuted)", (D, T, H, 1))], "f32")
                tr("kq_soft_max" + sfx, "SOFT_MAX", kq_sm, [("kq" + sfx, (n_kv, T, H, 1)), ("attn_inp_kq_mask", (n_kv, T, 1, 1))], "f32")
                tr("kqv_out" + sfx, "CONT", kqv_out, [("kqv" + sfx + " (permuted)", (D, H, T, 1))], "f32")
            attn_out = np.empty((T, E), dtype=np.float32)
            matmul(L.attn_output, kqv_out, attn_out)
            if tr:
                tr("attn_out" + sfx, "MUL_MAT", attn_out, [(L.attn_output.name, (H * D, E, 1, 1)), ("kqv_out" + sfx, (H * D, T, 1, 1))], "f32")
            if L.attn_output_b is not None:
                add(attn_out, L.attn_output_b, attn_out)

            residual = x
            if last_layer and want != "all":
                # llama.cpp: only the rows whose logits are needed go on (ggml_get_rows with out_ids)
                if want == "none":
                    break
                attn_out = attn_out[T - 1 :]
                residual = x[T - 1 :]
                if tr:
                    tr("node_attn_rows", "GET_ROWS", attn_out, [("attn_out" + sfx, (E, T, 1, 1)), ("out_ids", (1, 1, 1, 1))], "f32")
                    tr("node_inp_rows", "GET_ROWS", residual, [(_prev_name(il), (E, T, 1, 1)), ("out_ids", (1, 1, 1, 1))], "f32")
            Tn = attn_out.shape[0]
            ffn_inp = np.empty((Tn, E), dtype=np.float32)
            add(attn_out, residual, ffn_inp)
            if tr:
                tr("ffn_inp" + sfx, "ADD", ffn_inp, [("attn_out" + sfx, (E, Tn, 1, 1)), (_prev_name(il), (E, Tn, 1, 1))], "f32")
            # feed-forward block
            fcur = cur[:Tn]
            rms_norm(ffn_inp, hp.f_norm_rms_eps, fcur)
            if tr:
                tr("norm" + sfx, "RMS_NORM", fcur, [("ffn_inp" + sfx, (E, Tn, 1, 1))], "f32")
            mul_rows(fcur, L.ffn_norm, fcur)
            if tr:
                tr("ffn_norm" + sfx, "MUL", fcur, [("norm" + sfx, (E, Tn, 1, 1)), (f"blk.{il}.ffn_norm.weight", (E, 1, 1, 1))], "f32")
            g, u = gate[:Tn], up[:Tn]
            matmul(L.ffn_gate, fcur, g)
            if L.ffn_gate_b is not None:
                add(g, L.ffn_gate_b, g)
            if tr:
                tr("ffn_gate" + sfx, "MUL_MAT", g, [(L.ffn_gate.name, (E, F, 1, 1)), ("ffn_norm" + sfx, (E, Tn, 1, 1))], "f32")
            matmul(L.ffn_up, fcur, u)
            if L.ffn_up_b is not None:
                add(u, L.ffn_up_b, u)
            if tr:
                tr("ffn_up" + sfx, "MUL_MAT", u, [(L.ffn_up.name, (E, F, 1, 1)), ("ffn_norm" + sfx, (E, Tn, 1, 1))], "f32")
            swiglu(g, u, g)
            if tr:
                tr("ffn_swiglu" + sfx, "SWIGLU", g, [("ffn_gate" + sfx, (F, Tn, 1, 1)), ("ffn_up" + sfx, (F, Tn, 1, 1))], "f32")
            ffn_out = np.empty((Tn, E), dtype=np.float32)
            matmul(L.ffn_down, g, ffn_out)
            if L.ffn_down_b is not None:
                add(ffn_out, L.ffn_down_b, ffn_out)
            if tr:
                tr("ffn_out" + sfx, "MUL_MAT", ffn_out, [(L.ffn_down.name, (F, E, 1, 1)), ("ffn_swiglu" + sfx, (F, Tn, 1, 1))], "f32")
            x = np.empty((Tn, E), dtype=np.float32)
            add(ffn_out, ffn_inp, x)
            if tr:
                tr("l_out" + sfx, "ADD", x, [("ffn_out" + sfx, (E, Tn, 1, 1)), ("ffn_inp" + sfx, (E, Tn, 1, 1))], "f32")

        self.n_past += T
        if want == "none":
            return None
        Tn = x.shape[0]
        out_norm = np.empty((Tn, E), dtype=np.float32)
        rms_norm(x, hp.f_norm_rms_eps, out_norm)
        if tr:
            tr("norm", "RMS_NORM", out_norm, [(f"l_out-{hp.n_layer - 1}", (E, Tn, 1, 1))], "f32")
        mul_rows(out_norm, m.output_norm, out_norm)
        if tr:
            tr("result_norm", "MUL", out_norm, [("norm", (E, Tn, 1, 1)), ("output_norm.weight", (E, 1, 1, 1))], "f32")
        logits = np.empty((Tn, hp.n_vocab), dtype=np.float32)
        matmul(m.output, out_norm, logits)
        if tr:
            tr("result_output", "MUL_MAT", logits, [(m.output.name, (E, hp.n_vocab, 1, 1)), ("result_norm", (E, Tn, 1, 1))], "f32")
        return logits


def _prev_name(il: int) -> str:
    return "embd" if il == 0 else f"l_out-{il - 1}"
