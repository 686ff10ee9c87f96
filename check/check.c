/* check.c - pn-check: the report, findings, and the structure stage.
 *
 * The structure stage turns what the GGUF reader refuses into a finding, then
 * checks where the tensor data lies itself (aligned, inside the file, not
 * overlapping) from the parsed tensor infos, so that a file cut short inside
 * its tensor data names every tensor past the end instead of being refused as
 * a whole.
 */
#include "check/check.h"
#include "check/check_testing.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/clock.h"
#include "common/mem.h"
#include "io/source_open.h"
#include "gguf/gguf_split.h"
#include "check/check_internal.h"
#include "quant/types.h"

const char *pn_severity_name(pn_severity s)
{
    return s == PN_SEV_ERROR ? "error" : "warning";
}

void pn_check_options_default(pn_check_options *o)
{
    memset(o, 0, sizeof *o);
    o->source_factor = 4.0;
    o->source_floor = 1e-4;
    o->stock_limit = 0.5;
    o->sample_rows = 16;
    o->max_locations = 5;
    o->chunk_bytes = (size_t)8 << 20;
}

char *pn_check_strdup_gguf(gguf_str s)
{
    char *p = malloc((size_t)s.len + 1);
    if (!p)
        return NULL;
    if (s.len)
        memcpy(p, s.data, (size_t)s.len);
    p[s.len] = '\0';
    return p;
}

pn_str_walk pn_str_walk_start(const gguf_kv *kv)
{
    return (pn_str_walk){ kv->arr_data };
}

/* The reader checked every length of the array against the file at open. */
gguf_str pn_str_walk_next(pn_str_walk *w)
{
    uint64_t len = 0;
    for (int i = 0; i < 8; i++)
        len |= (uint64_t)w->p[i] << (8 * i);
    gguf_str s = { len, (const char *)w->p + 8 };
    w->p += 8 + len;
    return s;
}

/* The file a finding about `tensor` (or about no tensor of the file) names. */
static const char *file_of(const pn_check_ctx *c, const char *tensor)
{
    if (!c->r)
        return c->finding_file ? c->finding_file : c->rep->path;
    long i = tensor ? gguf_reader_find_tensor(c->r, tensor) : -1;
    if (i >= 0)
        return gguf_reader_name(
            gguf_reader_split(c->r, gguf_reader_tensor(c->r, (size_t)i)->split));
    return c->finding_file ? c->finding_file : gguf_reader_name(gguf_reader_split(c->r, 0));
}

pn_finding *pn_check_add(pn_check_ctx *c, pn_severity sev, const char *code, const char *tensor,
                         const char *key, int64_t offset, const char *fmt, ...)
{
    pn_check_report *r = c->rep;
    if (c->nomem)
        return NULL;
    if (r->n_findings == c->findings_cap) {
        size_t cap = c->findings_cap ? 2 * c->findings_cap : 16;
        pn_finding *grown = realloc(r->findings, cap * sizeof *grown);
        if (!grown) {
            c->nomem = true;
            return NULL;
        }
        r->findings = grown;
        c->findings_cap = cap;
    }
    pn_finding *f = &r->findings[r->n_findings];
    memset(f, 0, sizeof *f);
    f->severity = sev;
    f->code = code;
    f->offset = offset;
    f->row = f->block = f->count = f->index = -1;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    f->message = strdup(buf);
    f->tensor = tensor ? strdup(tensor) : NULL;
    f->key = key ? strdup(key) : NULL;
    const char *file = file_of(c, tensor);
    f->file = file ? strdup(file) : NULL;
    if (!f->message || (tensor && !f->tensor) || (key && !f->key) || (file && !f->file)) {
        free(f->message);
        free(f->tensor);
        free(f->key);
        free(f->file);
        c->nomem = true;
        return NULL;
    }
    r->n_findings++;
    if (sev == PN_SEV_ERROR)
        r->n_errors++;
    else
        r->n_warnings++;
    return f;
}

void pn_check_report_free(pn_check_report *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_findings; i++) {
        const pn_finding *f = &r->findings[i];
        PN_FREE_ALL(f->tensor, f->key, f->message, f->file);
    }
    free(r->findings);
    PN_FREE_EACH_FIELD(r->splits, r->n_splits, path);
    for (size_t i = 0; i < r->n_tensors; i++)
        PN_FREE_ALL(r->tensors[i].name, r->tensors[i].note);
    free(r->tensors);
    PN_FREE_EACH(r->promoted, r->n_promoted);
    PN_FREE_ALL(r->recipe_mix, r->expected_mix, r->source_path, r->header_note, r->path, r);
}

