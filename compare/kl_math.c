/* kl_math.c - pn-compare's arithmetic: the fixed token sequences, KL and
 * top-1 of two logit rows in double, the nearest-rank quantile (see
 * kl_math.h). */
#include "compare/kl_math.h"

#include <math.h>
#include <stdlib.h>

uint32_t pn_compare_fixed_token(uint32_t n_vocab, int s, int i)
{
    uint64_t z = 0x504E2D434F4D5041ull +
                 (uint64_t)(s * PN_COMPARE_FIXED_LEN + i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return n_vocab ? (uint32_t)(z % n_vocab) : 0;
}

/* log(sum exp(x - max)) and the first maximum, in double */
static void log_sum_exp(const float *x, size_t n, double *max, double *lse, uint32_t *arg)
{
    double m = x[0];
    uint32_t a = 0;
    for (size_t i = 1; i < n; i++)
        if ((double)x[i] > m) {
            m = x[i];
            a = (uint32_t)i;
        }
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += exp((double)x[i] - m);
    *max = m;
    *lse = log(s);
    *arg = a;
}

pn_status pn_compare_kl(const float *p, const float *q, size_t n, double *kl, uint32_t *argmax_p,
                        uint32_t *argmax_q, size_t *bad)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i]) || !isfinite(q[i])) {
            if (bad)
                *bad = i;
            return PN_ERR_NONFINITE;
        }
    if (n == 0) {
        *kl = 0.0;
        return PN_OK;
    }
    double pm, pl, qm, ql;
    uint32_t pa, qa;
    log_sum_exp(p, n, &pm, &pl, &pa);
    log_sum_exp(q, n, &qm, &ql, &qa);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double lp = (double)p[i] - pm - pl;
        double lq = (double)q[i] - qm - ql;
        sum += exp(lp) * (lp - lq);
    }
    *kl = sum > 0.0 ? sum : 0.0;
    if (argmax_p)
        *argmax_p = pa;
    if (argmax_q)
        *argmax_q = qa;
    return PN_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pn_compare_quantile(double *v, size_t n, double q)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    double r = ceil(q * (double)n);
    size_t k = r < 1.0 ? 1 : r > (double)n ? n : (size_t)r;
    return v[k - 1];
}
