/* test_imatrix.c - llama.cpp's importance matrix: both forms read as the
 * golden files of stock llama-imatrix say (tests/data/imatrix/PROVENANCE),
 * matched to a model's tensors, and every hostile file refused. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "fixtures/gguf_bytes.h"
#include "mix/imatrix.h"
#include "mix/plan.h"
#include "mix/recipe.h"
#include "test_util.h"

#define IMX_DIR PN_TEST_DATA "/imatrix"
#define IMX_GGUF IMX_DIR "/m4.imatrix.gguf"
#define IMX_DAT IMX_DIR "/m4.imatrix.dat"
#define IMX_NOOUT IMX_DIR "/m4.noout.imatrix.gguf"

static pn_imatrix *load_ok(const char *path)
{
    pn_imatrix *im = NULL;
    pn_error e;
    pn_error_clear(&e);
    pn_status st = pn_imatrix_load(path, &im, &e);
    cr_assert_eq(st, PN_OK, "%s: %s", path, e.msg);
    return im;
}

/* Parses bytes that must be refused; returns the message. */
static const char *refused(const void *p, size_t n, pn_status *code)
{
    static pn_error e;
    pn_error_clear(&e);
    pn_imatrix *im = NULL;
    pn_status st = pn_imatrix_parse(p, n, "hostile.imatrix", &im, &e);
    cr_assert_neq(st, PN_OK, "a hostile file of %zu bytes was read", n);
    cr_assert_null(im);
    cr_assert(strstr(e.msg, "hostile.imatrix") != NULL, "the message does not name the file: %s",
              e.msg);
    if (code)
        *code = st;
    return e.msg;
}

/* The golden model's tensors (m4.gguf.sha256.json: name, ne) planned with a
 * recipe that sends every 2-D weight to pn3t and the rest to f32. */
static pn_plan *golden_plan(void)
{
    json_error_t je;
    json_t *root = json_load_file(IMX_DIR "/m4.gguf.sha256.json", 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    json_t *ts = json_object_get(root, "tensors");
    size_t n = json_array_size(ts);
    cr_assert_gt(n, 30);
    pn_tensor_desc *d = calloc(n, sizeof *d);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(ts, i);
        json_t *ne = json_object_get(t, "ne");
        d[i].name = json_string_value(json_object_get(t, "name"));
        d[i].n_dims = (uint32_t)json_array_size(ne);
        for (int k = 0; k < 4; k++)
            d[i].ne[k] = k < (int)d[i].n_dims ? json_integer_value(json_array_get(ne, k)) : 1;
        d[i].src_type = 0;
    }
    const char *text = "mix T\nrotation none\npromote 0\nrule dims=1 => f32\n"
                       "rule *.ssm_conv1d.weight => f32\nrule * => pn3t|f32\n";
    pn_recipe *r = NULL;
    pn_error e;
    cr_assert_eq(pn_recipe_parse(text, strlen(text), "test", &r, &e), PN_OK, "%s", e.msg);
    pn_plan *plan = NULL;
    cr_assert_eq(pn_plan_build(r, d, n, &plan, NULL, &e), PN_OK, "%s", e.msg);
    pn_recipe_free(r);
    free(d);
    json_decref(root);
    return plan;
}

/* A plan of the given (name, K, rows, experts) tensors. */
typedef struct tshape {
    const char *name;
    int64_t k, rows, experts;
} tshape;
static pn_plan *plan_of(const tshape *s, size_t n)
{
    pn_tensor_desc d[16];
    cr_assert_leq(n, 16);
    for (size_t i = 0; i < n; i++) {
        memset(&d[i], 0, sizeof d[i]);
        d[i].name = s[i].name;
        d[i].n_dims = s[i].experts > 1 ? 3 : 2;
        d[i].ne[0] = s[i].k;
        d[i].ne[1] = s[i].rows;
        d[i].ne[2] = s[i].experts > 1 ? s[i].experts : 1;
        d[i].ne[3] = 1;
    }
    const char *text = "mix T\nrotation none\npromote 0\nrule * => pn3t|f32\n";
    pn_recipe *r = NULL;
    pn_error e;
    cr_assert_eq(pn_recipe_parse(text, strlen(text), "test", &r, &e), PN_OK, "%s", e.msg);
    pn_plan *plan = NULL;
    cr_assert_eq(pn_plan_build(r, d, n, &plan, NULL, &e), PN_OK, "%s", e.msg);
    pn_recipe_free(r);
    return plan;
}

