/* The CUDA backend's API in a build without CUDA: every call that could do
 * work fails with PN_ERR_CUDA and says how to get the backend, so callers
 * need no #ifdef. (With CUDA, quant/pn_cuda.cu defines these functions.) */
#ifndef PN_HAVE_CUDA

#include <stddef.h>

#include "quant/pn_cuda.h"

static const char pn_cuda_stub_msg[] =
    "this build has no CUDA backend (configure with -DPN_CUDA=ON and a CUDA toolkit)";

bool pn_cuda_build_enabled(void)
{
    return false;
}

pn_status pn_cuda_open(int device, pn_cuda_ctx **out, pn_error *err)
{
    (void)device;
    if (out)
        *out = NULL;
    return pn_error_set(err, PN_ERR_CUDA, "%s", pn_cuda_stub_msg);
}

pn_status pn_cuda_open_emulator(pn_cuda_ctx **out, pn_error *err)
{
    if (out)
        *out = NULL;
    return pn_error_set(err, PN_ERR_CUDA, "%s", pn_cuda_stub_msg);
}

void pn_cuda_close(pn_cuda_ctx *ctx)
{
    (void)ctx;
}

const char *pn_cuda_device_name(const pn_cuda_ctx *ctx)
{
    (void)ctx;
    return "no CUDA backend in this build";
}

int64_t pn_cuda_max_rows(const pn_cuda_ctx *ctx, int64_t K)
{
    (void)ctx;
    (void)K;
    return 0;
}

pn_status pn_cuda_set_chunk_floats(pn_cuda_ctx *ctx, size_t chunk_floats, pn_error *err)
{
    (void)ctx;
    (void)chunk_floats;
    return pn_error_set(err, PN_ERR_CUDA, "%s", pn_cuda_stub_msg);
}

float *pn_cuda_slot_input(pn_cuda_ctx *ctx, int slot)
{
    (void)ctx;
    (void)slot;
    return NULL;
}

const uint8_t *pn_cuda_slot_output(const pn_cuda_ctx *ctx, int slot)
{
    (void)ctx;
    (void)slot;
    return NULL;
}

pn_status pn_cuda_submit(pn_cuda_ctx *ctx, int slot, int type, const float *x, int64_t n_rows,
                         int64_t K, int64_t row_base, pn_error *err)
{
    (void)ctx;
    (void)slot;
    (void)type;
    (void)x;
    (void)n_rows;
    (void)K;
    (void)row_base;
    return pn_error_set(err, PN_ERR_CUDA, "%s", pn_cuda_stub_msg);
}

pn_status pn_cuda_collect(pn_cuda_ctx *ctx, int slot, uint8_t *out, int64_t *bad_row,
                          int64_t *bad_col, pn_error *err)
{
    (void)ctx;
    (void)slot;
    (void)out;
    (void)bad_row;
    (void)bad_col;
    return pn_error_set(err, PN_ERR_CUDA, "%s", pn_cuda_stub_msg);
}

pn_status pn_cuda_quantize_rows(pn_cuda_ctx *ctx, int type, const float *x, int64_t n_rows,
                                int64_t K, uint8_t *out, int64_t *bad_row, int64_t *bad_col,
                                pn_error *err)
{
    (void)ctx;
    (void)type;
    (void)x;
    (void)n_rows;
    (void)K;
    (void)out;
    (void)bad_row;
    (void)bad_col;
    return pn_error_set(err, PN_ERR_CUDA, "%s", pn_cuda_stub_msg);
}

pn_status pn_cuda_fp16_from_double_batch(pn_cuda_ctx *ctx, const double *x, int64_t n,
                                         uint16_t *out, pn_error *err)
{
    (void)ctx;
    (void)x;
    (void)n;
    (void)out;
    return pn_error_set(err, PN_ERR_CUDA, "%s", pn_cuda_stub_msg);
}

#else
/* ISO C wants a translation unit to declare something. */
typedef int pn_cuda_stub_unused;
#endif
