/* check_imatrix.c - pn-check --imatrix FILE: whether the file was made with
 * that importance matrix (docs/format.md#the-importance-matrix), and with
 * --source whether its promotions are the ones that imatrix chooses.
 *
 * Findings: IMATRIX-NONE (error) the file records no imatrix
 * (pn.mix.imatrix.entries_fnv1a64 absent); IMATRIX-OTHER (error) it records
 * another one (the hash of FILE's entries naming its tensors differs);
 * IMATRIX-KEYS (warning) llama-quantize's quantize.imatrix.* keys are
 * missing or do not describe FILE (base name, entry count). With --source:
 * the candidates (pn3t tensors pn4t can hold, and the promoted pn4t ones)
 * are measured again as pn-quantize measures them (256 evenly spaced rows,
 * mix/measurement.h's weighted sums, the file's rotation), and the promoted
 * set must be the first N in gain order: IMATRIX-PROMOTION (error) names a
 * promoted tensor that should not be, and the one that should. A file made
 * with --measure-rows other than 256 measures differently and may be
 * flagged. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_internal.h"
#include "hadamard/hadamard.h"
#include "mix/imatrix.h"
#include "mix/measurement.h"
#include "quant/types.h"
#include "quant/widen.h"

typedef struct cand {
    size_t index;
    bool promoted;
    double gain;
} cand;

/* E3 - E4 of tensor ti as pn-quantize measures it. */
static pn_status measure_gain(pn_check_ctx *c, size_t ti, const float *v, double *gain,
                              pn_error *err)
{
    const pn_check_tensor *t = &c->rep->tensors[ti];
    long si = gguf_reader_find_tensor(c->src, t->name);
    if (si < 0)
        return pn_error_set(err, PN_ERR_MISMATCH, "source: no tensor %s", t->name);
    const gguf_tensor_info *st = gguf_reader_tensor(c->src, (size_t)si);
    const int64_t K = st->ne[0], rows = st->ne[1] * st->ne[2] * st->ne[3];
    const int B = c->rotation_hadamard ? pn_hadamard_block_size(K, c->rotation_cap) : 0;
    const int64_t row_bytes = pn_type_row_bytes(st->type, K);
    uint8_t *raw = malloc((size_t)row_bytes);
    float *x0 = malloc((size_t)K * sizeof(float)), *x = malloc((size_t)K * sizeof(float));
    void *scratch = malloc(pn_measure_weighted_scratch_bytes(K) + pn_measure_scratch_bytes(K));
    pn_status s = PN_OK;
    if (!raw || !x0 || !x || !scratch)
        s = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_measure_acc acc = { 0 };
    const int64_t n = pn_sample_count(rows, PN_SAMPLE_ROWS_DEFAULT);
    for (int64_t i = 0; i < n && s == PN_OK; i++) {
        int64_t r = pn_sample_row(rows, PN_SAMPLE_ROWS_DEFAULT, i);
        s = gguf_reader_read_tensor(c->src, (size_t)si, (uint64_t)(r * row_bytes), raw,
                                    (size_t)row_bytes, err);
        if (s == PN_OK)
            s = pn_widen_row(st->type, raw, x0, K);
        if (s != PN_OK)
            break;
        memcpy(x, x0, (size_t)K * sizeof(float));
        if (B > 1)
            pn_hadamard_rotate_row_ref(x, K, B);
        double e3, e4, nw;
        /* an expert tensor's row takes its expert's weights */
        const float *vr = v ? v + (r / st->ne[1]) * K : NULL;
        s = vr ? pn_measure_row_weighted(x0, x, K, B, vr, scratch, &e3, &e4, &nw, err)
               : pn_measure_row(x, K, scratch, &e3, &e4, &nw, err);
        if (s == PN_OK)
            pn_measure_acc_add(&acc, e3, e4, nw);
    }
    if (s == PN_OK) {
        double a, b;
        pn_measure_acc_result(&acc, &a, &b);
        *gain = a - b;
    } else {
        pn_error_prefix(err, "source tensor %s", t->name);
    }
    free(raw);
    free(x0);
    free(x);
    free(scratch);
    return s;
}

