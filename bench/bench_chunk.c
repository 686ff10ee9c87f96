/* bench_chunk - the pipeline's own search path on a chunk, beside bench_pn's
 * row loop, in one run, so that the two rates can be compared and the
 * difference split into its parts (docs/pipeline.md, "Speed of the parts").
 *
 *   bench_chunk [--rows R] [--cols K] [--passes N] [--seed S] [--types LIST] [--bf16]
 *
 * One chunk of R rows x K weights (default 256 x 5120, bench_pn's shape;
 * Gaussian, std 0.02, 0.1% outliers x10..x100, as bench_pn's; --bf16:
 * rounded to BF16, as a BF16 source's), for each
 * type of LIST (default pn3t,pn4t,q4_K,q3_K) on the path PN_CPU_PATH names
 * (default the best this CPU has), at all OpenMP threads. The passes of
 * every job below alternate (N rounds, default 5; the best pass of each
 * counts), so load from other work on the machine falls on all alike:
 *
 *   row          bench_pn's loop: pn_quantize_row_path, no sums, rows split
 *                statically (for q4_K/q3_K pn_quantize_row_sums without sums)
 *   row+sums     the same with the pipeline's fused per-block error sums
 *                (pn_quantize_row_sums), on the same weights
 *   rot+sums     the same on the rotated weights (what the pipeline
 *                searches; PN types only)
 *   chunk-q      the pipeline's team code (pn_job_chunk_work, PN_JOB_QUANTIZE
 *                | PN_JOB_CRC: its items, dynamic schedule, per-item CRC) on
 *                the rotated weights
 *   chunk        pn_job_chunk_work with the rotation as the pipeline runs it
 *                (PN_JOB_ROTATE | PN_JOB_QUANTIZE | PN_JOB_CRC) on a fresh
 *                copy of the weights (the copy is outside the timing)
 *   rotate       the rotation alone, pn_job_chunk_work(PN_JOB_ROTATE) (PN
 *                types)
 *
 * For each it prints weights/s of wall time, weights per CPU-second of the
 * process (less disturbed by other work on a shared machine), and both as a
 * ratio to `row`. Every job's bytes are compared with `row`'s (or, rotated,
 * with rot+sums'), and its error sums with row+sums' (exit 1 on a
 * difference). Exit status: 0, 1 a difference, 2 bad usage or error.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/pn_error.h"
#include "hadamard/hadamard.h"
#include "hadamard/hadamard_fast.h"
#include "pipeline/tensor_job.h"
#include "quant/fp16.h"
#include "quant/pn_fast.h"
#include "quant/quant_row.h"
#include "quant/types.h"

static uint64_t rng_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s)
{
    return (double)(rng_u64(s) >> 11) * 0x1p-53;
}

static double rng_gauss(uint64_t *s)
{
    double u = rng_uniform(s), v = rng_uniform(s);
    return sqrt(-2.0 * log(u + 0x1p-60)) * cos(6.283185307179586 * v);
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { J_ROW, J_ROW_SUMS, J_ROT_SUMS, J_CHUNK_Q, J_CHUNK, J_ROTATE, J_COUNT };
static const char *const job_names[J_COUNT] = { "row",     "row+sums", "rot+sums",
                                                "chunk-q", "chunk",    "rotate" };

typedef struct setup {
    int type, path, threads;
    int64_t rows, K, row_bytes, nblk;
    const float *src;     /* the weights */
    const float *rotated; /* the weights rotated (PN types) */
    float *work;          /* a copy the chunk jobs rotate in place */
    uint8_t *out[J_COUNT];
    double *err[J_COUNT], *norm[J_COUNT];
    pn_job_tensor t;
    pn_job_kernels k;
} setup;

