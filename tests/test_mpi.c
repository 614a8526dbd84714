/* The MPI layer (issue 33 items 4-5, src/dist/mpi.c) across processes. Run by ctest without
 * arguments, this program is the driver: it launches itself under mpirun (CANNL_MPIEXEC, the
 * one CMake found) with 2 and 3 ranks on loopback and checks what the ranks print and how the
 * jobs end; with `--rank SCENARIO` it is one rank of a scenario:
 *   sum       nodes of several precisions and a padded node, host values and (second part) two
 *             CPU devices per rank: every sum equal to the test's own, added in rank order (the
 *             single-precision cells are chosen so that another grouping gives other bits),
 *             padding margins untouched; each rank prints a hash of every result cell, which the
 *             driver compares between ranks and between two runs
 *   mismatch  rank 1's node has another shape: every rank fails naming rank 1, the node and
 *             both shapes; then rank 1 alone refuses its node: every rank fails with its message
 *   kill      the last rank dies (SIGKILL) at step 3 of a loop of all-reduces
 *   stall     the last rank sleeps at step 3; the others' bounded wait (CANNL_DIST_TIMEOUT=3)
 *             ends them with a message
 * and `mpirun -np 3 cannl run` of a script that prints, writes a file and reads it back.
 * In kill and stall the driver measures that the job ends non-zero, within 30 s, with a
 * survivor's message. Built without MPI the test is skipped (77) saying so. */
#include "check.h"
#include "mpi_launch.h"

#include "ir/ir.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t fnv(uint64_t hash, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) hash = (hash ^ p[i]) * 1099511628211u;
  return hash;
}

/* ---- the ranks ------------------------------------------------------------------------------ */

static int rank_, size_;

/* Rank r's single-precision cell i: cell 0 is 1e8, 1, -1e8 on ranks 0, 1, 2, whose sum in rank
 * order ((1e8 + 1) + -1e8) is 0 in single precision, where (1e8 + -1e8) + 1 is 1. */
static float single_value(int r, int i) {
  if (i == 0) return r == 0 ? 1e8f : r == 1 ? 1.0f : -1e8f;
  return (float)r * 0.1f + (float)i;
}

