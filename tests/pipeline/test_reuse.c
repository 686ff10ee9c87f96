/* the source identity (pn.source.*), the measurement that
 * checks what it measured, pn-quantize --reuse / --reuse-verify, and
 * pn-check --source on the recorded identity (docs/reuse.md).
 * Models: pn-synth shapes at width scale 16 (K = 320), 2 layers, 512 tokens
 * (token_embd and output have 512 rows, so odd rows are not sampled).
 *
 * Here the tests that call the library; those that run the built programs
 * are in tests/programs/test_reuse_cli.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "gguf/header_hash.h"
#include "mix/measurement.h"
#include "check/check.h"
#include "check/check_testing.h"
#include "common/outfile_testing.h"
#include "pipeline/quantize.h"
#include "pipeline/quantize_testing.h"
#include "io/source_id.h"
#include "io/source_id_testing.h"
#include "synth/synth.h"
#include "quant/types.h"
#include "fixtures/reuse_run.h"
#include "fixtures/scratch.h"
#include "test_util.h"

static void assert_same_bytes(const char *a, const char *b, const char *why)
{
    size_t na, nb;
    void *da = tu_read_file(a, &na), *db = tu_read_file(b, &nb);
    cr_assert(na == nb && memcmp(da, db, na) == 0, "%s: %s and %s differ", why, a, b);
    free(da);
    free(db);
}

/* No file at p and nothing else new in the folder than `expected` files. */
static void assert_nothing_written(const char *p, int expected)
{
    cr_assert(!exists(p), "%s must not exist", p);
    cr_assert_eq(tu_count_files(g_dir), expected, "a file was left in %s", g_dir);
}

/* Flips the bits `mask` of one byte of a tensor's data (any type). */
static void flip_data_bits(const char *path, const char *tensor, uint64_t byte, uint8_t mask)
{
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(path, &r, &err), PN_OK, "%s", err.msg);
    long i = gguf_reader_find_tensor(r, tensor);
    cr_assert_geq(i, 0);
    uint64_t off = gguf_reader_tensor_file_offset(r, (size_t)i) + byte;
    gguf_reader_close(r);
    int fd = open(path, O_RDWR);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
    b ^= mask;
    cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

static bool has(const tu_notes *n, const char *phrase)
{
    return strstr(n->text, phrase) != NULL;
}

/* ---- the identity an output records --------------------------------------- */

static const gguf_kv *need_kv(gguf_reader *r, const char *key, gguf_value_type type)
{
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    cr_assert_not_null(kv, "key %s missing", key);
    cr_assert_eq(kv->type, type, "key %s", key);
    if (type == GGUF_TYPE_ARRAY) {
        cr_assert_eq(kv->arr_type, GGUF_TYPE_UINT32, "%s", key);
        cr_assert_eq(kv->arr_count, gguf_reader_n_tensors(r), "%s", key);
    }
    return kv;
}

/* FNV-1a 64 as docs/reuse.md defines the header hash: integers little-endian
 * (u32 version, u32 types, u64 lengths and counts), over the model's keys
 * but split.*, then its tensors' names, dimensions and types. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
static uint64_t fnv_le(uint64_t h, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) {
        uint8_t b = (uint8_t)(v >> (8 * i));
        h = fnv(h, &b, 1);
    }
    return h;
}
static uint64_t model_hash(const gguf_reader *r)
{
    uint64_t h = fnv_le(0xcbf29ce484222325ull, gguf_reader_version(r), 4);
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        /* the split keys and the header hash's record (pn.header.*) are
         * not the model */
        if ((kv->key.len >= 6 && memcmp(kv->key.data, "split.", 6) == 0) ||
            (kv->key.len >= 10 && memcmp(kv->key.data, "pn.header.", 10) == 0))
            continue;
        h = fnv(fnv_le(h, kv->key.len, 8), kv->key.data, kv->key.len);
        h = fnv_le(h, (uint64_t)kv->type, 4);
        if (kv->type == GGUF_TYPE_STRING) {
            h = fnv(fnv_le(h, kv->v.str.len, 8), kv->v.str.data, kv->v.str.len);
        } else if (kv->type == GGUF_TYPE_ARRAY) {
            h = fnv_le(fnv_le(fnv_le(h, (uint64_t)kv->arr_type, 4), kv->arr_count, 8),
                       kv->arr_bytes, 8);
            h = fnv(h, kv->arr_data, kv->arr_bytes);
        } else {
            uint64_t bits;
            if (kv->type == GGUF_TYPE_FLOAT32 || kv->type == GGUF_TYPE_FLOAT64)
                memcpy(&bits, &kv->v.f64, 8);
            else if (kv->type == GGUF_TYPE_INT8 || kv->type == GGUF_TYPE_INT16 ||
                     kv->type == GGUF_TYPE_INT32 || kv->type == GGUF_TYPE_INT64)
                bits = (uint64_t)kv->v.i64;
            else
                bits = kv->v.u64;
            h = fnv_le(h, bits, 8);
        }
    }
    h = fnv_le(h, gguf_reader_n_tensors(r), 8);
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        h = fnv(fnv_le(h, strlen(t->name), 8), t->name, strlen(t->name));
        h = fnv_le(h, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++)
            h = fnv_le(h, (uint64_t)t->ne[d], 8);
        h = fnv_le(h, (uint64_t)t->type, 4);
    }
    return h;
}

