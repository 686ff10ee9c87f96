/* pn-llama-quantize - stock llama.cpp's quantizer (llama_model_quantize in
 * node-llama-cpp's libllama), for pn-compare --sweep (compare/sweep.h) and bench/bench-peers.sh.
 *
 *   pn-llama-quantize --lib LIBLLAMA.so [--threads N] [--imatrix FILE] [--verbose] SRC DST TYPE
 *
 * TYPE is a llama.cpp ftype name: Q4_K_M, Q3_K_M, Q3_K_S, Q3_K_L, Q4_K_S,
 * Q5_K_M, Q6_K or Q8_0. The library is opened at run time (dlopen), so the
 * project builds without it; its struct layout is llama_abi.h's. Exit 0
 * written, 1 error, 2 usage. llama.cpp's log goes to stderr with --verbose
 * only. --imatrix FILE (either form, read by mix/imatrix.h) hands llama.cpp
 * the per-column weights llama-quantize --imatrix would: in_sum2 / count,
 * or value / ncall (the tests compare the bytes with llama-quantize's). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama_abi.h"
#include "mix/imatrix.h"

static const struct {
    const char *name;
    int ftype;
} k_types[] = {
    { "Q8_0", PNL_FTYPE_MOSTLY_Q8_0 },     { "Q3_K_S", PNL_FTYPE_MOSTLY_Q3_K_S },
    { "Q3_K_M", PNL_FTYPE_MOSTLY_Q3_K_M }, { "Q3_K_L", PNL_FTYPE_MOSTLY_Q3_K_L },
    { "Q4_K_S", PNL_FTYPE_MOSTLY_Q4_K_S }, { "Q4_K_M", PNL_FTYPE_MOSTLY_Q4_K_M },
    { "Q5_K_M", PNL_FTYPE_MOSTLY_Q5_K_M }, { "Q6_K", PNL_FTYPE_MOSTLY_Q6_K },
};

static void quiet_log(int level, const char *text, void *user)
{
    (void)level;
    (void)text;
    (void)user;
}

static int usage(void)
{
    fprintf(stderr, "usage: pn-llama-quantize --lib LIBLLAMA.so [--threads N] [--imatrix FILE] "
                    "[--verbose] "
                    "SRC DST TYPE\n(TYPE: Q4_K_M Q3_K_M Q3_K_S Q3_K_L Q4_K_S Q5_K_M Q6_K "
                    "Q8_0)\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *lib = NULL, *pos[3] = { NULL, NULL, NULL }, *imx = NULL;
    int threads = 0, n_pos = 0;
    int verbose = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--lib") == 0 && i + 1 < argc)
            lib = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (strcmp(argv[i], "--imatrix") == 0 && i + 1 < argc)
            imx = argv[++i];
        else if (strcmp(argv[i], "--verbose") == 0)
            verbose = 1;
        else if (argv[i][0] == '-' || n_pos == 3)
            return usage();
        else
            pos[n_pos++] = argv[i];
    }
    if (!lib || n_pos != 3 || threads < 0)
        return usage();
    int ftype = -1;
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (strcmp(pos[2], k_types[i].name) == 0)
            ftype = k_types[i].ftype;
    if (ftype < 0)
        return usage();
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "pn-llama-quantize: %s\n", dlerror());
        return 1;
    }
    pnl_default_params_fn defaults =
        (pnl_default_params_fn)dlsym(h, "llama_model_quantize_default_params");
    pnl_quantize_fn quantize = (pnl_quantize_fn)dlsym(h, "llama_model_quantize");
    pnl_backend_init_fn init = (pnl_backend_init_fn)dlsym(h, "llama_backend_init");
    pnl_log_set_fn log_set = (pnl_log_set_fn)dlsym(h, "llama_log_set");
    if (!defaults || !quantize) {
        fprintf(stderr, "pn-llama-quantize: %s: no llama_model_quantize in it\n", lib);
        return 1;
    }
    if (log_set && !verbose)
        log_set(quiet_log, NULL);
    if (init)
        init();
    pnl_quantize_params p = defaults();
    p.nthread = threads;
    p.ftype = ftype;
    pn_imatrix *im = NULL;
    pnl_imatrix_data *entries = NULL;
    if (imx) {
        pn_error e;
        if (pn_imatrix_load(imx, &im, &e) != PN_OK) {
            fprintf(stderr, "pn-llama-quantize: %s\n", e.msg);
            return 1;
        }
        entries = calloc(im->n + 1, sizeof *entries);
        if (!entries)
            return 1;
        for (size_t i = 0; i < im->n; i++) {
            entries[i].name = im->entries[i].name;
            entries[i].data = im->entries[i].weights;
            entries[i].size = (size_t)im->entries[i].n_vals;
        }
        p.imatrix = entries;
    }
    uint32_t rc = quantize(pos[0], pos[1], &p);
    free(entries);
    pn_imatrix_free(im);
    if (rc != 0) {
        fprintf(stderr, "pn-llama-quantize: llama_model_quantize(%s, %s, %s) failed (%u)%s\n",
                pos[0], pos[1], pos[2], rc, verbose ? "" : "; --verbose shows llama.cpp's log");
        return 1;
    }
    return 0;
}
