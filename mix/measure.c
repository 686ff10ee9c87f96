#include "mix/measure.h"

#include "common/file.h"
#include "common/outfile.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mix/name_index.h"
#include "quant/pn.h"
#include "quant/types.h"

#define MEASURE_FORMAT_VERSION 1
#define MEASURE_MAX_FILE_BYTES (64u << 20)

int64_t pn_sample_rows(int64_t n_rows, int64_t max_rows, int64_t *out)
{
    if (n_rows < 1 || max_rows < 1)
        return 0;
    if (n_rows <= max_rows) {
        for (int64_t i = 0; i < n_rows; i++)
            out[i] = i;
        return n_rows;
    }
    /* floor(i*R/M) without overflowing i*R: i*(R/M) + floor(i*(R%M)/M),
     * where i*(R%M) < M*M. */
    int64_t q = n_rows / max_rows, r = n_rows % max_rows;
    for (int64_t i = 0; i < max_rows; i++)
        out[i] = i * q + (int64_t)((uint64_t)i * (uint64_t)r / (uint64_t)max_rows);
    return max_rows;
}

size_t pn_measure_scratch_bytes(int64_t K)
{
    if (K < 1)
        return 0;
    /* floats for the decoded row, then the larger of the two encodings;
     * rounded up to the strictest alignment of any type, so that slice t of
     * one buffer of threads * this many bytes starts aligned for the floats
     * (34-byte blocks made 5834 bytes at K = 1280: a misaligned float store
     * on every odd thread) */
    const size_t align = _Alignof(max_align_t);
    size_t bytes = (size_t)K * sizeof(float) + (size_t)(K / 64 + 1) * PN_BLOCK_BYTES;
    return (bytes + align - 1) / align * align;
}

static pn_status quantize_error(int type, const float *row, int64_t K, uint8_t *q, float *y,
                                double *sum, double *norm, pn_error *err)
{
    int64_t bad_col = 0;
    pn_status st = pn_quantize_row(type, row, K, q, &bad_col);
    if (st == PN_ERR_NONFINITE)
        return pn_error_set(err, st, "column %lld: weight is NaN or infinite", (long long)bad_col);
    if (st == PN_ERR_SCALE_OVERFLOW)
        return pn_error_set(err, st, "columns %lld..: group too large for an fp16 scale (%s)",
                            (long long)bad_col, pn_type_traits_get(type)->name);
    if (st)
        return pn_error_set(err, st, "%s quantizer failed: %s", pn_type_traits_get(type)->name,
                            pn_strerror(st));
    pn_dequantize_row(type, q, y, K);
    double s = 0.0, w2 = 0.0;
    for (int64_t j = 0; j < K; j++) {
        double d = (double)row[j] - (double)y[j];
        s = s + d * d;
        if (norm)
            w2 = w2 + (double)row[j] * (double)row[j];
    }
    *sum = s;
    if (norm)
        *norm = w2;
    return PN_OK;
}

pn_status pn_measure_row(const float *row, int64_t K, void *scratch, double *err3,
                         double *err4, double *norm, pn_error *err)
{
    if (K < 1 || K % 80 != 0 || K % 64 != 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "measure: expected K a multiple of 80 and of 64, found %lld", (long long)K);
    float *y = scratch;
    uint8_t *q = (uint8_t *)scratch + (size_t)K * sizeof(float);
    pn_status st = quantize_error(PN_TYPE_PN3T, row, K, q, y, err3, norm, err);
    if (!st)
        st = quantize_error(PN_TYPE_PN4T, row, K, q, y, err4, NULL, err);
    return st;
}

void pn_measure_acc_add(pn_measure_acc *acc, double err3, double err4, double norm)
{
    acc->err3 = acc->err3 + err3;
    acc->err4 = acc->err4 + err4;
    acc->norm = acc->norm + norm;
    acc->rows++;
}

