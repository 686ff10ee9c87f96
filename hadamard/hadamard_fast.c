/* The portable fast block Hadamard rotation and the run-time choice of the
 * fastest exact one. Why every path equals the reference: hadamard_fast.h. */
#include "hadamard/hadamard_fast.h"

#include <math.h>
#include <string.h>

#include "hadamard/hadamard.h"

/* Stages h and 2h in one pass: within each chunk of 4h, the four values
 * j, j+h, j+2h, j+3h take stage h's two butterflies and then stage 2h's two,
 * which are exactly the butterflies the reference applies to them. */
static void stage_pair(double *buf, int B, int h)
{
    for (int c = 0; c < B; c += 4 * h) {
        for (int j = c; j < c + h; j++) {
            double x0 = buf[j], x1 = buf[j + h], x2 = buf[j + 2 * h], x3 = buf[j + 3 * h];
            double a0 = x0 + x1, a1 = x0 - x1, a2 = x2 + x3, a3 = x2 - x3;
            buf[j] = a0 + a2;
            buf[j + 2 * h] = a0 - a2;
            buf[j + h] = a1 + a3;
            buf[j + 3 * h] = a1 - a3;
        }
    }
}

static void stage_single(double *buf, int B, int h)
{
    for (int c = 0; c < B; c += 2 * h) {
        for (int j = c; j < c + h; j++) {
            double a = buf[j], b = buf[j + h];
            buf[j] = a + b;
            buf[j + h] = a - b;
        }
    }
}

void pn_hadamard_rotate_row_scalar_fast(float *x, int64_t K, int B)
{
    double buf[PN_HADAMARD_MAX_BLOCK];
    const double scale = 1.0 / sqrt((double)B);
    for (int64_t base = 0; base + B <= K; base += B) {
        float *xb = x + base;
        for (int j = 0; j < B; j++)
            buf[j] = (double)xb[j];
        int h = 1;
        for (; 4 * h <= B; h *= 4)
            stage_pair(buf, B, h);
        if (2 * h <= B)
            stage_single(buf, B, h);
        for (int j = 0; j < B; j++)
            xb[j] = (float)(buf[j] * scale);
    }
}

/* ---- choosing a path -------------------------------------------------- */

/* The path ids, their names and the CPU checks are the quantizer's
 * (quant/pn_fast.h): one path id picks both. */
bool pn_hadamard_path_available(int path)
{
    return pn_path_available(path);
}

static void rotate_on(int path, float *x, int64_t K, int B)
{
    switch (path) {
    case PN_PATH_SCALAR_FAST: pn_hadamard_rotate_row_scalar_fast(x, K, B); break;
    case PN_PATH_AVX2: pn_hadamard_rotate_row_avx2(x, K, B); break;
    case PN_PATH_AVX512: pn_hadamard_rotate_row_avx512(x, K, B); break;
    default: pn_hadamard_rotate_row_ref(x, K, B); break;
    }
}

pn_status pn_hadamard_rotate_row_path(int path, float *x, int64_t K, int B)
{
    if (!pn_path_available(path) || K < 1 || !pn_is_pow2(B) || B > PN_HADAMARD_MAX_BLOCK ||
        K % B != 0)
        return PN_ERR_USAGE;
    rotate_on(path, x, K, B);
    return PN_OK;
}

void pn_hadamard_rotate_row(float *x, int64_t K, int B)
{
    rotate_on(pn_cpu_path_best(), x, K, B);
}
