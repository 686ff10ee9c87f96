/* The shipped recipes on model shapes (synth/qwen38_shapes.h, mix/plan.h):
 * the full-size Qwen3.8-27B and its scaled widths, the P0k+0 payload and
 * P0k+19 bytes, and the tiny golden model's tensor list and types. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures/mix_plan.h"
#include "hadamard/hadamard.h"
#include "mix/glob.h"
#include "mix/measurement.h"
#include "mix/measurement_testing.h"
#include "mix/plan.h"
#include "mix/plan_testing.h"
#include "mix/promote.h"
#include "synth/qwen38_shapes.h"
#include "synth/qwen38_shapes_testing.h"
#include "mix/recipe.h"
#include "mix/size.h"
#include "quant/pn.h"
#include "quant/types.h"
#include "test_util.h"

#define MAIN_RECIPE PN_SOURCE_DIR "/recipes/qwen3.8-27b-pn3.mix"
#define TEST_RECIPE PN_SOURCE_DIR "/recipes/test-fallback.mix"
#define TINY_EXPECT PN_TEST_DATA "/golden/tiny.f32.expect.txt"

/* ---- Qwen3.8-27B at full size ---- */

/* Mix P0k by K, as the format's text states it (docs/format.md#mix-p0k19), written apart from the
 * recipe. */
static int k_table_type(const pn_tensor_desc *t)
{
    const char *n = t->name;
    size_t len = strlen(n);
#define ENDS(s) (len >= strlen(s) && strcmp(n + len - strlen(s), s) == 0)
    if (strcmp(n, "token_embd.weight") == 0)
        return PN_TYPE_Q3_K;
    if (strcmp(n, "output.weight") == 0)
        return PN_TYPE_Q4_K;
    if (ENDS(".ssm_alpha.weight") || ENDS(".ssm_beta.weight"))
        return PN_TYPE_Q8_0;
    if (ENDS("_norm.weight") || t->n_dims == 1 || ENDS(".ssm_conv1d.weight"))
        return PN_TYPE_F32;
    if (ENDS(".attn_k.weight") || ENDS(".attn_v.weight"))
        return PN_TYPE_PN4T;
    if (t->ne[0] == 6144 || t->ne[0] == 17408)
        return PN_TYPE_PN4T;
    if (t->ne[0] == 5120)
        return PN_TYPE_PN3T;
#undef ENDS
    return -1;
}

static pn_plan *full_plan(const char *recipe_path, pn_tensor_desc **descs, size_t *n)
{
    pn_qwen38_config c = pn_qwen38_config_full();
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&c, descs, n, &err), PN_OK, "%s", err.msg);
    pn_recipe *r = mix_load_ok(recipe_path);
    pn_plan *p = mix_build_ok(r, *descs, *n);
    pn_recipe_free(r);
    return p;
}

Test(qwen38, the_full_size_shapes_are_those_of_qwen3_8_27b)
{
    pn_qwen38_config c = pn_qwen38_config_full();
    pn_tensor_desc *d;
    size_t n;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&c, &d, &n, &err), PN_OK);
    cr_assert_eq(n, 3 + 48 * 14 + 16 * 11);
    cr_assert_eq(n, pn_qwen38_tensor_count(&c));
    struct {
        const char *name;
        uint32_t dims;
        int64_t ne0, ne1;
    } want[] = {
        { "token_embd.weight", 2, 5120, 248320 },
        { "blk.0.attn_qkv.weight", 2, 5120, 10240 },
        { "blk.0.attn_gate.weight", 2, 5120, 6144 },
        { "blk.0.ssm_alpha.weight", 2, 5120, 48 },
        { "blk.0.ssm_beta.weight", 2, 5120, 48 },
        { "blk.0.ssm_out.weight", 2, 6144, 5120 },
        { "blk.0.ssm_conv1d.weight", 2, 4, 10240 },
        { "blk.0.ssm_a", 1, 48, 1 },
        { "blk.0.ssm_dt.bias", 1, 48, 1 },
        { "blk.0.ssm_norm.weight", 1, 128, 1 },
        { "blk.3.attn_q.weight", 2, 5120, 12288 },
        { "blk.3.attn_k.weight", 2, 5120, 1024 },
        { "blk.3.attn_v.weight", 2, 5120, 1024 },
        { "blk.3.attn_output.weight", 2, 6144, 5120 },
        { "blk.3.attn_q_norm.weight", 1, 256, 1 },
        { "blk.63.attn_k_norm.weight", 1, 256, 1 },
        { "blk.62.attn_norm.weight", 1, 5120, 1 },
        { "blk.62.post_attention_norm.weight", 1, 5120, 1 },
        { "blk.62.ffn_gate.weight", 2, 5120, 17408 },
        { "blk.62.ffn_up.weight", 2, 5120, 17408 },
        { "blk.62.ffn_down.weight", 2, 17408, 5120 },
        { "output_norm.weight", 1, 5120, 1 },
        { "output.weight", 2, 5120, 248320 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        size_t k = 0;
        while (k < n && strcmp(d[k].name, want[i].name) != 0)
            k++;
        cr_assert_lt(k, n, "%s missing", want[i].name);
        cr_assert_eq(d[k].n_dims, want[i].dims, "%s", want[i].name);
        cr_assert_eq(d[k].ne[0], want[i].ne0, "%s", want[i].name);
        cr_assert_eq(d[k].ne[1], want[i].ne1, "%s", want[i].name);
    }
    int full = 0;
    for (size_t k = 0; k < n; k++) {
        int layer;
        if (sscanf(d[k].name, "blk.%d.attn_q.weight", &layer) == 1 &&
            strstr(d[k].name, "attn_q.weight")) {
            cr_assert_eq(layer % 4, 3, "block %d is full attention", layer);
            full++;
        }
    }
    cr_assert_eq(full, 16);
    cr_assert_str_eq(d[0].name, "token_embd.weight");
    cr_assert_str_eq(d[n - 1].name, "output.weight");
    free(d);
}

