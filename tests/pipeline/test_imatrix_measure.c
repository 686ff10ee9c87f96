/* pn-quantize with an importance matrix (issue 30):
 * the promotion measurement weighted through the rotation, pinned against an
 * implementation written here; the promoted list following the weights; the
 * candidates without an entry; the identity in the output and in the
 * --measurement file.
 *
 * Here the tests that call the library; those that run the built programs
 * are in tests/programs/test_imatrix_measure_cli.c. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "hadamard/hadamard.h"
#include "mix/imatrix.h"
#include "mix/measurement.h"
#include "pipeline/quantize.h"
#include "quant/pn.h"
#include "quant/types.h"
#include "quant/widen.h"
#include "fixtures/imatrix_files.h"
#include "fixtures/pn_source.h"
#include "fixtures/scratch.h"
#include "test_util.h"

/* ---- the independent implementation of the rule ------------------------ */

/* The normalised block Hadamard on doubles, written here: level by level
 * (h = 1, 2, ..., B/2), each index j without bit h paired with j + h. */
static void my_unrotate(double *e, int64_t K, int B)
{
    if (B <= 1)
        return;
    for (int64_t base = 0; base < K; base += B)
        for (int h = 1; h < B; h <<= 1)
            for (int j = 0; j < B; j++)
                if (!(j & h)) {
                    double a = e[base + j], b = e[base + j + h];
                    e[base + j] = a + b;
                    e[base + j + h] = a - b;
                }
    const double s = 1.0 / sqrt((double)B);
    for (int64_t j = 0; j < K; j++)
        e[j] = e[j] * s;
}

/* E3, E4 weighted, for tensor i of src, rows sampled as the contract says;
 * *far (may be NULL) gets the largest relative gap between the error taken
 * back by butterflies and by the explicit matrix H[i][j] = (-1)^popcount(i&j)
 * / sqrt(B) (the algebra, not the bits). */
static void reference_weighted(const char *src, size_t i, int64_t max_rows, const float *v,
                               double *e3, double *e4, double *far)
{
    gguf_reader *s;
    pn_error err;
    cr_assert_eq(gguf_reader_open(src, &s, &err), PN_OK, "%s", err.msg);
    const gguf_tensor_info *t = gguf_reader_tensor(s, i);
    const int64_t K = t->ne[0], rows = t->ne[1] * t->ne[2];
    const int B = pn_hadamard_block_size(K, 1024);
    const int64_t src_row = pn_type_row_bytes(t->type, K);
    int64_t *sample = malloc((size_t)rows * sizeof *sample);
    int64_t ns = tu_sample_rows(rows, max_rows, sample);
    uint8_t *raw = malloc((size_t)src_row), *q = malloc((size_t)K * 2);
    float *x0 = malloc((size_t)K * 4), *x = malloc((size_t)K * 4), *y = malloc((size_t)K * 4);
    double *e = malloc((size_t)K * 8), *em = malloc((size_t)K * 8);
    double err3 = 0, err4 = 0, norm = 0, gap = 0;
    for (int64_t k = 0; k < ns; k++) {
        cr_assert_eq(gguf_reader_read_tensor(s, i, (uint64_t)(sample[k] * src_row), raw,
                                             (size_t)src_row, &err),
                     PN_OK);
        pn_widen_row(t->type, raw, x0, K);
        const float *ve = v + (sample[k] / t->ne[1]) * K; /* an expert's own weights */
        memcpy(x, x0, (size_t)K * 4);
        pn_hadamard_rotate_row_ref(x, K, B);
        double rs[2] = { 0, 0 }, rn = 0;
        for (int ty = 0; ty < 2; ty++) {
            const int type = ty ? PN_TYPE_PN4T : PN_TYPE_PN3T;
            cr_assert_eq(pn_quantize_row_ref(type, x, K, q, NULL), PN_OK);
            pn_dequantize_row(type, q, y, K);
            for (int64_t j = 0; j < K; j++)
                e[j] = (double)x[j] - (double)y[j];
            if (far && k < 3) {
                for (int64_t b0 = 0; b0 < K; b0 += B)
                    for (int r = 0; r < B; r++) {
                        double acc = 0;
                        for (int c = 0; c < B; c++)
                            acc += (__builtin_popcount((unsigned)(r & c)) & 1 ? -1.0 : 1.0) *
                                   e[b0 + c];
                        em[b0 + r] = acc / sqrt((double)B);
                    }
            }
            my_unrotate(e, K, B);
            if (far && k < 3)
                for (int64_t j = 0; j < K; j++) {
                    double d = fabs(e[j] - em[j]) / (fabs(em[j]) + 1e-30);
                    if (fabs(em[j]) > 1e-12 && d > gap)
                        gap = d;
                }
            for (int64_t j = 0; j < K; j++)
                rs[ty] = rs[ty] + (double)ve[j] * (e[j] * e[j]);
        }
        for (int64_t j = 0; j < K; j++)
            rn = rn + (double)ve[j] * ((double)x0[j] * (double)x0[j]);
        err3 = err3 + rs[0];
        err4 = err4 + rs[1];
        norm = norm + rn;
    }
    *e3 = norm > 0 ? err3 / norm : 0;
    *e4 = norm > 0 ? err4 / norm : 0;
    if (far)
        *far = gap;
    free(sample);
    free(raw);
    free(q);
    free(x0);
    free(x);
    free(y);
    free(e);
    free(em);
    gguf_reader_close(s);
}

