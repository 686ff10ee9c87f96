/* measurement.c - the promotion measurement: the sampled rows, the error
 * sums of pn3t and pn4t per row, and the measurement file saved, loaded and
 * checked against a run (see measurement.h). */
#include "mix/measurement.h"
#include "mix/measurement_testing.h"

#include "common/file.h"
#include "common/mem.h"
#include "common/outfile.h"
#include "common/text.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hadamard/hadamard_double.h"
#include "mix/name_index.h"
#include "quant/pn.h"
#include "quant/types.h"

#define MEASURE_FORMAT_VERSION PN_MEASURE_FORMAT_VERSION
#define MEASURE_MAX_FILE_BYTES (64u << 20)

int64_t pn_sample_count(int64_t n_rows, int64_t max_rows)
{
    if (n_rows < 1 || max_rows < 1)
        return 0;
    return n_rows < max_rows ? n_rows : max_rows;
}

int64_t pn_sample_row(int64_t n_rows, int64_t max_rows, int64_t i)
{
    if (n_rows <= max_rows)
        return i;
    /* floor(i*R/M) without overflowing i*R: i*(R/M) + floor(i*(R%M)/M),
     * where i*(R%M) < M*M. */
    int64_t q = n_rows / max_rows, r = n_rows % max_rows;
    return i * q + (int64_t)((uint64_t)i * (uint64_t)r / (uint64_t)max_rows);
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

/* row quantized to type into q and decoded back into y; an error names the
 * column or the quantizer's failure. */
static pn_status quantize_back(int type, const float *row, int64_t K, uint8_t *q, float *y,
                               pn_error *err)
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
    return PN_OK;
}

static pn_status quantize_error(int type, const float *row, int64_t K, uint8_t *q, float *y,
                                double *sum, double *norm, pn_error *err)
{
    pn_status st = quantize_back(type, row, K, q, y, err);
    if (st)
        return st;
    *sum = pn_error_sum(row, y, K, 0.0);
    if (norm)
        *norm = pn_norm_sum(row, K, 0.0);
    return PN_OK;
}

double pn_error_sum(const float *x, const float *y, int64_t n, double sum)
{
    for (int64_t j = 0; j < n; j++) {
        double d = (double)x[j] - (double)y[j];
        sum = sum + d * d;
    }
    return sum;
}

double pn_norm_sum(const float *x, int64_t n, double sum)
{
    for (int64_t j = 0; j < n; j++)
        sum = sum + (double)x[j] * (double)x[j];
    return sum;
}

pn_status pn_measure_row(const float *row, int64_t K, void *scratch, double *err3, double *err4,
                         double *norm, pn_error *err)
{
    if (K < 1 || K % 80 != 0 || K % 64 != 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "measure: expected K a multiple of 80 and of 64, found %lld",
                            (long long)K);
    float *y = scratch;
    uint8_t *q = (uint8_t *)scratch + (size_t)K * sizeof(float);
    pn_status st = quantize_error(PN_TYPE_PN3T, row, K, q, y, err3, norm, err);
    if (!st)
        st = quantize_error(PN_TYPE_PN4T, row, K, q, y, err4, NULL, err);
    return st;
}

size_t pn_measure_weighted_scratch_bytes(int64_t K)
{
    if (K < 1)
        return 0;
    const size_t align = _Alignof(max_align_t);
    return pn_measure_scratch_bytes(K) + ((size_t)K * sizeof(double) + align - 1) / align * align;
}

double pn_weighted_error_sum(const float *x_rot, const float *y_rot, int64_t n, int B,
                             const float *v, double *tmp, double sum)
{
    for (int64_t j = 0; j < n; j++)
        tmp[j] = (double)x_rot[j] - (double)y_rot[j];
    pn_hadamard_rotate_double(tmp, n, B);
    for (int64_t j = 0; j < n; j++)
        sum = sum + (double)v[j] * (tmp[j] * tmp[j]);
    return sum;
}