pn_status pn_measure_rows(pn_measure_acc *acc, const float *rotated_rows, int64_t n_rows,
                          int64_t K, pn_error *err)
{
    if (n_rows < 0 || K < 1 || K % 80 != 0 || K % 64 != 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "measure: expected K a multiple of 80 and of 64 and rows >= 0, "
                            "found K=%lld rows=%lld", (long long)K, (long long)n_rows);
    void *scratch = malloc(pn_measure_scratch_bytes(K));
    if (!scratch)
        return pn_error_set(err, PN_ERR_NOMEM, "measure: out of memory for a row of %lld",
                            (long long)K);
    pn_status st = PN_OK;
    for (int64_t r = 0; r < n_rows && !st; r++) {
        double e3, e4, w2;
        st = pn_measure_row(rotated_rows + r * K, K, scratch, &e3, &e4, &w2, err);
        if (st)
            pn_error_prefix(err, "row %lld", (long long)r);
        else
            pn_measure_acc_add(acc, e3, e4, w2);
    }
    free(scratch);
    return st;
}

void pn_measure_acc_result(const pn_measure_acc *acc, double *e3, double *e4)
{
    if (acc->norm > 0.0) {
        *e3 = acc->err3 / acc->norm;
        *e4 = acc->err4 / acc->norm;
    } else {
        *e3 = 0.0;
        *e4 = 0.0;
    }
}

/* ---- identity ---- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t fnv1a_le(uint64_t h, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return fnv1a(h, b, (size_t)bytes);
}

void pn_source_identity(const pn_tensor_desc *tensors, size_t n, uint64_t file_size,
                        char *buf, size_t size)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        const pn_tensor_desc *t = &tensors[i];
        h = fnv1a(h, t->name, strlen(t->name) + 1);   /* the NUL separates names */
        h = fnv1a_le(h, t->n_dims, 4);
        for (int k = 0; k < 4; k++)
            h = fnv1a_le(h, (uint64_t)t->ne[k], 8);
        h = fnv1a_le(h, (uint32_t)t->src_type, 4);
    }
    snprintf(buf, size, "bytes=%" PRIu64 " tensors=%zu fnv1a64=%016" PRIx64, file_size, n, h);
}

/* ---- the measurement ---- */

static bool identity_ok(const char *s)
{
    return s && *s && strlen(s) < PN_MEASURE_IDENTITY_MAX && !strpbrk(s, "\t\r\n");
}

pn_status pn_measurement_new(const pn_plan *plan, const char *identity, int64_t sample_max_rows,
                             pn_measurement **out, pn_error *err)
{
    *out = NULL;
    if (!identity_ok(identity))
        return pn_error_set(err, PN_ERR_USAGE,
                            "measurement: expected a one-line source identity of 1 to %d bytes",
                            PN_MEASURE_IDENTITY_MAX - 1);
    if (sample_max_rows < 1)
        return pn_error_set(err, PN_ERR_USAGE,
                            "measurement: expected a sample of at least 1 row, found %lld",
                            (long long)sample_max_rows);
    pn_measurement *m = calloc(1, sizeof *m);
    if (!m || !(m->identity = strdup(identity)) ||
        !(m->entries = calloc(plan->n_candidates ? plan->n_candidates : 1, sizeof *m->entries))) {
        pn_measurement_free(m);
        return pn_error_set(err, PN_ERR_NOMEM, "measurement: out of memory");
    }
    m->sample_max_rows = sample_max_rows;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        if (!plan->tensors[i].candidate)
            continue;
        if (!(m->entries[m->n].name = strdup(plan->tensors[i].name))) {
            pn_measurement_free(m);
            return pn_error_set(err, PN_ERR_NOMEM, "measurement: out of memory");
        }
        m->n++;
    }
    *out = m;
    return PN_OK;
}

void pn_measurement_free(pn_measurement *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        free(m->entries[i].name);
    free(m->entries);
    free(m->identity);
    free(m);
}

long pn_measurement_find(const pn_measurement *m, const char *name)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->entries[i].name, name) == 0)
            return (long)i;
    return -1;
}

static bool e_ok(double e) { return isfinite(e) && e >= 0.0; }

