/* check_data.c - pn-check: one pass over every tensor's bytes.
 *
 * Each tensor's elements are cut into work items (about chunk_bytes of file
 * data each, on boundaries of both the type's block and the rotation block),
 * and each item, in one walk over its bytes, updates the CRC-32, validates the
 * PN blocks, looks for values that are not finite (the fp16 scales of q8_0,
 * q4_K and q3_K blocks, the weights of f32, f16 and bf16 tensors) and, with a
 * source, decodes, un-rotates and compares with the source. Tensors whose
 * bytes overlap an earlier tensor's, or whose shape overflows, are not read.
 * An item is read one segment (quant/segments.h) at a time, so memory is
 * a few segments per thread whatever the row length. Items run in parallel;
 * their results are combined in file order (pn_crc32_combine, sums in item
 * order), so the report does not depend on the thread count.
 *
 * The expected error of a PN tensor comes from re-quantizing a fixed sample
 * of source rows (rows i*rows/S, i = 0..S-1), rotated like the file says,
 * with the reference quantizer's exact fast path. A tensor is flagged when
 * its error E exceeds factor * E_ref + floor: a wrong packing, a missing or
 * different rotation or another type's bytes give E near or above 1, while a
 * faithful encoding gives E within a few percent of E_ref (the quantizer is
 * scale invariant, so the relative error of a row depends on the shape of
 * its distribution, not its size, and a sample of rows estimates it well).
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/crc32.h"
#include "common/threads.h"
#include "gguf/pn_keys.h"
#include "hadamard/hadamard.h"
#include "check/check_internal.h"
#include "quant/fp16.h"
#include "quant/quant_row.h"
#include "quant/pn.h"
#include "quant/scales.h"
#include "quant/segments.h"
#include "quant/types.h"
#include "quant/widen.h"

typedef struct tplan {
    bool in_file;         /* the tensor's bytes are all in the file */
    const gguf_reader *r; /* the file, and this tensor's index in it */
    size_t index;
    int64_t n; /* elements */
    int64_t K, rows;
    int64_t bw, bb;      /* block weights and bytes */
    pn_segments cut;     /* the segments read and decoded a step at a time */
    int64_t item_len;    /* elements per work item, a multiple of unit */
    const pn_params *pn; /* pn3t/pn4t, else NULL */
    int scan;            /* what else is checked for finiteness (SCAN_*) */
    bool compare;
    int B;                  /* rotation block undone, 0 none */
    const gguf_reader *src; /* the source, and the tensor's index there */
    size_t src_index;
    int src_type;
    int64_t src_es;
    size_t first_item, n_items;
    size_t first_sample, n_samples;
} tplan;

enum {
    SCAN_NONE,
    SCAN_SCALES, /* q8_0, q4_K, q3_K: the fp16 scale fields */
    SCAN_VALUES, /* f32, f16, bf16: every weight */
};

typedef struct loc {
    int64_t block; /* block index in the tensor (a weight for SCAN_VALUES) */
    uint32_t bits; /* the value found: a scale's fp16, a weight's bits */
    int field;     /* the scale field (pn_scale_fields), 0 otherwise */
} loc;

/* A read that failed: the file (or the source) changed or shrank during the
 * check. Kept per work item and reported for the first item in file order. */
typedef struct read_fail {
    pn_status st; /* PN_OK: none */
    bool in_source;
    uint64_t at; /* byte offset within the tensor */
    uint64_t n;
} read_fail;

typedef struct item {
    size_t t;
    int64_t e0, e1; /* element range */
    uint32_t crc;
    int64_t n_nan, n_inf, n_res;
    int n_loc_nf, n_loc_res;
    double num, den;
    pn_status st;
    read_fail rf;
} item;

typedef struct sample {
    size_t t;
    int64_t row;
    double num, den;
    pn_status st;
    int64_t bad_col;
    read_fail rf;
} sample;

/* Reads n bytes of a tensor at byte `at` into dst; on failure records it in
 * *rf (the first one) and returns false. */
