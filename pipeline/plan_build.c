/* plan_build.c - pn-quantize's plan for one source: recipe, promotions,
 * --target-size, the output's keys and its exact size (see plan_build.h). */
#include "pipeline/plan_build.h"

#include "common/mem.h"
#include "common/text.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"
#include "gguf/gguf_split.h"
#include "gguf/header_hash.h"
#include "gguf/pn_keys.h"
#include "mix/promote.h"
#include "mix/promote_score.h"
#include "pipeline/measure_job.h"
#include "pipeline/quantize_testing.h"
#include "pipeline/stream.h"
#include "pipeline/tensor_job.h"
#include "quant/types.h"

#define PN_QUANTIZER_NAME "pn-quantize " PN_VERSION

const char *pn_job_quantizer_name(const pn_quantize_opts *o)
{
    return o->testing && o->testing->quantizer_name ? o->testing->quantizer_name
                                                    : PN_QUANTIZER_NAME;
}

void pn_job_plan_free(pn_job_plan *p)
{
    if (!p)
        return;
    pn_plan_free(p->plan);
    pn_recipe_free(p->recipe);
    pn_imatrix_free(p->imatrix);
    PN_FREE_ALL(p->rel_error, p->seconds, p);
}

/* The recipe with the run's overrides (--tensor-type ...) before its rules. */
static pn_status load_recipe(const pn_quantize_opts *o, pn_recipe **out, pn_error *err)
{
    pn_status st;
    if (o->recipe_path) {
        st = pn_recipe_load(o->recipe_path, out, err);
    } else {
        char source[128];
        snprintf(source, sizeof source, "built-in recipe %s", pn_default_recipe_name);
        st = pn_recipe_parse(pn_default_recipe_text, strlen(pn_default_recipe_text), source, out,
                             err);
    }
    if (st == PN_OK && (st = pn_recipe_apply_overrides(*out, o->overrides, o->n_overrides, err))) {
        pn_recipe_free(*out);
        *out = NULL;
    }
    return st;
}

pn_status pn_job_drop_mtp(const pn_quantize_opts *o, bool *drop, pn_error *err)
{
    if (o->no_mtp && o->keep_mtp)
        return pn_error_set(err, PN_ERR_USAGE, "give --no-mtp or --keep-mtp, not both");
    pn_recipe *r = NULL;
    pn_status st = load_recipe(o, &r, err);
    if (st != PN_OK)
        return st;
    *drop = o->no_mtp || (!o->keep_mtp && r->mtp == PN_RECIPE_MTP_DROP);
    pn_recipe_free(r);
    return PN_OK;
}

/* Reads a promote list: one tensor name per line, as recipes are read:
 * '#' to the end of the line is a comment wherever it stands, blank lines
 * are skipped and surrounding blanks trimmed; *lines_out gets each name's
 * 1-based line, for the messages. */
#define PN_PROMOTE_LIST_MAX_BYTES ((size_t)64 << 20)
static pn_status read_name_list(const char *path, char ***names_out, int **lines_out, size_t *n_out,
                                pn_error *err)
{
    char *text = NULL;
    size_t len = 0;
    pn_status st =
        pn_read_small_file(path, PN_PROMOTE_LIST_MAX_BYTES, "promote list", &text, &len, err);
    if (st != PN_OK)
        return st;
    char **names = NULL;
    int *lines = NULL;
    size_t n = 0, cap = 0;
    int line_no = 0;
    for (char *line = text; st == PN_OK && line < text + len;) {
        char *nl = memchr(line, '\n', (size_t)(text + len - line));
        char *s = line, *e = nl ? nl : text + len;
        line = nl ? nl + 1 : text + len;
        line_no++;
        if (memchr(s, '\0', (size_t)(e - s))) {
            st = pn_error_set(err, PN_ERR_FORMAT, "%s:%d: the promote list holds a NUL byte", path,
                              line_no);
            break;
        }
        char *hash = memchr(s, '#', (size_t)(e - s));
        if (hash)
            e = hash;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e == s)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **nn = realloc(names, cap * sizeof *names);
            int *nli = nn ? realloc(lines, cap * sizeof *lines) : NULL;
            if (nn)
                names = nn;
            if (!nn || !nli) {
                st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
                break;
            }
            lines = nli;
        }
        names[n] = strndup(s, (size_t)(e - s));
        if (!names[n]) {
            st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
            break;
        }
        lines[n] = line_no;
        n++;
    }
    free(text);
    if (st != PN_OK) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        free(lines);
        return st;
    }
    *names_out = names;
    *lines_out = lines;
    *n_out = n;
    return PN_OK;
}