double pn_weighted_norm_sum(const float *x, int64_t n, const float *v, double sum)
{
    for (int64_t j = 0; j < n; j++)
        sum = sum + (double)v[j] * ((double)x[j] * (double)x[j]);
    return sum;
}

static pn_status weighted_error(int type, const float *orig, const float *rot, int64_t K, int B,
                                const float *v, uint8_t *q, float *y, double *tmp, double *sum,
                                pn_error *err)
{
    (void)orig;
    pn_status st = quantize_back(type, rot, K, q, y, err);
    if (st)
        return st;
    *sum = pn_weighted_error_sum(rot, y, K, B, v, tmp, 0.0);
    return PN_OK;
}

pn_status pn_measure_row_weighted(const float *orig, const float *rotated, int64_t K, int B,
                                  const float *v, void *scratch, double *err3, double *err4,
                                  double *norm, pn_error *err)
{
    if (K < 1 || K % 80 != 0 || K % 64 != 0 || (B > 1 && K % B != 0))
        return pn_error_set(err, PN_ERR_USAGE,
                            "measure: expected K a multiple of 80, of 64 and of the rotation "
                            "block, found K %lld, block %d",
                            (long long)K, B);
    float *y = scratch;
    uint8_t *q = (uint8_t *)scratch + (size_t)K * sizeof(float);
    double *tmp = (double *)((uint8_t *)scratch + pn_measure_scratch_bytes(K));
    pn_status st = weighted_error(PN_TYPE_PN3T, orig, rotated, K, B, v, q, y, tmp, err3, err);
    if (!st)
        st = weighted_error(PN_TYPE_PN4T, orig, rotated, K, B, v, q, y, tmp, err4, err);
    if (!st)
        *norm = pn_weighted_norm_sum(orig, K, v, 0.0);
    return st;
}

void pn_measure_acc_add(pn_measure_acc *acc, double err3, double err4, double norm)
{
    acc->err3 = acc->err3 + err3;
    acc->err4 = acc->err4 + err4;
    acc->norm = acc->norm + norm;
    acc->rows++;
}

pn_status pn_measure_rows(pn_measure_acc *acc, const float *rotated_rows, int64_t n_rows, int64_t K,
                          pn_error *err)
{
    if (n_rows < 0 || K < 1 || K % 80 != 0 || K % 64 != 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "measure: expected K a multiple of 80 and of 64 and rows >= 0, "
                            "found K=%lld rows=%lld",
                            (long long)K, (long long)n_rows);
    void *scratch = malloc(pn_measure_scratch_bytes(K));
    if (!scratch)
        return pn_error_set(err, PN_ERR_NOMEM, "measure: out of memory for a row of %lld",
                            (long long)K);
    pn_status st = PN_OK;
    for (int64_t r = 0; r < n_rows && !st; r++) {
        /* zeros for the compiler only: pn_measure_row sets them when it succeeds */
        double e3 = 0.0, e4 = 0.0, w2 = 0.0;
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

/* ---- the measurement ---- */

static bool text_ok(const char *s)
{
    return s && *s && strlen(s) < PN_MEASURE_TEXT_MAX && !strpbrk(s, "\t\r\n");
}

static bool params_ok(const pn_measure_params *p)
{
    return text_ok(p->quantizer) && p->sample_max_rows >= 1 && p->rotation_cap >= 0;
}

pn_status pn_measurement_new(const pn_plan *plan, const pn_measure_params *params,
                             pn_measurement **out, pn_error *err)
{
    *out = NULL;
    if (!text_ok(params->quantizer))
        return pn_error_set(err, PN_ERR_USAGE,
                            "measurement: expected a one-line quantizer name of 1 to %d bytes",
                            PN_MEASURE_TEXT_MAX - 1);
    if (params->sample_max_rows < 1 || params->rotation_cap < 0)
        return pn_error_set(err, PN_ERR_USAGE,
                            "measurement: expected a sample of at least 1 row, found %lld",
                            (long long)params->sample_max_rows);
    pn_measurement *m = calloc(1, sizeof *m);
    if (!m ||
        !(m->entries = calloc(plan->n_candidates ? plan->n_candidates : 1, sizeof *m->entries))) {
        pn_measurement_free(m);
        return pn_error_set(err, PN_ERR_NOMEM, "measurement: out of memory");
    }
    m->params = *params;
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
    PN_FREE_EACH_FIELD(m->entries, m->n, name);
    free(m);
}

long pn_measurement_find(const pn_measurement *m, const char *name)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->entries[i].name, name) == 0)
            return (long)i;
    return -1;
}

