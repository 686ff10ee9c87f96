/* bench_pn_cuda - weights per second of the PN scale search on the GPU
 * (synchronous call, and the double-buffered slots fed in place the way the
 * pipeline feeds them) against the CPU fast path pn_quantize_row on N threads
 * (OpenMP over rows; default 2, the target machine's budget), for the shapes
 * the Qwen3.8 mix quantizes most: pn3t K=5120 and pn4t K=17408.
 *
 * Also checks that the GPU bytes equal the CPU fast path's bytes on the rows
 * the CPU timed (exit 1 otherwise), so a fast wrong kernel cannot pass.
 *
 * usage: bench_pn_cuda [--device N | --emulator] [--scale F] [--cpu-threads N]
 *                      [--min-seconds S]
 *   --scale F        multiply the row counts (default 1: ~40M weights per type
 *                    on the GPU); the emulator defaults to 0.002
 *   --min-seconds S  time each measurement for at least S seconds (default 1)
 * Output: a table, then "RESULT min_ratio=<GPU sync / CPU> ..." on one line.
 * Exit: 0 ok, 1 mismatch or failure, 2 no device / bad usage. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quant/pn.h"
#include "quant/pn_cuda.h"
#include "quant/types.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* splitmix64 + Box-Muller: weights like a trained matrix (N(0, 0.02) with
 * 0.1% outliers x10), deterministic. */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void fill_weights(float *x, int64_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = ((double)(mix64(&s) >> 11) + 1.0) * 0x1p-53;
        double u2 = (double)(mix64(&s) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1));
        double g[2] = { r * cos(6.283185307179586 * u2), r * sin(6.283185307179586 * u2) };
        for (int k = 0; k < 2 && i + k < n; k++) {
            double v = 0.02 * g[k];
            if ((mix64(&s) & 1023u) == 0)
                v *= 10.0;
            x[i + k] = (float)v;
        }
    }
}

typedef struct bench_case {
    int type;
    int64_t K;
    int64_t rows; /* at --scale 1 */
} bench_case;

static const bench_case CASES[] = {
    { PN_TYPE_PN3T, 5120, 8192 },  /* 41.9M weights */
    { PN_TYPE_PN4T, 17408, 2304 }, /* 40.1M weights */
};

static int row_bytes(int type, int64_t K)
{
    return (int)(K / pn_params_get(type)->group) * PN_BLOCK_BYTES;
}

/* The CPU fast path over rows on `threads` threads; returns weights/s. */
static double time_cpu(int type, const float *x, int64_t rows, int64_t K, uint8_t *out, int threads,
                       double min_s, int *failed)
{
    const int rb = row_bytes(type, K);
    double t0 = now_s(), t;
    int64_t done = 0;
    int bad = 0;
    do {
#pragma omp parallel for num_threads(threads) schedule(static) reduction(| : bad)
        for (int64_t r = 0; r < rows; r++)
            bad |= pn_quantize_row(type, x + r * K, K, out + r * rb, NULL) != PN_OK;
        done += rows * K;
        t = now_s() - t0;
    } while (t < min_s);
    *failed = bad;
    return (double)done / t;
}

/* The synchronous GPU call; returns weights/s (best of the passes). */
static double time_gpu_sync(pn_cuda_ctx *ctx, int type, const float *x, int64_t rows, int64_t K,
                            uint8_t *out, double min_s, int *failed)
{
    pn_error err;
    double best = 0.0, t0 = now_s();
    do {
        double a = now_s();
        if (pn_cuda_quantize_rows(ctx, type, x, rows, K, out, NULL, NULL, &err) != PN_OK) {
            fprintf(stderr, "bench_pn_cuda: GPU search failed: %s\n", err.msg);
            *failed = 1;
            return 0.0;
        }
        double r = (double)(rows * K) / (now_s() - a);
        if (r > best)
            best = r;
    } while (now_s() - t0 < min_s);
    return best;
}

/* The slots fed in place (rows written straight into the pinned buffers, as
 * the pipeline does after rotating), two chunks in flight; weights/s. */
static double time_gpu_slots(pn_cuda_ctx *ctx, int type, const float *x, int64_t rows, int64_t K,
                             uint8_t *out, double min_s, int *failed)
{
    pn_error err;
    const int64_t per = pn_cuda_max_rows(ctx, K);
    const int64_t n_chunks = (rows + per - 1) / per;
    const size_t rb = (size_t)row_bytes(type, K);
    double best = 0.0, t0 = now_s();
    do {
        double a = now_s();
        for (int64_t i = 0; i < n_chunks + PN_CUDA_SLOTS; i++) {
            if (i >= PN_CUDA_SLOTS && i - PN_CUDA_SLOTS < n_chunks) {
                int64_t c = i - PN_CUDA_SLOTS;
                if (pn_cuda_collect(ctx, (int)(c % PN_CUDA_SLOTS), out + (size_t)(c * per) * rb,
                                    NULL, NULL, &err) != PN_OK)
                    goto fail;
            }
            if (i < n_chunks) {
                const int slot = (int)(i % PN_CUDA_SLOTS);
                const int64_t nr = rows - i * per < per ? rows - i * per : per;
                float *in = pn_cuda_slot_input(ctx, slot);
                memcpy(in, x + i * per * K, (size_t)(nr * K) * sizeof(float));
                if (pn_cuda_submit(ctx, slot, type, in, nr, K, i * per, &err) != PN_OK)
                    goto fail;
            }
        }
        double r = (double)(rows * K) / (now_s() - a);
        if (r > best)
            best = r;
    } while (now_s() - t0 < min_s);
    return best;
fail:
    fprintf(stderr, "bench_pn_cuda: GPU slots failed: %s\n", err.msg);
    *failed = 1;
    return 0.0;
}