/* The recorded identity equals what this test computes from the source
 * itself: the model hash above, CRC-32 of rows floor(i*R/256)
 * (the sampling rule) and of the whole tensor, the type. */
static void assert_identity_of(const char *out, const char *src)
{
    gguf_reader *o, *s;
    pn_error err;
    cr_assert_eq(gguf_reader_open(out, &o, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_open(src, &s, &err), PN_OK, "%s", err.msg);
    size_t n;
    uint8_t *bytes = tu_read_file(src, &n);
    cr_assert_eq(need_kv(o, "pn.source.header_fnv1a64", GGUF_TYPE_UINT64)->v.u64, model_hash(s));
    cr_assert_eq(need_kv(o, "pn.source.sample_rows", GGUF_TYPE_UINT32)->v.u64, 256);
    const gguf_kv *sc = need_kv(o, "pn.source.sample_crc32", GGUF_TYPE_ARRAY);
    const gguf_kv *tc = need_kv(o, "pn.source.tensor_crc32", GGUF_TYPE_ARRAY);
    const gguf_kv *ty = need_kv(o, "pn.source.type", GGUF_TYPE_ARRAY);
    int64_t rows_buf[256];
    for (size_t i = 0; i < gguf_reader_n_tensors(s); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(s, i);
        cr_assert_str_eq(gguf_reader_tensor(o, i)->name, t->name);
        const uint8_t *data = bytes + gguf_reader_tensor_file_offset(s, i);
        const int64_t R = t->ne[1] * t->ne[2] * t->ne[3];
        const uint64_t rb = t->size / (uint64_t)R;
        uLong crc = 0;
        int64_t k = tu_sample_rows(R, 256, rows_buf);
        for (int64_t j = 0; j < k; j++)
            crc = crc32(crc, data + (uint64_t)rows_buf[j] * rb, (uInt)rb);
        cr_assert_eq((uint32_t)gguf_kv_arr_u64(sc, i), (uint32_t)crc, "%s sampled rows", t->name);
        cr_assert_eq((uint32_t)gguf_kv_arr_u64(tc, i), (uint32_t)crc32(0, data, (uInt)t->size),
                     "%s whole", t->name);
        cr_assert_eq(gguf_kv_arr_u64(ty, i), (uint64_t)t->type, "%s type", t->name);
    }
    free(bytes);
    gguf_reader_close(o);
    gguf_reader_close(s);
}

Test(reuse_identity, every_output_records_its_sources_header_hash_sampled_rows_crcs_and_types,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 1), *dst = path_in("dst.gguf");
    pn_quantize_opts o;
    reuse_opts_for(&o, src, dst, NULL);
    o.promote = 2;
    reuse_run_ok(&o, NULL);
    assert_identity_of(dst, src);
    free(src);
    free(dst);
}

Test(reuse_identity, the_identity_does_not_depend_on_threads_or_chunks_cut_inside_rows,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 2), *a = path_in("a.gguf"), *b = path_in("b.gguf");
    pn_quantize_opts o;
    reuse_opts_for(&o, src, a, NULL);
    reuse_run_ok(&o, NULL);
    /* 256 weights a chunk: every row of K = 320 comes in two pieces */
    o.dst_path = b;
    o.threads = 2;
    o.chunk_weights = 256;
    reuse_run_ok(&o, NULL);
    assert_same_bytes(a, b, "chunks of 256 weights at 2 threads");
    assert_identity_of(b, src);
    free(src);
    free(a);
    free(b);
}

Test(reuse_identity, sampled_rows_crc_over_any_pieces_is_the_crc_of_the_sampled_rows)
{
    enum { K = 7, R = 1000, M = 256 };
    uint8_t *x = malloc(R * K * 2);
    tu_rng rng = { 5 };
    for (int i = 0; i < R * K * 2; i++)
        x[i] = (uint8_t)tu_rng_u64(&rng);
    int64_t rows[M];
    int64_t k = tu_sample_rows(R, M, rows);
    uLong want = 0;
    for (int64_t j = 0; j < k; j++)
        want = crc32(want, x + rows[j] * K * 2, K * 2);
    for (int trial = 0; trial < 50; trial++) {
        uint32_t crc = 0;
        for (int64_t at = 0; at < R * K;) {
            int64_t n = 1 + (int64_t)(tu_rng_u64(&rng) % (uint64_t)(trial < 25 ? 5 : 3000));
            if (n > R * K - at)
                n = R * K - at;
            crc = pn_sample_crc_update(crc, R, M, K, 2, at, x + at * 2, n);
            at += n;
        }
        cr_assert_eq(crc, (uint32_t)want, "trial %d", trial);
    }
    /* R <= M: every row */
    cr_assert_eq(pn_sample_crc_update(0, 200, M, K, 2, 0, x, 200 * K),
                 (uint32_t)crc32(0, x, 200 * K * 2));
    free(x);
}

