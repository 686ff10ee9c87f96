/* pn_model_fixture.h - a small float model and its PN file, made in the test
 * with the project's own writer, plus ways to damage the PN file. Shared by
 * tests/test_check.c and tests/test_dequant.c (header-only: each test program
 * is one translation unit plus test_util.c).
 *
 * The model (source GGUF, tensor order as listed):
 *   token_embd.weight        256 x 6   f32  -> q3_K
 *   blk.0.attn_norm.weight   320       f32  -> f32
 *   blk.0.attn_q.weight      320 x 16  f32  -> pn3t  (rotation block 64)
 *   blk.0.ffn_gate.weight    320 x 8   bf16 -> pn4t  (recipe pn3t, promoted)
 *   blk.0.ffn_down.weight    384 x 8   f16  -> pn4t  (rotation block 128)
 *   blk.0.ssm_alpha.weight   320 x 4   f32  -> q8_0
 *   output.weight            256 x 4   f32  -> q4_K
 * with the recipe FX_RECIPE (mix "T0", promote 1), so pn.mix is "T0+1".
 */
#ifndef PN_MODEL_FIXTURE_H
#define PN_MODEL_FIXTURE_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "hadamard/hadamard.h"
#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/pn.h"
#include "quant/quant_row.h"
#include "quant/types.h"
#include "quant/widen.h"
#include "test_util.h"

#define FX_N 7
#define FX_UNUSED __attribute__((unused))

typedef struct fx_spec {
    const char *name;
    uint32_t n_dims;
    int64_t K, rows;
    int src_type;
    int type;
} fx_spec;

static const fx_spec fx_specs[FX_N] = {
    { "token_embd.weight", 2, 256, 6, PN_TYPE_F32, PN_TYPE_Q3_K },
    { "blk.0.attn_norm.weight", 1, 320, 1, PN_TYPE_F32, PN_TYPE_F32 },
    { "blk.0.attn_q.weight", 2, 320, 16, PN_TYPE_F32, PN_TYPE_PN3T },
    { "blk.0.ffn_gate.weight", 2, 320, 8, PN_TYPE_BF16, PN_TYPE_PN4T },
    { "blk.0.ffn_down.weight", 2, 384, 8, PN_TYPE_F16, PN_TYPE_PN4T },
    { "blk.0.ssm_alpha.weight", 2, 320, 4, PN_TYPE_F32, PN_TYPE_Q8_0 },
    { "output.weight", 2, 256, 4, PN_TYPE_F32, PN_TYPE_Q4_K },
};
enum { FX_EMBD, FX_NORM, FX_ATTN_Q, FX_FFN_GATE, FX_FFN_DOWN, FX_ALPHA, FX_OUTPUT };

static const char FX_RECIPE[] = "mix T0\n"
                                "rotation hadamard 1024\n"
                                "promote 1\n"
                                "rule token_embd.weight => q3_K\n"
                                "rule output.weight => q4_K\n"
                                "rule *.ssm_alpha.weight => q8_0\n"
                                "rule *_norm.weight => f32\n"
                                "rule *.ffn_down.weight => pn4t\n"
                                "rule *.attn_q.weight *.ffn_gate.weight => pn3t\n";

/* The source weights, widened (what the quantizer sees before rotation). */
typedef struct fx_model {
    float *w[FX_N];
} fx_model;

static FX_UNUSED int64_t fx_count(int i)
{
    return fx_specs[i].K * fx_specs[i].rows;
}