int main(int argc, char **argv)
{
    int device = 0, emulator = 0, cpu_threads = 2;
    double scale = -1.0, min_s = 1.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--emulator"))
            emulator = 1;
        else if (!strcmp(argv[i], "--scale") && i + 1 < argc)
            scale = atof(argv[++i]);
        else if (!strcmp(argv[i], "--cpu-threads") && i + 1 < argc)
            cpu_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-seconds") && i + 1 < argc)
            min_s = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_pn_cuda [--device N | --emulator] [--scale F] "
                            "[--cpu-threads N] [--min-seconds S]\n");
            return 2;
        }
    }
    if (scale < 0.0)
        scale = emulator ? 0.002 : 1.0;
    if (cpu_threads < 1 || scale <= 0.0) {
        fprintf(stderr, "bench_pn_cuda: --cpu-threads and --scale must be positive\n");
        return 2;
    }
    pn_cuda_ctx *ctx = NULL;
    pn_error err;
    pn_status st = emulator ? pn_cuda_open_emulator(&ctx, &err) : pn_cuda_open(device, &ctx, &err);
    if (st != PN_OK) {
        fprintf(stderr, "bench_pn_cuda: %s\n", err.msg);
        return 2;
    }
    printf("bench_pn_cuda: %s; CPU fast path on %d thread%s (OpenMP over rows)\n",
           pn_cuda_device_name(ctx), cpu_threads, cpu_threads == 1 ? "" : "s");
    printf("%-5s %6s %6s %10s | %14s %14s %14s | %9s %9s\n", "type", "K", "rows", "weights",
           "GPU sync Mw/s", "GPU slots Mw/s", "CPU Mw/s", "sync/CPU", "slots/CPU");
    double min_ratio = INFINITY;
    int failed = 0;
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0] && !failed; c++) {
        const bench_case *bc = &CASES[c];
        int64_t rows = (int64_t)((double)bc->rows * scale);
        if (rows < 1)
            rows = 1;
        const int64_t K = bc->K;
        const size_t rb = (size_t)row_bytes(bc->type, K);
        float *x = malloc((size_t)(rows * K) * sizeof *x);
        uint8_t *gpu = malloc((size_t)rows * rb), *slots = malloc((size_t)rows * rb);
        /* The CPU times a slice: enough rows for every thread, not all. */
        int64_t cpu_rows = rows < 64 * cpu_threads ? rows : 64 * cpu_threads;
        uint8_t *cpu = malloc((size_t)cpu_rows * rb);
        if (!x || !gpu || !slots || !cpu) {
            fprintf(stderr, "bench_pn_cuda: out of memory for %lld x %lld\n", (long long)rows,
                    (long long)K);
            return 1;
        }
        fill_weights(x, rows * K, 12345u + c);
        /* Warm-up: context, first launch. */
        if (pn_cuda_quantize_rows(ctx, bc->type, x, 1, K, gpu, NULL, NULL, &err) != PN_OK) {
            fprintf(stderr, "bench_pn_cuda: warm-up failed: %s\n", err.msg);
            return 1;
        }
        const double g_sync = time_gpu_sync(ctx, bc->type, x, rows, K, gpu, min_s, &failed);
        const double g_slots =
            failed ? 0.0 : time_gpu_slots(ctx, bc->type, x, rows, K, slots, min_s, &failed);
        int cpu_failed = 0;
        const double c_rate =
            time_cpu(bc->type, x, cpu_rows, K, cpu, cpu_threads, min_s, &cpu_failed);
        if (!failed && cpu_failed) {
            fprintf(stderr, "bench_pn_cuda: the CPU fast path failed on the benchmark rows\n");
            failed = 1;
        }
        if (!failed && memcmp(gpu, slots, (size_t)rows * rb) != 0) {
            fprintf(stderr, "bench_pn_cuda: MISMATCH: the slots and the sync call differ\n");
            failed = 1;
        }
        if (!failed && memcmp(gpu, cpu, (size_t)cpu_rows * rb) != 0) {
            size_t i = 0;
            while (gpu[i] == cpu[i])
                i++;
            fprintf(stderr,
                    "bench_pn_cuda: MISMATCH: %s K=%lld row %zu block %zu differs between GPU "
                    "and CPU\n",
                    pn_type_traits_get(bc->type)->name, (long long)K, i / rb,
                    (i % rb) / PN_BLOCK_BYTES);
            failed = 1;
        }
        const double r_sync = g_sync / c_rate, r_slots = g_slots / c_rate;
        if (r_sync < min_ratio)
            min_ratio = r_sync;
        printf("%-5s %6lld %6lld %10lld | %14.1f %14.1f %14.1f | %8.1fx %8.1fx\n",
               pn_type_traits_get(bc->type)->name, (long long)K, (long long)rows,
               (long long)(rows * K), g_sync / 1e6, g_slots / 1e6, c_rate / 1e6, r_sync, r_slots);
        fflush(stdout);
        free(x);
        free(gpu);
        free(slots);
        free(cpu);
    }
    pn_cuda_close(ctx);
    if (failed)
        return 1;
    printf("RESULT min_ratio=%.1f target=50 cpu_threads=%d %s\n", min_ratio, cpu_threads,
           min_ratio >= 50.0 ? "MET" : "NOT_MET");
    return 0;
}
