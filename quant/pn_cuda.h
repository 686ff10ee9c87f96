/* pn_cuda.h - the PN scale search (pn3t, pn4t) on an NVIDIA GPU.
 *
 * Contract
 * - Same bytes as the CPU: for every input, the blocks written here are the
 *   bytes pn_quantize_row_ref (quant/pn.h) writes, row by row; the error
 *   reported is the one the reference reports for the lowest failing row
 *   (NaN/Inf -> PN_ERR_NONFINITE with the row and the column of the first bad
 *   weight of the first failing group; every candidate scale overflowing ->
 *   PN_ERR_SCALE_OVERFLOW with the row and the group's first column). When a
 *   call reports such an error the output is unspecified, as on the CPU.
 * - Input rows are already rotated (the Hadamard rotation stays on the CPU):
 *   n_rows x K floats, row-major, K a multiple of the type's group (80 / 64).
 *   Output: n_rows * (K / G) blocks of 34 bytes, row after row, no padding.
 * - Target: sm_60 (Tesla P100) and newer; the kernel uses nothing an sm_60
 *   lacks. The build for a CUDA 13 toolkit targets its oldest architecture.
 * - A build without CUDA (PN_HAVE_CUDA undefined) has the same functions:
 *   every one that can fail returns PN_ERR_CUDA saying so
 *   (quant/pn_cuda_stub.c); pn_cuda_build_enabled() tells which build this is.
 *
 * Ownership and threads
 * - pn_cuda_open / pn_cuda_open_emulator allocate a context; pn_cuda_close
 *   frees it with all its host and device buffers (after waiting for work in
 *   flight). A context may be used from any thread, but from one at a time.
 * - The context owns PN_CUDA_SLOTS slots. Each slot has a pinned host input
 *   buffer (PN_CUDA_SLOT_INPUT_BYTES), a pinned host output buffer, device
 *   buffers and its own CUDA stream, so work on one slot overlaps host work
 *   (reading, rotating, writing) and the other slot's transfers.
 * - A slot is IDLE or BUSY. pn_cuda_submit (IDLE -> BUSY) copies the rows into
 *   the slot's pinned buffer (no copy when they are already there, see
 *   pn_cuda_slot_input) and queues host->device copy, kernel, device->host
 *   copy, then returns at once: the caller's x is free again on return.
 *   pn_cuda_collect (BUSY -> IDLE) waits for that slot and copies the blocks
 *   out. A CUDA failure (not a data error) poisons the context: every later
 *   call returns PN_ERR_CUDA; close it.
 * - The emulator context runs the very same kernel code (the phases of a
 *   thread block, each for every thread in turn, with the barriers between
 *   them) on the host CPU, with ordinary malloc'd memory, synchronously at
 *   submit. It exists so that the kernel logic is tested on machines without
 *   a GPU; it is slow and not a production backend.
 */
#ifndef PN_QUANT_PN_CUDA_H
#define PN_QUANT_PN_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/pn_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PN_CUDA_SLOTS 2
/* Pinned input buffer per slot: 64 MiB of floats. */
#define PN_CUDA_SLOT_INPUT_BYTES ((size_t)64 << 20)

typedef struct pn_cuda_ctx pn_cuda_ctx;

/* True when this library was built with the CUDA backend (it may still find
 * no GPU at run time). */
bool pn_cuda_build_enabled(void);

/* Opens GPU `device` (0-based). PN_ERR_CUDA with the reason when the build has
 * no CUDA, the driver or the GPU is missing, the index is out of range (the
 * message says how many devices there are) or the build has no kernel for
 * that GPU's architecture. */
pn_status pn_cuda_open(int device, pn_cuda_ctx **out, pn_error *err);

/* Opens the host emulator of the kernel (see the contract). PN_ERR_CUDA only
 * in a build without CUDA; PN_ERR_NOMEM when buffers cannot be allocated. */
pn_status pn_cuda_open_emulator(pn_cuda_ctx **out, pn_error *err);

