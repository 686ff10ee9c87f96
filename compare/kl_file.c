/* kl_file.c - the KL measurement's file: writing, reading, comparing what it
 * was measured with, joining the parts of a divided measurement, and the
 * form promotion takes (kl_measure.h describes the format). */
#include "compare/kl_measure.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "common/outfile.h"
#include "common/text.h"
#include "quant/types.h"

#define KL_MAX_FILE_BYTES ((size_t)64 << 20)

void pn_kl_measurement_free(pn_kl_measurement *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++)
        free(m->entries[i].name);
    free(m->entries);
    free(m);
}

static const char *decode_name(int type)
{
    return pn_type_name(pn_type_is_float(type) ? type : PN_TYPE_F32);
}

/* One line of text, no tab: what a field may hold. */
static bool field_ok(const char *s)
{
    return *s && !strpbrk(s, "\t\r\n");
}

static void print_kl(FILE *f, const void *ctx)
{
    const pn_kl_measurement *m = ctx;
    const pn_kl_params *p = &m->params;
    fprintf(f, "pn-measure-kl\t%d\n", PN_KL_FORMAT_VERSION);
    fprintf(f, "source\theader-fnv1a64\t%016" PRIx64 "\n", p->source_header_hash);
    fprintf(f, "quantizer\t%s\n", p->quantizer);
    fprintf(f, "base\t%s\tplan-fnv1a64\t%016" PRIx64 "\n", p->base_label, p->base_hash);
    if (p->weighted)
        fprintf(f, "imatrix\tfnv1a64\t%016" PRIx64 "\n", p->imatrix_hash);
    else
        fprintf(f, "imatrix\tnone\n");
    fprintf(f, "calibration\tfnv1a64\t%016" PRIx64 "\t%" PRIu64 "\n", p->text_hash, p->text_bytes);
    fprintf(f, "positions\t%d\t%d\t%zu\n", p->seq_len, p->max_seqs, m->n_positions);
    fprintf(f, "judge\t%s\t%s\t%s\n", p->llama_cpp, p->node_llama_cpp, decode_name(p->decode_type));
    fprintf(f, "kl-base\t%.17g\t%.17g\n", m->kl_base, m->kl_base_se);
    fprintf(f, "part\t%d\t%d\t%zu\t%zu\t%zu\n", m->part, m->n_parts, m->first, m->count, m->total);
    for (size_t i = 0; i < m->n; i++) {
        const pn_kl_entry *e = &m->entries[i];
        fprintf(f, "%s\t%.17g\t%.17g\t%.17g\t%" PRIu64 "\t%08" PRIx32 "\n", e->name, e->kl, e->gain,
                e->se, e->extra_bytes, e->sample_crc);
    }
    fprintf(f, "end\n");
}

pn_status pn_kl_save(const pn_kl_measurement *m, const char *path, pn_error *err)
{
    const pn_kl_params *p = &m->params;
    if (!field_ok(p->quantizer) || !field_ok(p->base_label) || !field_ok(p->llama_cpp) ||
        !field_ok(p->node_llama_cpp))
        return pn_error_set(err, PN_ERR_USAGE,
                            "%s: a text of the measurement is empty or not one line", path);
    for (size_t i = 0; i < m->n; i++)
        if (!field_ok(m->entries[i].name) || !isfinite(m->entries[i].kl) ||
            !isfinite(m->entries[i].gain) || !isfinite(m->entries[i].se))
            return pn_error_set(err, PN_ERR_USAGE,
                                "%s: candidate %zu cannot be saved (its name holds a tab or line "
                                "break, or a figure is not finite)",
                                path, m->first + i);
    /* replaced: the caller decided the file may be */
    return pn_outfile_save_text(path, "KL measurement", print_kl, m, err);
}

/* ---- reading ---- */

/* The line's fields split at tabs: exactly want of them, the first `key`. */
static bool fields(char *s, const char *key, char **f, int want)
{
    return s && pn_split_tabs(s, f, want) == want && (!key || strcmp(f[0], key) == 0);
}

static bool u64_of(const char *s, int base, int digits, uint64_t *v)
{
    if (!*s || (digits && (int)strlen(s) != digits) || *s == '-' || *s == '+' || *s == ' ')
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, base);
    if (errno || *end)
        return false;
    *v = x;
    return true;
}

static bool int_of(const char *s, int lo, int hi, int *v)
{
    uint64_t x;
    if (!u64_of(s, 10, 0, &x) || x < (uint64_t)lo || x > (uint64_t)hi)
        return false;
    *v = (int)x;
    return true;
}

static bool text_into(const char *s, char *dst, size_t cap)
{
    if (!field_ok(s) || strlen(s) >= cap)
        return false;
    memcpy(dst, s, strlen(s) + 1);
    return true;
}

