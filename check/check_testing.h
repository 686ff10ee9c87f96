/* check_testing.h - what only the tests ask of a check report (check.h): the
 * programs never include this. */
#ifndef PN_CHECK_CHECK_TESTING_H
#define PN_CHECK_CHECK_TESTING_H

#include "check/check.h"

/* The finding with this code (and tensor, when tensor is not NULL), or NULL. */
const pn_finding *pn_check_find(const pn_check_report *r, const char *code, const char *tensor);

#endif