static void base_opts(pn_quantize_opts *o, const char *src, const char *recipe)
{
    pn_quantize_opts_init(o);
    o->src_path = src;
    o->recipe_path = recipe;
    o->threads = 1;
    o->backend = PN_BACKEND_CPU;
    o->dry_run = true;
}

static const char g_recipe[] = "mix M\nrotation hadamard 1024\npromote 1\n"
                               "rule *.weight => pn3t\n";

Test(imatrix_measure,
     the_weighted_sums_equal_an_independent_implementation_at_any_threads_and_chunk, .init = setup,
     .fini = teardown)
{
    /* rows measured whole, a row of 20480 measured in pieces when the chunk
     * is smaller, and three rotation blocks (256, 1024, 64) */
    static const sf_spec cands[] = {
        { "a.attn_q.weight", 2, 1280, 300, PN_TYPE_BF16 },
        { "b.ffn_up.weight", 2, 20480, 3, PN_TYPE_F32 },
        { "c.attn_qkv.weight", 2, 320, 7, PN_TYPE_F16 },
    };
    const char *names[] = { "a.attn_q.weight", "b.ffn_up.weight", "c.attn_qkv.weight" };
    const int64_t K[] = { 1280, 20480, 320 };
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix"), *imx = path_in("w.dat");
    sf_write_model(src, cands, 3, 5);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    imatrix_write_dat(imx, names, K, 3, imatrix_w_varied);
    double e3[3], e4[3];
    for (size_t i = 0; i < 3; i++) {
        float *v = malloc((size_t)K[i] * 4);
        for (int64_t j = 0; j < K[i]; j++)
            v[j] = imatrix_w_varied(i, j);
        double far = 1;
        reference_weighted(src, i, 100, v, &e3[i], &e4[i], &far);
        cr_assert_lt(far, 1e-9, "%s: butterflies and the matrix differ by %g", names[i], far);
        free(v);
    }
    /* and unweighted figures differ: the weights did something */
    const int64_t chunks[] = { 256, 5000, 0 };
    for (size_t ci = 0; ci < 3; ci++)
        for (int th = 1; th <= 2; th++) {
            char *mpath = path_in("m.txt");
            pn_quantize_opts o;
            base_opts(&o, src, recipe);
            o.measure_rows = 100;
            o.measurement_path = mpath;
            o.threads = th;
            o.chunk_weights = chunks[ci];
            o.imatrix_path = imx;
            o.imatrix_promotion = true; /* the measurement weighted */
            pn_error err;
            cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
            pn_measurement *m;
            cr_assert_eq(pn_measurement_load(mpath, &m, NULL, &err), PN_OK, "%s", err.msg);
            cr_assert_eq(m->n, 3);
            cr_assert(m->params.weighted);
            for (size_t i = 0; i < 3; i++)
                cr_assert(memcmp(&m->entries[i].e3, &e3[i], 8) == 0 &&
                              memcmp(&m->entries[i].e4, &e4[i], 8) == 0,
                          "%s, chunk %lld, %d threads: E3 %.17g E4 %.17g, expected %.17g %.17g",
                          names[i], (long long)chunks[ci], th, m->entries[i].e3, m->entries[i].e4,
                          e3[i], e4[i]);
            pn_measurement_free(m);
            unlink(mpath);
            free(mpath);
        }
    free(src);
    free(recipe);
    free(imx);
}

