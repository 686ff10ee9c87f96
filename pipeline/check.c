/* check.c - pn-check: the report, findings, and the structure stage.
 *
 * The structure stage turns what the GGUF reader refuses into a finding, then
 * checks where the tensor data lies itself (aligned, inside the file, not
 * overlapping) from the parsed tensor infos, so that a file cut short inside
 * its tensor data names every tensor past the end instead of being refused as
 * a whole.
 */
#include "pipeline/check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "pipeline/check_internal.h"
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

pn_finding *pn_check_add(pn_check_ctx *c, pn_severity sev, const char *code, const char *tensor,
                         const char *key, int64_t offset, const char *fmt, ...)
{
    pn_check_report *r = c->rep;
    if (c->nomem)
        return NULL;
    pn_finding *grown = realloc(r->findings, (r->n_findings + 1) * sizeof *grown);
    if (!grown) {
        c->nomem = true;
        return NULL;
    }
    r->findings = grown;
    pn_finding *f = &r->findings[r->n_findings];
    memset(f, 0, sizeof *f);
    f->severity = sev;
    f->code = code;
    f->offset = offset;
    f->row = f->block = f->count = -1;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    f->message = strdup(buf);
    f->tensor = tensor ? strdup(tensor) : NULL;
    f->key = key ? strdup(key) : NULL;
    if (!f->message || (tensor && !f->tensor) || (key && !f->key)) {
        free(f->message);
        free(f->tensor);
        free(f->key);
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
        free(r->findings[i].tensor);
        free(r->findings[i].key);
        free(r->findings[i].message);
    }
    free(r->findings);
    for (size_t i = 0; i < r->n_tensors; i++) {
        free(r->tensors[i].name);
        free(r->tensors[i].note);
    }
    free(r->tensors);
    for (size_t i = 0; i < r->n_promoted; i++)
        free(r->promoted[i]);
    free(r->promoted);
    free(r->recipe_mix);
    free(r->expected_mix);
    free(r->source_path);
    free(r->path);
    free(r);
}

