/* threads.h - the one default for how many threads a job uses.
 *
 * Every job takes a thread count in its options; 0 (or less) means "all the
 * cores this process may run on" (OpenMP's omp_get_num_procs, which honours
 * the CPU affinity mask). The environment is not read here: a program may
 * turn OMP_NUM_THREADS or its own flag into an explicit count.
 */
#ifndef PN_COMMON_THREADS_H
#define PN_COMMON_THREADS_H

int pn_threads_resolve(int requested);

#endif
