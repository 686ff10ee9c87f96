/* The quantize job (pipeline/quantize.h) end to end: the golden tiny model,
 * synthetic models against the reference computed here, thread-count
 * independence, promotion, and every refusal, with nothing left at DST.
 *
 * Here the tests that call the library; those that run pn-quantize are in
 * tests/programs/test_quantize_cli.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "hadamard/hadamard.h"
#include "synth/qwen38_shapes.h"
#include "synth/qwen38_shapes_testing.h"
#include "pipeline/quantize.h"
#include "synth/synth.h"
#include "quant/pn_cuda.h"
#include "quant/pn.h"
#include "quant/types.h"
#include "quant/widen.h"
#include "fixtures/pn_source.h"
#include "fixtures/quantize_run.h"
#include "fixtures/scratch.h"
#include "test_util.h"

#define GOLDEN PN_TEST_DATA "/golden/"

static void base_opts(pn_quantize_opts *o, const char *src, const char *dst)
{
    pn_quantize_opts_init(o);
    o->src_path = src;
    o->dst_path = dst;
    o->recipe_path = FALLBACK_RECIPE;
    o->promote = 0;
    o->threads = 1;
    o->backend = PN_BACKEND_CPU;
}

static void run_ok(const pn_quantize_opts *o)
{
    pn_error err;
    pn_error_clear(&err);
    pn_status st = pn_quantize_file(o, NULL, &err);
    cr_assert_eq(st, PN_OK, "pn_quantize_file: %s", err.msg);
}

static const gguf_kv *need_kv(gguf_reader *r, const char *key)
{
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    cr_assert_not_null(kv, "key %s missing", key);
    return kv;
}

/* ---- the golden tiny model ---------------------------------------------- */

Test(quantize, writes_the_golden_tiny_models_pn_bytes_and_crcs_exactly, .init = setup,
     .fini = teardown)
{
    char *dst = path_in("tiny.pn.gguf");
    pn_quantize_opts o;
    base_opts(&o, GOLDEN "tiny.f32.gguf", dst);
    run_ok(&o);

    size_t n_expect;
    uint8_t *expect = tu_read_file(GOLDEN "tiny.f32.pn.bin", &n_expect);
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(dst, &r, &err), PN_OK, "%s", err.msg);
    const gguf_kv *crcs = need_kv(r, "pn.tensor_crc32");
    cr_assert_eq(crcs->arr_count, gguf_reader_n_tensors(r));
    size_t off = 0;
    int pn_tensors = 0;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        const uint8_t *data = gguf_reader_tensor_data(r, i);
        cr_assert_eq((uint32_t)gguf_kv_arr_u64(crcs, i), (uint32_t)crc32(0, data, (uInt)t->size),
                     "CRC of %s", t->name);
        if (!pn_type_is_pn(t->type))
            continue;
        pn_tensors++;
        cr_assert_leq(off + t->size, n_expect);
        cr_assert(memcmp(data, expect + off, t->size) == 0, "PN bytes of %s differ from golden",
                  t->name);
        off += t->size;
    }
    cr_assert_eq(pn_tensors, 13);
    cr_assert_eq(off, n_expect);
    /* the golden table's CRCs of two of them */
    long qkv = gguf_reader_find_tensor(r, "blk.0.attn_qkv.weight");
    long down = gguf_reader_find_tensor(r, "blk.1.ffn_down.weight");
    cr_assert_eq((uint32_t)gguf_kv_arr_u64(crcs, (uint64_t)qkv), 0x3d8f3da5u);
    cr_assert_eq((uint32_t)gguf_kv_arr_u64(crcs, (uint64_t)down), 0x84029b00u);
    gguf_reader_close(r);
    free(expect);
    free(dst);
}