int pn_check_exit_code(const pn_check_report *r, bool strict)
{
    if (!r || !r->readable)
        return 2;
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
 * or byte order we cannot read, cut inside its header, or holding a tensor
 * type this build does not know cannot be checked at all (exit 2); a header
 * that was read but breaks a GGUF rule makes the file invalid (exit 1). */
static void add_reader_refusal(pn_check_ctx *c, const pn_error *e)
{
    const char *code = "GGUF-MALFORMED";
    bool readable = true;
    switch (e->code) {
    case PN_ERR_IO: code = "GGUF-IO"; readable = false; break;
    case PN_ERR_TRUNCATED: code = "GGUF-TRUNCATED-HEADER"; readable = false; break;
    case PN_ERR_BAD_MAGIC: code = "GGUF-NOT-GGUF"; readable = false; break;
    case PN_ERR_VERSION: code = "GGUF-VERSION"; readable = false; break;
    case PN_ERR_TYPE: code = "GGUF-UNKNOWN-TYPE"; readable = false; break;
    case PN_ERR_ALIGNMENT: code = "GGUF-ALIGNMENT"; break;
    case PN_ERR_TENSOR: code = "GGUF-TENSOR-INFO"; break;
    default: code = "GGUF-MALFORMED"; break;
    }
    c->rep->readable = readable;
    pn_check_add(c, PN_SEV_ERROR, code, NULL, NULL, offset_in_message(e->msg), "%s", e->msg);
}

static int cmp_by_start(const void *a, const void *b, void *arg)
{
    const pn_check_tensor *t = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    if (t[i].file_offset != t[j].file_offset)
        return t[i].file_offset < t[j].file_offset ? -1 : 1;
    return i < j ? -1 : (i > j);
}

/* Alignment, bounds and overlap of every tensor's bytes, each problem named. */
static pn_status check_data_layout(pn_check_ctx *c)
{
    pn_check_report *rep = c->rep;
    const uint64_t align = gguf_reader_alignment(c->r);
    const uint64_t data_off = gguf_reader_data_offset(c->r);
    const uint64_t fsize = rep->file_size;

    if (data_off > fsize && rep->n_tensors > 0)
        pn_check_add(c, PN_SEV_ERROR, "GGUF-TRUNCATED-DATA", NULL, NULL, (int64_t)fsize,
                     "the file (%llu bytes) ends inside the padding before its data section, "
                     "which starts at offset %llu",
                     (unsigned long long)fsize, (unsigned long long)data_off);

    for (size_t i = 0; i < rep->n_tensors; i++) {
        pn_check_tensor *t = &rep->tensors[i];
        const gguf_tensor_info *ti = gguf_reader_tensor(c->r, i);
        if (align && ti->offset % align != 0)
            pn_check_add(c, PN_SEV_ERROR, "GGUF-TENSOR-MISALIGNED", t->name, NULL,
                         (int64_t)t->file_offset,
                         "data offset %llu (file offset %llu) is not a multiple of the "
                         "alignment %llu",
                         (unsigned long long)ti->offset, (unsigned long long)t->file_offset,
                         (unsigned long long)align);
        bool overflow = ti->offset > UINT64_MAX - data_off ||
                        t->bytes > UINT64_MAX - (data_off + ti->offset);
        if (overflow || t->file_offset + t->bytes > fsize) {
            t->in_file = false;
            pn_check_add(c, PN_SEV_ERROR, "GGUF-TENSOR-PAST-EOF", t->name, NULL,
                         (int64_t)t->file_offset,
                         "bytes [%llu, %llu) end past the end of the file (%llu bytes): the "
                         "file is cut short inside its tensor data",
                         (unsigned long long)t->file_offset,
                         (unsigned long long)(t->file_offset + t->bytes),
                         (unsigned long long)fsize);
        } else {
            t->in_file = true;
        }
    }

    /* Overlaps: in order of start, each tensor against the furthest-reaching
     * tensor before it. */
    size_t *order = malloc((rep->n_tensors ? rep->n_tensors : 1) * sizeof *order);
    if (!order)
        return PN_ERR_NOMEM;
    for (size_t i = 0; i < rep->n_tensors; i++)
        order[i] = i;
    qsort_r(order, rep->n_tensors, sizeof *order, cmp_by_start, rep->tensors);
    size_t reach = SIZE_MAX;
    for (size_t k = 0; k < rep->n_tensors; k++) {
        pn_check_tensor *t = &rep->tensors[order[k]];
        if (reach != SIZE_MAX) {
            const pn_check_tensor *p = &rep->tensors[reach];
            if (t->file_offset < p->file_offset + p->bytes)
                pn_check_add(c, PN_SEV_ERROR, "GGUF-TENSOR-OVERLAP", t->name, NULL,
                             (int64_t)t->file_offset,
                             "bytes [%llu, %llu) overlap tensor '%s' at [%llu, %llu)",
                             (unsigned long long)t->file_offset,
                             (unsigned long long)(t->file_offset + t->bytes), p->name,
                             (unsigned long long)p->file_offset,
                             (unsigned long long)(p->file_offset + p->bytes));
        }
        if (reach == SIZE_MAX ||
            t->file_offset + t->bytes > rep->tensors[reach].file_offset + rep->tensors[reach].bytes)
            reach = order[k];
    }
    free(order);
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
    const uint64_t data_off = gguf_reader_data_offset(c->r);
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
        t->file_offset = data_off + ti->offset;  /* overflow is checked by the layout stage */
        t->bytes = ti->size;
        t->bad_blocks = 0;
        t->rel_error = t->expected_error = t->limit = NAN;
    }
    return PN_OK;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
    pn_check_ctx c = {0};
    if (opt)
        c.opt = *opt;
    else
        pn_check_options_default(&c.opt);
    pn_status st = check_options(&c.opt, err);
    if (st)
        return st;
    const double t0 = now_seconds();

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

    pn_error rerr = {0};
    st = gguf_reader_open_lenient(path, &c.r, &rerr);
    if (st == PN_ERR_NOMEM)
        goto fail;
    if (st != PN_OK) {
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
            c.rep->file_size = (uint64_t)sb.st_size;
        add_reader_refusal(&c, &rerr);
        st = c.nomem ? PN_ERR_NOMEM : PN_OK;
        if (st)
            goto fail;
        c.rep->seconds = now_seconds() - t0;
        *out = c.rep;
        return PN_OK;
    }
    c.rep->file_size = gguf_reader_file_size(c.r);

    if ((st = fill_tensors(&c)) || (st = check_data_layout(&c)))
        goto fail;

    if (c.opt.source_path) {
        c.rep->source_path = strdup(c.opt.source_path);
        if (!c.rep->source_path) {
            st = PN_ERR_NOMEM;
            goto fail;
        }
        st = gguf_reader_open(c.opt.source_path, &c.src, err);
        if (st) {
            pn_error_prefix(err, "source");
            goto fail_msg;
        }
    }

    if ((st = pn_check_metadata(&c, err)) || (st = pn_check_recipe(&c, err)) ||
        (st = pn_check_data(&c, err)))
        goto fail_msg;
    if (c.nomem) {
        st = PN_ERR_NOMEM;
        goto fail;
    }
    close_readers(&c);
    c.rep->seconds = now_seconds() - t0;
    *out = c.rep;
    return PN_OK;

fail:
    pn_error_set(err, st, "%s: %s", path, pn_strerror(st));
fail_msg:
    close_readers(&c);
    pn_check_report_free(c.rep);
    return st;
}