static bool run_sum(cn_ctx *ctx, uint64_t *hash) {
  cn_node *s = cn_node_create(ctx, "s", CN_PREC_SINGLE, 1, (int64_t[]){7});
  cn_node *d = cn_node_create(ctx, "d", CN_PREC_DOUBLE, 2, (int64_t[]){2, 3});
  cn_node *h = cn_node_create(ctx, "h", CN_PREC_HALF, 1, (int64_t[]){6});
  cn_node *b = cn_node_create(ctx, "b", CN_PREC_BFLOAT16, 1, (int64_t[]){4});
  cn_node *f = cn_node_create(ctx, "f", CN_PREC_FP8, 1, (int64_t[]){3});
  cn_node *i32 = cn_node_create(ctx, "i32", CN_PREC_INT32, 1, (int64_t[]){5});
  cn_node *u8 = cn_node_create(ctx, "u8", CN_PREC_BYTE, 1, (int64_t[]){4});
  cn_node *i64 = cn_node_create(ctx, "i64", CN_PREC_INT64, 1, (int64_t[]){3});
  CHECK(cn_node_set_padding(d, 1, 1, 2) == CN_OK);
  cn_node *nodes[] = {s, d, h, b, f, i32, u8, i64};
  enum { N = 8 };
  float sv[7];
  double dv[6], hv[6], bv[4], fv[3];
  int32_t iv[5];
  uint8_t uv[4];
  int64_t lv[3];
  for (int i = 0; i < 7; i++) sv[i] = single_value(rank_, i);
  for (int i = 0; i < 6; i++) dv[i] = (rank_ + 1) * (i + 1) / 4.0;
  for (int i = 0; i < 6; i++) hv[i] = (rank_ + 1) * 0.5 + i;
  for (int i = 0; i < 4; i++) bv[i] = rank_ * 2 + i * 0.25;
  for (int i = 0; i < 3; i++) fv[i] = (rank_ + 1) * (double)(1 << i);
  for (int i = 0; i < 5; i++) iv[i] = rank_ * 1000 + i - 7;
  for (int i = 0; i < 4; i++) uv[i] = (uint8_t)(200 + rank_ + i);
  for (int i = 0; i < 3; i++) lv[i] = ((int64_t)1 << 40) * (rank_ + 1) + i;
  CHECK(cn_node_set_cells(s, false, sv, 7) == CN_OK &&
        cn_node_set_values(d, false, dv, 6) == CN_OK);
  CHECK(cn_node_set_values(h, false, hv, 6) == CN_OK &&
        cn_node_set_values(b, false, bv, 4) == CN_OK);
  CHECK(cn_node_set_values(f, false, fv, 3) == CN_OK &&
        cn_node_set_cells(i32, false, iv, 5) == CN_OK);
  CHECK(cn_node_set_cells(u8, false, uv, 4) == CN_OK &&
        cn_node_set_cells(i64, false, lv, 3) == CN_OK);
  /* d's padding margins (row 0's left margin, the last cell) hold markers the sum must keep. */
  double *dbuf = d->value;
  size_t dcells = cn_node_buffer_cells(d);
  CHECK_INT(dcells, 2 * 6);
  dbuf[0] = 0.5 + rank_;
  dbuf[dcells - 1] = -0.25;
  cn_dist_allreduce *ar = cn_dist_allreduce_create(ctx, N, nodes, CN_BACKEND_DEFAULT);
  CHECK_MSG(ar != NULL, "%s", cn_ctx_error(ctx));
  if (!ar) return false;
  CHECK_MSG(cn_dist_allreduce_run(ar) == CN_OK, "%s", cn_ctx_error(ctx));
  float s_out[7], s_exp[7];
  double out[6];
  for (int i = 0; i < 7; i++) {
    s_exp[i] = single_value(0, i);
    for (int r = 1; r < size_; r++) s_exp[i] = s_exp[i] + single_value(r, i);
  }
  CHECK(cn_node_get_cells(s, false, s_out, 7) == CN_OK);
  CHECK_MSG(memcmp(s_out, s_exp, sizeof s_out) == 0, "single: %.9g %.9g (expected %.9g %.9g)",
            s_out[0], s_out[1], s_exp[0], s_exp[1]);
  CHECK_MSG(s_out[0] == (size_ == 3 ? 0.0f : 1e8f), "single cell 0: %.9g", s_out[0]);
  int t = size_ * (size_ + 1) / 2; /* sum over ranks of (rank + 1) */
  CHECK(cn_node_get_values(d, false, out, 6) == CN_OK);
  for (int i = 0; i < 6; i++) CHECK_MSG(out[i] == t * (i + 1) / 4.0, "double %d: %g", i, out[i]);
  CHECK(dbuf[0] == 0.5 + rank_ && dbuf[dcells - 1] == -0.25);
  CHECK(cn_node_get_values(h, false, out, 6) == CN_OK);
  for (int i = 0; i < 6; i++) CHECK_MSG(out[i] == t * 0.5 + size_ * i, "half %d: %g", i, out[i]);
  CHECK(cn_node_get_values(b, false, out, 4) == CN_OK);
  for (int i = 0; i < 4; i++)
    CHECK_MSG(out[i] == (t - size_) * 2 + size_ * i * 0.25, "bfloat16 %d: %g", i, out[i]);
  CHECK(cn_node_get_values(f, false, out, 3) == CN_OK);
  for (int i = 0; i < 3; i++) CHECK_MSG(out[i] == t * (double)(1 << i), "fp8 %d: %g", i, out[i]);
  int32_t i_out[5];
  uint8_t u_out[4];
  int64_t l_out[3];
  CHECK(cn_node_get_cells(i32, false, i_out, 5) == CN_OK);
  for (int i = 0; i < 5; i++) CHECK_INT(i_out[i], (t - size_) * 1000 + size_ * (i - 7));
  CHECK(cn_node_get_cells(u8, false, u_out, 4) == CN_OK);
  for (int i = 0; i < 4; i++) CHECK_INT(u_out[i], (size_ * (200 + i) + t - size_) % 256);
  CHECK(cn_node_get_cells(i64, false, l_out, 3) == CN_OK);
  for (int i = 0; i < 3; i++) CHECK_INT(l_out[i], ((int64_t)1 << 40) * t + size_ * i);
  unsigned char cells[64];
  for (int k = 0; k < N; k++) {
    size_t n = (size_t)cn_node_numel(nodes[k]);
    CHECK(cn_node_get_cells(nodes[k], false, cells, n) == CN_OK);
    *hash = fnv(*hash, cells, n * cn_prec_bytes(nodes[k]->prec));
  }
  cn_dist_allreduce_free(ar);
  return true;
}

/* Two CPU devices per rank: rank r's device k holds g = 8r + 2k + [1, 0.5, 0.25] (replicated);
 * each rank adds its devices, then ranks in order; every device and the host end with the sum. */
