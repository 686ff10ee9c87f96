/* The overlapped pn-quantize pipeline: chunks of whole blocks,
 * fused error sums, CRCs per piece, the measurement stream and the parallel
 * validation give figures and bytes that do not depend on the thread count
 * or the chunk size, and equal the separate-pass references computed here.
 *
 * Here the tests that call the library; those that run the built programs
 * are in tests/programs/test_pipeline_cli.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "gguf/gguf.h"
#include "hadamard/hadamard.h"
#include "io/source_id.h"
#include "mix/measurement.h"
#include "pipeline/measure_job.h"
#include "quant/quant_row.h"
#include "pipeline/quantize.h"
#include "pipeline/quantize_testing.h"
#include "pipeline/tensor_job.h"
#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/pn.h"
#include "quant/pn_cuda.h"
#include "quant/types.h"
#include "quant/widen.h"
#include "fixtures/pn_source.h"
#include "fixtures/scratch.h"
#include "test_util.h"

/* ---- a model with one tensor of each kind of chunking ------------------ */

/* With the recipe below: every output type, rows split into pieces
 * (K > chunk) and whole rows, a last sum block shorter than 256, rotation
 * blocks of 16 to 256. */
static const sf_spec g_specs[] = {
    { "a.attn_q.weight", 2, 1280, 5, PN_TYPE_BF16 },   /* pn3t, B 256, unit 1280 */
    { "b.ffn_down.weight", 2, 1088, 6, PN_TYPE_F16 },  /* pn4t, B 64, unit 64 */
    { "c.ffn_up.weight", 2, 240, 9, PN_TYPE_F32 },     /* pn3t, B 16, unit 80 */
    { "d.ssm_alpha.weight", 2, 1056, 3, PN_TYPE_F32 }, /* q8_0 */
    { "output.weight", 2, 768, 4, PN_TYPE_BF16 },      /* q4_K */
    { "token_embd.weight", 2, 512, 5, PN_TYPE_F32 },   /* q3_K */
    { "e.norm", 1, 1000, 1, PN_TYPE_F32 },             /* f32, blocks 256 x3 + 232 */
    { "f.weight", 2, 300, 3, PN_TYPE_F32 },            /* bf16 */
    { "g.weight", 2, 200, 2, PN_TYPE_BF16 },           /* f16 */
};
#define N_SPECS (sizeof g_specs / sizeof g_specs[0])

static const char g_recipe[] = "mix T\n"
                               "rotation hadamard 1024\n"
                               "promote 0\n"
                               "rule token_embd.weight => q3_K\n"
                               "rule output.weight => q4_K\n"
                               "rule *.ssm_alpha.weight => q8_0\n"
                               "rule dims=1 => f32\n"
                               "rule f.weight => bf16\n"
                               "rule g.weight => f16\n"
                               "rule *.ffn_down.weight => pn4t\n"
                               "rule *.attn_q.weight *.ffn_up.weight => pn3t\n";

/* What the result hook saw. */
typedef struct seen {
    size_t n;
    double rel[64];
    uint32_t crc[64];
    int calls;
} seen;

static pn_status keep_result(const pn_quantize_result *r, void *user, pn_error *err)
{
    (void)err;
    seen *s = user;
    s->calls++;
    s->n = r->plan->n_tensors;
    cr_assert_leq(s->n, 64);
    if (r->rel_error)
        memcpy(s->rel, r->rel_error, s->n * sizeof(double));
    if (r->crc32)
        memcpy(s->crc, r->crc32, s->n * sizeof(uint32_t));
    return PN_OK;
}

static void base_opts(pn_quantize_opts *o, const char *src, const char *dst, const char *recipe)
{
    pn_quantize_opts_init(o);
    o->src_path = src;
    o->dst_path = dst;
    o->recipe_path = recipe;
    o->promote = 0;
    o->threads = 1;
    o->backend = PN_BACKEND_CPU;
}

/* The relative error of every tensor, computed here in a separate pass: the
 * reference rotation and quantizers, pn_row_sums_ref per row, blocks added
 * in order from 0.0. */
