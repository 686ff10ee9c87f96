/* pn-compare's arithmetic (compare/compare.h), checked against direct
 * formulas: KL divergence as the textbook writes it, large logits without
 * overflow, a non-finite logit refused with its index, the 99th percentile
 * by nearest rank, and the fixed tokens.
 *
 * Stock llama.cpp running what we write, and pn-compare measuring mixes with
 * it, are tests/programs/test_llama.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compare/compare.h"
#include "fixtures/scratch.h"
#include "test_util.h"


/* ---- the arithmetic ---- */

/* KL by the textbook formula, in long double: p = e^a / sum e^a. */
static long double direct_kl(const float *a, const float *b, size_t n)
{
    long double sa = 0, sb = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        sa += expl((long double)a[i]);
        sb += expl((long double)b[i]);
    }
    for (size_t i = 0; i < n; i++) {
        long double p = expl((long double)a[i]) / sa, q = expl((long double)b[i]) / sb;
        k += p * logl(p / q);
    }
    return k;
}

Test(compare_math, kl_matches_the_textbook_formula)
{
    tu_rng r = { 42 };
    float a[1000], b[1000];
    for (int t = 0; t < 20; t++) {
        for (int i = 0; i < 1000; i++) {
            a[i] = (float)(3 * tu_rng_gauss(&r));
            b[i] = a[i] + (float)(0.3 * (t % 4) * tu_rng_gauss(&r));
        }
        double kl;
        uint32_t am, bm;
        cr_assert_eq(pn_compare_kl(a, b, 1000, &kl, &am, &bm, NULL), PN_OK);
        long double want = direct_kl(a, b, 1000);
        cr_assert(fabsl((long double)kl - want) <= 1e-12L + 1e-9L * want, "%.17g vs %.17Lg", kl,
                  want);
        uint32_t wa = 0, wb = 0;
        for (uint32_t i = 1; i < 1000; i++) {
            wa = a[i] > a[wa] ? i : wa;
            wb = b[i] > b[wb] ? i : wb;
        }
        cr_assert_eq(am, wa);
        cr_assert_eq(bm, wb);
    }
}

Test(compare_math, kl_is_zero_for_the_same_distribution_and_large_logits_do_not_overflow)
{
    float a[4] = { 1000.0f, 999.0f, -50.0f, 0.0f }, b[4] = { 1010.0f, 1009.0f, -40.0f, 10.0f };
    double kl = -1;
    cr_assert_eq(pn_compare_kl(a, a, 4, &kl, NULL, NULL, NULL), PN_OK);
    cr_assert_eq(kl, 0.0);
    /* softmax does not change when every logit moves by the same amount */
    cr_assert_eq(pn_compare_kl(a, b, 4, &kl, NULL, NULL, NULL), PN_OK);
    cr_assert(kl >= 0 && kl < 1e-12, "%g", kl);
    float c[4] = { 0, 0, 0, 0 }, d[4] = { 10, 0, 0, 0 };
    cr_assert_eq(pn_compare_kl(c, d, 4, &kl, NULL, NULL, NULL), PN_OK);
    /* p uniform, q = (e^10, 1, 1, 1) / (e^10 + 3) */
    double z = exp(10.0) + 3;
    double want = 0.25 * (log(0.25 / (exp(10.0) / z)) + 3 * log(0.25 / (1 / z)));
    cr_assert(fabs(kl - want) < 1e-12, "%.17g vs %.17g", kl, want);
    uint32_t am = 9, bm = 9;
    float e[3] = { 2, 5, 5 };
    cr_assert_eq(pn_compare_kl(e, e, 3, &kl, &am, &bm, NULL), PN_OK);
    cr_assert_eq(am, 1, "the lowest index of equal maxima");
}

Test(compare_math, a_non_finite_logit_is_refused_with_its_index)
{
    float a[3] = { 1, 2, 3 }, b[3] = { 1, NAN, 3 }, c[3] = { INFINITY, 0, 0 };
    double kl;
    size_t bad = 99;
    cr_assert_eq(pn_compare_kl(a, b, 3, &kl, NULL, NULL, &bad), PN_ERR_NONFINITE);
    cr_assert_eq(bad, 1);
    cr_assert_eq(pn_compare_kl(c, a, 3, &kl, NULL, NULL, &bad), PN_ERR_NONFINITE);
    cr_assert_eq(bad, 0);
}

Test(compare_math, the_99th_percentile_is_the_nearest_rank)
{
    double v[200];
    for (int i = 0; i < 200; i++)
        v[i] = (double)((i * 37) % 200); /* 0..199 shuffled */
    cr_assert_eq(pn_compare_quantile(v, 200, 0.99), 197.0, "ceil(198) = 198th smallest");
    double w[256];
    for (int i = 0; i < 256; i++)
        w[i] = 255 - i;
    cr_assert_eq(pn_compare_quantile(w, 256, 0.99), 253.0, "ceil(253.44) = 254th smallest");
    double one = 5;
    cr_assert_eq(pn_compare_quantile(&one, 1, 0.99), 5.0);
    cr_assert_eq(pn_compare_quantile(v, 200, 1.0), 199.0);
}

Test(compare_math, the_fixed_tokens_follow_the_documented_formula)
{
    /* splitmix64 as the header states it, written out again here */
    for (int s = 0; s < PN_COMPARE_FIXED_SEQS; s++)
        for (int i = 0; i < PN_COMPARE_FIXED_LEN; i++) {
            unsigned long long z = 0x504E2D434F4D5041ull +
                                   (unsigned long long)(s * 64 + i + 1) * 0x9E3779B97F4A7C15ull;
            z ^= z >> 30;
            z *= 0xBF58476D1CE4E5B9ull;
            z ^= z >> 27;
            z *= 0x94D049BB133111EBull;
            z ^= z >> 31;
            cr_assert_eq(pn_compare_fixed_token(248320, s, i), (uint32_t)(z % 248320));
            cr_assert_lt(pn_compare_fixed_token(300, s, i), 300);
        }
    cr_assert_eq(PN_COMPARE_FIXED_SEQS * PN_COMPARE_FIXED_LEN, 256);
}
