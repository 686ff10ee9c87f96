/* The overlapped pn-quantize pipeline: chunks of whole blocks,
 * fused error sums, CRCs per piece, the measurement stream and the parallel
 * validation give figures and bytes that do not depend on the thread count
 * or the chunk size, and equal the separate-pass references computed here.
 *
 * Here the tests that run the built programs; those that call the library
 * are in tests/pipeline/test_pipeline.c. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "gguf/gguf.h"
#include "hadamard/hadamard.h"
#include "io/source_id.h"
#include "mix/measurement.h"
#include "pipeline/measure_job.h"
#include "quant/quant_row.h"
#include "pipeline/quantize.h"
#include "pipeline/quantize_testing.h"
#include "pipeline/tensor_job.h"
#include "quant/fp16.h"
#include "quant/kquants.h"
#include "quant/pn.h"
#include "quant/pn_cuda.h"
#include "quant/types.h"
#include "quant/widen.h"
#include "fixtures/pn_source.h"
#include "fixtures/scratch.h"
#include "test_util.h"


/* ---- memory bounded by the chunk, whatever K ----------------------------- */

Test(pipeline, a_1d_tensor_of_2_24_weights_is_quantized_in_far_less_memory_than_its_row,
     .init = setup, .fini = teardown)
{
    static const sf_spec big[] = { { "big.weight", 1, (int64_t)1 << 24, 1, PN_TYPE_F32 } };
    static const char recipe_text[] = "mix B\nrotation hadamard 1024\nrule dims=1 => q8_0\n";
    char *src = path_in("src.gguf"), *recipe = path_in("r.mix"), *dst = path_in("dst.gguf");
    sf_write_model(src, big, 1, 9);
    cr_assert_eq(tu_write_file(recipe, recipe_text, strlen(recipe_text)), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        tu_child_output_to_devnull();
        setenv("PN_CHUNK_WEIGHTS", "65536", 1);
        execl(PN_BIN_DIR "/pn-quantize", "pn-quantize", "--quiet", "--threads", "2", "--recipe",
              recipe, src, dst, (char *)NULL);
        _exit(127);
    }
    int status;
    struct rusage ru;
    cr_assert_eq(wait4(pid, &status, 0, &ru), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d", status);
    /* the row alone is 64 MiB (source and floats alike); buffers sized by
     * the row (source, floats, output) took 145 MiB. AddressSanitizer's
     * shadow and quarantine add their share, so its bound is looser, yet
     * still below what row-sized buffers alone need. */
#if defined(__SANITIZE_ADDRESS__)
    const long bound_mb = 120;
#else
    const long bound_mb = 40;
#endif
    long peak_mb = ru.ru_maxrss / 1024;
    cr_assert_lt(peak_mb, bound_mb, "peak RSS %ld MB for a 64 MiB row", peak_mb);
    struct stat sb;
    cr_assert_eq(stat(dst, &sb), 0);
    cr_assert_gt(sb.st_size, ((off_t)1 << 24) / 32 * 34);
    free(src);
    free(recipe);
    free(dst);
}
