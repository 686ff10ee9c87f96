/* llama_abi.h - facts about stock llama.cpp's quantization API, as the
 * harness pn-llama-quantize calls it through dlopen.
 *
 * Mirrors include/llama.h of llama.cpp release v0.5.0 (the build that
 * node-llama-cpp 3.22.1 ships as libllama.v0.5.0.so, which scripts/install-deps
 * installs under tools/llama/). Only the layout is copied, as facts: field
 * order and types of struct llama_model_quantize_params, the llama_ftype
 * values used, and the signatures of the functions looked up. Another
 * llama.cpp release may lay the struct out otherwise: check it against that
 * release's llama.h before pointing the harness at it. The harness sets only
 * nthread and ftype, on the library's own defaults
 * (llama_model_quantize_default_params). C enums are int on the SysV x86-64
 * ABI; bool is C11 _Bool, as in C++.
 */
#ifndef PN_BENCH_LLAMA_ABI_H
#define PN_BENCH_LLAMA_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* enum llama_ftype (values of v0.5.0) */
enum {
    PNL_FTYPE_MOSTLY_Q8_0 = 7,
    PNL_FTYPE_MOSTLY_Q3_K_S = 11,
    PNL_FTYPE_MOSTLY_Q3_K_M = 12,
    PNL_FTYPE_MOSTLY_Q3_K_L = 13,
    PNL_FTYPE_MOSTLY_Q4_K_S = 14,
    PNL_FTYPE_MOSTLY_Q4_K_M = 15,
    PNL_FTYPE_MOSTLY_Q5_K_M = 17,
    PNL_FTYPE_MOSTLY_Q6_K = 18,
};

/* struct llama_model_quantize_params of v0.5.0, field for field */
typedef struct pnl_quantize_params {
    int32_t nthread;          /* <= 0: std::thread::hardware_concurrency() */
    int ftype;                /* enum llama_ftype */
    int output_tensor_type;   /* enum ggml_type */
    int token_embedding_type; /* enum ggml_type */
    bool allow_requantize;
    bool quantize_output_tensor;
    bool only_copy;
    bool pure;
    bool keep_split;
    bool dry_run;
    const void *imatrix;      /* const struct llama_model_imatrix_data * */
    const void *kv_overrides; /* const struct llama_model_kv_override * */
    const void *tt_overrides; /* const struct llama_model_tensor_override * */
    const int32_t *prune_layers;
    size_t max_buf_size;
} pnl_quantize_params;

/* struct llama_model_imatrix_data of v0.5.0: one entry's per-column
 * weights; an array of them ends with a NULL name */
typedef struct pnl_imatrix_data {
    const char *name;
    const float *data;
    size_t size;
} pnl_imatrix_data;

/* the functions (names as exported by libllama) */
typedef pnl_quantize_params (*pnl_default_params_fn)(
    void); /* llama_model_quantize_default_params */
typedef uint32_t (*pnl_quantize_fn)(const char *fname_inp, const char *fname_out,
                                    const pnl_quantize_params *params); /* llama_model_quantize */
typedef void (*pnl_backend_init_fn)(void);                              /* llama_backend_init */
typedef void (*pnl_log_callback)(int level, const char *text, void *user_data);
typedef void (*pnl_log_set_fn)(pnl_log_callback cb, void *user_data); /* llama_log_set */

#endif
