/* synth_vocab.c - pn-synth's tokenizer: a byte-level BPE (gpt2) vocabulary
 * of any size, the same in the GGUF and the Hugging Face forms. */
#include <stdlib.h>
#include <string.h>

#include "synth/synth_internal.h"

/* GPT-2's byte-to-unicode map: the printable bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF stand for themselves; the other 68, in byte order, for
 * U+0100, U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' U+010A 'Ċ'). */
static unsigned gpt2_char(unsigned b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
            n++;
    return 256 + n;
}

/* UTF-8 of a code point below U+0800; returns the byte count. */
static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static const char *const special_text[] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>" };


void synth_vocab_free(synth_vocab *v)
{
    free(v->tokens);
    free(v->merges);
    free(v->types);
    free(v->blob);
    memset(v, 0, sizeof *v);
}

/* The vocabulary: byte tokens first (id = byte value), then merged tokens,
 * then the special tokens. With at least 259 entries: the 256 bytes, the 3
 * specials last, merges between. A merged token is an earlier token followed
 * by a lowercase letter, in breadth-first order from the seeds 'Ġ' and
 * 'a'..'z' ("Ġa".."Ġz", "aa".."zz", "Ġaa", ...), each with its merge
 * "<earlier> <letter>", so every merge joins two tokens and every text is
 * unique. Smaller vocabularies hold bytes 0..V-2 and <|endoftext|>. */
pn_status synth_vocab_build(uint64_t V, synth_vocab *v, pn_error *err)
{
    memset(v, 0, sizeof *v);
    v->n_tokens = V;
    v->n_special = V >= 259 ? 3 : 1;
    v->n_bytes = V - v->n_special < 256 ? V - v->n_special : 256;
    v->n_merges = V - v->n_special - v->n_bytes;
    /* a merged token is at most 1 + 2 * depth bytes; depth grows as log26 */
    size_t max_len = 2;
    for (uint64_t level = 27; level < v->n_merges + 27; level *= 26)
        max_len += 2;
    size_t blob_bytes = (size_t)(v->n_bytes * 3 + v->n_merges * (max_len + 1) +
                                 v->n_merges * (2 * max_len + 2) + 64);
    v->tokens = malloc((size_t)V * sizeof *v->tokens);
    v->merges = malloc((size_t)(v->n_merges ? v->n_merges : 1) * sizeof *v->merges);
    v->types = malloc((size_t)V * sizeof *v->types);
    v->blob = malloc(blob_bytes);
    if (!v->tokens || !v->merges || !v->types || !v->blob) {
        synth_vocab_free(v);
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory for a vocabulary of %llu tokens",
                            (unsigned long long)V);
    }
    char *o = v->blob;
    for (uint64_t b = 0; b < v->n_bytes; b++) {
        v->tokens[b] = o;
        o += put_utf8(o, gpt2_char((unsigned)b));
        *o++ = 0;
        v->types[b] = 1;
    }
    /* breadth-first: the queue is the token ids themselves (seeds, then
     * every merged token in creation order) */
    uint64_t next = v->n_bytes, head = 0;
    uint64_t seed_ids[27];
    seed_ids[0] = ' ';
    for (int k = 0; k < 26; k++)
        seed_ids[k + 1] = (uint64_t)('a' + k);
    for (uint64_t m = 0; m < v->n_merges; m++) {
        uint64_t q = head / 26, letter = head % 26;
        uint64_t left = q < 27 ? seed_ids[q] : v->n_bytes + (q - 27);
        const char *lt = v->tokens[left], *rt = v->tokens['a' + letter];
        size_t ll = strlen(lt);
        v->tokens[next] = o;
        memcpy(o, lt, ll);
        o[ll] = rt[0];
        o[ll + 1] = 0;
        o += ll + 2;
        v->merges[m] = o;
        memcpy(o, lt, ll);
        o[ll] = ' ';
        o[ll + 1] = rt[0];
        o[ll + 2] = 0;
        o += ll + 3;
        v->types[next] = 1;
        next++;
        head++;
    }
    for (uint64_t k = 0; k < v->n_special; k++) {
        v->tokens[next + k] = (char *)special_text[k];
        v->types[next + k] = 3;
    }
    v->bos = (uint32_t)next;
    v->pad = (uint32_t)next;
    v->eos = (uint32_t)(next + v->n_special - 1);
    return PN_OK;
}


/* The pattern of Qwen3.5's tokenizer.json, which llama.cpp's converter names
 * qwen35 (its "Split" pre-tokenizer). */
const char synth_qwen35_pre_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const char synth_chat_template[] =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