static void reference_errors(const char *src, const char *dst, double *rel)
{
    gguf_reader *s, *d;
    pn_error err;
    cr_assert_eq(gguf_reader_open(src, &s, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_open(dst, &d, &err), PN_OK, "%s", err.msg);
    for (size_t i = 0; i < gguf_reader_n_tensors(s); i++) {
        const gguf_tensor_info *st = gguf_reader_tensor(s, i), *dt = gguf_reader_tensor(d, i);
        const int64_t K = st->ne[0], rows = st->ne[1] * st->ne[2] * st->ne[3];
        const int64_t src_row = pn_type_row_bytes(st->type, K);
        const int64_t out_row = pn_type_row_bytes(dt->type, K);
        const int64_t sb = pn_sum_block_weights(dt->type);
        const int64_t nb = (K + sb - 1) / sb;
        uint8_t *raw = malloc((size_t)src_row), *q = malloc((size_t)out_row);
        float *x = malloc((size_t)K * sizeof(float));
        double *be = malloc((size_t)nb * sizeof(double)), *bn = malloc((size_t)nb * sizeof(double));
        int B = pn_type_is_pn(dt->type) ? pn_hadamard_block_size(K, 1024) : 1;
        double num = 0.0, den = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            cr_assert_eq(
                gguf_reader_read_tensor(s, i, (uint64_t)(r * src_row), raw, (size_t)src_row, &err),
                PN_OK);
            cr_assert_eq(pn_widen_row(st->type, raw, x, K), PN_OK);
            if (B > 1)
                pn_hadamard_rotate_row_ref(x, K, B);
            if (pn_type_is_pn(dt->type))
                cr_assert_eq(pn_quantize_row_ref(dt->type, x, K, q, NULL), PN_OK);
            else
                cr_assert_eq(pn_quantize_row_stock(dt->type, x, K, q, NULL), PN_OK);
            uint8_t *stored = malloc((size_t)out_row);
            cr_assert_eq(gguf_reader_read_tensor(d, i, (uint64_t)(r * out_row), stored,
                                                 (size_t)out_row, &err),
                         PN_OK);
            cr_assert(memcmp(stored, q, (size_t)out_row) == 0, "%s row %lld differs", st->name,
                      (long long)r);
            free(stored);
            pn_row_sums_ref(dt->type, x, q, K, be, bn);
            for (int64_t b = 0; b < nb; b++) {
                num += be[b];
                den += bn[b];
            }
        }
        rel[i] = den > 0.0 ? num / den : 0.0;
        free(raw);
        free(q);
        free(x);
        free(be);
        free(bn);
    }
    gguf_reader_close(s);
    gguf_reader_close(d);
}

static void file_crcs(const char *path, uint32_t *crc)
{
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(path, &r, &err), PN_OK, "%s", err.msg);
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        uint8_t *b = malloc(t->size);
        cr_assert_eq(gguf_reader_read_tensor(r, i, 0, b, t->size, &err), PN_OK);
        crc[i] = (uint32_t)crc32(0, b, (uInt)t->size);
        free(b);
    }
    gguf_reader_close(r);
}

Test(pipeline,
     reported_errors_equal_the_separate_pass_reference_bit_for_bit_at_any_threads_and_chunk,
     .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix");
    sf_write_model(src, g_specs, N_SPECS, 77);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    const int64_t chunks[] = { 256, 1000, 3000, 0 };
    const int threads[] = { 1, 2 };
    double ref[64];
    uint32_t crcs[64];
    char *first = NULL;
    for (size_t ci = 0; ci < 4; ci++)
        for (size_t ti = 0; ti < 2; ti++) {
            char name[64];
            snprintf(name, sizeof name, "out-%zu-%zu.gguf", ci, ti);
            char *dst = path_in(name);
            seen s;
            memset(&s, 0, sizeof s);
            pn_quantize_opts o;
            base_opts(&o, src, dst, recipe);
            o.threads = threads[ti];
            o.chunk_weights = chunks[ci];
            o.result = keep_result;
            o.user = &s;
            pn_error err;
            cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
            cr_assert_eq(s.calls, 1);
            cr_assert_eq(s.n, N_SPECS);
            if (!first) {
                first = dst;
                reference_errors(src, dst, ref);
                file_crcs(dst, crcs);
            } else {
                size_t na, nb;
                void *a = tu_read_file(first, &na), *b = tu_read_file(dst, &nb);
                cr_assert(na == nb && memcmp(a, b, na) == 0, "chunk %lld, %d threads: other bytes",
                          (long long)chunks[ci], threads[ti]);
                free(a);
                free(b);
                free(dst);
            }
            for (size_t i = 0; i < N_SPECS; i++) {
                cr_assert(memcmp(&s.rel[i], &ref[i], sizeof(double)) == 0,
                          "%s, chunk %lld, %d threads: E = %.17g, the reference %.17g",
                          g_specs[i].name, (long long)chunks[ci], threads[ti], s.rel[i], ref[i]);
                if (i == 6) /* e.norm is stored as f32: no error at all */
                    cr_assert_eq(ref[i], 0.0, "%s", g_specs[i].name);
                else if (i != 8) /* g.weight: bf16 into f16 may well be exact */
                    cr_assert_gt(ref[i], 0.0, "%s", g_specs[i].name);
                cr_assert_eq(s.crc[i], crcs[i], "%s: CRC", g_specs[i].name);
            }
        }
    free(first);
    free(src);
    free(recipe);
}