/* ---- .dat bytes ---- */

typedef struct dat_entry {
    const char *name;
    size_t name_len; /* 0: strlen */
    int32_t ncall, nval;
    const float *vals; /* nval values */
} dat_entry;

static void put_i32(gb *b, int32_t v)
{
    gb_u32(b, (uint32_t)v);
}
static void put_f32(gb *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    gb_u32(b, u);
}
static void dat_bytes(gb *b, const dat_entry *e, int32_t n_declared, size_t n, bool trailer)
{
    put_i32(b, n_declared);
    for (size_t i = 0; i < n; i++) {
        size_t nl = e[i].name_len ? e[i].name_len : strlen(e[i].name);
        put_i32(b, (int32_t)nl);
        gb_put(b, e[i].name, nl);
        put_i32(b, e[i].ncall);
        put_i32(b, e[i].nval);
        for (int32_t j = 0; j < e[i].nval; j++)
            put_f32(b, e[i].vals[j]);
    }
    if (trailer) {
        put_i32(b, 8);
        put_i32(b, 5);
        gb_put(b, "GPL-3", 5);
    }
}

static const float V4[4] = { 8.0f, 16.0f, 0.0f, 4.0f };

/* A small GGUF imatrix: entries `names` with in_sum2 of ne [k, n_mat] and
 * counts [1, n_mat], sums s, counts c. */
static void gguf_imatrix_bytes(gb *b, const char *const *names, size_t n, int64_t k, int64_t n_mat,
                               float s, float c, const char *type)
{
    gb_header(b, 2 * n, type ? 4 : 3);
    if (type)
        gb_kv_str(b, "general.type", 12, type, strlen(type));
    gb_kv_str_array(b, "imatrix.datasets", 1);
    gb_str(b, "GPL-3", 5);
    gb_kv_u32(b, "imatrix.chunk_count", 8);
    gb_kv_u32(b, "imatrix.chunk_size", 128);
    uint64_t off = 0;
    const uint64_t sb = (uint64_t)(k * n_mat * 4 + 31) / 32 * 32,
                   cb = (uint64_t)(n_mat * 4 + 31) / 32 * 32;
    for (size_t i = 0; i < n; i++) {
        char nm[256];
        uint64_t ne_s[2] = { (uint64_t)k, (uint64_t)n_mat }, ne_c[2] = { 1, (uint64_t)n_mat };
        snprintf(nm, sizeof nm, "%s.in_sum2", names[i]);
        gb_tensor(b, nm, strlen(nm), n_mat > 1 ? 2 : 1, ne_s, 0, off);
        off += sb;
        snprintf(nm, sizeof nm, "%s.counts", names[i]);
        gb_tensor(b, nm, strlen(nm), n_mat > 1 ? 2 : 1, ne_c, 0, off);
        off += cb;
    }
    gb_pad(b, 32);
    for (size_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < k * n_mat; j++)
            put_f32(b, s + (float)j);
        gb_pad(b, 32);
        for (int64_t j = 0; j < n_mat; j++)
            put_f32(b, c);
        gb_pad(b, 32);
    }
}

/* ---- the golden files ---- */

