/* check_recipe.c - pn-check --recipe: does the file follow a recipe?
 *
 * Each tensor gets the type the recipe's first matching rule gives it (the
 * first type of the rule's chain whose block divides K, as mix/plan.c
 * decides). A pn4t tensor where the recipe gives pn3t is a promotion: counted
 * and listed, and expected in pn.mix.promoted. Any other difference, a tensor
 * no rule matches, a different rotation or mix name are warnings: a file made
 * with another recipe or tool is not broken by them.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/pn_keys.h"
#include "mix/recipe.h"
#include "check/check_internal.h"
#include "quant/types.h"

/* Which tensors pn.mix.promoted lists, in one walk over it (a name the file
 * does not hold is the metadata stage's finding). NULL when out of memory. */
static bool *listed_as_promoted(const pn_check_ctx *c, const gguf_kv *kv)
{
    bool *listed = calloc(c->rep->n_tensors ? c->rep->n_tensors : 1, sizeof *listed);
    if (!listed || !kv)
        return listed;
    pn_str_walk walk = pn_str_walk_start(kv);
    for (uint64_t i = 0; i < kv->arr_count; i++) {
        gguf_str s = pn_str_walk_next(&walk);
        char *name = pn_check_strdup_gguf(s);
        if (!name) {
            free(listed);
            return NULL;
        }
        long ti = strlen(name) == s.len ? gguf_reader_find_tensor(c->r, name) : -1;
        if (ti >= 0)
            listed[ti] = true;
        free(name);
    }
    return listed;
}

static void check_rotation(pn_check_ctx *c, const pn_recipe *rc)
{
    if (!c->rotation_known)
        return; /* already an error of the metadata stage */
    bool file_h = c->rotation_hadamard;
    bool rec_h = rc->rotation == PN_ROTATION_HADAMARD;
    if (file_h != rec_h || (file_h && c->rotation_cap != rc->rotation_cap)) {
        char fr[48], rr[48];
        snprintf(fr, sizeof fr, file_h ? "hadamard, cap %d" : "none", c->rotation_cap);
        snprintf(rr, sizeof rr, rec_h ? "hadamard, cap %d" : "none", rc->rotation_cap);
        pn_check_add(c, PN_SEV_WARNING, "RECIPE-ROTATION", NULL, PN_KEY_ROTATION_TYPE, -1,
                     "the file's rotation is %s, the recipe's %s", fr, rr);
    }
}

static bool kv_unsigned(const gguf_kv *kv, uint64_t *v)
{
    switch (kv->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64: *v = kv->v.u64; return true;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64: *v = (uint64_t)kv->v.i64; return kv->v.i64 >= 0;
    default: return false;
    }
}

static void check_file_type(pn_check_ctx *c, const pn_recipe *rc)
{
    if (!rc->has_file_type)
        return;
    const gguf_kv *kv = gguf_reader_find_kv(c->r, "general.file_type");
    uint64_t v = 0;
    if (!kv || !kv_unsigned(kv, &v) || v != rc->file_type)
        pn_check_add(c, PN_SEV_WARNING, "RECIPE-FILE-TYPE", NULL, "general.file_type", -1,
                     "the recipe sets general.file_type = %" PRIu32 "; the file %s", rc->file_type,
                     kv ? "has another value" : "has none");
}

long pn_check_mtp_layer(const pn_check_report *rep)
{
    for (size_t i = 0; i < rep->n_tensors; i++) {
        long b;
        int at = 0;
        if (strstr(rep->tensors[i].name, ".nextn.") &&
            sscanf(rep->tensors[i].name, "blk.%ld.%n", &b, &at) == 1 && at > 0 && b >= 0)
            return b;
    }
    return -1;
}

/* A file that holds the MTP layer against a recipe that drops it (mtp drop,
 * unless pn-check --keep-mtp) was made with --keep-mtp or by another recipe:
 * RECIPE-MTP says so, so that the format's file (the PN3 recipe drops the
 * layer) and the one with the layer are told apart. */
static void check_mtp(pn_check_ctx *c, const pn_recipe *rc)
{
    if (rc->mtp != PN_RECIPE_MTP_DROP || c->opt.keep_mtp)
        return;
    const pn_check_report *rep = c->rep;
    const long layer = pn_check_mtp_layer(rep);
    if (layer < 0)
        return;
    char prefix[40];
    snprintf(prefix, sizeof prefix, "blk.%ld.", layer);
    size_t n = 0;
    for (size_t i = 0; i < rep->n_tensors; i++)
        n += strncmp(rep->tensors[i].name, prefix, strlen(prefix)) == 0;
    pn_check_add(c, PN_SEV_WARNING, "RECIPE-MTP", NULL, NULL, -1,
                 "the file holds the MTP layer (block %ld, %zu tensors), which the recipe drops "
                 "('mtp drop' at %s:%d): it was made with --keep-mtp (give pn-check --keep-mtp "
                 "to check it as such) or by another recipe",
                 layer, n, c->opt.recipe_path, rc->mtp_line);
}

/* The overrides given against those the file records (pn.mix.overrides,
 * in order): a file made with other overrides than the check assumes is
 * told so, whatever its types. */