/* One pass of job j: wall seconds, or -1 on an error; *cpu its CPU seconds. */
static double run_job(setup *s, int j, double *cpu)
{
    const int64_t rows = s->rows, K = s->K;
    int failed = 0;
    if (j == J_CHUNK || j == J_ROTATE)
        memcpy(s->work, s->src, (size_t)(rows * K) * sizeof(float));
    double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (j <= J_ROT_SUMS) {
        const float *x = j == J_ROT_SUMS ? s->rotated : s->src;
        const int sums = j != J_ROW;
#pragma omp parallel for schedule(static) num_threads(s->threads) reduction(| : failed)
        for (int64_t r = 0; r < rows; r++) {
            int64_t bad = 0;
            pn_status st;
            if (!sums && pn_type_is_pn(s->type))
                st = pn_quantize_row_path(s->type, s->path, x + r * K, K,
                                          s->out[j] + r * s->row_bytes, &bad);
            else
                st = pn_quantize_row_sums(
                    s->type, s->path, x + r * K, K, s->out[j] + r * s->row_bytes, &bad,
                    sums ? s->err[j] + r * s->nblk : NULL, sums ? s->norm[j] + r * s->nblk : NULL);
            failed |= st != PN_OK;
        }
    } else {
        pn_chunk c;
        memset(&c, 0, sizeof c);
        c.K = K;
        c.n_rows = rows;
        c.n_cols = K;
        c.first_of_tensor = c.last_of_tensor = true;
        c.x = j == J_CHUNK_Q ? (float *)s->rotated : s->work;
        c.out = s->out[j];
        c.blk_err = s->err[j];
        c.blk_norm = s->norm[j];
        const int what = j == J_ROTATE  ? PN_JOB_ROTATE
                         : j == J_CHUNK ? PN_JOB_ROTATE | PN_JOB_QUANTIZE | PN_JOB_CRC
                                        : PN_JOB_QUANTIZE | PN_JOB_CRC;
        uint32_t crc = 0;
        pn_error e = { 0 };
        failed = pn_job_chunk_work(&s->k, &s->t, &c, what, &crc, "bench", &e) != PN_OK;
        if (failed)
            fprintf(stderr, "bench_chunk: %s\n", e.msg);
    }
    double t = clock_s(CLOCK_MONOTONIC) - t0;
    *cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    return failed ? -1.0 : t;
}

static int bench_type(int type, int path, int threads, int64_t rows, int64_t K, int passes,
                      const float *src)
{
    setup s;
    memset(&s, 0, sizeof s);
    s.type = type;
    s.path = path;
    s.threads = threads;
    s.rows = rows;
    s.K = K;
    s.row_bytes = pn_type_row_bytes(type, K);
    s.nblk = pn_row_sum_blocks(type, K);
    s.src = src;
    const int pn = pn_type_is_pn(type);
    const int B = pn ? pn_hadamard_block_size(K, PN_HADAMARD_DEFAULT_CAP) : 0;
    pn_error e = { 0 };
    if (s.row_bytes < 0 ||
        pn_job_tensor_init(&s.t, 0, "bench", K, rows, PN_TYPE_F32, type, B, rows * K, rows * s.nblk,
                           &e) != PN_OK ||
        pn_job_kernels_init(&s.k, threads, path) != PN_OK) {
        fprintf(stderr, "bench_chunk: %s: rows of %lld weights: %s\n",
                pn_type_traits_get(type)->name, (long long)K,
                e.msg[0] ? e.msg : "cannot be set up");
        return 2;
    }
    const size_t n = (size_t)(rows * K);
    float *rot = malloc(n * sizeof(float));
    s.work = malloc(n * sizeof(float));
    int ok = rot && s.work;
    for (int j = 0; j < J_COUNT && ok; j++) {
        s.out[j] = malloc((size_t)(rows * s.row_bytes));
        s.err[j] = calloc((size_t)(rows * s.nblk), sizeof(double));
        s.norm[j] = calloc((size_t)(rows * s.nblk), sizeof(double));
        ok = s.out[j] && s.err[j] && s.norm[j];
    }
    if (!ok) {
        fprintf(stderr, "bench_chunk: out of memory\n");
        return 2;
    }
    memcpy(rot, src, n * sizeof(float));
    if (pn)
        for (int64_t r = 0; r < rows; r++)
            pn_hadamard_rotate_row_ref(rot + r * K, K, B);
    s.rotated = rot;

    int jobs[J_COUNT], nj = 0;
    for (int j = 0; j < J_COUNT; j++)
        if (pn || (j != J_ROT_SUMS && j != J_ROTATE && j != J_CHUNK))
            jobs[nj++] = j;
    /* k-quant tensors are not rotated: chunk-q's weights are the source's */
    if (!pn)
        s.rotated = src;
    double best[J_COUNT], best_cpu[J_COUNT];
    for (int j = 0; j < J_COUNT; j++)
        best[j] = best_cpu[j] = 1e30;
    for (int p = 0; p < passes; p++) {
        for (int i = 0; i < nj; i++) {
            double cpu = 0.0, t = run_job(&s, jobs[i], &cpu);
            if (t < 0)
                return 2;
            best[jobs[i]] = t < best[jobs[i]] ? t : best[jobs[i]];
            best_cpu[jobs[i]] = cpu < best_cpu[jobs[i]] ? cpu : best_cpu[jobs[i]];
        }
    }
    int status = 0;
    const size_t ob = (size_t)(rows * s.row_bytes), sb = (size_t)(rows * s.nblk) * sizeof(double);
    for (int i = 0; i < nj; i++) {
        const int j = jobs[i];
        if (j == J_ROTATE)
            continue;
        const int ref_j =
            (pn && (j == J_ROT_SUMS || j == J_CHUNK_Q || j == J_CHUNK)) ? J_ROT_SUMS : J_ROW_SUMS;
        const int bytes_ok = memcmp(s.out[j], s.out[j == J_ROW ? J_ROW : ref_j], ob) == 0 &&
                             (pn ? 1 : memcmp(s.out[j], s.out[J_ROW], ob) == 0);
        const int sums_ok = j == J_ROW || (memcmp(s.err[j], s.err[ref_j], sb) == 0 &&
                                           memcmp(s.norm[j], s.norm[ref_j], sb) == 0);
        if (!bytes_ok || !sums_ok) {
            fprintf(stderr, "bench_chunk: %s: %s's %s differ from %s's\n",
                    pn_type_traits_get(type)->name, job_names[j], bytes_ok ? "error sums" : "bytes",
                    job_names[ref_j]);
            status = 1;
        }
    }
    if (pn && memcmp(s.work, rot, n * sizeof(float)) != 0) {
        fprintf(stderr, "bench_chunk: %s: the chunk's rotation differs from the reference's\n",
                pn_type_traits_get(type)->name);
        status = 1;
    }
    for (int i = 0; i < nj; i++) {
        const int j = jobs[i];
        const double w = (double)n, r = w / best[j], rc = w / best_cpu[j];
        printf("%-6s %-9s %12.4e %8.3fx %14.4e %8.3fx\n", pn_type_traits_get(type)->name,
               job_names[j], r, r / (w / best[J_ROW]), rc, rc / (w / best_cpu[J_ROW]));
    }
    for (int j = 0; j < J_COUNT; j++) {
        free(s.out[j]);
        free(s.err[j]);
        free(s.norm[j]);
    }
    free(rot);
    free(s.work);
    pn_job_kernels_free(&s.k);
    return status;
}

