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
#include "fixtures/gguf_files.h"
#include "quant/types.h"
#include "test_util.h"

/* ------------------------------------------------------------------ */
/* Writing and reading back                                            */

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
        case GGUF_TYPE_FLOAT32: sb_add(&b, ",\"value\":\"0x%08x\"", gf_f32_bits(kv->v.f64)); break;
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
    gf_set_every_type(w);
    cr_assert_eq(gguf_writer_set_f32(w, "v.f32b", 1e-45f), PN_OK);
    cr_assert_eq(gguf_writer_set_f32(w, "v.f32c", 3.1415927f), PN_OK);
    cr_assert_eq(gguf_writer_set_u32(w, "general.alignment", 64), PN_OK);
    uint64_t total = 0;
    for (size_t i = 0; i < N_MIXED; i++) {
        const tensor_case *t = &gf_mixed_tensors[i];
        cr_assert_eq(gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, &e), PN_OK);
        total += t->size;
    }
    gf_finish(w, path);
    gf_write_pattern(w, total, 1000);
    gf_close_and_commit(w);
    gguf_writer_free(w);

    gguf_reader *r = gf_open_file(path);
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
