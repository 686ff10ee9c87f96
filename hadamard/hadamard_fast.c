/* Run-time choice of the fastest exact rotation. */
#include "hadamard/hadamard.h"

void pn_hadamard_rotate_row(float *x, int64_t K, int B)
{
    pn_hadamard_rotate_row_ref(x, K, B);
}