/* An expert tensor: each expert's rows are weighted by its own matrix of
 * the imatrix (GGUF form, n_mat = 2). */
Test(imatrix_measure, an_expert_tensors_rows_take_their_experts_weights, .init = setup,
     .fini = teardown)
{
    char *src = path_in("moe.gguf"), *recipe = path_in("r.mix"), *imx = path_in("moe.imatrix"),
         *mpath = path_in("m.txt");
    const int64_t K = 640, R = 5, E = 2;
    gguf_writer *w = gguf_writer_new();
    pn_error err;
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "test"), PN_OK);
    int64_t ne[4] = { K, R, E, 1 };
    cr_assert_eq(gguf_writer_add_tensor(w, "blk.0.ffn_up_exps.weight", 3, ne, PN_TYPE_F32, &err),
                 PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_begin(w, src, &err), PN_OK, "%s", err.msg);
    tu_rng rng = { 3 };
    float *buf = malloc((size_t)(K * R * E) * 4);
    for (int64_t e = 0; e < K * R * E; e++)
        buf[e] = (float)tu_rng_gauss(&rng);
    cr_assert_eq(gguf_writer_write(w, buf, (size_t)(K * R * E) * 4, &err), PN_OK);
    free(buf);
    cr_assert_eq(gguf_writer_close(w, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_commit(w, &err), PN_OK, "%s", err.msg);
    gguf_writer_free(w);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    /* the imatrix: in_sum2 [K, 2] of imatrix_w_varied for expert 0 and its square
     * for expert 1, counts [1, 2] = 1 */
    w = gguf_writer_new();
    gguf_writer_set_str(w, "general.type", "imatrix");
    const char *ds[] = { "t" };
    gguf_writer_set_arr_str(w, "imatrix.datasets", ds, 1);
    gguf_writer_set_u32(w, "imatrix.chunk_count", 1);
    gguf_writer_set_u32(w, "imatrix.chunk_size", 1);
    int64_t ns[4] = { K, E, 1, 1 }, nc[4] = { 1, E, 1, 1 };
    cr_assert_eq(
        gguf_writer_add_tensor(w, "blk.0.ffn_up_exps.weight.counts", 2, nc, PN_TYPE_F32, &err),
        PN_OK, "%s", err.msg);
    cr_assert_eq(
        gguf_writer_add_tensor(w, "blk.0.ffn_up_exps.weight.in_sum2", 2, ns, PN_TYPE_F32, &err),
        PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_begin(w, imx, &err), PN_OK, "%s", err.msg);
    float counts[2] = { 1.0f, 1.0f };
    cr_assert_eq(gguf_writer_write(w, counts, sizeof counts, &err), PN_OK);
    float *v = malloc((size_t)(K * E) * 4);
    for (int64_t j = 0; j < K; j++) {
        v[j] = imatrix_w_varied(0, j);
        v[K + j] = v[j] * v[j] * 7.0f;
    }
    cr_assert_eq(gguf_writer_write(w, v, (size_t)(K * E) * 4, &err), PN_OK);
    cr_assert_eq(gguf_writer_close(w, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_commit(w, &err), PN_OK, "%s", err.msg);
    gguf_writer_free(w);
    double e3, e4, far;
    reference_weighted(src, 0, 256, v, &e3, &e4, &far);
    pn_quantize_opts o;
    base_opts(&o, src, recipe);
    o.measurement_path = mpath;
    o.imatrix_path = imx;
    o.imatrix_promotion = true; /* the measurement weighted */
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
    pn_measurement *m;
    cr_assert_eq(pn_measurement_load(mpath, &m, NULL, &err), PN_OK, "%s", err.msg);
    cr_assert(memcmp(&m->entries[0].e3, &e3, 8) == 0 && memcmp(&m->entries[0].e4, &e4, 8) == 0,
              "E3 %.17g E4 %.17g, expected %.17g %.17g", m->entries[0].e3, m->entries[0].e4, e3,
              e4);
    /* and not what the first expert's weights everywhere give */
    float *v0 = malloc((size_t)(K * E) * 4);
    memcpy(v0, v, (size_t)K * 4);
    memcpy(v0 + K, v, (size_t)K * 4);
    double f3, f4;
    reference_weighted(src, 0, 256, v0, &f3, &f4, NULL);
    cr_assert(f3 != e3);
    pn_measurement_free(m);
    free(v);
    free(v0);
    free(src);
    free(recipe);
    free(imx);
    free(mpath);
}

static void promoted_with(const char *src, const char *recipe, const char *imx, char *first,
                          double gain[2])
{
    char *mpath = path_in("pair.txt");
    unlink(mpath);
    pn_quantize_opts o;
    base_opts(&o, src, recipe);
    o.rotation_cap = 0;
    o.measurement_path = mpath;
    o.imatrix_path = imx;
    o.imatrix_promotion = true; /* the measurement weighted */
    o.promote = 1;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
    pn_measurement *m;
    cr_assert_eq(pn_measurement_load(mpath, &m, NULL, &err), PN_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++)
        gain[i] = m->entries[i].e3 - m->entries[i].e4;
    strcpy(first, gain[1] > gain[0] ? m->entries[1].name : m->entries[0].name);
    pn_measurement_free(m);
    free(mpath);
}

Test(imatrix_measure, with_one_heavy_channel_the_promoted_tensor_is_the_one_the_weights_name,
     .init = setup, .fini = teardown)
{
    char *src = path_in("pair.gguf"), *recipe = path_in("r.mix"), *imx = path_in("heavy.dat");
    imatrix_write_pair(src);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    const char *names[] = { "a.ffn_up.weight", "b.ffn_up.weight" };
    const int64_t K[] = { 320, 320 };
    imatrix_write_dat(imx, names, K, 2, imatrix_w_heavy);
    char plain[64], weighted[64];
    double g0[2], g1[2];
    promoted_with(src, recipe, NULL, plain, g0);
    promoted_with(src, recipe, imx, weighted, g1);
    cr_assert_str_eq(plain, "b.ffn_up.weight", "unweighted gains a %g b %g", g0[0], g0[1]);
    cr_assert_str_eq(weighted, "a.ffn_up.weight", "weighted gains a %g b %g", g1[0], g1[1]);
    /* a's weights are uniform: its figures are the unweighted ones */
    cr_assert_float_eq(g1[0], g0[0], 1e-12 * fabs(g0[0]) + 1e-300);
    free(src);
    free(recipe);
    free(imx);
}

Test(imatrix_measure, a_candidate_without_an_entry_is_an_error_naming_it_unless_unweighted_is_asked,
     .init = setup, .fini = teardown)
{
    char *src = path_in("pair.gguf"), *recipe = path_in("r.mix"), *imx = path_in("half.dat");
    imatrix_write_pair(src);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    const char *names[] = { "b.ffn_up.weight" };
    const int64_t K[] = { 320 };
    imatrix_write_dat(imx, names, K, 1, imatrix_w_heavy);
    pn_quantize_opts o;
    base_opts(&o, src, recipe);
    o.imatrix_path = imx;
    o.imatrix_promotion = true; /* the measurement weighted */
    o.promote = 1;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "a.ffn_up.weight") && strstr(err.msg, "--imatrix-missing"), "%s",
              err.msg);
    cr_assert_null(strstr(err.msg, "b.ffn_up.weight"), "%s", err.msg);
    o.imatrix_missing_unweighted = true;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
    free(src);
    free(recipe);
    free(imx);
}

