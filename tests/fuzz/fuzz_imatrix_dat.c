/* libFuzzer target: llama.cpp's importance matrix read from arbitrary bytes
 * (the legacy .dat reader; bytes that start with the GGUF magic take the GGUF
 * form's), and an accepted one looked up, hashed and checked against a plan. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mix/imatrix.h"
#include "mix/plan.h"
#include "mix/recipe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pn_imatrix *im = NULL;
    pn_error err;
    if (pn_imatrix_parse(data, size, "fuzz", &im, &err) != PN_OK)
        return 0;
    (void)pn_imatrix_find(im, "output.weight");
    static const char text[] = "mix F\nrotation none\npromote 0\nrule * => pn3t|f32\n";
    pn_recipe *r = NULL;
    pn_plan *plan = NULL;
    const pn_tensor_desc d[2] = { { "output.weight", 2, { 8, 4, 1, 1 }, 0 },
                                  { "blk.0.attn_gate.weight", 2, { 4, 4, 1, 1 }, 0 } };
    if (pn_recipe_parse(text, strlen(text), "fuzz", &r, &err) == PN_OK &&
        pn_plan_build(r, d, 2, &plan, NULL, &err) == PN_OK) {
        size_t n_unknown = 0;
        char *unknown = NULL;
        if (pn_imatrix_check_model(im, "fuzz", plan, &n_unknown, &unknown, &err) == PN_OK)
            (void)pn_imatrix_hash_used(im, plan, NULL);
        free(unknown);
    }
    pn_plan_free(plan);
    pn_recipe_free(r);
    pn_imatrix_free(im);
    return 0;
}
