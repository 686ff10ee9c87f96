/* pn-quantize --reuse PREV (see reuse.h, docs/reuse.md). */
#include "pipeline/reuse.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/mem.h"
#include "gguf/pn_keys.h"
#include "hadamard/hadamard.h"
#include "quant/types.h"

/* Tensors named in one note; the rest are counted. */
#define NOTE_NAMES_MAX 8

void pn_quantize_note(const pn_quantize_opts *o, const char *fmt, ...)
{
    if (!o || !o->note)
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    o->note(buf, o->user);
}

void pn_reuse_free(pn_reuse *ru)
{
    if (!ru)
        return;
    gguf_reader_close(ru->prev);
    pn_recorded_source_free(&ru->rec);
    PN_FREE_ALL(ru->prev_crc, ru->fd, ru->path, ru->from, ru->why, ru->crc32, ru->source_crc32,
                ru->offset, ru);
}

static const char *needs = "--reuse needs an earlier output of pn-quantize";

pn_status pn_reuse_open(const char *path, pn_reuse **out, pn_error *err)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open the --reuse file: %s", path,
                            strerror(errno));
    const char *kind = pn_not_regular_kind(path);
    if (kind)
        return pn_error_set(err, PN_ERR_IO, "%s: the --reuse file is %s; %s", path, kind, needs);
    pn_reuse *ru = calloc(1, sizeof *ru);
    if (!ru || !(ru->path = strdup(path))) {
        free(ru);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    /* the reader opens without blocking (a FIFO put there since the check
     * is refused, not waited on), and a set from any of its files */
    pn_status st = gguf_reader_open(path, &ru->prev, err);
    if (st != PN_OK) {
        pn_error_prefix(err, "--reuse");
        goto fail;
    }
    const gguf_kv *fmt = gguf_reader_find_kv(ru->prev, PN_KEY_FORMAT);
    if (!fmt || fmt->type != GGUF_TYPE_STRING || !gguf_str_eq(fmt->v.str, PN_FORMAT_NAME)) {
        st = pn_error_set(err, PN_ERR_FORMAT, "%s: not a PN file (%s); %s", path,
                          fmt ? PN_KEY_FORMAT " is not \"" PN_FORMAT_NAME "\"" : "no pn.format key",
                          needs);
        goto fail;
    }
    const size_t n_prev = gguf_reader_n_tensors(ru->prev);
    ru->prev_crc = malloc((n_prev ? n_prev : 1) * sizeof *ru->prev_crc);
    if (!ru->prev_crc) {
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    pn_error cerr;
    pn_error_clear(&cerr);
    const gguf_kv *q = gguf_reader_find_kv(ru->prev, PN_KEY_QUANTIZER);
    if (gguf_reader_per_tensor_u32(ru->prev, PN_KEY_TENSOR_CRC, ru->prev_crc, &cerr) != PN_OK ||
        !q || q->type != GGUF_TYPE_STRING) {
        st = pn_error_set(
            err, PN_ERR_FORMAT,
            "%s: not a PN file pn-quantize wrote (no usable pn.tensor_crc32 or " PN_KEY_QUANTIZER
            "); %s",
            path, needs);
        goto fail;
    }
    pn_error rerr;
    pn_error_clear(&rerr);
    if (pn_recorded_source_read(ru->prev, &ru->rec, &rerr) != PN_OK)
        snprintf(ru->rec_problem, sizeof ru->rec_problem,
                 "its source identity is unusable (%.600s)", rerr.msg);
    else if (!ru->rec.present)
        snprintf(ru->rec_problem, sizeof ru->rec_problem,
                 "it records no source identity (no pn.source.* keys: an older pn-quantize "
                 "made it)");
    else
        ru->have_rec = true;
    *out = ru;
    return PN_OK;
fail:
    pn_reuse_free(ru);
    return st;
}

/* "hadamard:<cap>" or "none", from PREV's pn.rotation.* keys; false when
 * they say neither. */
static bool prev_rotation(const gguf_reader *r, int *cap)
{
    const gguf_kv *t = gguf_reader_find_kv(r, PN_KEY_ROTATION_TYPE);
    if (!t || t->type != GGUF_TYPE_STRING)
        return false;
    if (gguf_str_eq(t->v.str, "none")) {
        *cap = 0;
        return true;
    }
    if (!gguf_str_eq(t->v.str, "hadamard"))
        return false;
    const gguf_kv *b = gguf_reader_find_kv(r, PN_KEY_ROTATION_BLOCK_SIZE);
    if (!b || b->type != GGUF_TYPE_UINT32 || b->v.u64 < 1 || b->v.u64 > 1u << 20)
        return false;
    *cap = (int)b->v.u64;
    return true;
}

void pn_reuse_drop(pn_reuse *ru, const pn_plan *plan, size_t i, const char *why)
{
    if (ru->from[i] < 0)
        return;
    ru->from[i] = -1;
    ru->why[i] = why;
    ru->n_copy--;
    ru->copy_bytes -= plan->tensors[i].bytes;
}

/* A list of up to NOTE_NAMES_MAX names, then "and N more". */
typedef struct name_list {
    char text[1024];
    size_t n;
} name_list;

static void name_list_add(name_list *l, const char *name)
{
    size_t at = strlen(l->text);
    if (l->n < NOTE_NAMES_MAX)
        snprintf(l->text + at, sizeof l->text - at, "%s%s", l->n ? ", " : "", name);
    l->n++;
}

static const char *name_list_end(name_list *l)
{
    if (l->n > NOTE_NAMES_MAX) {
        size_t at = strlen(l->text);
        snprintf(l->text + at, sizeof l->text - at, " and %zu more", l->n - NOTE_NAMES_MAX);
    }
    return l->text;
}

pn_status pn_reuse_match(pn_reuse *ru, const pn_plan *plan, const pn_source_id *sid,
                         const char *quantizer, const pn_quantize_opts *o, pn_error *err)
{
    const size_t n = plan->n_tensors;
    ru->n = n;
    ru->from = malloc((n ? n : 1) * sizeof *ru->from);
    ru->why = calloc(n ? n : 1, sizeof *ru->why);
    ru->crc32 = calloc(n ? n : 1, sizeof *ru->crc32);
    ru->source_crc32 = calloc(n ? n : 1, sizeof *ru->source_crc32);
    ru->offset = calloc(n ? n : 1, sizeof *ru->offset);
    ru->fd = calloc(n ? n : 1, sizeof *ru->fd);
    if (!ru->from || !ru->why || !ru->crc32 || !ru->source_crc32 || !ru->offset || !ru->fd)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        ru->from[i] = -1;
        ru->why[i] = "nothing is reused from PREV";
    }
    if (!sid->samples_known)
        return pn_error_set(err, PN_ERR_INTERNAL, "--reuse: the sampled rows are not read");

    /* what the whole file must share with this run */
    const gguf_kv *qk = gguf_reader_find_kv(ru->prev, PN_KEY_QUANTIZER);
    int prev_cap = -1;
    const int cap = plan->rotation == PN_ROTATION_HADAMARD ? plan->rotation_cap : 0;
    char a[32], b[32];
    if (!ru->have_rec) {
        snprintf(ru->none_why, sizeof ru->none_why, "%s", ru->rec_problem);
    } else if (ru->rec.header_hash != sid->header_hash) {
        snprintf(ru->none_why, sizeof ru->none_why,
                 "it was made from another source (the header hash of its source is "
                 "%016" PRIx64 ", of this one %016" PRIx64 ")",
                 ru->rec.header_hash, sid->header_hash);
    } else if (!gguf_str_eq(qk->v.str, quantizer)) {
        snprintf(ru->none_why, sizeof ru->none_why,
                 "it was made by another quantizer version ('%.*s'; this run is '%s')",
                 (int)(qk->v.str.len > 200 ? 200 : qk->v.str.len), qk->v.str.data, quantizer);
    } else if (!prev_rotation(ru->prev, &prev_cap) || prev_cap != cap) {
        pn_rotation_text(prev_cap, a, sizeof a);
        pn_rotation_text(cap, b, sizeof b);
        snprintf(ru->none_why, sizeof ru->none_why,
                 "it was made with another rotation (%s; this run uses %s)",
                 prev_cap < 0 ? "unreadable pn.rotation keys" : a, b);
    } else if (ru->rec.sample_rows != PN_SOURCE_SAMPLE_ROWS) {
        snprintf(ru->none_why, sizeof ru->none_why,
                 "its source identity samples %" PRId64 " rows per tensor, this run %d",
                 ru->rec.sample_rows, PN_SOURCE_SAMPLE_ROWS);
    }
    if (ru->none_why[0]) {
        pn_quantize_note(o, "--reuse %s: nothing reused: %s", ru->path, ru->none_why);
        return PN_OK;
    }

    /* tensor by tensor */
    size_t compared = 0;
    name_list differ = { { 0 }, 0 };
    for (size_t i = 0; i < n; i++) {
        const pn_plan_tensor *t = &plan->tensors[i];
        long j = gguf_reader_find_tensor(ru->prev, t->name);
        if (j < 0) {
            ru->why[i] = "PREV has no tensor of this name";
            continue;
        }
        const gguf_tensor_info *pt = gguf_reader_tensor(ru->prev, (size_t)j);
        if (pt->type != t->type) {
            ru->why[i] = "its type differs from PREV's";
            continue;
        }
        bool same_shape = pt->n_dims == t->n_dims;
        for (int d = 0; d < 4 && same_shape; d++)
            same_shape = pt->ne[d] == t->ne[d];
        if (!same_shape) {
            ru->why[i] = "its shape differs from PREV's";
            continue;
        }
        int prev_block = pn_type_is_pn(pt->type) && prev_cap > 0
                             ? pn_hadamard_block_size(pt->ne[0], prev_cap)
                             : 0;
        if ((prev_block > 1 ? prev_block : 0) != (t->rotation_block > 1 ? t->rotation_block : 0)) {
            ru->why[i] = "its rotation block differs from PREV's";
            continue;
        }
        if ((int)ru->rec.type[j] != t->src_type) {
            ru->why[i] = "its source type differs from PREV's";
            continue;
        }
        compared++;
        if (ru->rec.sample_crc[j] != sid->sample_crc[i]) {
            ru->why[i] = "its sampled rows differ from the source PREV was made from";
            name_list_add(&differ, t->name);
            continue;
        }
        ru->from[i] = j;
        ru->why[i] = NULL;
        ru->crc32[i] = ru->prev_crc[j];
        ru->source_crc32[i] = ru->rec.tensor_crc[j];
        ru->offset[i] = gguf_reader_tensor_file_offset(ru->prev, (size_t)j);
        ru->fd[i] = gguf_reader_fd(gguf_reader_split(ru->prev, pt->split));
        ru->n_copy++;
        ru->copy_bytes += t->bytes;
    }
    if (compared > 0 && differ.n == compared) {
        snprintf(ru->none_why, sizeof ru->none_why,
                 "it was made from another source: the sampled rows of every tensor differ "
                 "(the headers are the same)");
        pn_quantize_note(o, "--reuse %s: nothing reused: %s", ru->path, ru->none_why);
        for (size_t i = 0; i < n; i++)
            if (ru->why[i] && strncmp(ru->why[i], "its sampled", 11) == 0)
                ru->why[i] = "PREV was made from another source (every tensor's sampled rows "
                             "differ)";
    } else if (differ.n > 0) {
        pn_quantize_note(
            o,
            "--reuse %s: %zu tensor%s changed in the rows sampled for the source identity "
            "since PREV was made: quantizing %s again (%s)",
            ru->path, differ.n, differ.n == 1 ? "" : "s", differ.n == 1 ? "it" : "them",
            name_list_end(&differ));
    }
    return PN_OK;
}

