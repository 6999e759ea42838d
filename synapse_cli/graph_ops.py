"""The operations of llama.cpp's llama/qwen2/mistral3 graph, as the forward pass (`Context._forward_ubatch`)
calls them, in two kinds:

* `GraphOps` computes them, fused where ggml's results allow it (RMS_NORM and MUL in one pass, with the ADD
  of the residual before it; Q/K/V and gate/up from one conversion of the activations, for one token through
  a call prepared at load (`LayerWeights.qkv_gemv`); both ropes in one call);
* `TracedGraphOps` computes the same values op by op, the way llama.cpp's graph evaluates them, and hands each
  node to a `GraphTrace` (names, ops, sources and shapes of llama-eval-callback's log). It keeps the names of
  the tensors the next nodes read (the residual stream, the attention output).

Both give the same bits (tests/test_reference_llama.py compares traced and untraced logits, LoRA adapters on). Arrays are numpy,
(tokens, features) unless said otherwise; every method writes into the `out` arrays it is given.
"""

from __future__ import annotations

import numpy as np

from kernels import layer
from kernels.activations import swiglu
from kernels.config import get_num_threads, work_chunks
from kernels.flash_attn import ONE_TOKEN_PHASES_MIN, PATH_ONE_ROW, fa_path, head_parts, in_phases
from kernels.matmul import matmul, matmul_many
from kernels.norm import add, add_rms_norm_mul, mul_rows, rms_norm, rms_norm_mul
from kernels.order import Order


def _add_bias(out: np.ndarray, b) -> None:
    if b is not None:
        add(out, b, out)


def _scale(out: np.ndarray, s) -> None:
    """ggml_mul by a per-tensor weight scale s (1,) f32 (llama.cpp's *_s), where the model has one."""
    if s is not None:
        out *= s[0]


def _scale_name(w) -> str:
    return w.name.replace(".weight", ".scale")