Test(quantize, gives_the_golden_tiny_model_the_types_of_its_expect_file, .init = setup,
     .fini = teardown)
{
    char *dst = path_in("tiny.pn.gguf");
    pn_quantize_opts o;
    base_opts(&o, GOLDEN "tiny.f32.gguf", dst);
    run_ok(&o);
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(dst, &r, &err), PN_OK, "%s", err.msg);
    FILE *f = fopen(GOLDEN "tiny.f32.expect.txt", "r");
    cr_assert_not_null(f);
    char name[256], shape[64], src[16], type[16];
    int lines = 0;
    while (fscanf(f, "%255s %63s %15s %15s", name, shape, src, type) == 4) {
        long i = gguf_reader_find_tensor(r, name);
        cr_assert_geq(i, 0, "%s missing", name);
        const gguf_tensor_info *t = gguf_reader_tensor(r, (size_t)i);
        const pn_type_traits *tt = pn_type_traits_get(t->type);
        /* K = 320: the 256-weight k-quant blocks do not divide it, so the
         * recipe's fallback (q8_0) stands in for q3_K / q4_K */
        if (strcmp(type, "q3_K") == 0 || strcmp(type, "q4_K") == 0)
            cr_assert_str_eq(tt->name, "q8_0", "%s", name);
        else
            cr_assert_str_eq(tt->name, type, "%s", name);
        lines++;
    }
    fclose(f);
    cr_assert_eq(lines, 28);
    cr_assert_eq(gguf_reader_n_tensors(r), 28);
    gguf_reader_close(r);
    free(dst);
}

/* ---- synthetic models against the reference ------------------------------ */

static void check_against_reference(const char *src_path, const char *dst_path, int cap,
                                    size_t *n_pn_out)
{
    gguf_reader *s, *d;
    pn_error err;
    cr_assert_eq(gguf_reader_open(src_path, &s, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_open(dst_path, &d, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_n_tensors(s), gguf_reader_n_tensors(d));
    size_t n_pn = 0;
    for (size_t i = 0; i < gguf_reader_n_tensors(s); i++) {
        const gguf_tensor_info *st = gguf_reader_tensor(s, i), *dt = gguf_reader_tensor(d, i);
        cr_assert_str_eq(st->name, dt->name);
        cr_assert_eq(st->n_dims, dt->n_dims);
        for (int k = 0; k < 4; k++)
            cr_assert_eq(st->ne[k], dt->ne[k]);
        if (!pn_type_is_pn(dt->type))
            continue;
        n_pn++;
        const int64_t K = st->ne[0], rows = st->ne[1] * st->ne[2] * st->ne[3];
        const int64_t src_row = pn_type_row_bytes(st->type, K);
        const int64_t out_row = pn_type_row_bytes(dt->type, K);
        float *x = malloc((size_t)K * sizeof(float));
        uint8_t *q = malloc((size_t)out_row);
        int B = cap ? pn_hadamard_block_size(K, cap) : 1;
        for (int64_t r = 0; r < rows; r++) {
            cr_assert_eq(pn_widen_row(st->type, gguf_reader_tensor_data(s, i) + r * src_row, x, K),
                         PN_OK);
            if (B > 1)
                pn_hadamard_rotate_row_ref(x, K, B);
            cr_assert_eq(pn_quantize_row_ref(dt->type, x, K, q, NULL), PN_OK);
            cr_assert(memcmp(q, gguf_reader_tensor_data(d, i) + r * out_row, (size_t)out_row) == 0,
                      "%s row %lld differs from the reference", st->name, (long long)r);
        }
        free(x);
        free(q);
    }
    if (n_pn_out)
        *n_pn_out = n_pn;
    gguf_reader_close(s);
    gguf_reader_close(d);
}

Test(quantize, stores_every_pn_tensor_as_the_reference_rotate_and_quantize, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 4, PN_TYPE_BF16, 7);
    char *dst = path_in("dst.gguf");
    pn_quantize_opts o;
    base_opts(&o, src, dst);
    o.threads = 2;
    run_ok(&o);
    size_t n_pn = 0;
    check_against_reference(src, dst, 1024, &n_pn);
    cr_assert_gt(n_pn, 20);

    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(dst, &r, &err), PN_OK, "%s", err.msg);
    const gguf_kv *kv = need_kv(r, "pn.format");
    cr_assert(gguf_str_eq(kv->v.str, "PNX-FORMAT-v0"));
    cr_assert(gguf_str_eq(need_kv(r, "pn.mix")->v.str, "P0k-fallback+0"));
    cr_assert(gguf_str_eq(need_kv(r, "pn.rotation.type")->v.str, "hadamard"));
    cr_assert_eq(need_kv(r, "pn.rotation.block_size")->v.u64, 1024);
    cr_assert_eq(need_kv(r, "pn.rotation.block_size")->type, GGUF_TYPE_UINT32);
    cr_assert_eq(need_kv(r, "pn.mix.promoted")->arr_count, 0);
    cr_assert_eq(need_kv(r, "general.quantization_version")->v.u64, 2);
    cr_assert_null(gguf_reader_find_kv(r, "general.file_type"));
    cr_assert(gguf_str_eq(need_kv(r, "general.architecture")->v.str, "qwen35"));
    const gguf_kv *q = need_kv(r, "pn.quantizer");
    cr_assert(q->v.str.len > 11 && memcmp(q->v.str.data, "pn-quantize", 11) == 0);
    const gguf_kv *crcs = need_kv(r, "pn.tensor_crc32");
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        cr_assert_eq((uint32_t)gguf_kv_arr_u64(crcs, i),
                     (uint32_t)crc32(0, gguf_reader_tensor_data(r, i), (uInt)t->size), "%s",
                     t->name);
    }
    gguf_reader_close(r);
    free(src);
    free(dst);
}