/* ---- the measurement checks what it measured ------------------------------ */

/* A run that measures into (or reads) m.txt and promotes 2. */
static void measure_run(pn_quantize_opts *o, const char *src, const char *dst, const char *m,
                        tu_notes *n)
{
    reuse_opts_for(o, src, dst, n);
    o->promote = 2;
    o->measurement_path = m;
    o->dry_run = true;
    o->dst_path = NULL;
}

static pn_measurement *load_measurement(const char *path)
{
    pn_measurement *m = NULL;
    pn_error err;
    cr_assert_eq(pn_measurement_load(path, &m, NULL, &err), PN_OK, "%s", err.msg);
    return m;
}

Test(reuse_measure, a_measurement_that_matches_the_run_is_used_without_measuring, .init = setup,
     .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 3), *m = path_in("m.txt");
    pn_quantize_opts o;
    tu_notes n;
    pn_quantize_stats s;
    measure_run(&o, src, NULL, m, &n);
    reuse_run_ok(&o, &s);
    cr_assert(has(&n, "promotion measurement saved to"), "%s", n.text);
    cr_assert_gt(s.t_measure, 0.0);
    measure_run(&o, src, NULL, m, &n);
    reuse_run_ok(&o, &s);
    cr_assert(has(&n, "promotion measurement read from"), "%s", n.text);
    cr_assert(!has(&n, "measuring again"), "%s", n.text);
    cr_assert_eq(s.t_measure_compute, 0.0, "nothing was measured");
    free(src);
    free(m);
}

Test(reuse_measure,
     one_weight_changed_in_a_sampled_row_is_measured_again_with_force_and_kept_without,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 4), *m = path_in("m.txt");
    pn_quantize_opts o;
    tu_notes n;
    measure_run(&o, src, NULL, m, &n);
    reuse_run_ok(&o, NULL);
    pn_measurement *before = load_measurement(m);
    /* row 0 is always sampled */
    reuse_nudge_weight(src, "blk.1.ffn_up.weight", 0, 3);
    /* the rows measured are not these: the file is kept without --force */
    measure_run(&o, src, NULL, m, &n);
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_EXISTS);
    cr_assert(strstr(err.msg, "its sampled rows are not the ones measured") &&
                  strstr(err.msg, "not replaced without --force"),
              "%s", err.msg);
    pn_measurement *kept = load_measurement(m);
    long kk = pn_measurement_find(kept, "blk.1.ffn_up.weight");
    cr_assert_eq(kept->entries[kk].rows_crc32, before->entries[kk].rows_crc32);
    pn_measurement_free(kept);
    pn_quantize_stats s;
    measure_run(&o, src, NULL, m, &n);
    o.force = true;
    reuse_run_ok(&o, &s);
    cr_assert(has(&n, "tensor blk.1.ffn_up.weight: its sampled rows are not the ones measured"),
              "%s", n.text);
    cr_assert(has(&n, "it is not used: measuring again"), "%s", n.text);
    cr_assert(has(&n, "(replacing the one that was not used)"), "%s", n.text);
    cr_assert_gt(s.t_measure_compute, 0.0, "measured again");
    pn_measurement *after = load_measurement(m);
    long k = pn_measurement_find(after, "blk.1.ffn_up.weight");
    cr_assert_geq(k, 0);
    cr_assert_neq(after->entries[k].rows_crc32, before->entries[k].rows_crc32,
                  "the saved measurement is the new one");
    pn_measurement_free(before);
    pn_measurement_free(after);
    /* and now it matches */
    measure_run(&o, src, NULL, m, &n);
    reuse_run_ok(&o, NULL);
    cr_assert(has(&n, "read from"), "%s", n.text);
    free(src);
    free(m);
}

Test(reuse_measure, a_measurement_taken_with_another_rotation_is_measured_again, .init = setup,
     .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 5), *m = path_in("m.txt");
    pn_quantize_opts o;
    tu_notes n;
    measure_run(&o, src, NULL, m, &n);
    reuse_run_ok(&o, NULL);
    measure_run(&o, src, NULL, m, &n);
    o.rotation_cap = 0;
    reuse_run_ok(&o, NULL);
    cr_assert(has(&n, "measured with another rotation: hadamard:1024, this run uses none"), "%s",
              n.text);
    cr_assert(has(&n, "measuring again"), "%s", n.text);
    pn_measurement *l = load_measurement(m);
    cr_assert_eq(l->params.rotation_cap, 0, "replaced by the measurement without rotation");
    pn_measurement_free(l);
    free(src);
    free(m);
}

Test(reuse_measure, a_measurement_of_another_measure_rows_is_measured_again, .init = setup,
     .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 6), *m = path_in("m.txt");
    pn_quantize_opts o;
    tu_notes n;
    measure_run(&o, src, NULL, m, &n);
    reuse_run_ok(&o, NULL);
    measure_run(&o, src, NULL, m, &n);
    o.measure_rows = 4;
    reuse_run_ok(&o, NULL);
    cr_assert(has(&n, "256 per tensor, this run samples 4 (--measure-rows)"), "%s", n.text);
    cr_assert(has(&n, "measuring again"), "%s", n.text);
    pn_measurement *l = load_measurement(m);
    cr_assert_eq(l->params.sample_max_rows, 4);
    pn_measurement_free(l);
    measure_run(&o, src, NULL, m, &n);
    o.measure_rows = 4;
    reuse_run_ok(&o, NULL);
    cr_assert(has(&n, "read from"), "%s", n.text);
    free(src);
    free(m);
}

