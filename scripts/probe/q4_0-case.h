// What the decode matvec probes (matvec-layout.c, matvec-act.c) share: half
// conversions and one random Q4_0 case with its float reference.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint16_t f2h(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, e = (x >> 23) & 0xff, m = x & 0x7fffff;
    if (e < 103) return sign;
    if (e < 113) return sign | ((m | 0x800000) >> (126 - e));
    return sign | ((e - 112) << 10) | (m >> 13);
}
static float h2f(uint16_t h) {
    uint32_t s = (h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023, x;
    if (e == 0) {
        float v = m / 1024.0f / 16384.0f;
        return s ? -v : v;
    }
    x = s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

// A random Q4_0 matrix (nrows x ncols, ggml's 18-byte blocks, scales within
// +-0.01) in w, a random Q8_1 activation row (ggml's 36-byte blocks) in act,
// and ref[r] = row r of w times act, in double precision.
static void q4_0_case(int ncols, int nrows, unsigned seed, uint8_t *w, uint8_t *act, float *ref) {
    const int nb = ncols / 32;
    const long mat = (long)nrows * nb * 18;
    float *xa = malloc(sizeof(float) * ncols);
    srand(seed);
    for (long i = 0; i < mat; ++i) w[i] = rand() & 0xff;
    for (long blk = 0; blk < (long)nrows * nb; ++blk) {
        uint16_t h = f2h((rand() % 2000 - 1000) / 1e5f);
        memcpy(w + blk * 18, &h, 2);
    }
    for (int b = 0; b < nb; ++b) {
        float da = (rand() % 1000 + 1) / 1e4f;
        int qs = 0;
        for (int j = 0; j < 32; ++j) {
            int8_t v = (int8_t)(rand() % 255 - 127);
            act[b * 36 + 4 + j] = (uint8_t)v;
            qs += v;
        }
        uint16_t hd = f2h(da), hs = f2h(da * qs);
        memcpy(act + b * 36, &hd, 2);
        memcpy(act + b * 36 + 2, &hs, 2);
        for (int j = 0; j < 32; ++j) xa[b * 32 + j] = h2f(hd) * (int8_t)act[b * 36 + 4 + j];
    }
    for (int r = 0; r < nrows; ++r) {
        double s = 0;
        for (int b = 0; b < nb; ++b) {
            const uint8_t *blk = w + ((long)r * nb + b) * 18;
            uint16_t h;
            memcpy(&h, blk, 2);
            const float dw = h2f(h);
            for (int j = 0; j < 16; ++j) {
                s += dw * ((blk[2 + j] & 15) - 8) * xa[b * 32 + j];
                s += dw * ((blk[2 + j] >> 4) - 8) * xa[b * 32 + 16 + j];
            }
        }
        ref[r] = (float)s;
    }
    free(xa);
}
