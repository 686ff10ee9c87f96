/* pn-synth's model shapes and keys (synth/synth.h): the full 27B shape and
 * its hyperparameters, narrower widths, the keys from which llama.cpp's
 * loader derives our shapes, and the vocabulary's size.
 *
 * The program's options, output and refusals are
 * tests/programs/test_synth_cli.c; that stock llama.cpp loads and runs its
 * files is tests/programs/test_llama.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "synth/qwen38_shapes.h"
#include "synth/qwen38_shapes_testing.h"
#include "synth/synth.h"
#include "quant/types.h"
#include "fixtures/loader_shapes.h"
#include "fixtures/scratch.h"
#include "test_util.h"


/* ---- the keys llama.cpp's qwen35 loader reads ---- */

/* The published Qwen3.8-27B (qwen3.5 27B) configuration, written down here
 * independently of mix/: 24 query heads and 4 key/value heads of 256, rotary
 * on a quarter of each head (64) with mrope sections 11, 11, 10; gated
 * delta-net with 16 key heads and 48 value heads of 128, conv kernel 4. */
Test(synth_keys, the_full_shape_gives_the_27b_hyperparameters)
{
    pn_qwen38_config c = pn_qwen38_config_full();
    pn_qwen38_hparams h;
    pn_error e;
    cr_assert_eq(pn_qwen38_llama_hparams(&c, &h, &e), PN_OK, "%s", e.msg);
    cr_assert_eq(h.n_head, 24);
    cr_assert_eq(h.n_head_kv, 4);
    cr_assert_eq(h.head_dim, 256);
    cr_assert_eq(h.rope_dims, 64);
    cr_assert_eq(h.rope_sections[0], 11);
    cr_assert_eq(h.rope_sections[1], 11);
    cr_assert_eq(h.rope_sections[2], 10);
    cr_assert_eq(h.rope_sections[3], 0);
    cr_assert_eq(h.ssm_state, 128);
    cr_assert_eq(h.ssm_groups, 16);
    cr_assert_eq(h.ssm_v_heads, 48);
    cr_assert_eq(h.ssm_inner, 6144);
    cr_assert_eq(h.conv_kernel, 4);
    cr_assert_eq(pn_qwen38_llama_runnable(&c, &e), PN_OK, "%s", e.msg);
}

Test(synth_keys, width_scale_1_with_64_layers_is_exactly_the_full_shape)
{
    pn_qwen38_config a = pn_qwen38_config_narrow(1, 64, 248320), b = pn_qwen38_config_full();
    cr_assert_eq(a.n_layers, b.n_layers);
    cr_assert_eq(a.full_attn_interval, b.full_attn_interval);
    cr_assert_eq(a.n_embd, b.n_embd);
    cr_assert_eq(a.n_inner, b.n_inner);
    cr_assert_eq(a.n_qkv, b.n_qkv);
    cr_assert_eq(a.n_q, b.n_q);
    cr_assert_eq(a.n_kv, b.n_kv);
    cr_assert_eq(a.n_ff, b.n_ff);
    cr_assert_eq(a.n_vocab, b.n_vocab);
    cr_assert_eq(a.n_ssm_heads, b.n_ssm_heads);
    cr_assert_eq(a.conv_kernel, b.conv_kernel);
    cr_assert_eq(a.ssm_norm, b.ssm_norm);
    cr_assert_eq(a.head_dim, b.head_dim);
}

static void assert_loader_agrees(const pn_qwen38_config *c, const char *what)
{
    pn_qwen38_hparams h;
    pn_error e;
    cr_assert_eq(pn_qwen38_llama_hparams(c, &h, &e), PN_OK, "%s: %s", what, e.msg);
    pn_tensor_desc *t;
    size_t n;
    cr_assert_eq(pn_qwen38_tensors(c, &t, &n, &e), PN_OK, "%s: %s", what, e.msg);
    for (size_t i = 0; i < n; i++) {
        int64_t ne[2];
        int dims =
            synth_loader_shape(synth_role_of(t[i].name), &h, c->n_embd, c->n_ff, c->n_vocab, ne);
        cr_assert_neq(dims, 0, "%s: no loader shape for %s", what, t[i].name);
        cr_assert_eq(t[i].n_dims, (uint32_t)dims, "%s: %s", what, t[i].name);
        cr_assert(t[i].ne[0] == ne[0] && t[i].ne[1] == ne[1],
                  "%s: tensor '%s' has wrong shape; expected %lld, %lld, got %lld, %lld", what,
                  t[i].name, (long long)ne[0], (long long)ne[1], (long long)t[i].ne[0],
                  (long long)t[i].ne[1]);
    }
    free(t);
}

