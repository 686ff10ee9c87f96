/* size.h - byte sizes as a user writes them ("12.5GiB", "13GB", "4096").
 *
 * Grammar: <digits>[.<digits>][ ][<unit>]
 *   no unit or B  bytes
 *   kB KB MB GB TB         powers of 1000 (k may be either case)
 *   KiB MiB GiB TiB        powers of 1024
 * A fraction is exact (decimal, no floating point) and the result is
 * rounded down to whole bytes. Anything else - signs, exponents, other
 * units, trailing text, a value above UINT64_MAX - is PN_ERR_USAGE quoting
 * the input.
 */
#ifndef PN_MIX_SIZE_H
#define PN_MIX_SIZE_H

#include <stdint.h>

#include "common/pn_error.h"

pn_status pn_parse_size(const char *text, uint64_t *bytes, pn_error *err);

#endif