Test(qwen38, the_shipped_recipe_on_the_full_size_model_equals_the_k_based_table)
{
    pn_tensor_desc *d;
    size_t n;
    pn_plan *p = full_plan(MAIN_RECIPE, &d, &n);
    size_t pn3 = 0;
    for (size_t i = 0; i < n; i++) {
        const pn_plan_tensor *t = &p->tensors[i];
        int want = k_table_type(&d[i]);
        cr_assert_neq(want, -1, "%s is not covered by the K table", d[i].name);
        cr_assert_eq(t->type, want, "%s [%lld x %lld]: recipe gives %s, the K table %s", t->name,
                     (long long)t->ne[0], (long long)t->ne[1], mix_tname(t->type), mix_tname(want));
        cr_assert_eq(t->rotated, pn_type_is_pn(want), "%s", t->name);
        if (t->rotated)
            cr_assert_eq(t->rotation_block, 1024, "%s: K=%lld", t->name, (long long)t->ne[0]);
        else
            cr_assert_eq(t->rotation_block, 0);
        cr_assert_eq(t->candidate, want == PN_TYPE_PN3T, "%s", t->name);
        pn3 += want == PN_TYPE_PN3T;
    }
    cr_assert_eq(p->n_candidates, pn3);
    cr_assert_eq(pn3, 48 * 4 + 16 * 3,
                 "attn_qkv/attn_gate/ffn_gate/ffn_up and attn_q/ffn_gate/ffn_up");
    pn_plan_free(p);
    free(d);
}

Test(qwen38, the_p0k_plus_0_payload_is_about_12_47_gb)
{
    pn_tensor_desc *d;
    size_t n;
    pn_plan *p = full_plan(MAIN_RECIPE, &d, &n);
    pn_plan_totals t;
    pn_plan_totals_get(p, &t);
    cr_assert_eq(t.payload_bytes, t.pn_bytes + t.other_bytes);
    double rel = fabs((double)t.payload_bytes - 12.47e9) / 12.47e9;
    printf("P0k+0: payload %" PRIu64 " bytes (%.4f GB): PN %" PRIu64 " + other %" PRIu64
           "; %.4f bpw over PN weights, %.4f over all %" PRIu64 " weights; %zu candidates; "
           "data section with 32-byte padding %" PRIu64 "\n",
           t.payload_bytes, t.payload_bytes / 1e9, t.pn_bytes, t.other_bytes, t.bpw_pn, t.bpw_all,
           t.n_weights, t.n_candidates, pn_plan_data_bytes(p, 32));
    cr_assert_lt(rel, 0.01, "payload %" PRIu64 " is not within 1%% of 12.47e9", t.payload_bytes);
    cr_assert_eq(t.payload_bytes, 12473886720ull, "the exact figure from the shapes");
    cr_assert_eq(t.n_promoted, 0);
    char label[80];
    pn_plan_mix_label(p, label, sizeof label);
    cr_assert_str_eq(label, "P0k+0");
    pn_plan_free(p);
    free(d);
}

