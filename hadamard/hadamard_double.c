/* The rotation's butterflies in double (hadamard_double.h). */
#include "hadamard/hadamard_double.h"

#include <math.h>

#include "hadamard/hadamard.h"

void pn_hadamard_rotate_double(double *x, int64_t n, int B)
{
    if (B <= 1)
        return;
    const double scale = 1.0 / sqrt((double)B);
    for (int64_t base = 0; base + B <= n; base += B) {
        double *b = x + base;
        for (int h = 1; h < B; h *= 2)
            for (int c = 0; c < B; c += 2 * h)
                for (int j = c; j < c + h; j++) {
                    double p = b[j], q = b[j + h];
                    b[j] = p + q;
                    b[j + h] = p - q;
                }
        for (int j = 0; j < B; j++)
            b[j] = b[j] * scale;
    }
}
