/* libFuzzer target: the KL measurement's file (compare/kl_measure.h) read
 * from arbitrary bytes, and an accepted one checked against itself and turned
 * into the order promotion takes. */
#include <stddef.h>
#include <stdint.h>

#include "compare/kl_measure.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pn_kl_measurement *m = NULL;
    pn_error err;
    if (pn_kl_parse((const char *)data, size, "fuzz", &m, &err) != PN_OK)
        return 0;
    (void)pn_kl_params_check(&m->params, &m->params, "fuzz", &err);
    pn_measurement *as = NULL;
    if (pn_kl_as_measurement(m, true, &as, &err) == PN_OK)
        pn_measurement_free(as);
    pn_kl_measurement_free(m);
    return 0;
}