static void run_devices(cn_ctx *ctx, uint64_t *hash) {
  CHECK(cn_ctx_open_devices(ctx, 2) == CN_OK);
  cn_node *g = cn_node_create(ctx, "g", CN_PREC_SINGLE, 1, (int64_t[]){3});
  CHECK(cn_node_set_replicated(g, true) == CN_OK);
  const double frac[3] = {1, 0.5, 0.25};
  for (int k = 0; k < 2; k++) {
    double v[3];
    for (int i = 0; i < 3; i++) v[i] = 8 * rank_ + 2 * k + frac[i];
    CHECK(cn_node_set_device_values(g, false, k, v, 3) == CN_OK);
  }
  cn_dist_allreduce *ar = cn_dist_allreduce_create(ctx, 1, &g, CN_BACKEND_INTERP);
  CHECK_MSG(ar != NULL, "%s", cn_ctx_error(ctx));
  if (!ar) return;
  CHECK_MSG(cn_dist_allreduce_run(ar) == CN_OK, "%s", cn_ctx_error(ctx));
  double sum8 = 8.0 * size_ * (size_ - 1) / 2 * 2 + 2.0 * size_; /* sum of 8r+8r+2 */
  for (int k = -1; k < 2; k++) {
    double v[3];
    CHECK(k < 0 ? cn_node_get_values(g, false, v, 3) == CN_OK
                : cn_node_get_device_values(g, false, k, v, 3) == CN_OK);
    for (int i = 0; i < 3; i++)
      CHECK_MSG(v[i] == sum8 + 2 * size_ * frac[i], "device %d cell %d: %g", k, i, v[i]);
    *hash = fnv(*hash, v, sizeof v);
  }
  cn_dist_allreduce_free(ar);
}

static int rank_main(const char *scenario) {
  cn_ctx *ctx = mpi_rank_start(&rank_, &size_);
  if (!ctx) return 1;
  if (strcmp(scenario, "sum") == 0) {
    uint64_t hash = 1469598103934665603u;
    if (run_sum(ctx, &hash)) run_devices(ctx, &hash);
    printf("rank %d hash %016llx\n", rank_, (unsigned long long)hash);
  } else if (strcmp(scenario, "mismatch") == 0) {
    cn_node *w = cn_node_create(ctx, "w", CN_PREC_SINGLE, 2, (int64_t[]){3, rank_ == 1 ? 5 : 4});
    cn_dist_allreduce *ar = cn_dist_allreduce_create(ctx, 1, &w, CN_BACKEND_DEFAULT);
    const char *want = "the ranks' node lists differ: rank 1's node 0 is `w` single [3,5] where "
                       "rank 0's is `w` single [3,4]";
    CHECK(ar == NULL);
    CHECK_MSG(strstr(cn_ctx_error(ctx), want) != NULL, "rank %d: %s", rank_, cn_ctx_error(ctx));
    bool reported = ar == NULL && strstr(cn_ctx_error(ctx), want);
    /* A refusal on rank 1 alone (its node is not replicated, with devices): every rank fails at
     * once with rank 1's message, none waits for it. */
    CHECK(cn_ctx_open_devices(ctx, 1) == CN_OK);
    cn_node *g = cn_node_create(ctx, "g", CN_PREC_SINGLE, 1, (int64_t[]){2});
    CHECK(cn_node_set_replicated(g, rank_ != 1) == CN_OK);
    ar = cn_dist_allreduce_create(ctx, 1, &g, CN_BACKEND_INTERP);
    want = "rank 1 of ";
    const char *why = "is not replicated";
    CHECK(ar == NULL);
    CHECK_MSG(strstr(cn_ctx_error(ctx), want) && strstr(cn_ctx_error(ctx), why), "rank %d: %s",
              rank_, cn_ctx_error(ctx));
    reported = reported && ar == NULL && strstr(cn_ctx_error(ctx), why);
    if (reported) printf("rank %d mismatch reported\n", rank_);
  } else {
    bool kill = strcmp(scenario, "kill") == 0;
    cn_node *g = cn_node_create(ctx, "g", CN_PREC_SINGLE, 1, (int64_t[]){1000});
    cn_dist_allreduce *ar = cn_dist_allreduce_create(ctx, 1, &g, CN_BACKEND_DEFAULT);
    for (int step = 0; ar && step < 1000; step++) {
      if (step == 3 && rank_ == size_ - 1) {
        fflush(stdout);
        if (kill) raise(SIGKILL);
        sleep(120);
      }
      if (cn_dist_allreduce_run(ar) != CN_OK) {
        fprintf(stderr, "survivor rank %d at step %d: %s\n", rank_, step, cn_ctx_error(ctx));
        cn_dist_abort(1);
        return 1;
      }
    }
    CHECK(!"the loop ended although a rank died");
  }
  int failed = check_failed_;
  printf("rank %d: %d passed, %d failed\n", rank_, check_passed_, check_failed_);
  fflush(stdout);
  cn_dist_finalize(ctx);
  cn_ctx_destroy(ctx);
  return failed ? 1 : 0;
}