#define BAD(...)                                                                                   \
    do {                                                                                           \
        st = pn_error_set(err, PN_ERR_FORMAT, __VA_ARGS__);                                        \
        goto done;                                                                                 \
    } while (0)

/* The header lines, up to and with the part line. */
static pn_status load_header(pn_line_reader *lr, const char *path, pn_kl_measurement *m,
                             pn_error *err)
{
    pn_status st = PN_OK;
    pn_kl_params *p = &m->params;
    char *f[7];
    uint64_t v;
    if (!fields(pn_next_line(lr), "pn-measure-kl", f, 2))
        BAD("%s:1: expected 'pn-measure-kl<TAB>%d' (a KL measurement file)", path,
            PN_KL_FORMAT_VERSION);
    if (!u64_of(f[1], 10, 0, &v) || v != PN_KL_FORMAT_VERSION) {
        st =
            pn_error_set(err, PN_ERR_VERSION, "%s:1: expected KL measurement format %d, found '%s'",
                         path, PN_KL_FORMAT_VERSION, f[1]);
        goto done;
    }
    if (!fields(pn_next_line(lr), "source", f, 3) || strcmp(f[1], "header-fnv1a64") != 0 ||
        !u64_of(f[2], 16, 16, &p->source_header_hash))
        BAD("%s:%d: expected 'source<TAB>header-fnv1a64<TAB><16 hex digits>'", path, lr->line);
    if (!fields(pn_next_line(lr), "quantizer", f, 2) ||
        !text_into(f[1], p->quantizer, sizeof p->quantizer))
        BAD("%s:%d: expected 'quantizer<TAB><name and version>'", path, lr->line);
    if (!fields(pn_next_line(lr), "base", f, 4) ||
        !text_into(f[1], p->base_label, sizeof p->base_label) ||
        strcmp(f[2], "plan-fnv1a64") != 0 || !u64_of(f[3], 16, 16, &p->base_hash))
        BAD("%s:%d: expected 'base<TAB><mix><TAB>plan-fnv1a64<TAB><16 hex digits>'", path,
            lr->line);
    char *s = pn_next_line(lr);
    if (s && strcmp(s, "imatrix\tnone") == 0) {
        p->weighted = false;
    } else if (fields(s, "imatrix", f, 3) && strcmp(f[1], "fnv1a64") == 0 &&
               u64_of(f[2], 16, 16, &p->imatrix_hash)) {
        p->weighted = true;
    } else {
        BAD("%s:%d: expected 'imatrix<TAB>none' or 'imatrix<TAB>fnv1a64<TAB><16 hex "
            "digits>'",
            path, lr->line);
    }
    if (!fields(pn_next_line(lr), "calibration", f, 4) || strcmp(f[1], "fnv1a64") != 0 ||
        !u64_of(f[2], 16, 16, &p->text_hash) || !u64_of(f[3], 10, 0, &p->text_bytes))
        BAD("%s:%d: expected 'calibration<TAB>fnv1a64<TAB><16 hex digits><TAB><bytes>'", path,
            lr->line);
    if (!fields(pn_next_line(lr), "positions", f, 4) || !int_of(f[1], 1, 1 << 22, &p->seq_len) ||
        !int_of(f[2], 1, 1 << 22, &p->max_seqs) || !u64_of(f[3], 10, 0, &v) || v < 1 ||
        v > (uint64_t)p->seq_len * (uint64_t)p->max_seqs)
        BAD("%s:%d: expected 'positions<TAB><seq-len><TAB><max-seqs><TAB><positions judged>'", path,
            lr->line);
    m->n_positions = (size_t)v;
    if (!fields(pn_next_line(lr), "judge", f, 4) ||
        !text_into(f[1], p->llama_cpp, sizeof p->llama_cpp) ||
        !text_into(f[2], p->node_llama_cpp, sizeof p->node_llama_cpp) ||
        pn_float_type_from_name(f[3]) < 0)
        BAD("%s:%d: expected 'judge<TAB><llama.cpp><TAB><node-llama-cpp><TAB>f32|bf16|f16'", path,
            lr->line);
    p->decode_type = pn_float_type_from_name(f[3]);
    if (!fields(pn_next_line(lr), "kl-base", f, 3) || !pn_field_real(f[1], &m->kl_base) ||
        !pn_field_real(f[2], &m->kl_base_se) || m->kl_base < 0 || m->kl_base_se < 0)
        BAD("%s:%d: expected 'kl-base<TAB><mean KL><TAB><standard error>'", path, lr->line);
    uint64_t first, count, total;
    if (!fields(pn_next_line(lr), "part", f, 6) || !int_of(f[1], 1, 99999, &m->part) ||
        !int_of(f[2], 1, 99999, &m->n_parts) || m->part > m->n_parts ||
        !u64_of(f[3], 10, 0, &first) || !u64_of(f[4], 10, 0, &count) ||
        !u64_of(f[5], 10, 0, &total) || first > total || count > total - first ||
        count > lr->len / 8)
        BAD("%s:%d: expected 'part<TAB><I><TAB><N><TAB><first><TAB><count><TAB><total>' with I "
            "<= N and the share inside the total",
            path, lr->line);
    m->first = (size_t)first;
    m->count = (size_t)count;
    m->total = (size_t)total;
done:
    return st;
}

