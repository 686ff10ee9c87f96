/* size.h - byte sizes as a user writes them ("12.5GiB", "13GB", "50G",
 * "13e9", "4096"): the one parser of every size option of every program
 * (--split-max-size, --target-size, --shard-size; docs/usage.md#sizes).
 *
 * Grammar: <digits>[.<digits>][e<digits>][ ][<unit>]
 *   no unit or B           bytes
 *   kB KB MB GB TB         powers of 1000 (k may be either case)
 *   k K M G T              the same: gguf-split's 500M and 50G (10^6, 10^9)
 *   KiB MiB GiB TiB        powers of 1024
 *   e<N>                   times 10^N (N 0..19): 13e9 is 13 GB
 * A fraction is exact (decimal, no floating point) and the result is
 * rounded down to whole bytes (gguf-split itself cuts "1.5G" to 1G; here
 * it is 1.5 GB). Anything else - signs, negative exponents, other units,
 * trailing text, a value above UINT64_MAX - is PN_ERR_USAGE quoting the
 * input.
 */
#ifndef PN_MIX_SIZE_H
#define PN_MIX_SIZE_H

#include <stdint.h>

#include "common/pn_error.h"

pn_status pn_parse_size(const char *text, uint64_t *bytes, pn_error *err);

#endif
