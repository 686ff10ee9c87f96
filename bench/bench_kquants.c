/* bench_kquants - error and speed of the stock-type encoders: the reference
 * and every fast path this CPU has, at 1 and 2 threads, in one run.
 *
 * The matrix imitates a real weight tensor with outliers: R rows x 5120
 * columns (R = 4096 unless --rows says otherwise) of Gaussian(0, 0.02),
 * 0.1% of the weights (distinct, chosen at random) multiplied by 10, and 4
 * whole columns multiplied by 8. For q8_0, q4_K and q3_K it prints the
 * relative RMSE sqrt(sum (w - dq)^2 / sum w^2) against ggml's reference
 * encoders' figures on such data, then, for each path (ref, scalar, avx2,
 * avx512; PN_CPU_PATH=NAME times only that one beside the reference) and
 * thread count (1 and 2, rows split among OpenMP threads), the weights
 * encoded per second (best wall time of --repeat passes, default 3, the
 * passes of all configurations interleaved so that a noisy neighbour hurts
 * them alike), the same per CPU-second of the process (all threads: a
 * per-core figure that preemption by other work disturbs less), the ratios
 * to the reference at the same thread count, and
 * whether the bytes equal the reference's (exit 1 if not). --sums times
 * the fused error sums of quant/quant_row.h as well (pn_quantize_row_sums
 * with per-block sums).
 *
 * Figures for ggml's own reference encoders (no importance matrix) on such
 * data: q8_0 0.00672 at 2.6e8 w/s, q4_K 0.0776 at 1.5e7, q3_K 0.163 at
 * 8.7e7 (one core of an AMD EPYC; measured once, kept for orientation).
 *
 * Usage: bench_kquants [--rows R] [--repeat N] [--seed S] [--type q8_0|q4_K|q3_K] [--sums]
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/kquants.h"
#include "quant/pn_fast.h"
#include "quant/quant_row.h"
#include "quant/types.h"

#define COLS 5120

static uint64_t rng_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s)
{
    return (double)(rng_u64(s) >> 11) * 0x1.0p-53;
}

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

/* One pass over all rows: wall seconds (-1 on an encoder error) and, in
 * *cpu, the process's CPU seconds (all threads), which a busy machine
 * disturbs less. */
static double run_pass(int type, int path, int threads, int sums, const float *w, int64_t rows,
                       uint8_t *q, double *err, double *norm, double *cpu)
{
    const int64_t rb = pn_type_row_bytes(type, COLS), nblk = pn_row_sum_blocks(type, COLS);
    int failed = 0;
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
#pragma omp parallel for schedule(static) num_threads(threads) reduction(| : failed)
    for (int64_t r = 0; r < rows; r++) {
        pn_status st =
            pn_quantize_row_sums(type, path, w + r * COLS, COLS, q + r * rb, NULL,
                                 sums ? err + r * nblk : NULL, sums ? norm + r * nblk : NULL);
        failed |= st != PN_OK;
    }
    double t = clock_s(CLOCK_MONOTONIC) - t0;
    *cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    return failed ? -1.0 : t;
}