pn_status pn_kl_load(const char *path, pn_kl_measurement **out, pn_error *err)
{
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    pn_status st = pn_read_small_file(path, KL_MAX_FILE_BYTES, "KL measurement", &buf, &len, err);
    if (st != PN_OK)
        return st;
    st = pn_kl_parse(buf, len, path, out, err);
    free(buf);
    return st;
}

pn_status pn_kl_parse(const char *data, size_t len, const char *path, pn_kl_measurement **out,
                      pn_error *err)
{
    *out = NULL;
    /* parsed in place, each line terminated where it ends: a copy */
    char *buf = malloc(len + 1);
    if (!buf)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    if (len)
        memcpy(buf, data, len);
    pn_status st = PN_OK;
    pn_kl_measurement *m = calloc(1, sizeof *m);
    if (!m) {
        free(buf);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    pn_line_reader lr = { .buf = buf, .len = len };
    if (memchr(buf, '\0', len))
        BAD("%s: expected a text file, found a NUL byte", path);
    buf[len] = '\0';
    st = load_header(&lr, path, m, err);
    if (st != PN_OK)
        goto done;
    m->entries = calloc(m->count ? m->count : 1, sizeof *m->entries);
    if (!m->entries) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto done;
    }
    char *s, *f[7];
    while ((s = pn_next_line(&lr)) != NULL && strcmp(s, "end") != 0) {
        pn_kl_entry *e = &m->entries[m->n];
        uint64_t crc;
        if (m->n == m->count)
            BAD("%s:%d: more candidate lines than the part line's count of %zu", path, lr.line,
                m->count);
        if (!fields(s, NULL, f, 6) || !field_ok(f[0]) || !pn_field_real(f[1], &e->kl) ||
            !pn_field_real(f[2], &e->gain) || !pn_field_real(f[3], &e->se) || e->kl < 0 ||
            e->se < 0 || !u64_of(f[4], 10, 0, &e->extra_bytes) || !u64_of(f[5], 16, 8, &crc))
            BAD("%s:%d: expected '<tensor><TAB><KL><TAB><gain><TAB><se><TAB><extra "
                "bytes><TAB><CRC-32>'",
                path, lr.line);
        for (size_t k = 0; k < m->n; k++)
            if (strcmp(m->entries[k].name, f[0]) == 0)
                BAD("%s:%d: tensor '%s' is listed twice", path, lr.line, f[0]);
        e->sample_crc = (uint32_t)crc;
        if (!(e->name = strdup(f[0]))) {
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            goto done;
        }
        m->n++;
    }
    if (!s)
        st = pn_error_set(err, PN_ERR_TRUNCATED, "%s:%d: expected 'end', found the end of the file",
                          path, lr.line + 1);
    else if (lr.pos < lr.len)
        BAD("%s:%d: expected nothing after 'end'", path, lr.line + 1);
done:
    free(buf);
    if (st != PN_OK) {
        pn_kl_measurement_free(m);
        return st;
    }
    *out = m;
    return PN_OK;
}

#define DIFF(what, fmt, a, b)                                                                      \
    return pn_error_set(err, PN_ERR_MISMATCH,                                                      \
                        "%s: measured with another %s: " fmt ", this run: " fmt, path, what, a, b)

pn_status pn_kl_params_check(const pn_kl_params *got, const pn_kl_params *want, const char *path,
                             pn_error *err)
{
    if (got->source_header_hash != want->source_header_hash)
        DIFF("source (header hash)", "%016" PRIx64, got->source_header_hash,
             want->source_header_hash);
    if (strcmp(got->quantizer, want->quantizer) != 0)
        DIFF("quantizer", "'%s'", got->quantizer, want->quantizer);
    if (strcmp(got->base_label, want->base_label) != 0 || got->base_hash != want->base_hash)
        DIFF("base mix (its types and rotation)", "%016" PRIx64, got->base_hash, want->base_hash);
    if (got->weighted != want->weighted || got->imatrix_hash != want->imatrix_hash)
        DIFF("importance matrix", "%016" PRIx64, got->weighted ? got->imatrix_hash : 0,
             want->weighted ? want->imatrix_hash : 0);
    if (got->text_hash != want->text_hash || got->text_bytes != want->text_bytes)
        DIFF("calibration text", "FNV-1a 64 %016" PRIx64, got->text_hash, want->text_hash);
    if (got->seq_len != want->seq_len || got->max_seqs != want->max_seqs)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: measured on other positions: %d x %d tokens, this run: %d x %d",
                            path, got->max_seqs, got->seq_len, want->max_seqs, want->seq_len);
    if (strcmp(got->llama_cpp, want->llama_cpp) != 0 ||
        strcmp(got->node_llama_cpp, want->node_llama_cpp) != 0)
        DIFF("llama.cpp", "'%s'", got->llama_cpp, want->llama_cpp);
    if (got->decode_type != want->decode_type)
        DIFF("decoding", "%s", decode_name(got->decode_type), decode_name(want->decode_type));
    return PN_OK;
}

