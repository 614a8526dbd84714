/* The driver side of the tests that launch themselves under mpirun (test_mpi, test_mpi_dp):
 * CANNL_MPIEXEC (the mpirun CMake found) with the flags Open MPI needs to run as root, with more
 * ranks than cores, on loopback only; the comparison of the hashes the ranks print; and a rank's
 * start (its context, MPI initialized). */
#ifndef CANNL_TEST_MPI_LAUNCH_H
#define CANNL_TEST_MPI_LAUNCH_H

#include "cannl.h"

#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

/* Runs `mpirun -np ranks SELF --rank scenario` (scenario NULL: the command self) bounded by
 * timeout(1) at 90 s, its output in out; returns the exit status and the seconds it took. */
static inline int mpi_launch(const char *self, int ranks, const char *scenario, const char *env,
                             char *out, size_t cap, double *seconds) {
  const char *mpiexec = getenv("CANNL_MPIEXEC");
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "%s timeout 90 %s --allow-run-as-root --oversubscribe --mca btl self,vader,tcp "
           "--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np %d %s%s%s 2>&1",
           env, mpiexec, ranks, self, scenario ? " --rank " : "", scenario ? scenario : "");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  FILE *p = popen(cmd, "r");
  size_t len = 0;
  if (p) {
    size_t got;
    while (len + 1 < cap && (got = fread(out + len, 1, cap - 1 - len, p)) > 0) len += got;
  }
  out[len] = 0;
  int rc = p ? pclose(p) : -1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

/* Every rank's "rank R hash H" line agrees; the hash into *hash. */
static inline bool mpi_same_hashes(const char *out, int ranks, char *hash) {
  int seen = 0;
  for (const char *line = strstr(out, "rank "); line; line = strstr(line + 1, "rank ")) {
    int r;
    char h[17];
    if (sscanf(line, "rank %d hash %16s", &r, h) != 2) continue;
    if (seen++ == 0)
      strcpy(hash, h);
    else if (strcmp(hash, h) != 0)
      return false;
  }
  return seen == ranks;
}

/* A rank's start: a context with MPI initialized (cn_dist_init), its rank and the ranks' count;
 * NULL after saying why on stderr. */
static inline cn_ctx *mpi_rank_start(int *rank, int *size) {
  cn_ctx *ctx = cn_ctx_create();
  if (!ctx || cn_dist_init(ctx, 0) != CN_OK) {
    fprintf(stderr, "cn_dist_init: %s\n", ctx ? cn_ctx_error(ctx) : "no context");
    return NULL;
  }
  *rank = cn_dist_rank();
  *size = cn_dist_size();
  return ctx;
}

/* Why a driver cannot launch its ranks here (printed, with the test's name): 77, ctest's skip
 * status, when cannl was built without MPI or CANNL_MPIEXEC is unset (not run by ctest); else 0. */
static inline int mpi_skip(const char *test) {
  if (!cn_dist_available()) {
    printf("%s: skipped: cannl was built without MPI (install Open MPI: make deps)\n", test);
    return 77;
  }
  const char *mpiexec = getenv("CANNL_MPIEXEC");
  if (!mpiexec || !*mpiexec) {
    printf("%s: skipped: CANNL_MPIEXEC is not set (run through ctest)\n", test);
    return 77;
  }
  return 0;
}

#endif