void pn_reuse_drop_imatrix(pn_reuse *ru, const pn_plan *plan, const pn_imatrix *im,
                           uint64_t im_hash, const pn_quantize_opts *o)
{
    const gguf_kv *kv = gguf_reader_find_kv(ru->prev, PN_KEY_MIX_IMATRIX_HASH);
    const bool prev_has = kv != NULL;
    const bool same = prev_has && im && kv->type == GGUF_TYPE_UINT64 && kv->v.u64 == im_hash;
    if (same || (!prev_has && !im))
        return;
    size_t dropped = 0;
    for (size_t i = 0; i < ru->n; i++) {
        const pn_plan_tensor *t = &plan->tensors[i];
        if (ru->from[i] < 0 || (t->type != PN_TYPE_Q3_K && t->type != PN_TYPE_Q4_K))
            continue;
        if (!prev_has && !pn_imatrix_find(im, t->name))
            continue;
        pn_reuse_drop(ru, plan, i, "its bytes depend on the imatrix, and PREV's is another");
        dropped++;
    }
    if (dropped)
        pn_quantize_note(
            o,
            "--reuse %s: PREV was made with %s: %zu q3_K/q4_K tensor%s quantized "
            "again",
            ru->path,
            prev_has ? (im ? "another imatrix than this run's" : "an imatrix, this run has none")
                     : "no imatrix, this run has one",
            dropped, dropped == 1 ? "" : "s");
}