typedef struct name_ref {
    const char *name;
    size_t index;
} name_ref;

static int cmp_name_ref(const void *a, const void *b)
{
    return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

/* Promotes exactly the listed names, as pn_plan_promote_by_names does (the
 * same refusals and messages), with a sorted index of the plan's names so
 * that a list of n names costs n log n, not n times the tensor count. */
static pn_status promote_listed(pn_plan *plan, char **names, const int *lines, size_t n,
                                const char *path, pn_error *err)
{
    pn_plan_clear_promotions(plan);
    name_ref *idx = malloc((plan->n_tensors ? plan->n_tensors : 1) * sizeof *idx);
    if (!idx)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < plan->n_tensors; i++) {
        idx[i].name = plan->tensors[i].name;
        idx[i].index = i;
    }
    qsort(idx, plan->n_tensors, sizeof *idx, cmp_name_ref);
    pn_status st = PN_OK;
    for (size_t i = 0; i < n && st == PN_OK; i++) {
        name_ref key = { names[i], 0 };
        const name_ref *hit = bsearch(&key, idx, plan->n_tensors, sizeof *idx, cmp_name_ref);
        if (!hit)
            st = pn_error_set(err, PN_ERR_MISMATCH, "promotion: no tensor named '%s' in the model",
                              names[i]);
        else
            st = pn_plan_promote_index(plan, hit->index, err);
        if (st != PN_OK && st != PN_ERR_NOMEM)
            pn_error_prefix(err, "--promote-list %s:%d", path, lines[i]);
    }
    free(idx);
    if (st != PN_OK)
        pn_plan_clear_promotions(plan);
    return st;
}

/* The output's layout for the plan's current promotions: its alignment,
 * header and exact file size, and the mix label. */
static pn_status compute_output_layout(pn_job_plan *p, const gguf_reader *src,
                                       volatile sig_atomic_t *cancel, pn_error *err)
{
    gguf_writer *w = NULL;
    pn_status st = pn_job_plan_writer(p, src, cancel, &w, err);
    if (st != PN_OK)
        return st;
    p->alignment = gguf_writer_alignment(w);
    p->header_bytes = gguf_writer_data_offset(w);
    p->file_bytes = gguf_writer_file_bytes(w);
    pn_plan_mix_label(p->plan, p->mix_label, sizeof p->mix_label);
    gguf_writer_free(w);
    return PN_OK;
}

static bool cancelled(volatile sig_atomic_t *cancel)
{
    return cancel && *cancel;
}

/* --target-size: the largest n whose file (promoting in measured order)
 * fits the limit. The file size grows with n (a pn4t tensor is larger than
 * its pn3t form, and pn.mix.promoted and pn.mix only grow), so a binary
 * search over n finds the same n as trying every one, with O(log n) exact
 * sizings (each a writer built once, linear in the header) instead of one
 * per candidate. Leaves the plan with those promotions. */
static pn_status choose_n_for_size(pn_job_plan *p, const gguf_reader *src, const pn_measurement *m,
                                   uint64_t limit, volatile sig_atomic_t *cancel, size_t *n_out,
                                   pn_error *err)
{
    const size_t nc = p->plan->n_candidates;
    size_t *order = malloc((nc ? nc : 1) * sizeof *order);
    if (!order)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_status st = pn_promotion_order(p->plan, m, order, err);
    uint64_t size0 = 0;
    size_t lo = 0, hi = nc; /* the answer is in [lo, hi] once n = lo fits */
    if (m->positive_only) {
        /* the order is by gain, largest first: the positive ones lead it */
        hi = 0;
        for (size_t i = 0; i < m->n; i++)
            hi += m->entries[i].gain > 0;
    }
    bool any = false;
    for (int step = 0; st == PN_OK; step++) {
        /* first n = 0, then the middle of what is left */
        size_t k = step == 0 ? 0 : lo + (hi - lo + 1) / 2;
        if (step > 0 && lo >= hi)
            break;
        if (cancelled(cancel)) {
            st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
            break;
        }
        pn_plan_clear_promotions(p->plan);
        for (size_t i = 0; i < k && st == PN_OK; i++)
            st = pn_plan_promote_index(p->plan, order[i], err);
        if (st == PN_OK)
            st = compute_output_layout(p, src, cancel, err);
        if (st != PN_OK)
            break;
        if (step == 0) {
            size0 = p->file_bytes;
            if (size0 > limit)
                break;
            any = true;
            continue;
        }
        if (p->file_bytes <= limit)
            lo = k;
        else
            hi = k - 1;
    }
    if (st == PN_OK && !any)
        st = pn_error_set(err, PN_ERR_MISMATCH,
                          "target size: even with no promotion the file is %llu bytes (%.3f GB), "
                          "more than the limit of %llu bytes (%.3f GB)",
                          (unsigned long long)size0, (double)size0 / 1e9, (unsigned long long)limit,
                          (double)limit / 1e9);
    pn_plan_clear_promotions(p->plan);
    for (size_t i = 0; i < lo && st == PN_OK; i++)
        st = pn_plan_promote_index(p->plan, order[i], err);
    free(order);
    if (st != PN_OK) {
        pn_plan_clear_promotions(p->plan);
        return st;
    }
    *n_out = lo;
    return PN_OK;
}