Test(pipeline, chunks_are_whole_blocks_and_split_long_rows_at_units)
{
    pn_job_tensor t;
    pn_error err;
    /* q4_K row of 5120 with a chunk of 1000 weights: pieces of 768 (3 x 256) */
    cr_assert_eq(
        pn_job_tensor_init(&t, 0, "x", 5120, 3, PN_TYPE_BF16, PN_TYPE_Q4_K, 0, 1000, 1 << 20, &err),
        PN_OK);
    cr_assert_eq(t.unit, 256);
    cr_assert_eq(t.cols_per_chunk, 768);
    pn_job_cursor cur = { 0, 0, 0 };
    pn_chunk c;
    int64_t weights = 0, chunks = 0;
    while (memset(&c, 0, sizeof c), pn_job_cursor_next(&cur, &t, 1, &c)) {
        cr_assert_eq(c.n_rows, 1);
        cr_assert_eq(c.col0 % 256, 0);
        cr_assert_leq(c.n_cols, 768);
        cr_assert(c.n_cols == 768 || c.col0 + c.n_cols == 5120);
        weights += c.n_rows * c.n_cols;
        chunks++;
    }
    cr_assert_eq(weights, 5120 * 3);
    cr_assert_eq(chunks, 3 * 7);
    /* pn3t, K 5120, B 1024: the unit is the whole row, whatever the chunk */
    cr_assert_eq(pn_job_tensor_init(&t, 0, "y", 5120, 2, PN_TYPE_BF16, PN_TYPE_PN3T, 1024, 300,
                                    1 << 20, &err),
                 PN_OK);
    cr_assert_eq(t.unit, 5120);
    cr_assert_eq(t.cols_per_chunk, 5120);
    /* a 1-D f32 tensor of 2^24: never more than the chunk in memory */
    cr_assert_eq(pn_job_tensor_init(&t, 0, "z", (int64_t)1 << 24, 1, PN_TYPE_F32, PN_TYPE_F32, 0,
                                    1 << 16, 1 << 20, &err),
                 PN_OK);
    int64_t w, b;
    uint64_t ob;
    pn_job_tensor_needs(&t, &w, &ob, &b);
    cr_assert_eq(w, 1 << 16);
    cr_assert_eq(ob, (uint64_t)4 << 16);
    cr_assert_eq(b, 256);
    /* a block that does not divide K is refused, naming the tensor */
    cr_assert_eq(pn_job_tensor_init(&t, 0, "bad.weight", 100, 1, PN_TYPE_F32, PN_TYPE_Q8_0, 0,
                                    1 << 16, 1 << 20, &err),
                 PN_ERR_USAGE);
    cr_assert(strstr(err.msg, "bad.weight"), "%s", err.msg);
}


/* E3, E4 of every candidate as mix/measurement.h defines them, computed here on
 * the whole sampled rows with pn_measure_row. */
static void reference_measurement(const char *src, const sf_spec *specs, size_t n, int64_t max_rows,
                                  double *e3, double *e4)
{
    gguf_reader *s;
    pn_error err;
    cr_assert_eq(gguf_reader_open(src, &s, &err), PN_OK, "%s", err.msg);
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(s, i);
        const int64_t K = t->ne[0], rows = t->ne[1];
        const int64_t src_row = pn_type_row_bytes(t->type, K);
        int64_t *sample = malloc((size_t)rows * sizeof *sample);
        int64_t ns = tu_sample_rows(rows, max_rows, sample);
        uint8_t *raw = malloc((size_t)src_row);
        float *x = malloc((size_t)K * sizeof(float));
        void *scratch = malloc(pn_measure_scratch_bytes(K));
        pn_measure_acc acc = { 0 };
        for (int64_t k = 0; k < ns; k++) {
            cr_assert_eq(gguf_reader_read_tensor(s, i, (uint64_t)(sample[k] * src_row), raw,
                                                 (size_t)src_row, &err),
                         PN_OK);
            pn_widen_row(t->type, raw, x, K);
            pn_hadamard_rotate_row_ref(x, K, pn_hadamard_block_size(K, 1024));
            double a, b, c;
            cr_assert_eq(pn_measure_row(x, K, scratch, &a, &b, &c, &err), PN_OK, "%s", err.msg);
            pn_measure_acc_add(&acc, a, b, c);
        }
        pn_measure_acc_result(&acc, &e3[i], &e4[i]);
        free(sample);
        free(raw);
        free(x);
        free(scratch);
    }
    (void)specs;
    gguf_reader_close(s);
}