Test(reuse_measure, a_measurement_by_another_quantizer_version_is_measured_again, .init = setup,
     .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 7), *m = path_in("m.txt");
    pn_quantize_opts o;
    tu_notes n;
    measure_run(&o, src, NULL, m, &n);
    const pn_quantize_testing other = { .quantizer_name = "pn-quantize 0.0-test" };
    o.testing = &other;
    reuse_run_ok(&o, NULL);
    measure_run(&o, src, NULL, m, &n);
    reuse_run_ok(&o, NULL);
    cr_assert(has(&n, "measured by another quantizer version: 'pn-quantize 0.0-test', this run "
                      "is 'pn-quantize "),
              "%s", n.text);
    cr_assert(has(&n, "measuring again"), "%s", n.text);
    pn_measurement *l = load_measurement(m);
    cr_assert_str_neq(l->params.quantizer, "pn-quantize 0.0-test");
    pn_measurement_free(l);
    free(src);
    free(m);
}

Test(reuse_measure, a_measurement_file_of_format_1_is_measured_again_and_replaced, .init = setup,
     .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 8), *m = path_in("m.txt");
    const char *v1 = "pn-measure\t1\nsource\tbytes=1 tensors=2 fnv1a64=0\n"
                     "sample\tevenly-spaced\t256\ncandidates\t0\nend\n";
    cr_assert_eq(tu_write_file(m, v1, strlen(v1)), 0);
    pn_quantize_opts o;
    tu_notes n;
    measure_run(&o, src, NULL, m, &n);
    reuse_run_ok(&o, NULL);
    cr_assert(has(&n, "a measurement of format 1") && has(&n, "measuring again"), "%s", n.text);
    pn_measurement *l = load_measurement(m);
    cr_assert_gt(l->n, 2);
    pn_measurement_free(l);
    free(src);
    free(m);
}

Test(reuse_measure, a_measurement_path_that_holds_something_else_is_an_error_and_kept,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 9), *m = path_in("m.txt");
    const char *text = "my notes, not a measurement\n";
    cr_assert_eq(tu_write_file(m, text, strlen(text)), 0);
    pn_quantize_opts o;
    measure_run(&o, src, NULL, m, NULL);
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_FORMAT);
    cr_assert(strstr(err.msg, "m.txt:1: expected 'pn-measure"), "%s", err.msg);
    size_t len;
    char *kept = tu_read_file(m, &len);
    cr_assert(len == strlen(text) && memcmp(kept, text, len) == 0, "the file was rewritten");
    free(kept);
    free(src);
    free(m);
}

/* ---- --reuse: the same bytes as from scratch ------------------------------- */

Test(reuse, a_mix_change_writes_the_bytes_of_a_run_from_scratch_at_1_and_2_threads, .init = setup,
     .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 10), *m = path_in("m.txt");
    char *prev = reuse_make_prev(src, "prev.gguf", m);
    char *scratch = path_in("scratch.gguf"), *re = path_in("re.gguf");
    pn_quantize_opts o;
    reuse_opts_for(&o, src, scratch, NULL);
    o.promote = 5;
    o.measurement_path = m;
    reuse_run_ok(&o, NULL);
    for (int th = 1; th <= 2; th++) {
        tu_notes n;
        pn_quantize_stats s;
        reuse_opts_for(&o, src, re, &n);
        o.promote = 5;
        o.measurement_path = m;
        o.reuse_path = prev;
        o.threads = th;
        o.force = true;
        reuse_run_ok(&o, &s);
        assert_same_bytes(scratch, re, th == 1 ? "--reuse, 1 thread" : "--reuse, 2 threads");
        /* the 3 new promotions are quantized, everything else copied */
        gguf_reader *r;
        pn_error err;
        cr_assert_eq(gguf_reader_open(re, &r, &err), PN_OK);
        cr_assert_eq(s.n_reused, gguf_reader_n_tensors(r) - 3, "%zu reused", s.n_reused);
        cr_assert_gt(s.reused_bytes, 0);
        /* its header hash is its own (PREV's is not copied), and proves it */
        gguf_header_verdict v;
        gguf_header_hash_verify(r, &v);
        cr_assert_eq(v.proof, GGUF_HEADER_PROVEN, "%s", v.message);
        gguf_reader_close(r);
        cr_assert(!has(&n, "nothing reused"), "%s", n.text);
    }
    free(src);
    free(m);
    free(prev);
    free(scratch);
    free(re);
}