/* Waits for work in flight and frees everything. NULL is allowed. */
void pn_cuda_close(pn_cuda_ctx *ctx);

/* "NVIDIA H200 (sm_90, device 0)" or the emulator's name; owned by ctx. */
const char *pn_cuda_device_name(const pn_cuda_ctx *ctx);

/* Rows of length K one slot takes (>= 1), or 0 when K is not positive or a
 * single row does not fit a slot: chunk_floats / K. */
int64_t pn_cuda_max_rows(const pn_cuda_ctx *ctx, int64_t K);

/* Sets how many floats one submit may hold (chunk_floats; default and
 * maximum PN_CUDA_SLOT_INPUT_BYTES / 4). Smaller chunks shorten the fill and
 * drain of a pipeline over small tensors, and let tests exercise chunking
 * cheaply. Every slot must be IDLE. PN_ERR_USAGE outside 1..maximum. */
pn_status pn_cuda_set_chunk_floats(pn_cuda_ctx *ctx, size_t chunk_floats, pn_error *err);

/* The pinned input buffer of a slot (PN_CUDA_SLOT_INPUT_BYTES bytes), for a
 * caller that writes (rotates) its rows straight into it and then submits
 * with x == this pointer, saving a copy. Owned by ctx; write to it only while
 * the slot is IDLE. The backend only reads it, so after a collect it still
 * holds the rows of that chunk (e.g. for measuring the error). NULL for a bad
 * slot index. */
float *pn_cuda_slot_input(pn_cuda_ctx *ctx, int slot);

/* Queues the search of n_rows x K floats (1 <= n_rows <= max_rows(K)) on an
 * IDLE slot. row_base is the row number the first row has in the caller's
 * tensor: bad_row and the messages of pn_cuda_collect count from it.
 * PN_ERR_USAGE for a bad type, shape, slot or a BUSY slot; PN_ERR_CUDA when a
 * CUDA call fails. */
pn_status pn_cuda_submit(pn_cuda_ctx *ctx, int slot, int type, const float *x, int64_t n_rows,
                         int64_t K, int64_t row_base, pn_error *err);

/* Waits for a BUSY slot and makes it IDLE. On PN_OK, when out is not NULL,
 * copies the n_rows * (K/G) * 34 bytes of blocks to out. On a data error
 * (PN_ERR_NONFINITE, PN_ERR_SCALE_OVERFLOW) *bad_row / *bad_col (each may be
 * NULL) receive row_base + the row and the column, as described above. */
pn_status pn_cuda_collect(pn_cuda_ctx *ctx, int slot, uint8_t *out, int64_t *bad_row,
                          int64_t *bad_col, pn_error *err);

/* The slot's pinned output buffer holding the blocks of its last successful
 * collect (so a caller can write them without a copy); owned by ctx, valid
 * until the next submit on that slot. NULL for a bad slot index. */
const uint8_t *pn_cuda_slot_output(const pn_cuda_ctx *ctx, int slot);

/* Synchronous form: any number of rows (chunked over the slots, transfers
 * overlapping the kernel). Every slot must be IDLE. x: n_rows x K floats,
 * out: n_rows * (K/G) * 34 bytes. Rows count from 0. */
pn_status pn_cuda_quantize_rows(pn_cuda_ctx *ctx, int type, const float *x, int64_t n_rows,
                                int64_t K, uint8_t *out, int64_t *bad_row, int64_t *bad_col,
                                pn_error *err);

/* Test hook: the device's fp16 rounding (the one the kernel uses for the
 * candidate scales) applied to n doubles; out[i] = the binary16 bits. Must
 * equal pn_fp16_from_double for every input. Every slot must be IDLE. */
pn_status pn_cuda_fp16_from_double_batch(pn_cuda_ctx *ctx, const double *x, int64_t n,
                                         uint16_t *out, pn_error *err);

#ifdef __cplusplus
}
#endif

#endif