pn_status pn_measurement_save(const pn_measurement *m, const char *path, pn_error *err)
{
    if (!identity_ok(m->identity))
        return pn_error_set(err, PN_ERR_USAGE, "%s: the source identity is not one line", path);
    for (size_t i = 0; i < m->n; i++) {
        const pn_measure_entry *e = &m->entries[i];
        if (!*e->name || strpbrk(e->name, "\t\r\n"))
            return pn_error_set(err, PN_ERR_USAGE,
                                "%s: tensor name '%s' cannot be saved (empty, or holds a tab or line break)",
                                path, e->name);
        if (!e_ok(e->e3) || !e_ok(e->e4))
            return pn_error_set(err, PN_ERR_USAGE,
                                "%s: tensor '%s': expected finite errors >= 0, found E3=%g E4=%g",
                                path, e->name, e->e3, e->e4);
    }
    /* The user's --measurement file: replacing it is what saving means. */
    pn_outfile_opts oo = {.force = true};
    pn_outfile *out = NULL;
    pn_status st = pn_outfile_open(path, &oo, &out, err);
    if (st)
        return pn_error_prefix(err, "saving the measurement");
    FILE *f = pn_outfile_stream(out, err);
    if (f) {
        fprintf(f, "pn-measure\t%d\n", MEASURE_FORMAT_VERSION);
        fprintf(f, "source\t%s\n", m->identity);
        fprintf(f, "sample\tevenly-spaced\t%lld\n", (long long)m->sample_max_rows);
        fprintf(f, "candidates\t%zu\n", m->n);
        for (size_t i = 0; i < m->n; i++)
            fprintf(f, "%s\t%.17g\t%.17g\n", m->entries[i].name, m->entries[i].e3,
                    m->entries[i].e4);
        fprintf(f, "end\n");
        st = pn_outfile_commit(out, err);
    } else {
        st = err ? err->code : PN_ERR_IO;
    }
    pn_outfile_free(out);
    if (st)
        pn_error_prefix(err, "saving the measurement");
    return st;
}

/* ---- loading ---- */

typedef struct line_reader {
    char *buf;
    size_t len, pos;
    int line;
} line_reader;

/* Next line, terminated in place; NULL at the end of the text. */
static char *next_line(line_reader *lr)
{
    if (lr->pos >= lr->len)
        return NULL;
    char *s = lr->buf + lr->pos;
    char *nl = memchr(s, '\n', lr->len - lr->pos);
    size_t n = nl ? (size_t)(nl - s) : lr->len - lr->pos;
    s[n] = '\0';
    lr->pos += n + 1;
    lr->line++;
    return s;
}

/* Splits at tabs in place; returns the field count (at most max). */
static int split_tabs(char *s, char **f, int max)
{
    int n = 0;
    f[n++] = s;
    for (char *c = s; *c; c++) {
        if (*c == '\t') {
            *c = '\0';
            if (n == max)
                return max + 1;
            f[n++] = c + 1;
        }
    }
    return n;
}

static bool parse_i64(const char *s, int64_t *v)
{
    if (!*s || *s == '-' || *s == '+' || *s == ' ')
        return false;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end)
        return false;
    *v = x;
    return true;
}

static bool parse_e(const char *s, double *v)
{
    if (!*s || *s == ' ' || *s == '\t')
        return false;
    char *end;
    /* ERANGE is ignored: an overflow gives inf, which e_ok refuses, and an
     * underflow is the subnormal %.17g wrote. */
    double x = strtod(s, &end);
    if (*end || !e_ok(x))
        return false;
    *v = x;
    return true;
}

#define LFAIL(code, ...) do { st = pn_error_set(err, code, __VA_ARGS__); goto done; } while (0)