static bool read_bytes(const gguf_reader *r, size_t index, bool in_source, uint64_t at, void *dst,
                       size_t n, read_fail *rf)
{
    pn_status st = gguf_reader_read_tensor(r, index, at, dst, n, NULL);
    if (st == PN_OK)
        return true;
    if (rf->st == PN_OK)
        *rf = (read_fail){ st, in_source, at, n };
    return false;
}

static void record(loc *list, int *n, int max, int64_t block, uint32_t bits, int field)
{
    if (*n < max) {
        list[*n].block = block;
        list[*n].bits = bits;
        list[*n].field = field;
        (*n)++;
    }
}

/* Validates nblk blocks starting at tensor block gb0: the fast row check
 * finds the next bad block, which is then classified and counted. */
static void validate_blocks(const tplan *tp, const uint8_t *p, int64_t gb0, int64_t nblk, item *it,
                            loc *nf, loc *res, int maxloc)
{
    int64_t start = 0;
    while (start < nblk) {
        int64_t bad = 0;
        if (pn_validate_row(tp->pn->type, p + start * PN_BLOCK_BYTES, (nblk - start) * tp->bw,
                            &bad) == PN_OK)
            break;
        int64_t k = start + bad;
        const uint8_t *b = p + k * PN_BLOCK_BYTES;
        uint16_t d = pn_load_u16le(b);
        if ((d & 0x7c00u) == 0x7c00u) {
            if (d & 0x03ffu)
                it->n_nan++;
            else
                it->n_inf++;
            record(nf, &it->n_loc_nf, maxloc, gb0 + k, d, 0);
        }
        if (tp->pn->type == PN_TYPE_PN3T) {
            bool set = false;
            for (int w = 0; w < 8; w++)
                set |= (pn_load_u32le(b + 2 + 4 * w) & 0x80008000u) != 0;
            if (set) {
                it->n_res++;
                record(res, &it->n_loc_res, maxloc, gb0 + k, d, 0);
            }
        }
        start = k + 1;
    }
}

/* The scales of nblk q8_0/q4_K/q3_K blocks starting at tensor block gb0. */
static void scan_scales(int type, const uint8_t *p, int64_t bb, int64_t gb0, int64_t nblk, item *it,
                        loc *nf, int maxloc)
{
    int64_t start = 0;
    while (start < nblk) {
        int field = 0;
        uint16_t bits = 0;
        int64_t bad = pn_find_nonfinite_scale(type, p + start * bb, nblk - start, &field, &bits);
        if (bad < 0)
            break;
        if (pn_nonfinite_is_nan(PN_TYPE_F16, bits))
            it->n_nan++;
        else
            it->n_inf++;
        record(nf, &it->n_loc_nf, maxloc, gb0 + start + bad, bits, field);
        start += bad + 1;
    }
}

/* The weights of m f32/f16/bf16 elements starting at tensor element e0. */
static void scan_values(int type, const uint8_t *p, int64_t es, int64_t e0, int64_t m, item *it,
                        loc *nf, int maxloc)
{
    int64_t start = 0;
    while (start < m) {
        uint32_t bits = 0;
        int64_t bad = pn_find_nonfinite_value(type, p + start * es, m - start, &bits);
        if (bad < 0)
            break;
        if (pn_nonfinite_is_nan(type, bits))
            it->n_nan++;
        else
            it->n_inf++;
        record(nf, &it->n_loc_nf, maxloc, e0 + start + bad, bits, 0);
        start += bad + 1;
    }
}

/* Asks the kernel to read an item's bytes ahead, in one large request:
 * without it, threads reading at several places of the file defeat the
 * sequential readahead a single reader gets. Advice only. */
static void prefetch(const tplan *tp, int64_t e0, int64_t e1)
{
    /* in the file of the tensor's split */
    gguf_reader_advise_tensor(tp->r, tp->index, (uint64_t)(e0 / tp->bw * tp->bb),
                              (uint64_t)((e1 - e0) / tp->bw * tp->bb), true);
}