/* --imatrix: read it, check it against the model (unknown entry names are
 * reported in a note), hash the entries used, and say which candidates
 * have an entry. */
static pn_status load_imatrix(const pn_quantize_opts *o, pn_job_plan *p, pn_error *err)
{
    pn_status st = pn_imatrix_load(o->imatrix_path, &p->imatrix, err);
    if (st != PN_OK)
        return st;
    p->imatrix_path = o->imatrix_path;
    p->imatrix_promotion = o->imatrix_promotion;
    size_t n_unknown = 0;
    char *unknown = NULL;
    st = pn_imatrix_check_model(p->imatrix, o->imatrix_path, p->plan, &n_unknown, &unknown, err);
    if (st != PN_OK)
        return st;
    p->imatrix_hash = pn_imatrix_hash_used(p->imatrix, p->plan, &p->imatrix_used);
    if (o->note) {
        size_t with = 0, cand = 0;
        for (size_t i = 0; i < p->plan->n_tensors; i++)
            if (p->plan->tensors[i].candidate) {
                cand++;
                with += pn_imatrix_find(p->imatrix, p->plan->tensors[i].name) != NULL;
            }
        char msg[PN_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg,
                 "imatrix %s (%s form): %zu entries, %zu name tensors of this model; %zu of %zu "
                 "promotion candidates have an entry",
                 o->imatrix_path, p->imatrix->form == PN_IMATRIX_GGUF ? "GGUF" : ".dat",
                 p->imatrix->n, p->imatrix_used, with, cand);
        o->note(msg, o->user);
        if (n_unknown) {
            size_t len = strlen(unknown) + 160;
            char *m2 = malloc(len);
            if (m2) {
                snprintf(m2, len,
                         "imatrix %s: entries that name no tensor of this model (%zu):\n%s",
                         o->imatrix_path, n_unknown, unknown);
                o->note(m2, o->user);
                free(m2);
            }
        }
    }
    free(unknown);
    return PN_OK;
}

/* Before measuring weighted by an imatrix: the candidates without an
 * entry, an error naming them unless --imatrix-missing unweighted (ranking
 * weighted against unweighted errors means nothing), else a note naming
 * them. */
static pn_status check_missing_entries(const pn_quantize_opts *o, const pn_job_plan *p,
                                       pn_error *err)
{
    if (!p->imatrix || !o->imatrix_promotion)
        return PN_OK;
    size_t missing = 0;
    char names[PN_ERROR_MSG_MAX / 2];
    size_t used = 0;
    names[0] = 0;
    for (size_t i = 0; i < p->plan->n_tensors; i++) {
        if (!p->plan->tensors[i].candidate || pn_imatrix_find(p->imatrix, p->plan->tensors[i].name))
            continue;
        if (missing++ < 8) {
            char b[160];
            int k = snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "",
                             pn_safe_text(p->plan->tensors[i].name, b, sizeof b));
            if (k > 0 && (size_t)k < sizeof names - used)
                used += (size_t)k;
        }
    }
    if (missing == 0)
        return PN_OK;
    if (!o->imatrix_missing_unweighted)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%s: %zu promotion candidates have no entry: %s%s (measure them "
                            "unweighted with --imatrix-missing unweighted)",
                            p->imatrix_path, missing, names, missing > 8 ? ", ..." : "");
    if (o->note) {
        char msg[PN_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "imatrix %s: %zu candidates measured unweighted (no entry): %s%s",
                 p->imatrix_path, missing, names, missing > 8 ? ", ..." : "");
        o->note(msg, o->user);
    }
    return PN_OK;
}