char *pn_kl_part_path(const char *path, int part, int n_parts)
{
    size_t n = strlen(path) + 32;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s.part-%05d-of-%05d", path, part, n_parts);
    return p;
}

static pn_status join_part(pn_kl_measurement *all, const pn_kl_measurement *m, const char *pp,
                           int i, int n_parts, pn_error *err)
{
    if (m->part != i || m->n_parts != n_parts)
        return pn_error_set(err, PN_ERR_MISMATCH, "%s: holds part %d of %d, not part %d of %d", pp,
                            m->part, m->n_parts, i, n_parts);
    if (m->n < m->count)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: part %d of %d is not finished (%zu of %zu candidates): run it "
                            "again to resume it",
                            pp, i, n_parts, m->n, m->count);
    if (i == 1) {
        all->params = m->params;
        all->n_positions = m->n_positions;
        all->kl_base = m->kl_base;
        all->kl_base_se = m->kl_base_se;
        all->total = m->total;
        all->entries = calloc(m->total ? m->total : 1, sizeof *all->entries);
        if (!all->entries)
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    } else {
        pn_status st = pn_kl_params_check(&m->params, &all->params, pp, err);
        if (st != PN_OK)
            return pn_error_prefix(err, "part %d differs from part 1", i);
        if (m->total != all->total || m->kl_base != all->kl_base ||
            m->n_positions != all->n_positions)
            return pn_error_set(err, PN_ERR_MISMATCH,
                                "%s: part %d differs from part 1 in its candidate count or base "
                                "KL (%zu, %.17g against %zu, %.17g)",
                                pp, i, m->total, m->kl_base, all->total, all->kl_base);
    }
    if (m->first != all->n)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: part %d starts at candidate %zu, the parts before it end at %zu",
                            pp, i, m->first, all->n);
    for (size_t k = 0; k < m->n; k++) {
        all->entries[all->n] = m->entries[k];
        if (!(all->entries[all->n].name = strdup(m->entries[k].name)))
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        all->n++;
    }
    return PN_OK;
}

pn_status pn_kl_assemble(const char *path, int n_parts, pn_kl_measurement **out, pn_error *err)
{
    *out = NULL;
    pn_kl_measurement *all = calloc(1, sizeof *all);
    if (!all)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_status st = PN_OK;
    for (int i = 1; i <= n_parts && st == PN_OK; i++) {
        char *pp = pn_kl_part_path(path, i, n_parts);
        pn_kl_measurement *m = NULL;
        st = pp ? pn_kl_load(pp, &m, err) : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        if (st == PN_OK)
            st = join_part(all, m, pp, i, n_parts, err);
        pn_kl_measurement_free(m);
        free(pp);
    }
    if (st == PN_OK && all->n != all->total)
        st = pn_error_set(err, PN_ERR_MISMATCH, "%s: the %d parts hold %zu of %zu candidates", path,
                          n_parts, all->n, all->total);
    if (st != PN_OK) {
        pn_kl_measurement_free(all);
        return st;
    }
    all->part = all->n_parts = 1;
    all->first = 0;
    all->count = all->total;
    *out = all;
    return PN_OK;
}

pn_status pn_kl_as_measurement(const pn_kl_measurement *k, bool per_byte, pn_measurement **out,
                               pn_error *err)
{
    *out = NULL;
    pn_measurement *m = calloc(1, sizeof *m);
    if (!m || !(m->entries = calloc(k->n ? k->n : 1, sizeof *m->entries))) {
        free(m);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    m->by_gain = true;
    m->positive_only = true;
    for (size_t i = 0; i < k->n; i++) {
        const pn_kl_entry *e = &k->entries[i];
        if (!(m->entries[i].name = strdup(e->name))) {
            pn_measurement_free(m);
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        }
        m->entries[i].gain =
            per_byte && e->extra_bytes ? e->gain / (double)e->extra_bytes : e->gain;
        m->n++;
    }
    *out = m;
    return PN_OK;
}
