/* pn_source_fixture.h - small float models written in the test with the
 * project's own writer: any tensor names, shapes and source types, Gaussian
 * weights (std 0.02, 1% of them x10) from a seed. Header-only, shared by the
 * pipeline and quantize suites (each test program is one translation unit
 * plus test_util.c). */
#ifndef PN_SOURCE_FIXTURE_H
#define PN_SOURCE_FIXTURE_H

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "quant/fp16.h"
#include "quant/types.h"
#include "test_util.h"

#define SF_UNUSED __attribute__((unused))

typedef struct sf_spec {
    const char *name;
    uint32_t n_dims; /* 1 or 2 */
    int64_t K, rows;
    int src_type; /* f32, f16 or bf16 */
} sf_spec;

static SF_UNUSED void sf_put_weight(uint8_t *p, int type, float v)
{
    if (type == PN_TYPE_F32)
        memcpy(p, &v, 4);
    else {
        uint16_t h = type == PN_TYPE_F16 ? pn_fp16_from_float(v) : pn_bf16_from_float(v);
        p[0] = (uint8_t)h;
        p[1] = (uint8_t)(h >> 8);
    }
}

/* Writes the model (key general.architecture = "test"). */
static SF_UNUSED void sf_write_model(const char *path, const sf_spec *specs, size_t n,
                                     uint64_t seed)
{
    gguf_writer *w = gguf_writer_new();
    pn_error err;
    cr_assert_eq(gguf_writer_set_str(w, "general.architecture", "test"), PN_OK);
    for (size_t i = 0; i < n; i++) {
        int64_t ne[4] = { specs[i].K, specs[i].n_dims > 1 ? specs[i].rows : 1, 1, 1 };
        cr_assert_eq(
            gguf_writer_add_tensor(w, specs[i].name, specs[i].n_dims, ne, specs[i].src_type, &err),
            PN_OK, "%s", err.msg);
    }
    cr_assert_eq(gguf_writer_begin(w, path, &err), PN_OK, "%s", err.msg);
    tu_rng rng = { seed };
    for (size_t i = 0; i < n; i++) {
        int64_t count = specs[i].K * specs[i].rows;
        int64_t es = pn_type_row_bytes(specs[i].src_type, 1);
        uint8_t *buf = malloc((size_t)(count * es));
        for (int64_t e = 0; e < count; e++) {
            double g = 0.02 * tu_rng_gauss(&rng);
            if (tu_rng_uniform(&rng) < 0.01)
                g *= 10.0;
            sf_put_weight(buf + e * es, specs[i].src_type, (float)g);
        }
        cr_assert_eq(gguf_writer_write(w, buf, (size_t)(count * es), &err), PN_OK, "%s", err.msg);
        free(buf);
    }
    cr_assert_eq(gguf_writer_close(w, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(gguf_writer_commit(w, &err), PN_OK, "%s", err.msg);
    gguf_writer_free(w);
}

#endif
