/* fuzz_hf_tokenizer.c - libFuzzer target for tokenizer.json (hf/hf_keys.c):
 * the input is the file's text, read against the golden tiny config
 * (vocab_size 320). An accepted tokenizer's keys are read back from the
 * writer's header and checked, else abort (a finding): exactly vocab_size
 * tokens and token types, every merge two non-empty tokens with one space
 * between, every key's value within the header. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "hf/hf.h"
#include "hf/hf_testing.h"

static void require(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pn_hf_config c = { 0 };
    c.vocab_size = 320;
    c.n_layer = 4;
    c.n_embd = 64;
    gguf_writer *w = gguf_writer_new();
    require(w != NULL);
    pn_error err;
    pn_status st = pn_hf_tokenizer_parse((const char *)data, size, "tokenizer.json", &c, w, &err);
    if (st != PN_OK) {
        require(strncmp(err.msg, "tokenizer.json", 14) == 0 || st == PN_ERR_NOMEM);
        gguf_writer_free(w);
        return 0;
    }
    uint8_t *hdr = NULL;
    size_t len = 0;
    require(gguf_writer_header(w, &hdr, &len, &err) == PN_OK);
    gguf_reader *r = NULL;
    require(gguf_reader_open_memory(hdr, len, "keys", &r, &err) == PN_OK);
    const gguf_kv *tok = gguf_reader_find_kv(r, "tokenizer.ggml.tokens");
    const gguf_kv *typ = gguf_reader_find_kv(r, "tokenizer.ggml.token_type");
    require(tok && tok->type == GGUF_TYPE_ARRAY && tok->arr_type == GGUF_TYPE_STRING &&
            tok->arr_count == c.vocab_size);
    require(typ && typ->type == GGUF_TYPE_ARRAY && typ->arr_count == c.vocab_size);
    const gguf_kv *mg = gguf_reader_find_kv(r, "tokenizer.ggml.merges");
    if (mg) {
        require(mg->type == GGUF_TYPE_ARRAY && mg->arr_type == GGUF_TYPE_STRING);
        /* one walk over the strings: u64 length, then the bytes */
        const uint8_t *p = mg->arr_data, *end = mg->arr_data + mg->arr_bytes;
        for (uint64_t i = 0; i < mg->arr_count; i++) {
            require(end - p >= 8);
            uint64_t n = 0;
            for (int b = 7; b >= 0; b--)
                n = (n << 8) | p[b];
            p += 8;
            require((uint64_t)(end - p) >= n);
            const uint8_t *sp = memchr(p, ' ', n);
            require(sp && sp > p && sp < p + n - 1 &&
                    !memchr(sp + 1, ' ', (size_t)(p + n - sp - 1)));
            p += n;
        }
    }
    gguf_reader_close(r);
    free(hdr);
    gguf_writer_free(w);
    return 0;
}
