/* pn_quantize_file leaves nothing open on its error paths (issue 44, item
 * 6): a --reuse file that cannot be opened, refused after the CUDA backend
 * was opened for --backend cuda, closes the context (it holds 64 MiB host
 * buffers per slot in the emulator). The leak is measured here with
 * mallinfo2 (what is allocated before and after the refused run); under the
 * sanitizer build, where mallinfo2 sees nothing, LeakSanitizer names it.
 * In a build without CUDA, --backend cuda is refused before PREV is opened:
 * the test then checks that order (the GPU is said before any work). */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/quantize.h"
#include "quant/pn_cuda.h"
#include "quant/types.h"
#include "fixtures/pn_source.h"
#include "fixtures/scratch.h"
#include "test_util.h"

static const sf_spec g_specs[] = {
    { "blk.0.attn_q.weight", 2, 1280, 5, PN_TYPE_BF16 },
    { "output.weight", 2, 768, 4, PN_TYPE_F32 },
};
static const char g_recipe[] = "mix T\n"
                               "rotation hadamard 1024\n"
                               "promote 0\n"
                               "rule output.weight => q4_K\n"
                               "rule *.weight => pn3t\n";

/* Bytes the allocator holds for the program: the heap's and its mmap'd blocks. */
static size_t allocated(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* pn_quantize_file of src to dst with --reuse MISSING on backend b. */
static pn_status quantize_reusing_missing(const char *src, const char *dst, const char *recipe,
                                          const char *missing, pn_backend b, pn_error *err)
{
    pn_quantize_opts o;
    pn_quantize_opts_init(&o);
    o.src_path = src;
    o.dst_path = dst;
    o.recipe_path = recipe;
    o.promote = 0;
    o.threads = 1;
    o.backend = b;
    o.cuda_emulate = b == PN_BACKEND_CUDA;
    o.reuse_path = missing;
    pn_error_clear(err);
    return pn_quantize_file(&o, NULL, err);
}

TestSuite(quantize_cleanup, .init = setup, .fini = teardown);

Test(quantize_cleanup, a_reuse_file_that_cannot_be_opened_is_refused_and_leaves_nothing)
{
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix"), *dst = path_in("dst.gguf");
    char *missing = path_in("prev.gguf");
    sf_write_model(src, g_specs, sizeof g_specs / sizeof g_specs[0], 3);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    char want[4096];
    snprintf(want, sizeof want, "%s: cannot open the --reuse file: No such file or directory",
             missing);
    pn_error err;
    /* once for what is made on the first call only (thread pools, tables) */
    cr_assert_eq(quantize_reusing_missing(src, dst, recipe, missing, PN_BACKEND_CPU, &err),
                 PN_ERR_IO);
    size_t before = allocated();
    cr_assert_eq(quantize_reusing_missing(src, dst, recipe, missing, PN_BACKEND_CPU, &err),
                 PN_ERR_IO);
    cr_assert_str_eq(err.msg, want);
    size_t after = allocated();
    cr_assert_leq(after, before + 4096, "%zu bytes more held after the refused run",
                  after - before);
    cr_assert(!exists(dst));
    cr_assert_eq(tu_count_files(g_dir), 2, "only the source and the recipe");
    free(src);
    free(recipe);
    free(dst);
    free(missing);
}

Test(quantize_cleanup, with_backend_cuda_a_reuse_file_that_cannot_be_opened_closes_the_context)
{
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix"), *dst = path_in("dst.gguf");
    char *missing = path_in("prev.gguf");
    sf_write_model(src, g_specs, sizeof g_specs / sizeof g_specs[0], 3);
    cr_assert_eq(tu_write_file(recipe, g_recipe, strlen(g_recipe)), 0);
    char want[4096];
    if (pn_cuda_build_enabled())
        snprintf(want, sizeof want, "%s: cannot open the --reuse file: No such file or directory",
                 missing);
    else
        snprintf(want, sizeof want,
                 "--backend cuda: this build has no CUDA backend (configure with -DPN_CUDA=ON "
                 "and a CUDA toolkit)");
    const pn_status want_st = pn_cuda_build_enabled() ? PN_ERR_IO : PN_ERR_CUDA;
    pn_error err;
    cr_assert_eq(quantize_reusing_missing(src, dst, recipe, missing, PN_BACKEND_CUDA, &err),
                 want_st, "%s", err.msg);
    size_t before = allocated();
    cr_assert_eq(quantize_reusing_missing(src, dst, recipe, missing, PN_BACKEND_CUDA, &err),
                 want_st, "%s", err.msg);
    cr_assert_str_eq(err.msg, want);
    size_t after = allocated();
    /* the emulator's context alone holds PN_CUDA_SLOT_INPUT_BYTES per slot */
    cr_assert_leq(after, before + 4096,
                  "%zu bytes more held after the refused run: the CUDA "
                  "context was not closed",
                  after - before);
    cr_assert(!exists(dst));
    cr_assert_eq(tu_count_files(g_dir), 2, "only the source and the recipe");
    free(src);
    free(recipe);
    free(dst);
    free(missing);
}
