/* promote_score.c - the cheap promotion order (promote_score.h). */
#include "mix/promote_score.h"

#include <math.h>
#include <string.h>

int64_t pn_promote_block(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0)
        return -1;
    int64_t n = 0;
    int digits = 0;
    const char *p = name + 4;
    while (*p >= '0' && *p <= '9' && digits < 10) {
        n = n * 10 + (*p - '0');
        p++;
        digits++;
    }
    /* "blk." then 1..9 digits then '.': anything else is no block number */
    if (digits == 0 || digits > 9 || *p != '.')
        return -1;
    return n;
}

/* The role: what follows "blk.N." up to the next '.', compared whole. */
static int role_is(const char *role, size_t len, const char *const *names)
{
    for (; *names; names++)
        if (strlen(*names) == len && memcmp(role, *names, len) == 0)
            return 1;
    return 0;
}

int pn_promote_stage(const char *name)
{
    static const char *const input[] = { "attn_qkv", "attn_q", "attn_k", "attn_v", NULL };
    static const char *const gate[] = { "attn_gate", NULL };
    static const char *const out[] = { "attn_output", "ssm_out", NULL };
    static const char *const ffn_gate[] = { "ffn_gate", "ffn_gate_exps", "ffn_gate_shexp", NULL };
    static const char *const ffn_up[] = { "ffn_up", "ffn_up_exps", "ffn_up_shexp", NULL };
    static const char *const ffn_down[] = { "ffn_down", "ffn_down_exps", "ffn_down_shexp", NULL };
    static const char *const *const stages[] = { input, gate, out, ffn_gate, ffn_up, ffn_down };
    if (pn_promote_block(name) < 0)
        return 6;
    const char *role = strchr(name + 4, '.') + 1;
    const char *end = strchr(role, '.');
    const size_t len = end ? (size_t)(end - role) : strlen(role);
    for (int s = 0; s < (int)(sizeof stages / sizeof stages[0]); s++)
        if (role_is(role, len, stages[s]))
            return s;
    return 6;
}

double pn_promote_position(const char *name)
{
    const int64_t block = pn_promote_block(name);
    return (double)PN_SCORE_STAGES * (double)(block > 0 ? block : 0) +
           (double)pn_promote_stage(name);
}

double pn_promote_score(const pn_promote_cand *c)
{
    const double gain = c->e3 - c->e4;
    if (!(gain > 0.0))
        return -INFINITY;
    return log(gain) - pn_promote_position(c->name) * log(2.0);
}