/* The CRC-32s of the tensors still copied, as r holds them (source: r is
 * the source, else PREV): c->got[m] of the plan's tensor c->which[m], c->k
 * of them; none when nothing is copied. An error of the reading is
 * prefixed with what (when not NULL). The caller frees the three arrays,
 * whatever this returns. */
typedef struct copied {
    size_t *idx, *which;
    uint32_t *got;
    size_t k;
} copied;

static pn_status copied_crcs(const pn_reuse *ru, const gguf_reader *r, bool source, int threads,
                             const pn_quantize_opts *o, const char *what, copied *c, pn_error *err)
{
    memset(c, 0, sizeof *c);
    if (ru->n_copy == 0)
        return PN_OK;
    c->idx = calloc(ru->n_copy, sizeof *c->idx);
    c->which = calloc(ru->n_copy, sizeof *c->which);
    c->got = calloc(ru->n_copy, sizeof *c->got);
    if (!c->idx || !c->which || !c->got)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < ru->n; i++)
        if (ru->from[i] >= 0) {
            c->idx[c->k] = source ? i : (size_t)ru->from[i];
            c->which[c->k++] = i;
        }
    pn_status st = pn_tensor_crcs(r, c->idx, c->k, 0, threads, o->cancel, c->got, err);
    if (st != PN_OK && what)
        pn_error_prefix(err, "%s", what);
    return st;
}

