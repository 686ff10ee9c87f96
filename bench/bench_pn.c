/* bench_pn - speed of the PN row quantizers and the Hadamard rotation, and a
 * large randomized fast == reference comparison.
 *
 *   bench_pn [--rows R] [--cols K] [--seconds S] [--seed N]
 *       Times, on one set of R rows x K weights (Gaussian, std 0.02, with
 *       0.1% outliers x10..x100), the reference and every fast path this CPU
 *       has (or only the one PN_CPU_PATH names: ref, scalar, avx2, avx512)
 *       of pn3t, pn4t and the rotation (block 1024 or the largest power of
 *       two dividing K), at 1 thread and at all OpenMP threads (rows split
 *       among threads), and prints weights/s, the scaling, the ratios to
 *       the reference and the 1-thread weights per CPU-second of the process
 *       (less disturbed by other work on a shared machine). It also checks
 *       that every path's output equals the reference's on that data (exit
 *       1 if not).
 *   bench_pn --verify M [--seed N] [--paths P,...]
 *       Quantizes M million random groups of each type (many scales, heavy
 *       tails, few-bit weights that put quotients on half-way points, exact
 *       ties between two scales, fp16 subnormal and overflow edges, zeros,
 *       NaN/Inf) with the reference and every available path (or the ones
 *       named, e.g. --paths avx2,avx512), group by group and as rows,
 *       compares bytes, status and error column; exits 1 on the first
 *       difference, printing the group. --verify 100 is 10^8 groups a type.
 * Exit status: 0 success, 1 a difference, 2 bad usage.
 */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hadamard/hadamard.h"