Test(quantize, writes_the_same_bytes_with_one_thread_and_with_two, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 4, PN_TYPE_F16, 11);
    char *a = path_in("a.gguf"), *b = path_in("b.gguf");
    pn_quantize_opts o;
    base_opts(&o, src, a);
    o.promote = 3;
    o.threads = 1;
    run_ok(&o);
    o.dst_path = b;
    o.threads = 2;
    run_ok(&o);
    quantize_assert_same_bytes(a, b, "outputs differ between 1 and 2 threads");
    free(src);
    free(a);
    free(b);
}

/* ---- options ------------------------------------------------------------- */

Test(quantize, rotation_none_changes_only_the_pn_bytes_and_the_rotation_key, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 3);
    char *a = path_in("rot.gguf"), *b = path_in("norot.gguf");
    pn_quantize_opts o;
    base_opts(&o, src, a);
    run_ok(&o);
    o.dst_path = b;
    o.rotation_cap = 0;
    run_ok(&o);
    check_against_reference(src, b, 0, NULL);
    gguf_reader *ra, *rb;
    pn_error err;
    cr_assert_eq(gguf_reader_open(a, &ra, &err), PN_OK);
    cr_assert_eq(gguf_reader_open(b, &rb, &err), PN_OK);
    cr_assert(gguf_str_eq(need_kv(rb, "pn.rotation.type")->v.str, "none"));
    size_t differ = 0;
    for (size_t i = 0; i < gguf_reader_n_tensors(ra); i++) {
        const gguf_tensor_info *ta = gguf_reader_tensor(ra, i), *tb = gguf_reader_tensor(rb, i);
        cr_assert_eq(ta->type, tb->type);
        bool same =
            memcmp(gguf_reader_tensor_data(ra, i), gguf_reader_tensor_data(rb, i), ta->size) == 0;
        if (pn_type_is_pn(ta->type))
            differ += !same;
        else
            cr_assert(same, "non-PN tensor %s changed with the rotation", ta->name);
    }
    cr_assert_gt(differ, 0);
    gguf_reader_close(ra);
    gguf_reader_close(rb);
    free(src);
    free(a);
    free(b);
}

static int count_type(gguf_reader *r, int type)
{
    int n = 0;
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++)
        n += gguf_reader_tensor(r, i)->type == type;
    return n;
}

Test(quantize, promote_n_turns_exactly_n_pn3t_tensors_into_pn4t_and_records_them, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 4, PN_TYPE_F32, 5);
    char *a = path_in("p0.gguf"), *b = path_in("p5.gguf"), *m = path_in("m.txt");
    pn_quantize_opts o;
    base_opts(&o, src, a);
    run_ok(&o);
    o.dst_path = b;
    o.promote = 5;
    o.measurement_path = m;
    run_ok(&o);
    cr_assert(exists(m), "the measurement is saved");
    gguf_reader *ra, *rb;
    pn_error err;
    cr_assert_eq(gguf_reader_open(a, &ra, &err), PN_OK);
    cr_assert_eq(gguf_reader_open(b, &rb, &err), PN_OK);
    cr_assert_eq(count_type(rb, PN_TYPE_PN3T), count_type(ra, PN_TYPE_PN3T) - 5);
    cr_assert_eq(count_type(rb, PN_TYPE_PN4T), count_type(ra, PN_TYPE_PN4T) + 5);
    const gguf_kv *pr = need_kv(rb, "pn.mix.promoted");
    cr_assert_eq(pr->arr_count, 5);
    for (uint64_t k = 0; k < 5; k++) {
        gguf_str s = gguf_kv_arr_str(pr, k);
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)s.len, s.data);
        long i = gguf_reader_find_tensor(rb, name);
        cr_assert_geq(i, 0);
        cr_assert_eq(gguf_reader_tensor(rb, (size_t)i)->type, PN_TYPE_PN4T, "%s", name);
        cr_assert_eq(gguf_reader_tensor(ra, (size_t)i)->type, PN_TYPE_PN3T, "%s", name);
    }
    cr_assert(gguf_str_eq(need_kv(rb, "pn.mix")->v.str, "P0k-fallback+5"));
    check_against_reference(src, b, 1024, NULL);
    gguf_reader_close(ra);
    gguf_reader_close(rb);
    free(src);
    free(a);
    free(b);
    free(m);
}