int pn_check_exit_code(const pn_check_report *r, bool strict)
{
    if (!r || !r->readable)
        return 1; /* what the file holds (or lacks): cmd/cli.h's rule */
    if (r->n_errors > 0 || (strict && r->n_warnings > 0))
        return 1;
    return 0;
}

const pn_finding *pn_check_find(const pn_check_report *r, const char *code, const char *tensor)
{
    for (size_t i = 0; r && i < r->n_findings; i++) {
        const pn_finding *f = &r->findings[i];
        if (strcmp(f->code, code) != 0)
            continue;
        if (tensor && (!f->tensor || strcmp(f->tensor, tensor) != 0))
            continue;
        return f;
    }
    return NULL;
}

/* The reader's messages read "<file>: at byte N: ..."; the finding gets N
 * as a field too when it is there. */
static int64_t offset_in_message(const char *msg)
{
    const char *p = strstr(msg, ": at byte ");
    if (!p)
        return -1;
    p += 10;
    if (*p < '0' || *p > '9')
        return -1;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    return (int64_t)v;
}

/* Codes for a file the reader refuses. A file that is not GGUF, of a version
 * or byte order we cannot read, cut inside its header, with a damaged string
 * length (the header cannot be read past it), or holding a tensor
 * type this build does not know cannot be checked at all (exit 2); a header
 * that was read but breaks a GGUF rule makes the file invalid (exit 1). */
static void add_reader_refusal(pn_check_ctx *c, const pn_error *e)
{
    const char *code = "GGUF-MALFORMED";
    bool readable = true;
    switch (e->code) {
    case PN_ERR_IO:
        code = "GGUF-IO";
        readable = false;
        break;
    case PN_ERR_TRUNCATED:
        code = "GGUF-TRUNCATED-HEADER";
        readable = false;
        break;
    case PN_ERR_STRING_LENGTH:
        code = "GGUF-BAD-STRING-LENGTH";
        readable = false;
        break;
    case PN_ERR_BAD_MAGIC:
        code = "GGUF-NOT-GGUF";
        readable = false;
        break;
    case PN_ERR_VERSION:
        code = "GGUF-VERSION";
        readable = false;
        break;
    case PN_ERR_TYPE:
        code = "GGUF-UNKNOWN-TYPE";
        readable = false;
        break;
    case PN_ERR_ALIGNMENT: code = "GGUF-ALIGNMENT"; break;
    case PN_ERR_TENSOR: code = "GGUF-TENSOR-INFO"; break;
    default: code = "GGUF-MALFORMED"; break;
    }
    c->rep->readable = readable;
    pn_check_add(c, PN_SEV_ERROR, code, NULL, NULL, offset_in_message(e->msg), "%s", e->msg);
}

/* One past the last byte of a tensor's data, UINT64_MAX when that
 * overflows (the lenient reader lets such a tensor through). */
static uint64_t end_of(const pn_check_tensor *t)
{
    uint64_t end;
    if (t->file_offset == UINT64_MAX || __builtin_add_overflow(t->file_offset, t->bytes, &end))
        return UINT64_MAX;
    return end;
}

static int cmp_by_start(const void *a, const void *b, void *arg)
{
    const pn_check_tensor *t = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    if (t[i].file_offset != t[j].file_offset)
        return t[i].file_offset < t[j].file_offset ? -1 : 1;
    return i < j ? -1 : (i > j);
}

/* A min-heap of the ends of the tensors met so far in order of start. */
static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static void heap_pop(uint64_t *h, size_t *n)
{
    uint64_t v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= *n)
            break;
        if (k + 1 < *n && h[k + 1] < h[k])
            k++;
        if (h[k] >= v)
            break;
        h[i] = h[k];
        i = k;
    }
    if (*n)
        h[i] = v;
}

/* Overlaps, in O(n log n): in order of start, each tensor that starts before
 * the end of an earlier one is reported once, naming the earlier tensor that
 * reaches furthest and counting all the earlier tensors it overlaps (those
 * whose end lies past its start, kept in a heap of ends). Its data is then
 * not checked: the tensors left are pairwise disjoint, so the data pass reads
 * no byte twice. */
