/* source_open.c - SRC as a GGUF reader, from a GGUF or a Hugging Face folder. */
#include "io/source_open.h"

#include "hf/hf.h"

bool pn_source_is_hf(const char *path) { return pn_hf_is_source(path); }

pn_status pn_source_open(const char *path, const pn_source_opts *opts, gguf_reader **out,
                         pn_error *err)
{
    if (!pn_hf_is_source(path)) {
        if (opts && opts->no_mtp)
            return pn_error_set(err, PN_ERR_USAGE,
                                "%s: --no-mtp applies to a Hugging Face folder; a GGUF "
                                "source keeps the tensors it has", path);
        return gguf_reader_open(path, out, err);
    }
    pn_hf_opts ho = {0};
    ho.outtype = PN_HF_OUT_BF16;
    if (opts) {
        ho.no_mtp = opts->no_mtp;
        ho.tokenizer_pre = opts->tokenizer_pre;
    }
    return pn_hf_open_source(path, &ho, out, err);
}
