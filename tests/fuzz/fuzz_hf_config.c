/* fuzz_hf_config.c - libFuzzer target for config.json (hf/hf_model.c):
 * the input is the file's text. An accepted config meets the limits the
 * conversion relies on, else abort (a finding): layers 1..1024, head counts
 * that divide, a head dimension, and the tensor name mapping of every name
 * pattern of a layer runs within its buffer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"
#include "hf/hf_testing.h"

static void require(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pn_hf_config c;
    pn_error err;
    if (pn_hf_config_parse((const char *)data, size, "config.json", false, &c, &err) != PN_OK) {
        require(strncmp(err.msg, "config.json", 11) == 0);
        return 0;
    }
    require(c.n_layer >= 1 && c.n_layer <= 1024 && c.n_mtp <= 16);
    require(c.n_head >= 1 && c.n_head_kv >= 1 && c.n_head % c.n_head_kv == 0);
    require(c.lin_nk >= 1 && c.lin_nv % c.lin_nk == 0);
    require(c.head_dim >= 1);
    static const char *const names[] = {
        "model.language_model.layers.%llu.linear_attn.in_proj_qkv.weight",
        "mtp.layers.%llu.self_attn.q_proj.weight",
        "mtp.fc.weight",
        "model.visual.blocks.%llu.attn.qkv.weight",
    };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char src[160], out[96];
        snprintf(src, sizeof src, names[i], (unsigned long long)(c.n_layer - 1));
        int r = pn_hf_map_name(src, &c, false, out, sizeof out, &err);
        require(r >= -1 && r <= 1);
        if (r == 1)
            require(memchr(out, '\0', sizeof out) != NULL);
    }
    return 0;
}