Test(qwen38, promoting_19_names_gives_p0k_plus_19_and_the_bytes_of_pn4t)
{
    pn_tensor_desc *d;
    size_t n;
    pn_plan *p = full_plan(MAIN_RECIPE, &d, &n);
    pn_plan_totals t0, t1;
    pn_plan_totals_get(p, &t0);
    static char names[19][64];
    const char *list[19];
    for (int i = 0; i < 19; i++) {
        snprintf(names[i], sizeof names[i], "blk.%d.ffn_up.weight", 60 - i * 3);
        list[i] = names[i];
    }
    pn_error err = { 0 };
    cr_assert_eq(pn_plan_promote_by_names(p, list, 19, &err), PN_OK, "%s", err.msg);
    pn_plan_totals_get(p, &t1);
    /* ffn_up: 17408 rows of 5120: pn3t 64 blocks, pn4t 80 blocks of 34 bytes */
    cr_assert_eq(t1.payload_bytes - t0.payload_bytes, 19ull * 17408 * (80 - 64) * 34);
    cr_assert_eq(t1.n_promoted, 19);
    char label[80];
    pn_plan_mix_label(p, label, sizeof label);
    cr_assert_str_eq(label, "P0k+19");
    const char *got[32];
    cr_assert_eq(pn_plan_promoted_names(p, got, 32), 19);
    cr_assert_str_eq(got[0], "blk.6.ffn_up.weight", "tensor order, not list order");
    cr_assert_str_eq(got[18], "blk.60.ffn_up.weight");
    pn_plan_free(p);
    free(d);
}

Test(qwen38, promote_by_names_refuses_a_non_candidate_naming_it)
{
    pn_tensor_desc *d;
    size_t n;
    pn_plan *p = full_plan(MAIN_RECIPE, &d, &n);
    pn_error err = { 0 };
    const char *a[] = { "blk.0.ffn_up.weight", "blk.3.attn_k.weight" };
    cr_assert_eq(pn_plan_promote_by_names(p, a, 2, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "blk.3.attn_k.weight"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "not a promotion candidate"), "%s", err.msg);
    cr_assert_eq(p->n_promoted, 0, "a failed promotion leaves none");
    cr_assert_eq(p->tensors[pn_plan_find(p, "blk.0.ffn_up.weight")].type, PN_TYPE_PN3T);
    const char *b[] = { "blk.0.nothing.weight" };
    cr_assert_eq(pn_plan_promote_by_names(p, b, 1, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "blk.0.nothing.weight"), "%s", err.msg);
    const char *c[] = { "blk.0.ffn_up.weight", "blk.0.ffn_up.weight" };
    cr_assert_eq(pn_plan_promote_by_names(p, c, 2, &err), PN_ERR_MISMATCH);
    cr_assert_not_null(strstr(err.msg, "twice"), "%s", err.msg);
    pn_plan_free(p);
    free(d);
}

Test(qwen38, the_main_recipe_refuses_the_narrow_token_embd_and_output_of_the_tiny_model)
{
    pn_qwen38_config c = pn_qwen38_config_full();
    c.n_embd = 320;
    c.n_layers = 2;
    c.n_vocab = 64;
    pn_tensor_desc *d;
    size_t n;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&c, &d, &n, &err), PN_OK);
    pn_recipe *r = mix_load_ok(MAIN_RECIPE);
    pn_plan *p = NULL;
    cr_assert_eq(pn_plan_build(r, d, n, &p, NULL, &err), PN_ERR_RECIPE);
    cr_assert_not_null(strstr(err.msg, "token_embd.weight"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "K=320"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "q3_K"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "qwen3.8-27b-pn3.mix:"), "%s", err.msg);
    pn_recipe_free(r);
    free(d);
}

typedef struct scale_case {
    int scale;
    int64_t embd, inner, qkv, q, kv, ff;
} scale_case;

ParameterizedTestParameters(qwen38, scaled_widths_round_to_their_granules)
{
    static scale_case cases[] = {
        { 1, 5120, 6144, 10240, 12288, 1024, 17408 }, { 2, 2560, 3072, 5120, 6144, 512, 8704 },
        { 3, 1280, 2048, 3392, 4096, 320, 5824 }, /* 5120/3 -> 1280; 10240/3 = 3413.3 -> 3392 */
        { 4, 1280, 1536, 2560, 3072, 256, 4352 },     { 16, 1280, 384, 640, 768, 64, 1088 },
        { 1000, 1280, 64, 64, 64, 64, 64 }, /* never below one granule */
    };
    return cr_make_param_array(scale_case, cases, sizeof cases / sizeof cases[0]);
}