Test(synth_keys, at_every_width_scale_the_loader_derives_our_shapes_from_our_keys)
{
    for (int s = 1; s <= 16; s++)
        for (int layers = 2; layers <= 9; layers++) {
            pn_qwen38_config c = pn_qwen38_config_narrow(s, layers, 300);
            char what[64];
            snprintf(what, sizeof what, "scale %d, %d layers", s, layers);
            assert_loader_agrees(&c, what);
            pn_error e;
            cr_assert_eq(pn_qwen38_llama_runnable(&c, &e), PN_OK, "%s: %s", what, e.msg);
            /* every PN candidate's K is one that pn3t (80) / pn4t (64) hold */
            cr_assert_eq(c.n_embd % 320, 0, "%s", what);
            cr_assert_eq(c.n_inner % 64, 0, "%s", what);
            cr_assert_eq(c.n_ff % 64, 0, "%s", what);
        }
    pn_qwen38_config full = pn_qwen38_config_full();
    assert_loader_agrees(&full, "the full shape");
}

Test(synth_keys, narrow_widths_at_scales_4_and_16)
{
    pn_qwen38_config c = pn_qwen38_config_narrow(4, 6, 8192);
    cr_assert_eq(c.n_embd, 1280);
    cr_assert_eq(c.n_inner, 1536);
    cr_assert_eq(c.n_qkv, 2560);
    cr_assert_eq(c.n_q, 3072);
    cr_assert_eq(c.n_kv, 256);
    cr_assert_eq(c.n_ff, 4352);
    cr_assert_eq(c.n_ssm_heads, 12);
    cr_assert_eq(c.full_attn_interval, 4);
    c = pn_qwen38_config_narrow(16, 2, 8192);
    cr_assert_eq(c.n_embd, 320);
    cr_assert_eq(c.n_inner, 256);
    cr_assert_eq(c.n_qkv, 512);
    cr_assert_eq(c.n_q, 512);
    cr_assert_eq(c.n_kv, 256);
    cr_assert_eq(c.n_ff, 1088);
    cr_assert_eq(c.n_ssm_heads, 2);
    cr_assert_eq(c.full_attn_interval, 2, "fewer layers than 4: the last block is full");
    c = pn_qwen38_config_narrow(16, 3, 100);
    cr_assert_eq(c.full_attn_interval, 3);
    c = pn_qwen38_config_narrow(17, 4, 100);
    cr_assert_eq(c.n_layers, 0);
}

Test(synth_keys, llama_cpp_cannot_run_a_model_without_both_block_kinds)
{
    pn_error e;
    pn_qwen38_config c = pn_qwen38_config_narrow(16, 1, 100);
    cr_assert_eq(c.full_attn_interval, 1);
    cr_assert_eq(pn_qwen38_llama_runnable(&c, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "no linear-attention block"), "%s", e.msg);
    c = pn_qwen38_config_scaled(16, 2, 100); /* interval 4: no full block */
    cr_assert_eq(pn_qwen38_llama_runnable(&c, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "no full-attention block"), "%s", e.msg);
}

Test(synth_keys, a_config_whose_keys_would_not_match_its_shapes_is_refused, .init = setup,
     .fini = teardown)
{
    pn_error e;
    pn_qwen38_hparams h;
    /* the old narrowing: 48 ssm heads kept at scale 4, where n_inner is 1536 */
    pn_qwen38_config c = pn_qwen38_config_scaled(4, 4, 100);
    cr_assert_eq(pn_qwen38_llama_hparams(&c, &h, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "ssm heads 48"), "%s", e.msg);
    char path[1024];
    snprintf(path, sizeof path, "%s/bad.gguf", g_dir);
    pn_synth_opts o;
    memset(&o, 0, sizeof o);
    o.path = path;
    o.config = c;
    cr_assert_eq(pn_synth_write(&o, &e), PN_ERR_USAGE);
    struct stat sb;
    cr_assert_neq(stat(path, &sb), 0);
    c = pn_qwen38_config_narrow(4, 4, 100);
    c.n_q += 512;
    cr_assert_eq(pn_qwen38_llama_hparams(&c, &h, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "n_q"), "%s", e.msg);
    c = pn_qwen38_config_narrow(4, 4, 100);
    c.n_qkv += 128;
    cr_assert_eq(pn_qwen38_llama_hparams(&c, &h, &e), PN_ERR_USAGE);
    cr_assert(strstr(e.msg, "n_qkv"), "%s", e.msg);
}

Test(synth_vocab, the_full_shape_with_its_vocabulary_is_predicted_at_the_27b_size)
{
    /* the 248320-token vocabulary builds, and the full file stays the size of
     * the 27B in BF16 (about 54 GB), without writing it */
    pn_synth_opts o;
    memset(&o, 0, sizeof o);
    o.path = "/nonexistent/x.gguf";
    o.config = pn_qwen38_config_narrow(16, 2, 248320);
    uint64_t big = 0;
    pn_error e;
    cr_assert_eq(pn_synth_files(&o, &big, NULL, &e), PN_OK, "%s", e.msg);
    o.config = pn_qwen38_config_full();
    uint64_t full = 0;
    cr_assert_eq(pn_synth_files(&o, &full, NULL, &e), PN_OK, "%s", e.msg);
    cr_assert_gt(full, 53000000000ull);
    cr_assert_lt(full, 56000000000ull);
}
