/* check_meta.c - pn-check: the pn.* keys (docs/format.md#the-output-file).
 *
 * A key that is absent is a warning (a file made by another tool may lack
 * it); a key that is present with another type, or whose value contradicts
 * the format or the tensors, is an error. The stage also settles what the data
 * pass needs: the rotation to undo and the recorded CRCs.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hadamard/hadamard.h"
#include "check/check_internal.h"
#include "gguf/gguf_split.h"
#include "gguf/header_hash.h"
#include "gguf/pn_keys.h"
#include "quant/types.h"

typedef struct key_rule {
    const char *key;
    gguf_value_type type;
    gguf_value_type arr_type; /* for arrays */
} key_rule;

static const key_rule key_rules[] = {
    { PN_KEY_FORMAT, GGUF_TYPE_STRING, GGUF_TYPE_COUNT_ },
    { PN_KEY_MIX, GGUF_TYPE_STRING, GGUF_TYPE_COUNT_ },
    { PN_KEY_MIX_PROMOTED, GGUF_TYPE_ARRAY, GGUF_TYPE_STRING },
    { PN_KEY_ROTATION_TYPE, GGUF_TYPE_STRING, GGUF_TYPE_COUNT_ },
    { PN_KEY_ROTATION_BLOCK_SIZE, GGUF_TYPE_UINT32, GGUF_TYPE_COUNT_ },
    { PN_KEY_TENSOR_CRC, GGUF_TYPE_ARRAY, GGUF_TYPE_UINT32 },
    { PN_KEY_QUANTIZER, GGUF_TYPE_STRING, GGUF_TYPE_COUNT_ },
    /* optional, checked by check_source.c */
    { PN_KEY_SOURCE_HEADER, GGUF_TYPE_UINT64, GGUF_TYPE_COUNT_ },
    { PN_KEY_SOURCE_SAMPLE_ROWS, GGUF_TYPE_UINT32, GGUF_TYPE_COUNT_ },
    { PN_KEY_SOURCE_SAMPLE_CRC, GGUF_TYPE_ARRAY, GGUF_TYPE_UINT32 },
    { PN_KEY_SOURCE_TENSOR_CRC, GGUF_TYPE_ARRAY, GGUF_TYPE_UINT32 },
    { PN_KEY_SOURCE_TYPE, GGUF_TYPE_ARRAY, GGUF_TYPE_UINT32 },
    /* optional, checked by check_imatrix.c with --imatrix */
    { PN_KEY_MIX_IMATRIX_HASH, GGUF_TYPE_UINT64, GGUF_TYPE_COUNT_ },
    { PN_KEY_MIX_IMATRIX_USED, GGUF_TYPE_UINT32, GGUF_TYPE_COUNT_ },
    { PN_KEY_MIX_IMATRIX_PROMOTION, GGUF_TYPE_STRING, GGUF_TYPE_COUNT_ },
    /* optional, checked by check_recipe.c (pn-quantize --tensor-type ...) */
    { PN_KEY_MIX_OVERRIDES, GGUF_TYPE_ARRAY, GGUF_TYPE_STRING },
    /* optional, the header hash: checked by the model check (gguf/header_hash.h) */
    { PN_KEY_HEADER_KEYS, GGUF_TYPE_ARRAY, GGUF_TYPE_STRING },
    { PN_KEY_HEADER_VALUES, GGUF_TYPE_ARRAY, GGUF_TYPE_UINT64 },
    { PN_KEY_HEADER_TENSORS, GGUF_TYPE_UINT64, GGUF_TYPE_COUNT_ },
    { PN_KEY_HEADER_HASH, GGUF_TYPE_UINT64, GGUF_TYPE_COUNT_ },
};
#define N_KEY_RULES (sizeof key_rules / sizeof key_rules[0])

static const char *type_desc(gguf_value_type t, gguf_value_type at, char *buf, size_t n)
{
    if (t == GGUF_TYPE_ARRAY)
        snprintf(buf, n, "array of %s", gguf_value_type_name(at));
    else
        snprintf(buf, n, "%s", gguf_value_type_name(t));
    return buf;
}

