// Reference products of ggml's MXFP4 and NVFP4 kernels for synapse's tests. Three kinds of case:
//   plain: ggml_mul_mat in a plain context (no repacking) by ggml_graph_compute_with_ctx with 2 threads:
//          ggml_vec_dot_mxfp4_q8_0 / ggml_vec_dot_nvfp4_q8_0 for every batch size (no tinyBLAS for either);
//   repacked (type written as 1000 + 39): MXFP4 rows interleaved into block_mxfp4x8 (make_block_mxfp4x8 in
//          ggml-cpu/repack.cpp, 8-byte interleave) and multiplied by ggml_gemv/gemm_mxfp4_8x8_q8_0 as
//          repack.cpp's forward_mul_mat calls them (gemm on the first T - T % 4 tokens, activations by
//          ggml_quantize_mat_q8_0_4x8; gemv on the rest, activations by quantize_row_q8_0);
//   rows (type written as 2000 + type, T = 0): the rows dequantized by ggml's to_float.
// The rows are quantized by ggml_quantize_chunk from random normals with a few 5x outliers, plus (MXFP4) rows
// scaled down by 2^-126 and 2^-125 so that MXFP4 blocks take E8M0 exponents 0 and 1 (denormal scales).
// Output per case: i32 type, K, N, T, raw weights (N * row size), x f32 (T*K), out f32 (T*N).
#include "ggml.h"
#include "ggml-cpu.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

void ggml_quantize_mat_q8_0_4x8(const float * x, void * vy, int64_t k);
void ggml_gemv_mxfp4_8x8_q8_0(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc);
void ggml_gemm_mxfp4_8x8_q8_0(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc);

typedef struct { uint8_t e; uint8_t qs[16]; } mxfp4;             // block_mxfp4, 17 bytes
typedef struct { uint8_t e[8]; uint8_t qs[128]; } mxfp4x8;       // block_mxfp4x8

static uint64_t s = 88172645463325252ull;
static double urand(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return (s >> 11) * (1.0 / 9007199254740992.0); }
static float nrand(void) { double u = urand() + 1e-12, v = urand(); return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v)); }

static void write_case(FILE * f, int type, int K, int N, int T, const void * raw, size_t raw_bytes, const float * x,
                       const float * out, size_t n_out) {
    int hdr[4] = {type, K, N, T};
    fwrite(hdr, 4, 4, f); fwrite(raw, 1, raw_bytes, f);
    if (T) fwrite(x, 4, (size_t)K * T, f);
    fwrite(out, 4, n_out, f);
}

static void weights(float * w, int K, int N) {
    for (int i = 0; i < K * N; i++) w[i] = nrand() * (1.0f + (i % 97 == 0) * 4.0f);
    for (int i = 0; i < K; i++) w[i] *= ldexpf(1.0f, -126);      // rows 0 and 1: tiny scales (MXFP4's e = 0, 1)
    for (int i = K; i < 2 * K; i++) w[i] *= ldexpf(1.0f, -125);
}

int main(int argc, char ** argv) {
    ggml_cpu_init();
    FILE * f = fopen(argv[1], "wb");
    int types[] = {GGML_TYPE_MXFP4, GGML_TYPE_NVFP4};
    int shapes[][2] = {{256, 13}, {768, 40}, {96, 11}, {1280, 9}, {192, 16}};  // K = 96: 3 blocks (an odd last block)
    int batches[] = {1, 3, 8, 13};
    for (int it = 0; it < 2; it++) for (int is = 0; is < 5; is++) for (int ib = 0; ib < 4; ib++) {
        int type = types[it], K = shapes[is][0], N = shapes[is][1], T = batches[ib];
        if (K % ggml_blck_size(type)) continue;
        struct ggml_init_params ip = { 64 * 1024 * 1024, NULL, false };
        struct ggml_context * ctx = ggml_init(ip);
        struct ggml_tensor * w = ggml_new_tensor_2d(ctx, type, K, N);
        struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, T);
        float * wf = malloc(sizeof(float) * K * N);
        weights(wf, K, N);
        ggml_quantize_chunk(type, wf, w->data, 0, N, K, NULL);
        for (int i = 0; i < K * T; i++) ((float *) x->data)[i] = nrand() * 0.5f;
        struct ggml_tensor * y = ggml_mul_mat(ctx, w, x);
        struct ggml_cgraph * gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, y);
        ggml_graph_compute_with_ctx(ctx, gf, 2);
        write_case(f, type, K, N, T, w->data, ggml_nbytes(w), x->data, y->data, (size_t)T * N);
        if (ib == 0 && (is == 0 || is == 3)) {
            ggml_get_type_traits(type)->to_float(w->data, wf, (int64_t)K * N);
            write_case(f, 2000 + type, K, N, 0, w->data, ggml_nbytes(w), NULL, wf, (size_t)K * N);
        }
        free(wf); ggml_free(ctx);
    }
    int rshapes[][2] = {{256, 8}, {768, 40}, {96, 16}};
    int rbatches[] = {1, 3, 4, 7, 8, 13};
    for (int is = 0; is < 3; is++) for (int ib = 0; ib < 6; ib++) {
        int K = rshapes[is][0], N = rshapes[is][1], T = rbatches[ib], nb = K / 32;
        float * w = malloc(sizeof(float) * K * N);
        weights(w, K, N);
        mxfp4 * raw = malloc(sizeof(mxfp4) * nb * N);
        ggml_quantize_chunk(GGML_TYPE_MXFP4, w, raw, 0, N, K, NULL);
        mxfp4x8 * rep = malloc(sizeof(mxfp4x8) * nb * N / 8);
        for (int g = 0; g < N / 8; g++) for (int b = 0; b < nb; b++) {
            mxfp4x8 * o = &rep[g * nb + b];
            for (int r = 0; r < 8; r++) o->e[r] = raw[(8 * g + r) * nb + b].e;
            for (int i = 0; i < 16; i++) memcpy(&o->qs[8 * i], &raw[(8 * g + i % 8) * nb + b].qs[8 * (i / 8)], 8);
        }
        float * x = malloc(sizeof(float) * K * T);
        for (int i = 0; i < K * T; i++) x[i] = nrand() * 0.5f;
        size_t rs = ggml_row_size(GGML_TYPE_Q8_0, K);
        uint8_t * y = malloc(rs * (T + 4));
        int T4 = T - T % 4;
        for (int t = 0; t < T4; t += 4) ggml_quantize_mat_q8_0_4x8(x + (size_t)t * K, y + t * rs, K);
        for (int t = T4; t < T; t++) ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float(x + (size_t)t * K, y + t * rs, K);
        float * out = malloc(sizeof(float) * T * N);
        if (T4 > 0) ggml_gemm_mxfp4_8x8_q8_0(K, out, N, rep, y, T4, N);
        for (int t = T4; t < T; t++) ggml_gemv_mxfp4_8x8_q8_0(K, out + (size_t)t * N, N, rep, y + t * rs, 1, N);
        write_case(f, 1000 + GGML_TYPE_MXFP4, K, N, T, raw, sizeof(mxfp4) * nb * N, x, out, (size_t)T * N);
        free(w); free(raw); free(rep); free(x); free(y); free(out);
    }
    fclose(f);
    return 0;
}