Test(imatrix, the_golden_gguf_form_reads_with_its_keys_and_sum_over_count_weights)
{
    pn_imatrix *im = load_ok(IMX_GGUF);
    cr_assert_eq(im->form, PN_IMATRIX_GGUF);
    cr_assert_eq(im->n, 32);
    cr_assert_eq(im->chunk_count, 8);
    cr_assert_eq(im->chunk_size, 128);
    cr_assert_eq(im->n_datasets, 1);
    cr_assert_str_eq(im->dataset, "GPL-3");
    /* independently: the raw in_sum2 of every entry through the GGUF reader,
     * divided by the count the README gives (8 chunks x 128 tokens) */
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open(IMX_GGUF, &r, &e), PN_OK, "%s", e.msg);
    for (size_t i = 0; i < im->n; i++) {
        const pn_imatrix_entry *en = &im->entries[i];
        cr_assert_eq(en->count, 1024, "%s", en->name);
        cr_assert_eq(en->n_mat, 1);
        char nm[300];
        snprintf(nm, sizeof nm, "%s.in_sum2", en->name);
        long ti = gguf_reader_find_tensor(r, nm);
        cr_assert_geq(ti, 0, "%s", nm);
        const gguf_tensor_info *t = gguf_reader_tensor(r, (size_t)ti);
        cr_assert_eq(t->ne[0], en->n_vals);
        float *raw = malloc((size_t)t->size);
        cr_assert_eq(gguf_reader_read_tensor(r, (size_t)ti, 0, raw, (size_t)t->size, &e), PN_OK);
        for (int64_t j = 0; j < en->n_vals; j++) {
            float want = raw[j] / 1024.0f;
            cr_assert(memcmp(&want, &en->weights[j], 4) == 0, "%s col %lld: %a vs %a", en->name,
                      (long long)j, (double)en->weights[j], (double)want);
        }
        free(raw);
    }
    gguf_reader_close(r);
    const pn_imatrix_entry *down = pn_imatrix_find(im, "blk.0.ffn_down.weight");
    cr_assert_not_null(down);
    cr_assert_eq(down->n_vals, 4352);
    cr_assert_not_null(pn_imatrix_find(im, "output.weight"));
    cr_assert_null(pn_imatrix_find(im, "token_embd.weight"));
    pn_imatrix_free(im);
}

Test(imatrix, the_golden_dat_form_reads_with_its_trailer_and_value_over_ncall_weights)
{
    pn_imatrix *im = load_ok(IMX_DAT);
    cr_assert_eq(im->form, PN_IMATRIX_DAT);
    cr_assert_eq(im->n, 32);
    cr_assert_eq(im->chunk_count, 8);
    cr_assert_eq(im->chunk_size, 0);
    cr_assert_str_eq(im->dataset, "GPL-3");
    /* the first entry by hand (README: at byte 4, a 22-byte name, ncall 8,
     * 1280 values) */
    size_t n = 0;
    uint8_t *raw = tu_read_file(IMX_DAT, &n);
    int32_t len, ncall, nval;
    memcpy(&len, raw + 4, 4);
    cr_assert_eq(len, 22);
    cr_assert(memcmp(raw + 8, "blk.0.attn_gate.weight", 22) == 0);
    memcpy(&ncall, raw + 30, 4);
    memcpy(&nval, raw + 34, 4);
    cr_assert_eq(ncall, 8);
    cr_assert_eq(nval, 1280);
    const pn_imatrix_entry *en = pn_imatrix_find(im, "blk.0.attn_gate.weight");
    cr_assert_not_null(en);
    cr_assert_eq(en->count, 8);
    cr_assert_eq(en->n_vals, 1280);
    for (int j = 0; j < 1280; j++) {
        float v;
        memcpy(&v, raw + 38 + 4 * (size_t)j, 4);
        float want = v / 8.0f;
        cr_assert(memcmp(&want, &en->weights[j], 4) == 0, "col %d", j);
    }
    free(raw);
    pn_imatrix_free(im);
}

