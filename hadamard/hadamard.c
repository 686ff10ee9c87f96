/* The reference block Hadamard rotation, in the contract's exact order. */
#include "hadamard/hadamard.h"

#include <math.h>

bool pn_is_pow2(int64_t v)
{
    return v >= 1 && (v & (v - 1)) == 0;
}

int pn_hadamard_block_size(int64_t K, int cap)
{
    if (K < 1 || !pn_is_pow2(cap) || cap > PN_HADAMARD_MAX_BLOCK)
        return 0;
    int B = 1;
    while (B * 2 <= cap && K % (B * 2) == 0)
        B *= 2;
    return B;
}

void pn_hadamard_rotate_row_ref(float *x, int64_t K, int B)
{
    double buf[PN_HADAMARD_MAX_BLOCK];
    const double scale = 1.0 / sqrt((double)B);
    for (int64_t base = 0; base + B <= K; base += B) {
        for (int j = 0; j < B; j++)
            buf[j] = (double)x[base + j];
        for (int h = 1; h < B; h *= 2) {
            for (int c = 0; c < B; c += 2 * h) {
                for (int j = c; j < c + h; j++) {
                    double a = buf[j], b = buf[j + h];
                    buf[j] = a + b;
                    buf[j + h] = a - b;
                }
            }
        }
        for (int j = 0; j < B; j++)
            x[base + j] = (float)(buf[j] * scale);
    }
}