class GraphOps:
    """Untraced: the fused computations."""

    def __init__(self, ctx, T: int, pos: np.ndarray, cells: np.ndarray, n_used: int, n_kv: int, kv_pos: np.ndarray,
                 rope_args: tuple, temp):
        self.ctx, self.hp, self.T = ctx, ctx.hp, T
        self.pos, self.cells = pos, cells  # (T,) positions; (T,) the cache cells they are stored in
        self.n_used, self.n_kv, self.kv_pos = n_used, n_kv, kv_pos  # cells used; cells attended; (n_kv,) positions
        self.rope_args = rope_args
        self.temp = temp  # (T,) mistral3's attention temperature, or None
        self.order = ctx.order  # the products' rows: llama.cpp's single-token or batched orders (kernels/order.py)
        self._block = self._block_args() if T == 1 else None

    def _block_args(self):
        """kernels/layer.py's per-graph arguments (its `shared`), where one token's blocks can run in one call: the
        F16 cache of flash attention on the one-row kernel, the single-token products, no attention temperature
        and no rotated cache (those run op by op), once compiled (Context.one_call_blocks); else None."""
        ctx, hp = self.ctx, self.hp
        if (not ctx.one_call_blocks or ctx.cells is not None or ctx.cvec is not None or ctx.loras
                or not ctx.flash_attn or ctx.cache_type != "f16" or ctx.cache_type_v != "f16"
                or ctx.rot_k or ctx.rot_v or self.temp is not None or self.order is Order.BATCHED
                or hp.n_embd_head % 64 or fa_path(1, self.n_kv, self.order) != PATH_ONE_ROW):
            return None
        n_threads = work_chunks()
        return (self.rope_args, self.pos, self.n_kv, self.kv_pos,
                np.float32(hp.kq_scale), head_parts(1, hp.n_head_kv, hp.n_head // hp.n_head_kv, n_threads), n_threads)

    # --- a whole block

    def block(self, il: int, L, x, cur, next_norm, normed, q, k, v, q_r, k_r, kqv_out, attn_out, ffn_inp, gate, up,
              ffn_out) -> bool:
        """One token's block il in one jitted call (kernels/layer.py), the same bits as the operations below: x
        becomes the next residual, normed its norm with next_norm. False where that does not apply (the caller
        runs the operations)."""
        if self._block is None or L.block_kinds is None:
            return False
        rope_args, pos, n_kv, kv_pos, kq_scale, parts, n_threads = self._block
        decode_block = layer.decode_block_for(*L.block_kinds)
        decode_block(x, cur, self.hp.f_norm_rms_eps, L.ffn_norm, next_norm, normed, *L.block_products, L.block_biases,
                     rope_args, pos, self.ctx.k_cache[il], self.ctx.v_cache[il], n_kv, kv_pos, kq_scale, parts,
                     n_threads, q, k, v, q_r, k_r, kqv_out, attn_out, ffn_inp, gate, up, ffn_out)
        return True

    def layers(self, x, cur, normed_last, q, k, v, q_r, k_r, kqv_out, attn_out, ffn_inp, gate, up, ffn_out) -> bool:
        """Every block of one token in one jitted call (kernels/layer.decode_layers_for), the same bits as block
        by block: x becomes the last residual, normed_last its output norm. False where that does not apply (as
        block, or blocks whose products differ in kind: the caller goes block by block)."""
        layers = self.ctx.layer_list() if self._block is not None else None
        if layers is None:
            return False
        kinds = self.ctx.model.layers[0].block_kinds
        bufs = (q, k, v, q_r, k_r, kqv_out, attn_out, ffn_inp, gate, up, ffn_out)
        hp = self.hp
        nt = get_num_threads()  # the region's threads: numba's own count, or its barriers would wait forever
        parts = head_parts(1, hp.n_head_kv, hp.n_head // hp.n_head_kv, nt)
        args = (layers, x, cur, hp.f_norm_rms_eps, normed_last, self._block, bufs)
        if layer.region_applies(kinds, self.n_kv, hp.n_head_kv, parts, nt):
            if not self.ctx.long_view_form_ready:
                self._long_view_form(kinds, args, parts, nt)
            shared = self._block[:5] + (parts, nt)
            layer.decode_layers_region_for(*kinds)(*args[:5], shared, bufs, nt)
        else:
            layer.decode_layers_for(*kinds)(*args)
        return True

    def _long_view_form(self, kinds, args, parts, nt) -> None:
        """Compile (or load from the cache) the form that tokens over long views take (decode_layers_for, with
        _one_token_phases' attention) before one needs it, where the context is that long and this model's heads
        do not share evenly between the threads: its first such token would otherwise wait for the compile."""
        self.ctx.long_view_form_ready = True
        if self.ctx.n_ctx >= ONE_TOKEN_PHASES_MIN and in_phases(1, ONE_TOKEN_PHASES_MIN, self.hp.n_head_kv, parts, nt):
            layer.compile_decode_layers(kinds, args)

    # --- input, norms, output

    def embd(self, tokens, x, keep: bool = False) -> list:
        """build_inp_embd: the token rows, plus each adapter's B @ (A's rows), scaled; keep: return the adapters'
        steps as lora() does."""
        self.ctx.model.tok_embd.get_rows(tokens, x)
        steps = []
        for adapter, scale in self.ctx.loras or ():
            lw = adapter.weights.get("token_embd.weight")
            if lw is not None:
                rows = np.empty((len(tokens), lw.rank), np.float32)
                lw.a.get_rows(tokens, rows)
                self._lora_step(lw, lw.scale(adapter.alpha, scale), rows, x, steps if keep else None)
        return steps

    def lora(self, w, x, out, keep: bool = False) -> list:
        """build_lora_mm's adapters after the product out = w @ x (before any bias): out += scale * (B @ (A @ x))
        for each adapter of w, in the context's order. keep: return each adapter's steps (its weights' names,
        A @ x, B @ that, scaled, the sum) for the trace."""
        steps = []
        for adapter, scale in self.ctx.loras or ():
            lw = adapter.weights.get(w.name)
            if lw is not None:
                t = np.empty((x.shape[0], lw.rank), np.float32)
                matmul(lw.a, x, t, self.order)
                self._lora_step(lw, lw.scale(adapter.alpha, scale), t, out, steps if keep else None)
        return steps

    def _lora_step(self, lw, scale, t, out, steps: list | None) -> None:
        """out += scale * (B @ t) (MUL_MAT, SCALE, ADD), the steps' values appended to `steps` unless None."""
        delta = np.empty_like(out)
        matmul(lw.b, t, delta, self.order)
        if steps is not None:
            steps.append((lw.a.name, lw.b.name, t, delta.copy()))
        delta *= scale  # ggml_scale
        add(out, delta, out)
        if steps is not None:
            steps[-1] += (delta, out.copy())

    def norm(self, x, w, out, names: tuple[str, str], weight_name: str):
        """build_norm (LLM_NORM_RMS): RMS_NORM then MUL by the weight; names: (norm, weighted)."""
        rms_norm_mul(x, self.hp.f_norm_rms_eps, w, out)

    def logits(self, x, out):
        matmul(self.ctx.model.output, x, out, self.order)
        _scale(out, self.ctx.model.output_s)
        self.lora(self.ctx.model.output, x, out)

    # --- attention block

    def qkv(self, il: int, L, cur, q, k, v, q_r, k_r):
        """Q, K, V projections (+ biases), rope of Q and K (q_r (T, H, D), k_r (T, Hkv, D)), the temperature of
        Q, and the Hadamard rotations of a quantized cache (Q and K; V)."""
        from kernels.kv_cache import fwht_rows
        from kernels.rope import rope_qk

        hp, ctx, T = self.hp, self.ctx, self.T
        if T == 1 and L.qkv_gemv is not None and self.order is not Order.BATCHED:
            L.qkv_gemv(cur, (q, k, v))  # activations converted once, one parallel region
        else:
            matmul_many(L.qkv, cur, [q, k, v], self.order)
        for w, out, b, sc in ((L.attn_q, q, L.attn_q_b, L.attn_q_s), (L.attn_k, k, L.attn_k_b, L.attn_k_s),
                              (L.attn_v, v, L.attn_v_b, L.attn_v_s)):
            _scale(out, sc)  # build_lora_mm: the scale, then the adapters; build_qkv: the bias
            self.lora(w, cur, out)
            _add_bias(out, b)
        rope_qk(q.reshape(T, hp.n_head, hp.n_embd_head), k.reshape(T, hp.n_head_kv, hp.n_embd_head), self.pos,
                q_r, k_r, *self.rope_args)
        if self.temp is not None:
            q_r *= self.temp[:, None, None]  # ggml_mul(Qcur, inp_attn_scale)
        if ctx.rot_k:
            fwht_rows(q_r, ctx.rot_k)
            fwht_rows(k_r, ctx.rot_k)
        if ctx.rot_v:
            fwht_rows(v, ctx.rot_v)

    def attention(self, il: int, q_r, k_r, v3, kqv_out):
        """Store K and V (T, Hkv, D) in the cache, attend (kqv_out (T, H*D)), rotate the output back (a
        quantized V cache)."""
        from kernels.kv_cache import fwht_rows

        self.ctx.store_and_attend(il, q_r, k_r, v3, self.pos, self.cells, self.n_used, self.n_kv, self.kv_pos,
                                  kqv_out)
        if self.ctx.rot_v:  # llama_mul_mat_hadamard after build_attn_mha
            fwht_rows(kqv_out, self.ctx.rot_v)

    def attn_out(self, il: int, L, kqv_out, out):
        matmul(L.attn_output, kqv_out, out, self.order)
        _scale(out, L.attn_output_s)
        self.lora(L.attn_output, kqv_out, out)
        _add_bias(out, L.attn_output_b)

    def out_rows(self, attn_out, x, n: int):
        """The last layer keeps only the last n rows (llama.cpp's out_ids: the rows whose logits are wanted)."""
        return attn_out[self.T - n:], x[self.T - n:]

    # --- residuals and the feed-forward block

    def add(self, name: str, a, b, out):
        add(a, b, out)

    def add_norm(self, name: str, a, b, out, w, normed, names: tuple[str, str], weight_name: str):
        """add (a residual) then norm of its result with weight w (the next block's input): one pass."""
        add_rms_norm_mul(a, b, out, self.hp.f_norm_rms_eps, w, normed)

    def gate_up(self, il: int, L, cur, gate, up):
        if self.T == 1 and L.gate_up_gemv is not None and self.order is not Order.BATCHED:
            L.gate_up_gemv(cur, (gate, up))
        else:
            matmul_many(L.gate_up, cur, [gate, up], self.order)
        self.lora(L.ffn_gate, cur, gate)
        self.lora(L.ffn_up, cur, up)
        _add_bias(gate, L.ffn_gate_b)
        _add_bias(up, L.ffn_up_b)
        _scale(gate, L.ffn_gate_s)  # build_ffn: after the adapters and the bias
        _scale(up, L.ffn_up_s)

    def swiglu(self, il: int, gate, up):
        swiglu(gate, up, gate)

    def ffn_down(self, il: int, L, h, out):
        matmul(L.ffn_down, h, out, self.order)
        self.lora(L.ffn_down, h, out)
        _add_bias(out, L.ffn_down_b)
        _scale(out, L.ffn_down_s)


class TracedGraphOps(GraphOps):
    """Op by op in llama.cpp's graph order, every node handed to the GraphTrace `g`."""

    def __init__(self, g, *args):
        super().__init__(*args)
        self.g = g
        self.res_name = "embd"  # the residual stream's latest node (norms read it)
        self.kq = self.kq_sm = None  # (H, T, n_kv): the soft-max graph's kq and kq_soft_max
        if not self.ctx.flash_attn:
            H = self.hp.n_head
            self.kq = np.empty((H, self.T, self.n_kv), dtype=np.float32)
            self.kq_sm = np.empty((H, self.T, self.n_kv), dtype=np.float32)

    def block(self, *args) -> bool:
        return False  # op by op: every node goes to the trace

    def layers(self, *args) -> bool:
        return False

    def embd(self, tokens, x):
        steps = super().embd(tokens, x, keep=True)
        base = x
        if steps:  # (the rows before the adapters, again)
            base = np.empty_like(x)
            self.ctx.model.tok_embd.get_rows(tokens, base)
        self.g.embd(base, self.hp.n_vocab, steps)

    def norm(self, x, w, out, names, weight_name):
        rms_norm(x, self.hp.f_norm_rms_eps, out)
        normed = out.copy()
        mul_rows(out, w, out)
        self.g.norm(names, normed, self.res_name, out, weight_name)

    def logits(self, x, out):
        w, sc = self.ctx.model.output, self.ctx.model.output_s
        matmul(w, x, out, self.order)
        base = out.copy()
        _scale(out, sc)
        scaled = None if sc is None else (_scale_name(w), out.copy())
        steps = self.lora(w, x, out, keep=True)
        self.g.matmul("result_output", base, w.name, self.hp.n_embd, "result_norm", steps, scaled)

    def qkv(self, il, L, cur, q, k, v, q_r, k_r):
        from kernels.rope import rope

        hp, g, T = self.hp, self.g, self.T
        D = hp.n_embd_head
        g.set_attn_norm_shape(cur)
        g.v_cont = L.fused_qkv
        if L.fused_qkv:
            self._fused_qkv(il, L, cur, q, k, v, q_r, k_r)
            return
        # llama.cpp's graph evaluates Q, then V, then K
        for which, W, b, sc, out, heads, r_out in (
                ("Qcur", L.attn_q, L.attn_q_b, L.attn_q_s, q, hp.n_head, q_r),
                ("Vcur", L.attn_v, L.attn_v_b, L.attn_v_s, v, hp.n_head_kv, None),
                ("Kcur", L.attn_k, L.attn_k_b, L.attn_k_s, k, hp.n_head_kv, k_r)):
            matmul(W, cur, out, self.order)
            base = out.copy()
            _scale(out, sc)
            scaled = None if sc is None else (_scale_name(W), out.copy())
            steps = self.lora(W, cur, out, keep=True)
            _add_bias(out, b)
            shaped = out.reshape(T, heads, D)
            temp_scaled = r_shown = None
            if r_out is not None:
                rope(shaped, self.pos, r_out, *self.rope_args)
                r_shown = r_out
                if which == "Qcur" and self.temp is not None:
                    r_shown = r_out.copy()
                    r_out *= self.temp[:, None, None]
                    temp_scaled = r_out
            g.qkv_proj(il, which, base, steps, out if b is not None else None, W.name,
                       W.name.replace(".weight", ".bias"), shaped, r_shown, temp_scaled, scaled)
            self._rotate(il, which, r_out if r_out is not None else shaped, temp_scaled)

    def _rotate(self, il, which, x, temp_scaled):
        """llama_mul_mat_hadamard in build_attn, before the cache store (a quantized cache), of Q, K or V (x)."""
        from kernels.kv_cache import fwht_rows

        ctx = self.ctx
        n_rot, rot_name = (ctx.rot_v, "attn_inp_v_rot") if which == "Vcur" else (ctx.rot_k, "attn_inp_k_rot")
        if n_rot:
            before = x.copy()
            fwht_rows(x, n_rot)
            src = f"Qcur_attn_temp_scaled-{il}" if temp_scaled is not None else f"{which}-{il}"
            self.g.rotation(src, before, x, n_rot, rot_name, cont=which == "Vcur" and self.g.v_cont)

    def _fused_qkv(self, il, L, cur, q, k, v, q_r, k_r):
        """build_qkv with a fused attn_qkv weight: one MUL_MAT ("wqkv"; its scale's MUL), its bias ADD ("wqkv_b";
        attn_q/k/v.bias are CONCATenated first), then Q, V and K as VIEWs of it, Q and K roped. The three row
        ranges are computed apart (LayerWeights.attn_q/k/v): the same values."""
        from kernels.rope import rope

        hp, g, T, D = self.hp, self.g, self.T, self.hp.n_embd_head
        matmul_many(L.qkv, cur, [q, k, v], self.order)
        fused = lambda: np.concatenate([q, k, v], axis=1)  # noqa: E731  (T, n_q + 2 n_kv)
        base = fused()
        for out in (q, k, v):
            _scale(out, L.attn_q_s)
        scaled = None if L.attn_q_s is None else (_scale_name(L.attn_q), fused())
        name = g.matmul(f"wqkv-{il}", base, L.attn_q.name, hp.n_embd, f"attn_norm-{il}", (), scaled)
        if L.attn_q_b is not None:
            for out, b in ((q, L.attn_q_b), (k, L.attn_k_b), (v, L.attn_v_b)):
                _add_bias(out, b)
            bias = (L.attn_q.name.replace(".weight", ".bias"), (base.shape[1], 1, 1, 1))
            if not L.fused_qkv_bias:  # ggml_concat(ggml_concat(q_b, k_b), v_b)
                p = L.attn_q.name.replace("attn_qkv.weight", "")
                qk = g.node(None, "CONCAT", np.concatenate([L.attn_q_b, L.attn_k_b]),
                            [(p + "attn_q.bias", (len(L.attn_q_b), 1, 1, 1)),
                             (p + "attn_k.bias", (len(L.attn_k_b), 1, 1, 1))])
                bias = (g.node(None, "CONCAT", np.concatenate([L.attn_q_b, L.attn_k_b, L.attn_v_b]),
                               [(qk, (len(L.attn_q_b) + len(L.attn_k_b), 1, 1, 1)),
                                (p + "attn_v.bias", (len(L.attn_v_b), 1, 1, 1))]), bias[1])
            name = g.add(f"wqkv_b-{il}", fused(), name, bias[0], bias[1])
        src = [(name, (base.shape[1], T, 1, 1))]
        for which, out, heads, r_out in (("Qcur", q, hp.n_head, q_r), ("Vcur", v, hp.n_head_kv, None),
                                         ("Kcur", k, hp.n_head_kv, k_r)):
            n = f"{which}-{il}"
            shaped = out.reshape(T, heads, D)
            g.node(n, "VIEW", shaped, src)
            temp_scaled = None
            if r_out is not None:
                rope(shaped, self.pos, r_out, *self.rope_args)
                g.node(n, "ROPE", r_out, [(n, (D, heads, T, 1)), ("inp_pos", (T, 1, 1, 1))])
                if which == "Qcur" and self.temp is not None:
                    r_out *= self.temp[:, None, None]
                    temp_scaled = g.node(f"Qcur_attn_temp_scaled-{il}", "MUL", r_out,
                                         [(n, (D, heads, T, 1)), ("inp_attn_scale", (1, 1, T, 1))])
            self._rotate(il, which, r_out if r_out is not None else shaped, temp_scaled)

    def attention(self, il, q_r, k_r, v3, kqv_out):
        from kernels.kv_cache import fwht_rows

        ctx, g = self.ctx, self.g
        if not ctx.flash_attn:  # llama.cpp prints the V cache's RESHAPE node before SET_ROWS writes
            g.v_cache_before = ctx.cache_views(il, self.n_kv)[1].copy()
        ctx.store_and_attend(il, q_r, k_r, v3, self.pos, self.cells, self.n_used, self.n_kv, self.kv_pos, kqv_out,
                             self.kq, self.kq_sm)
        ctx.trace_attention(g, il, k_r, v3, q_r, self.temp, self.n_kv, self.kq, self.kq_sm, kqv_out)
        self.kqv_name = f"kqv_out-{il}"
        if ctx.rot_v:
            before = kqv_out.copy()
            fwht_rows(kqv_out, ctx.rot_v)
            self.kqv_name = g.rotation(self.kqv_name, before, kqv_out, ctx.rot_v, "attn_inp_v_rot")

    def attn_out(self, il, L, kqv_out, out):
        matmul(L.attn_output, kqv_out, out, self.order)
        base = out.copy()
        _scale(out, L.attn_output_s)
        scaled = None if L.attn_output_s is None else (_scale_name(L.attn_output), out.copy())
        steps = self.lora(L.attn_output, kqv_out, out, keep=True)
        self.attn_name = self.g.attn_out(il, base, L.attn_output.name, self.hp.n_head * self.hp.n_embd_head,
                                         self.kqv_name, steps, scaled)
        _add_bias(out, L.attn_output_b)

    def out_rows(self, attn_out, x, n):
        a, b = super().out_rows(attn_out, x, n)
        self.attn_name, self.res_name = self.g.out_rows(self.attn_name, a, self.res_name, b, self.T)
        return a, b

    def add(self, name, a, b, out):
        """name: the ADD node's (None: unnamed, qwen2's residual before a control vector)."""
        add(a, b, out)
        if name is not None and name.startswith("ffn_inp"):  # attention output + residual
            name = self.g.add(name, out, self.attn_name, self.res_name)
        elif b.ndim == 1:  # l_out: a control vector's direction added (an unnamed tensor of n_embd)
            name = self.g.add_direction(name, out, self.res_name)
        else:  # FFN output + ffn_inp (named ffn_out, or not, before a control vector)
            il = self.res_name.rsplit("-", 1)[1]  # (the residual stream is ffn_inp-<il> here)
            name = self.g.add(name, out, f"ffn_out-{il}", f"ffn_inp-{il}")
        self.res_name = name

    def add_norm(self, name, a, b, out, w, normed, names, weight_name):
        self.add(name, a, b, out)
        self.norm(out, w, normed, names, weight_name)

    def gate_up(self, il, L, cur, gate, up):
        matmul_many(L.gate_up, cur, [gate, up], self.order)
        self.ffn_in = []  # the names the SWIGLU reads
        for name, w, out, b, sc in ((f"ffn_gate-{il}", L.ffn_gate, gate, L.ffn_gate_b, L.ffn_gate_s),
                                    (f"ffn_up-{il}", L.ffn_up, up, L.ffn_up_b, L.ffn_up_s)):
            base = out.copy()
            steps = self.lora(w, cur, out, keep=True)
            _add_bias(out, b)
            self.g.matmul(name, base, w.name, self.hp.n_embd, f"ffn_norm-{il}", steps)
            if sc is not None:  # build_ffn's ggml_mul by the scale: "ffn_gate_s" / "ffn_up_s"
                _scale(out, sc)
                name = self.g.scale(name.replace("-", "_s-"), out, name, _scale_name(w))
            self.ffn_in.append(name)

    def swiglu(self, il, gate, up):
        swiglu(gate, up, gate)
        self.g.swiglu(il, gate, *self.ffn_in)

    def ffn_down(self, il, L, h, out):
        matmul(L.ffn_down, h, out, self.order)
        base = out.copy()
        steps = self.lora(L.ffn_down, h, out, keep=True)
        _add_bias(out, L.ffn_down_b)
        scaled = L.ffn_down_s is not None
        # the graph names the last node ffn_out: the product's, or the scale's MUL after it
        prod = self.g.matmul(None if scaled else f"ffn_out-{il}", base, L.ffn_down.name, self.hp.n_ff,
                             f"ffn_swiglu-{il}", steps)
        if scaled:
            _scale(out, L.ffn_down_s)
            self.g.scale(f"ffn_out-{il}", out, prod, _scale_name(L.ffn_down))
