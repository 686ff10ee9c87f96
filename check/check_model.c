/* check_model.c - the header against the tensors and the tokenizer, as stock
 * llama.cpp loads them: gguf/model_check.h's check (the one every decoder
 * runs before it decodes), each problem a finding. */
#include <stdio.h>

#include "gguf/model_check.h"
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
}

pn_status pn_check_model(pn_check_ctx *c, pn_error *err)
{
    /* keys are the first split's; a tensor's finding names its own split */
    return gguf_model_check(c->r, add_problem, c, err);
}