/* ---- the driver ----------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--rank") == 0) return rank_main(argv[2]);
  int skip = mpi_skip("test_mpi");
  if (skip) return skip;
  static char out[1 << 16];
  double seconds;
  char first[4][17] = {{0}};
  for (int ranks = 2; ranks <= 3; ranks++)
    for (int again = 0; again < 2; again++) {
      int rc = mpi_launch(argv[0], ranks, "sum", "", out, sizeof out, &seconds);
      char hash[17] = {0};
      CHECK_MSG(rc == 0, "sum, %d ranks: exit %d:\n%s", ranks, rc, out);
      CHECK_MSG(mpi_same_hashes(out, ranks, hash), "sum, %d ranks: the ranks' bits differ:\n%s",
                ranks, out);
      if (!again)
        strcpy(first[ranks], hash);
      else
        CHECK_MSG(strcmp(first[ranks], hash) == 0, "sum, %d ranks: run to run %s vs %s", ranks,
                  first[ranks], hash);
    }
  CHECK_MSG(strcmp(first[2], first[3]) != 0, "2 and 3 ranks gave the same sums");
  for (int ranks = 2; ranks <= 3; ranks++) {
    int rc = mpi_launch(argv[0], ranks, "mismatch", "", out, sizeof out, &seconds);
    int reported = 0;
    for (const char *p = strstr(out, "mismatch reported"); p;
         p = strstr(p + 1, "mismatch reported"))
      reported++;
    CHECK_MSG(rc == 0 && reported == ranks, "mismatch, %d ranks: exit %d, %d reports:\n%s", ranks,
              rc, reported, out);
  }
  /* `mpirun -np 3 cannl run`: rank 0 alone prints and writes; the load after save_npy reads the
   * file on every rank (rank 0's write completes before any rank reads). */
  char dir[] = "/tmp/cannl_test_mpi_XXXXXX", script[128], cmd[512];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(script, sizeof script, "%s/s.cnl", dir);
  FILE *f = fopen(script, "w");
  CHECK(f != NULL);
  if (f) {
    fprintf(f,
            "let a = {a = 3.0}\nlet l = a *. a\nprint l\nsave_npy \"%s/l.npy\" l\n"
            "let y = load \"%s/l.npy\"\nprint y\n",
            dir, dir);
    fclose(f);
  }
  snprintf(cmd, sizeof cmd, "%s run %s", getenv("CANNL_CLI"), script);
  int rc = mpi_launch(cmd, 3, NULL, "", out, sizeof out, &seconds);
  int prints = 0, wrote = 0;
  for (const char *p = strstr(out, "|->"); p; p = strstr(p + 1, "|->")) prints++;
  for (const char *p = strstr(out, "wrote "); p; p = strstr(p + 1, "wrote ")) wrote++;
  CHECK_MSG(rc == 0 && prints == 2 && wrote == 1 && strstr(out, "\"y\" (#4) |->\n9\n"),
            "cannl run on 3 ranks: exit %d, %d prints, %d reports of files written:\n%s", rc,
            prints, wrote, out);
  char path[160];
  snprintf(path, sizeof path, "%s/l.npy", dir);
  CHECK(access(path, R_OK) == 0);
  remove(path);
  remove(script);
  rmdir(dir);
  const char *scenarios[] = {"kill", "stall"};
  for (int k = 0; k < 2; k++) {
    int rc =
        mpi_launch(argv[0], 3, scenarios[k], "CANNL_DIST_TIMEOUT=3", out, sizeof out, &seconds);
    printf("%s: exit %d after %.1f s\n%s\n", scenarios[k], rc, seconds, out);
    CHECK_MSG(rc != 0 && rc != 124, "%s: exit %d", scenarios[k], rc);
    CHECK_MSG(seconds < 30, "%s: %.1f s", scenarios[k], seconds);
    bool said = strstr(out, "survivor rank") || strstr(out, "stopped by the launcher");
    CHECK_MSG(said, "%s: no survivor's message", scenarios[k]);
    if (k == 1) CHECK_MSG(strstr(out, "did not complete within 3 s") != NULL, "stall: no timeout");
  }
  CHECK_DONE();
}