static void keep_note(const char *msg, void *user)
{
    tu_keep_note(msg, user);
}

Test(imatrix_measure, a_measurement_of_another_imatrix_or_of_none_is_measured_again, .init = setup,
     .fini = teardown)
{
    char *src = path_in("pair.gguf"), *recipe = path_in("r.mix"), *a = path_in("a.dat"),
         *b = path_in("b.dat"), *mpath = path_in("m.txt");
    imatrix_write_pair(src);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    const char *names[] = { "a.ffn_up.weight", "b.ffn_up.weight" };
    const int64_t K[] = { 320, 320 };
    imatrix_write_dat(a, names, K, 2, imatrix_w_heavy);
    imatrix_write_dat(b, names, K, 2, imatrix_w_varied);
    const char *runs[] = { NULL, a, a, b, NULL };
    const bool again[] = { false, true, false, true, true };
    for (int r = 0; r < 5; r++) {
        tu_notes notes = { { 0 } };
        pn_quantize_opts o;
        base_opts(&o, src, recipe);
        o.measurement_path = mpath;
        o.imatrix_path = runs[r];
        o.imatrix_promotion = runs[r] != NULL;
        o.promote = 1;
        o.note = keep_note;
        o.user = &notes;
        pn_error err;
        cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
        if (r == 0)
            continue;
        if (again[r])
            cr_assert(strstr(notes.text, "another importance matrix") &&
                          strstr(notes.text, "measuring again"),
                      "run %d: %s", r, notes.text);
        else
            cr_assert(strstr(notes.text, "read from"), "run %d: %s", r, notes.text);
    }
    free(src);
    free(recipe);
    free(a);
    free(b);
    free(mpath);
}