static pn_status check_overlaps(pn_check_ctx *c, size_t lo, size_t hi)
{
    pn_check_report *rep = c->rep;
    const size_t n = hi - lo;
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    uint64_t *ends = malloc((n ? n : 1) * sizeof *ends);
    if (!order || !ends) {
        free(order);
        free(ends);
        return PN_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = lo + i;
    qsort_r(order, n, sizeof *order, cmp_by_start, rep->tensors);
    size_t reach = SIZE_MAX, n_ends = 0;
    for (size_t k = 0; k < n; k++) {
        pn_check_tensor *t = &rep->tensors[order[k]];
        const uint64_t start = t->file_offset, end = end_of(t);
        while (n_ends && ends[0] <= start)
            heap_pop(ends, &n_ends);
        if (n_ends) {
            const pn_check_tensor *p = &rep->tensors[reach];
            t->overlaps = true;
            char more[64] = "";
            if (n_ends > 1)
                snprintf(more, sizeof more, " and %zu other earlier tensors", n_ends - 1);
            pn_finding *f = pn_check_add(
                c, PN_SEV_ERROR, "GGUF-TENSOR-OVERLAP", t->name, NULL, (int64_t)start,
                "bytes [%llu, %llu) overlap tensor '%s' at [%llu, %llu)%s; its data is not checked",
                (unsigned long long)start, (unsigned long long)end, p->name,
                (unsigned long long)p->file_offset, (unsigned long long)end_of(p), more);
            if (f)
                f->count = (int64_t)n_ends;
        }
        heap_push(ends, &n_ends, end);
        if (reach == SIZE_MAX || end > end_of(&rep->tensors[reach]))
            reach = order[k];
    }
    free(order);
    free(ends);
    return PN_OK;
}

/* Alignment, bounds and overlap of the bytes of tensors [lo, hi), those of
 * file `sr` (one split of a set, or the file), each problem named; a shape
 * whose weight count does not fit 64 bits. */
static pn_status check_file_layout(pn_check_ctx *c, const gguf_reader *sr, size_t lo, size_t hi)
{
    pn_check_report *rep = c->rep;
    const uint64_t align = gguf_reader_alignment(sr);
    const uint64_t data_off = gguf_reader_data_offset(sr);
    const uint64_t fsize = gguf_reader_file_size(sr);

    c->finding_file = gguf_reader_name(sr);
    if (data_off > fsize && hi > lo)
        pn_check_add(c, PN_SEV_ERROR, "GGUF-TRUNCATED-DATA", NULL, NULL, (int64_t)fsize,
                     "the file (%llu bytes) ends inside the padding before its data section, "
                     "which starts at offset %llu",
                     (unsigned long long)fsize, (unsigned long long)data_off);
    c->finding_file = NULL;

    for (size_t i = lo; i < hi; i++) {
        pn_check_tensor *t = &rep->tensors[i];
        const gguf_tensor_info *ti = gguf_reader_tensor(c->r, i);
        int64_t weights;
        if (!pn_weight_count(t->ne, &weights)) {
            t->too_many_weights = true;
            pn_check_add(c, PN_SEV_ERROR, "GGUF-TENSOR-TOO-LARGE", t->name, NULL,
                         (int64_t)ti->info_offset,
                         "shape %llu x %llu x %llu x %llu holds more than 2^63 - 1 weights "
                         "(its %llu bytes of %s fit 64 bits); its data is not checked",
                         (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                         (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                         (unsigned long long)t->bytes, pn_type_traits_get(t->type)->name);
        }
        if (align && ti->offset % align != 0)
            pn_check_add(c, PN_SEV_ERROR, "GGUF-TENSOR-MISALIGNED", t->name, NULL,
                         (int64_t)t->file_offset,
                         "data offset %llu (file offset %llu) is not a multiple of the "
                         "alignment %llu",
                         (unsigned long long)ti->offset, (unsigned long long)t->file_offset,
                         (unsigned long long)align);
        const uint64_t end = end_of(t);
        if (end > fsize) {
            t->in_file = false;
            if (end == UINT64_MAX)
                pn_check_add(c, PN_SEV_ERROR, "GGUF-TENSOR-PAST-EOF", t->name, NULL, -1,
                             "data offset %llu + %llu bytes overflows 64 bits: past the end of "
                             "the file (%llu bytes)",
                             (unsigned long long)ti->offset, (unsigned long long)t->bytes,
                             (unsigned long long)fsize);
            else
                pn_check_add(c, PN_SEV_ERROR, "GGUF-TENSOR-PAST-EOF", t->name, NULL,
                             (int64_t)t->file_offset,
                             "bytes [%llu, %llu) end past the end of the file (%llu bytes): the "
                             "file is cut short inside its tensor data",
                             (unsigned long long)t->file_offset, (unsigned long long)end,
                             (unsigned long long)fsize);
        } else {
            t->in_file = true;
        }
    }
    return check_overlaps(c, lo, hi);
}

/* Where the data lies is a matter of each file: its header, data section and
 * size. */
static pn_status check_data_layout(pn_check_ctx *c)
{
    for (size_t s = 0; s < gguf_reader_n_splits(c->r); s++) {
        pn_status st =
            check_file_layout(c, gguf_reader_split(c->r, s), gguf_reader_split_first(c->r, s),
                              gguf_reader_split_first(c->r, s + 1));
        if (st)
            return st;
    }
    return PN_OK;
}

static pn_status fill_tensors(pn_check_ctx *c)
{
    pn_check_report *rep = c->rep;
    size_t n = gguf_reader_n_tensors(c->r);
    rep->tensors = calloc(n ? n : 1, sizeof *rep->tensors);
    if (!rep->tensors)
        return PN_ERR_NOMEM;
    rep->n_tensors = n;
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(c->r, i);
        pn_check_tensor *t = &rep->tensors[i];
        t->name = strdup(ti->name);
        if (!t->name)
            return PN_ERR_NOMEM;
        t->type = ti->type;
        t->n_dims = ti->n_dims;
        for (int d = 0; d < 4; d++)
            t->ne[d] = ti->ne[d];
        t->file_offset = gguf_reader_tensor_file_offset(c->r, i); /* UINT64_MAX: overflow */
        t->split = ti->split;
        t->bytes = ti->size;
        t->bad_blocks = 0;
        t->rel_error = t->expected_error = t->limit = NAN;
    }
    return PN_OK;
}

/* The files of what is checked: the file, or every split of the set. */
static pn_status fill_splits(pn_check_ctx *c)
{
    pn_check_report *rep = c->rep;
    const size_t n = gguf_reader_n_splits(c->r);
    rep->splits = calloc(n, sizeof *rep->splits);
    if (!rep->splits)
        return PN_ERR_NOMEM;
    rep->n_splits = n;
    rep->file_size = 0;
    for (size_t s = 0; s < n; s++) {
        const gguf_reader *sr = gguf_reader_split(c->r, s);
        pn_check_split *f = &rep->splits[s];
        if (!(f->path = strdup(gguf_reader_name(sr))))
            return PN_ERR_NOMEM;
        f->present = true;
        f->file_size = gguf_reader_file_size(sr);
        f->first_tensor = gguf_reader_split_first(c->r, s);
        f->n_tensors = gguf_reader_split_first(c->r, s + 1) - f->first_tensor;
        rep->file_size += f->file_size;
    }
    return PN_OK;
}

/* A split finding naming `file` (the message names it too). */
static void add_split_finding(pn_check_ctx *c, const char *code, const char *file, const char *msg)
{
    c->finding_file = file;
    pn_check_add(c, PN_SEV_ERROR, code, NULL, NULL, offset_in_message(msg), "%s", msg);
    c->finding_file = NULL;
}

/* The named file reads on its own (`given`) but its split set does not open
 * (set_err says why, for the first problem found). Every file of the set is
 * looked at, one at a time, so that each bad split gets its finding: missing,
 * unreadable, or another set's (its split keys); when each split is fine by
 * itself, the set as a whole is wrong (its tensors do not add up to
 * split.tensors.count, or a tensor is in two splits). The set is invalid;
 * its tensors are not checked. */
static pn_status survey_set(pn_check_ctx *c, const gguf_reader *given, const pn_error *set_err)
{
    pn_check_report *rep = c->rep;
    const char *name = gguf_reader_name(given);
    rep->set_unopened = true;
    rep->file_size = gguf_reader_file_size(given);
    gguf_split_keys gk;
    pn_error e = { 0 };
    if (gguf_split_read_keys(given, &gk, &e) != PN_OK) {
        add_split_finding(c, "SPLIT-KEYS", name, e.msg);
        return PN_OK;
    }
    char *prefix = NULL;
    if (!gguf_split_keys_in_set(&gk) || gguf_split_check_named(given, &gk, &e) != PN_OK ||
        !(prefix = gguf_split_prefix(name, gk.no, gk.count))) {
        /* the named file's keys: set_err says what (the name, split.no ...) */
        add_split_finding(c, "SPLIT-KEYS", name,
                          gguf_split_keys_in_set(&gk) && e.code ? e.msg : set_err->msg);
        return PN_OK;
    }
    rep->splits = calloc(gk.count, sizeof *rep->splits);
    if (!rep->splits) {
        free(prefix);
        return PN_ERR_NOMEM;
    }
    rep->n_splits = gk.count;
    /* the splits read, kept for the set identity check below */
    gguf_reader **members = calloc(gk.count, sizeof *members);
    if (!members) {
        free(prefix);
        return PN_ERR_NOMEM;
    }
    size_t n_bad = 0;
    pn_status st = PN_OK;
    for (uint32_t s = 0; s < gk.count && !st; s++) {
        pn_check_split *f = &rep->splits[s];
        f->path = gguf_split_path_of_prefix(prefix, s, gk.count);
        if (!f->path) {
            st = PN_ERR_NOMEM;
            break;
        }
        if (s == gk.no) {
            f->present = true;
            f->file_size = gguf_reader_file_size(given);
            continue;
        }
        struct stat sb;
        if (stat(f->path, &sb) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
            char msg[1024];
            snprintf(msg, sizeof msg,
                     "%s: missing: split %u of %u of the set that %s belongs to is not there",
                     f->path, s + 1, (unsigned)gk.count, name);
            add_split_finding(c, "SPLIT-MISSING", f->path, msg);
            n_bad++;
            continue;
        }
        gguf_reader *m = NULL;
        pn_status ms =
            gguf_reader_open_flags(f->path, GGUF_OPEN_LENIENT | GGUF_OPEN_ONE_FILE, &m, &e);
        if (ms == PN_ERR_NOMEM) {
            st = ms;
            break;
        }
        if (ms != PN_OK) {
            add_split_finding(c, "SPLIT-UNREADABLE", f->path, e.msg);
            n_bad++;
            continue;
        }
        f->present = true;
        f->file_size = gguf_reader_file_size(m);
        rep->file_size += f->file_size;
        if (gguf_split_check_member(given, &gk, m, s, &e) != PN_OK) {
            add_split_finding(c, "SPLIT-FOREIGN", f->path, e.msg);
            n_bad++;
        }
        members[s] = m;
    }
    free(prefix);
    if (!st && n_bad == 0) {
        /* each file is fine alone: the set is not. Its splits come from
         * different runs (their set identities differ), or its counts do
         * not add up, or a tensor is in two splits. */
        members[gk.no] = (gguf_reader *)given;
        size_t odd = 0;
        if (gguf_split_check_set_ids((const gguf_reader *const *)members, gk.count, &odd, &e) !=
            PN_OK)
            add_split_finding(c, "SPLIT-MIXED", gguf_reader_name(members[odd]), e.msg);
        else
            pn_check_add(c, PN_SEV_ERROR, "SPLIT-SET", NULL, NULL, offset_in_message(set_err->msg),
                         "%s", set_err->msg);
        members[gk.no] = NULL;
    }
    for (uint32_t s = 0; s < gk.count; s++)
        gguf_reader_close(members[s]);
    free(members);
    return st;
}

static pn_status check_options(const pn_check_options *o, pn_error *err)
{
    if (!(o->source_factor > 0) || !(o->source_floor >= 0) || !(o->stock_limit > 0))
        return pn_error_set(err, PN_ERR_USAGE,
                            "check options: source factor and stock limit must be > 0, floor >= 0");
    if (o->sample_rows < 1 || o->max_locations < 1 || o->chunk_bytes < 1)
        return pn_error_set(err, PN_ERR_USAGE,
                            "check options: sample rows, locations and chunk bytes must be >= 1");
    return PN_OK;
}

/* A source is the float model a file was made from: comparing with a
 * quantized file (or with the file itself) would compare nothing. */
static pn_status check_source_is_float(const gguf_reader *src, pn_error *err)
{
    for (size_t i = 0; i < gguf_reader_n_tensors(src); i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(src, i);
        if (!pn_type_is_float(ti->type))
            return pn_error_set(err, PN_ERR_TYPE,
                                "source %s: not a float model: tensor '%s' is %s (a source holds "
                                "only f32, f16 and bf16 tensors)",
                                gguf_reader_name(src), ti->name,
                                pn_type_traits_get(ti->type)->name);
    }
    return PN_OK;
}

/* Whether a GGUF has an MTP layer to drop: its <arch>.nextn_predict_layers
 * key, as io/source_open.c drops it. */
static bool has_mtp_key(const gguf_reader *r)
{
    const gguf_kv *arch = gguf_reader_find_kv(r, "general.architecture");
    if (!arch || arch->type != GGUF_TYPE_STRING || arch->v.str.len > 100)
        return false;
    char key[160];
    snprintf(key, sizeof key, "%.*s.nextn_predict_layers", (int)arch->v.str.len, arch->v.str.data);
    return gguf_reader_find_kv(r, key) != NULL;
}

/* --source, without its MTP layer when drop_mtp (pn_check_source_drops_mtp);
 * a GGUF without an MTP layer is read as it is, whatever its keys. */
static pn_status open_source(pn_check_ctx *c, bool drop_mtp, pn_error *err)
{
    pn_source_opts so = { .no_mtp = drop_mtp };
    if (drop_mtp && !pn_source_is_hf(c->opt.source_path)) {
        pn_status st = pn_source_open(c->opt.source_path, NULL, &c->src, err);
        if (st || !has_mtp_key(c->src))
            return st;
        gguf_reader_close(c->src);
        c->src = NULL;
    }
    return pn_source_open(c->opt.source_path, &so, &c->src, err);
}

static void close_readers(pn_check_ctx *c)
{
    if (c->src)
        gguf_reader_close(c->src);
    if (c->r)
        gguf_reader_close(c->r);
    c->src = c->r = NULL;
}

pn_status pn_check_file(const char *path, const pn_check_options *opt, pn_check_report **out,
                        pn_error *err)
{
    *out = NULL;
    pn_check_ctx c = { 0 };
    if (opt)
        c.opt = *opt;
    else
        pn_check_options_default(&c.opt);
    pn_status st = check_options(&c.opt, err);
    if (st)
        return st;
    const double t0 = pn_now_seconds();

    c.rep = calloc(1, sizeof *c.rep);
    if (!c.rep)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", path);
    c.rep->path = strdup(path);
    c.rep->readable = true;
    c.rep->recipe_promote_n = -1;
    if (!c.rep->path) {
        st = PN_ERR_NOMEM;
        goto fail;
    }

    pn_error rerr = { 0 };
    st = gguf_reader_open_lenient(path, &c.r, &rerr);
    if (st == PN_ERR_NOMEM)
        goto fail;
    if (st != PN_OK) {
        /* the file itself, or the split set it belongs to? */
        gguf_reader *one = NULL;
        pn_error oerr = { 0 };
        pn_status ost =
            gguf_reader_open_flags(path, GGUF_OPEN_LENIENT | GGUF_OPEN_ONE_FILE, &one, &oerr);
        if (ost == PN_OK) {
            st = survey_set(&c, one, &rerr);
            gguf_reader_close(one);
        } else {
            struct stat sb;
            if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
                c.rep->file_size = (uint64_t)sb.st_size;
            add_reader_refusal(&c, &rerr);
            st = PN_OK;
        }
        if (!st && c.nomem)
            st = PN_ERR_NOMEM;
        if (st)
            goto fail;
        c.rep->seconds = pn_now_seconds() - t0;
        *out = c.rep;
        return PN_OK;
    }
    if ((st = fill_splits(&c)))
        goto fail;

    if ((st = fill_tensors(&c)) || (st = check_data_layout(&c)))
        goto fail;

    if (c.opt.source_path) {
        c.rep->source_path = strdup(c.opt.source_path);
        if (!c.rep->source_path) {
            st = PN_ERR_NOMEM;
            goto fail;
        }
        bool drop_mtp = false;
        if ((st = pn_check_source_drops_mtp(&c, &drop_mtp, err)))
            goto fail_msg;
        st = open_source(&c, drop_mtp, err);
        if (st) {
            pn_error_prefix(err, "source");
            goto fail_msg;
        }
        if ((st = check_source_is_float(c.src, err)))
            goto fail_msg;
    }

    if ((st = pn_check_model(&c, err)) || (st = pn_check_metadata(&c, err)) ||
        (st = pn_check_source_identity(&c, err)) || (st = pn_check_recipe(&c, err)) ||
        (st = pn_check_imatrix(&c, err)) || (st = pn_check_data(&c, err)))
        goto fail_msg;
    if (c.nomem) {
        st = PN_ERR_NOMEM;
        goto fail;
    }
    close_readers(&c);
    c.rep->seconds = pn_now_seconds() - t0;
    *out = c.rep;
    return PN_OK;

fail:
    pn_error_set(err, st, "%s: %s", path, pn_strerror(st));
fail_msg:
    close_readers(&c);
    pn_check_report_free(c.rep);
    return st;
}
