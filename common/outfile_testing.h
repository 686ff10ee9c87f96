/* outfile_testing.h - what only the tests set on the file and folder
 * writers (outfile.h): the fallbacks of systems without O_TMPFILE,
 * renameat2 or copy_file_range, taken on demand where those work, and
 * which of them a writer took. The
 * programs never include this; they leave pn_outfile_opts.testing and
 * pn_outdir_opts.testing NULL. */
#ifndef PN_COMMON_OUTFILE_TESTING_H
#define PN_COMMON_OUTFILE_TESTING_H

#include <stdbool.h>

#include "common/outfile.h"

typedef struct pn_outfile_testing {
    /* Use the named temporary file even where O_TMPFILE works; and, with
     * it, commit without force by link() and unlink() as where
     * renameat2(RENAME_NOREPLACE) is unavailable. */
    bool named_temp;
    bool link_commit;
    /* Copy in pn_outfile_copy_from with pread and write, never
     * copy_file_range. */
    bool copy_by_read;
} pn_outfile_testing;

typedef struct pn_outdir_testing {
    bool plain_rename; /* commit as where renameat2 is missing */
} pn_outdir_testing;

/* True when the data goes to an unnamed (O_TMPFILE) file. */
bool pn_outfile_unnamed(const pn_outfile *f);
/* The named temporary file's path (fallback only), else NULL. */
const char *pn_outfile_temp_path(const pn_outfile *f);
/* The target as checked (without trailing slashes). */
const char *pn_outdir_target(const pn_outdir *d);
/* The temporary folder's path while open, else NULL. */
const char *pn_outdir_temp_path(const pn_outdir *d);

#endif
