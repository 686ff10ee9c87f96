/* kl_math.h - pn-compare's arithmetic: the fixed token sequences, KL and
 * top-1 of two logit rows, and the nearest-rank quantile (compare.h says
 * how the comparison uses them). Pure functions, no I/O.
 */
#ifndef PN_COMPARE_KL_MATH_H
#define PN_COMPARE_KL_MATH_H

#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"

#define PN_COMPARE_FIXED_SEQS 4
#define PN_COMPARE_FIXED_LEN 64

/* Token i (0-based) of fixed sequence s for a vocabulary of n_vocab:
 * splitmix64 of the counter 0x504E2D434F4D5041 + (s * PN_COMPARE_FIXED_LEN
 * + i + 1) * 0x9E3779B97F4A7C15 (one mixing step: z ^= z >> 30, z *=
 * 0xBF58476D1CE4E5B9, z ^= z >> 27, z *= 0x94D049BB133111EB, z ^= z >> 31),
 * modulo n_vocab. */
uint32_t pn_compare_fixed_token(uint32_t n_vocab, int s, int i);

/* KL(P || Q) of the distributions softmax(p) and softmax(q) of n logits, in
 * double; never negative (a rounding below zero is 0). *argmax_p / *argmax_q
 * (may be NULL) receive the lowest index of each maximum. PN_ERR_NONFINITE
 * when a logit is NaN or infinite (its index in *bad). */
pn_status pn_compare_kl(const float *p, const float *q, size_t n, double *kl, uint32_t *argmax_p,
                        uint32_t *argmax_q, size_t *bad);

/* The q-quantile (0 < q <= 1) of n values by nearest rank: the
 * ceil(q n)-th smallest. Sorts v in place. 0 for n = 0. */
double pn_compare_quantile(double *v, size_t n, double q);

#endif
