/* pn-synth --profile trained (synth/synth.h): its statistics, measured on
 * the tensors it writes, against the published figures they are taken from
 * (docs/usage.md#the-trained-profile), within the tolerances stated here;
 * the default profile unchanged; stock llama.cpp runs it in both forms.
 *
 * Activations: a matrix's input is a norm's output, gain x hidden / rms. The
 * outlier-channel test feeds the generated gains with hidden states drawn
 * here, N(0, I) (tu_rng, not the generator's), and measures the channels of
 * what reaches the matrices; it says nothing about the hidden states
 * llama.cpp computes, which a generated model has no reason to make
 * realistic (that is why the profile puts the outliers in the gains).
 *
 * Here the tests that call the library; those that run the built programs
 * are in tests/programs/test_synth_profile_cli.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/fp16.h"
#include "quant/types.h"
#include "fixtures/scratch.h"
#include "fixtures/weibull_fit.h"
#include "synth/synth.h"
#include "test_util.h"

/* ---- the profile's figures ---- */

Test(synth_profile, the_fit_gives_the_published_anchor_for_gaussian_weights)
{
    /* Ding (2026): i.i.d. Gaussian weights give k of about 1.20 */
    tu_rng rng = { 7 };
    size_t n = 400000;
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)tu_rng_gauss(&rng);
    double k = synth_weibull_shape(v, n);
    cr_log_info("Weibull shape of N(0,1): %.4f", k);
    cr_assert(fabs(k - 1.20) < 0.01, "k %.4f", k);
    free(v);
}