Test(reuse, a_rotation_change_reuses_nothing_says_why_and_writes_the_bytes_from_scratch,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 11), *m = path_in("m.txt");
    char *prev = reuse_make_prev(src, "prev.gguf", m);
    char *scratch = path_in("scratch.gguf"), *re = path_in("re.gguf");
    pn_quantize_opts o;
    reuse_opts_for(&o, src, scratch, NULL);
    o.promote = 2;
    o.rotation_cap = 32;
    reuse_run_ok(&o, NULL);
    for (int th = 1; th <= 2; th++) {
        tu_notes n;
        pn_quantize_stats s;
        reuse_opts_for(&o, src, re, &n);
        o.promote = 2;
        o.rotation_cap = 32;
        o.reuse_path = prev;
        o.threads = th;
        o.force = true;
        reuse_run_ok(&o, &s);
        assert_same_bytes(scratch, re, "--reuse after a rotation change");
        cr_assert_eq(s.n_reused, 0);
        cr_assert(has(&n, "nothing reused: it was made with another rotation (hadamard:1024; "
                          "this run uses hadamard:32)"),
                  "%s", n.text);
    }
    free(src);
    free(m);
    free(prev);
    free(scratch);
    free(re);
}

Test(reuse, a_recipe_change_copies_what_it_leaves_alone_and_writes_the_bytes_from_scratch,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 12), *m = path_in("m.txt");
    char *prev = reuse_make_prev(src, "prev.gguf", m);
    /* attn_k/attn_v and ssm_alpha/beta change type */
    size_t len;
    char *text = tu_read_file(FALLBACK_RECIPE, &len);
    text = realloc(text, len + 1);
    text[len] = 0;
    char *at = strstr(text, "*.attn_v.weight                     => pn4t");
    cr_assert_not_null(at);
    memcpy(strstr(at, "pn4t"), "q8_0", 4);
    at = strstr(text, "*.ssm_beta.weight                => q8_0");
    cr_assert_not_null(at);
    memcpy(strstr(at, "q8_0"), "pn4t", 4);
    char *recipe = path_in("r.mix");
    cr_assert_eq(tu_write_file(recipe, text, len), 0);
    free(text);
    char *scratch = path_in("scratch.gguf"), *re = path_in("re.gguf");
    pn_quantize_opts o;
    reuse_opts_for(&o, src, scratch, NULL);
    o.recipe_path = recipe;
    o.promote = 2;
    o.measurement_path = m;
    reuse_run_ok(&o, NULL);
    for (int th = 1; th <= 2; th++) {
        pn_quantize_stats s;
        reuse_opts_for(&o, src, re, NULL);
        o.recipe_path = recipe;
        o.promote = 2;
        o.measurement_path = m;
        o.reuse_path = prev;
        o.threads = th;
        o.force = true;
        reuse_run_ok(&o, &s);
        assert_same_bytes(scratch, re, "--reuse after a recipe change");
        gguf_reader *r;
        pn_error err;
        cr_assert_eq(gguf_reader_open(re, &r, &err), PN_OK);
        size_t changed = 0;
        for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
            const char *nm = gguf_reader_tensor(r, i)->name;
            changed += strstr(nm, "attn_v") || strstr(nm, "attn_k") || strstr(nm, "ssm_beta");
        }
        cr_assert_gt(changed, 0);
        cr_assert_gt(s.n_reused, 0);
        cr_assert_leq(s.n_reused, gguf_reader_n_tensors(r) - changed);
        gguf_reader_close(r);
    }
    free(src);
    free(m);
    free(prev);
    free(recipe);
    free(scratch);
    free(re);
}

/* ---- --reuse: what changed is quantized again ------------------------------ */

/* Runs --reuse of prev into re (promote 2, the measurement m), and from
 * scratch into scratch; both must be the same bytes. */
static void reuse_and_compare(const char *src, const char *prev, const char *m, bool verify,
                              tu_notes *n, pn_quantize_stats *s)
{
    char *scratch = path_in("scratch.gguf"), *re = path_in("re.gguf");
    pn_quantize_opts o;
    reuse_opts_for(&o, src, scratch, NULL);
    o.promote = 2;
    o.measurement_path = m;
    o.force = true;
    reuse_run_ok(&o, NULL);
    reuse_opts_for(&o, src, re, n);
    o.promote = 2;
    o.measurement_path = m;
    o.reuse_path = prev;
    o.reuse_verify = verify;
    o.force = true;
    reuse_run_ok(&o, s);
    assert_same_bytes(scratch, re, "--reuse against from scratch");
    free(scratch);
    free(re);
}

Test(reuse, a_tensor_changed_in_a_sampled_row_is_quantized_again, .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 13), *m = path_in("m.txt");
    char *prev = reuse_make_prev(src, "prev.gguf", m);
    reuse_nudge_weight(src, "token_embd.weight", 2, 7); /* row 2 of 512: sampled */
    tu_notes n;
    pn_quantize_stats s;
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(prev, &r, &err), PN_OK);
    size_t total = gguf_reader_n_tensors(r);
    gguf_reader_close(r);
    reuse_and_compare(src, prev, m, false, &n, &s);
    cr_assert_eq(s.n_reused, total - 1, "only token_embd is quantized again");
    cr_assert(has(&n, "1 tensor changed in the rows sampled for the source identity since PREV "
                      "was made: quantizing it again (token_embd.weight)"),
              "%s", n.text);
    free(src);
    free(m);
    free(prev);
}

