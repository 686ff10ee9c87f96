/* fuzz_hf_index.c - libFuzzer target for model.safetensors.index.json
 * (hf/hf_model.c): the input is the file's text. An accepted index names
 * at least one shard and no more than it has weight_map entries, else abort
 * (a finding); a refusal names the file. */
#include <stdint.h>
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
    pn_error err;
    size_t n = 0;
    pn_status st =
        pn_hf_index_parse((const char *)data, size, "model.safetensors.index.json", &n, &err);
    if (st != PN_OK) {
        require(strncmp(err.msg, "model.safetensors.index.json", 28) == 0 || st == PN_ERR_NOMEM);
        require(n == 0);
        return 0;
    }
    require(n >= 1 && n <= size);
    return 0;
}