static FX_UNUSED void fx_make_model(fx_model *m)
{
    tu_rng rng = { 0x5eed0001 };
    for (int i = 0; i < FX_N; i++) {
        const int64_t n = fx_count(i);
        m->w[i] = malloc((size_t)n * sizeof(float));
        cr_assert_not_null(m->w[i]);
        for (int64_t e = 0; e < n; e++) {
            int64_t row = e / fx_specs[i].K;
            double v = i == FX_NORM ? 1.0 + 0.1 * tu_rng_gauss(&rng)
                                    : 0.02 * (1.0 + (double)(row % 3)) * tu_rng_gauss(&rng);
            if (i != FX_NORM && e % 97 == 13)
                v *= 6.0; /* a few outliers, as real weights have */
            float f = (float)v;
            /* The source is stored in its type; the model is what it widens to. */
            if (fx_specs[i].src_type == PN_TYPE_F16)
                f = pn_fp16_to_float(pn_fp16_from_float(f));
            else if (fx_specs[i].src_type == PN_TYPE_BF16)
                f = pn_bf16_to_float(pn_bf16_from_float(f));
            m->w[i][e] = f;
        }
    }
}

static FX_UNUSED void fx_free_model(fx_model *m)
{
    for (int i = 0; i < FX_N; i++)
        free(m->w[i]);
}

static FX_UNUSED void fx_ne(int i, int64_t ne[4])
{
    ne[0] = fx_specs[i].K;
    ne[1] = fx_specs[i].n_dims > 1 ? fx_specs[i].rows : 1;
    ne[2] = ne[3] = 1;
}

/* Finishes a writer whose keys and tensors are set: streams `data` (one
 * buffer per tensor, `bytes` each) and commits to path. */