ParameterizedTest(scale_case *c, qwen38, scaled_widths_round_to_their_granules)
{
    pn_qwen38_config s = pn_qwen38_config_scaled(c->scale, 5, 1000);
    cr_assert_eq(s.n_layers, 5);
    cr_assert_eq(s.n_vocab, 1000);
    cr_assert_eq(s.n_embd, c->embd, "scale %d: n_embd %lld", c->scale, (long long)s.n_embd);
    cr_assert_eq(s.n_inner, c->inner, "scale %d: n_inner %lld", c->scale, (long long)s.n_inner);
    cr_assert_eq(s.n_qkv, c->qkv, "scale %d: n_qkv %lld", c->scale, (long long)s.n_qkv);
    cr_assert_eq(s.n_q, c->q, "scale %d: n_q %lld", c->scale, (long long)s.n_q);
    cr_assert_eq(s.n_kv, c->kv, "scale %d: n_kv %lld", c->scale, (long long)s.n_kv);
    cr_assert_eq(s.n_ff, c->ff, "scale %d: n_ff %lld", c->scale, (long long)s.n_ff);
    cr_assert_eq(s.n_ssm_heads, 48);
    cr_assert_eq(s.head_dim, 256);
    cr_assert_eq(s.full_attn_interval, 4);
    cr_assert_eq(s.weight_type, PN_TYPE_F32);
}

Test(qwen38, the_shipped_recipe_applies_unchanged_to_a_scaled_model)
{
    pn_qwen38_config s = pn_qwen38_config_scaled(4, 8, 2560);
    pn_tensor_desc *d;
    size_t n;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&s, &d, &n, &err), PN_OK, "%s", err.msg);
    pn_recipe *r = mix_load_ok(MAIN_RECIPE);
    pn_plan *p = mix_build_ok(r, d, n);
    for (size_t i = 0; i < n; i++) {
        const pn_plan_tensor *t = &p->tensors[i];
        if (t->ne[0] == 1280 && t->n_dims == 2 && strstr(t->name, "ssm_alpha") == NULL &&
            strstr(t->name, "ssm_beta") == NULL && strstr(t->name, "attn_k.") == NULL &&
            strstr(t->name, "attn_v.") == NULL && i != 0 && i != n - 1)
            cr_assert_eq(t->type, PN_TYPE_PN3T, "%s", t->name);
        if (strstr(t->name, "ffn_down") || strstr(t->name, "ssm_out") ||
            strstr(t->name, "attn_output"))
            cr_assert_eq(t->type, PN_TYPE_PN4T, "%s", t->name);
        if (t->rotated)
            cr_assert_eq(t->rotation_block, pn_hadamard_block_size(t->ne[0], 1024));
    }
    cr_assert_eq(p->tensors[0].type, PN_TYPE_Q3_K);
    cr_assert_eq(p->tensors[n - 1].type, PN_TYPE_Q4_K);
    pn_plan_free(p);
    pn_recipe_free(r);
    free(d);
}

Test(qwen38, an_invalid_config_is_refused)
{
    pn_qwen38_config s = pn_qwen38_config_scaled(0, 4, 100);
    pn_tensor_desc *d = (pn_tensor_desc *)0x1;
    size_t n = 7;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&s, &d, &n, &err), PN_ERR_USAGE);
    cr_assert_null(d);
    cr_assert_eq(n, 0);
    pn_qwen38_config c = pn_qwen38_config_full();
    c.full_attn_interval = 0;
    cr_assert_eq(pn_qwen38_tensors(&c, &d, &n, &err), PN_ERR_USAGE);
}

/* ---- the golden tiny model ---- */

typedef struct expect_row {
    char name[64];
    uint32_t n_dims;
    int64_t ne[2];
    char src[8], type[8];
} expect_row;

static size_t read_expect(expect_row *rows, size_t cap)
{
    size_t size;
    char *text = tu_read_file(TINY_EXPECT, &size);
    char *buf = realloc(text, size + 1);
    cr_assert_not_null(buf);
    buf[size] = '\0';
    size_t n = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cr_assert_lt(n, cap);
        expect_row *e = &rows[n++];
        char shape[64];
        cr_assert_eq(sscanf(line, "%63s %63s %7s %7s", e->name, shape, e->src, e->type), 4, "%s",
                     line);
        long long a, b;
        if (sscanf(shape, "%lldx%lld", &a, &b) == 2) {
            e->n_dims = 2;
            e->ne[0] = a;
            e->ne[1] = b;
        } else {
            cr_assert_eq(sscanf(shape, "%lld", &a), 1);
            e->n_dims = 1;
            e->ne[0] = a;
            e->ne[1] = 1;
        }
    }
    free(buf);
    return n;
}