/* raw holds a segment's file bytes, sraw its source bytes. */
static void run_item(const tplan *tp, int type, item *it, loc *nf, loc *res, int maxloc, float *a,
                     float *b, uint8_t *raw, uint8_t *sraw)
{
    uint32_t crc = 0; /* pn_crc32 starts from 0 */
    prefetch(tp, it->e0, it->e1);
    const int64_t n_seg = pn_segments_count(&tp->cut, it->e0, it->e1);
    for (int64_t k = 0; k < n_seg; k++) {
        int64_t e, m;
        pn_segment_at(&tp->cut, it->e0, it->e1, k, &e, &m);
        const uint8_t *p = raw;
        if (!read_bytes(tp->r, tp->index, false, (uint64_t)(e / tp->bw * tp->bb), raw,
                        (size_t)(m / tp->bw * tp->bb), &it->rf))
            return;
        crc = pn_crc32(crc, p, (size_t)(m / tp->bw * tp->bb));
        if (tp->pn)
            validate_blocks(tp, p, e / tp->bw, m / tp->bw, it, nf, res, maxloc);
        else if (tp->scan == SCAN_SCALES)
            scan_scales(type, p, tp->bb, e / tp->bw, m / tp->bw, it, nf, maxloc);
        else if (tp->scan == SCAN_VALUES)
            scan_values(type, p, tp->bb, e, m, it, nf, maxloc);
        if (!tp->compare || it->st)
            continue;
        pn_status st = pn_dequantize_row_type(type, p, a, m);
        if (!st && !read_bytes(tp->src, tp->src_index, true, (uint64_t)(e * tp->src_es), sraw,
                               (size_t)(m * tp->src_es), &it->rf))
            return;
        if (!st)
            st = pn_widen_row(tp->src_type, sraw, b, m);
        if (st) {
            it->st = st;
            continue;
        }
        if (tp->B > 1)
            pn_hadamard_rotate_row(a, m, tp->B);
        double num = 0, den = 0;
        for (int64_t i = 0; i < m; i++) {
            double w = b[i], dq = a[i];
            num += (w - dq) * (w - dq);
            den += w * w;
        }
        it->num += num;
        it->den += den;
    }
    it->crc = (uint32_t)crc;
}

/* The reference quantizer's error on one source row, in the rotated domain
 * (the rotation is orthonormal, so the relative error is the same). */
static void run_sample(const tplan *tp, int type, sample *s, float *a, float *b, uint8_t *q,
                       uint8_t *sraw)
{
    const int64_t e_row = s->row * tp->K, e_end = (s->row + 1) * tp->K;
    const int64_t n_seg = pn_segments_count(&tp->cut, e_row, e_end);
    for (int64_t k = 0; k < n_seg; k++) {
        int64_t e, m;
        pn_segment_at(&tp->cut, e_row, e_end, k, &e, &m);
        if (!read_bytes(tp->src, tp->src_index, true, (uint64_t)(e * tp->src_es), sraw,
                        (size_t)(m * tp->src_es), &s->rf))
            return;
        pn_status st = pn_widen_row(tp->src_type, sraw, a, m);
        int64_t bad = pn_find_nonfinite(a, m);
        if (!st && bad >= 0) {
            st = PN_ERR_NONFINITE;
            s->bad_col = e - s->row * tp->K + bad;
        }
        if (!st && tp->B > 1)
            pn_hadamard_rotate_row(a, m, tp->B);
        int64_t bad_col = -1;
        if (!st)
            st = pn_quantize_row(type, a, m, q, &bad_col);
        if (st) {
            s->st = st;
            if (s->bad_col < 0)
                s->bad_col = bad_col >= 0 ? e - s->row * tp->K + bad_col : -1;
            return;
        }
        pn_dequantize_row(type, q, b, m);
        for (int64_t i = 0; i < m; i++) {
            double w = a[i], dq = b[i];
            s->num += (w - dq) * (w - dq);
            s->den += w * w;
        }
    }
}

