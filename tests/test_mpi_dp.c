/* Data-parallel training across MPI ranks (cn_dp_* after cn_dist_init; issue 33). Run by ctest
 * without arguments, this program is the driver: it trains each model once in this process (one
 * routine, the whole batch) and launches itself under mpirun (tests/mpi_launch.h) as the ranks;
 * with `--rank SCENARIO DEVICES DIR` it is one rank:
 *   moons    the half-moons model (demo/moons.c, SGD), global batch 12, one epoch of 66 steps
 *   fashion  the Fashion-MNIST MLP (demo/fashion.c, Adam), global batch 120, one epoch of 4 steps
 *            of the first 480 images (skipped with a message without the data set)
 * on ranks x DEVICES shards: every device of a rank holds the host's bits (memcmp here), each rank
 * prints a hash of its training state and rank 0 writes it (cn_dp_save) to DIR; the driver checks
 * that the hashes agree between ranks and between two runs, and reads the file into a model of
 * its own to compare it with the one-process run (the sums group differently: per shard, then
 * across shards; so within float tolerance, not bits);
 *   resume   moons on 2 ranks: 30 steps, cn_dp_save, the rest of the epoch; then a new model,
 *            cn_dp_load on every rank, the same rest: the same bits as without the interruption;
 *            then rank 1's w2 changed in one bit on every device of it: cn_dp_check names w2 and
 *            rank 1 on every rank
 *   mismatch rank 1 builds moons with 2 epochs (a constant of the update routine's learning-rate
 *            schedule), then with a global batch of 24 (the shard's shape), then on the
 *            interpreter (the same buffers, other code): cn_dp_create fails on every rank naming
 *            rank 1, the routine and the difference; then rank 1 fails before the exchange:
 *            rank 0 fails at once with its message
 * and `cannl run` of a data-parallel script (`for ... ~devices:N`): on 2 ranks x 1 device and
 * 2 ranks x 2 devices it prints what one process prints on 2 and 4 devices (the same slots, the
 * same order of the sums: the devices' tree, then the ranks in order), digit for digit, once.
 * Built without MPI the test is skipped (77) saying so. */
#include "../demo/fashion.h"
#include "../demo/moons.h"
#include "check.h"
#include "mpi_launch.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

enum { MOONS_GLOBAL = 12, FASHION_GLOBAL = 120, RESUME_AT = 30, STATE_MAX = 64 };

static uint64_t fnv(uint64_t hash, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) hash = (hash ^ p[i]) * 1099511628211u;
  return hash;
}

/* The training state's cells (cn_graph_state) as doubles into out (at most cap; NULL: only
 * counted), and the hash of their stored bits; returns the count, -1 on failure. */
static int64_t state_values(cn_graph *g, cn_tensor *loss, double *out, int64_t cap,
                            uint64_t *hash) {
  cn_named_node state[STATE_MAX];
  int n = cn_graph_state(g, loss, state, STATE_MAX);
  CHECK_MSG(n > 0 && n <= STATE_MAX, "state: %d entries", n);
  if (n <= 0 || n > STATE_MAX) return -1;
  int64_t total = 0;
  *hash = 1469598103934665603u;
  for (int k = 0; k < n; k++) {
    cn_node *node = state[k].node;
    size_t cells = (size_t)cn_node_numel(node), bytes = cells * cn_prec_bytes(cn_node_prec(node));
    unsigned char *bits = malloc(bytes + 1);
    CHECK(bits && cn_node_get_cells(node, false, bits, cells) == CN_OK);
    if (bits) *hash = fnv(*hash, bits, bytes);
    free(bits);
    if (out && total + (int64_t)cells <= cap)
      CHECK(cn_node_get_values(node, false, out + total, cells) == CN_OK);
    total += (int64_t)cells;
  }
  CHECK_MSG(!out || total <= cap, "state: %lld cells, room for %lld", (long long)total,
            (long long)cap);
  return total;
}

/* ---- the ranks ------------------------------------------------------------------------------ */

static int rank_, size_;

/* Every device's copy of every parameter is the host's. */
static void same_on_devices(cn_tensor *const *params, int n, int devices) {
  for (int p = 0; p < n; p++) {
    cn_node *node = cn_tensor_value(params[p]);
    size_t cells = (size_t)cn_node_numel(node), bytes = cells * cn_prec_bytes(cn_node_prec(node));
    unsigned char *host = malloc(2 * bytes + 1), *dev = host ? host + bytes : NULL;
    CHECK(host && cn_node_get_cells(node, false, host, cells) == CN_OK);
    for (int d = 0; host && d < devices; d++) {
      CHECK(cn_node_get_device_cells(node, false, d, dev, cells) == CN_OK);
      CHECK_MSG(memcmp(host, dev, bytes) == 0, "rank %d: parameter %d on device %d differs", rank_,
                p, d);
    }
    free(host);
  }
}

