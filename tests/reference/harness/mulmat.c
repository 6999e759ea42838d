// Reference MUL_MATs from ggml's CPU backend (plain context: weights not repacked) for synapse's tests.
// For each type, shape and batch size: random rows quantized with ggml_quantize_chunk, random activations,
// ggml_mul_mat computed by ggml_graph_compute_with_ctx with NTHREADS threads.
// Output (little endian) per case: i32 type, K, N, T, raw weights (N*row_size), x f32 (T*K), out f32 (T*N).
#include "ggml.h"
#include "ggml-cpu.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

static uint64_t s = 88172645463325252ull;
static double urand(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return (s >> 11) * (1.0 / 9007199254740992.0); }
static float nrand(void) { double u = urand() + 1e-12, v = urand(); return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v)); }

int main(int argc, char ** argv) {
    FILE * f = fopen(argv[1], "wb");
    int nthreads = argc > 2 ? atoi(argv[2]) : 2;
    int types[] = {GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0};
    int shapes[][2] = {{256, 13}, {768, 40}};
    int batches[] = {1, 3, 8, 13};
    for (unsigned it = 0; it < sizeof types / sizeof *types; it++)
    for (unsigned is = 0; is < sizeof shapes / sizeof *shapes; is++)
    for (unsigned ib = 0; ib < sizeof batches / sizeof *batches; ib++) {
        int type = types[it], K = shapes[is][0], N = shapes[is][1], T = batches[ib];
        struct ggml_init_params ip = { 64 * 1024 * 1024, NULL, false };
        struct ggml_context * ctx = ggml_init(ip);
        struct ggml_tensor * w = ggml_new_tensor_2d(ctx, type, K, N);
        struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, T);
        float * wf = malloc(sizeof(float) * K * N);
        for (int i = 0; i < K * N; i++) wf[i] = nrand() * (1.0f + (i % 97 == 0) * 4.0f);
        ggml_quantize_chunk(type, wf, w->data, 0, N, K, NULL);
        for (int i = 0; i < K * T; i++) ((float *) x->data)[i] = nrand() * 0.5f;
        struct ggml_tensor * y = ggml_mul_mat(ctx, w, x);
        struct ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, y);
        ggml_graph_compute_with_ctx(ctx, gf, nthreads);
        int hdr[4] = {type, K, N, T};
        fwrite(hdr, 4, 4, f); fwrite(w->data, 1, ggml_nbytes(w), f); fwrite(x->data, 4, (size_t)K * T, f);
        fwrite(y->data, 4, (size_t)N * T, f);
        free(wf); ggml_free(ctx);
    }
    fclose(f);
    return 0;
}
