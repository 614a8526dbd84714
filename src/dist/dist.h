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

#endif