/* After training: every device holds the host's bits, the state's hash printed ("rank R hash
 * H"), the state written to DIR/NAME.safetensors by rank 0 (cn_dp_save). */
static void report_state(cn_graph *g, cn_tensor *loss, cn_dp *dp, cn_tensor *const *params,
                         int n_params, int devices, const char *dir, const char *name) {
  same_on_devices(params, n_params, devices);
  uint64_t hash;
  state_values(g, loss, NULL, 0, &hash);
  printf("rank %d hash %016llx\n", rank_, (unsigned long long)hash);
  char path[512];
  snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
  CHECK_MSG(cn_dp_save(dp, path) == CN_OK, "rank %d: %s", rank_, cn_ctx_error(cn_graph_ctx(g)));
}

static void rank_moons(int devices, const char *dir) {
  const moons_config cfg = {1, MOONS_SEED, CN_BACKEND_C, devices, MOONS_GLOBAL};
  moons m;
  cn_status st = moons_build(&m, &cfg);
  CHECK_MSG(st == CN_OK && m.dp, "rank %d: %s", rank_, cn_ctx_error(m.ctx));
  double loss = 0;
  for (int64_t s = 0; st == CN_OK && s < m.batches; s++) {
    st = moons_train_step(&m, s, &loss);
    CHECK_MSG(st == CN_OK, "rank %d step %lld: %s", rank_, (long long)s, cn_ctx_error(m.ctx));
  }
  if (st == CN_OK) {
    cn_tensor *params[5] = {m.w1, m.b1, m.w2, m.b2, m.w3};
    report_state(m.g, m.loss, m.dp, params, 5, devices, dir, "moons");
  }
  moons_destroy(&m);
}

static void rank_fashion(int devices, const char *dir) {
  const fashion_config cfg = {FASHION_MLP, 1,    FASHION_GLOBAL, 4 * FASHION_GLOBAL, 100,    0, 0,
                              7,           NULL, NULL,           CN_BACKEND_C,       devices};
  fashion f;
  bool ok = fashion_build(&f, &cfg) == CN_OK && fashion_train_epoch(&f, NULL, NULL) == CN_OK;
  CHECK_MSG(ok && f.dp, "rank %d: %s", rank_, fashion_error(&f));
  if (ok) {
    report_state(f.g, f.loss, f.dp, f.params, f.n_params, devices, dir, "fashion");
  }
  fashion_destroy(&f);
}

/* Steps [from, to) of a built model. */
static bool moons_steps(moons *m, int64_t from, int64_t to) {
  double loss;
  for (int64_t s = from; s < to; s++)
    if (moons_train_step(m, s, &loss) != CN_OK) {
      CHECK_MSG(false, "rank %d step %lld: %s", rank_, (long long)s, cn_ctx_error(m->ctx));
      return false;
    }
  return true;
}

static void rank_resume(const char *dir) {
  const moons_config cfg = {1, MOONS_SEED, CN_BACKEND_C, 1, MOONS_GLOBAL};
  char path[512];
  snprintf(path, sizeof path, "%s/resume.safetensors", dir);
  moons a, b;
  uint64_t whole = 0, resumed = 1;
  bool ok = moons_build(&a, &cfg) == CN_OK && moons_steps(&a, 0, RESUME_AT) &&
            cn_dp_save(a.dp, path) == CN_OK && moons_steps(&a, RESUME_AT, a.batches);
  CHECK_MSG(ok, "rank %d, the whole run: %s", rank_, cn_ctx_error(a.ctx));
  if (ok) state_values(a.g, a.loss, NULL, 0, &whole);
  moons_destroy(&a);
  ok = moons_build(&b, &cfg) == CN_OK && cn_dp_load(b.dp, path) == CN_OK &&
       moons_steps(&b, RESUME_AT, b.batches);
  CHECK_MSG(ok, "rank %d, the resumed run: %s", rank_, cn_ctx_error(b.ctx));
  if (ok) state_values(b.g, b.loss, NULL, 0, &resumed);
  CHECK_MSG(whole == resumed, "rank %d: resumed %016llx, whole %016llx", rank_,
            (unsigned long long)resumed, (unsigned long long)whole);
  printf("rank %d hash %016llx\n", rank_, (unsigned long long)resumed);
  if (ok) {
    /* rank 1's w2 one bit off on every device (its devices agree): the ranks do not */
    cn_node *w2 = cn_tensor_value(b.w2);
    float cells[MOONS_HIDDEN * MOONS_HIDDEN];
    const size_t n = (size_t)cn_node_numel(w2);
    CHECK(n <= sizeof cells / sizeof *cells &&
          cn_node_get_device_cells(w2, false, 0, cells, n) == CN_OK);
    cells[n - 1] = nextafterf(cells[n - 1], 1e9f);
    if (rank_ == 1) CHECK(cn_node_set_device_cells(w2, false, 0, cells, n) == CN_OK);
    CHECK(cn_dp_check(b.dp) == CN_ERR_RUNTIME);
    CHECK_HAS(cn_ctx_error(b.ctx),
              "cn_dp_check: parameter 'w2' differs between rank 0 and rank 1 of 2");
  }
  moons_destroy(&b);
}