Test(imatrix, the_two_forms_of_one_run_give_the_same_weights_bit_for_bit)
{
    pn_imatrix *g = load_ok(IMX_GGUF), *d = load_ok(IMX_DAT);
    cr_assert_eq(g->n, d->n);
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open(IMX_GGUF, &r, &e), PN_OK, "%s", e.msg);
    size_t n = 0;
    uint8_t *raw = tu_read_file(IMX_DAT, &n);
    size_t at = 4;
    for (size_t i = 0; i < g->n; i++) {
        cr_assert_str_eq(g->entries[i].name, d->entries[i].name);
        cr_assert_eq(g->entries[i].n_vals, d->entries[i].n_vals);
        cr_assert(memcmp(g->entries[i].weights, d->entries[i].weights,
                         (size_t)g->entries[i].n_vals * 4) == 0,
                  "%s", g->entries[i].name);
        /* the relation the golden README states: value = (in_sum2 / count) *
         * ncall in float32, exactly (the .dat entries are in name order) */
        int32_t len;
        memcpy(&len, raw + at, 4);
        cr_assert(memcmp(raw + at + 4, g->entries[i].name, (size_t)len) == 0);
        at += 4 + (size_t)len + 8;
        char nm[300];
        snprintf(nm, sizeof nm, "%s.in_sum2", g->entries[i].name);
        long ti = gguf_reader_find_tensor(r, nm);
        const gguf_tensor_info *t = gguf_reader_tensor(r, (size_t)ti);
        float *s = malloc((size_t)t->size);
        cr_assert_eq(gguf_reader_read_tensor(r, (size_t)ti, 0, s, (size_t)t->size, &e), PN_OK);
        for (int64_t j = 0; j < t->ne[0]; j++) {
            float v, want = (s[j] / 1024.0f) * 8.0f;
            memcpy(&v, raw + at + 4 * (size_t)j, 4);
            cr_assert(memcmp(&v, &want, 4) == 0, "%s col %lld", nm, (long long)j);
        }
        at += 4 * (size_t)t->ne[0];
        free(s);
    }
    free(raw);
    gguf_reader_close(r);
    pn_imatrix_free(g);
    pn_imatrix_free(d);
}

Test(imatrix, weights_that_share_an_input_share_their_sums)
{
    pn_imatrix *im = load_ok(IMX_GGUF);
    const char *groups[][4] = {
        { "blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_alpha.weight",
          "blk.0.ssm_beta.weight" },
        { "blk.2.ffn_gate.weight", "blk.2.ffn_up.weight", NULL, NULL },
        { "blk.3.attn_q.weight", "blk.3.attn_k.weight", "blk.3.attn_v.weight", NULL },
    };
    for (size_t g = 0; g < 3; g++) {
        const pn_imatrix_entry *a = pn_imatrix_find(im, groups[g][0]);
        cr_assert_not_null(a);
        for (int k = 1; k < 4 && groups[g][k]; k++) {
            const pn_imatrix_entry *b = pn_imatrix_find(im, groups[g][k]);
            cr_assert_not_null(b, "%s", groups[g][k]);
            cr_assert(memcmp(a->weights, b->weights, (size_t)a->n_vals * 4) == 0, "%s",
                      groups[g][k]);
        }
    }
    pn_imatrix_free(im);
}

Test(imatrix, the_file_without_process_output_has_every_entry_but_output_weight)
{
    pn_imatrix *a = load_ok(IMX_GGUF), *b = load_ok(IMX_NOOUT);
    cr_assert_eq(b->n, 31);
    cr_assert_null(pn_imatrix_find(b, "output.weight"));
    for (size_t i = 0; i < b->n; i++)
        cr_assert_not_null(pn_imatrix_find(a, b->entries[i].name));
    pn_imatrix_free(a);
    pn_imatrix_free(b);
}

Test(imatrix, every_golden_entry_names_a_tensor_of_the_golden_model_and_fits_it)
{
    pn_plan *plan = golden_plan();
    const char *files[] = { IMX_GGUF, IMX_DAT, IMX_NOOUT };
    for (int f = 0; f < 3; f++) {
        pn_imatrix *im = load_ok(files[f]);
        size_t n_unknown = 9;
        char *unknown = NULL;
        pn_error e;
        cr_assert_eq(pn_imatrix_check_model(im, files[f], plan, &n_unknown, &unknown, &e), PN_OK,
                     "%s", e.msg);
        cr_assert_eq(n_unknown, 0);
        cr_assert_null(unknown);
        size_t used = 0;
        pn_imatrix_hash_used(im, plan, &used);
        cr_assert_eq(used, im->n);
        pn_imatrix_free(im);
    }
    /* the two forms hash alike; the file without output.weight does not */
    pn_imatrix *g = load_ok(IMX_GGUF), *d = load_ok(IMX_DAT), *o = load_ok(IMX_NOOUT);
    cr_assert_eq(pn_imatrix_hash_used(g, plan, NULL), pn_imatrix_hash_used(d, plan, NULL));
    cr_assert_neq(pn_imatrix_hash_used(g, plan, NULL), pn_imatrix_hash_used(o, plan, NULL));
    pn_imatrix_free(g);
    pn_imatrix_free(d);
    pn_imatrix_free(o);
    pn_plan_free(plan);
}