/* The measurement promotions are chosen by: the one given (o->measurement),
 * else read or made (pipeline/measure_job.h; *made owns it), its time added
 * to stats. */
static pn_status obtain_measurement(const pn_quantize_opts *o, pn_job_plan *p, gguf_reader *src,
                                    const pn_job_env *env, const pn_source_id *sid,
                                    pn_quantize_stats *stats, pn_measurement **made,
                                    const pn_measurement **use, pn_error *err)
{
    *use = o->measurement;
    if (*use)
        return PN_OK;
    pn_measure_times mt = { 0, 0, 0 };
    double t0 = pn_now_seconds();
    pn_status st = check_missing_entries(o, p, err);
    /* the imatrix weights the promotion measurement only when asked: the
     * default is the unweighted E3 - E4, whatever imatrix is given */
    const pn_imatrix *weights = o->imatrix_promotion ? p->imatrix : NULL;
    if (st == PN_OK)
        st = pn_job_measure_obtain(o, src, p->plan, env, sid, p->quantizer, weights,
                                   p->imatrix_hash, made, &mt, err);
    stats->t_measure += pn_now_seconds() - t0;
    stats->t_measure_read += mt.read;
    stats->t_measure_compute += mt.compute;
    stats->t_measure_wait_input += mt.wait_input;
    if (st == PN_OK && o->forward_order) {
        /* the order only: the file keeps E3 and E4 as measured */
        pn_measurement *m = *made;
        m->by_gain = true;
        for (size_t i = 0; i < m->n; i++)
            m->entries[i].gain = pn_promote_score(
                &(pn_promote_cand){ m->entries[i].name, m->entries[i].e3, m->entries[i].e4 });
    }
    *use = *made;
    return st;
}

/* --rotation-cap: 0 turns the recipe's rotation off, a cap turns it on
 * with that cap; negative (not given) keeps the recipe's. */
static void override_rotation(const pn_quantize_opts *o, pn_recipe *recipe)
{
    if (o->rotation_cap == 0) {
        recipe->rotation = PN_ROTATION_NONE;
        recipe->rotation_cap = 0;
    } else if (o->rotation_cap > 0) {
        recipe->rotation = PN_ROTATION_HADAMARD;
        recipe->rotation_cap = o->rotation_cap;
    }
}

/* The mix plan of the source's tensors under the recipe (tensors no rule
 * matches are named in a note), the per-tensor result arrays and the
 * weight count. */
static pn_status build_plan(const pn_quantize_opts *o, gguf_reader *src, pn_job_plan *p,
                            pn_error *err)
{
    size_t n = gguf_reader_n_tensors(src);
    pn_tensor_desc *descs = calloc(n ? n : 1, sizeof *descs);
    if (!descs)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(src, i);
        descs[i].name = ti->name;
        descs[i].n_dims = ti->n_dims;
        memcpy(descs[i].ne, ti->ne, sizeof descs[i].ne);
        descs[i].src_type = ti->type;
    }
    char *details = NULL;
    pn_status st = pn_plan_build(p->recipe, descs, n, &p->plan, &details, err);
    free(descs);
    if (st == PN_ERR_UNMATCHED && details && o->note) {
        size_t len = strlen(details) + 64;
        char *msg = malloc(len);
        if (msg) {
            snprintf(msg, len, "tensors that no rule of the recipe matches:\n%s", details);
            o->note(msg, o->user);
            free(msg);
        }
    }
    free(details);
    if (st != PN_OK) {
        pn_error_prefix(err, "%s", o->src_path);
        return st;
    }
    const size_t nt = p->plan->n_tensors;
    p->rel_error = calloc(nt ? nt : 1, sizeof *p->rel_error);
    p->seconds = calloc(nt ? nt : 1, sizeof *p->seconds);
    if (!p->rel_error || !p->seconds)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nt; i++)
        p->weights += (uint64_t)p->plan->tensors[i].n_weights;
    return PN_OK;
}

