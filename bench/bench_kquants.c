/* bench_kquants - error and single-thread speed of the stock-type encoders.
 *
 * The matrix imitates a real weight tensor with outliers: R rows x 5120
 * columns (R = 4096 unless --rows says otherwise) of Gaussian(0, 0.02),
 * 0.1% of the weights (distinct, chosen at random) multiplied by 10, and 4
 * whole columns multiplied by 8. For q8_0, q4_K and q3_K it prints the
 * relative RMSE sqrt(sum (w - dq)^2 / sum w^2) and the weights encoded per
 * second on one thread (best of --repeat runs, default 1), by the wall clock
 * and by the thread's CPU time (the latter is steadier on a shared machine;
 * the speed ratio uses the wall clock).
 *
 * Reference figures for ggml's own reference encoders (no importance
 * matrix) on such data: q8_0 0.00672 at 2.6e8 w/s, q4_K 0.0776 at 1.5e7,
 * q3_K 0.163 at 8.7e7.
 *
 * Usage: bench_kquants [--rows R] [--repeat N] [--seed S] [--type q8_0|q4_K|q3_K]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/kquants.h"
#include "quant/types.h"

#define COLS 5120

static uint64_t rng_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) { return (double)(rng_u64(s) >> 11) * 0x1.0p-53; }

static double rng_gauss(uint64_t *s)
{
    double u1 = rng_uniform(s), u2 = rng_uniform(s);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int64_t rows = 4096;
    int repeat = 1;
    uint64_t seed = 20240601;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--type") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: %s [--rows R] [--repeat N] [--seed S] [--type T]\n", argv[0]);
            return 2;
        }
    }
    if (rows < 1 || repeat < 1) {
        fprintf(stderr, "bench_kquants: --rows and --repeat must be >= 1\n");
        return 2;
    }
    const int64_t n = rows * COLS;
    float *w = malloc((size_t)n * sizeof *w);
    float *dq = malloc((size_t)n * sizeof *dq);
    uint8_t *hit = calloc((size_t)n, 1);
    uint8_t *q = malloc((size_t)n * 2); /* more than any of the types needs */
    if (!w || !dq || !hit || !q) {
        fprintf(stderr, "bench_kquants: out of memory for %lld weights\n", (long long)n);
        return 1;
    }
    memset(q, 0, (size_t)n * 2); /* fault the pages in before timing */
    memset(dq, 0, (size_t)n * sizeof *dq);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)(0.02 * rng_gauss(&s));
    for (int64_t k = 0; k < n / 1000;) {
        int64_t i = (int64_t)(rng_uniform(&s) * (double)n);
        if (!hit[i]) {
            hit[i] = 1;
            w[i] *= 10.0f;
            k++;
        }
    }
    int cols[4];
    for (int k = 0; k < 4;) {
        int c = (int)(rng_uniform(&s) * COLS), dup = 0;
        for (int j = 0; j < k; j++)
            dup |= cols[j] == c;
        if (!dup)
            cols[k++] = c;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int k = 0; k < 4; k++)
            w[r * COLS + cols[k]] *= 8.0f;

    double sww = 0.0;
    for (int64_t i = 0; i < n; i++)
        sww += (double)w[i] * w[i];

    static const struct { int type; const char *name; double ref_err, ref_speed; } types[] = {
        {PN_TYPE_Q8_0, "q8_0", 0.00672, 2.6e8},
        {PN_TYPE_Q4_K, "q4_K", 0.0776, 1.5e7},
        {PN_TYPE_Q3_K, "q3_K", 0.163, 8.7e7},
    };
    printf("matrix %lld x %d, Gaussian(0, 0.02), 0.1%% x10, columns %d %d %d %d x8, seed %llu\n",
           (long long)rows, COLS, cols[0], cols[1], cols[2], cols[3], (unsigned long long)seed);
    printf("%-5s %10s %10s %8s %12s %12s %12s %8s\n", "type", "rel_rmse", "ggml", "ratio", "w/s (wall)",
           "w/s (cpu)", "ggml w/s", "ratio");
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        if (only && strcmp(only, types[t].name) != 0)
            continue;
        const int64_t rb = pn_type_row_bytes(types[t].type, COLS);
        double best = INFINITY, best_cpu = INFINITY;
        for (int rep = 0; rep < repeat; rep++) {
            double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
            for (int64_t r = 0; r < rows; r++) {
                int64_t bad = 0;
                pn_status st = pn_quantize_row_stock(types[t].type, w + r * COLS, COLS, q + r * rb, &bad);
                if (st != PN_OK) {
                    fprintf(stderr, "bench_kquants: %s row %lld column %lld: %s\n", types[t].name,
                            (long long)r, (long long)bad, pn_strerror(st));
                    return 1;
                }
            }
            double dt = clock_s(CLOCK_MONOTONIC) - t0, dc = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
            best = dt < best ? dt : best;
            best_cpu = dc < best_cpu ? dc : best_cpu;
        }
        for (int64_t r = 0; r < rows; r++)
            pn_dequantize_row_stock(types[t].type, q + r * rb, dq + r * COLS, COLS);
        double see = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double e = (double)w[i] - dq[i];
            see += e * e;
        }
        double err = sqrt(see / sww), speed = (double)n / best, speed_cpu = (double)n / best_cpu;
        printf("%-5s %10.5f %10.5f %8.4f %12.3e %12.3e %12.3e %8.3f\n", types[t].name, err, types[t].ref_err,
               err / types[t].ref_err, speed, speed_cpu, types[t].ref_speed, speed / types[t].ref_speed);
        fflush(stdout);
    }
    free(w);
    free(dq);
    free(hit);
    free(q);
    return 0;
}
