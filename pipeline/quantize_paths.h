/* quantize_paths.h - the paths of a pn-quantize run, checked before any work
 * (pipeline/quantize.c calls them): SRC, DST and the measurement file, none
 * taking another's place, and the file name a folder DST gets once the plan
 * names the mix. Each error names the path; nothing here writes. */
#ifndef PN_PIPELINE_QUANTIZE_PATHS_H
#define PN_PIPELINE_QUANTIZE_PATHS_H

#include <stdbool.h>
#include <sys/stat.h>

#include "common/pn_error.h"
#include "gguf/gguf.h"
#include "pipeline/quantize.h"

/* The output is planned as a split set (a plan of one split is still DST
 * itself). */
bool pn_quantize_split_output(const pn_quantize_opts *o);

/* path names a folder (false for NULL). */
bool pn_quantize_is_folder(const char *path);

/* SRC is there (its stat into *ss), --backend cuda has a CUDA build, the
 * measurement file's folder is there, and DST can be written: its folder
 * there, not the source, not the --imatrix file, not present without
 * --force. A folder DST or a split set's is checked later, by name. */
pn_status pn_quantize_check_paths(const pn_quantize_opts *o, struct stat *ss, pn_error *err);

/* DST a folder: the output is <general.name>-<pn.mix>.gguf in it, spaces
 * made '-' as llama.cpp's converter names files (the
 * source's file name, less .gguf, where it has no general.name), any '/'
 * or control byte of the name made '-'. *out is malloc'd. */
pn_status pn_quantize_dst_in_folder(const char *folder, const gguf_reader *src,
                                    const char *src_path, const char *mix_label, char **out,
                                    pn_error *err);

/* --measurement FILE is read when it is there and written when it is not:
 * it may not be the source (or a split of it), DST or a file of the output
 * set, or the --reuse file, whose places it would take. */
pn_status pn_quantize_check_measurement_path(const pn_quantize_opts *o, const gguf_reader *src,
                                             pn_error *err);

#endif