Test(quantize, a_saved_measurement_gives_the_same_promotions_without_measuring_again, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 4, PN_TYPE_F32, 5);
    char *a = path_in("a.gguf"), *b = path_in("b.gguf"), *m = path_in("m.txt");
    pn_quantize_opts o;
    base_opts(&o, src, a);
    o.promote = 4;
    o.measurement_path = m;
    pn_quantize_stats s1, s2;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, &s1, &err), PN_OK, "%s", err.msg);
    o.dst_path = b;
    cr_assert_eq(pn_quantize_file(&o, &s2, &err), PN_OK, "%s", err.msg);
    cr_assert_gt(s1.t_measure, 0.0);
    quantize_assert_same_bytes(a, b, "the outputs differ");
    free(src);
    free(a);
    free(b);
    free(m);
}

Test(quantize, promote_list_promotes_exactly_the_listed_tensors, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 4, PN_TYPE_F32, 5);
    char *dst = path_in("dst.gguf"), *list = path_in("list.txt");
    const char *names = "# two tensors\nblk.2.ffn_up.weight\n\n  blk.0.attn_qkv.weight  \n";
    cr_assert_eq(tu_write_file(list, names, strlen(names)), 0);
    pn_quantize_opts o;
    base_opts(&o, src, dst);
    o.promote = -1;
    o.promote_list_path = list;
    run_ok(&o);
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(dst, &r, &err), PN_OK);
    const gguf_kv *pr = need_kv(r, "pn.mix.promoted");
    cr_assert_eq(pr->arr_count, 2);
    cr_assert(gguf_str_eq(gguf_kv_arr_str(pr, 0), "blk.0.attn_qkv.weight"));
    cr_assert(gguf_str_eq(gguf_kv_arr_str(pr, 1), "blk.2.ffn_up.weight"));
    cr_assert_eq(
        gguf_reader_tensor(r, (size_t)gguf_reader_find_tensor(r, "blk.2.ffn_up.weight"))->type,
        PN_TYPE_PN4T);
    gguf_reader_close(r);
    free(src);
    free(dst);
    free(list);
}

Test(quantize, target_size_picks_the_most_promotions_that_fit, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 4, PN_TYPE_F32, 5);
    char *p0 = path_in("p0.gguf"), *p3 = path_in("p3.gguf"), *p4 = path_in("p4.gguf"),
         *t = path_in("t.gguf"), *m = path_in("m.txt");
    pn_quantize_opts o;
    base_opts(&o, src, p3);
    o.measurement_path = m;
    o.promote = 3;
    run_ok(&o);
    o.dst_path = p4;
    o.promote = 4;
    run_ok(&o);
    struct stat s3, s4;
    stat(p3, &s3);
    stat(p4, &s4);
    cr_assert_gt(s4.st_size, s3.st_size);
    o.dst_path = t;
    o.promote = -1;
    o.target_size = (uint64_t)s4.st_size - 1; /* 4 does not fit, 3 does */
    pn_quantize_stats st;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, &st, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(st.n_promoted, 3);
    quantize_assert_same_bytes(p3, t, "the outputs differ");
    /* even N = 0 does not fit */
    o.dst_path = p0;
    o.target_size = 1000;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_MISMATCH);
    cr_assert(strstr(err.msg, "even with no promotion"), "%s", err.msg);
    quantize_assert_nothing_left(g_dir, p0);
    free(src);
    free(p0);
    free(p3);
    free(p4);
    free(t);
    free(m);
}

/* ---- refusals (library) -------------------------------------------------- */