static FX_UNUSED void fx_write_file(gguf_writer *w, const char *path, uint8_t *const *data,
                                    const size_t *bytes, int n)
{
    pn_error err = { 0 };
    gguf_writer_set_replace(w, true); /* tests remake a model under one name */
    cr_assert_eq(gguf_writer_begin(w, path, &err), PN_OK, "%s", err.msg);
    for (int i = 0; i < n; i++)
        cr_assert_eq(gguf_writer_write(w, data[i], bytes[i], &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_close(w, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_commit(w, &err), PN_OK, "%s", err.msg);
    gguf_writer_free(w);
}

static FX_UNUSED void fx_write_source(const char *path, const fx_model *m)
{
    gguf_writer *w = gguf_writer_new();
    pn_error err = { 0 };
    cr_assert_not_null(w);
    gguf_writer_set_str(w, "general.architecture", "fixture");
    gguf_writer_set_str(w, "general.name", "pn-check fixture");
    uint8_t *data[FX_N];
    size_t bytes[FX_N];
    for (int i = 0; i < FX_N; i++) {
        int64_t ne[4];
        fx_ne(i, ne);
        cr_assert_eq(gguf_writer_add_tensor(w, fx_specs[i].name, fx_specs[i].n_dims, ne,
                                            fx_specs[i].src_type, &err),
                     PN_OK, "%s", err.msg);
        const int64_t n = fx_count(i);
        bytes[i] = (size_t)pn_type_row_bytes(fx_specs[i].src_type, n);
        data[i] = malloc(bytes[i]);
        cr_assert_eq(pn_quantize_row_stock(fx_specs[i].src_type, m->w[i], n, data[i], NULL), PN_OK);
    }
    fx_write_file(w, path, data, bytes, FX_N);
    for (int i = 0; i < FX_N; i++)
        free(data[i]);
}

/* How the PN file is made; zero-initialised = the good file. The fields from
 * `tensor` on damage that one tensor only. */
typedef struct fx_pn_opts {
    bool omit_format;           /* no pn.format */
    bool omit_crc;              /* no pn.tensor_crc32 */
    bool block_size_i32;        /* pn.rotation.block_size stored as i32 */
    const char *promoted_extra; /* an extra name in pn.mix.promoted */
    const char *tensor;         /* the tensor the fields below apply to */
    int cap;                    /* 0: 1024; -1: not rotated; else this cap */
    bool element_packing;       /* codes at shift BITS*t (element index) */
    int store_type;             /* 0: the fixture's type; else quantize to this */
    bool swapped;               /* holds the other PN type's encoding (cut/padded) */
} fx_pn_opts;

/* Packs a block's codes at shift BITS*t instead of BITS*(t>>1) + 16*(t&1). */
static FX_UNUSED void fx_repack_by_element(int type, uint8_t *block)
{
    const pn_params *p = pn_params_get(type);
    int codes[80];
    for (int e = 0; e < p->group; e++)
        codes[e] = pn_block_code(p, block, e);
    uint32_t words[8] = { 0 };
    for (int e = 0; e < p->group; e++)
        words[e / p->per_word] |= (uint32_t)codes[e] << (p->bits * (e % p->per_word));
    for (int k = 0; k < 8; k++)
        pn_store_u32le(block + 2 + 4 * k, words[k]);
}

/* Encodes tensor i as `type`: PN tensors rotated with cap (-1: not). */
static FX_UNUSED uint8_t *fx_encode(const fx_model *m, int i, int type, int cap,
                                    bool element_packing, size_t *bytes)
{
    const int64_t K = fx_specs[i].K, rows = fx_specs[i].rows;
    const int64_t rb = pn_type_row_bytes(type, K);
    cr_assert(rb > 0, "type %d cannot hold K=%lld", type, (long long)K);
    uint8_t *out = malloc((size_t)(rb * rows));
    float *x = malloc((size_t)K * sizeof *x);
    for (int64_t r = 0; r < rows; r++) {
        memcpy(x, m->w[i] + r * K, (size_t)K * sizeof *x);
        uint8_t *o = out + r * rb;
        if (pn_type_is_pn(type)) {
            if (cap >= 0)
                pn_hadamard_rotate_row(x, K, pn_hadamard_block_size(K, cap ? cap : 1024));
            cr_assert_eq(pn_quantize_row_ref(type, x, K, o, NULL), PN_OK);
            if (element_packing)
                for (int64_t b = 0; b < rb / PN_BLOCK_BYTES; b++)
                    fx_repack_by_element(type, o + b * PN_BLOCK_BYTES);
        } else {
            cr_assert_eq(pn_quantize_row_stock(type, x, K, o, NULL), PN_OK);
        }
    }
    free(x);
    *bytes = (size_t)(rb * rows);
    return out;
}

static FX_UNUSED void fx_write_pn(const char *path, const fx_model *m, const fx_pn_opts *o)
{
    static const fx_pn_opts none = { 0 };
    if (!o)
        o = &none;
    gguf_writer *w = gguf_writer_new();
    pn_error err = { 0 };
    uint8_t *data[FX_N];
    size_t bytes[FX_N];
    uint32_t crcs[FX_N];
    for (int i = 0; i < FX_N; i++) {
        bool target = o->tensor && strcmp(o->tensor, fx_specs[i].name) == 0;
        int type = target && o->store_type ? o->store_type : fx_specs[i].type;
        int cap = target ? o->cap : 0;
        if (target && o->swapped) {
            /* Labelled `type`, holding the other PN type's bytes. */
            int other = type == PN_TYPE_PN3T ? PN_TYPE_PN4T : PN_TYPE_PN3T;
            size_t ob;
            uint8_t *enc = fx_encode(m, i, other, cap, false, &ob);
            bytes[i] = (size_t)pn_type_row_bytes(type, fx_specs[i].K) * (size_t)fx_specs[i].rows;
            data[i] = calloc(1, bytes[i]);
            memcpy(data[i], enc, ob < bytes[i] ? ob : bytes[i]);
            free(enc);
        } else {
            data[i] = fx_encode(m, i, type, cap, target && o->element_packing, &bytes[i]);
        }
        crcs[i] = (uint32_t)crc32(0L, data[i], (uInt)bytes[i]);
        int64_t ne[4];
        fx_ne(i, ne);
        cr_assert_eq(
            gguf_writer_add_tensor(w, fx_specs[i].name, fx_specs[i].n_dims, ne, type, &err), PN_OK,
            "%s", err.msg);
    }
    gguf_writer_set_str(w, "general.architecture", "fixture");
    gguf_writer_set_str(w, "general.name", "pn-check fixture");
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (!o->omit_format)
        gguf_writer_set_str(w, "pn.format", "PNX-FORMAT-v0");
    gguf_writer_set_str(w, "pn.mix", "T0+1");
    const char *promoted[2] = { "blk.0.ffn_gate.weight", o->promoted_extra };
    gguf_writer_set_arr_str(w, "pn.mix.promoted", promoted, o->promoted_extra ? 2 : 1);
    gguf_writer_set_str(w, "pn.rotation.type", "hadamard");
    if (o->block_size_i32)
        gguf_writer_set_i32(w, "pn.rotation.block_size", 1024);
    else
        gguf_writer_set_u32(w, "pn.rotation.block_size", 1024);
    if (!o->omit_crc)
        gguf_writer_set_arr(w, "pn.tensor_crc32", GGUF_TYPE_UINT32, crcs, FX_N);
    gguf_writer_set_str(w, "pn.quantizer", "pn-check test fixture");
    fx_write_file(w, path, data, bytes, FX_N);
    for (int i = 0; i < FX_N; i++)
        free(data[i]);
}

/* Absolute file offset of a tensor's data, and of its tensor info. */
static FX_UNUSED uint64_t fx_data_offset(const char *path, const char *name, uint64_t *info_offset)
{
    gguf_reader *r = NULL;
    pn_error err = { 0 };
    cr_assert_eq(gguf_reader_open(path, &r, &err), PN_OK, "%s", err.msg);
    long i = gguf_reader_find_tensor(r, name);
    cr_assert(i >= 0, "no tensor %s in %s", name, path);
    uint64_t off = (uint64_t)(gguf_reader_tensor_data(r, (size_t)i) - gguf_reader_bytes(r));
    if (info_offset)
        *info_offset = gguf_reader_tensor(r, (size_t)i)->info_offset;
    gguf_reader_close(r);
    return off;
}

/* Copies src to dst applying f(buf, size, arg) to the bytes. */
static FX_UNUSED void fx_copy_edit(const char *src, const char *dst,
                                   void (*f)(uint8_t *buf, size_t *size, void *arg), void *arg)
{
    size_t n;
    uint8_t *buf = tu_read_file(src, &n);
    if (f)
        f(buf, &n, arg);
    cr_assert_eq(tu_write_file(dst, buf, n), 0);
    free(buf);
}

/* Rewrites pn.tensor_crc32 to the CRCs of the data as it now is, so that a
 * damage is seen only by the check that should see it. */
static FX_UNUSED void fx_fix_crcs(const char *path)
{
    size_t n;
    uint8_t *buf = tu_read_file(path, &n);
    gguf_reader *r = NULL;
    pn_error err = { 0 };
    cr_assert_eq(gguf_reader_open_memory(buf, n, path, &r, &err), PN_OK, "%s", err.msg);
    const gguf_kv *kv = gguf_reader_find_kv(r, "pn.tensor_crc32");
    cr_assert_not_null(kv);
    uint8_t *arr = buf + (kv->arr_data - gguf_reader_bytes(r));
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        uint32_t c = (uint32_t)crc32(0L, gguf_reader_tensor_data(r, i),
                                     (uInt)gguf_reader_tensor(r, i)->size);
        pn_store_u32le(arr + 4 * i, c);
    }
    gguf_reader_close(r);
    cr_assert_eq(tu_write_file(path, buf, n), 0);
    free(buf);
}

/* The folder of a test: made fresh (*dir), with the model's source at
 * src and its PN file at good (paths of 4096 bytes at most). */
static FX_UNUSED void fx_make_folder(char **dir, fx_model *m, char src[4096], char good[4096])
{
    *dir = tu_mkdtemp();
    fx_make_model(m);
    snprintf(src, 4096, "%s/source.gguf", *dir);
    snprintf(good, 4096, "%s/good.gguf", *dir);
    fx_write_source(src, m);
    fx_write_pn(good, m, NULL);
}

/* Removes what fx_make_folder made, and everything the test left there. */
static FX_UNUSED void fx_remove_folder(char **dir, fx_model *m)
{
    fx_free_model(m);
    tu_rm_rf(*dir);
    free(*dir);
    *dir = NULL;
}

#endif