Test(imatrix_measure, the_output_records_the_imatrix_in_llama_quantizes_keys_and_ours,
     .init = setup, .fini = teardown)
{
    char *src = path_in("pair.gguf"), *recipe = path_in("r.mix"), *imx = path_in("heavy.dat"),
         *dst = path_in("out.gguf");
    imatrix_write_pair(src);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    const char *names[] = { "a.ffn_up.weight", "b.ffn_up.weight", "not.in.model" };
    const int64_t K[] = { 320, 320, 64 };
    imatrix_write_dat(imx, names, K, 3, imatrix_w_heavy);
    pn_quantize_opts o;
    base_opts(&o, src, recipe);
    o.dry_run = false;
    o.dst_path = dst;
    o.imatrix_path = imx;
    o.imatrix_promotion = true; /* the measurement weighted */
    o.promote = 1;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
    gguf_reader *r;
    cr_assert_eq(gguf_reader_open(dst, &r, &err), PN_OK, "%s", err.msg);
    const gguf_kv *kv = gguf_reader_find_kv(r, "quantize.imatrix.file");
    cr_assert(kv && kv->type == GGUF_TYPE_STRING && gguf_str_eq(kv->v.str, "heavy.dat"));
    kv = gguf_reader_find_kv(r, "quantize.imatrix.dataset");
    cr_assert(kv && kv->type == GGUF_TYPE_STRING && gguf_str_eq(kv->v.str, "text"));
    kv = gguf_reader_find_kv(r, "quantize.imatrix.entries_count");
    cr_assert(kv && kv->type == GGUF_TYPE_UINT32 && kv->v.u64 == 3);
    kv = gguf_reader_find_kv(r, "quantize.imatrix.chunks_count");
    cr_assert(kv && kv->type == GGUF_TYPE_UINT32 && kv->v.u64 == 4);
    kv = gguf_reader_find_kv(r, "pn.mix.imatrix.entries_used");
    cr_assert(kv && kv->type == GGUF_TYPE_UINT32 && kv->v.u64 == 2);
    /* the hash of the two entries used, computed here */
    uint64_t h = 0xcbf29ce484222325ull;
    for (int t = 0; t < 2; t++) {
        const char *nm = names[t];
        for (size_t i = 0; i <= strlen(nm); i++) {
            h ^= (uint8_t)nm[i];
            h *= 0x100000001b3ull;
        }
        uint64_t n = 320;
        for (int i = 0; i < 8; i++) {
            h ^= (uint8_t)(n >> (8 * i));
            h *= 0x100000001b3ull;
        }
        for (int64_t j = 0; j < 320; j++) {
            float f = imatrix_w_heavy((size_t)t, j);
            uint32_t u;
            memcpy(&u, &f, 4);
            for (int i = 0; i < 4; i++) {
                h ^= (uint8_t)(u >> (8 * i));
                h *= 0x100000001b3ull;
            }
        }
    }
    kv = gguf_reader_find_kv(r, "pn.mix.imatrix.entries_fnv1a64");
    cr_assert(kv && kv->type == GGUF_TYPE_UINT64 && kv->v.u64 == h, "%llx vs %llx",
              kv ? (unsigned long long)kv->v.u64 : 0ull, (unsigned long long)h);
    gguf_reader_close(r);
    free(src);
    free(recipe);
    free(imx);
    free(dst);
}

/* ---- --reuse, pn-check, the programs ------------------------------------ */

