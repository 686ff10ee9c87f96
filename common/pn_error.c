/* pn_error.c - setting a pn_error and the fixed text of each status (see
 * pn_error.h). */
#include "common/pn_error.h"

#include <stdio.h>
#include <string.h>

static const char *const pn_status_names[PN_ERR_COUNT_] = {
    [PN_OK] = "success",
    [PN_ERR_USAGE] = "invalid usage",
    [PN_ERR_IO] = "input/output error",
    [PN_ERR_NOMEM] = "out of memory",
    [PN_ERR_NOSPACE] = "no space left on device",
    [PN_ERR_TRUNCATED] = "truncated input",
    [PN_ERR_BAD_MAGIC] = "not a GGUF file",
    [PN_ERR_VERSION] = "unsupported GGUF version",
    [PN_ERR_FORMAT] = "malformed file",
    [PN_ERR_ALIGNMENT] = "bad alignment",
    [PN_ERR_TENSOR] = "bad tensor description",
    [PN_ERR_TYPE] = "unknown or unsupported tensor type",
    [PN_ERR_NONFINITE] = "non-finite value",
    [PN_ERR_SCALE_OVERFLOW] = "group too large for an fp16 scale",
    [PN_ERR_RESERVED_BITS] = "reserved bits set",
    [PN_ERR_CRC] = "CRC-32 mismatch",
    [PN_ERR_RECIPE] = "invalid recipe",
    [PN_ERR_UNMATCHED] = "tensor matched by no recipe rule",
    [PN_ERR_EXISTS] = "output exists",
    [PN_ERR_INTERRUPTED] = "interrupted",
    [PN_ERR_CUDA] = "CUDA error",
    [PN_ERR_MISMATCH] = "data mismatch",
    [PN_ERR_INTERNAL] = "internal error",
    [PN_ERR_STRING_LENGTH] = "damaged string length",
};

const char *pn_strerror(pn_status code)
{
    if ((int)code < 0 || code >= PN_ERR_COUNT_ || !pn_status_names[code])
        return "unknown error";
    return pn_status_names[code];
}

pn_status pn_error_set(pn_error *err, pn_status code, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

pn_status pn_error_prefix(pn_error *err, const char *fmt, ...)
{
    if (!err)
        return PN_OK;
    char prefix[PN_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Built by hand: the message is cut, never overflowed, when too long. */
    char old[PN_ERROR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    size_t cap = sizeof err->msg - 1, n = 0;
    for (const char *parts[3] = { prefix, ": ", old }, **p = parts; p < parts + 3; p++)
        for (const char *c = *p; *c && n < cap; c++)
            err->msg[n++] = *c;
    err->msg[n] = '\0';
    return err->code;
}

void pn_error_clear(pn_error *err)
{
    if (err) {
        err->code = PN_OK;
        err->msg[0] = '\0';
    }
}
