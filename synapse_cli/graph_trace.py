"""Replays llama.cpp's graph node sequence for the eval-callback trace.

llama-eval-callback prints every node of the ggml graph in evaluation order, including the RESHAPE,
VIEW, PERMUTE and SET_ROWS nodes that compute nothing new, and names nodes that the model code leaves
unnamed `node_<index>`. The forward pass (synapse_cli/model.py) calls one method here after each real
computation; this class emits the node(s) llama.cpp's graph has at that point, with the same names,
ops, source names and shapes, so that a trace lines up with a llama.cpp log tensor by tensor.

Shapes are ggml `ne` (innermost first); values are numpy views whose C-order shape is ne reversed.
Only constructed when a trace hook is attached: the untraced forward pass never touches it.
"""

from __future__ import annotations

import numpy as np


def ne_of(a: np.ndarray) -> tuple[int, int, int, int]:
    ne = tuple(reversed(a.shape))
    return ne + (1,) * (4 - len(ne))


class GraphTrace:
    def __init__(self, hook, arch: str, T: int, n_ctx: int, n_kv: int, cache_type_v: str):
        self.hook = hook
        self.arch = arch
        self.T = T
        self.n_ctx = n_ctx
        self.n_kv = n_kv
        self.ctype = cache_type_v  # the V cache's type (the K cache's is given where its nodes are made)
        self.n = 0  # index of the next graph node (unnamed nodes are called node_<index>)
        self.v_cont = False  # this layer's Vcur is a VIEW of a fused QKV product (the cache store CONTs it first)

    def node(self, name: str | None, op: str, value: np.ndarray, srcs: list, typ: str = "f32", ne=None) -> str:
        """One graph node; a quantized node (typ q8_0, ...) has no printed values: give its ne."""
        name = name if name is not None else f"node_{self.n}"
        if ne is None:
            self.hook(name, op, value, [(s, tuple(ne)) for s, ne in srcs], typ)
        else:
            self.hook(name, op, value, [(s, tuple(n)) for s, n in srcs], typ, ne=tuple(ne))
        self.n += 1
        return name

    def rotation(self, src_name, before, after, n, rot_name, cont=False) -> str:
        """llama_mul_mat_hadamard: RESHAPE to rows of n (CONT, of a non-contiguous VIEW: a fused QKV product's V),
        MUL_MAT by the Hadamard input (computed as ggml's fast transform), RESHAPE back; the result is named
        " (reshaped)" (ggml's name of a reshaped unnamed node)."""
        rows = before.size // n
        flat = before.reshape(rows, n)
        rows_name = self.node(f"{src_name} ({'cont' if cont else 'reshaped'})", "CONT" if cont else "RESHAPE", flat,
                              [(src_name, ne_of(before))])
        rot = self.node(None, "MUL_MAT", after.reshape(rows, n), [(rot_name, (n, n, 1, 1)), (rows_name, (n, rows, 1, 1))])
        return self.node(" (reshaped)", "RESHAPE", after, [(rot, (n, rows, 1, 1))])

    # --- input and norms ---------------------------------------------------------------------

    def lora_mm(self, name, base, weight_name, n_in, src_name, src_ne, steps=(), scaled=None) -> str:
        """build_lora_mm: MUL_MAT of the weight, [MUL by its per-tensor scale,] then per LoRA adapter MUL_MAT by its
        A, MUL_MAT by its B, SCALE and ADD to the result so far; only the last node gets the name (the others are
        node_<index>). steps: the adapters' (A's name, B's name, A @ x, B @ that, scaled, sum) of GraphOps.lora;
        scaled: (the scale's name, the scaled product) or None."""
        T, n_out = base.shape
        last = not steps and scaled is None
        res = self.node(name if last else None, "MUL_MAT", base,
                        [(weight_name, (n_in, n_out, 1, 1)), (src_name, src_ne)])
        if scaled is not None:
            res = self.scale(None if steps else name, scaled[1], res, scaled[0])
        for i, (a_name, b_name, t, d, scaled, summed) in enumerate(steps):
            r = t.shape[1]
            na = self.node(None, "MUL_MAT", t, [(a_name, (n_in, r, 1, 1)), (src_name, src_ne)])
            res = self._lora_tail(name if i == len(steps) - 1 else None, res, b_name, na, t, d, scaled, summed)
        return res

    def _lora_tail(self, name, res, b_name, t_name, t, d, scaled, summed) -> str:
        """B @ t, SCALE and the ADD to the result so far (build_lora_mm, build_inp_embd)."""
        nb = self.node(None, "MUL_MAT", d, [(b_name, (t.shape[1], d.shape[1], 1, 1)), (t_name, ne_of(t))])
        ns = self.node(None, "SCALE", scaled, [(nb, ne_of(d))])
        return self.node(name, "ADD", summed, [(res, ne_of(d)), (ns, ne_of(d))])

    def scale(self, name, out, src_name, scale_name) -> str:
        """ggml_mul of a product by its weight's per-tensor scale (a (1,) tensor)."""
        return self.node(name, "MUL", out, [(src_name, ne_of(out)), (scale_name, (1, 1, 1, 1))])

    def embd(self, x, n_vocab, steps=()):
        """GET_ROWS of the token embeddings; with LoRA adapters of them (build_inp_embd), per adapter GET_ROWS of its
        A, MUL_MAT by its B, SCALE, ADD (x: the rows before the adapters)."""
        E = x.shape[1]
        tokens = ("inp_tokens", (self.T, 1, 1, 1))
        res = self.node(None if steps else "embd", "GET_ROWS", x, [("token_embd.weight", (E, n_vocab, 1, 1)), tokens])
        for i, (a_name, b_name, rows, d, scaled, summed) in enumerate(steps):
            na = self.node(None, "GET_ROWS", rows, [(a_name, (rows.shape[1], n_vocab, 1, 1)), tokens])
            res = self._lora_tail("embd" if i == len(steps) - 1 else None, res, b_name, na, rows, d, scaled, summed)

    def norm(self, name, normed, src_name, weighted, weight_name):
        """RMS_NORM then MUL by the norm weight (llama.cpp's build_norm with LLM_NORM_RMS)."""
        E = normed.shape[1]
        self.node(name[0], "RMS_NORM", normed, [(src_name, ne_of(normed))])
        self.node(name[1], "MUL", weighted, [(name[0], ne_of(normed)), (weight_name, (E, 1, 1, 1))])

    # --- attention ---------------------------------------------------------------------------

    def qkv_proj(self, il, which, raw, steps, biased, weight_name, bias_name, reshaped, roped=None, temp_scaled=None,
                 scaled=None):
        """MUL_MAT [+ scale MUL] [+ LoRA nodes] [+ ADD bias] + RESHAPE [+ ROPE] [+ temperature MUL] for one of
        Qcur/Kcur/Vcur (raw: the weight's product, steps: GraphOps.lora's, scaled: lora_mm's)."""
        n = f"{which}-{il}"
        self.lora_mm(n, raw, weight_name, self._attn_norm_ne[0], f"attn_norm-{il}", self._attn_norm_ne, steps, scaled)
        if biased is not None:
            self.node(n, "ADD", biased, [(n, ne_of(raw)), (bias_name, (raw.shape[1], 1, 1, 1))])
        self.node(n, "RESHAPE", reshaped, [(n, ne_of(raw))])
        if roped is not None:
            self.node(n, "ROPE", roped, [(n, ne_of(reshaped)), ("inp_pos", (self.T, 1, 1, 1))])
        if temp_scaled is not None:
            self.node(f"Qcur_attn_temp_scaled-{il}", "MUL", temp_scaled, [(n, ne_of(roped)), ("inp_attn_scale", (1, 1, self.T, 1))])

    def set_attn_norm_shape(self, cur):
        self._attn_norm_ne = ne_of(cur)

    def kv_store(self, il, k_roped, v3, k_cache_f32, v_cache_flat_f32, k_type, k_src=None):
        """The K and V copies into the cache (VIEW/RESHAPE/SET_ROWS nodes of llama_kv_cache::cpy_k/cpy_v).

        k_cache_f32: (n_ctx, n_embd_k_gqa) the whole K cache after the store, as float32 values (printed for F32
        and F16 only); v_cache_flat_f32: (n_ctx * n_embd_v_gqa,) the whole transposed V cache in memory order;
        k_type: the K cache's type; k_src: the stored K's name (" (reshaped)" after a Hadamard rotation).
        """
        T, c, kt = self.T, self.ctype, k_type
        k_src = k_src or f"Kcur-{il}"
        nk = k_roped.shape[1] * k_roped.shape[2]
        kv = k_roped.reshape(T, nk)
        self.node(f"{k_src} (view)", "VIEW", kv, [(k_src, ne_of(k_roped))])
        self.node(f"cache_k_l{il} (view)", "SET_ROWS", k_cache_f32, [(f"{k_src} (view)", ne_of(kv)), ("attn_inp_k_idxs", (T, 1, 1, 1))],
                  kt, ne=(nk, self.n_ctx, 1, 1))
        vr = v3.reshape(T, nk)
        # (a VIEW of a fused QKV product is made contiguous first)
        v1 = self.node(f"Vcur-{il} (cont)" if self.v_cont else f"Vcur-{il} (reshaped)", "CONT" if self.v_cont else
                       "RESHAPE", vr, [(f"Vcur-{il}", ne_of(v3))])
        vr2 = vr.reshape(T * nk, 1)
        v2 = self.node(f"{v1} (reshaped)", "RESHAPE", vr2, [(v1, ne_of(vr))])
        vflat = v_cache_flat_f32.reshape(-1, 1)
        before = self.v_cache_before.reshape(-1, 1)
        self.node(f"cache_v_l{il} (reshaped)", "RESHAPE", before, [(f"cache_v_l{il}", (nk, self.n_ctx, 1, 1))], c)
        self.node(f"cache_v_l{il} (reshaped) (view)", "SET_ROWS", vflat,
                  [(v2, ne_of(vr2)), ("attn_inp_v_idxs", (T * nk, 1, 1, 1))], c)

    def attention(self, il, q_name, q, k_view, v_view, kq, kq_sm, kqv, kqv_out, k_type):
        """Cache views, Q permute, kq, soft_max, kqv, permute and CONT (build_attn_mha, no flash attention).

        k_view: (n_kv, Hkv, D) K cells as float32; v_view: (D, Hkv, n_kv) V cells (transposed cache);
        q: (T, H, D); kq, kq_sm: (H, T, n_kv); kqv: (H, T, D); kqv_out: (T, H*D); k_type: the K cache's type.
        """
        c, kt, nk = self.ctype, k_type, k_view.shape[1] * k_view.shape[2]
        vv = v_view  # (D, Hkv, n_kv) is ne {n_kv, Hkv, D}
        self.node(f"cache_v_l{il} (view)", "VIEW", vv, [(f"cache_v_l{il}", (nk, self.n_ctx, 1, 1))], c)
        vp = vv.transpose(1, 0, 2)  # ne {n_kv, D, Hkv}
        self.node(f"cache_v_l{il} (view) (permuted)", "PERMUTE", vp, [(f"cache_v_l{il} (view)", ne_of(vv))], c)
        self.node(f"cache_k_l{il} (view)", "VIEW", k_view, [(f"cache_k_l{il}", (nk, self.n_ctx, 1, 1))], kt,
                  ne=ne_of(k_view))
        kp = k_view.transpose(1, 0, 2)  # ne {D, n_kv, Hkv}
        self.node(f"cache_k_l{il} (view) (permuted)", "PERMUTE", kp, [(f"cache_k_l{il} (view)", ne_of(k_view))], kt,
                  ne=ne_of(kp))
        self.node(f"{q_name} (view)", "VIEW", q, [(q_name, ne_of(q))])
        qp = q.transpose(1, 0, 2)  # ne {D, T, H}
        self.node(f"{q_name} (view) (permuted)", "PERMUTE", qp, [(f"{q_name} (view)", ne_of(q))])
        self.node(f"kq-{il}", "MUL_MAT", kq, [(f"cache_k_l{il} (view) (permuted)", ne_of(kp)), (f"{q_name} (view) (permuted)", ne_of(qp))])
        self.node(f"kq_soft_max-{il}", "SOFT_MAX", kq_sm, [(f"kq-{il}", ne_of(kq)), ("attn_inp_kq_mask", (self.n_kv, self.T, 1, 1))])
        self.node(f"kqv-{il}", "MUL_MAT", kqv, [(f"cache_v_l{il} (view) (permuted)", ne_of(vp)), (f"kq_soft_max-{il}", ne_of(kq_sm))])
        kqvp = kqv.transpose(1, 0, 2)  # ne {D, H, T}
        self.node(f"kqv-{il} (permuted)", "PERMUTE", kqvp, [(f"kqv-{il}", ne_of(kqv))])
        self.node(f"kqv_out-{il}", "CONT", kqv_out, [(f"kqv-{il} (permuted)", ne_of(kqvp))])

    def attention_fa(self, il, q_name, q, k_roped, v3, k_all, v_all, k_view, v_view, k16, v16, kqv_out,
                     k_src=None, v_src=None, types=("f16", "f16")):
        """The cache stores and the FLASH_ATTN_EXT node of build_attn_mha with flash attention (V not
        transposed; an F32 cache's K and V views are cast to F16 by CPY nodes first; a quantized cache's
        nodes carry no values).

        k_all, v_all: (n_ctx, n_embd_kv) whole caches as float32; k_view, v_view: (n_kv, Hkv, D) cells;
        k16, v16: the same as F16 values (float32); q: (T, H, D); kqv_out: (T, H*D); k_src / v_src: the
        names of the stored K and V (default Kcur-il / Vcur-il; " (reshaped)" after a Hadamard rotation)."""
        T = self.T
        tk, tv = types
        k_src = k_src or f"Kcur-{il}"
        v_src = v_src or f"Vcur-{il}"
        nk = k_roped.shape[1] * k_roped.shape[2]
        n_ctx = self.n_ctx
        kv = k_roped.reshape(T, nk)
        self.node(f"{k_src} (view)", "VIEW", kv, [(k_src, ne_of(k_roped))])
        self.node(f"cache_k_l{il} (view)", "SET_ROWS", k_all, [(f"{k_src} (view)", ne_of(kv)), ("attn_inp_k_idxs", (T, 1, 1, 1))],
                  tk, ne=(nk, n_ctx, 1, 1))
        vv = v3.reshape(T, nk)
        self.node(f"{v_src} (view)", "VIEW", vv, [(v_src, ne_of(v3))])
        self.node(f"cache_v_l{il} (view)", "SET_ROWS", v_all, [(f"{v_src} (view)", ne_of(vv)), ("attn_inp_v_idxs", (T, 1, 1, 1))],
                  tv, ne=(nk, n_ctx, 1, 1))
        self.node(f"{q_name} (view)", "VIEW", q, [(q_name, ne_of(q))])
        qp = q.transpose(1, 0, 2)  # ne {D, T, H}
        self.node(f"{q_name} (view) (permuted)", "PERMUTE", qp, [(f"{q_name} (view)", ne_of(q))])
        kv_src = None
        for name, view, view16, t in (("k", k_view, k16, tk), ("v", v_view, v16, tv)):
            base = f"cache_{name}_l{il}"
            D, G, n = view.shape[2], view.shape[1], view.shape[0]
            self.node(f"{base} (view)", "VIEW", view, [(base, (nk, n_ctx, 1, 1))], t, ne=(D, G, n, 1))
            perm = view.transpose(1, 0, 2)  # ne {D, n_kv, Hkv}
            self.node(f"{base} (view) (permuted)", "PERMUTE", perm, [(f"{base} (view)", (D, G, n, 1))], t, ne=(D, n, G, 1))
            src = f"{base} (view) (permuted)"
            if t == "f32":
                cp = view16.transpose(1, 0, 2)
                self.node(f"{src} (copy)", "CPY", cp, [(src, ne_of(perm)), (f"{src} (copy)", ne_of(perm))], "f16")
                src = f"{src} (copy)"
            if name == "k":
                kv_src = (src, (D, n, G, 1))
        H, D = q.shape[1], q.shape[2]
        fa = kqv_out.reshape(T, H, D)  # ne {D, H, T}
        fa_name = self.node(None, "FLASH_ATTN_EXT", fa, [(f"{q_name} (view) (permuted)", ne_of(qp)), kv_src])
        self.node(f"kqv_out-{il}", "RESHAPE", kqv_out, [(fa_name, ne_of(fa))])

    def attn_out(self, il, out, weight_name, n_in, src=None, steps=(), scaled=None) -> str:
        # qwen2's graph does not name the output projection (llama and mistral3 call it attn_out)
        name = None if self.arch == "qwen2" else f"attn_out-{il}"
        return self.lora_mm(name, out, weight_name, n_in, src or f"kqv_out-{il}", (n_in, self.T, 1, 1), steps, scaled)

    def out_rows(self, attn_name, attn_rows, inp_name, inp_rows, T_full):
        E = attn_rows.shape[1]
        a = self.node(None, "GET_ROWS", attn_rows, [(attn_name, (E, T_full, 1, 1)), ("out_ids", (attn_rows.shape[0], 1, 1, 1))])
        b = self.node(None, "GET_ROWS", inp_rows, [(inp_name, (E, T_full, 1, 1)), ("out_ids", (inp_rows.shape[0], 1, 1, 1))])
        return a, b

    # --- feed-forward ------------------------------------------------------------------------

    def add(self, name, out, a_name, b_name, b_ne=None) -> str:
        return self.node(name, "ADD", out, [(a_name, ne_of(out)), (b_name, b_ne or ne_of(out))])

    def add_direction(self, name, out, a_name) -> str:
        """build_cvec: a control vector's direction (an unnamed 1-d tensor) added to a block's output."""
        return self.node(name, "ADD", out, [(a_name, ne_of(out)), ("", (out.shape[1], 1, 1, 1))])

    def matmul(self, name, out, weight_name, n_in, src_name, steps=(), scaled=None) -> str:
        """A named product (with its scale's and its LoRA adapters' nodes, if any)."""
        return self.lora_mm(name, out, weight_name, n_in, src_name, (n_in, out.shape[0], 1, 1), steps, scaled)

    def swiglu(self, il, out, gate_name=None, up_name=None):
        self.node(f"ffn_swiglu-{il}", "SWIGLU", out, [(gate_name or f"ffn_gate-{il}", ne_of(out)),
                                                      (up_name or f"ffn_up-{il}", ne_of(out))])