static bool is_unsigned_int(gguf_value_type t)
{
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

static bool is_signed_int(gguf_value_type t)
{
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

/* The key of file r if present with the rule's type; NULL otherwise
 * (absence is a warning, another type an error; both are recorded here). */
static const gguf_kv *typed_key_of(pn_check_ctx *c, const gguf_reader *r, const key_rule *k,
                                   const gguf_kv **raw)
{
    const gguf_kv *kv = gguf_reader_find_kv(r, k->key);
    *raw = kv;
    if (!kv) {
        pn_check_add(c, PN_SEV_WARNING, "PN-META-MISSING", NULL, k->key, -1, "key %s is absent",
                     k->key);
        return NULL;
    }
    bool ok = kv->type == k->type && (k->type != GGUF_TYPE_ARRAY || kv->arr_type == k->arr_type);
    if (!ok) {
        char want[64], got[64];
        pn_check_add(c, PN_SEV_ERROR, "PN-META-TYPE", NULL, k->key, -1,
                     "key %s has type %s, expected %s", k->key,
                     type_desc(kv->type, kv->arr_type, got, sizeof got),
                     type_desc(k->type, k->arr_type, want, sizeof want));
        return NULL;
    }
    return kv;
}

/* The same in the file's keys (a set's: its first split's). */
static const gguf_kv *typed_key(pn_check_ctx *c, const key_rule *k, const gguf_kv **raw)
{
    return typed_key_of(c, c->r, k, raw);
}

static bool has_pn_keys(const gguf_reader *r)
{
    for (size_t i = 0; i < gguf_reader_n_kv(r); i++) {
        gguf_str k = gguf_reader_kv(r, i)->key;
        /* a split set's identity is any split set's, not a PN key */
        /* nor is the header hash, which any file we write records */
        if (k.len >= PN_KEY_PREFIX_LEN && memcmp(k.data, PN_KEY_PREFIX, PN_KEY_PREFIX_LEN) == 0 &&
            !gguf_str_eq(k, GGUF_SPLIT_KEY_SET_ID) && !gguf_header_hash_is_record_key(k))
            return true;
    }
    return false;
}

static void check_unknown_keys(pn_check_ctx *c)
{
    for (size_t i = 0; i < gguf_reader_n_kv(c->r); i++) {
        gguf_str k = gguf_reader_kv(c->r, i)->key;
        if (k.len < PN_KEY_PREFIX_LEN || memcmp(k.data, PN_KEY_PREFIX, PN_KEY_PREFIX_LEN) != 0)
            continue;
        bool known = gguf_str_eq(k, GGUF_SPLIT_KEY_SET_ID); /* docs/split.md */
        for (size_t j = 0; j < N_KEY_RULES && !known; j++)
            known = gguf_str_eq(k, key_rules[j].key);
        if (known)
            continue;
        char *name = pn_check_strdup_gguf(k);
        if (!name) {
            c->nomem = true;
            return;
        }
        pn_check_add(c, PN_SEV_WARNING, "PN-META-UNKNOWN", NULL, name, -1,
                     "key %s is not one of the " PN_FORMAT_NAME " keys", name);
        free(name);
    }
}

static void check_rotation(pn_check_ctx *c)
{
    const gguf_kv *raw;
    c->rotation_hadamard = false;
    c->rotation_known = true;
    c->rotation_cap = PN_HADAMARD_DEFAULT_CAP;

    const gguf_kv *type = typed_key(c, &key_rules[3], &raw);
    if (type) {
        if (gguf_str_eq(type->v.str, "hadamard")) {
            c->rotation_hadamard = true;
        } else if (!gguf_str_eq(type->v.str, "none")) {
            c->rotation_known = false;
            pn_check_add(c, PN_SEV_ERROR, "PN-META-VALUE", NULL, PN_KEY_ROTATION_TYPE, -1,
                         PN_KEY_ROTATION_TYPE " is \"%.*s\", expected \"hadamard\" or \"none\"",
                         (int)(type->v.str.len > 64 ? 64 : type->v.str.len), type->v.str.data);
        }
    } else if (raw) {
        c->rotation_known = false;
    }

    const gguf_kv *bs = typed_key(c, &key_rules[4], &raw);
    /* A cap stored with another integer type is still meaningful for the
     * comparison with the source; the type itself is reported above. */
    if (!bs && raw && (is_unsigned_int(raw->type) || is_signed_int(raw->type)))
        bs = raw;
    if (bs) {
        int64_t v = is_signed_int(bs->type) ? bs->v.i64 : (int64_t)(bs->v.u64 & INT64_MAX);
        if (is_unsigned_int(bs->type) && bs->v.u64 > INT64_MAX)
            v = -1;
        if (v < 1 || v > PN_HADAMARD_MAX_BLOCK || !pn_is_pow2(v)) {
            pn_check_add(c, PN_SEV_ERROR, "PN-META-VALUE", NULL, PN_KEY_ROTATION_BLOCK_SIZE, -1,
                         PN_KEY_ROTATION_BLOCK_SIZE " is %" PRId64
                                                    ", expected a power of two from 1 to %d",
                         v, PN_HADAMARD_MAX_BLOCK);
            if (c->rotation_hadamard)
                c->rotation_known = false;
        } else {
            c->rotation_cap = (int)v;
        }
    } else if (raw && c->rotation_hadamard) {
        c->rotation_known = false;
    }
}

/* pn.tensor_crc32: one per tensor of the file. In a split set every split
 * records its own tensors' (docs/split.md), so each split is checked
 * against its own key, and its findings name that split. */
static void check_crc_key(pn_check_ctx *c)
{
    const size_t n_splits = gguf_reader_n_splits(c->r);
    c->crc_kv = NULL;
    for (size_t s = 0; s < n_splits; s++) {
        const gguf_reader *sr = gguf_reader_split(c->r, s);
        const size_t lo = gguf_reader_split_first(c->r, s);
        const size_t n = gguf_reader_split_first(c->r, s + 1) - lo;
        const gguf_kv *raw;
        c->finding_file = gguf_reader_name(sr);
        const gguf_kv *kv = typed_key_of(c, sr, &key_rules[5], &raw);
        if (kv && kv->arr_count != n)
            pn_check_add(c, PN_SEV_ERROR, "PN-META-VALUE", NULL, PN_KEY_TENSOR_CRC, -1,
                         PN_KEY_TENSOR_CRC " has %" PRIu64 " entries for %zu tensors%s",
                         kv->arr_count, n, n_splits > 1 ? " of this split" : "");
        c->finding_file = NULL;
        if (!kv || kv->arr_count != n)
            continue;
        if (n_splits == 1)
            c->crc_kv = kv;
        for (size_t j = 0; j < n; j++) {
            c->rep->tensors[lo + j].crc_recorded = true;
            c->rep->tensors[lo + j].crc32_recorded = (uint32_t)gguf_kv_arr_u64(kv, j);
        }
    }
}

/* Compares the digits m[0..n) with v exactly, whatever their number: a
 * count too large for 64 bits is a mismatch. */
static bool digits_equal(const char *m, uint64_t n, uint64_t v)
{
    uint64_t x = 0;
    for (uint64_t i = 0; i < n; i++)
        if (__builtin_mul_overflow(x, 10, &x) ||
            __builtin_add_overflow(x, (uint64_t)(m[i] - '0'), &x))
            return false;
    return x == v;
}

/* pn.mix.promoted: names that exist, are pn4t, once each; and the "+N" of
 * pn.mix, when it has one, equal to their number. One walk over the array
 * (each name looked up by binary search): a tensor named twice or more gets
 * one finding with the count, as does a tensor that is not pn4t; each name
 * the file does not hold gets its own. */
static void check_promoted(pn_check_ctx *c, const gguf_kv *mix)
{
    const gguf_kv *raw;
    const gguf_kv *kv = typed_key(c, &key_rules[2], &raw);
    if (!kv)
        return;
    const size_t nt = c->rep->n_tensors;
    uint64_t *times = calloc(nt ? nt : 1, sizeof *times);
    uint64_t *first = calloc(nt ? nt : 1, sizeof *first);
    if (!times || !first) {
        free(times);
        free(first);
        c->nomem = true;
        return;
    }
    pn_str_walk walk = pn_str_walk_start(kv);
    for (uint64_t i = 0; i < kv->arr_count && !c->nomem; i++) {
        gguf_str s = pn_str_walk_next(&walk);
        char *name = pn_check_strdup_gguf(s);
        if (!name) {
            c->nomem = true;
            break;
        }
        /* a name holding a NUL is no tensor name (the reader refuses those) */
        long ti = strlen(name) == s.len ? gguf_reader_find_tensor(c->r, name) : -1;
        if (ti < 0) {
            pn_check_add(c, PN_SEV_ERROR, "PN-META-VALUE", name, PN_KEY_MIX_PROMOTED, -1,
                         PN_KEY_MIX_PROMOTED " entry %" PRIu64 " names tensor '%s', which the file "
                                             "does not hold",
                         i, name);
        } else {
            if (times[ti]++ == 0)
                first[ti] = i;
        }
        free(name);
    }
    for (size_t ti = 0; ti < nt && !c->nomem; ti++) {
        const pn_check_tensor *t = &c->rep->tensors[ti];
        if (times[ti] > 1) {
            pn_finding *f =
                pn_check_add(c, PN_SEV_ERROR, "PN-META-VALUE", t->name, PN_KEY_MIX_PROMOTED, -1,
                             PN_KEY_MIX_PROMOTED " names tensor '%s' %" PRIu64
                                                 " times (first at entry %" PRIu64 "), not once",
                             t->name, times[ti], first[ti]);
            if (f)
                f->count = (int64_t)times[ti];
        }
        if (times[ti] > 0 && t->type != PN_TYPE_PN4T) {
            const pn_type_traits *tt = pn_type_traits_get(t->type);
            pn_check_add(c, PN_SEV_ERROR, "PN-META-VALUE", t->name, PN_KEY_MIX_PROMOTED, -1,
                         PN_KEY_MIX_PROMOTED " names tensor '%s', whose type is %s, not pn4t",
                         t->name, tt ? tt->name : "?");
        }
    }
    free(times);
    free(first);

    if (!mix)
        return;
    /* "<name>+<N>": the digits after the last '+'. */
    const char *m = mix->v.str.data;
    uint64_t len = mix->v.str.len, plus = len;
    for (uint64_t i = len; i-- > 0;)
        if (m[i] == '+') {
            plus = i;
            break;
        }
    if (plus >= len || plus + 1 == len)
        return;
    for (uint64_t i = plus + 1; i < len; i++)
        if (m[i] < '0' || m[i] > '9')
            return;
    if (!digits_equal(m + plus + 1, len - plus - 1, kv->arr_count))
        pn_check_add(c, PN_SEV_ERROR, "PN-META-VALUE", NULL, PN_KEY_MIX, -1,
                     PN_KEY_MIX " \"%.*s\" says %.*s promotions but pn.mix.promoted lists %" PRIu64,
                     (int)(len > 64 ? 64 : len), m,
                     (int)(len - plus - 1 > 40 ? 40 : len - plus - 1), m + plus + 1, kv->arr_count);
}

pn_status pn_check_metadata(pn_check_ctx *c, pn_error *err)
{
    (void)err;
    const gguf_kv *raw;
    size_t n_pn = 0;
    for (size_t i = 0; i < c->rep->n_tensors; i++)
        n_pn += pn_type_is_pn(c->rep->tensors[i].type);

    c->rotation_hadamard = false;
    c->rotation_known = true;
    c->rotation_cap = PN_HADAMARD_DEFAULT_CAP;
    if (n_pn == 0 && !has_pn_keys(c->r)) {
        pn_check_add(c, PN_SEV_WARNING, "PN-META-MISSING", NULL, PN_KEY_PREFIX "*", -1,
                     "no pn.* keys and no PN tensors: not a PN file");
        return PN_OK;
    }

    const gguf_kv *fmt = typed_key(c, &key_rules[0], &raw);
    if (fmt && !gguf_str_eq(fmt->v.str, PN_FORMAT_NAME))
        pn_check_add(c, PN_SEV_ERROR, "PN-META-VALUE", NULL, PN_KEY_FORMAT, -1,
                     PN_KEY_FORMAT " is \"%.*s\", expected \"" PN_FORMAT_NAME "\"",
                     (int)(fmt->v.str.len > 64 ? 64 : fmt->v.str.len), fmt->v.str.data);
    const gguf_kv *mix = typed_key(c, &key_rules[1], &raw);
    check_promoted(c, mix);
    check_rotation(c);
    check_crc_key(c);
    typed_key(c, &key_rules[6], &raw);
    pn_check_source_keys(c);
    check_unknown_keys(c);
    return PN_OK;
}