static int by_gain(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->gain != b->gain)
        return a->gain > b->gain ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Whether the file's promotions were measured weighted by its imatrix:
 * pn.mix.imatrix.promotion says so; a file with an imatrix hash and without
 * that key was made by a build that always weighted; a file without an
 * imatrix was measured unweighted. */
static bool promotion_weighted(const gguf_reader *r)
{
    const gguf_kv *k = gguf_reader_find_kv(r, PN_KEY_MIX_IMATRIX_PROMOTION);
    if (k && k->type == GGUF_TYPE_STRING)
        return k->v.str.len == 8 && memcmp(k->v.str.data, "weighted", 8) == 0;
    return !k && gguf_reader_find_kv(r, PN_KEY_MIX_IMATRIX_HASH) != NULL;
}

static pn_status check_promotions(pn_check_ctx *c, const pn_imatrix *im, pn_error *err)
{
    const gguf_kv *pk = gguf_reader_find_kv(c->r, PN_KEY_MIX_PROMOTED);
    if (!pk || pk->type != GGUF_TYPE_ARRAY || pk->arr_type != GGUF_TYPE_STRING)
        return PN_OK; /* the metadata stage has said what is wrong */
    const bool weighted = promotion_weighted(c->r);
    const size_t nt = c->rep->n_tensors;
    cand *cs = calloc(nt ? nt : 1, sizeof *cs);
    bool *promoted = calloc(nt ? nt : 1, sizeof *promoted);
    if (!cs || !promoted) {
        free(cs);
        free(promoted);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    pn_str_walk w = pn_str_walk_start(pk);
    for (uint64_t k = 0; k < pk->arr_count; k++) {
        gguf_str s = pn_str_walk_next(&w);
        char *name = pn_check_strdup_gguf(s);
        long ti = name ? gguf_reader_find_tensor(c->r, name) : -1;
        if (ti >= 0)
            promoted[ti] = true;
        free(name);
    }
    size_t n = 0, n_promoted = 0, missing = 0;
    pn_status st = PN_OK;
    const char *no_entry = NULL;
    for (size_t i = 0; i < nt && st == PN_OK; i++) {
        const pn_check_tensor *t = &c->rep->tensors[i];
        const bool cand3 = t->type == PN_TYPE_PN3T && t->ne[0] % 64 == 0;
        const bool cand4 = t->type == PN_TYPE_PN4T && promoted[i];
        if (!cand3 && !cand4)
            continue;
        const float *v = weighted ? pn_imatrix_weights_for(im, t->name) : NULL;
        if (weighted && !v) {
            missing++;
            no_entry = no_entry ? no_entry : t->name;
        }
        cs[n].index = i;
        cs[n].promoted = cand4;
        n_promoted += cand4;
        st = measure_gain(c, i, v, &cs[n].gain, err);
        n++;
    }
    if (st == PN_OK) {
        qsort(cs, n, sizeof *cs, by_gain);
        /* the first n_promoted must be exactly the promoted ones */
        size_t wrong = 0, first_bad = n, first_left = n;
        for (size_t k = 0; k < n; k++) {
            bool should = k < n_promoted;
            if (should != cs[k].promoted) {
                wrong++;
                if (cs[k].promoted && first_bad == n)
                    first_bad = k;
                if (!cs[k].promoted && first_left == n)
                    first_left = k;
            }
        }
        if (wrong) {
            const char *bad = first_bad < n ? c->rep->tensors[cs[first_bad].index].name : "?";
            const char *left = first_left < n ? c->rep->tensors[cs[first_left].index].name : "?";
            pn_finding *f = pn_check_add(
                c, PN_SEV_ERROR, "IMATRIX-PROMOTION", bad, PN_KEY_MIX_PROMOTED, -1,
                "the promotions do not follow the %s measurement: %s is promoted (gain %.6g), "
                "%s is not (gain %.6g), measured %s on the source (%zu of %zu candidates "
                "misplaced)",
                weighted ? "imatrix's" : "unweighted", bad,
                first_bad < n ? cs[first_bad].gain : NAN, left,
                first_left < n ? cs[first_left].gain : NAN,
                weighted ? "with the imatrix" : "unweighted (" PN_KEY_MIX_IMATRIX_PROMOTION ")",
                wrong / 2, n);
            if (f)
                f->count = (int64_t)(wrong / 2);
        }
        if (missing)
            pn_check_add(c, PN_SEV_WARNING, "IMATRIX-KEYS", no_entry, NULL, -1,
                         "%zu candidates have no imatrix entry (measured unweighted), the first %s",
                         missing, no_entry);
        c->rep->imatrix_promotions_checked = true;
        c->rep->imatrix_promotions_follow = wrong == 0;
    }
    free(cs);
    free(promoted);
    return st;
}

pn_status pn_check_imatrix(pn_check_ctx *c, pn_error *err)
{
    if (!c->opt.imatrix_path)
        return PN_OK;
    pn_imatrix *im = NULL;
    pn_status st = pn_imatrix_load(c->opt.imatrix_path, &im, err);
    if (st != PN_OK)
        return st;
    c->rep->imatrix_checked = true;
    const size_t nt = c->rep->n_tensors;
    const char **names = calloc(nt ? nt : 1, sizeof *names);
    if (!names) {
        pn_imatrix_free(im);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < nt; i++)
        names[i] = c->rep->tensors[i].name;
    size_t used = 0;
    const uint64_t h = pn_imatrix_hash_names(im, names, nt, &used);
    free(names);
    c->rep->imatrix_hash = h;
    const gguf_kv *hk = gguf_reader_find_kv(c->r, PN_KEY_MIX_IMATRIX_HASH);
    if (!hk || hk->type != GGUF_TYPE_UINT64) {
        pn_check_add(c, PN_SEV_ERROR, "IMATRIX-NONE", NULL, PN_KEY_MIX_IMATRIX_HASH, -1,
                     "the file records no imatrix (no %s of type u64), but --imatrix was given",
                     PN_KEY_MIX_IMATRIX_HASH);
    } else if (hk->v.u64 != h) {
        pn_check_add(c, PN_SEV_ERROR, "IMATRIX-OTHER", NULL, PN_KEY_MIX_IMATRIX_HASH, -1,
                     "made with another imatrix: the file records entries hash %016" PRIx64
                     ", the %zu entries of %s naming its tensors hash to %016" PRIx64,
                     hk->v.u64, used, pn_imatrix_base_name(c->opt.imatrix_path), h);
    } else {
        c->rep->imatrix_same = true;
    }
    const gguf_kv *fk = gguf_reader_find_kv(c->r, PN_KEY_QUANTIZE_IMATRIX_FILE);
    const gguf_kv *ek = gguf_reader_find_kv(c->r, PN_KEY_QUANTIZE_IMATRIX_ENTRIES);
    if (hk && (!fk || fk->type != GGUF_TYPE_STRING ||
               !gguf_str_eq(fk->v.str, pn_imatrix_base_name(c->opt.imatrix_path)) || !ek ||
               ek->type != GGUF_TYPE_UINT32 || ek->v.u64 != im->n))
        pn_check_add(c, PN_SEV_WARNING, "IMATRIX-KEYS", NULL, PN_KEY_QUANTIZE_IMATRIX_FILE, -1,
                     "llama-quantize's quantize.imatrix.file / entries_count are missing or do "
                     "not name %s with its %zu entries",
                     pn_imatrix_base_name(c->opt.imatrix_path), im->n);
    if (c->src)
        st = check_promotions(c, im, err);
    pn_imatrix_free(im);
    return st;
}