Test(quantize, refuses_a_nan_weight_naming_tensor_row_and_column, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 9);
    /* poison row 3, column 17 of blk.1.ffn_up.weight in place */
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(src, &r, &err), PN_OK);
    long i = gguf_reader_find_tensor(r, "blk.1.ffn_up.weight");
    const gguf_tensor_info *t = gguf_reader_tensor(r, (size_t)i);
    uint64_t off = gguf_reader_data_offset(r) + t->offset + (uint64_t)(3 * t->ne[0] + 17) * 4;
    gguf_reader_close(r);
    FILE *f = fopen(src, "r+b");
    float nan = NAN;
    fseek(f, (long)off, SEEK_SET);
    fwrite(&nan, 4, 1, f);
    fclose(f);
    char *dst = path_in("dst.gguf");
    pn_quantize_opts o;
    base_opts(&o, src, dst);
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_NONFINITE);
    cr_assert(strstr(err.msg, "blk.1.ffn_up.weight") && strstr(err.msg, "row 3") &&
                  strstr(err.msg, "column 17"),
              "%s", err.msg);
    quantize_assert_nothing_left(g_dir, dst);
    free(src);
    free(dst);
}

Test(quantize, refuses_tensors_no_rule_matches_listing_all_of_them, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 9);
    char *recipe = path_in("r.mix"), *dst = path_in("dst.gguf");
    const char *text = "mix X\nrotation hadamard 1024\nrule *.attn_qkv.weight => pn3t\n"
                       "rule dims=1 => f32\n";
    tu_write_file(recipe, text, strlen(text));
    pn_quantize_opts o;
    base_opts(&o, src, dst);
    o.recipe_path = recipe;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_UNMATCHED);
    cr_assert(strstr(err.msg, "token_embd.weight"), "%s", err.msg);
    quantize_assert_nothing_left(g_dir, dst);
    free(src);
    free(recipe);
    free(dst);
}

Test(quantize, refuses_a_source_that_is_already_quantized, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 9);
    char *pn = path_in("pn.gguf"), *dst = path_in("again.gguf");
    pn_quantize_opts o;
    base_opts(&o, src, pn);
    run_ok(&o);
    base_opts(&o, pn, dst);
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_TYPE);
    cr_assert(strstr(err.msg, "already quantized"), "%s", err.msg);
    quantize_assert_nothing_left(g_dir, dst);
    free(src);
    free(pn);
    free(dst);
}

/* ==== nothing the user gives destroys a file, crashes, hangs or lies ==== */

/* Another run's output appears while this one writes. */
typedef struct mid_run {
    const char *path;
    int calls;
    int truncate; /* 0: create path; else truncate path to this fraction (1/truncate) */
    int phase;    /* the phase whose first call acts */
} mid_run;

static void act_mid_run(const pn_progress *p, void *user)
{
    mid_run *m = user;
    if (p->phase != m->phase || m->calls++)
        return;
    if (m->truncate) {
        struct stat sb;
        cr_assert_eq(stat(m->path, &sb), 0);
        cr_assert_eq(truncate(m->path, sb.st_size / m->truncate), 0);
    } else {
        cr_assert_eq(tu_write_file(m->path, "another run", 11), 0);
    }
}

Test(quantize, an_output_that_appears_during_the_run_is_not_replaced_without_force, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_BF16, 3);
    char *dst = path_in("dst.gguf");
    mid_run m = { dst, 0, 0, PN_PHASE_QUANTIZE };
    pn_quantize_opts o;
    base_opts(&o, src, dst);
    o.progress = act_mid_run;
    o.user = &m;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_EXISTS, "%s", err.msg);
    cr_assert_gt(m.calls, 0);
    cr_assert(strstr(err.msg, "dst.gguf"), "%s", err.msg);
    char *kept = quantize_read_text(dst);
    cr_assert_str_eq(kept, "another run");
    free(kept);
    cr_assert_eq(tu_count_temporary_files(g_dir), 0, "a temporary file is left");
    free(src);
    free(dst);
}

Test(quantize, a_source_truncated_while_it_is_read_is_an_error_naming_it, .init = setup,
     .fini = teardown)
{
    for (int measuring = 0; measuring < 2; measuring++) {
        char *src = quantize_make_source("src.gguf", 4, PN_TYPE_F32, 5);
        char *dst = path_in("dst.gguf");
        mid_run m = { src, 0, 2, measuring ? PN_PHASE_MEASURE : PN_PHASE_QUANTIZE };
        pn_quantize_opts o;
        base_opts(&o, src, dst);
        o.promote = measuring ? 3 : 0;
        o.chunk_weights = 256;
        o.progress = act_mid_run;
        o.user = &m;
        pn_error err;
        pn_status st = pn_quantize_file(&o, NULL, &err);
        cr_assert_eq(st, PN_ERR_TRUNCATED, "%s: %s", pn_strerror(st), err.msg);
        cr_assert_eq(m.calls > 0, 1);
        cr_assert(strstr(err.msg, src) && strstr(err.msg, "changed or shrank"), "%s", err.msg);
        quantize_assert_nothing_left(g_dir, dst);
        unlink(src);
        free(src);
        free(dst);
    }
}