/* A model with a pn3t candidate and a q4_K output.weight. */
static const sf_spec g_kq_specs[] = {
    { "a.ffn_up.weight", 2, 1280, 8, PN_TYPE_F32 },
    { "output.weight", 2, 512, 16, PN_TYPE_F32 },
};
static const char g_kq_recipe[] = "mix K\nrotation hadamard 1024\npromote 1\n"
                                  "rule output.weight => q4_K\nrule * => pn3t\n";

static void write_kq(char **src, char **recipe, char **imx_a, char **imx_b)
{
    *src = path_in("kq.gguf");
    *recipe = path_in("kq.mix");
    *imx_a = path_in("a.dat");
    *imx_b = path_in("b.dat");
    sf_write_model(*src, g_kq_specs, 2, 9);
    cr_assert_eq(tu_write_file(*recipe, g_kq_recipe, strlen(g_kq_recipe)), 0);
    const char *names[] = { "a.ffn_up.weight", "output.weight" };
    const int64_t K[] = { 1280, 512 };
    imatrix_write_dat(*imx_a, names, K, 2, imatrix_w_varied);
    imatrix_write_dat(*imx_b, names, K, 2, imatrix_w_ones);
}

static void quantize_to(const char *src, const char *recipe, const char *imx, const char *reuse,
                        const char *dst, tu_notes *notes)
{
    pn_quantize_opts o;
    base_opts(&o, src, recipe);
    o.dry_run = false;
    o.dst_path = dst;
    o.imatrix_path = imx;
    o.imatrix_promotion = true; /* the measurement weighted */
    o.reuse_path = reuse;
    o.force = true;
    o.note = keep_note;
    o.user = notes;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
}

static bool same_bytes(const char *a, const char *b)
{
    size_t na, nb;
    uint8_t *pa = tu_read_file(a, &na), *pb = tu_read_file(b, &nb);
    bool same = na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return same;
}

Test(imatrix_measure, reuse_never_copies_a_q4_K_tensor_made_with_another_imatrix, .init = setup,
     .fini = teardown)
{
    char *src, *recipe, *a, *b;
    write_kq(&src, &recipe, &a, &b);
    char *prev = path_in("prev.gguf"), *fresh = path_in("fresh.gguf"), *out = path_in("out.gguf"),
         *plain = path_in("plain.gguf");
    tu_notes n0 = { { 0 } }, n1 = { { 0 } }, n2 = { { 0 } }, n3 = { { 0 } };
    quantize_to(src, recipe, a, NULL, prev, &n0);
    quantize_to(src, recipe, b, NULL, fresh, &n0);
    quantize_to(src, recipe, NULL, NULL, plain, &n0);
    /* the weights changed output.weight's bytes: the case is real */
    cr_assert_not(same_bytes(prev, fresh));
    quantize_to(src, recipe, b, prev, out, &n1);
    cr_assert(same_bytes(out, fresh), "reuse across imatrices changed the bytes");
    cr_assert(strstr(n1.text, "another imatrix") != NULL, "%s", n1.text);
    quantize_to(src, recipe, NULL, prev, out, &n2);
    cr_assert(same_bytes(out, plain),
              "reuse from an imatrix run into a plain one changed the bytes");
    cr_assert(strstr(n2.text, "this run has none") != NULL, "%s", n2.text);
    quantize_to(src, recipe, a, plain, out, &n3);
    cr_assert(same_bytes(out, prev),
              "reuse from a plain run into an imatrix one changed the bytes");
    cr_assert(strstr(n3.text, "this run has one") != NULL, "%s", n3.text);
    free(src);
    free(recipe);
    free(a);
    free(b);
    free(prev);
    free(fresh);
    free(out);
    free(plain);
}

#include "check/check.h"
#include "check/check_testing.h"

static pn_check_report *check_with(const char *path, const char *imx, const char *source)
{
    pn_check_options co;
    pn_check_options_default(&co);
    co.imatrix_path = imx;
    co.source_path = source;
    co.threads = 1;
    pn_check_report *r = NULL;
    pn_error err;
    cr_assert_eq(pn_check_file(path, &co, &r, &err), PN_OK, "%s", err.msg);
    return r;
}

/* The type pn-check read for tensor name of r. */
static int type_in(const pn_check_report *r, const char *name)
{
    for (size_t i = 0; i < r->n_tensors; i++)
        if (strcmp(r->tensors[i].name, name) == 0)
            return (int)r->tensors[i].type;
    cr_assert_fail("no tensor %s", name);
    return -1;
}

