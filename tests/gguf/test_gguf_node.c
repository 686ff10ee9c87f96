/* The one independent check of the GGUF reader: @huggingface/gguf (Node.js,
 * tests/node/) parses the files we write as we do. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/outfile_testing.h"
#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "fixtures/gguf_bytes.h"
#include "quant/types.h"
#include "test_util.h"


static uint8_t pattern_byte(uint64_t i)
{
    return (uint8_t)(i * 7 + 1);
}

/* Writes every tensor of w with pattern bytes, in chunks of `chunk`. */
static void write_pattern(gguf_writer *w, uint64_t total, size_t chunk)
{
    uint8_t *buf = malloc(chunk);
    uint64_t done = 0;
    pn_error e;
    while (done < total) {
        size_t n = total - done < chunk ? (size_t)(total - done) : chunk;
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern_byte(done + i);
        cr_assert_eq(gguf_writer_write(w, buf, n, &e), PN_OK, "%s", e.msg);
        done += n;
    }
    free(buf);
}

static void finish(gguf_writer *w, const char *path)
{
    pn_error e;
    cr_assert_eq(gguf_writer_begin(w, path, &e), PN_OK, "%s", e.msg);
}

static void close_and_commit(gguf_writer *w)
{
    pn_error e;
    cr_assert_eq(gguf_writer_close(w, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(gguf_writer_commit(w, &e), PN_OK, "%s", e.msg);
}

static gguf_reader *open_file(const char *path)
{
    gguf_reader *r = NULL;
    pn_error e;
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_OK, "%s", e.msg);
    return r;
}

/* ------------------------------------------------------------------ */
/* Writing and reading back                                            */

static const uint8_t nested_u32[] = {
    /* [[1, 2], [], [3]] as three u32 arrays */
    4, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0,
};
static const uint8_t nested_str[] = {
    /* [[["ab", ""]]]: an array of one array of one array of two strings */
    9, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,   8,   0, 0, 0, 2, 0, 0, 0, 0,
    0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 0, 0, 0, 0, 0, 0, 0, 0,
};

static void set_nested(gguf_writer *w, const char *key, gguf_value_type et, const uint8_t *raw,
                       size_t n, uint64_t count)
{
    gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key = (gguf_str){ strlen(key), key };
    kv.type = GGUF_TYPE_ARRAY;
    kv.arr_type = et;
    kv.arr_count = count;
    kv.arr_data = raw;
    kv.arr_bytes = n;
    cr_assert_eq(gguf_writer_copy_kv(w, &kv), PN_OK);
}

/* One key of every value type, arrays of every type, and the edge cases. */
static void set_every_type(gguf_writer *w)
{
    cr_assert_eq(gguf_writer_set_u8(w, "v.u8", 255), PN_OK);
    cr_assert_eq(gguf_writer_set_i8(w, "v.i8", -128), PN_OK);
    cr_assert_eq(gguf_writer_set_u16(w, "v.u16", 65535), PN_OK);
    cr_assert_eq(gguf_writer_set_i16(w, "v.i16", -32768), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "v.u32", 4000000000u), PN_OK);
    cr_assert_eq(gguf_writer_set_i32(w, "v.i32", INT32_MIN), PN_OK);
    cr_assert_eq(gguf_writer_set_f32(w, "v.f32", -0.0f), PN_OK);
    cr_assert_eq(gguf_writer_set_bool(w, "v.bool", true), PN_OK);
    cr_assert_eq(gguf_writer_set_str(w, "v.str", "quote \" backslash \\ tab\t nl\n \x01 é 日本"),
                 PN_OK);
    cr_assert_eq(gguf_writer_set_u64(w, "v.u64", UINT64_MAX), PN_OK);
    cr_assert_eq(gguf_writer_set_i64(w, "v.i64", INT64_MIN), PN_OK);
    cr_assert_eq(gguf_writer_set_f64(w, "v.f64", -2.5e300), PN_OK);
    cr_assert_eq(gguf_writer_set_bool(w, "v.false", false), PN_OK);
    cr_assert_eq(gguf_writer_set_str(w, "v.empty", ""), PN_OK);

    uint8_t au8[] = { 0, 1, 255 };
    int8_t ai8[] = { -1, 5 };
    uint16_t au16[] = { 7, 65535 };
    int16_t ai16[] = { -300, 300 };
    uint32_t au32[] = { 1, 2, 4000000000u };
    int32_t ai32[] = { -5, INT32_MAX };
    float af32[] = { 1.0f, -0.0f, INFINITY, 1e-45f };
    uint8_t abool[] = { 1, 0, 1 };
    uint64_t au64[] = { 0, UINT64_MAX };
    int64_t ai64[] = { INT64_MIN, 42 };
    double af64[] = { 0.1, -1e-310 };
    cr_assert_eq(gguf_writer_set_arr(w, "a.u8", GGUF_TYPE_UINT8, au8, 3), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.i8", GGUF_TYPE_INT8, ai8, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.u16", GGUF_TYPE_UINT16, au16, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.i16", GGUF_TYPE_INT16, ai16, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.u32", GGUF_TYPE_UINT32, au32, 3), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.i32", GGUF_TYPE_INT32, ai32, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.f32", GGUF_TYPE_FLOAT32, af32, 4), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.bool", GGUF_TYPE_BOOL, abool, 3), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.u64", GGUF_TYPE_UINT64, au64, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.i64", GGUF_TYPE_INT64, ai64, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.f64", GGUF_TYPE_FLOAT64, af64, 2), PN_OK);
    cr_assert_eq(gguf_writer_set_arr(w, "a.empty", GGUF_TYPE_UINT32, NULL, 0), PN_OK);
    const char *strs[] = { "", "x", "two words", "" };
    cr_assert_eq(gguf_writer_set_arr_str(w, "a.str", strs, 4), PN_OK);
    cr_assert_eq(gguf_writer_set_arr_str(w, "a.str_empty", NULL, 0), PN_OK);
    set_nested(w, "a.nested_u32", GGUF_TYPE_ARRAY, nested_u32, sizeof nested_u32, 3);
    set_nested(w, "a.nested_str", GGUF_TYPE_ARRAY, nested_str, sizeof nested_str, 1);
}