static void check_overrides(pn_check_ctx *c)
{
    const gguf_kv *kv = gguf_reader_find_kv(c->r, PN_KEY_MIX_OVERRIDES);
    if (kv && !(kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING))
        return; /* the metadata stage's finding */
    const uint64_t n_file = kv ? kv->arr_count : 0;
    bool same = n_file == c->opt.n_overrides;
    pn_str_walk walk = kv ? pn_str_walk_start(kv) : (pn_str_walk){ 0 };
    for (uint64_t i = 0; same && i < n_file; i++) {
        char want[320];
        pn_recipe_override_text(&c->opt.overrides[i], want, sizeof want);
        same = gguf_str_eq(pn_str_walk_next(&walk), want);
    }
    if (same)
        return;
    pn_check_add(c, PN_SEV_WARNING, "RECIPE-OVERRIDES", NULL, PN_KEY_MIX_OVERRIDES, -1,
                 "the file was made with %llu type override%s (%s%s), the check assumes %zu: give "
                 "pn-check the same --tensor-type, --output-tensor-type and "
                 "--token-embedding-type options as pn-quantize",
                 (unsigned long long)n_file, n_file == 1 ? "" : "s",
                 n_file ? PN_KEY_MIX_OVERRIDES : "none", n_file ? " lists them" : "",
                 c->opt.n_overrides);
}

pn_status pn_check_recipe(pn_check_ctx *c, pn_error *err)
{
    if (!c->opt.recipe_path)
        return PN_OK;
    pn_recipe *rc = NULL;
    pn_status st = pn_recipe_load(c->opt.recipe_path, &rc, err);
    if (st == PN_OK &&
        (st = pn_recipe_apply_overrides(rc, c->opt.overrides, c->opt.n_overrides, err)))
        pn_recipe_free(rc);
    if (st)
        return st;
    pn_check_report *rep = c->rep;
    rep->recipe_checked = true;
    rep->recipe_promote_n = (long)rc->promote;
    rep->recipe_mix = strdup(rc->name);
    rep->promoted = calloc(rep->n_tensors ? rep->n_tensors : 1, sizeof *rep->promoted);
    if (!rep->recipe_mix || !rep->promoted) {
        pn_recipe_free(rc);
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", rep->path);
    }

    const gguf_kv *promoted_kv = gguf_reader_find_kv(c->r, PN_KEY_MIX_PROMOTED);
    if (promoted_kv &&
        !(promoted_kv->type == GGUF_TYPE_ARRAY && promoted_kv->arr_type == GGUF_TYPE_STRING))
        promoted_kv = NULL;
    bool *listed = listed_as_promoted(c, promoted_kv);
    if (!listed) {
        pn_recipe_free(rc);
        return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", rep->path);
    }

    for (size_t i = 0; i < rep->n_tensors; i++) {
        const pn_check_tensor *t = &rep->tensors[i];
        if (t->too_many_weights)
            continue; /* already an error; a rule's row count would overflow */
        const pn_recipe_rule *rule = pn_recipe_match(rc, t->name, t->n_dims, t->ne);
        if (!rule) {
            pn_check_add(c, PN_SEV_WARNING, "RECIPE-UNMATCHED", t->name, NULL, -1,
                         "no rule of the recipe %s matches this tensor (K %" PRId64 ", %u dims)",
                         c->opt.recipe_path, t->ne[0], t->n_dims);
            continue;
        }
        int want = pn_recipe_rule_pick_type(rule, t->ne[0], NULL);
        if (want < 0) {
            pn_check_add(c, PN_SEV_WARNING, "RECIPE-UNMATCHED", t->name, NULL, -1,
                         "no type of the rule at %s:%d divides K = %" PRId64, c->opt.recipe_path,
                         rule->line, t->ne[0]);
            continue;
        }
        if (t->type == want)
            continue;
        /* a type the user typed (an override, line 0) is final: never a promotion */
        if (want == PN_TYPE_PN3T && t->type == PN_TYPE_PN4T && rule->line != 0) {
            rep->promoted[rep->n_promoted] = strdup(t->name);
            if (!rep->promoted[rep->n_promoted]) {
                c->nomem = true;
                break;
            }
            rep->n_promoted++;
            if (!listed[i])
                pn_check_add(c, PN_SEV_WARNING, "RECIPE-PROMOTION", t->name, PN_KEY_MIX_PROMOTED,
                             -1,
                             "stored as pn4t where the recipe gives pn3t (a promotion), "
                             "but " PN_KEY_MIX_PROMOTED " does not list it");
            continue;
        }
        pn_check_add(c, PN_SEV_WARNING, "RECIPE-TYPE", t->name, NULL, -1,
                     "stored as %s, the recipe gives %s (rule at %s:%d)", pn_type_name(t->type),
                     pn_type_name(want), c->opt.recipe_path, rule->line);
    }

    char expected[PN_MIX_NAME_MAX + 24];
    snprintf(expected, sizeof expected, "%s+%zu", rc->name, rep->n_promoted);
    rep->expected_mix = strdup(expected);
    if (!rep->expected_mix)
        c->nomem = true;
    const gguf_kv *mix = gguf_reader_find_kv(c->r, PN_KEY_MIX);
    if (mix && mix->type == GGUF_TYPE_STRING && !gguf_str_eq(mix->v.str, expected))
        pn_check_add(c, PN_SEV_WARNING, "RECIPE-MIX", NULL, PN_KEY_MIX, -1,
                     PN_KEY_MIX " is \"%.*s\"; with the recipe's mix \"%s\" and the %zu promotions "
                                "found it would be \"%s\"",
                     (int)(mix->v.str.len > 64 ? 64 : mix->v.str.len), mix->v.str.data, rc->name,
                     rep->n_promoted, expected);
    check_rotation(c, rc);
    check_file_type(c, rc);
    check_mtp(c, rc);
    check_overrides(c);
    free(listed);
    pn_recipe_free(rc);
    return PN_OK;
}