Test(pipeline, measured_figures_equal_pn_measure_row_at_any_threads_and_chunk_even_in_pieces,
     .init = setup, .fini = teardown)
{
    /* pn3t candidates: rows measured whole, and a row of 20480 measured in
     * pieces when the chunk is smaller */
    static const sf_spec cands[] = {
        { "a.attn_q.weight", 2, 1280, 300, PN_TYPE_BF16 },
        { "b.ffn_up.weight", 2, 20480, 3, PN_TYPE_F32 },
        { "c.attn_qkv.weight", 2, 320, 7, PN_TYPE_F16 },
    };
    static const char recipe_text[] = "mix M\nrotation hadamard 1024\npromote 1\n"
                                      "rule *.weight => pn3t\n";
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix");
    sf_write_model(src, cands, 3, 5);
    cr_assert_eq(tu_write_file(recipe, recipe_text, strlen(recipe_text)), 0);
    double e3[3], e4[3];
    reference_measurement(src, cands, 3, 100, e3, e4);
    const int64_t chunks[] = { 256, 5000, 0 };
    for (size_t ci = 0; ci < 3; ci++)
        for (int th = 1; th <= 2; th++) {
            char *dst = path_in("out.gguf"), *mpath = path_in("m.txt");
            pn_quantize_opts o;
            base_opts(&o, src, dst, recipe);
            o.promote = 1;
            o.measure_rows = 100;
            o.measurement_path = mpath;
            o.threads = th;
            o.chunk_weights = chunks[ci];
            o.dry_run = true;
            o.dst_path = NULL;
            pn_error err;
            cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
            pn_measurement *m;
            cr_assert_eq(pn_measurement_load(mpath, &m, NULL, &err), PN_OK, "%s", err.msg);
            cr_assert_eq(m->n, 3);
            for (size_t i = 0; i < 3; i++) {
                cr_assert_str_eq(m->entries[i].name, cands[i].name);
                cr_assert(memcmp(&m->entries[i].e3, &e3[i], sizeof(double)) == 0 &&
                              memcmp(&m->entries[i].e4, &e4[i], sizeof(double)) == 0,
                          "%s, chunk %lld, %d threads: E3 %.17g E4 %.17g, expected %.17g %.17g",
                          cands[i].name, (long long)chunks[ci], th, m->entries[i].e3,
                          m->entries[i].e4, e3[i], e4[i]);
            }
            pn_measurement_free(m);
            unlink(mpath);
            free(dst);
            free(mpath);
        }
    free(src);
    free(recipe);
}

/* ---- validation still checks every CRC and every PN block ---------------- */

typedef struct damage {
    const char *dir;
    const char *tensor;
    int which; /* 0: flip a data byte (CRC), 1: set a pn3t reserved bit */
    int done;
} damage;


/* At the validation phase the temporary file is written and closed: damage
 * one tensor of it. */
static void damage_at_validation(const pn_progress *p, void *user)
{
    damage *d = user;
    if (p->phase != PN_PHASE_VALIDATE || d->done)
        return;
    d->done = 1;
    char *tmp = tu_find_temporary_output(d->dir);
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(tmp, &r, &err), PN_OK, "%s", err.msg);
    long i = gguf_reader_find_tensor(r, d->tensor);
    cr_assert_geq(i, 0);
    /* the second row's first block, word 0 */
    const gguf_tensor_info *t = gguf_reader_tensor(r, (size_t)i);
    uint64_t row = (uint64_t)pn_type_row_bytes(t->type, t->ne[0]);
    uint64_t at = gguf_reader_tensor_file_offset(r, (size_t)i) + row + 2;
    gguf_reader_close(r);
    FILE *f = fopen(tmp, "r+b");
    cr_assert_not_null(f);
    fseek(f, (long)at, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, (long)at, SEEK_SET);
    if (d->which) {
        /* bit 15 of word 0 is reserved in pn3t */
        fseek(f, (long)at + 1, SEEK_SET);
        int hi = fgetc(f);
        fseek(f, (long)at + 1, SEEK_SET);
        fputc(hi | 0x80, f);
    } else {
        fputc(ch ^ 0x01, f);
    }
    fclose(f);
    free(tmp);
}

