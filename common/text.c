/* text.c - names and messages from files made safe for a terminal and for
 * JSON (see text.h). */
#include "common/text.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

size_t pn_utf8_char(const unsigned char *s, size_t n, unsigned *cp)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    unsigned min;
    if ((c & 0xe0) == 0xc0) {
        len = 2;
        min = 0x80;
        c &= 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3;
        min = 0x800;
        c &= 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4;
        min = 0x10000;
        c &= 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

static const char hex[] = "0123456789abcdef";

/* Calls put(ctx, piece, len) with the terminal form of s, piece by piece. */
typedef void (*put_fn)(void *ctx, const char *p, size_t n);

static void safe_walk(const char *s, size_t n, put_fn put, void *ctx)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned cp = 0;
        size_t len = pn_utf8_char(u + i, n - i, &cp);
        bool keep = len > 0 && ((cp >= 0x20 && cp < 0x7f) || cp >= 0xa0);
        if (keep) {
            put(ctx, s + i, len);
            i += len;
            continue;
        }
        /* one byte shown as \xNN; a C1 control's two bytes become two escapes */
        size_t k = len > 0 ? len : 1;
        for (size_t j = 0; j < k; j++) {
            char e[4] = { '\\', 'x', hex[u[i + j] >> 4], hex[u[i + j] & 15] };
            put(ctx, e, 4);
        }
        i += k;
    }
}

static void put_file(void *ctx, const char *p, size_t n)
{
    fwrite(p, 1, n, (FILE *)ctx);
}

void pn_fput_safe(FILE *f, const char *s)
{
    if (s)
        safe_walk(s, strlen(s), put_file, f);
}

typedef struct buf_ctx {
    char *buf;
    size_t cap, len;
    bool full;
} buf_ctx;

static void put_buf(void *ctx, const char *p, size_t n)
{
    buf_ctx *b = ctx;
    if (b->full)
        return;
    if (b->len + n + 4 > b->cap) { /* room for "..." and the terminator */
        b->full = true;
        return;
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}

char *pn_safe_text(const char *s, char *buf, size_t cap)
{
    if (cap == 0)
        return buf;
    buf_ctx b = { buf, cap, 0, false };
    if (cap >= 4 && s)
        safe_walk(s, strlen(s), put_buf, &b);
    if (b.full) {
        memcpy(buf + b.len, "...", 3);
        b.len += 3;
    }
    buf[b.len < cap ? b.len : cap - 1] = '\0';
    return buf;
}

void pn_json_put_strn(FILE *f, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    size_t i = 0;
    while (i < n) {
        unsigned cp = 0;
        size_t len = pn_utf8_char(u + i, n - i, &cp);
        if (len == 0) {
            fprintf(f, "\\\\x%c%c", hex[u[i] >> 4], hex[u[i] & 15]);
            i++;
        } else if (cp == '"' || cp == '\\') {
            fputc('\\', f);
            fputc((int)cp, f);
            i++;
        } else if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) {
            fprintf(f, "\\u%04x", cp);
            i += len;
        } else {
            fwrite(s + i, 1, len, f);
            i += len;
        }
    }
    fputc('"', f);
}

void pn_json_put_str(FILE *f, const char *s)
{
    pn_json_put_strn(f, s ? s : "", s ? strlen(s) : 0);
}

char *pn_next_line(pn_line_reader *lr)
{
    if (lr->pos >= lr->len)
        return NULL;
    char *s = lr->buf + lr->pos;
    char *nl = memchr(s, '\n', lr->len - lr->pos);
    size_t n = nl ? (size_t)(nl - s) : lr->len - lr->pos;
    s[n] = '\0';
    lr->pos += n + 1;
    lr->line++;
    return s;
}

int pn_split_tabs(char *s, char **f, int max)
{
    int n = 0;
    f[n++] = s;
    for (char *c = s; *c; c++) {
        if (*c == '\t') {
            *c = '\0';
            if (n == max)
                return max + 1;
            f[n++] = c + 1;
        }
    }
    return n;
}

bool pn_field_real(const char *s, double *v)
{
    if (!*s || *s == ' ' || *s == '\t')
        return false;
    char *end;
    /* ERANGE is ignored: an overflow gives inf, refused below, and an
     * underflow is the subnormal that %.17g wrote. */
    double x = strtod(s, &end);
    if (*end || !isfinite(x))
        return false;
    *v = x;
    return true;
}