static bool e_ok(double e)
{
    return isfinite(e) && e >= 0.0;
}

static void print_measurement(FILE *f, const void *ctx)
{
    const pn_measurement *m = ctx;
    fprintf(f, "pn-measure\t%d\n", MEASURE_FORMAT_VERSION);
    fprintf(f, "source\theader-fnv1a64\t%016" PRIx64 "\n", m->params.source_header_hash);
    fprintf(f, "quantizer\t%s\n", m->params.quantizer);
    if (m->params.rotation_cap > 0)
        fprintf(f, "rotation\thadamard\t%d\n", m->params.rotation_cap);
    else
        fprintf(f, "rotation\tnone\n");
    fprintf(f, "sample\tevenly-spaced\t%lld\n", (long long)m->params.sample_max_rows);
    if (m->params.weighted)
        fprintf(f, "imatrix\tentries-fnv1a64\t%016" PRIx64 "\t%s\n", m->params.imatrix_hash,
                m->params.missing_unweighted ? "unweighted" : "error");
    fprintf(f, "candidates\t%zu\n", m->n);
    for (size_t i = 0; i < m->n; i++)
        fprintf(f, "%s\t%.17g\t%.17g\t%08" PRIx32 "\n", m->entries[i].name, m->entries[i].e3,
                m->entries[i].e4, m->entries[i].rows_crc32);
    fprintf(f, "end\n");
}

pn_status pn_measurement_save(const pn_measurement *m, const char *path, pn_error *err)
{
    if (!params_ok(&m->params))
        return pn_error_set(err, PN_ERR_USAGE,
                            "%s: the quantizer name is not one line, or the sample is empty", path);
    for (size_t i = 0; i < m->n; i++) {
        const pn_measure_entry *e = &m->entries[i];
        if (!*e->name || strpbrk(e->name, "\t\r\n"))
            return pn_error_set(
                err, PN_ERR_USAGE,
                "%s: tensor name '%s' cannot be saved (empty, or holds a tab or line break)", path,
                e->name);
        if (!e_ok(e->e3) || !e_ok(e->e4))
            return pn_error_set(err, PN_ERR_USAGE,
                                "%s: tensor '%s': expected finite errors >= 0, found E3=%g E4=%g",
                                path, e->name, e->e3, e->e4);
    }
    /* The user's --measurement file: replacing it is what saving means. */
    return pn_outfile_save_text(path, "measurement", print_measurement, m, err);
}

/* ---- loading ---- */

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
    double x;
    if (!pn_field_real(s, &x) || !e_ok(x))
        return false;
    *v = x;
    return true;
}

#define LFAIL(code, ...)                                                                           \
    do {                                                                                           \
        st = pn_error_set(err, code, __VA_ARGS__);                                                 \
        goto done;                                                                                 \
    } while (0)

/* A hexadecimal number of exactly `digits` digits. */
static bool parse_hex(const char *s, int digits, uint64_t *v)
{
    if ((int)strlen(s) != digits)
        return false;
    uint64_t x = 0;
    for (int i = 0; i < digits; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        x = x << 4 | (uint64_t)d;
    }
    *v = x;
    return true;
}

