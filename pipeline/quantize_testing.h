/* quantize_testing.h - what only the tests set on a quantize job
 * (pn_quantize_opts.testing): the programs never include this and leave
 * that pointer NULL. */
#ifndef PN_PIPELINE_QUANTIZE_TESTING_H
#define PN_PIPELINE_QUANTIZE_TESTING_H

#include <stdint.h>

#include "pipeline/quantize.h"

typedef struct pn_quantize_testing {
    /* pn.quantizer instead of "pn-quantize <version>" (an older or another
     * quantizer's file, for reuse); NULL: that */
    const char *quantizer_name;
    /* how far behind the writer the output leaves the page cache and is
     * read back (pipeline/readback.h); 0: 128 MiB */
    uint64_t drop_behind_bytes;
} pn_quantize_testing;

#endif
