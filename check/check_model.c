/* check_model.c - the header against the tensors and the tokenizer, as stock
 * llama.cpp loads them: gguf/model_check.h's check (the one every decoder
 * runs before it decodes), each problem a finding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/model_check.h"
#include "gguf/pn_keys.h"
#include "check/check_internal.h"

static void add_problem(void *ctx, const gguf_model_problem *p)
{
    pn_check_ctx *c = ctx;
    pn_finding *f = pn_check_add(c, p->warning ? PN_SEV_WARNING : PN_SEV_ERROR, p->code, p->tensor,
                                 p->key, -1, "%s", p->message);
    if (f) {
        f->index = p->index;
        f->count = p->count;
    }
    if (f && p->file) {
        char *file = strdup(p->file);
        if (file) {
            free(f->file);
            f->file = file;
        }
    }
}

static void ignore_problem(void *ctx, const gguf_model_problem *p)
{
    (void)ctx;
    (void)p;
}

/* Whether the header proves itself, for the report's line (the mismatches
 * are findings of gguf_model_check). */
static pn_status header_proof(pn_check_ctx *c, pn_error *err)
{
    gguf_header_proof proof;
    gguf_header_hash_check(c->r, ignore_problem, NULL, &proof);
    gguf_header_verdict v;
    gguf_header_hash_verify(gguf_reader_split(c->r, 0), &v);
    c->rep->header_proof = proof == GGUF_HEADER_PROVEN     ? "proven"
                           : proof == GGUF_HEADER_UNPROVEN ? "unproven"
                                                           : "mismatch";
    const char *note = proof == GGUF_HEADER_MISMATCH ? "PN-HEADER-HASH-MISMATCH" : v.message;
    if (proof == GGUF_HEADER_PROVEN && gguf_reader_n_splits(c->r) > 1)
        note = "every split's keys proven by its own " PN_KEY_HEADER_HASH;
    c->rep->header_note = strdup(note);
    return c->rep->header_note ? PN_OK : pn_error_set(err, PN_ERR_NOMEM, "out of memory");
}

pn_status pn_check_model(pn_check_ctx *c, pn_error *err)
{
    /* keys are the first split's; a tensor's finding names its own split */
    pn_status st = gguf_model_check(c->r, add_problem, c, err);
    return st ? st : header_proof(c, err);
}