Test(reuse, a_change_in_a_row_not_sampled_is_copied_and_quantized_again_only_with_reuse_verify,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 14), *m = path_in("m.txt");
    char *prev = reuse_make_prev(src, "prev.gguf", m);
    char *prev_src = reuse_copy_file(src, "src-before.gguf");
    reuse_nudge_weight(src, "token_embd.weight", 3, 7); /* row 3 of 512: not sampled */
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(prev, &r, &err), PN_OK);
    size_t total = gguf_reader_n_tensors(r);
    gguf_reader_close(r);

    /* the limit of the default guarantee: copied, so the output is PREV's
     * token_embd, not what the changed source gives */
    char *re = path_in("re.gguf");
    pn_quantize_opts o;
    pn_quantize_stats s;
    reuse_opts_for(&o, src, re, NULL);
    o.promote = 2;
    o.measurement_path = m;
    o.reuse_path = prev;
    reuse_run_ok(&o, &s);
    cr_assert_eq(s.n_reused, total, "every tensor copied");
    char *scratch_old = path_in("scratch-old.gguf");
    reuse_opts_for(&o, prev_src, scratch_old, NULL);
    o.promote = 2;
    o.measurement_path = m;
    reuse_run_ok(&o, NULL);
    /* only the source header hash and the sampled rows are the same: the
     * output is what the old source gave */
    assert_same_bytes(re, scratch_old, "copied without --reuse-verify");

    /* --reuse-verify reads the whole tensor and quantizes it again */
    tu_notes n;
    reuse_and_compare(src, prev, m, true, &n, &s);
    cr_assert_eq(s.n_reused, total - 1, "%zu reused", s.n_reused);
    cr_assert_gt(s.t_verify, 0.0);
    cr_assert(has(&n, "--reuse-verify: 1 tensor of") && has(&n, "(token_embd.weight)"), "%s",
              n.text);
    free(src);
    free(m);
    free(prev);
    free(prev_src);
    free(re);
    free(scratch_old);
}

Test(reuse, a_corrupted_prev_tensor_is_quantized_again_with_a_note_naming_it, .init = setup,
     .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 15), *m = path_in("m.txt");
    char *prev = reuse_make_prev(src, "prev.gguf", m);
    flip_data_bits(prev, "blk.0.ffn_down.weight", 100, 0x40);
    tu_notes n;
    pn_quantize_stats s;
    reuse_and_compare(src, prev, m, false, &n, &s);
    cr_assert(has(&n, "tensor blk.0.ffn_down.weight: its bytes do not match PREV's "
                      "pn.tensor_crc32") &&
                  has(&n, "quantizing it again"),
              "%s", n.text);
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(prev, &r, &err), PN_OK);
    cr_assert_eq(s.n_reused, gguf_reader_n_tensors(r) - 1);
    gguf_reader_close(r);
    free(src);
    free(m);
    free(prev);
}

/* ---- --reuse: PREV of another source, version or identity ------------------ */

Test(reuse, prev_of_another_source_reuses_nothing_and_says_why, .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 16), *other = reuse_synth("other.gguf", 17),
         *m = path_in("m.txt");
    char *m2 = path_in("m2.txt");
    /* pn-synth records its seed: another header */
    char *prev = reuse_make_prev(other, "prev.gguf", m2);
    tu_notes n;
    pn_quantize_stats s;
    reuse_and_compare(src, prev, m, false, &n, &s);
    cr_assert_eq(s.n_reused, 0);
    cr_assert(has(&n, "nothing reused: it was made from another source (the header hash of its "
                      "source is"),
              "%s", n.text);
    /* the same header, every tensor's weights changed (a fine-tuned model) */
    char *tuned = reuse_copy_file(src, "tuned.gguf");
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(tuned, &r, &err), PN_OK);
    size_t nt = gguf_reader_n_tensors(r);
    char **names = calloc(nt, sizeof *names);
    for (size_t i = 0; i < nt; i++)
        names[i] = strdup(gguf_reader_tensor(r, i)->name);
    gguf_reader_close(r);
    for (size_t i = 0; i < nt; i++) {
        flip_data_bits(tuned, names[i], 0, 0x01); /* the lowest mantissa bit: still finite */
        free(names[i]);
    }
    free(names);
    char *prev2 = reuse_make_prev(src, "prev2.gguf", m);
    reuse_and_compare(tuned, prev2, m2, false, &n, &s);
    cr_assert_eq(s.n_reused, 0);
    cr_assert(has(&n, "nothing reused: it was made from another source: the sampled rows of "
                      "every tensor differ (the headers are the same)"),
              "%s", n.text);
    free(src);
    free(other);
    free(m);
    free(m2);
    free(prev);
    free(prev2);
    free(tuned);
}