static uint32_t f32_bits(double v)
{
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

typedef struct tensor_case {
    const char *name;
    int type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t size;
} tensor_case;

static const tensor_case mixed_tensors[] = {
    { "a.f32", PN_TYPE_F32, 1, { 3, 1, 1, 1 }, 12 },
    { "b.q8_0", PN_TYPE_Q8_0, 2, { 64, 2, 1, 1 }, 136 },
    { "c.pn3t", PN_TYPE_PN3T, 2, { 80, 3, 1, 1 }, 102 },
    { "d.pn4t", PN_TYPE_PN4T, 1, { 64, 1, 1, 1 }, 34 },
    { "e.q4_K", PN_TYPE_Q4_K, 3, { 256, 1, 2, 1 }, 288 },
    { "f.f16", PN_TYPE_F16, 4, { 5, 1, 1, 2 }, 20 },
};
#define N_MIXED (sizeof mixed_tensors / sizeof mixed_tensors[0])


/* ------------------------------------------------------------------ */
/* An independent parser (@huggingface/gguf, via tests/node)            */

typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

static void sb_add(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->s = realloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* A string as JSON.stringify writes it (valid UTF-8 passes through). */
static void json_str(strbuf *b, gguf_str s)
{
    sb_add(b, "\"");
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        switch (c) {
        case '"': sb_add(b, "\\\""); break;
        case '\\': sb_add(b, "\\\\"); break;
        case '\b': sb_add(b, "\\b"); break;
        case '\f': sb_add(b, "\\f"); break;
        case '\n': sb_add(b, "\\n"); break;
        case '\r': sb_add(b, "\\r"); break;
        case '\t': sb_add(b, "\\t"); break;
        default:
            if (c < 0x20)
                sb_add(b, "\\u%04x", c);
            else
                sb_add(b, "%c", c);
        }
    }
    sb_add(b, "\"");
}

static uint64_t raw_elem(const gguf_kv *kv, uint64_t i, size_t n)
{
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
        v |= (uint64_t)kv->arr_data[i * n + k] << (8 * k);
    return v;
}

static void json_elements(strbuf *b, const gguf_kv *kv, bool typed)
{
    sb_add(b, "[");
    for (uint64_t i = 0; i < kv->arr_count; i++) {
        if (i)
            sb_add(b, ",");
        switch (kv->arr_type) {
        case GGUF_TYPE_UINT8:
        case GGUF_TYPE_UINT16:
        case GGUF_TYPE_UINT32: sb_add(b, "%llu", (unsigned long long)gguf_kv_arr_u64(kv, i)); break;
        case GGUF_TYPE_INT8:
        case GGUF_TYPE_INT16:
        case GGUF_TYPE_INT32: sb_add(b, "%lld", (long long)gguf_kv_arr_i64(kv, i)); break;
        case GGUF_TYPE_UINT64:
            sb_add(b, "\"%llu\"", (unsigned long long)gguf_kv_arr_u64(kv, i));
            break;
        case GGUF_TYPE_INT64: sb_add(b, "\"%lld\"", (long long)gguf_kv_arr_i64(kv, i)); break;
        case GGUF_TYPE_BOOL: sb_add(b, "%s", gguf_kv_arr_u64(kv, i) ? "true" : "false"); break;
        case GGUF_TYPE_FLOAT32:
            cr_assert(typed, "no float elements in nested arrays in this test");
            sb_add(b, "\"0x%08llx\"", (unsigned long long)raw_elem(kv, i, 4));
            break;
        case GGUF_TYPE_FLOAT64:
            cr_assert(typed, "no float elements in nested arrays in this test");
            sb_add(b, "\"0x%016llx\"", (unsigned long long)raw_elem(kv, i, 8));
            break;
        case GGUF_TYPE_STRING: json_str(b, gguf_kv_arr_str(kv, i)); break;
        case GGUF_TYPE_ARRAY: {
            gguf_kv in = gguf_kv_arr_arr(kv, i);
            json_elements(b, &in, false);
            break;
        }
        default: cr_assert_fail("bad element type");
        }
    }
    sb_add(b, "]");
}

/* Our reading of a file, in the format tests/node/gguf-dump.mjs prints. */
static char *dump_like_node(const gguf_reader *r)
{
    strbuf b = { 0 };
    sb_add(&b, "{\"version\":%u,\"tensor_data_offset\":\"%llu\",\"kv\":[", gguf_reader_version(r),
           (unsigned long long)gguf_reader_data_offset(r));
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        const gguf_kv *kv = gguf_reader_kv(r, i);
        sb_add(&b, "%s{\"key\":", i ? "," : "");
        json_str(&b, kv->key);
        sb_add(&b, ",\"type\":\"%s\"", gguf_value_type_name(kv->type));
        switch (kv->type) {
        case GGUF_TYPE_UINT8:
        case GGUF_TYPE_UINT16:
        case GGUF_TYPE_UINT32: sb_add(&b, ",\"value\":%llu", (unsigned long long)kv->v.u64); break;
        case GGUF_TYPE_INT8:
        case GGUF_TYPE_INT16:
        case GGUF_TYPE_INT32: sb_add(&b, ",\"value\":%lld", (long long)kv->v.i64); break;
        case GGUF_TYPE_UINT64:
            sb_add(&b, ",\"value\":\"%llu\"", (unsigned long long)kv->v.u64);
            break;
        case GGUF_TYPE_INT64: sb_add(&b, ",\"value\":\"%lld\"", (long long)kv->v.i64); break;
        case GGUF_TYPE_BOOL: sb_add(&b, ",\"value\":%s", kv->v.u64 ? "true" : "false"); break;
        case GGUF_TYPE_FLOAT32: sb_add(&b, ",\"value\":\"0x%08x\"", f32_bits(kv->v.f64)); break;
        case GGUF_TYPE_FLOAT64: {
            uint64_t bits;
            memcpy(&bits, &kv->v.f64, sizeof bits);
            sb_add(&b, ",\"value\":\"0x%016llx\"", (unsigned long long)bits);
            break;
        }
        case GGUF_TYPE_STRING:
            sb_add(&b, ",\"value\":");
            json_str(&b, kv->v.str);
            break;
        case GGUF_TYPE_ARRAY:
            sb_add(&b, ",\"elem_type\":\"%s\",\"value\":", gguf_value_type_name(kv->arr_type));
            json_elements(&b, kv, true);
            break;
        default: cr_assert_fail("bad value type");
        }
        sb_add(&b, "}");
    }
    sb_add(&b, "],\"tensors\":[");
    for (size_t i = 0; i < gguf_reader_n_tensors(r); i++) {
        const gguf_tensor_info *t = gguf_reader_tensor(r, i);
        sb_add(&b, "%s{\"name\":", i ? "," : "");
        json_str(&b, (gguf_str){ strlen(t->name), t->name });
        sb_add(&b, ",\"n_dims\":%u,\"shape\":[", t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            sb_add(&b, "%s\"%lld\"", d ? "," : "", (long long)t->ne[d]);
        sb_add(&b, "],\"dtype\":%d,\"offset\":\"%llu\"}", t->type, (unsigned long long)t->offset);
    }
    sb_add(&b, "]}\n");
    return b.s;
}

Test(gguf_node, an_independent_parser_reads_our_file_the_same_way)
{
    /* the only parser of our files not written here: CI (PN_REQUIRE_LLAMA=1,
     * which installs Node.js for llama.cpp) must run it, never skip it */
    const char *ci = getenv("PN_REQUIRE_LLAMA");
    const bool required = ci && strcmp(ci, "1") == 0;
    char *out = NULL, *err = NULL;
    const char *why = NULL;
    if (tu_run("node --version", &out, &err) != 0)
        why = "node is not installed; the independent GGUF parser runs on Node.js";
    else if (access(PN_SOURCE_DIR "/tests/node/node_modules/@huggingface/gguf/package.json",
                    R_OK) != 0)
        why = "@huggingface/gguf is not installed: run `npm ci --prefix tests/node` in the "
              "source tree";
    free(out);
    free(err);
    if (why && required)
        cr_assert_fail("the Node.js GGUF check is required here (PN_REQUIRE_LLAMA=1): %s", why);
    if (why)
        cr_skip_test("%s", why);

    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "node.gguf");
    gguf_writer *w = gguf_writer_new();
    pn_error e;
    set_every_type(w);
    cr_assert_eq(gguf_writer_set_f32(w, "v.f32b", 1e-45f), PN_OK);
    cr_assert_eq(gguf_writer_set_f32(w, "v.f32c", 3.1415927f), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", 64), PN_OK);
    uint64_t total = 0;
    for (size_t i = 0; i < N_MIXED; i++) {
        const tensor_case *t = &mixed_tensors[i];
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &e), PN_OK);
        total += t->size;
    }
    finish(w, path);
    write_pattern(w, total, 1000);
    close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = open_file(path);
    char *ours = dump_like_node(r);
    gguf_reader_close(r);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "node '%s/tests/node/gguf-dump.mjs' '%s'", PN_SOURCE_DIR, path);
    int rc = tu_run(cmd, &out, &err);
    cr_assert_eq(rc, 0, "gguf-dump.mjs failed (%d): %s", rc, err);
    cr_assert_str_eq(out, ours);
    cr_assert(strstr(out, "\"dtype\":124"), "the pn3t tensor is there");
    free(out);
    free(err);
    free(ours);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}