Test(pipeline, validation_reads_the_written_file_back_and_refuses_a_bad_crc_or_reserved_bit,
     .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix"), *dst = path_in("dst.gguf");
    sf_write_model(src, g_specs, N_SPECS, 3);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    for (int which = 0; which < 2; which++) {
        damage d = { g_dir, which ? "a.attn_q.weight" : "b.ffn_down.weight", which, 0 };
        pn_quantize_opts o;
        base_opts(&o, src, dst, recipe);
        o.threads = 2;
        o.progress = damage_at_validation;
        o.user = &d;
        pn_error err;
        pn_status st = pn_quantize_file(&o, NULL, &err);
        cr_assert_eq(d.done, 1);
        if (which == 0) {
            cr_assert_eq(st, PN_ERR_CRC, "%s", err.msg);
            cr_assert(strstr(err.msg, "b.ffn_down.weight") && strstr(err.msg, "CRC"), "%s",
                      err.msg);
        } else {
            cr_assert_eq(st, PN_ERR_RESERVED_BITS, "%s", err.msg);
            cr_assert(strstr(err.msg, "a.attn_q.weight") && strstr(err.msg, "row 1") &&
                          strstr(err.msg, "block 0"),
                      "%s", err.msg);
        }
        cr_assert(!exists(dst));
        cr_assert_eq(tu_count_temporary_files(g_dir), 0, "a temporary file is left");
    }
    free(src);
    free(recipe);
    free(dst);
}

/* A model of 6.6 MB of output: with the output dropped from the page cache
 * 256 KiB behind the writer, the first tensor settles on the device during
 * the run (once the writer's 4 MiB buffer is handed to the file) and is
 * read back there; the rest is read back at the end. */
Test(pipeline,
     the_output_read_back_behind_the_writer_is_the_same_file_and_what_settled_is_read_there,
     .init = setup, .fini = teardown)
{
    static const sf_spec specs[] = {
        { "a.attn_q.weight", 2, 5120, 1024, PN_TYPE_BF16 },  /* pn3t, 2.2 MB */
        { "b.ffn_down.weight", 2, 4096, 1024, PN_TYPE_F16 }, /* pn4t, 2.2 MB */
        { "c.ffn_up.weight", 2, 5120, 1024, PN_TYPE_F32 },   /* pn3t, 2.2 MB */
        { "d.norm", 1, 5120, 1, PN_TYPE_F32 },
    };
    static const char recipe_text[] = "mix T\nrotation hadamard 1024\npromote 0\n"
                                      "rule dims=1 => f32\nrule *.ffn_down.weight => pn4t\n"
                                      "rule *.attn_q.weight *.ffn_up.weight => pn3t\n";
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix");
    char *dst[2] = { path_in("default.gguf"), path_in("behind.gguf") };
    sf_write_model(src, specs, sizeof specs / sizeof specs[0], 5);
    cr_assert_eq(tu_write_file(recipe, recipe_text, strlen(recipe_text)), 0);
    pn_quantize_stats stats[2];
    for (int k = 0; k < 2; k++) {
        pn_quantize_opts o;
        base_opts(&o, src, dst[k], recipe);
        o.threads = 2;
        const pn_quantize_testing t = { .drop_behind_bytes = k ? 262144 : 0 }; /* 0: 128 MiB */
        o.testing = &t;
        pn_error err;
        cr_assert_eq(pn_quantize_file(&o, &stats[k], &err), PN_OK, "%s", err.msg);
    }
    cr_assert_eq(stats[0].validated_behind_bytes, 0);
    cr_assert_geq(stats[1].validated_behind_bytes, (uint64_t)2176 * 1024,
                  "%llu bytes read back behind the writer",
                  (unsigned long long)stats[1].validated_behind_bytes);
    size_t n0, n1;
    uint8_t *b0 = tu_read_file(dst[0], &n0), *b1 = tu_read_file(dst[1], &n1);
    cr_assert(n0 == n1 && memcmp(b0, b1, n0) == 0, "the files differ");
    free(b0);
    free(b1);
    free(src);
    free(recipe);
    free(dst[0]);
    free(dst[1]);
}

/* ---- the CUDA path in the overlapped flow (its kernel emulated on the host) ---- */

