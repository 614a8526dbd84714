/* The MPI layer's internal interface (src/dist/mpi.c) for the stages above the runtime: what
 * the notation needs to run one script on every rank. The public functions are cn_dist_* in
 * include/cannl.h; nothing here needs <mpi.h>. */
#ifndef CN_DIST_H
#define CN_DIST_H

#include "core/core.h"

/* After rank 0 alone did something (wrote a checkpoint) with result `status`: every rank waits
 * for rank 0's status (a bounded wait), so a file rank 0 wrote is complete when any rank reads
 * it. Rank 0 returns its status; the others CN_OK or, when rank 0 failed, that status with a
 * message saying so. Without MPI, or before cn_dist_init, returns status. */
cn_status cn_dist_root_status(cn_ctx *ctx, cn_status status, const char *what);
/* Whether this process writes the files a script writes: rank 0, or any process without MPI. */
bool cn_dist_writes_files(void);

/* cn_dist_check_routines where this rank may already have failed: with `local` not CN_OK (the
 * message is the context's) the rank sends that message instead of its routines, so that every
 * rank fails with it at once instead of waiting for this rank until the timeout. Collective. */
cn_status cn_dist_check_routines_after(cn_ctx *ctx, cn_status local, int n,
                                       cn_routine *const *routines);
/* Collective: each rank's n hashes (of the bits of the things names[k] names) against rank 0's.
 * CN_ERR_RUNTIME on every rank at the first k, then the first rank, where they differ: "CALLER:
 * NOUN 'NAME' differs between rank 0 and rank R of N". A rank whose `local` is not CN_OK (its
 * message in its context) keeps that status, the others fail saying which rank failed. Without
 * MPI or on one rank, returns local. */
cn_status cn_dist_compare_hashes(cn_ctx *ctx, cn_status local, int n, const uint64_t *hashes,
                                 const char *const *names, const char *caller, const char *noun);

#endif