int main(int argc, char **argv)
{
    int64_t rows = 256, K = 5120;
    int passes = 5;
    uint64_t seed = 1;
    const char *types = "pn3t,pn4t,q4_K,q3_K";
    int bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc)
            K = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--passes") && i + 1 < argc)
            passes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc)
            types = argv[++i];
        else if (!strcmp(argv[i], "--bf16"))
            bf16 = 1;
        else {
            fprintf(stderr, "usage: bench_chunk [--rows R] [--cols K] [--passes N] [--seed S] "
                            "[--types pn3t,pn4t,q4_K,q3_K] [--bf16]\n");
            return 2;
        }
    }
    if (rows < 1 || K < 1 || passes < 1) {
        fprintf(stderr, "bench_chunk: --rows, --cols and --passes must be >= 1\n");
        return 2;
    }
    int path = pn_cpu_path_best();
    const char *env = getenv(PN_CPU_PATH_ENV);
    if (env && *env) {
        path = pn_path_from_name(env);
        if (path < 0 || !pn_path_available(path)) {
            fprintf(stderr, "bench_chunk: %s=%s: %s\n", PN_CPU_PATH_ENV, env,
                    path < 0 ? "no such path" : "this CPU cannot run it");
            return 2;
        }
    }
    const int threads = omp_get_max_threads();
    float *src = malloc((size_t)(rows * K) * sizeof(float));
    if (!src) {
        fprintf(stderr, "bench_chunk: out of memory\n");
        return 2;
    }
    for (int64_t i = 0; i < rows * K; i++) {
        double v = 0.02 * rng_gauss(&seed);
        if (rng_uniform(&seed) < 0.001)
            v *= 10.0 + 90.0 * rng_uniform(&seed);
        src[i] = (float)v;
        if (bf16) /* a BF16 source's weights: 8 significant bits */
            src[i] = pn_bf16_to_float(pn_bf16_from_float(src[i]));
    }
    printf("bench_chunk: %lld rows x %lld weights, path %s, %d thread(s), best of %d alternating "
           "passes\n",
           (long long)rows, (long long)K, pn_path_name(path), threads, passes);
    printf("%-6s %-9s %12s %9s %14s %9s\n", "type", "job", "w/s (wall)", "x row", "w/cpu-s",
           "x row");
    int status = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", types);
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) {
        const pn_type_traits *tt = pn_type_traits_by_name(name);
        const int type = tt && pn_sum_block_weights(tt->id) > 0 ? tt->id : -1;
        if (type < 0) {
            fprintf(stderr, "bench_chunk: --types: no such type %s\n", name);
            return 2;
        }
        int st = bench_type(type, path, threads, rows, K, passes, src);
        if (st > status)
            status = st;
        if (st == 2)
            break;
    }
    free(src);
    return status;
}