Test(reuse, prev_by_another_quantizer_version_reuses_nothing_and_says_why, .init = setup,
     .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 18), *prev = path_in("prev.gguf");
    pn_quantize_opts o;
    reuse_opts_for(&o, src, prev, NULL);
    const pn_quantize_testing old = { .quantizer_name = "pn-quantize 0.0-old" };
    o.testing = &old;
    reuse_run_ok(&o, NULL);
    char *re = path_in("re.gguf"), *scratch = path_in("scratch.gguf");
    reuse_opts_for(&o, src, scratch, NULL);
    reuse_run_ok(&o, NULL);
    tu_notes n;
    pn_quantize_stats s;
    reuse_opts_for(&o, src, re, &n);
    o.reuse_path = prev;
    reuse_run_ok(&o, &s);
    assert_same_bytes(scratch, re, "--reuse of another version");
    cr_assert_eq(s.n_reused, 0);
    cr_assert(has(&n, "nothing reused: it was made by another quantizer version ('pn-quantize "
                      "0.0-old'; this run is 'pn-quantize "),
              "%s", n.text);
    free(src);
    free(prev);
    free(re);
    free(scratch);
}

/* A copy of a PN file without its pn.source.* keys (as older versions wrote). */
static void strip_source_keys(const char *from, const char *to)
{
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(from, &r, &err), PN_OK);
    gguf_writer *w = gguf_writer_new();
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        if (kv->key.len >= 10 && memcmp(kv->key.data, "pn.source.", 10) == 0)
            continue;
        cr_assert_eq(gguf_writer_copy_kv(w, kv), PN_OK);
    }
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &err), PN_OK);
    }
    cr_assert_eq(gguf_writer_begin(w, to, &err), PN_OK, "%s", err.msg);
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        void *d = malloc(t->size);
        cr_assert_eq(gguf_reader_read_tensor(r, i, 0, d, t->size, &err), PN_OK);
        cr_assert_eq(gguf_writer_write(w, d, t->size, &err), PN_OK);
        free(d);
    }
    cr_assert_eq(gguf_writer_close(w, &err), PN_OK);
    cr_assert_eq(gguf_writer_commit(w, &err), PN_OK);
    gguf_writer_free(w);
    gguf_reader_close(r);
}

Test(reuse, prev_without_a_recorded_source_identity_reuses_nothing_and_says_why, .init = setup,
     .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 19), *m = path_in("m.txt");
    char *prev = reuse_make_prev(src, "prev.gguf", m), *old = path_in("old.gguf");
    strip_source_keys(prev, old);
    tu_notes n;
    pn_quantize_stats s;
    reuse_and_compare(src, old, m, false, &n, &s);
    cr_assert_eq(s.n_reused, 0);
    cr_assert(has(&n, "nothing reused: it records no source identity (no pn.source.* keys"), "%s",
              n.text);
    free(src);
    free(m);
    free(prev);
    free(old);
}

/* ---- --reuse: PREV is DST -------------------------------------------------- */

static volatile sig_atomic_t g_cancel;

static void cancel_while_quantizing(const pn_progress *p, void *user)
{
    (void)user;
    if (p->phase == PN_PHASE_QUANTIZE && p->weights_done > 0)
        g_cancel = 1;
}

Test(reuse, prev_may_be_dst_with_force_and_stays_intact_until_the_new_file_replaces_it,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 20), *m = path_in("m.txt");
    char *dst = reuse_make_prev(src, "mix.gguf", m);
    char *scratch = path_in("scratch.gguf");
    pn_quantize_opts o;
    reuse_opts_for(&o, src, scratch, NULL);
    o.promote = 4;
    o.measurement_path = m;
    reuse_run_ok(&o, NULL);
    char *before = reuse_copy_file(dst, "before.gguf");
    const int files = tu_count_files(g_dir);

    /* without --force: refused, untouched */
    reuse_opts_for(&o, src, dst, NULL);
    o.promote = 4;
    o.measurement_path = m;
    o.reuse_path = dst;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_EXISTS, "%s", err.msg);
    cr_assert(strstr(err.msg, "--force"), "%s", err.msg);
    assert_same_bytes(dst, before, "refused without --force");

    /* interrupted while quantizing: PREV (= DST) as it was */
    o.force = true;
    g_cancel = 0;
    o.cancel = &g_cancel;
    o.progress = cancel_while_quantizing;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_INTERRUPTED, "%s", err.msg);
    assert_same_bytes(dst, before, "an interrupted run in place");
    cr_assert_eq(tu_count_files(g_dir), files, "nothing left beside it");

    /* with --force: replaced by what a run from scratch writes */
    o.cancel = NULL;
    o.progress = NULL;
    pn_quantize_stats s;
    reuse_run_ok(&o, &s);
    cr_assert_gt(s.n_reused, 0);
    assert_same_bytes(dst, scratch, "--reuse in place");
    free(src);
    free(m);
    free(dst);
    free(scratch);
    free(before);
}

/* ---- --reuse: PREV that cannot be one -------------------------------------- */