/* --promote-list: the tensors it names, promoted. */
static pn_status promote_from_list(const pn_quantize_opts *o, pn_job_plan *p, pn_error *err)
{
    char **names = NULL;
    int *lines = NULL;
    size_t nn = 0;
    pn_status st = read_name_list(o->promote_list_path, &names, &lines, &nn, err);
    if (st != PN_OK)
        return st;
    st = promote_listed(p->plan, names, lines, nn, o->promote_list_path, err);
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    free(lines);
    return st;
}

/* How many promotions a count run makes (--promote, else the recipe's):
 * the recipe's default is for the full model, so a smaller one gets every
 * candidate it has and is told so; a count given past the candidates is
 * refused. With --target-size the count is chosen later. */
static pn_status promotions_wanted(const pn_quantize_opts *o, const pn_job_plan *p,
                                   int64_t *want_out, pn_error *err)
{
    int64_t want = o->promote >= 0 ? o->promote : p->recipe->promote;
    const size_t nc = p->plan->n_candidates;
    if (!o->target_size && o->promote < 0 && want > 0 && (size_t)want > nc) {
        if (o->note) {
            char msg[256];
            snprintf(msg, sizeof msg,
                     "the recipe promotes %" PRId64 " tensors but this model has %zu "
                     "candidates: promoting all %zu",
                     want, nc, nc);
            o->note(msg, o->user);
        }
        want = (int64_t)nc;
    }
    if (!o->target_size && want > 0 && (size_t)want > nc)
        return pn_error_set(err, PN_ERR_MISMATCH,
                            "%" PRId64 " promotions asked for, but %s has only %zu pn3t "
                            "tensors that pn4t can hold",
                            want, o->src_path, nc);
    *want_out = want;
    return PN_OK;
}

/* --target-size: as many promotions, in measured order, as fit the limit,
 * and a note saying how many and the file's size. */
static pn_status promote_to_size(const pn_quantize_opts *o, pn_job_plan *p, const gguf_reader *src,
                                 const pn_measurement *m, pn_error *err)
{
    size_t n_promote = 0;
    pn_status st = choose_n_for_size(p, src, m, o->target_size, o->cancel, &n_promote, err);
    if (st == PN_OK)
        st = compute_output_layout(p, src, o->cancel, err);
    if (st == PN_OK && o->note) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "--target-size: %zu promotions fit; the file is %" PRIu64 " bytes (%.3f GiB)",
                 n_promote, p->file_bytes, (double)p->file_bytes / 1073741824.0);
        o->note(msg, o->user);
    }
    return st;
}

/* The promotions: the list given, else a count or a target size chosen by
 * the measurement (none to make when the count is 0 and no size is set). */
static pn_status choose_promotions(const pn_quantize_opts *o, pn_job_plan *p, gguf_reader *src,
                                   const pn_job_env *env, const pn_source_id *sid,
                                   pn_quantize_stats *stats, pn_error *err)
{
    if (o->promote_list_path)
        return promote_from_list(o, p, err);
    int64_t want = 0;
    pn_status st = promotions_wanted(o, p, &want, err);
    if (st != PN_OK || (want <= 0 && !o->target_size))
        return st;
    pn_measurement *m = NULL;
    const pn_measurement *use = NULL;
    st = obtain_measurement(o, p, src, env, sid, stats, &m, &use, err);
    if (st != PN_OK)
        return st;
    if (o->target_size)
        st = promote_to_size(o, p, src, use, err);
    else
        st = pn_plan_promote_top(p->plan, use, (size_t)want, err);
    pn_measurement_free(m);
    return st;
}

pn_status pn_job_plan_make(const pn_quantize_opts *o, gguf_reader *src, const pn_job_env *env,
                           const pn_source_id *sid, pn_job_plan **out, pn_quantize_stats *stats,
                           pn_error *err)
{
    *out = NULL;
    pn_job_plan *p = calloc(1, sizeof *p);
    if (!p)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    p->source_header_hash = sid->header_hash;
    p->quantizer = pn_job_quantizer_name(o);
    p->overrides = o->overrides;
    p->n_overrides = o->n_overrides;
    pn_status st = load_recipe(o, &p->recipe, err);
    if (st == PN_OK) {
        override_rotation(o, p->recipe);
        st = build_plan(o, src, p, err);
    }
    if (st == PN_OK && o->imatrix_path)
        st = load_imatrix(o, p, err);
    if (st == PN_OK) /* the alignment, and the size with no promotion */
        st = compute_output_layout(p, src, o->cancel, err);
    if (st == PN_OK)
        st = choose_promotions(o, p, src, env, sid, stats, err);
    if (st == PN_OK)
        st = compute_output_layout(p, src, o->cancel, err);
    if (st != PN_OK) {
        pn_job_plan_free(p);
        return st;
    }
    *out = p;
    return PN_OK;
}

