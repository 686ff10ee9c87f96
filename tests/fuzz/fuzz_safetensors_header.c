/* fuzz_safetensors_header.c - libFuzzer target for the safetensors header
 * parser (hf/safetensors.c): the input is a whole shard (8-byte length,
 * JSON header, data). An accepted header's invariants are checked and a
 * violation aborts (a finding): every tensor's byte range lies inside the
 * data, ranges do not overlap, shape x dtype size is the range, names are
 * non-empty. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"

static void require(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pn_hf_st_header h;
    pn_error err;
    if (pn_hf_st_parse(data, size, size, "fuzz.safetensors", &h, &err) != PN_OK) {
        require(strncmp(err.msg, "fuzz.safetensors", 16) == 0);
        return 0;
    }
    uint64_t data_size = size - h.data_offset;
    for (size_t i = 0; i < h.n_tensors; i++) {
        const pn_hf_st_tensor *t = &h.tensors[i];
        require(t->name && t->name[0]);
        require(t->begin <= t->end && t->end <= data_size);
        uint64_t n = t->dtype == PN_HF_F32 ? 4 : 2;
        for (uint32_t d = 0; d < t->n_dims; d++)
            n *= t->shape[d];
        require(n == t->end - t->begin);
        for (size_t j = 0; j < i; j++) {
            const pn_hf_st_tensor *u = &h.tensors[j];
            require(t->end <= u->begin || u->end <= t->begin || t->begin == t->end ||
                    u->begin == u->end);
        }
        if (i > 64)
            break; /* the pairwise check is quadratic: bound it */
    }
    pn_hf_st_free(&h);
    return 0;
}
