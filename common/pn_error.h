/* pn_error.h - the one error vocabulary of the PN toolchain.
 *
 * Contract: every library function that can fail returns a pn_status and, when
 * given a non-NULL pn_error, fills it with the code and a message that names
 * what failed (file, tensor, row, column, key or byte offset, and what was
 * expected against what was found). Library code never prints and never
 * exits; only cmd/ does. The codes are stable: append, never renumber.
 */
#ifndef PN_ERROR_H
#define PN_ERROR_H

#include <stdarg.h>

typedef enum pn_status {
    PN_OK = 0,
    PN_ERR_USAGE = 1, /* bad argument or option */
    PN_ERR_IO = 2,    /* open/read/write/mmap/rename failed */
    PN_ERR_NOMEM = 3,
    PN_ERR_NOSPACE = 4,         /* disk full (ENOSPC) or short write */
    PN_ERR_TRUNCATED = 5,       /* input ends before a structure it declares */
    PN_ERR_BAD_MAGIC = 6,       /* not a GGUF file */
    PN_ERR_VERSION = 7,         /* unsupported GGUF version or byte order */
    PN_ERR_FORMAT = 8,          /* malformed structure (counts, kv types, strings) */
    PN_ERR_ALIGNMENT = 9,       /* bad general.alignment or misaligned offset */
    PN_ERR_TENSOR = 10,         /* bad tensor info: dims, shape, overlap, duplicate */
    PN_ERR_TYPE = 11,           /* unknown or unsupported ggml type */
    PN_ERR_NONFINITE = 12,      /* NaN or infinity in a weight or a scale */
    PN_ERR_SCALE_OVERFLOW = 13, /* group too large for an fp16 scale */
    PN_ERR_RESERVED_BITS = 14,  /* pn3t reserved bit set */
    PN_ERR_CRC = 15,            /* CRC-32 mismatch */
    PN_ERR_RECIPE = 16,         /* recipe syntax or content */
    PN_ERR_UNMATCHED = 17,      /* tensor matched by no recipe rule */
    PN_ERR_EXISTS = 18,         /* output exists and --force not given */
    PN_ERR_INTERRUPTED = 19,    /* SIGINT/SIGTERM */
    PN_ERR_CUDA = 20,           /* CUDA unavailable or failed */
    PN_ERR_MISMATCH = 21,       /* data does not match what was expected */
    PN_ERR_INTERNAL = 22,
    PN_ERR_STRING_LENGTH = 23, /* a GGUF string's length that no file could hold */
    PN_ERR_COUNT_
} pn_status;

#define PN_ERROR_MSG_MAX 768

typedef struct pn_error {
    pn_status code;
    char msg[PN_ERROR_MSG_MAX];
} pn_error;

/* A short, fixed description of a code ("truncated input", ...). */
const char *pn_strerror(pn_status code);

/* Sets err (if not NULL) to code and the formatted message; returns code so a
 * caller can write `return pn_error_set(err, PN_ERR_IO, "...", ...);`. */
pn_status pn_error_set(pn_error *err, pn_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Puts "prefix: " in front of an existing message (e.g. the file name),
 * keeping the code. Returns err->code (PN_OK when err is NULL). */
pn_status pn_error_prefix(pn_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void pn_error_clear(pn_error *err);

#endif