Test(pipeline, the_emulated_gpu_path_gives_the_cpus_bytes_crcs_and_errors_at_any_chunk,
     .init = setup, .fini = teardown)
{
    if (!pn_cuda_build_enabled())
        cr_skip("this build has no CUDA backend, so there is no GPU path to compare");
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix");
    char *cpu = path_in("cpu.gguf"), *gpu = path_in("gpu.gguf");
    sf_write_model(src, g_specs, N_SPECS, 21);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    seen a, b;
    memset(&a, 0, sizeof a);
    pn_quantize_opts o;
    base_opts(&o, src, cpu, recipe);
    o.result = keep_result;
    o.user = &a;
    pn_error err;
    cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
    /* GPU chunks deferred while CPU chunks (the stock types) go on, across
     * tensor boundaries */
    const int64_t chunks[] = { 256, 3000 };
    for (int i = 0; i < 2; i++) {
        memset(&b, 0, sizeof b);
        base_opts(&o, src, gpu, recipe);
        o.backend = PN_BACKEND_CUDA;
        o.cuda_emulate = true;
        o.threads = 2;
        o.chunk_weights = chunks[i];
        o.result = keep_result;
        o.user = &b;
        pn_quantize_stats s;
        cr_assert_eq(pn_quantize_file(&o, &s, &err), PN_OK, "%s", err.msg);
        cr_assert(strncmp(s.backend, "cuda", 4) == 0, "%s", s.backend);
        size_t na, nb;
        void *da = tu_read_file(cpu, &na), *db = tu_read_file(gpu, &nb);
        cr_assert(na == nb && memcmp(da, db, na) == 0, "chunk %lld: other bytes",
                  (long long)chunks[i]);
        free(da);
        free(db);
        cr_assert(memcmp(a.rel, b.rel, N_SPECS * sizeof(double)) == 0, "other errors");
        cr_assert(memcmp(a.crc, b.crc, N_SPECS * sizeof(uint32_t)) == 0, "other CRCs");
        unlink(gpu);
    }
    free(src);
    free(recipe);
    free(cpu);
    free(gpu);
}

/* ---- a non-finite weight is found where it is, whatever the chunking ---- */

Test(pipeline, a_nonfinite_weight_is_named_by_row_and_column_in_whole_and_split_rows, .init = setup,
     .fini = teardown)
{
    static const sf_spec specs[] = { { "blk.0.ssm_alpha.weight", 2, 4096, 3, PN_TYPE_F32 } };
    static const char recipe_text[] = "mix N\nrotation hadamard 1024\nrule *.weight => q8_0\n";
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix"), *dst = path_in("dst.gguf");
    cr_assert_eq(tu_write_file(recipe, recipe_text, strlen(recipe_text)), 0);
    const int64_t where[][2] = { { 2, 4095 }, { 0, 1025 }, { 1, 0 } };
    const float bad[] = { INFINITY, NAN, -INFINITY };
    const int64_t chunks[] = { 1000, 0 };
    for (int w = 0; w < 3; w++)
        for (int ci = 0; ci < 2; ci++) {
            sf_write_model(src, specs, 1, 8);
            gguf_reader *r;
            pn_error err;
            cr_assert_eq(gguf_reader_open(src, &r, &err), PN_OK);
            uint64_t at = gguf_reader_tensor_file_offset(r, 0) +
                          (uint64_t)(where[w][0] * 4096 + where[w][1]) * 4;
            gguf_reader_close(r);
            FILE *f = fopen(src, "r+b");
            fseek(f, (long)at, SEEK_SET);
            fwrite(&bad[w], 4, 1, f);
            fclose(f);
            pn_quantize_opts o;
            base_opts(&o, src, dst, recipe);
            o.threads = 2;
            o.chunk_weights = chunks[ci];
            cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_NONFINITE, "%s", err.msg);
            char row[32], col[32];
            snprintf(row, sizeof row, "row %lld,", (long long)where[w][0]);
            snprintf(col, sizeof col, "column %lld:", (long long)where[w][1]);
            cr_assert(strstr(err.msg, "blk.0.ssm_alpha.weight") && strstr(err.msg, row) &&
                          strstr(err.msg, col),
                      "chunk %lld: %s", (long long)chunks[ci], err.msg);
            cr_assert(!exists(dst));
            unlink(src);
        }
    free(src);
    free(recipe);
    free(dst);
}

/* ---- the read side in the team: the same bytes and identity whatever ---- */

/* Tensors larger than the team's widening slices (256 K weights), cut inside
 * rows and at any offset; more rows than the sampled-rows rule takes (256),
 * so the sampled CRC covers a part of each slice; every source type. */
static const sf_spec g_read_specs[] = {
    { "blk.0.attn_q.weight", 2, 1280, 300, PN_TYPE_BF16 }, /* pn3t */
    { "blk.0.ffn_down.weight", 2, 69632, 4, PN_TYPE_F16 }, /* pn4t, rows > a slice */
    { "blk.0.ffn_up.weight", 2, 240, 400, PN_TYPE_F32 },   /* pn3t, read in place */
    { "blk.0.attn_norm.weight", 1, 1000, 1, PN_TYPE_F32 }, /* f32 */
    { "blk.1.attn_q.weight", 2, 1280, 60, PN_TYPE_F32 },   /* pn3t */
    { "output.weight", 2, 768, 100, PN_TYPE_BF16 },        /* q4_K */
    { "token_embd.weight", 2, 512, 600, PN_TYPE_F16 },     /* q3_K, sampled */
};
#define N_READ_SPECS (sizeof g_read_specs / sizeof g_read_specs[0])

