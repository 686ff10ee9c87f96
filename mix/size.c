/* size.c - parsing byte sizes as a user writes them ("12.5GiB") (see size.h). */
#include "mix/size.h"

#include <string.h>

__extension__ typedef unsigned __int128 u128;

static const struct {
    const char *name;
    uint64_t mult;
} units[] = {
    { "", 1 },
    { "B", 1 },
    { "kB", 1000ull },
    { "KB", 1000ull },
    { "MB", 1000000ull },
    { "GB", 1000000000ull },
    { "TB", 1000000000000ull },
    { "k", 1000ull },
    { "K", 1000ull },
    { "M", 1000000ull },
    { "G", 1000000000ull },
    { "T", 1000000000000ull },
    { "KiB", 1ull << 10 },
    { "MiB", 1ull << 20 },
    { "GiB", 1ull << 30 },
    { "TiB", 1ull << 40 },
};

/* Keeps every product below 2^128: 10^20 * 10^19 * 2^40 < 2^127. */
#define MAX_DIGITS 20
#define MAX_EXPONENT 19

pn_status pn_parse_size(const char *text, uint64_t *bytes, pn_error *err)
{
    const char *s = text;
    u128 whole = 0, frac = 0, frac_scale = 1;
    int n_int = 0, n_frac = 0;
    while (*s >= '0' && *s <= '9') {
        if (++n_int > MAX_DIGITS)
            goto junk;
        whole = whole * 10 + (u128)(*s - '0');
        s++;
    }
    if (*s == '.') {
        s++;
        while (*s >= '0' && *s <= '9') {
            if (++n_frac > MAX_DIGITS)
                goto junk;
            frac = frac * 10 + (u128)(*s - '0');
            frac_scale *= 10;
            s++;
        }
        if (n_frac == 0)
            goto junk;
    }
    if (n_int == 0)
        goto junk;
    u128 scale = 1;
    if (*s == 'e') {
        s++;
        int exp = 0, n_exp = 0;
        while (*s >= '0' && *s <= '9') {
            exp = exp * 10 + (*s - '0');
            if (++n_exp > 2 || exp > MAX_EXPONENT)
                goto junk;
            s++;
        }
        if (n_exp == 0)
            goto junk;
        while (exp-- > 0)
            scale *= 10;
    }
    if (*s == ' ')
        s++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(s, units[i].name) != 0)
            continue;
        if (*s == '\0' && s > text && s[-1] == ' ')
            goto junk; /* "12 " with no unit */
        u128 v = whole * scale * units[i].mult + frac * scale * units[i].mult / frac_scale;
        if (whole > (u128)UINT64_MAX || v > (u128)UINT64_MAX)
            return pn_error_set(err, PN_ERR_USAGE, "size '%s' is larger than %llu bytes", text,
                                (unsigned long long)UINT64_MAX);
        *bytes = (uint64_t)v;
        return PN_OK;
    }
junk:
    return pn_error_set(err, PN_ERR_USAGE,
                        "expected a size such as 13000000000, 13e9, 12.5GiB, 13GB or 50G (units "
                        "B; kB, MB, GB, TB and k, M, G, T = powers of 1000; KiB, MiB, GiB, TiB = "
                        "powers of 1024), found '%s'",
                        text);
}