pn_status pn_measurement_load(const char *path, pn_measurement **out, int *version, pn_error *err)
{
    *out = NULL;
    if (version)
        *version = 0;
    char *buf = NULL;
    size_t len = 0;
    pn_status st = pn_read_small_file(path, MEASURE_MAX_FILE_BYTES, "measurement", &buf, &len, err);
    if (st != PN_OK)
        return st;
    pn_measurement *m = NULL;
    pn_name_index *seen = NULL;
    if (memchr(buf, '\0', len))
        LFAIL(PN_ERR_FORMAT, "%s: expected a text file, found a NUL byte", path);
    buf[len] = '\0';
    pn_line_reader lr = { .buf = buf, .len = len };
    char *fl[5];
    char *s;

    s = pn_next_line(&lr);
    int64_t v;
    if (!s || pn_split_tabs(s, fl, 4) != 2 || strcmp(fl[0], "pn-measure") != 0)
        LFAIL(PN_ERR_FORMAT, "%s:1: expected 'pn-measure<TAB>%d' (a measurement file)", path,
              MEASURE_FORMAT_VERSION);
    if (parse_i64(fl[1], &v) && v >= 1 && v < MEASURE_FORMAT_VERSION) {
        if (version)
            *version = (int)v;
        LFAIL(PN_ERR_VERSION,
              "%s: a measurement of format %lld, from an older pn-quantize: it does not record "
              "the rows it measured or the rotation, rows and quantizer its figures depend on; "
              "measure again",
              path, (long long)v);
    }
    if (!parse_i64(fl[1], &v) || v != MEASURE_FORMAT_VERSION)
        LFAIL(PN_ERR_VERSION, "%s:1: expected measurement format version %d, found '%s'", path,
              MEASURE_FORMAT_VERSION, fl[1]);
    if (version)
        *version = (int)v;
    m = calloc(1, sizeof *m);
    if (!m)
        LFAIL(PN_ERR_NOMEM, "%s: out of memory", path);

    uint64_t h;
    s = pn_next_line(&lr);
    if (!s || pn_split_tabs(s, fl, 4) != 3 || strcmp(fl[0], "source") != 0 ||
        strcmp(fl[1], "header-fnv1a64") != 0 || !parse_hex(fl[2], 16, &h))
        LFAIL(PN_ERR_FORMAT, "%s:2: expected 'source<TAB>header-fnv1a64<TAB><16 hex digits>'",
              path);
    m->params.source_header_hash = h;

    s = pn_next_line(&lr);
    if (!s || pn_split_tabs(s, fl, 4) != 2 || strcmp(fl[0], "quantizer") != 0 || !text_ok(fl[1]))
        LFAIL(PN_ERR_FORMAT, "%s:3: expected 'quantizer<TAB><name and version>'", path);
    snprintf(m->params.quantizer, sizeof m->params.quantizer, "%s", fl[1]);

    s = pn_next_line(&lr);
    int nf = s ? pn_split_tabs(s, fl, 4) : 0;
    int64_t cap = 0;
    if (!s || strcmp(fl[0], "rotation") != 0 ||
        !((nf == 2 && strcmp(fl[1], "none") == 0) ||
          (nf == 3 && strcmp(fl[1], "hadamard") == 0 && parse_i64(fl[2], &cap) && cap >= 1 &&
           cap <= 1 << 20)))
        LFAIL(PN_ERR_FORMAT,
              "%s:4: expected 'rotation<TAB>none' or 'rotation<TAB>hadamard<TAB><cap>'", path);
    m->params.rotation_cap = (int)cap;

    s = pn_next_line(&lr);
    if (!s || pn_split_tabs(s, fl, 4) != 3 || strcmp(fl[0], "sample") != 0)
        LFAIL(PN_ERR_FORMAT, "%s:5: expected 'sample<TAB>evenly-spaced<TAB><max rows>'", path);
    if (strcmp(fl[1], "evenly-spaced") != 0)
        LFAIL(PN_ERR_FORMAT, "%s:5: expected the sampling rule 'evenly-spaced', found '%s'", path,
              fl[1]);
    if (!parse_i64(fl[2], &m->params.sample_max_rows) || m->params.sample_max_rows < 1)
        LFAIL(PN_ERR_FORMAT, "%s:5: expected a maximum row count >= 1, found '%s'", path, fl[2]);

    s = pn_next_line(&lr);
    if (s && strncmp(s, "imatrix\t", 8) == 0) {
        if (pn_split_tabs(s, fl, 4) != 4 || strcmp(fl[1], "entries-fnv1a64") != 0 ||
            !parse_hex(fl[2], 16, &h) ||
            (strcmp(fl[3], "error") != 0 && strcmp(fl[3], "unweighted") != 0))
            LFAIL(PN_ERR_FORMAT,
                  "%s:6: expected 'imatrix<TAB>entries-fnv1a64<TAB><16 hex digits><TAB>"
                  "error|unweighted'",
                  path);
        m->params.weighted = true;
        m->params.imatrix_hash = h;
        m->params.missing_unweighted = strcmp(fl[3], "unweighted") == 0;
        s = pn_next_line(&lr);
    }
    int64_t count;
    if (!s || pn_split_tabs(s, fl, 4) != 2 || strcmp(fl[0], "candidates") != 0 ||
        !parse_i64(fl[1], &count) || count < 0 || (uint64_t)count > len / 4)
        LFAIL(PN_ERR_FORMAT,
              "%s:%d: expected 'candidates<TAB><count>' with a count the file can hold", path,
              lr.line);
    m->entries = calloc(count ? (size_t)count : 1, sizeof *m->entries);
    seen = pn_name_index_new((size_t)count);
    if (!m->entries || !seen)
        LFAIL(PN_ERR_NOMEM, "%s: out of memory", path);

    for (int64_t i = 0; i < count; i++) {
        s = pn_next_line(&lr);
        if (!s)
            LFAIL(PN_ERR_TRUNCATED, "%s: expected %lld candidate lines, found %lld", path,
                  (long long)count, (long long)i);
        int line = lr.line;
        if (pn_split_tabs(s, fl, 5) != 4 || !*fl[0])
            LFAIL(PN_ERR_FORMAT, "%s:%d: expected '<tensor name><TAB><E3><TAB><E4><TAB><CRC-32>'",
                  path, line);
        pn_measure_entry *e = &m->entries[m->n];
        if (!parse_e(fl[1], &e->e3) || !parse_e(fl[2], &e->e4))
            LFAIL(PN_ERR_FORMAT,
                  "%s:%d: tensor '%s': expected two finite errors >= 0, found '%s' '%s'", path,
                  line, fl[0], fl[1], fl[2]);
        uint64_t crc;
        if (!parse_hex(fl[3], 8, &crc))
            LFAIL(PN_ERR_FORMAT,
                  "%s:%d: tensor '%s': expected a CRC-32 of 8 hex digits, found '%s'", path, line,
                  fl[0], fl[3]);
        e->rows_crc32 = (uint32_t)crc;
        if (pn_name_index_get(seen, fl[0]) >= 0)
            LFAIL(PN_ERR_FORMAT, "%s:%d: tensor '%s' is listed twice", path, line, fl[0]);
        if (!(e->name = strdup(fl[0])) || !pn_name_index_put(seen, e->name, m->n, NULL))
            LFAIL(PN_ERR_NOMEM, "%s: out of memory", path);
        m->n++;
    }
    s = pn_next_line(&lr);
    if (!s || strcmp(s, "end") != 0)
        LFAIL(s ? PN_ERR_FORMAT : PN_ERR_TRUNCATED, "%s:%d: expected 'end' after %lld candidates%s",
              path, lr.line + (s ? 0 : 1), (long long)count,
              s ? "" : ", found the end of the file");
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

/* ---- is it the measurement this run would make? ---- */

pn_status pn_measurement_check_params(const pn_measurement *m, const char *path,
                                      const pn_measure_params *want, const pn_plan *plan,
                                      pn_error *err)
{
    const pn_measure_params *got = &m->params;
    if (got->source_header_hash != want->source_header_hash)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: measured on another source: its header hash (FNV-1a 64) is "
                            "%016" PRIx64 ", this source's is %016" PRIx64,
                            path, got->source_header_hash, want->source_header_hash);
    if (strcmp(got->quantizer, want->quantizer) != 0)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: measured by another quantizer version: '%s', this run is '%s'",
                            path, got->quantizer, want->quantizer);
    if (got->rotation_cap != want->rotation_cap) {
        char a[32], b[32];
        pn_rotation_text(got->rotation_cap, a, sizeof a);
        pn_rotation_text(want->rotation_cap, b, sizeof b);
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: measured with another rotation: %s, this run uses %s", path, a, b);
    }
    if (got->sample_max_rows != want->sample_max_rows)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: measured on another number of rows: %lld per tensor, this run "
                            "samples %lld (--measure-rows)",
                            path, (long long)got->sample_max_rows,
                            (long long)want->sample_max_rows);
    if (got->weighted != want->weighted ||
        (want->weighted && (got->imatrix_hash != want->imatrix_hash ||
                            got->missing_unweighted != want->missing_unweighted))) {
        char a[64], b[64];
        if (got->weighted)
            snprintf(a, sizeof a, "entries %016" PRIx64 "%s", got->imatrix_hash,
                     got->missing_unweighted ? " (missing unweighted)" : "");
        else
            snprintf(a, sizeof a, "none");
        if (want->weighted)
            snprintf(b, sizeof b, "entries %016" PRIx64 "%s", want->imatrix_hash,
                     want->missing_unweighted ? " (missing unweighted)" : "");
        else
            snprintf(b, sizeof b, "none");
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: measured with another importance matrix: %s, this run uses %s",
                            path, a, b);
    }
    /* the same candidates in the same (tensor) order */
    size_t k = 0;
    for (size_t i = 0; i < plan->n_tensors; i++) {
        const pn_plan_tensor *t = &plan->tensors[i];
        if (!t->candidate)
            continue;
        if (k >= m->n || strcmp(m->entries[k].name, t->name) != 0) {
            long at = pn_measurement_find(m, t->name);
            if (at < 0)
                return pn_error_set(err, PN_ERR_MISMATCH,
                                    "%s: tensor %s, a promotion candidate of this run, was not "
                                    "measured",
                                    path, t->name);
            return pn_error_set(err, PN_ERR_MISMATCH,
                                "%s: tensor %s was measured but is not a promotion candidate of "
                                "this run",
                                path, k < m->n ? m->entries[k].name : t->name);
        }
        k++;
    }
    if (k < m->n)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: tensor %s was measured but is not a promotion candidate of this "
                            "run",
                            path, m->entries[k].name);
    return PN_OK;
}

pn_status pn_measurement_check_rows(const pn_measurement *m, const char *path, const pn_plan *plan,
                                    const uint32_t *rows_crc, pn_error *err)
{
    size_t k = 0;
    for (size_t i = 0; i < plan->n_tensors && k < m->n; i++) {
        if (!plan->tensors[i].candidate)
            continue;
        const pn_measure_entry *e = &m->entries[k++];
        if (e->rows_crc32 != rows_crc[i])
            return pn_error_set(err, PN_ERR_MISMATCH,
                                "%s: tensor %s: its sampled rows are not the ones measured "
                                "(CRC-32 %08" PRIx32 " when measured, %08" PRIx32 " now): the "
                                "source changed",
                                path, e->name, e->rows_crc32, rows_crc[i]);
    }
    return PN_OK;
}