/* Rows of 1280 on two threads once made a misaligned store in the
 * measurement's scratch; cheap enough for the sanitizer build, which runs
 * this suite. */
Test(quantize, measures_and_quantizes_rows_of_1280_on_two_threads, .init = setup, .fini = teardown)
{
    static const sf_spec specs[] = {
        { "blk.0.attn_qkv.weight", 2, 1280, 24, PN_TYPE_BF16 },
        { "blk.0.ffn_up.weight", 2, 1280, 16, PN_TYPE_BF16 },
        { "blk.0.ffn_gate.weight", 2, 1280, 16, PN_TYPE_F16 },
        { "blk.0.attn_norm.weight", 1, 1280, 1, PN_TYPE_F32 },
    };
    char *src = path_in("src.gguf"), *dst = path_in("dst.gguf");
    sf_write_model(src, specs, 4, 12);
    pn_quantize_opts o;
    base_opts(&o, src, dst);
    o.threads = 2;
    o.promote = 2;
    pn_quantize_stats s;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, &s, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(s.n_promoted, 2);
    cr_assert_gt(s.t_measure, 0.0);
    check_against_reference(src, dst, 1024, NULL);
    free(src);
    free(dst);
}

Test(quantize, the_library_reads_no_environment_variable, .init = setup, .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_BF16, 6);
    char *a = path_in("a.gguf"), *b = path_in("b.gguf");
    pn_quantize_opts o;
    base_opts(&o, src, a);
    o.promote = 1;
    run_ok(&o);
    /* values that would fail or change the run if anything below cmd/ read them */
    setenv("PN_CPU_PATH", "turbo", 1);
    setenv("PN_CHUNK_WEIGHTS", "garbage", 1);
    setenv("PN_CUDA_EMULATE", "1", 1);
    o.dst_path = b;
    o.backend = PN_BACKEND_AUTO;
    pn_quantize_stats s;
    pn_error err;
    pn_status st = pn_quantize_file(&o, &s, &err);
    unsetenv("PN_CPU_PATH");
    unsetenv("PN_CHUNK_WEIGHTS");
    unsetenv("PN_CUDA_EMULATE");
    cr_assert_eq(st, PN_OK, "%s", err.msg);
    cr_assert(strncmp(s.backend, "cuda", 4) != 0 || !strstr(s.backend, "emulat"), "%s", s.backend);
    quantize_assert_same_bytes(a, b, "the environment changed the output");
    free(src);
    free(a);
    free(b);
}

Test(quantize, a_stale_temporary_file_beside_the_output_is_named_in_a_note, .init = setup,
     .fini = teardown)
{
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("dst.gguf"), *stale = path_in("dst.gguf.tmp.Ab3xYz");
    cr_assert_eq(tu_write_file(stale, "killed run", 10), 0);
    tu_notes n = { "" };
    pn_quantize_opts o;
    base_opts(&o, src, dst);
    o.note = tu_keep_note;
    o.user = &n;
    run_ok(&o);
    cr_assert(strstr(n.text, stale) && strstr(n.text, "remove"), "%s", n.text);
    cr_assert(exists(stale), "the stale file is the user's to remove");
    cr_assert(exists(dst));
    free(src);
    free(dst);
    free(stale);
}

/* A CUDA build on a machine without a usable GPU: --backend auto falls back
 * to the CPU. That is a fact of the run, said with the plan's lines on
 * stdout, and nothing at all with --quiet. */
Test(quantize, without_a_usable_gpu_the_reason_is_a_figure_of_the_run_not_a_note, .init = setup,
     .fini = teardown)
{
    quantize_need_cuda_build_without_gpu();
    char *src = quantize_make_source("src.gguf", 2, PN_TYPE_F32, 2);
    char *dst = path_in("dst.gguf");
    tu_notes n = { "" };
    pn_quantize_opts o;
    base_opts(&o, src, dst);
    o.backend = PN_BACKEND_AUTO;
    o.note = tu_keep_note;
    o.user = &n;
    pn_quantize_stats s;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, &s, &err), PN_OK, "%s", err.msg);
    cr_assert_str_empty(n.text);
    cr_assert(s.no_gpu_why[0] != 0);
    cr_assert(strncmp(s.backend, "cpu", 3) == 0, "%s", s.backend);
    free(src);
    free(dst);
}
