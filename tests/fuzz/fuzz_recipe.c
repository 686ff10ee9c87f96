/* libFuzzer target: the recipe parser on arbitrary text, and every rule of an
 * accepted recipe matched against a few tensor shapes. */
#include <stddef.h>
#include <stdint.h>

#include "mix/recipe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pn_recipe *r = NULL;
    pn_error err;
    if (pn_recipe_parse((const char *)data, size, "fuzz", &r, &err) != PN_OK)
        return 0;
    static const int64_t shapes[][4] = {
        { 5120, 10240, 1, 1 }, { 320, 1, 1, 1 }, { 1, 1, 1, 1 }, { 17408, 5120, 2, 3 }
    };
    static const char *const names[] = { "blk.0.attn_qkv.weight", "token_embd.weight", "x", "" };
    for (size_t i = 0; i < 4; i++) {
        const pn_recipe_rule *rule = pn_recipe_match(r, names[i], (uint32_t)(i % 4 + 1), shapes[i]);
        if (rule)
            (void)pn_recipe_rule_pick_type(rule, shapes[i][0], NULL);
    }
    pn_recipe_free(r);
    return 0;
}