/* rank 1 builds moons with `epochs`, `batch` and `backend` where rank 0 has 1, MOONS_GLOBAL and
 * generated C. */
static void mismatch(int epochs, int batch, cn_backend_kind backend, const char *want,
                     const char *want2) {
  const moons_config cfg = {rank_ == 1 ? epochs : 1, MOONS_SEED,
                            rank_ == 1 ? backend : CN_BACKEND_C, 1,
                            rank_ == 1 ? batch : MOONS_GLOBAL};
  moons m;
  CHECK(moons_build(&m, &cfg) == CN_ERR_INVALID);
  const char *error = cn_ctx_error(m.ctx);
  CHECK_MSG(strstr(error, want) && strstr(error, want2), "rank %d: %s", rank_, error);
  moons_destroy(&m);
}

/* Rank 1 fails before the exchange (cn_dp_create without routines): rank 0, building moons, fails
 * at once with rank 1's message instead of waiting for it until the timeout (20 s). */
static void failed_before(void) {
  const char *want = "rank 1 of 2: cn_dp_create: a loss, a gradient routine and an update routine "
                     "needed";
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (rank_ == 1) {
    cn_ctx *ctx = cn_ctx_create();
    cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
    CHECK(g && cn_dp_create(g, NULL, NULL, NULL, 1, CN_BACKEND_C) == NULL);
    if (ctx) CHECK_HAS(cn_ctx_error(ctx), want);
    cn_ctx_destroy(ctx);
  } else {
    const moons_config cfg = {1, MOONS_SEED, CN_BACKEND_C, 1, MOONS_GLOBAL};
    moons m;
    CHECK(moons_build(&m, &cfg) == CN_ERR_INVALID);
    CHECK_HAS(cn_ctx_error(m.ctx), want);
    moons_destroy(&m);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  CHECK_MSG(seconds < 10, "rank %d: %.1f s", rank_, seconds);
}

static int rank_main(const char *scenario, int devices, const char *dir) {
  cn_ctx *ctx = mpi_rank_start(&rank_, &size_);
  if (!ctx) return 1;
  if (strcmp(scenario, "moons") == 0) {
    rank_moons(devices, dir);
  } else if (strcmp(scenario, "fashion") == 0) {
    rank_fashion(devices, dir);
  } else if (strcmp(scenario, "resume") == 0) {
    rank_resume(dir);
  } else {
    const char *differ = "cn_dist_check_routines: the ranks' compiled routines differ: ";
    /* the learning rate's schedule: a constant of the update routine */
    mismatch(2, MOONS_GLOBAL, CN_BACKEND_C, differ,
             "rank 1 has routine `moons_update` buffer `132` single [1] where rank 0 has routine "
             "`moons_update` buffer `66` single [1]");
    /* the shard of the data */
    mismatch(1, 2 * MOONS_GLOBAL, CN_BACKEND_C, differ,
             "rank 1 has routine `moons_grad` buffer `moons` single [33,12,2] where rank 0 has "
             "routine `moons_grad` buffer `moons` single [66,6,2]");
    /* the same buffers, other code: the interpreter (no generated source) */
    mismatch(1, MOONS_GLOBAL, CN_BACKEND_INTERP, differ,
             " (loop IR) where rank 0 has routine `moons_grad` code ");
    failed_before();
  }
  int failed = check_failed_;
  printf("rank %d: %d passed, %d failed\n", rank_, check_passed_, check_failed_);
  fflush(stdout);
  cn_dist_finalize(ctx);
  cn_ctx_destroy(ctx);
  return failed ? 1 : 0;
}

/* ---- the driver ----------------------------------------------------------------------------- */

/* The job's ranks agree with each other; its hash into hash (NULL: not kept). */
static bool job(const char *self, int ranks, const char *scenario, char *hash) {
  static char out[1 << 16];
  double seconds;
  char h[17] = {0};
  int rc = mpi_launch(self, ranks, scenario, "", out, sizeof out, &seconds);
  printf("%d ranks, %s: exit %d after %.1f s\n", ranks, scenario, rc, seconds);
  CHECK_MSG(rc == 0, "%d ranks, %s: exit %d:\n%s", ranks, scenario, rc, out);
  bool same = strstr(scenario, "mismatch") || mpi_same_hashes(out, ranks, h);
  CHECK_MSG(same, "%d ranks, %s: the ranks' bits differ:\n%s", ranks, scenario, out);
  if (hash) strcpy(hash, h);
  return rc == 0 && same;
}

/* The largest relative difference of a file's state (read into a fresh one-process model's
 * nodes) from the one-process run's values. */
static double worst_difference(cn_graph *g, cn_tensor *loss, const char *path, const double *ref,
                               int64_t n) {
  cn_named_node state[STATE_MAX];
  int k = cn_graph_state(g, loss, state, STATE_MAX);
  CHECK_MSG(cn_data_load_safetensors(cn_graph_ctx(g), path, k, state, NULL, NULL) == CN_OK, "%s",
            cn_ctx_error(cn_graph_ctx(g)));
  double *got = malloc(sizeof *got * (size_t)n);
  uint64_t hash;
  CHECK(got && state_values(g, loss, got, n, &hash) == n);
  double worst = 0;
  for (int64_t i = 0; got && i < n; i++) {
    double d = fabs(got[i] - ref[i]) / (1 + fabs(ref[i]));
    worst = d > worst ? d : worst;
  }
  free(got);
  remove(path);
  return worst;
}

static void drive_moons(const char *self, const char *dir) {
  const moons_config cfg = {1, MOONS_SEED, CN_BACKEND_C, 0, MOONS_GLOBAL};
  moons one, fresh;
  CHECK_MSG(moons_build(&one, &cfg) == CN_OK, "%s", cn_ctx_error(one.ctx));
  double loss, ref[MOONS_HIDDEN * (MOONS_HIDDEN + 5)];
  for (int64_t s = 0; s < one.batches; s++) CHECK(moons_train_step(&one, s, &loss) == CN_OK);
  uint64_t hash;
  int64_t n = state_values(one.g, one.loss, ref, sizeof ref / sizeof *ref, &hash);
  moons_destroy(&one);
  const int configs[3][2] = {{2, 1}, {3, 1}, {2, 2}};
  char first[17] = {0};
  for (int c = 0; c < 3; c++) {
    char scenario[600], h[17], path[600];
    snprintf(scenario, sizeof scenario, "moons %d %s", configs[c][1], dir);
    if (!job(self, configs[c][0], scenario, h)) continue;
    if (c == 0) strcpy(first, h);
    CHECK(moons_build(&fresh, &cfg) == CN_OK);
    snprintf(path, sizeof path, "%s/moons.safetensors", dir);
    double worst = worst_difference(fresh.g, fresh.loss, path, ref, n);
    moons_destroy(&fresh);
    printf("moons, %d ranks x %d devices: largest relative difference to one process %.3g\n",
           configs[c][0], configs[c][1], worst);
    CHECK_MSG(worst <= 1e-4, "moons, %d ranks x %d devices: %.3g", configs[c][0], configs[c][1],
              worst);
  }
  /* run to run: the same bits */
  char again[17] = {0}, scenario[600];
  snprintf(scenario, sizeof scenario, "moons 1 %s", dir);
  if (job(self, 2, scenario, again))
    CHECK_MSG(strcmp(first, again) == 0, "moons, 2 ranks: %s then %s", first, again);
}

static void drive_fashion(const char *self, const char *dir) {
  if (!fashion_data_available(NULL)) {
    printf("SKIP (fashion part): Fashion-MNIST is not installed in %s\n", FASHION_DATA_DIR);
    return;
  }
  const fashion_config cfg = {FASHION_MLP, 1,    FASHION_GLOBAL, 4 * FASHION_GLOBAL, 100, 0, 0,
                              7,           NULL, NULL,           CN_BACKEND_C,       1};
  fashion one, fresh;
  bool ok = fashion_build(&one, &cfg) == CN_OK && fashion_train_epoch(&one, NULL, NULL) == CN_OK;
  CHECK_MSG(ok, "%s", fashion_error(&one));
  uint64_t hash;
  int64_t n = ok ? state_values(one.g, one.loss, NULL, 0, &hash) : -1;
  double *ref = n > 0 ? malloc(sizeof *ref * (size_t)n) : NULL;
  if (ref) state_values(one.g, one.loss, ref, n, &hash);
  fashion_destroy(&one);
  const int configs[3][2] = {{2, 1}, {3, 1}, {2, 2}};
  for (int c = 0; ref && c < 3; c++) {
    char scenario[600], h[17], path[600];
    snprintf(scenario, sizeof scenario, "fashion %d %s", configs[c][1], dir);
    if (!job(self, configs[c][0], scenario, h)) continue;
    CHECK(fashion_build(&fresh, &cfg) == CN_OK);
    snprintf(path, sizeof path, "%s/fashion.safetensors", dir);
    double worst = worst_difference(fresh.g, fresh.loss, path, ref, n);
    fashion_destroy(&fresh);
    printf("fashion MLP, %d ranks x %d devices: largest relative difference to one process %.3g\n",
           configs[c][0], configs[c][1], worst);
    CHECK_MSG(worst <= 1e-5, "fashion, %d ranks x %d devices: %.3g", configs[c][0], configs[c][1],
              worst);
  }
  free(ref);
}

/* The output of `cmd` (stdout and stderr) into out; its exit status. */
static int command_output(const char *cmd, char *out, size_t cap) {
  FILE *p = popen(cmd, "r");
  size_t len = p ? fread(out, 1, cap - 1, p) : 0;
  out[len] = '\0';
  return p ? pclose(p) : -1;
}

/* A data-parallel script under `mpirun -np 2 cannl run` against one process with as many slots. */
static void drive_script(const char *dir) {
  char script[640], cmd[1400], ranks_out[4096], one_out[4096];
  snprintf(script, sizeof script, "%s/dp.cnl", dir);
  FILE *f = fopen(script, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs("let devices = 1\n"
        "let (points, classes) = half_moons ~n:80 ~noise:0.1 ~seed:1 ~batch_size:5\n"
        "let b = static_index 16\n"
        "let%op model x = {w2} * relu ({w1; o = [4]} * x + {c1; o = [4]}) + {c2; o = [1]}\n"
        "let loss = (relu (1 - (classes @| b) *. model (points @| b)) ++ \"...|... => 0\") /. 5\n"
        "for epoch = 0 to 2 do\n"
        "  for b = 0 to 15 ~devices:devices do\n"
        "    backprop loss\n"
        "    adam loss ~learning_rate:0.05\n"
        "  done\n"
        "done\n"
        "print w1\nprint c2\n",
        f);
  fclose(f);
  for (int devices = 1; devices <= 2; devices++) {
    snprintf(cmd, sizeof cmd, "%s run %s --set devices=%d", getenv("CANNL_CLI"), script, devices);
    double seconds;
    int rc = mpi_launch(cmd, 2, NULL, "", ranks_out, sizeof ranks_out, &seconds);
    snprintf(cmd, sizeof cmd, "%s run %s --set devices=%d 2>&1", getenv("CANNL_CLI"), script,
             2 * devices);
    int one_rc = command_output(cmd, one_out, sizeof one_out);
    CHECK_MSG(rc == 0 && one_rc == 0, "script, %d device(s) per rank: exit %d, one process %d:\n%s",
              devices, rc, one_rc, ranks_out);
    CHECK_MSG(strstr(one_out, "\"w1\"") && strcmp(ranks_out, one_out) == 0,
              "script, 2 ranks x %d device(s) against one process on %d:\n%s\nagainst\n%s", devices,
              2 * devices, ranks_out, one_out);
  }
  remove(script);
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--rank") == 0)
    return rank_main(argv[2], atoi(argv[3]), argv[4]);
  int skip = mpi_skip("test_mpi_dp");
  if (skip) return skip;
  char dir[] = "/tmp/cannl_test_mpi_dp_XXXXXX", scenario[600];
  CHECK(mkdtemp(dir) != NULL);
  drive_moons(argv[0], dir);
  drive_fashion(argv[0], dir);
  drive_script(dir);
  snprintf(scenario, sizeof scenario, "resume 1 %s", dir);
  job(argv[0], 2, scenario, NULL);
  snprintf(scenario, sizeof scenario, "mismatch 1 %s", dir);
  job(argv[0], 2, scenario, NULL);
  char path[600];
  snprintf(path, sizeof path, "%s/resume.safetensors", dir);
  remove(path);
  rmdir(dir);
  CHECK_DONE();
}
