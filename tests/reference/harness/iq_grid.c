// Reference products and rows of ggml's grid i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S; with a second
// argument `iq1`: IQ1_S, IQ1_M; `tq`: the ternary TQ1_0, TQ2_0; `lowbit`: Q1_0, Q2_0) for synapse's tests. Rows
// quantized by ggml_quantize_chunk (with a random importance matrix: IQ2_XXS, IQ2_XS and the IQ1 types need one).
// Two kinds of case:
//   product: ggml_mul_mat in a plain context (llama.cpp repacks none of these types) by
//            ggml_graph_compute_with_ctx with 2 threads: ggml_vec_dot_<type>_q8_K below 8 tokens, the tiled matmul
//            from 8 on (TQ, Q1_0, Q2_0: vec_dot at every size, the tiled matmul does not take them);
//   rows (type written as 2000 + type, T = 0): the rows dequantized by ggml's to_float (dequantize_row_<type>).
// Output per case: i32 type, K, N, T, raw weights (N * row size), x f32 (T*K), out f32 (T*N; rows: N*K).
#include "ggml.h"
#include "ggml-cpu.h"
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

static uint64_t s = 88172645463325252ull;
static double urand(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return (s >> 11) * (1.0 / 9007199254740992.0); }
static float nrand(void) { double u = urand() + 1e-12, v = urand(); return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v)); }

static void write_case(FILE * f, int type, int K, int N, int T, const void * raw, size_t raw_bytes, const float * x,
                       const float * out, size_t n_out) {
    int hdr[4] = {type, K, N, T};
    fwrite(hdr, 4, 4, f); fwrite(raw, 1, raw_bytes, f); if (T) fwrite(x, 4, (size_t)K * T, f); fwrite(out, 4, n_out, f);
}

int main(int argc, char ** argv) {
    ggml_cpu_init();
    FILE * f = fopen(argv[1], "wb");
    int grid_types[] = {GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S};
    int iq1_types[] = {GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M};
    int tq_types[] = {GGML_TYPE_TQ1_0, GGML_TYPE_TQ2_0};
    int lowbit_types[] = {GGML_TYPE_Q1_0, GGML_TYPE_Q2_0};
    const char * set = argc > 2 ? argv[2] : "";
    int * types = strcmp(set, "iq1") == 0 ? iq1_types : strcmp(set, "tq") == 0 ? tq_types
                : strcmp(set, "lowbit") == 0 ? lowbit_types : grid_types;
    int n_types = types == grid_types ? 5 : 2;
    int shapes[][2] = {{256, 13}, {768, 40}, {1280, 9}};
    int batches[] = {1, 3, 8, 13};
    for (int it = 0; it < n_types; it++) for (int is = 0; is < 3; is++) for (int ib = 0; ib < 4; ib++) {
        int type = types[it], K = shapes[is][0], N = shapes[is][1], T = batches[ib];
        struct ggml_init_params ip = { 64 * 1024 * 1024, NULL, false };
        struct ggml_context * ctx = ggml_init(ip);
        struct ggml_tensor * w = ggml_new_tensor_2d(ctx, type, K, N);
        struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, T);
        float * wf = malloc(sizeof(float) * K * N);
        for (int i = 0; i < K * N; i++) wf[i] = nrand() * (1.0f + (i % 97 == 0) * 4.0f);
        float * imatrix = malloc(sizeof(float) * K);
        for (int i = 0; i < K; i++) imatrix[i] = 0.1f + (float) urand();
        ggml_quantize_chunk(type, wf, w->data, 0, N, K, imatrix);
        for (int i = 0; i < K * T; i++) ((float *) x->data)[i] = nrand() * 0.5f;
        struct ggml_tensor * y = ggml_mul_mat(ctx, w, x);
        struct ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, y);
        ggml_graph_compute_with_ctx(ctx, gf, 2);
        write_case(f, type, K, N, T, w->data, ggml_nbytes(w), x->data, y->data, (size_t)T * N);
        if (ib == 0 && is != 1) {  // the rows, once per shape (not the largest)
            ggml_get_type_traits(type)->to_float(w->data, wf, (int64_t)K * N);
            write_case(f, 2000 + type, K, N, 0, w->data, ggml_nbytes(w), NULL, wf, (size_t)K * N);
        }
        free(wf); free(imatrix); ggml_free(ctx);
    }
    fclose(f);
    return 0;
}