int main(int argc, char **argv)
{
    int64_t rows = 4096;
    int repeat = 3, with_sums = 0;
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
        else if (!strcmp(argv[i], "--sums"))
            with_sums = 1;
        else {
            fprintf(stderr, "usage: %s [--rows R] [--repeat N] [--seed S] [--type T] [--sums]\n",
                    argv[0]);
            return 2;
        }
    }
    if (rows < 1 || repeat < 1) {
        fprintf(stderr, "bench_kquants: --rows and --repeat must be >= 1\n");
        return 2;
    }
    /* the paths to time beside the reference */
    int paths[PN_PATH_COUNT], npaths = 0;
    const char *env = getenv(PN_CPU_PATH_ENV);
    if (env && *env) {
        int p = pn_path_from_name(env);
        if (p < 0 || !pn_path_available(p)) {
            fprintf(stderr, "bench_kquants: %s=%s: %s (ref, scalar, avx2, avx512)\n",
                    PN_CPU_PATH_ENV, env, p < 0 ? "no such path" : "this CPU cannot run it");
            return 2;
        }
        if (p != PN_PATH_REF)
            paths[npaths++] = p;
    } else {
        for (int p = PN_PATH_SCALAR_FAST; p < PN_PATH_COUNT; p++)
            if (pn_path_available(p))
                paths[npaths++] = p;
    }
    const int64_t n = rows * COLS;
    float *w = malloc((size_t)n * sizeof *w);
    float *dq = malloc((size_t)n * sizeof *dq);
    uint8_t *hit = calloc((size_t)n, 1);
    uint8_t *qref = malloc((size_t)n * 2),
            *q = malloc((size_t)n * 2); /* more than any type needs */
    double *err = malloc((size_t)(rows * (COLS / 32)) * sizeof(double));
    double *norm = malloc((size_t)(rows * (COLS / 32)) * sizeof(double));
    if (!w || !dq || !hit || !qref || !q || !err || !norm) {
        fprintf(stderr, "bench_kquants: out of memory for %lld weights\n", (long long)n);
        return 1;
    }
    memset(q, 0, (size_t)n * 2); /* fault the pages in before timing */
    memset(qref, 0, (size_t)n * 2);
    memset(dq, 0, (size_t)n * sizeof *dq);
    memset(err, 0, (size_t)(rows * (COLS / 32)) * sizeof(double));
    memset(norm, 0, (size_t)(rows * (COLS / 32)) * sizeof(double));
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

    static const struct {
        int type;
        double ref_err;
    } types[] = {
        { PN_TYPE_Q8_0, 0.00672 },
        { PN_TYPE_Q4_K, 0.0776 },
        { PN_TYPE_Q3_K, 0.163 },
    };
    printf("matrix %lld x %d, Gaussian(0, 0.02), 0.1%% x10, columns %d %d %d %d x8, seed %llu; "
           "best of %d interleaved passes%s\n",
           (long long)rows, COLS, cols[0], cols[1], cols[2], cols[3], (unsigned long long)seed,
           repeat, with_sums ? "; with the fused per-block sums" : "");
    int status = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        if (only && strcmp(only, pn_type_name(types[t].type)) != 0)
            continue;
        const int type = types[t].type;
        const int64_t rb = pn_type_row_bytes(type, COLS);
        /* configurations: (path, threads); index 0 and 1 are the reference */
        const int ncfg = 2 * (1 + npaths);
        double best[2 * (1 + PN_PATH_COUNT)], best_cpu[2 * (1 + PN_PATH_COUNT)];
        int same[2 * (1 + PN_PATH_COUNT)];
        for (int c = 0; c < ncfg; c++) {
            best[c] = best_cpu[c] = INFINITY;
            same[c] = 1;
        }
        for (int rep = 0; rep < repeat; rep++) {
            for (int c = 0; c < ncfg; c++) {
                const int path = c < 2 ? PN_PATH_REF : paths[c / 2 - 1], threads = 1 + c % 2;
                double cpu = 0.0;
                double dt = run_pass(type, path, threads, with_sums, w, rows, c == 0 ? qref : q,
                                     err, norm, &cpu);
                if (dt < 0) {
                    fprintf(stderr, "bench_kquants: %s path %s failed to encode the matrix\n",
                            pn_type_name(types[t].type), pn_path_name(path));
                    return 1;
                }
                best[c] = dt < best[c] ? dt : best[c];
                best_cpu[c] = cpu < best_cpu[c] ? cpu : best_cpu[c];
                if (c > 0 && memcmp(q, qref, (size_t)(rows * rb)) != 0)
                    same[c] = 0;
            }
        }
        for (int64_t r = 0; r < rows; r++)
            pn_dequantize_row_type(type, qref + r * rb, dq + r * COLS, COLS);
        double see = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double e = (double)w[i] - dq[i];
            see += e * e;
        }
        const double rel = sqrt(see / sww);
        printf("%s: rel_rmse %.5f (ggml's reference %.5f, ratio %.4f)\n",
               pn_type_name(types[t].type), rel, types[t].ref_err, rel / types[t].ref_err);
        printf("  %-7s %7s %12s %9s %14s %9s %s\n", "path", "threads", "w/s (wall)", "x ref",
               "w/s per cpu-s", "x ref", "bytes");
        for (int c = 0; c < ncfg; c++) {
            const int path = c < 2 ? PN_PATH_REF : paths[c / 2 - 1], threads = 1 + c % 2;
            printf("  %-7s %7d %12.3e %8.2fx %14.3e %8.2fx %s\n", pn_path_name(path), threads,
                   (double)n / best[c], best[c % 2] / best[c], (double)n / best_cpu[c],
                   best_cpu[c % 2] / best_cpu[c],
                   c == 0    ? "reference"
                   : same[c] ? "same"
                             : "DIFFER");
            if (!same[c])
                status = 1;
        }
        fflush(stdout);
    }
    free(w);
    free(dq);
    free(hit);
    free(qref);
    free(q);
    free(err);
    free(norm);
    return status;
}