#include "hadamard/hadamard_fast.h"
#include "quant/fp16.h"
#include "quant/pn.h"
#include "quant/pn_fast.h"
#include "quant/types.h"

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_u64(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(rng *r)
{
    return (double)(rng_u64(r) >> 11) * 0x1p-53;
}

static double rng_gauss(rng *r)
{
    double u = rng_uniform(r), v = rng_uniform(r);
    return sqrt(-2.0 * log(u + 0x1p-60)) * cos(6.283185307179586 * v);
}

/* CPU seconds of the whole process (all threads): a pass's figure that
 * preemption by other work on a shared machine disturbs less than wall time. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- timing ----------------------------------------------------------- */

typedef enum job_kind { JOB_QUANT, JOB_ROTATE } job_kind;

typedef struct job {
    job_kind kind;
    int path;
    int type; /* JOB_QUANT */
    int B;    /* JOB_ROTATE */
    const float *src;
    float *scratch; /* JOB_ROTATE: rows are copied here, then rotated */
    uint8_t *out;   /* JOB_QUANT */
    int64_t rows, K;
} job;

/* One pass over all rows with `threads` threads; returns seconds, or -1 on a
 * quantizer error; *cpu (may be NULL) receives the pass's CPU seconds. */
static double run_once(const job *j, int threads, double *cpu)
{
    const double c0 = cpu_s();
    const int64_t row_bytes = j->kind == JOB_QUANT ? pn_type_row_bytes(j->type, j->K) : 0;
    int failed = 0;
    double t0 = now_s();
#pragma omp parallel for schedule(static) num_threads(threads) reduction(| : failed)
    for (int64_t r = 0; r < j->rows; r++) {
        if (j->kind == JOB_QUANT) {
            int64_t bad = 0;
            pn_status st = pn_quantize_row_path(j->type, j->path, j->src + r * j->K, j->K,
                                                j->out + r * row_bytes, &bad);
            if (st != PN_OK)
                failed = 1;
        } else {
            float *row = j->scratch + r * j->K;
            memcpy(row, j->src + r * j->K, (size_t)j->K * sizeof(float));
            if (pn_hadamard_rotate_row_path(j->path, row, j->K, j->B) != PN_OK)
                failed = 1;
        }
    }
    double t = now_s() - t0;
    if (cpu)
        *cpu = cpu_s() - c0;
    return failed ? -1.0 : t;
}

/* Best of several passes lasting at least `seconds` in all; weights/s of
 * wall time, and (*per_cpu, may be NULL) weights per CPU-second of the best
 * pass by CPU time. */
static double measure(const job *j, int threads, double seconds, double *per_cpu)
{
    double best = 1e30, best_cpu = 1e30, spent = 0.0;
    int passes = 0;
    while (passes < 3 || spent < seconds) {
        double cpu = 0.0;
        double t = run_once(j, threads, &cpu);
        if (t < 0)
            return -1.0;
        best = t < best ? t : best;
        best_cpu = cpu > 0.0 && cpu < best_cpu ? cpu : best_cpu;
        spent += t;
        passes++;
    }
    if (per_cpu)
        *per_cpu = (double)(j->rows * j->K) / best_cpu;
    return (double)(j->rows * j->K) / best;
}

/* The rotation's copy is timed for both paths alike; measure it to subtract. */
static double measure_copy(const float *src, float *dst, int64_t n, double seconds)
{
    double best = 1e30, spent = 0.0;
    int passes = 0;
    while (passes < 3 || spent < seconds) {
        double t0 = now_s();
        memcpy(dst, src, (size_t)n * sizeof(float));
        __asm__ volatile("" ::: "memory");
        double t = now_s() - t0;
        best = t < best ? t : best;
        spent += t;
        passes++;
    }
    return best;
}

/* The paths to time beside the reference: the one PN_CPU_PATH names when it
 * is set (a program may read the environment; the library does not), else
 * every fast path this CPU has. Returns the count, or -1 for a bad name. */
static int chosen_paths(int *paths)
{
    const char *env = getenv(PN_CPU_PATH_ENV);
    int n = 0;
    if (env && *env) {
        int path = pn_path_from_name(env);
        if (path < 0 || !pn_path_available(path)) {
            fprintf(stderr, "bench_pn: %s=%s: %s (ref, scalar, avx2, avx512)\n", PN_CPU_PATH_ENV,
                    env, path < 0 ? "no such path" : "this CPU cannot run it");
            return -1;
        }
        if (path != PN_PATH_REF)
            paths[n++] = path;
        return n;
    }
    for (int p = PN_PATH_SCALAR_FAST; p < PN_PATH_COUNT; p++)
        if (pn_path_available(p))
            paths[n++] = p;
    return n;
}

static int bench(int64_t rows, int64_t K, double seconds, uint64_t seed)
{
    const int threads = omp_get_max_threads();
    int fast_paths[PN_PATH_COUNT];
    const int nfast = chosen_paths(fast_paths);
    if (nfast < 0)
        return 2;
    int paths[PN_PATH_COUNT + 1] = { PN_PATH_REF };
    int npaths = 1;
    for (int k = 0; k < nfast; k++)
        paths[npaths++] = fast_paths[k];
    const int B = pn_hadamard_block_size(K, PN_HADAMARD_DEFAULT_CAP);
    float *src = malloc((size_t)(rows * K) * sizeof(float));
    float *scratch = malloc((size_t)(rows * K) * sizeof(float));
    float *scratch2 = malloc((size_t)(rows * K) * sizeof(float));
    int64_t max_row_bytes = pn_type_row_bytes(PN_TYPE_PN4T, K);
    if (pn_type_row_bytes(PN_TYPE_PN3T, K) > max_row_bytes)
        max_row_bytes = pn_type_row_bytes(PN_TYPE_PN3T, K);
    uint8_t *out_ref = malloc((size_t)(rows * max_row_bytes));
    uint8_t *out_fast = malloc((size_t)(rows * max_row_bytes));
    if (!src || !scratch || !scratch2 || !out_ref || !out_fast) {
        fprintf(stderr, "bench_pn: out of memory\n");
        return 2;
    }
    rng r = { seed };
    for (int64_t i = 0; i < rows * K; i++) {
        double v = 0.02 * rng_gauss(&r);
        if (rng_uniform(&r) < 0.001)
            v *= 10.0 + 90.0 * rng_uniform(&r);
        src[i] = (float)v;
    }

    printf("bench_pn: %lld rows x %lld weights, %d thread(s) available, best path %s, "
           "rotation block B = %d\n",
           (long long)rows, (long long)K, threads, pn_path_name(pn_cpu_path_best()), B);
    printf("%-8s %-9s %14s %14s %9s %9s %9s %14s\n", "kernel", "path", "1 thread w/s",
           "all threads", "scaling", "x ref 1t", "x ref all", "1t w/cpu-s");

    int status = 0;
    const char *const kernel[3] = { pn_type_name(PN_TYPE_PN3T), pn_type_name(PN_TYPE_PN4T),
                                    "rotate" };
    for (int kind = 0; kind < 3; kind++) {
        const int type = kind == 0 ? PN_TYPE_PN3T : PN_TYPE_PN4T;
        if (kind < 2 && K % pn_params_get(type)->group != 0)
            continue;
        double rate[PN_PATH_COUNT + 1][2], rate_cpu[PN_PATH_COUNT + 1];
        for (int k = 0; k < npaths; k++) {
            job j = kind < 2
                        ? (job){ JOB_QUANT, paths[k], type, 0, src, NULL, k ? out_fast : out_ref,
                                 rows,      K }
                        : (job){ JOB_ROTATE, paths[k], 0, B, src, k ? scratch2 : scratch,
                                 NULL,       rows,     K };
            for (int t = 0; t < 2; t++)
                rate[k][t] =
                    measure(&j, t == 0 ? 1 : threads, seconds, t == 0 ? &rate_cpu[k] : NULL);
            const int same =
                kind < 2
                    ? memcmp(out_ref, out_fast, (size_t)(rows * pn_type_row_bytes(type, K))) == 0
                    : memcmp(scratch, scratch2, (size_t)(rows * K) * sizeof(float)) == 0;
            if (k > 0 && !same) {
                fprintf(stderr, "bench_pn: %s: path %s differs from the reference\n", kernel[kind],
                        pn_path_name(paths[k]));
                status = 1;
            }
            printf("%-8s %-9s %14.3e %14.3e %8.2fx %8.2fx %8.2fx %14.3e", kernel[kind],
                   pn_path_name(paths[k]), rate[k][0], rate[k][1],
                   rate[k][0] > 0 ? rate[k][1] / rate[k][0] : 0.0, rate[k][0] / rate[0][0],
                   rate[k][1] / rate[0][1], rate_cpu[k]);
            printf("\n");
        }
    }
    double copy = measure_copy(src, scratch, rows * K, seconds / 4);
    printf("(the rotation rates include a row copy; memcpy alone: %.3e w/s)\n",
           (double)(rows * K) / copy);
    free(src);
    free(scratch);
    free(scratch2);
    free(out_ref);
    free(out_fast);
    return status;
}

/* ---- randomized comparison ------------------------------------------- */

/* A float with only `bits` significant bits (1..24), from v. */
static float few_bits(double v, int bits)
{
    if (v == 0.0)
        return 0.0f;
    int e;
    double f = frexp(v, &e);
    f = nearbyint(ldexp(f, bits));
    return (float)ldexp(f, e - bits);
}

/* One random group of G weights; the kinds aim at the places where a fast
 * path could go wrong. */
static void make_group(rng *r, const pn_params *p, float *w)
{
    const int G = p->group, z = p->z;
    int kind = (int)(rng_u64(r) % 13);
    double scale = pow(10.0, -8.0 + 12.0 * rng_uniform(r)); /* 1e-8 .. 1e4 */
    for (int e = 0; e < G; e++)
        w[e] = (float)(scale * rng_gauss(r));
    switch (kind) {
    case 0: /* plain Gaussian */ break;
    case 1: /* heavy tails: Student-t-like */
        for (int e = 0; e < G; e++)
            w[e] = (float)(scale * rng_gauss(r) / (fabs(rng_gauss(r)) + 0.05));
        break;
    case 2: /* few significant bits: many exact half-way quotients */
    case 3: {
        int bits = 1 + (int)(rng_u64(r) % 12);
        for (int e = 0; e < G; e++)
            w[e] = few_bits(scale * rng_gauss(r), bits);
        break;
    }
    case 4: { /* weights exactly at (k + 1/2) * s for the group's own candidate scales */
        const double A = few_bits(scale * (1.0 + rng_uniform(r)), 1 + (int)(rng_u64(r) % 12));
        const double sign = rng_uniform(r) < 0.5 ? -1.0 : 1.0, sigma = -sign;
        const int ia = (int)(rng_u64(r) % (uint64_t)G);
        for (int e = 0; e < G; e++)
            w[e] = (float)(0.3 * A * tanh(rng_gauss(r)));
        w[ia] = (float)(sign * A);
        for (int e = 0; e < G; e++) {
            int i = (int)(rng_u64(r) % PN_N_CANDIDATES);
            double s = pn_fp16_to_double(
                pn_fp16_from_double(sigma * ((double)(50 + 2 * i) / 100.0) * A / z));
            int k = (int)(rng_u64(r) % (uint64_t)(2 * z - 1)) - z;
            double v = (k + 0.5) * s;
            if (e != ia && rng_uniform(r) < 0.5 && isfinite(s) && fabs(v) < A)
                w[e] = (float)v;
        }
        break;
    }
    case 11: { /* two candidates with exactly equal error, plus tiny weights
                * whose rounding in the running sums decides the tie */
        const int i = (z == 4 ? 20 : 22) + (int)(rng_u64(r) % (z == 4 ? 5 : 3));
        const double A = few_bits(scale * (1.0 + rng_uniform(r)), 8);
        const double sign = rng_uniform(r) < 0.5 ? -1.0 : 1.0, sigma = -sign;
        const double si =
            pn_fp16_to_double(pn_fp16_from_double(sigma * ((double)(50 + 2 * i) / 100.0) * A / z));
        const double sj =
            pn_fp16_to_double(pn_fp16_from_double(sigma * ((double)(52 + 2 * i) / 100.0) * A / z));
        memset(w, 0, (size_t)G * sizeof(float));
        const int ea = (int)(rng_u64(r) % (uint64_t)G),
                  eb = (ea + 1 + (int)(rng_u64(r) % (uint64_t)(G - 1))) % G;
        w[ea] = (float)(sign * A);
        w[eb] = (float)(sign * (z * (fabs(si) + fabs(sj)) - A));
        for (int q = (int)(rng_u64(r) % 12); q > 0; q--) {
            int k = (int)(rng_u64(r) % (uint64_t)(2 * z - 1)) - (z - 1);
            int e1 = (int)(rng_u64(r) % (uint64_t)G), e2 = (int)(rng_u64(r) % (uint64_t)G);
            if (e1 != ea && e1 != eb && e2 != ea && e2 != eb && e1 != e2) {
                w[e1] = (float)(k * si);
                w[e2] = (float)(k * sj);
            }
        }
        if (rng_uniform(r) < 0.5) {
            int e = (int)(rng_u64(r) % (uint64_t)G);
            if (e != ea)
                w[e] = (float)ldexp(A * (1.0 + rng_uniform(r)), -(20 + (int)(rng_u64(r) % 14)));
        }
        break;
    }
    case 5: { /* amax near the fp16 overflow edge 65520 * z / m */
        int i = (int)(rng_u64(r) % PN_N_CANDIDATES);
        double m = (double)(50 + 2 * i) / 100.0;
        float edge = (float)(65520.0 * z / m);
        int steps = (int)(rng_u64(r) % 7) - 3;
        for (int s = 0; s < abs(steps); s++)
            edge = nextafterf(edge, steps > 0 ? INFINITY : 0.0f);
        for (int e = 0; e < G; e++)
            w[e] = (float)(edge * 0.3 * rng_gauss(r));
        w[rng_u64(r) % (uint64_t)G] = rng_uniform(r) < 0.5 ? -edge : edge;
        break;
    }
    case 6: { /* amax near the fp16 subnormal and underflow edges */
        double a = (1 + (int)(rng_u64(r) % 40)) * 0x1p-25 * z * (0.5 + 0.7 * rng_uniform(r));
        for (int e = 0; e < G; e++)
            w[e] = (float)(a * 0.5 * rng_gauss(r));
        w[rng_u64(r) % (uint64_t)G] = (float)(rng_uniform(r) < 0.5 ? -a : a);
        break;
    }
    case 7: { /* all equal, or few distinct values */
        float v = w[0], u = w[1];
        for (int e = 0; e < G; e++)
            w[e] = rng_uniform(r) < 0.7 ? v : u;
        break;
    }
    case 8: /* signed zeros mixed with a few values */
        for (int e = 0; e < G; e++)
            if (rng_uniform(r) < 0.8)
                w[e] = rng_uniform(r) < 0.5 ? 0.0f : -0.0f;
        break;
    case 9: /* symmetric: |min| == max, or off by one ulp */
    {
        int imax = 0, imin = 0;
        for (int e = 1; e < G; e++) {
            imax = w[e] > w[imax] ? e : imax;
            imin = w[e] < w[imin] ? e : imin;
        }
        if (imax != imin) {
            w[imin] = -w[imax];
            int d = (int)(rng_u64(r) % 3);
            if (d == 1)
                w[imin] = nextafterf(w[imin], -INFINITY);
            else if (d == 2)
                w[imax] = nextafterf(w[imax], INFINITY);
        }
        break;
    }
    case 10: /* rare non-finite values */
        if (rng_uniform(r) < 0.2)
            w[rng_u64(r) % (uint64_t)G] = rng_uniform(r) < 0.5 ? NAN : -INFINITY;
        break;
    default: /* an outlier */
        w[rng_u64(r) % (uint64_t)G] *= (float)(10.0 + 1000.0 * rng_uniform(r));
        break;
    }
}

static int verify(double millions, uint64_t seed, const char *only)
{
    const int64_t total = (int64_t)(millions * 1e6);
    const int64_t chunk = 4096;
    int paths[PN_PATH_COUNT], npaths = 0;
    for (int p = PN_PATH_SCALAR_FAST; p < PN_PATH_COUNT; p++) {
        if (only) { /* a comma-separated list of names */
            const char *n = pn_path_name(p), *at = strstr(only, n);
            size_t len = strlen(n);
            while (at && !((at == only || at[-1] == ',') && (at[len] == ',' || at[len] == '\0')))
                at = strstr(at + 1, n);
            if (!at)
                continue;
        }
        if (pn_path_available(p))
            paths[npaths++] = p;
        else
            printf("verify: path %s not available on this CPU: skipped\n", pn_path_name(p));
    }
    if (npaths == 0) {
        fprintf(stderr, "bench_pn: --verify: no path to compare\n");
        return 2;
    }
    int status = 0;
    for (int type_i = 0; type_i < 2 && status == 0; type_i++) {
        const int type = type_i == 0 ? PN_TYPE_PN3T : PN_TYPE_PN4T;
        const pn_params *p = pn_params_get(type);
        const int G = p->group;
        int64_t refused = 0, done = 0;
        double t0 = now_s();
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : refused, done) reduction(| : status)
        for (int64_t c0 = 0; c0 < total; c0 += chunk) {
            if (status)
                continue;
            int64_t cn = total - c0 < chunk ? total - c0 : chunk;
            float *w = malloc((size_t)(cn * G) * sizeof(float));
            uint8_t *ref = malloc((size_t)cn * PN_BLOCK_BYTES);
            uint8_t *got = malloc((size_t)cn * PN_BLOCK_BYTES);
            rng r = { seed ^ ((uint64_t)type << 56) ^ (uint64_t)c0 * 0x2545f4914f6cdd1dull };
            for (int64_t g = 0; g < cn; g++)
                make_group(&r, p, w + g * G);
            /* the whole row's expected answer, from the groups': the first
             * refused group's status and column, else every block */
            pn_status row_st = PN_OK;
            int64_t row_bad = -1;
            for (int64_t g = 0; g < cn && !status; g++) {
                int64_t bad_ref = -1;
                pn_status st_ref =
                    pn_quantize_row_ref(type, w + g * G, G, ref + g * PN_BLOCK_BYTES, &bad_ref);
                refused += st_ref != PN_OK;
                if (st_ref != PN_OK && row_st == PN_OK) {
                    row_st = st_ref;
                    row_bad = g * G + bad_ref;
                }
                for (int k = 0; k < npaths; k++) {
                    int64_t bad = -1;
                    pn_status st = pn_quantize_row_path(type, paths[k], w + g * G, G,
                                                        got + g * PN_BLOCK_BYTES, &bad);
                    bool same = st == st_ref && (st != PN_OK ? bad == bad_ref
                                                             : memcmp(got + g * PN_BLOCK_BYTES,
                                                                      ref + g * PN_BLOCK_BYTES,
                                                                      PN_BLOCK_BYTES) == 0);
                    if (!same) {
#pragma omp critical
                        {
                            fprintf(stderr,
                                    "verify: %s path %s differs on group %lld (status %d/%d):",
                                    pn_type_traits_get(type)->name, pn_path_name(paths[k]),
                                    (long long)(c0 + g), (int)st, (int)st_ref);
                            for (int e = 0; e < G; e++)
                                fprintf(stderr, " %a", (double)w[g * G + e]);
                            fprintf(stderr, "\n");
                        }
                        status = 1;
                        break;
                    }
                }
            }
            /* a whole row through every path as well: the row loop itself */
            if (!status) {
                for (int k = 0; k < npaths; k++) {
                    int64_t bad = -1;
                    pn_status b = pn_quantize_row_path(type, paths[k], w, cn * G, got, &bad);
                    if (row_st != b ||
                        (b == PN_OK ? memcmp(ref, got, (size_t)cn * PN_BLOCK_BYTES) != 0
                                    : bad != row_bad)) {
#pragma omp critical
                        fprintf(stderr, "verify: %s path %s differs on the row of chunk %lld\n",
                                pn_type_traits_get(type)->name, pn_path_name(paths[k]),
                                (long long)c0);
                        status = 1;
                    }
                }
            }
            done += cn;
            free(w);
            free(ref);
            free(got);
        }
        printf("verify: %s: %lld groups, %lld refused, every path (",
               pn_type_traits_get(type)->name, (long long)done, (long long)refused);
        for (int k = 0; k < npaths; k++)
            printf("%s%s", k ? ", " : "", pn_path_name(paths[k]));
        printf(") %s the reference (%.1f s)\n", status ? "DIFFERS from" : "identical to",
               now_s() - t0);
    }
    return status;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_pn [--rows R] [--cols K] [--seconds S] [--seed N]\n"
                    "       bench_pn --verify MILLION_GROUPS [--seed N] [--paths P,...]\n");
}

int main(int argc, char **argv)
{
    int64_t rows = 256, K = 5120;
    double seconds = 0.5, verify_m = -1.0;
    uint64_t seed = 1;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            usage();
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (strcmp(a, "--rows") == 0)
            rows = strtoll(v, &end, 10);
        else if (strcmp(a, "--cols") == 0)
            K = strtoll(v, &end, 10);
        else if (strcmp(a, "--seconds") == 0)
            seconds = strtod(v, &end);
        else if (strcmp(a, "--verify") == 0)
            verify_m = strtod(v, &end);
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(v, &end, 10);
        else if (strcmp(a, "--paths") == 0) {
            only = v;
            end = (char *)v + strlen(v);
        } else {
            usage();
            return 2;
        }
        if (!end || *end || end == v) {
            usage();
            return 2;
        }
    }
    if (verify_m >= 0.0)
        return verify(verify_m, seed, only);
    if (rows < 1 || K < 1 || seconds < 0.0) {
        usage();
        return 2;
    }
    return bench(rows, K, seconds, seed);
}