/* A copy of src at dst whose key named key is renamed (its last byte made
 * 'X'): the file a build without that key would have written. */
static void rename_key(const char *src, const char *dst, const char *key)
{
    size_t n;
    uint8_t *b = tu_read_file(src, &n);
    uint8_t *at = memmem(b, n, key, strlen(key));
    cr_assert_not_null(at, "%s: no key %s", src, key);
    at[strlen(key) - 1] = 'X';
    cr_assert_eq(tu_write_file(dst, b, n), 0);
    free(b);
}

Test(imatrix_measure, pn_check_confirms_the_imatrix_and_the_promotions_it_chooses, .init = setup,
     .fini = teardown)
{
    /* the heavy-channel pair: unweighted and weighted promote different
     * tensors (with_one_heavy_channel... above) */
    char *src = path_in("pair.gguf"), *recipe = path_in("r.mix"), *imx = path_in("heavy.dat"),
         *other = path_in("other.dat"), *wf = path_in("w.gguf"), *pf = path_in("p.gguf"),
         *uf = path_in("u.gguf"), *old = path_in("old.gguf");
    imatrix_write_pair(src);
    static const char rec[] = "mix M\nrotation none\npromote 1\nrule *.weight => pn3t\n";
    cr_assert_eq(tu_write_file(recipe, rec, strlen(rec)), 0);
    const char *names[] = { "a.ffn_up.weight", "b.ffn_up.weight" };
    const int64_t K[] = { 320, 320 };
    imatrix_write_dat(imx, names, K, 2, imatrix_w_heavy);
    imatrix_write_dat(other, names, K, 2, imatrix_w_varied);
    tu_notes n = { { 0 } };
    quantize_to(src, recipe, imx, NULL, wf, &n); /* --imatrix-promotion weighted */
    quantize_to(src, recipe, NULL, NULL, pf, &n);
    pn_quantize_opts o;
    base_opts(&o, src, recipe);
    o.dry_run = false;
    o.dst_path = uf;
    o.imatrix_path = imx; /* the default: the promotion measurement unweighted */
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);

    pn_check_report *r = check_with(wf, imx, src);
    cr_assert(r->imatrix_checked && r->imatrix_same && r->imatrix_promotions_checked &&
              r->imatrix_promotions_follow);
    cr_assert_null(pn_check_find(r, "IMATRIX-PROMOTION", NULL));
    cr_assert_eq(type_in(r, "a.ffn_up.weight"), PN_TYPE_PN4T, "weighted: a is promoted");
    cr_assert_eq(r->n_errors, 0);
    pn_check_report_free(r);
    /* made with the imatrix, promoted as without it, and checked so */
    r = check_with(uf, imx, src);
    cr_assert(r->imatrix_checked && r->imatrix_same && r->imatrix_promotions_checked &&
              r->imatrix_promotions_follow);
    cr_assert_eq(type_in(r, "b.ffn_up.weight"), PN_TYPE_PN4T, "unweighted: b is promoted");
    cr_assert_eq(r->n_errors, 0);
    pn_check_report_free(r);
    r = check_with(wf, other, NULL);
    cr_assert_not_null(pn_check_find(r, "IMATRIX-OTHER", NULL));
    pn_check_report_free(r);
    /* no imatrix: measured unweighted, which its promotions follow */
    r = check_with(pf, imx, src);
    cr_assert_not_null(pn_check_find(r, "IMATRIX-NONE", NULL));
    cr_assert_null(pn_check_find(r, "IMATRIX-PROMOTION", NULL));
    pn_check_report_free(r);
    /* a file without pn.mix.imatrix.promotion was measured weighted (the
     * builds before it): u.gguf's unweighted choice is then wrong */
    rename_key(uf, old, PN_KEY_MIX_IMATRIX_PROMOTION);
    r = check_with(old, imx, src);
    const pn_finding *f = pn_check_find(r, "IMATRIX-PROMOTION", NULL);
    cr_assert_not_null(f);
    cr_assert_str_eq(f->tensor, "b.ffn_up.weight", "%s", f->message);
    cr_assert(strstr(f->message, "a.ffn_up.weight") != NULL, "%s", f->message);
    pn_check_report_free(r);
    free(src);
    free(recipe);
    free(imx);
    free(other);
    free(wf);
    free(pf);
    free(uf);
    free(old);
}