static void set_note(pn_check_ctx *c, pn_check_tensor *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_note(pn_check_ctx *c, pn_check_tensor *t, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(t->note);
    t->note = strdup(buf);
    if (!t->note)
        c->nomem = true;
}

/* Decides, per tensor, what the pass does; reports name and shape mismatches
 * with the source. */
static void plan_tensor(pn_check_ctx *c, size_t i, tplan *tp)
{
    pn_check_tensor *t = &c->rep->tensors[i];
    const pn_type_traits *tt = pn_type_traits_get(t->type);
    memset(tp, 0, sizeof *tp);
    tp->bw = tt->block_weights;
    tp->bb = tt->block_bytes;
    tp->K = t->ne[0];
    tp->pn = pn_params_get(t->type);
    /* the shape was checked not to overflow unless too_many_weights */
    tp->in_file = t->in_file && !t->overlaps && !t->too_many_weights;
    if (!t->too_many_weights) {
        tp->rows = t->ne[1] * t->ne[2] * t->ne[3];
        tp->n = tp->K * tp->rows;
    }
    tp->r = c->r;
    tp->index = i;
    const pn_scale_field *fields;
    if (!tp->pn && pn_scale_fields(t->type, &fields) > 0)
        tp->scan = SCAN_SCALES;
    else if (pn_type_is_float(t->type))
        tp->scan = SCAN_VALUES;
    if (tp->pn && c->rotation_known && c->rotation_hadamard)
        tp->B = pn_hadamard_block_size(tp->K, c->rotation_cap);
    if (tp->pn)
        t->rotation_block = tp->B;

    if (!c->src)
        return;
    long si = gguf_reader_find_tensor(c->src, t->name);
    if (si < 0) {
        pn_check_add(c, PN_SEV_ERROR, "SRC-NAME", t->name, NULL, (int64_t)t->file_offset,
                     "tensor '%s' is not in the source %s", t->name, c->opt.source_path);
        set_note(c, t, "not in the source");
        return;
    }
    const gguf_tensor_info *s = gguf_reader_tensor(c->src, (size_t)si);
    if (memcmp(s->ne, t->ne, sizeof t->ne) != 0) {
        pn_check_add(
            c, PN_SEV_ERROR, "SRC-SHAPE", t->name, NULL, (int64_t)t->file_offset,
            "shape %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64
            " differs from the source's %" PRId64 " x %" PRId64 " x %" PRId64 " x %" PRId64,
            t->ne[0], t->ne[1], t->ne[2], t->ne[3], s->ne[0], s->ne[1], s->ne[2], s->ne[3]);
        set_note(c, t, "shape differs from the source");
        return;
    }
    if (!t->in_file) {
        set_note(c, t, "its data is not inside the file");
        return;
    }
    if (t->overlaps || t->too_many_weights) {
        set_note(c, t,
                 t->overlaps ? "its bytes overlap another tensor's"
                             : "its shape holds more than 2^63 - 1 weights");
        return;
    }
    if (tp->pn && !c->rotation_known) {
        set_note(c, t, "the pn.rotation keys are unusable");
        return;
    }
    if (!tp->pn && !pn_type_can(t->type, PN_CAN_STOCK)) {
        set_note(c, t, "type %s is not decoded by this build", pn_type_name(t->type));
        return;
    }
    tp->compare = true;
    tp->src = c->src;
    tp->src_index = (size_t)si;
    tp->src_type = s->type;
    tp->src_es = pn_type_traits_get(s->type)->block_bytes;
}

static void report_source_only_tensors(pn_check_ctx *c)
{
    for (size_t i = 0; c->src && i < gguf_reader_n_tensors(c->src); i++) {
        const gguf_tensor_info *s = gguf_reader_tensor(c->src, i);
        if (gguf_reader_find_tensor(c->r, s->name) < 0)
            pn_check_add(c, PN_SEV_ERROR, "SRC-NAME", s->name, NULL, -1,
                         "source tensor '%s' is not in the file", s->name);
    }
}

/* How a location is shown: a PN block (with or without its scale), a q8_0,
 * q4_K or q3_K block with the scale field found, a weight. */
enum { LOC_BLOCK, LOC_SCALE, LOC_WEIGHT };

static void format_locations(char *buf, size_t size, const loc *l, int n, const tplan *tp,
                             const pn_check_tensor *t, int how)
{
    size_t len = 0;
    buf[0] = '\0';
    const int64_t per_row = tp->K / tp->bw;
    const pn_scale_field *fields = NULL;
    pn_scale_fields(t->type, &fields);
    for (int k = 0; k < n && len < size; k++) {
        int64_t row = l[k].block / per_row, blk = l[k].block % per_row;
        uint64_t byte = t->file_offset + (uint64_t)(l[k].block * tp->bb);
        const char *sep = k ? "; " : "";
        int w;
        if (how == LOC_WEIGHT)
            w = snprintf(buf + len, size - len,
                         "%srow %" PRId64 " column %" PRId64 " (byte %" PRIu64 ", 0x%0*x)", sep,
                         row, blk, byte, (int)(2 * tp->bb), (unsigned)l[k].bits);
        else if (how == LOC_SCALE && fields)
            w = snprintf(buf + len, size - len,
                         "%srow %" PRId64 " block %" PRId64 " (byte %" PRIu64 ", %s 0x%04x)", sep,
                         row, blk, byte, fields[l[k].field].name, (unsigned)l[k].bits);
        else
            w = snprintf(buf + len, size - len,
                         "%srow %" PRId64 " block %" PRId64 " (byte %" PRIu64 ")", sep, row, blk,
                         byte);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

static void set_location(pn_finding *f, const loc *first, const tplan *tp, const pn_check_tensor *t,
                         int64_t count)
{
    if (!f)
        return;
    const int64_t per_row = tp->K / tp->bw;
    f->row = first->block / per_row;
    f->block = first->block % per_row;
    f->offset = (int64_t)(t->file_offset + (uint64_t)(first->block * tp->bb));
    f->count = count;
}

/* Combines a tensor's items and samples into its figures and findings. */
static void conclude_tensor(pn_check_ctx *c, size_t i, const tplan *tp, const item *items,
                            const loc *locs, const sample *samples)
{
    pn_check_tensor *t = &c->rep->tensors[i];
    const int maxloc = c->opt.max_locations;
    if (!tp->in_file)
        return;

    uint32_t crc = 0; /* the items' CRCs joined in file order */
    int64_t n_nan = 0, n_inf = 0, n_res = 0;
    loc *nf = malloc((size_t)maxloc * sizeof *nf), *res = malloc((size_t)maxloc * sizeof *res);
    if (!nf || !res) {
        free(nf);
        free(res);
        c->nomem = true;
        return;
    }
    int n_nf = 0, n_rs = 0;
    double num = 0, den = 0;
    pn_status st = PN_OK;
    for (size_t k = tp->first_item; k < tp->first_item + tp->n_items; k++) {
        const item *it = &items[k];
        crc = pn_crc32_combine(crc, it->crc, (uint64_t)((it->e1 - it->e0) / tp->bw * tp->bb));
        n_nan += it->n_nan;
        n_inf += it->n_inf;
        n_res += it->n_res;
        const loc *il = &locs[k * 2 * (size_t)maxloc];
        for (int q = 0; q < it->n_loc_nf; q++)
            record(nf, &n_nf, maxloc, il[q].block, il[q].bits, il[q].field);
        for (int q = 0; q < it->n_loc_res; q++)
            record(res, &n_rs, maxloc, il[maxloc + q].block, il[maxloc + q].bits,
                   il[maxloc + q].field);
        num += it->num;
        den += it->den;
        if (!st)
            st = it->st;
    }
    t->crc_computed = true;
    t->crc32 = (uint32_t)crc;
    const int64_t nblocks = tp->n / tp->bw;
    char where[640];

    if (t->crc_recorded && t->crc32 != t->crc32_recorded)
        pn_check_add(
            c, PN_SEV_ERROR, "PN-CRC-MISMATCH", t->name, PN_KEY_TENSOR_CRC, (int64_t)t->file_offset,
            "CRC-32 of its %" PRIu64 " data bytes is 0x%08x, pn.tensor_crc32[%zu] "
            "records 0x%08x",
            t->bytes, t->crc32, gguf_reader_tensor_index_in_split(c->r, i), t->crc32_recorded);
    if (n_nan + n_inf > 0 && tp->pn) {
        t->bad_blocks += n_nan + n_inf;
        format_locations(where, sizeof where, nf, n_nf, tp, t, LOC_SCALE);
        pn_finding *f =
            pn_check_add(c, PN_SEV_ERROR, "PN-NONFINITE-SCALE", t->name, NULL, -1,
                         "%" PRId64 " of %" PRId64 " %s blocks have a non-finite scale d (%" PRId64
                         " NaN, %" PRId64 " infinite); first: %s",
                         n_nan + n_inf, nblocks, pn_type_name(t->type), n_nan, n_inf, where);
        set_location(f, &nf[0], tp, t, n_nan + n_inf);
    } else if (n_nan + n_inf > 0 && tp->scan == SCAN_SCALES) {
        const pn_scale_field *fields;
        const int nfields = pn_scale_fields(t->type, &fields);
        format_locations(where, sizeof where, nf, n_nf, tp, t, LOC_SCALE);
        pn_finding *f = pn_check_add(
            c, PN_SEV_ERROR, "TENSOR-NONFINITE-SCALE", t->name, NULL, -1,
            "%" PRId64 " of %" PRId64 " %s blocks have a non-finite scale %s%s%s (%" PRId64
            " NaN, %" PRId64 " infinite); first: %s",
            n_nan + n_inf, nblocks, pn_type_name(t->type), fields[0].name,
            nfields > 1 ? " or " : "", nfields > 1 ? fields[1].name : "", n_nan, n_inf, where);
        set_location(f, &nf[0], tp, t, n_nan + n_inf);
    } else if (n_nan + n_inf > 0 && tp->scan == SCAN_VALUES) {
        format_locations(where, sizeof where, nf, n_nf, tp, t, LOC_WEIGHT);
        pn_finding *f =
            pn_check_add(c, PN_SEV_ERROR, "TENSOR-NONFINITE-WEIGHT", t->name, NULL, -1,
                         "%" PRId64 " of %" PRId64 " %s weights are not finite (%" PRId64
                         " NaN, %" PRId64 " infinite); first: %s",
                         n_nan + n_inf, tp->n, pn_type_name(t->type), n_nan, n_inf, where);
        set_location(f, &nf[0], tp, t, n_nan + n_inf);
    }
    if (n_res > 0) {
        t->bad_blocks += n_res;
        format_locations(where, sizeof where, res, n_rs, tp, t, LOC_BLOCK);
        pn_finding *f = pn_check_add(c, PN_SEV_ERROR, "PN-RESERVED-BITS", t->name, NULL, -1,
                                     "%" PRId64 " of %" PRId64
                                     " pn3t blocks have reserved bit 15 or 31 of a word set; "
                                     "first: %s",
                                     n_res, nblocks, where);
        set_location(f, &res[0], tp, t, n_res);
    }
    free(nf);
    free(res);

    if (!tp->compare)
        return;
    if (st) {
        set_note(c, t, "decoding failed: %s", pn_strerror(st));
        return;
    }
    t->compared = true;
    t->rel_error = den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
    if (tp->pn) {
        double snum = 0, sden = 0;
        for (size_t k = tp->first_sample; k < tp->first_sample + tp->n_samples; k++) {
            const sample *s = &samples[k];
            if (s->st) {
                t->compared = false;
                t->rel_error = NAN;
                set_note(c, t,
                         "re-quantizing source row %" PRId64 " failed at column %" PRId64 ": %s",
                         s->row, s->bad_col, pn_strerror(s->st));
                return;
            }
            snum += s->num;
            sden += s->den;
        }
        t->expected_error = sden > 0 ? snum / sden : 0.0;
        t->limit = c->opt.source_factor * t->expected_error + c->opt.source_floor;
        if (t->rel_error > t->limit) {
            char rot[64] = "no rotation";
            if (tp->B > 1)
                snprintf(rot, sizeof rot, "rotation block %d", tp->B);
            pn_check_add(c, PN_SEV_ERROR, "SRC-ERROR-HIGH", t->name, NULL, (int64_t)t->file_offset,
                         "relative error %.4g against the source (decoded as %s, %s) is above "
                         "the limit %.4g = %g x E_ref + %g, E_ref = %.4g being the reference "
                         "quantizer's error on %zu sample rows of the source: wrong code "
                         "packing, a missing or different rotation, or another type's data",
                         t->rel_error, pn_type_name(t->type), rot, t->limit, c->opt.source_factor,
                         c->opt.source_floor, t->expected_error, tp->n_samples);
        }
    } else {
        t->limit = c->opt.stock_limit;
        if (t->rel_error > t->limit)
            pn_check_add(c, PN_SEV_ERROR, "SRC-ERROR-HIGH", t->name, NULL, (int64_t)t->file_offset,
                         "relative error %.4g against the source (decoded as %s) is above %g",
                         t->rel_error, pn_type_name(t->type), t->limit);
    }
}

/* One thread's buffers of the data pass: a segment decoded (a), its source
 * (b), its blocks re-quantized (q); its bytes: at most 8 per weight (f64,
 * i64) in the file (raw), 4 (f32) in the source (sraw). */
typedef struct scratch {
    float *a, *b;
    uint8_t *q, *raw, *sraw;
} scratch;

static bool scratch_alloc(scratch *s, int64_t seg_max)
{
    s->a = malloc((size_t)seg_max * sizeof *s->a);
    s->b = malloc((size_t)seg_max * sizeof *s->b);
    s->q = malloc((size_t)(seg_max / 64 + 1) * PN_BLOCK_BYTES);
    s->raw = malloc((size_t)seg_max * 8);
    s->sraw = malloc((size_t)seg_max * 4);
    return s->a && s->b && s->q && s->raw && s->sraw;
}

static void scratch_free(scratch *s)
{
    free(s->a);
    free(s->b);
    free(s->q);
    free(s->raw);
    free(s->sraw);
}

/* What every unit of the data pass shares. */
typedef struct data_job {
    pn_check_ctx *c;
    const tplan *plans;
    item *items;
    loc *locs;
    sample *samples;
    size_t n_samples;
    int maxloc;
    scratch *sc; /* one a thread */
    uint64_t *bytes, total;
} data_job;

/* Unit k of the data pass on thread t: sample k, then item k - n_samples;
 * its read failure is its status. */
static pn_status data_unit(void *ctx, size_t k, int t, void *fail)
{
    (void)fail;
    const data_job *d = ctx;
    const pn_check_report *rep = d->c->rep;
    const scratch *s = &d->sc[t];
    if (k < d->n_samples) {
        sample *sm = &d->samples[k];
        run_sample(&d->plans[sm->t], rep->tensors[sm->t].type, sm, s->a, s->b, s->q, s->sraw);
        return sm->rf.st;
    }
    k -= d->n_samples;
    item *it = &d->items[k];
    const tplan *tp = &d->plans[it->t];
    const size_t maxloc = (size_t)d->maxloc;
    run_item(tp, rep->tensors[it->t].type, it, &d->locs[k * 2 * maxloc],
             &d->locs[(k * 2 + 1) * maxloc], d->maxloc, s->a, s->b, s->raw, s->sraw);
#pragma omp critical(pn_check_progress)
    {
        *d->bytes += (uint64_t)((it->e1 - it->e0) / tp->bw * tp->bb);
        if (d->c->opt.progress)
            d->c->opt.progress(d->c->opt.progress_ctx, *d->bytes, d->total);
    }
    return it->rf.st;
}

pn_status pn_check_data(pn_check_ctx *c, pn_error *err)
{
    pn_check_report *rep = c->rep;
    const size_t nt = rep->n_tensors;
    const int maxloc = c->opt.max_locations;
    tplan *plans = calloc(nt ? nt : 1, sizeof *plans);
    if (!plans)
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", rep->path);

    size_t n_items = 0, n_samples = 0;
    int64_t seg_max = 1;
    for (size_t i = 0; i < nt; i++) {
        tplan *tp = &plans[i];
        plan_tensor(c, i, tp);
        tp->cut = pn_segments_of(tp->bw, tp->B);
        if (tp->cut.seg > seg_max)
            seg_max = tp->cut.seg;
        if (!tp->in_file)
            continue;
        const int64_t unit_bytes = tp->cut.unit / tp->bw * tp->bb;
        int64_t per = (int64_t)(c->opt.chunk_bytes / (uint64_t)unit_bytes);
        tp->item_len = tp->cut.unit * (per > 1 ? per : 1);
        tp->first_item = n_items;
        tp->n_items = (size_t)((tp->n + tp->item_len - 1) / tp->item_len);
        n_items += tp->n_items;
        if (tp->compare && tp->pn) {
            tp->first_sample = n_samples;
            tp->n_samples = (size_t)(tp->rows < c->opt.sample_rows ? tp->rows : c->opt.sample_rows);
            n_samples += tp->n_samples;
        }
    }
    report_source_only_tensors(c);

    item *items = calloc(n_items ? n_items : 1, sizeof *items);
    loc *locs = calloc((n_items ? n_items : 1) * 2 * (size_t)maxloc, sizeof *locs);
    sample *samples = calloc(n_samples ? n_samples : 1, sizeof *samples);
    if (!items || !locs || !samples) {
        free(items);
        free(locs);
        free(samples);
        free(plans);
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory for %zu work items", rep->path,
                            n_items);
    }
    for (size_t i = 0; i < nt; i++) {
        const tplan *tp = &plans[i];
        for (size_t k = 0; k < tp->n_items; k++) {
            item *it = &items[tp->first_item + k];
            it->t = i;
            it->e0 = (int64_t)k * tp->item_len;
            it->e1 = it->e0 + tp->item_len < tp->n ? it->e0 + tp->item_len : tp->n;
        }
        for (size_t k = 0; k < tp->n_samples; k++) {
            sample *s = &samples[tp->first_sample + k];
            s->t = i;
            s->row = (int64_t)k * tp->rows / (int64_t)tp->n_samples;
            s->bad_col = -1;
        }
    }

    const int nthreads = pn_threads_resolve(c->opt.threads);
    int alloc_failed = 0;
    uint64_t bytes = 0, total = 0;
    for (size_t k = 0; k < n_items; k++)
        total +=
            (uint64_t)((items[k].e1 - items[k].e0) / plans[items[k].t].bw * plans[items[k].t].bb);
    if (c->opt.progress)
        c->opt.progress(c->opt.progress_ctx, 0, total);
    scratch *sc = calloc((size_t)nthreads, sizeof *sc);
    alloc_failed = !sc;
    for (int t = 0; t < nthreads && !alloc_failed; t++)
        alloc_failed = !scratch_alloc(&sc[t], seg_max);
    size_t bad = SIZE_MAX;
    if (!alloc_failed) {
        data_job job = { c, plans, items, locs, samples, n_samples, maxloc, sc, &bytes, total };
        /* the samples first, then the items: the order a read failure is looked for */
        pn_each_first_failure(n_samples + n_items, nthreads, PN_EACH_RUN_ALL, data_unit, &job, 0,
                              NULL, &bad);
    }
    for (int t = 0; sc && t < nthreads; t++)
        scratch_free(&sc[t]);
    free(sc);
    pn_status st = PN_OK;
    const read_fail *rf = NULL;
    const char *rf_tensor = NULL;
    if (bad < n_samples) {
        rf = &samples[bad].rf;
        rf_tensor = rep->tensors[samples[bad].t].name;
    } else if (bad != SIZE_MAX) {
        rf = &items[bad - n_samples].rf;
        rf_tensor = rep->tensors[items[bad - n_samples].t].name;
    }
    if (alloc_failed) {
        st = pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory for the data pass", rep->path);
    } else if (rf) {
        /* read again to get the reader's own message (it names the file) */
        const gguf_reader *r = rf->in_source ? c->src : c->r;
        long ti = gguf_reader_find_tensor(r, rf_tensor);
        uint8_t one;
        st = ti >= 0 ? gguf_reader_read_tensor(r, (size_t)ti, rf->at + rf->n - 1, &one, 1, err)
                     : PN_ERR_INTERNAL;
        if (st == PN_OK)
            st = pn_error_set(err, rf->st,
                              "%s: tensor %s: reading %llu bytes at byte %llu of its data failed "
                              "(%s): the file changed or shrank during the check",
                              gguf_reader_name(r), rf_tensor, (unsigned long long)rf->n,
                              (unsigned long long)rf->at, pn_strerror(rf->st));
    } else {
        rep->data_bytes = bytes;
        for (size_t i = 0; i < nt; i++)
            conclude_tensor(c, i, &plans[i], items, locs, samples);
    }
    free(items);
    free(locs);
    free(samples);
    free(plans);
    return st;
}