Test(reuse, prev_missing_not_gguf_not_pn_or_a_fifo_is_a_clear_error_and_nothing_is_written,
     .init = setup, .fini = teardown)
{
    char *src = reuse_synth("src.gguf", 21), *dst = path_in("dst.gguf");
    char *missing = path_in("missing.gguf"), *text = path_in("text.gguf"), *fifo = path_in("fifo");
    cr_assert_eq(tu_write_file(text, "not a gguf file at all", 22), 0);
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    const int files = tu_count_files(g_dir);
    struct {
        const char *prev;
        pn_status code;
        const char *phrase;
    } cases[] = {
        { missing, PN_ERR_IO, "missing.gguf: cannot open the --reuse file: No such file" },
        { text, PN_ERR_BAD_MAGIC, "text.gguf" },
        { src, PN_ERR_FORMAT,
          "src.gguf: not a PN file (no pn.format key); --reuse needs an "
          "earlier output of pn-quantize" },
        { fifo, PN_ERR_IO, "fifo: the --reuse file is a FIFO" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pn_quantize_opts o;
        reuse_opts_for(&o, src, dst, NULL);
        o.reuse_path = cases[k].prev;
        pn_error err;
        pn_error_clear(&err);
        pn_status st = pn_quantize_file(&o, NULL, &err);
        cr_assert_eq(st, cases[k].code, "%s: %d (%s)", cases[k].prev, st, err.msg);
        cr_assert(strstr(err.msg, cases[k].phrase), "'%s' should say '%s'", err.msg,
                  cases[k].phrase);
        assert_nothing_written(dst, files);
    }
    pn_quantize_opts o;
    reuse_opts_for(&o, src, dst, NULL);
    o.reuse_verify = true;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_USAGE);
    cr_assert(strstr(err.msg, "--reuse-verify needs --reuse"), "%s", err.msg);
    assert_nothing_written(dst, files);
    free(src);
    free(dst);
    free(missing);
    free(text);
    free(fifo);
}

/* ---- the copy itself ------------------------------------------------------- */

static void copy_into(const char *target, int fd, const uint8_t *data, bool by_read)
{
    gguf_writer *w = gguf_writer_new();
    pn_error err;
    int64_t ne[4] = { 1000, 1, 1, 1 }, ne2[4] = { 3, 1, 1, 1 };
    cr_assert_eq(gguf_writer_add_tensor(w, "a", 1, ne, PN_TYPE_F32, &err), PN_OK);
    cr_assert_eq(gguf_writer_add_tensor(w, "b", 1, ne2, PN_TYPE_F32, &err), PN_OK);
    const pn_outfile_testing t = { .copy_by_read = by_read };
    pn_outfile_opts oo = { .testing = &t };
    gguf_writer_set_output_opts(w, &oo);
    cr_assert_eq(gguf_writer_begin(w, target, &err), PN_OK, "%s", err.msg);
    /* a's first bytes written, the rest copied; b copied whole */
    cr_assert_eq(gguf_writer_write(w, data, 10, &err), PN_OK);
    cr_assert_eq(gguf_writer_copy_from(w, fd, 10, 3990, "in", &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_copy_from(w, fd, 4000, 12, "in", &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_close(w, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_commit(w, &err), PN_OK, "%s", err.msg);
    gguf_writer_free(w);
}

Test(reuse, copying_from_another_file_writes_what_writing_the_bytes_writes, .init = setup,
     .fini = teardown)
{
    uint8_t data[4012];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7 + 3);
    char *in = path_in("in.bin"), *ref = path_in("ref.gguf"), *a = path_in("a.gguf"),
         *b = path_in("b.gguf");
    cr_assert_eq(tu_write_file(in, data, sizeof data), 0);
    gguf_writer *w = gguf_writer_new();
    pn_error err;
    int64_t ne[4] = { 1000, 1, 1, 1 }, ne2[4] = { 3, 1, 1, 1 };
    cr_assert_eq(gguf_writer_add_tensor(w, "a", 1, ne, PN_TYPE_F32, &err), PN_OK);
    cr_assert_eq(gguf_writer_add_tensor(w, "b", 1, ne2, PN_TYPE_F32, &err), PN_OK);
    cr_assert_eq(gguf_writer_begin(w, ref, &err), PN_OK);
    cr_assert_eq(gguf_writer_write(w, data, sizeof data, &err), PN_OK);
    cr_assert_eq(gguf_writer_close(w, &err), PN_OK);
    cr_assert_eq(gguf_writer_commit(w, &err), PN_OK);
    gguf_writer_free(w);
    int fd = open(in, O_RDONLY);
    copy_into(a, fd, data, false);
    copy_into(b, fd, data, true);
    assert_same_bytes(ref, a, "copy_file_range");
    assert_same_bytes(ref, b, "pread and write");
    /* a source that ends early */
    char *c = path_in("c.gguf");
    w = gguf_writer_new();
    cr_assert_eq(gguf_writer_add_tensor(w, "a", 1, ne, PN_TYPE_F32, &err), PN_OK);
    cr_assert_eq(gguf_writer_begin(w, c, &err), PN_OK);
    cr_assert_eq(gguf_writer_copy_from(w, fd, 1000, 4000, "in.bin", &err), PN_ERR_TRUNCATED);
    cr_assert(strstr(err.msg, "in.bin: the file ends at byte offset 4012"), "%s", err.msg);
    gguf_writer_free(w);
    cr_assert(!exists(c));
    close(fd);
    free(in);
    free(ref);
    free(a);
    free(b);
    free(c);
}
