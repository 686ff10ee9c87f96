/* bench_proxy_kl - per-position KL of llama.cpp logits files, for
 * bench/proxy-study.sh (issue 41 item 4).
 *
 *   bench_proxy_kl SOURCE.logits BASE.logits [FILE.logits ...]
 *
 * Each file is what tools/llama/pn-llama-logits.mjs writes to its file
 * descriptor 3 ("PNLOGIT1", n_vocab, n_seq, the sequences' ids, then the
 * logits of every position). Every file must hold the same ids as SOURCE.
 * The KL of each position is pn_compare_kl (compare/compare.h), the one
 * pn-compare uses, and the mean is summed in position order as pn-compare
 * sums it, so kl_mean equals pn-compare's for the same decoded model.
 * Prints per file (BASE first): its mean KL with the standard error (sample
 * standard deviation / sqrt(n)), and its gain over BASE, mean(KL_base -
 * KL_file), with the standard error of those paired differences (the same
 * positions: much smaller than either KL's own). */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compare/compare.h"

typedef struct logits {
    const char *path;
    const uint8_t *map;
    size_t len;
    uint32_t n_vocab, n_seq;
    size_t n_pos;
    size_t ids_bytes;  /* header + ids */
    const float *rows; /* n_pos x n_vocab */
} logits;

static uint32_t u32(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static int open_logits(const char *path, logits *L)
{
    memset(L, 0, sizeof *L);
    L->path = path;
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 16) {
        fprintf(stderr, "bench_proxy_kl: %s: cannot read, or too short\n", path);
        return -1;
    }
    L->len = (size_t)st.st_size;
    L->map = mmap(NULL, L->len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (L->map == MAP_FAILED || memcmp(L->map, "PNLOGIT1", 8) != 0) {
        fprintf(stderr, "bench_proxy_kl: %s: not a PNLOGIT1 file\n", path);
        return -1;
    }
    L->n_vocab = u32(L->map + 8);
    L->n_seq = u32(L->map + 12);
    size_t at = 16;
    for (uint32_t s = 0; s < L->n_seq; s++) {
        if (at + 4 > L->len)
            goto short_file;
        uint32_t len = u32(L->map + at);
        at += 4 + 4 * (size_t)len;
        L->n_pos += len;
    }
    L->ids_bytes = at;
    if (at > L->len || L->len - at != L->n_pos * L->n_vocab * 4)
        goto short_file;
    L->rows = (const float *)(L->map + at); /* at is a multiple of 4; mmap is page-aligned */
    return 0;
short_file:
    fprintf(stderr, "bench_proxy_kl: %s: size does not match its header\n", path);
    return -1;
}

/* The per-position KLs of f against the source. */
static int kls(const logits *src, const logits *f, double *out)
{
    for (size_t p = 0; p < src->n_pos; p++) {
        const float *a = src->rows + p * src->n_vocab, *b = f->rows + p * src->n_vocab;
        if (pn_compare_kl(a, b, src->n_vocab, &out[p], NULL, NULL, NULL) != PN_OK) {
            fprintf(stderr, "bench_proxy_kl: %s: non-finite logit at position %zu\n", f->path, p);
            return -1;
        }
    }
    return 0;
}

static void mean_se(const double *x, size_t n, double *mean, double *se)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    *mean = s / (double)n;
    double v = 0.0;
    for (size_t i = 0; i < n; i++)
        v += (x[i] - *mean) * (x[i] - *mean);
    *se = n > 1 ? sqrt(v / (double)(n - 1) / (double)n) : 0.0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_proxy_kl SOURCE.logits BASE.logits [FILE.logits ...]\n");
        return 2;
    }
    logits src;
    if (open_logits(argv[1], &src) != 0)
        return 1;
    double *base = malloc(src.n_pos * sizeof(double)), *cur = malloc(src.n_pos * sizeof(double));
    double *diff = malloc(src.n_pos * sizeof(double));
    if (!base || !cur || !diff)
        return 1;
    printf("file\tpositions\tkl_mean\tkl_se\tgain\tgain_se\n");
    for (int a = 2; a < argc; a++) {
        logits f;
        if (open_logits(argv[a], &f) != 0)
            return 1;
        if (f.n_vocab != src.n_vocab || f.ids_bytes != src.ids_bytes ||
            memcmp(f.map, src.map, src.ids_bytes) != 0 || f.len != src.len) {
            fprintf(stderr, "bench_proxy_kl: %s: not the source's tokens\n", argv[a]);
            return 1;
        }
        if (kls(&src, &f, a == 2 ? base : cur) != 0)
            return 1;
        const double *k = a == 2 ? base : cur;
        double mean, se, gain, gse;
        mean_se(k, src.n_pos, &mean, &se);
        for (size_t p = 0; p < src.n_pos; p++)
            diff[p] = base[p] - k[p];
        mean_se(diff, src.n_pos, &gain, &gse);
        printf("%s\t%zu\t%.9g\t%.6g\t%.9g\t%.6g\n", argv[a], src.n_pos, mean, se, gain, gse);
        munmap((void *)f.map, f.len);
    }
    free(base);
    free(cur);
    free(diff);
    munmap((void *)src.map, src.len);
    return 0;
}
