/* mix/name_index.h: names to indices in constant time, duplicates refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mix/name_index.h"

Test(name_index, finds_every_name_put_and_refuses_a_second_one_with_the_first_value)
{
    enum { N = 100000 };
    char(*names)[24] = malloc(sizeof(*names) * N);
    pn_name_index *x = pn_name_index_new(16); /* grows past its first size */
    cr_assert_not_null(x);
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "blk.%zu.ffn_up.weight", i);
        cr_assert(pn_name_index_put(x, names[i], i, NULL));
    }
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(pn_name_index_get(x, names[i]), (long)i);
    cr_assert_eq(pn_name_index_get(x, "blk.100000.ffn_up.weight"), -1);
    cr_assert_eq(pn_name_index_get(x, ""), -1);
    size_t old = 0;
    char again[24];
    strcpy(again, names[4242]);
    cr_assert(!pn_name_index_put(x, again, 7, &old));
    cr_assert_eq(old, 4242);
    cr_assert_eq(pn_name_index_get(x, again), 4242);
    pn_name_index_free(x);
    free(names);
}