pn_status pn_reuse_verify(pn_reuse *ru, const pn_plan *plan, const gguf_reader *src,
                          pn_source_id *sid, int threads, const pn_quantize_opts *o, pn_error *err)
{
    copied c;
    pn_status st = copied_crcs(ru, src, true, threads, o, NULL, &c, err);
    name_list differ = { { 0 }, 0 };
    for (size_t m = 0; m < c.k && st == PN_OK; m++) {
        size_t i = c.which[m];
        sid->tensor_crc[i] = c.got[m];
        if (c.got[m] != ru->source_crc32[i]) {
            pn_reuse_drop(ru, plan, i,
                          "its source bytes differ from the source PREV was made from "
                          "(--reuse-verify)");
            name_list_add(&differ, plan->tensors[i].name);
        }
    }
    if (st == PN_OK && differ.n > 0)
        pn_quantize_note(
            o,
            "--reuse-verify: %zu tensor%s of %s differ%s from the source PREV was made from "
            "(whole-tensor CRC-32): quantizing %s again (%s)",
            differ.n, differ.n == 1 ? "" : "s", o->src_path, differ.n == 1 ? "s" : "",
            differ.n == 1 ? "it" : "them", name_list_end(&differ));
    PN_FREE_ALL(c.idx, c.which, c.got);
    return st;
}

pn_status pn_reuse_check_prev(pn_reuse *ru, const pn_plan *plan, int threads,
                              const pn_quantize_opts *o, pn_error *err)
{
    copied c;
    pn_status st =
        copied_crcs(ru, ru->prev, false, threads, o, "--reuse: checking PREV's bytes", &c, err);
    size_t bad = 0;
    for (size_t m = 0; m < c.k && st == PN_OK; m++) {
        size_t i = c.which[m];
        if (c.got[m] == ru->crc32[i])
            continue;
        if (bad++ < 2 * NOTE_NAMES_MAX)
            pn_quantize_note(
                o,
                "--reuse %s: tensor %s: its bytes do not match PREV's pn.tensor_crc32 (CRC-32 "
                "%08" PRIx32 ", recorded %08" PRIx32 "): quantizing it again",
                ru->path, plan->tensors[i].name, c.got[m], ru->crc32[i]);
        pn_reuse_drop(ru, plan, i, "its bytes in PREV do not match PREV's pn.tensor_crc32");
    }
    if (st == PN_OK && bad > 2 * NOTE_NAMES_MAX)
        pn_quantize_note(
            o,
            "--reuse %s: %zu more tensors do not match PREV's pn.tensor_crc32: quantizing "
            "them again",
            ru->path, bad - 2 * NOTE_NAMES_MAX);
    PN_FREE_ALL(c.idx, c.which, c.got);
    return st;
}
