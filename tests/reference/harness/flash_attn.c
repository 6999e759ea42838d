// Reference FLASH_ATTN_EXTs from ggml's CPU backend for synapse's tests: random Q (f32), K and V (f16, not
// transposed, as llama.cpp's cache), a causal F16 mask over positions with a few empty cells, scale 1/sqrt(D),
// computed by ggml_graph_compute_with_ctx with 1 and 2 threads. The shapes take each of ggml's three kernels:
// one row per query (T < 64), split-KV (T = 1, n_kv >= 512: chunks by thread) and tiled (T >= 64).
// Output (little endian) per case and thread count: i32 H, Hkv, D, T, n_kv, nthreads, then out f32 (T*H*D,
// [t][h][d]). The inputs are not stored: the test draws them again from the same xorshift64 / Box-Muller stream
// (q [t][h][d] * 1.5; then per cell, per (head, d): k = normal + 0.004 * cell, v = normal; both rounded to F16).
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
    // H, Hkv, D, T, n_kv
    int cases[][5] = {{4, 2, 64, 3, 300}, {12, 2, 128, 5, 300}, {12, 2, 128, 1, 768}, {8, 2, 256, 2, 300},
                      {6, 2, 192, 1, 600}, {12, 2, 128, 1, 300}, {2, 1, 128, 64, 300}};
    for (unsigned ic = 0; ic < sizeof cases / sizeof *cases; ic++)
    for (int nthreads = 1; nthreads <= 2; nthreads++) {
        s = 88172645463325252ull + ic;  // each case's own stream, the same for both thread counts
        int H = cases[ic][0], G = cases[ic][1], D = cases[ic][2], T = cases[ic][3], n_kv = cases[ic][4];
        struct ggml_init_params ip = { 256 * 1024 * 1024, NULL, false };
        struct ggml_context * ctx = ggml_init(ip);
        struct ggml_tensor * q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, T, H);
        struct ggml_tensor * k = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, D, n_kv, G);
        struct ggml_tensor * v = ggml_new_tensor_3d(ctx, GGML_TYPE_F16, D, n_kv, G);
        struct ggml_tensor * m = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n_kv, T);
        float * qf = malloc(sizeof(float) * T * H * D);  // [t][h][d]
        ggml_fp16_t * kf = malloc(2 * (size_t) n_kv * G * D);  // [cell][g][d]
        ggml_fp16_t * vf = malloc(2 * (size_t) n_kv * G * D);
        int * kv_pos = malloc(sizeof(int) * n_kv), * q_pos = malloc(sizeof(int) * T);
        for (int i = 0; i < T * H * D; i++) qf[i] = nrand() * 1.5f;
        for (int c = 0; c < n_kv; c++)
            for (int i = 0; i < G * D; i++) {
                kf[(size_t) c * G * D + i] = ggml_fp32_to_fp16(nrand() + 0.004f * c);  // rising scores: new maxima
                vf[(size_t) c * G * D + i] = ggml_fp32_to_fp16(nrand());
            }
        int n_used = n_kv - 21;  // the last cells empty, as a padded view
        for (int c = 0; c < n_kv; c++) kv_pos[c] = c < n_used ? c : -1;
        for (int c = 40; c < 47 && c < n_used; c++) kv_pos[c] = -1;  // empty cells inside the view
        for (int t = 0; t < T; t++) q_pos[t] = n_used - T + t;
        for (int t = 0; t < T; t++) for (int h = 0; h < H; h++) for (int d = 0; d < D; d++)
            ((float *) q->data)[((size_t) h * T + t) * D + d] = qf[((size_t) t * H + h) * D + d];
        for (int g = 0; g < G; g++) for (int c = 0; c < n_kv; c++) for (int d = 0; d < D; d++) {
            ((ggml_fp16_t *) k->data)[((size_t) g * n_kv + c) * D + d] = kf[((size_t) c * G + g) * D + d];
            ((ggml_fp16_t *) v->data)[((size_t) g * n_kv + c) * D + d] = vf[((size_t) c * G + g) * D + d];
        }
        for (int t = 0; t < T; t++) for (int c = 0; c < n_kv; c++)
            ((ggml_fp16_t *) m->data)[(size_t) t * n_kv + c] =
                ggml_fp32_to_fp16(kv_pos[c] >= 0 && kv_pos[c] <= q_pos[t] ? 0.0f : -INFINITY);
        struct ggml_tensor * y = ggml_flash_attn_ext(ctx, q, k, v, m, 1.0f / sqrtf((float) D), 0.0f, 0.0f);
        struct ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, y);
        ggml_graph_compute_with_ctx(ctx, gf, nthreads);
        int hdr[6] = {H, G, D, T, n_kv, nthreads};
        fwrite(hdr, 4, 6, f);
        fwrite(y->data, 4, (size_t) T * H * D, f);  // res [D, H, T]: [t][h][d]
        free(qf); free(kf); free(vf); free(kv_pos); free(q_pos); ggml_free(ctx);
    }
    fclose(f);
    return 0;
}