static const char g_read_recipe[] = "mix R\n"
                                    "rotation hadamard 1024\n"
                                    "promote 1\n"
                                    "rule token_embd.weight => q3_K\n"
                                    "rule output.weight => q4_K\n"
                                    "rule dims=1 => f32\n"
                                    "rule *.ffn_down.weight => pn4t\n"
                                    "rule *.attn_q.weight *.ffn_up.weight => pn3t\n";

static const gguf_kv *need_key(const gguf_reader *r, const char *key)
{
    const gguf_kv *kv = gguf_reader_find_kv(r, key);
    cr_assert(kv, "key %s is absent", key);
    return kv;
}

/* The output's pn.source.* keys are the source's, computed here from its
 * bytes: the CRC-32 of every tensor's bytes and of its sampled rows. */
static void assert_source_keys(const char *out, const char *src)
{
    gguf_reader *o, *s;
    pn_error err;
    cr_assert_eq(gguf_reader_open(out, &o, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_reader_open(src, &s, &err), PN_OK, "%s", err.msg);
    size_t n;
    uint8_t *bytes = tu_read_file(src, &n);
    const gguf_kv *sc = need_key(o, "pn.source.sample_crc32");
    const gguf_kv *tc = need_key(o, "pn.source.tensor_crc32");
    cr_assert_eq(need_key(o, "pn.source.sample_rows")->v.u64, 256);
    int64_t rows[256];
    for (size_t i = 0; i < gguf_reader_n_tensors(s); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(s, i);
        const uint8_t *data = bytes + gguf_reader_tensor_file_offset(s, i);
        const int64_t R = t->ne[1] * t->ne[2] * t->ne[3];
        const uint64_t rb = t->size / (uint64_t)R;
        uLong crc = 0;
        int64_t k = tu_sample_rows(R, 256, rows);
        for (int64_t j = 0; j < k; j++)
            crc = crc32(crc, data + (uint64_t)rows[j] * rb, (uInt)rb);
        cr_assert_eq((uint32_t)gguf_kv_arr_u64(sc, i), (uint32_t)crc, "%s sampled rows", t->name);
        cr_assert_eq((uint32_t)gguf_kv_arr_u64(tc, i), (uint32_t)crc32(0, data, (uInt)t->size),
                     "%s whole", t->name);
    }
    free(bytes);
    gguf_reader_close(o);
    gguf_reader_close(s);
}

Test(pipeline, the_team_widens_and_crcs_the_source_to_the_same_bytes_and_keys_at_1_2_3_7_threads,
     .init = setup, .fini = teardown)
{
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix");
    sf_write_model(src, g_read_specs, N_READ_SPECS, 21);
    cr_assert_eq(tu_write_file(recipe, g_read_recipe, strlen(g_read_recipe)), 0);
    const int threads[] = { 1, 2, 3, 7 };
    /* default (4 M: whole tensors), cut inside a slice's rows, long rows in
     * column pieces, the smallest chunk */
    const int64_t chunks[] = { 0, 100000, 5000, 256 };
    uint8_t *want = NULL, *want_m = NULL;
    size_t want_n = 0, want_mn = 0;
    for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++)
        for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
            char name[64], mname[64];
            snprintf(name, sizeof name, "out-%d-%lld.gguf", threads[ti], (long long)chunks[ci]);
            snprintf(mname, sizeof mname, "m-%d-%lld.txt", threads[ti], (long long)chunks[ci]);
            char *dst = path_in(name), *m = path_in(mname);
            pn_quantize_opts o;
            base_opts(&o, src, dst, recipe);
            o.promote = 1;
            o.measurement_path = m; /* measured here: the measurement stream too */
            o.threads = threads[ti];
            o.chunk_weights = chunks[ci];
            pn_error err;
            cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_OK, "%s", err.msg);
            size_t n, mn;
            uint8_t *got = tu_read_file(dst, &n), *got_m = tu_read_file(m, &mn);
            if (!want) {
                assert_source_keys(dst, src);
                want = got;
                want_n = n;
                want_m = got_m;
                want_mn = mn;
            } else {
                cr_assert(n == want_n && memcmp(got, want, n) == 0,
                          "%d threads, chunk %lld: the output differs from 1 thread's", threads[ti],
                          (long long)chunks[ci]);
                cr_assert(mn == want_mn && memcmp(got_m, want_m, mn) == 0,
                          "%d threads, chunk %lld: the measurement differs", threads[ti],
                          (long long)chunks[ci]);
                free(got);
                free(got_m);
            }
            free(dst);
            free(m);
        }
    free(want);
    free(want_m);
    free(src);
    free(recipe);
}

