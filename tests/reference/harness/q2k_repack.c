// Reference products of ggml's repacked Q2_K kernels (ggml_gemv/gemm_q2_K_8x8_q8_K, which an AVX-512 build of
// llama.cpp runs for Q2_K weights with ne1 % 8 == 0) for synapse's tests. The 8-row interleave (block_q2_Kx8) is
// written here from its description in ggml-cpu/repack.h. Activations: quantize_row_q8_K (gemv rows) and
// ggml_quantize_mat_q8_K_4x8 (groups of 4 rows for the gemm), as repack.cpp's forward_mul_mat does.
// Output per case: i32 type(=10), K, N, T, raw weights, x f32 (T*K), out f32 (T*N).
#include "ggml.h"
#include "ggml-cpu.h"
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

void ggml_quantize_mat_q8_K_4x8(const float * x, void * vy, int64_t k);
void ggml_gemv_q2_K_8x8_q8_K(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc);
void ggml_gemm_q2_K_8x8_q8_K(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc);

typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } q2k;            // block_q2_K, 84 bytes
typedef struct { uint16_t d[8], dmin[8]; uint8_t scales[128]; uint8_t qs[512]; } q2kx8;  // block_q2_Kx8

static uint64_t s = 88172645463325252ull;
static double urand(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return (s >> 11) * (1.0 / 9007199254740992.0); }
static float nrand(void) { double u = urand() + 1e-12, v = urand(); return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v)); }

static void interleave(const q2k * in, q2kx8 * out) {  // 8 blocks (one per row) -> one q2_Kx8
    for (int i = 0; i < 8; i++) { out->d[i] = in[i].d; out->dmin[i] = in[i].dmin; }
    for (int i = 0; i < 64; i++) memcpy(&out->qs[8 * i], &in[i % 8].qs[8 * (i / 8)], 8);   // 8 bytes of row i%8
    for (int i = 0; i < 128; i++) out->scales[i] = in[(i % 16) / 2].scales[(i / 16) * 2 + i % 2];
}

int main(int argc, char ** argv) {
    ggml_cpu_init();
    FILE * f = fopen(argv[1], "wb");
    int shapes[][2] = {{256, 8}, {768, 40}};
    int batches[] = {1, 3, 4, 7, 8, 13};
    for (unsigned is = 0; is < 2; is++) for (unsigned ib = 0; ib < 6; ib++) {
        int K = shapes[is][0], N = shapes[is][1], T = batches[ib], nb = K / 256;
        float * w = malloc(sizeof(float) * K * N);
        for (int i = 0; i < K * N; i++) w[i] = nrand() * (1.0f + (i % 97 == 0) * 4.0f);
        q2k * raw = malloc(sizeof(q2k) * nb * N);
        ggml_quantize_chunk(GGML_TYPE_Q2_K, w, raw, 0, N, K, NULL);
        q2kx8 * rep = malloc(sizeof(q2kx8) * nb * N / 8);
        for (int g = 0; g < N / 8; g++) for (int b = 0; b < nb; b++) {
            q2k tmp[8];
            for (int r = 0; r < 8; r++) tmp[r] = raw[(8 * g + r) * nb + b];
            interleave(tmp, &rep[g * nb + b]);
        }
        float * x = malloc(sizeof(float) * K * T);
        for (int i = 0; i < K * T; i++) x[i] = nrand() * 0.5f;
        size_t rs = ggml_row_size(GGML_TYPE_Q8_K, K);
        uint8_t * y = malloc(rs * (T + 4));
        int T4 = T - T % 4;
        for (int t = 0; t < T4; t += 4) ggml_quantize_mat_q8_K_4x8(x + (size_t)t * K, y + t * rs, K);
        for (int t = T4; t < T; t++) ggml_get_type_traits_cpu(GGML_TYPE_Q8_K)->from_float(x + (size_t)t * K, y + t * rs, K);
        float * out = malloc(sizeof(float) * T * N);
        if (T4 > 0) ggml_gemm_q2_K_8x8_q8_K(K, out, N, rep, y, T4, N);
        for (int t = T4; t < T; t++) ggml_gemv_q2_K_8x8_q8_K(K, out + (size_t)t * N, N, rep, y + t * rs, 1, N);
        int hdr[4] = {GGML_TYPE_Q2_K, K, N, T};
        fwrite(hdr, 4, 4, f); fwrite(raw, sizeof(q2k), (size_t)nb * N, f); fwrite(x, 4, (size_t)K * T, f);
        fwrite(out, 4, (size_t)T * N, f);
        free(w); free(raw); free(rep); free(x); free(y); free(out);
    }
    fclose(f);
    return 0;
}