pn_status pn_measurement_load(const char *path, const char *expected_identity,
                              pn_measurement **out, pn_error *err)
{
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    pn_status st = pn_read_small_file(path, MEASURE_MAX_FILE_BYTES, "measurement", &buf, &len,
                                      err);
    if (st != PN_OK)
        return st;
    pn_measurement *m = NULL;
    pn_name_index *seen = NULL;
    if (memchr(buf, '\0', len))
        LFAIL(PN_ERR_FORMAT, "%s: expected a text file, found a NUL byte", path);
    buf[len] = '\0';
    line_reader lr = {.buf = buf, .len = len};
    char *fl[5];
    char *s;

    s = next_line(&lr);
    int64_t v;
    if (!s || split_tabs(s, fl, 4) != 2 || strcmp(fl[0], "pn-measure") != 0)
        LFAIL(PN_ERR_FORMAT, "%s:1: expected 'pn-measure<TAB>%d' (a measurement file)", path,
              MEASURE_FORMAT_VERSION);
    if (!parse_i64(fl[1], &v) || v != MEASURE_FORMAT_VERSION)
        LFAIL(PN_ERR_VERSION, "%s:1: expected measurement format version %d, found '%s'", path,
              MEASURE_FORMAT_VERSION, fl[1]);

    s = next_line(&lr);
    if (!s || split_tabs(s, fl, 4) != 2 || strcmp(fl[0], "source") != 0 || !identity_ok(fl[1]))
        LFAIL(PN_ERR_FORMAT, "%s:2: expected 'source<TAB><identity>'", path);
    if (expected_identity && strcmp(fl[1], expected_identity) != 0)
        LFAIL(PN_ERR_MISMATCH,
              "%s: measured on another source: the file says '%s', this source is '%s'; "
              "measure again", path, fl[1], expected_identity);
    m = calloc(1, sizeof *m);
    if (!m || !(m->identity = strdup(fl[1])))
        LFAIL(PN_ERR_NOMEM, "%s: out of memory", path);

    s = next_line(&lr);
    if (!s || split_tabs(s, fl, 4) != 3 || strcmp(fl[0], "sample") != 0)
        LFAIL(PN_ERR_FORMAT, "%s:3: expected 'sample<TAB>evenly-spaced<TAB><max rows>'", path);
    if (strcmp(fl[1], "evenly-spaced") != 0)
        LFAIL(PN_ERR_FORMAT, "%s:3: expected the sampling rule 'evenly-spaced', found '%s'", path,
              fl[1]);
    if (!parse_i64(fl[2], &m->sample_max_rows) || m->sample_max_rows < 1)
        LFAIL(PN_ERR_FORMAT, "%s:3: expected a maximum row count >= 1, found '%s'", path, fl[2]);

    s = next_line(&lr);
    int64_t count;
    if (!s || split_tabs(s, fl, 4) != 2 || strcmp(fl[0], "candidates") != 0 ||
        !parse_i64(fl[1], &count) || count < 0 || (uint64_t)count > len / 4)
        LFAIL(PN_ERR_FORMAT, "%s:4: expected 'candidates<TAB><count>' with a count the file can hold",
              path);
    m->entries = calloc(count ? (size_t)count : 1, sizeof *m->entries);
    seen = pn_name_index_new((size_t)count);
    if (!m->entries || !seen)
        LFAIL(PN_ERR_NOMEM, "%s: out of memory", path);

    for (int64_t i = 0; i < count; i++) {
        s = next_line(&lr);
        if (!s)
            LFAIL(PN_ERR_TRUNCATED, "%s: expected %lld candidate lines, found %lld", path,
                  (long long)count, (long long)i);
        int line = lr.line;
        if (split_tabs(s, fl, 4) != 3 || !*fl[0])
            LFAIL(PN_ERR_FORMAT, "%s:%d: expected '<tensor name><TAB><E3><TAB><E4>'", path, line);
        pn_measure_entry *e = &m->entries[m->n];
        if (!parse_e(fl[1], &e->e3) || !parse_e(fl[2], &e->e4))
            LFAIL(PN_ERR_FORMAT, "%s:%d: tensor '%s': expected two finite errors >= 0, found '%s' '%s'",
                  path, line, fl[0], fl[1], fl[2]);
        if (pn_name_index_get(seen, fl[0]) >= 0)
            LFAIL(PN_ERR_FORMAT, "%s:%d: tensor '%s' is listed twice", path, line, fl[0]);
        if (!(e->name = strdup(fl[0])) || !pn_name_index_put(seen, e->name, m->n, NULL))
            LFAIL(PN_ERR_NOMEM, "%s: out of memory", path);
        m->n++;
    }
    s = next_line(&lr);
    if (!s || strcmp(s, "end") != 0)
        LFAIL(s ? PN_ERR_FORMAT : PN_ERR_TRUNCATED, "%s:%d: expected 'end' after %lld candidates%s",
              path, lr.line + (s ? 0 : 1), (long long)count, s ? "" : ", found the end of the file");
    if (lr.pos < lr.len)
        LFAIL(PN_ERR_FORMAT, "%s:%d: expected nothing after 'end'", path, lr.line + 1);
done:
    free(buf);
    pn_name_index_free(seen);
    if (st) {
        pn_measurement_free(m);
        return st;
    }
    *out = m;
    return PN_OK;
}