Test(pipeline, the_first_nonfinite_weight_is_named_whichever_thread_widens_it, .init = setup,
     .fini = teardown)
{
    /* 5 x 69632 bf16 weights: one chunk of 2 slices at the default size;
     * two bad weights in different slices: the first in the tensor's order
     * is named, whichever thread widens which slice first */
    static const sf_spec specs[] = { { "blk.0.ffn_down.weight", 2, 69632, 5, PN_TYPE_BF16 } };
    static const char recipe_text[] = "mix N\nrotation hadamard 1024\nrule *.weight => pn4t\n";
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix"), *dst = path_in("dst.gguf");
    cr_assert_eq(tu_write_file(recipe, recipe_text, strlen(recipe_text)), 0);
    sf_write_model(src, specs, 1, 8);
    gguf_reader *r;
    pn_error err;
    cr_assert_eq(gguf_reader_open(src, &r, &err), PN_OK);
    const uint64_t base = gguf_reader_tensor_file_offset(r, 0);
    gguf_reader_close(r);
    const int64_t bad[][2] = { { 1, 1368 }, { 4, 5 } }; /* row, column: slices 0 and 1 */
    const uint16_t bits[] = { 0x7fc0, 0xff80 };         /* NaN, -inf */
    FILE *f = fopen(src, "r+b");
    for (int i = 0; i < 2; i++) {
        fseek(f, (long)(base + (uint64_t)(bad[i][0] * 69632 + bad[i][1]) * 2), SEEK_SET);
        fwrite(&bits[i], 2, 1, f);
    }
    fclose(f);
    const int threads[] = { 1, 3, 7 };
    const int64_t chunks[] = { 0, 100000, 20480 };
    for (int ti = 0; ti < 3; ti++)
        for (int ci = 0; ci < 3; ci++) {
            pn_quantize_opts o;
            base_opts(&o, src, dst, recipe);
            o.threads = threads[ti];
            o.chunk_weights = chunks[ci];
            cr_assert_eq(pn_quantize_file(&o, NULL, &err), PN_ERR_NONFINITE, "%s", err.msg);
            cr_assert(strstr(err.msg, "blk.0.ffn_down.weight, row 1, column 1368:"),
                      "%d threads, chunk %lld: %s", threads[ti], (long long)chunks[ci], err.msg);
            cr_assert(!exists(dst));
        }
    free(src);
    free(recipe);
    free(dst);
}

Test(pipeline, sampled_rows_crc_pieces_joined_in_order_are_the_crc_of_the_sampled_rows)
{
    enum { K = 7, R = 1000, M = 256 };
    uint8_t *x = malloc(R * K * 2);
    uint64_t state = 9;
    for (int i = 0; i < R * K * 2; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (uint8_t)(state >> 56);
    }
    int64_t rows[M];
    int64_t k = tu_sample_rows(R, M, rows);
    uLong want = 0;
    uint64_t want_len = 0;
    for (int64_t j = 0; j < k; j++) {
        want = crc32(want, x + rows[j] * K * 2, K * 2);
        want_len += K * 2;
    }
    for (int trial = 0; trial < 50; trial++) {
        uLong crc = 0;
        uint64_t len = 0;
        for (int64_t at = 0; at < R * K;) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            int64_t n = 1 + (int64_t)((state >> 33) % (uint64_t)(trial < 25 ? 5 : 3000));
            if (n > R * K - at)
                n = R * K - at;
            uint64_t l;
            uint32_t c = pn_sample_crc_piece(R, M, K, 2, at, x + at * 2, n, &l);
            if (l == 0)
                cr_assert_eq(c, 0);
            crc = crc32_combine(crc, c, (z_off_t)l);
            len += l;
            at += n;
        }
        cr_assert_eq((uint32_t)crc, (uint32_t)want, "trial %d", trial);
        cr_assert_eq(len, want_len, "trial %d", trial);
    }
    uint64_t l;
    cr_assert_eq(pn_sample_crc_piece(200, M, K, 2, 0, x, 200 * K, &l),
                 (uint32_t)crc32(0, x, 200 * K * 2));
    cr_assert_eq(l, 200 * K * 2);
    free(x);
}