pn_status pn_job_plan_writer(const pn_job_plan *p, const gguf_reader *src,
                             volatile sig_atomic_t *cancel, gguf_writer **out, pn_error *err)
{
    *out = NULL;
    gguf_writer *w = gguf_writer_new();
    if (!w)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    /* the output proves its keys (docs/format.md#the-header-hash) */
    gguf_writer_set_header_hash(w, true);
    pn_status st = PN_OK;
    for (size_t i = 0; i < gguf_reader_n_kv(src) && st == PN_OK; i++) {
        if ((i & 4095) == 0 && cancelled(cancel)) {
            gguf_writer_free(w);
            return pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
        }
        const gguf_kv *kv = gguf_reader_kv(src, i);
        /* a source's header hash proves the source's keys, not ours */
        if (gguf_str_eq(kv->key, "general.file_type") || gguf_header_hash_is_record_key(kv->key))
            continue;
        st = gguf_writer_copy_kv(w, kv);
    }
    if (st != PN_OK) {
        pn_error_set(err, st, "copying the source's keys: %s", pn_strerror(st));
        goto fail;
    }
    /* a split source's split keys describe the source's files, not ours */
    gguf_split_remove_keys(w);
    const pn_plan *plan = p->plan;
    char label[96];
    pn_plan_mix_label(plan, label, sizeof label);
    const char **promoted = calloc(plan->n_promoted ? plan->n_promoted : 1, sizeof *promoted);
    uint32_t *zeros = calloc(p->plan->n_tensors ? p->plan->n_tensors : 1, sizeof *zeros);
    uint32_t *types = calloc(p->plan->n_tensors ? p->plan->n_tensors : 1, sizeof *types);
    if (!promoted || !zeros || !types) {
        free(promoted);
        free(zeros);
        free(types);
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t np = pn_plan_promoted_names(plan, promoted, plan->n_promoted);
    if (st == PN_OK)
        st = gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (st == PN_OK && plan->has_file_type)
        st = gguf_writer_set_u32(w, "general.file_type", plan->file_type);
    if (st == PN_OK)
        st = gguf_writer_set_str(w, PN_KEY_FORMAT, PN_FORMAT_NAME);
    if (st == PN_OK)
        st = gguf_writer_set_str(w, PN_KEY_MIX, label);
    if (st == PN_OK)
        st = gguf_writer_set_arr_str(w, PN_KEY_MIX_PROMOTED, promoted, np);
    if (st == PN_OK && p->n_overrides) {
        /* the options that stood before the recipe, as typed (pn-check
         * --recipe takes the same to accept the file) */
        char(*texts)[320] = calloc(p->n_overrides, sizeof *texts);
        const char **v = calloc(p->n_overrides, sizeof *v);
        if (texts && v) {
            for (size_t i = 0; i < p->n_overrides; i++) {
                pn_recipe_override_text(&p->overrides[i], texts[i], sizeof texts[i]);
                v[i] = texts[i];
            }
            st = gguf_writer_set_arr_str(w, PN_KEY_MIX_OVERRIDES, v, p->n_overrides);
        } else {
            st = PN_ERR_NOMEM;
        }
        free(texts);
        free(v);
    }
    if (plan->rotation == PN_ROTATION_HADAMARD) {
        if (st == PN_OK)
            st = gguf_writer_set_str(w, PN_KEY_ROTATION_TYPE, "hadamard");
        if (st == PN_OK)
            st = gguf_writer_set_u32(w, PN_KEY_ROTATION_BLOCK_SIZE, (uint32_t)plan->rotation_cap);
    } else {
        if (st == PN_OK)
            st = gguf_writer_set_str(w, PN_KEY_ROTATION_TYPE, "none");
        gguf_writer_remove_kv(w, PN_KEY_ROTATION_BLOCK_SIZE);
    }
    if (st == PN_OK)
        st = gguf_writer_set_arr(w, PN_KEY_TENSOR_CRC, GGUF_TYPE_UINT32, zeros, p->plan->n_tensors);
    if (st == PN_OK)
        st = gguf_writer_set_str(w, PN_KEY_QUANTIZER, p->quantizer);
    /* who the source is (docs/reuse.md#the-keys) */
    for (size_t i = 0; i < p->plan->n_tensors; i++)
        types[i] = (uint32_t)p->plan->tensors[i].src_type;
    if (st == PN_OK)
        st = gguf_writer_set_u64(w, PN_KEY_SOURCE_HEADER, p->source_header_hash);
    if (st == PN_OK)
        st = gguf_writer_set_u32(w, PN_KEY_SOURCE_SAMPLE_ROWS, PN_SOURCE_SAMPLE_ROWS);
    if (st == PN_OK)
        st = gguf_writer_set_arr(w, PN_KEY_SOURCE_SAMPLE_CRC, GGUF_TYPE_UINT32, zeros,
                                 p->plan->n_tensors);
    if (st == PN_OK)
        st = gguf_writer_set_arr(w, PN_KEY_SOURCE_TENSOR_CRC, GGUF_TYPE_UINT32, zeros,
                                 p->plan->n_tensors);
    if (st == PN_OK)
        st =
            gguf_writer_set_arr(w, PN_KEY_SOURCE_TYPE, GGUF_TYPE_UINT32, types, p->plan->n_tensors);
    /* the imatrix it was made with: llama-quantize's keys, and ours */
    for (size_t k = 0; k < 4; k++) {
        static const char *const keys[] = { PN_KEY_QUANTIZE_IMATRIX_FILE,
                                            PN_KEY_QUANTIZE_IMATRIX_DATASET,
                                            PN_KEY_QUANTIZE_IMATRIX_ENTRIES,
                                            PN_KEY_QUANTIZE_IMATRIX_CHUNKS };
        gguf_writer_remove_kv(w, keys[k]); /* a source's own are not this file's */
    }
    gguf_writer_remove_kv(w, PN_KEY_MIX_IMATRIX_HASH);
    gguf_writer_remove_kv(w, PN_KEY_MIX_IMATRIX_USED);
    gguf_writer_remove_kv(w, PN_KEY_MIX_IMATRIX_PROMOTION);
    if (p->imatrix) {
        if (st == PN_OK)
            st = gguf_writer_set_str(w, PN_KEY_QUANTIZE_IMATRIX_FILE,
                                     pn_imatrix_base_name(p->imatrix_path));
        if (st == PN_OK && p->imatrix->dataset[0])
            st = gguf_writer_set_str(w, PN_KEY_QUANTIZE_IMATRIX_DATASET, p->imatrix->dataset);
        if (st == PN_OK)
            st = gguf_writer_set_u32(w, PN_KEY_QUANTIZE_IMATRIX_ENTRIES, (uint32_t)p->imatrix->n);
        if (st == PN_OK && p->imatrix->chunk_count > 0)
            st = gguf_writer_set_u32(w, PN_KEY_QUANTIZE_IMATRIX_CHUNKS,
                                     (uint32_t)p->imatrix->chunk_count);
        if (st == PN_OK)
            st = gguf_writer_set_u64(w, PN_KEY_MIX_IMATRIX_HASH, p->imatrix_hash);
        if (st == PN_OK)
            st = gguf_writer_set_u32(w, PN_KEY_MIX_IMATRIX_USED, (uint32_t)p->imatrix_used);
        if (st == PN_OK)
            st = gguf_writer_set_str(w, PN_KEY_MIX_IMATRIX_PROMOTION,
                                     p->imatrix_promotion ? "weighted" : "unweighted");
    }
    free(promoted);
    free(zeros);
    free(types);
    if (st != PN_OK) {
        pn_error_set(err, st, "setting the output's keys: %s", pn_strerror(st));
        goto fail;
    }
    for (size_t i = 0; i < p->plan->n_tensors && st == PN_OK; i++) {
        if ((i & 4095) == 0 && cancelled(cancel)) {
            st = pn_error_set(err, PN_ERR_INTERRUPTED, "interrupted by a signal");
            break;
        }
        st = gguf_writer_add_tensor(w, p->plan->tensors[i].name, p->plan->tensors[i].n_dims,
                                    p->plan->tensors[i].ne, p->plan->tensors[i].type, err);
    }
    if (st != PN_OK)
        goto fail;
    *out = w;
    return PN_OK;
fail:
    gguf_writer_free(w);
    return st;
}