Test(imatrix, the_base_name_is_what_follows_the_last_slash)
{
    cr_assert_str_eq(pn_imatrix_base_name("/a/b/m4.imatrix.gguf"), "m4.imatrix.gguf");
    cr_assert_str_eq(pn_imatrix_base_name("m4.imatrix.dat"), "m4.imatrix.dat");
}

Test(imatrix, a_dat_count_of_zero_keeps_the_value_and_a_gguf_count_of_zero_gives_one)
{
    dat_entry e[1] = { { "a.weight", 0, 0, 4, V4 } };
    gb b = { 0 };
    dat_bytes(&b, e, 1, 1, false);
    pn_imatrix *im = NULL;
    pn_error err;
    cr_assert_eq(pn_imatrix_parse(b.p, b.n, "x.dat", &im, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(im->entries[0].weights[1], 16.0f);
    cr_assert_str_eq(im->dataset, "");
    pn_imatrix_free(im);
    free(b.p);
    const char *names[] = { "a.weight" };
    gb g = { 0 };
    gguf_imatrix_bytes(&g, names, 1, 64, 1, 3.0f, 0.0f, "imatrix");
    cr_assert_eq(pn_imatrix_parse(g.p, g.n, "x.gguf", &im, &err), PN_OK, "%s", err.msg);
    for (int j = 0; j < 64; j++)
        cr_assert_eq(im->entries[0].weights[j], 1.0f);
    pn_imatrix_free(im);
    free(g.p);
}

/* ---- hostile files ---- */

Test(imatrix_hostile, a_dat_cut_short_anywhere_is_refused)
{
    dat_entry e[2] = { { "blk.0.a.weight", 0, 8, 4, V4 }, { "blk.0.b.weight", 0, 8, 4, V4 } };
    gb b = { 0 };
    dat_bytes(&b, e, 2, 2, true);
    const size_t no_trailer = b.n - 13; /* a file without the trailer is whole */
    for (size_t cut = 0; cut < b.n; cut++) {
        if (cut == no_trailer)
            continue;
        refused(b.p, cut, NULL);
    }
    pn_imatrix *im = NULL;
    pn_error err;
    cr_assert_eq(pn_imatrix_parse(b.p, no_trailer, "x", &im, &err), PN_OK, "%s", err.msg);
    pn_imatrix_free(im);
    free(b.p);
    /* the golden file, cut at many places */
    size_t n = 0;
    uint8_t *raw = tu_read_file(IMX_DAT, &n);
    for (size_t cut = 0; cut < n; cut += 997)
        refused(raw, cut, NULL);
    free(raw);
}

Test(imatrix_hostile, a_gguf_imatrix_cut_short_anywhere_is_refused)
{
    size_t n = 0;
    uint8_t *raw = tu_read_file(IMX_GGUF, &n);
    for (size_t cut = 0; cut < n; cut += (cut < 4200 ? 1 : 1009))
        refused(raw, cut, NULL);
    free(raw);
}

Test(imatrix_hostile, an_entry_count_past_the_file_is_refused_before_allocating)
{
    dat_entry e[1] = { { "a.weight", 0, 8, 4, V4 } };
    gb b = { 0 };
    dat_bytes(&b, e, 0x7fffffff, 1, false);
    pn_status st;
    const char *m = refused(b.p, b.n, &st);
    cr_assert_eq(st, PN_ERR_TRUNCATED, "%s", m);
    cr_assert(strstr(m, "2147483647") != NULL, "%s", m);
    free(b.p);
    gb z = { 0 };
    dat_bytes(&z, e, 0, 0, false);
    refused(z.p, z.n, NULL);
    free(z.p);
}

Test(imatrix_hostile, a_name_length_or_value_count_past_the_file_is_refused)
{
    dat_entry e[1] = { { "a.weight", 0, 8, 4, V4 } };
    gb b = { 0 };
    dat_bytes(&b, e, 1, 1, false);
    int32_t big = 1000;
    memcpy(b.p + 4, &big, 4); /* the name length */
    pn_status st;
    const char *m = refused(b.p, b.n, &st);
    cr_assert_eq(st, PN_ERR_TRUNCATED, "%s", m);
    cr_assert(strstr(m, "entry 0") != NULL, "%s", m);
    big = -5;
    memcpy(b.p + 4, &big, 4);
    refused(b.p, b.n, NULL);
    big = 8;
    memcpy(b.p + 4, &big, 4);
    int32_t nval = 0x40000000;
    memcpy(b.p + 4 + 4 + 8 + 4, &nval, 4);
    m = refused(b.p, b.n, &st);
    cr_assert_eq(st, PN_ERR_TRUNCATED, "%s", m);
    cr_assert(strstr(m, "a.weight") != NULL, "%s", m);
    free(b.p);
}

Test(imatrix_hostile, a_name_with_a_terminal_escape_is_refused_and_shown_escaped)
{
    const char nm[] = "blk.0.\x1b]0;pwned\x07.weight";
    dat_entry e[1] = { { nm, 0, 8, 4, V4 } };
    gb b = { 0 };
    dat_bytes(&b, e, 1, 1, false);
    const char *m = refused(b.p, b.n, NULL);
    cr_assert_null(strchr(m, 0x1b), "the message carries the escape: %s", m);
    cr_assert(strstr(m, "\\x1b") != NULL, "%s", m);
    free(b.p);
    const char *names[] = { nm };
    gb g = { 0 };
    gguf_imatrix_bytes(&g, names, 1, 64, 1, 1.0f, 8.0f, "imatrix");
    m = refused(g.p, g.n, NULL);
    cr_assert_null(strchr(m, 0x1b), "%s", m);
    free(g.p);
}

Test(imatrix_hostile, an_entry_given_twice_is_refused_naming_it)
{
    dat_entry e[2] = { { "blk.1.x.weight", 0, 8, 4, V4 }, { "blk.1.x.weight", 0, 8, 4, V4 } };
    gb b = { 0 };
    dat_bytes(&b, e, 2, 2, true);
    const char *m = refused(b.p, b.n, NULL);
    cr_assert(strstr(m, "blk.1.x.weight") != NULL && strstr(m, "twice") != NULL, "%s", m);
    free(b.p);
}

Test(imatrix_hostile, nan_infinite_or_negative_sums_counts_or_values_are_refused)
{
    const float bad[3] = { NAN, INFINITY, -1.0f };
    for (int k = 0; k < 3; k++) {
        float v[4] = { 1, 2, 3, 4 };
        v[2] = bad[k];
        dat_entry e[1] = { { "a.weight", 0, 8, 4, v } };
        gb b = { 0 };
        dat_bytes(&b, e, 1, 1, false);
        const char *m = refused(b.p, b.n, NULL);
        cr_assert(strstr(m, "column 2") != NULL, "%s", m);
        free(b.p);
        const char *names[] = { "a.weight" };
        gb g = { 0 };
        gguf_imatrix_bytes(&g, names, 1, 64, 1, bad[k], 8.0f, "imatrix");
        m = refused(g.p, g.n, NULL);
        cr_assert(strstr(m, "a.weight.in_sum2") != NULL, "%s", m);
        free(g.p);
        gb c = { 0 };
        gguf_imatrix_bytes(&c, names, 1, 64, 1, 1.0f, bad[k], "imatrix");
        m = refused(c.p, c.n, NULL);
        cr_assert(strstr(m, "a.weight.counts") != NULL, "%s", m);
        free(c.p);
    }
    dat_entry e[1] = { { "a.weight", 0, -3, 4, V4 } };
    gb b = { 0 };
    dat_bytes(&b, e, 1, 1, false);
    const char *m = refused(b.p, b.n, NULL);
    cr_assert(strstr(m, "ncall") != NULL, "%s", m);
    free(b.p);
}

Test(imatrix_hostile, bytes_after_the_trailer_are_refused)
{
    dat_entry e[1] = { { "a.weight", 0, 8, 4, V4 } };
    gb b = { 0 };
    dat_bytes(&b, e, 1, 1, true);
    gb_put(&b, "xyz", 3);
    refused(b.p, b.n, NULL);
    free(b.p);
}

Test(imatrix_hostile, a_gguf_that_is_not_an_imatrix_is_refused)
{
    const char *names[] = { "a.weight" };
    gb g = { 0 };
    gguf_imatrix_bytes(&g, names, 1, 64, 1, 1.0f, 8.0f, "model");
    const char *m = refused(g.p, g.n, NULL);
    cr_assert(strstr(m, "not an imatrix") != NULL, "%s", m);
    free(g.p);
    gb h = { 0 };
    gguf_imatrix_bytes(&h, names, 1, 64, 1, 1.0f, 8.0f, NULL);
    m = refused(h.p, h.n, NULL);
    cr_assert(strstr(m, "not an imatrix") != NULL, "%s", m);
    free(h.p);
    /* a model file of the project is no imatrix either */
    gb k = { 0 };
    gb_header(&k, 1, 1);
    gb_kv_str(&k, "general.architecture", 20, "qwen35", 6);
    uint64_t ne[2] = { 64, 2 };
    gb_tensor(&k, "blk.0.ffn_up.weight", 19, 2, ne, 0, 0);
    gb_pad(&k, 32);
    for (int j = 0; j < 128; j++)
        put_f32(&k, 1.0f);
    m = refused(k.p, k.n, NULL);
    cr_assert(strstr(m, "not an imatrix") != NULL, "%s", m);
    free(k.p);
}

Test(imatrix_hostile, a_gguf_imatrix_missing_a_key_or_a_half_entry_is_refused)
{
    const char *names[] = { "a.weight" };
    gb g = { 0 };
    gb_header(&g, 1, 3);
    gb_kv_str(&g, "general.type", 12, "imatrix", 7);
    gb_kv_str_array(&g, "imatrix.datasets", 1);
    gb_str(&g, "GPL-3", 5);
    gb_kv_u32(&g, "imatrix.chunk_count", 8);
    uint64_t ne[1] = { 64 };
    gb_tensor(&g, "a.weight.in_sum2", 16, 1, ne, 0, 0);
    gb_pad(&g, 32);
    for (int j = 0; j < 64; j++)
        put_f32(&g, 1.0f);
    const char *m = refused(g.p, g.n, NULL);
    cr_assert(strstr(m, "imatrix.chunk_size") != NULL, "%s", m);
    free(g.p);
    (void)names;
    gb h = { 0 };
    gb_header(&h, 1, 4);
    gb_kv_str(&h, "general.type", 12, "imatrix", 7);
    gb_kv_str_array(&h, "imatrix.datasets", 1);
    gb_str(&h, "GPL-3", 5);
    gb_kv_u32(&h, "imatrix.chunk_count", 8);
    gb_kv_u32(&h, "imatrix.chunk_size", 128);
    gb_tensor(&h, "a.weight.in_sum2", 16, 1, ne, 0, 0);
    gb_pad(&h, 32);
    for (int j = 0; j < 64; j++)
        put_f32(&h, 1.0f);
    m = refused(h.p, h.n, NULL);
    cr_assert(strstr(m, "a.weight") != NULL && strstr(m, "no counts") != NULL, "%s", m);
    free(h.p);
}

Test(imatrix_hostile, k_that_is_not_the_tensors_is_refused_naming_both)
{
    tshape s[1] = { { "blk.0.ffn_up.weight", 128, 4, 1 } };
    pn_plan *plan = plan_of(s, 1);
    const char *names[] = { "blk.0.ffn_up.weight" };
    gb g = { 0 };
    gguf_imatrix_bytes(&g, names, 1, 64, 1, 1.0f, 8.0f, "imatrix");
    pn_imatrix *im = NULL;
    pn_error e;
    cr_assert_eq(pn_imatrix_parse(g.p, g.n, "m.imatrix", &im, &e), PN_OK, "%s", e.msg);
    size_t nu;
    cr_assert_eq(pn_imatrix_check_model(im, "m.imatrix", plan, &nu, NULL, &e), PN_ERR_MISMATCH);
    cr_assert(strstr(e.msg, "blk.0.ffn_up.weight") && strstr(e.msg, "64") && strstr(e.msg, "128"),
              "%s", e.msg);
    pn_imatrix_free(im);
    free(g.p);
    pn_plan_free(plan);
}

Test(imatrix_hostile, n_mat_other_than_one_for_a_dense_tensor_is_refused)
{
    tshape s[1] = { { "blk.0.ffn_up.weight", 64, 4, 1 } };
    pn_plan *plan = plan_of(s, 1);
    const char *names[] = { "blk.0.ffn_up.weight" };
    gb g = { 0 };
    gguf_imatrix_bytes(&g, names, 1, 64, 2, 1.0f, 8.0f, "imatrix");
    pn_imatrix *im = NULL;
    pn_error e;
    cr_assert_eq(pn_imatrix_parse(g.p, g.n, "m.imatrix", &im, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(im->entries[0].n_mat, 2);
    size_t nu;
    cr_assert_eq(pn_imatrix_check_model(im, "m.imatrix", plan, &nu, NULL, &e), PN_ERR_MISMATCH);
    cr_assert(strstr(e.msg, "2 matrices") != NULL, "%s", e.msg);
    pn_imatrix_free(im);
    free(g.p);
    pn_plan_free(plan);
    /* and an expert tensor takes one matrix per expert */
    tshape x[1] = { { "blk.0.ffn_up_exps.weight", 64, 4, 2 } };
    plan = plan_of(x, 1);
    const char *xn[] = { "blk.0.ffn_up_exps.weight" };
    gb h = { 0 };
    gguf_imatrix_bytes(&h, xn, 1, 64, 2, 1.0f, 8.0f, "imatrix");
    cr_assert_eq(pn_imatrix_parse(h.p, h.n, "m.imatrix", &im, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(pn_imatrix_check_model(im, "m.imatrix", plan, &nu, NULL, &e), PN_OK, "%s", e.msg);
    pn_imatrix_free(im);
    free(h.p);
    pn_plan_free(plan);
}

Test(imatrix_hostile, an_imatrix_of_another_model_is_refused_and_unknown_names_reported)
{
    tshape s[2] = { { "blk.0.ffn_up.weight", 64, 4, 1 }, { "blk.0.ffn_down.weight", 64, 4, 1 } };
    pn_plan *plan = plan_of(s, 2);
    const char *other[] = { "model.layers.0.mlp.up_proj.weight", "z.weight" };
    gb g = { 0 };
    gguf_imatrix_bytes(&g, other, 2, 64, 1, 1.0f, 8.0f, "imatrix");
    pn_imatrix *im = NULL;
    pn_error e;
    cr_assert_eq(pn_imatrix_parse(g.p, g.n, "o.imatrix", &im, &e), PN_OK, "%s", e.msg);
    size_t nu;
    cr_assert_eq(pn_imatrix_check_model(im, "o.imatrix", plan, &nu, NULL, &e), PN_ERR_MISMATCH);
    cr_assert(strstr(e.msg, "another model") != NULL, "%s", e.msg);
    pn_imatrix_free(im);
    free(g.p);
    const char *some[] = { "blk.0.ffn_up.weight", "blk.9.\x1b[2Jgone.weight" };
    /* the escape is refused at read; a printable unknown name is reported */
    const char *some2[] = { "blk.0.ffn_up.weight", "blk.9.gone.weight" };
    (void)some;
    gb h = { 0 };
    gguf_imatrix_bytes(&h, some2, 2, 64, 1, 1.0f, 8.0f, "imatrix");
    cr_assert_eq(pn_imatrix_parse(h.p, h.n, "o.imatrix", &im, &e), PN_OK, "%s", e.msg);
    char *unknown = NULL;
    cr_assert_eq(pn_imatrix_check_model(im, "o.imatrix", plan, &nu, &unknown, &e), PN_OK, "%s",
                 e.msg);
    cr_assert_eq(nu, 1);
    cr_assert_str_eq(unknown, "blk.9.gone.weight\n");
    free(unknown);
    pn_imatrix_free(im);
    free(h.p);
    pn_plan_free(plan);
}