static pn_qwen38_config tiny_config(void)
{
    pn_qwen38_config c = {
        .n_layers = 2,
        .full_attn_interval = 2,
        .n_embd = 320,
        .n_inner = 64,
        .n_qkv = 192,
        .n_q = 128,
        .n_kv = 64,
        .n_ff = 64,
        .n_vocab = 64,
        .n_ssm_heads = 1,
        .conv_kernel = 4,
        .ssm_norm = 64,
        .head_dim = 64,
        .weight_type = PN_TYPE_F32,
        .norm_type = PN_TYPE_F32,
    };
    return c;
}

Test(tiny, a_config_reproduces_the_golden_tiny_models_tensor_list)
{
    expect_row rows[64];
    size_t n_exp = read_expect(rows, 64);
    pn_qwen38_config c = tiny_config();
    pn_tensor_desc *d;
    size_t n;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&c, &d, &n, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(n, n_exp, "%zu tensors, the expect file has %zu", n, n_exp);
    for (size_t i = 0; i < n; i++) {
        cr_assert_str_eq(d[i].name, rows[i].name, "tensor %zu", i);
        cr_assert_eq(d[i].n_dims, rows[i].n_dims, "%s", d[i].name);
        cr_assert_eq(d[i].ne[0], rows[i].ne[0], "%s", d[i].name);
        cr_assert_eq(d[i].ne[1], rows[i].ne[1], "%s", d[i].name);
        cr_assert_str_eq(rows[i].src, "F32");
        cr_assert_eq(d[i].src_type, PN_TYPE_F32);
    }
    free(d);
}

Test(tiny, the_test_recipe_gives_the_expected_types_with_q8_0_for_token_embd_and_output)
{
    expect_row rows[64];
    size_t n_exp = read_expect(rows, 64);
    pn_qwen38_config c = tiny_config();
    pn_tensor_desc *d;
    size_t n;
    pn_error err = { 0 };
    cr_assert_eq(pn_qwen38_tensors(&c, &d, &n, &err), PN_OK);
    cr_assert_eq(n, n_exp);
    pn_recipe *r = mix_load_ok(TEST_RECIPE);
    pn_plan *p = mix_build_ok(r, d, n);
    uint64_t pn_offset = 0;
    size_t n_pn = 0;
    for (size_t i = 0; i < n; i++) {
        const pn_plan_tensor *t = &p->tensors[i];
        const pn_type_traits *want = pn_type_traits_by_name(rows[i].type);
        cr_assert_not_null(want);
        if (strcmp(t->name, "token_embd.weight") == 0 || strcmp(t->name, "output.weight") == 0) {
            /* the expect file's q3_K / q4_K cannot hold K = 320: the chain's fallback */
            cr_assert(want->id == PN_TYPE_Q3_K || want->id == PN_TYPE_Q4_K);
            cr_assert_eq(t->type, PN_TYPE_Q8_0, "%s: %s", t->name, mix_tname(t->type));
            cr_assert_eq(t->chain_index, 1);
            cr_assert_eq(t->bytes, 320ull / 32 * 34 * 64);
            continue;
        }
        cr_assert_eq(t->type, want->id, "%s: plan %s, expected %s", t->name, mix_tname(t->type),
                     want->name);
        cr_assert_eq(t->chain_index, 0);
        cr_assert_eq(t->rotated, pn_type_is_pn(want->id), "%s", t->name);
        if (t->rotated) {
            /* README of the golden data: B = 64 for K = 320 and K = 64 */
            cr_assert_eq(t->rotation_block, 64, "%s", t->name);
            pn_offset += t->bytes;
            n_pn++;
        }
    }
    cr_assert_eq(n_pn, 13);
    cr_assert_eq(pn_offset, 152320, "the size of tiny.f32.pn.bin");
    cr_assert_eq(p->tensors[pn_plan_find(p, "blk.0.attn_qkv.weight")].bytes, 26112);
    cr_assert_eq(p->tensors[pn_plan_find(p, "blk.1.attn_q.weight")].bytes, 17408);
    cr_assert_eq(p->tensors[pn_plan_find(p, "blk.0.ssm_out.weight")].bytes, 10880);
    cr_assert_eq(p->n_candidates, 7, "every pn3t tensor has K = 320, which 64 divides");
    char label[80];
    pn_plan_mix_label(p, label, sizeof label);
    cr_assert_str_eq(label, "P0k-fallback+0");
    printf("tiny model with test-fallback.mix: token_embd.weight and output.weight -> q8_0 "
           "(the chain's fallback); the 13 PN tensors hold %" PRIu64 " bytes\n",
           pn_offset);
    pn_plan_free(p);
    pn_recipe_free(r);
    free(d);
}
