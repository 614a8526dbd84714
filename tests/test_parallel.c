/* Tests of parallel and vector loops: the worker pool (src/runtime/pool.c: chunks cover [0, n)
 * exactly once, for n below, at and above the thread count, n = 0, nested calls; each chunk's
 * scratch kept across jobs and held by no other thread; a job whose workers are kept from running
 * (held in a signal handler) still done, by the caller, each chunk whole and once, and the loop
 * then tried alone, one call over [0, n), while the same function at another site
 * (cn_pool_for_site) keeps a record of its own), and the C
 * backend's treatment of the CN_LL_PARALLEL and CN_LL_VECTOR marks on procedures marked by hand:
 * a matmul with its output-row loops parallel, an elementwise nest over 1M cells and a reduction
 * to a vector under an outer unmarked loop, a routine of kernels (more than 32 statements), each
 * run on 1, 2 and 3 threads and compared bit for bit (memcmp) with the unmarked procedure (and the
 * routine of kernels with the interpreter); a small parallel routine run 10 000 times; the
 * assembly of a vector-marked kernel holding ymm/zmm instructions (on a CPU with AVX2); the
 * "threads" option. Generated code is compiled in a mkdtemp cache directory, removed at the end. */
#define _GNU_SOURCE /* syscall(SYS_tgkill): a signal to one worker thread */
#include "backend/backend.h"
#include "loops_check.h"
#include "runtime/pool.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char cache_dir[] = "/tmp/cannl-test-parallel-XXXXXX";

/* ---- The pool ---- */

#define MAX_N 1000

/* Each index is counted by the one thread that runs it: no two threads write one cell. */
typedef struct {
  int count[MAX_N];
} coverage;

static void count_indices(void *env, int64_t lo, int64_t hi) {
  coverage *c = env;
  for (int64_t x = lo; x < hi; x++) c->count[x]++;
}

static void check_cover(cn_pool *pool, int64_t n) {
  static coverage c;
  memset(&c, 0, sizeof c);
  cn_pool_for(pool, n, count_indices, &c);
  int wrong = 0;
  for (int64_t x = 0; x < MAX_N; x++) wrong += c.count[x] != (x < n ? 1 : 0);
  CHECK_MSG(wrong == 0, "%d threads, n = %lld: %d indices not run exactly once",
            cn_pool_threads(pool), (long long)n, wrong);
}

/* A call from inside a chunk runs inline (no deadlock) and still covers its range. */
static void nested(void *env, int64_t lo, int64_t hi) {
  cn_pool **pool = env;
  for (int64_t x = lo; x < hi; x++) check_cover(*pool, 3);
}

/* Each chunk asks for scratch twice: the second call returns the same aligned buffer, which no
 * other thread holds (each writes its chunk index into it and reads it back after a pause). */
typedef struct {
  cn_pool *pool;
  void *seen[8];
  atomic_int wrong;
} scratch_probe;

static void probe_scratch(void *env, int64_t lo, int64_t hi) {
  scratch_probe *p = env;
  (void)hi;
  int64_t *first = cn_pool_scratch(p->pool, 1000), *again = cn_pool_scratch(p->pool, 200);
  if (!first || first != again || (uintptr_t)first % 64 != 0) atomic_fetch_add(&p->wrong, 1);
  if (!first) return;
  first[0] = lo;
  for (volatile int spin = 0; spin < 100000; spin++) {
  }
  if (first[0] != lo) atomic_fetch_add(&p->wrong, 1);
  p->seen[lo] = first;
}

static void test_scratch(void) {
  cn_ctx *ctx = cn_ctx_create();
  for (int threads = 1; threads <= 4; threads++) {
    cn_pool *pool = cn_pool_create(ctx, threads);
    CHECK(pool != NULL);
    if (!pool) continue;
    scratch_probe p = {.pool = pool};
    cn_pool_for(pool, threads, probe_scratch, &p);
    void *first_run[8];
    memcpy(first_run, p.seen, sizeof first_run);
    cn_pool_for(pool, threads, probe_scratch, &p); /* kept across jobs */
    CHECK_INT(atomic_load(&p.wrong), 0);
    for (int k = 0; k < threads; k++) {
      CHECK(p.seen[k] == first_run[k]);
      for (int j = 0; j < k; j++) CHECK(p.seen[j] != p.seen[k]);
    }
    /* outside a chunk: the caller's, which chunk 0 uses */
    CHECK(cn_pool_scratch(pool, 64) == p.seen[0]);
    cn_pool_destroy(pool);
  }
  cn_ctx_destroy(ctx);
}

static void test_pool(void) {
  cn_ctx *ctx = cn_ctx_create();
  for (int threads = 1; threads <= 5; threads++) {
    cn_pool *pool = cn_pool_create(ctx, threads);
    CHECK(pool != NULL);
    if (!pool) continue;
    CHECK_INT(cn_pool_threads(pool), threads);
    int64_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 64, 999, MAX_N};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) check_cover(pool, sizes[k]);
    cn_pool_for(pool, 1, nested, &pool);
    cn_pool_destroy(pool);
  }
  /* The context's pool: one per count, replaced when the count changes, freed by the context. */
  cn_pool *a = cn_pool_of(ctx, 2);
  CHECK(a != NULL && cn_pool_of(ctx, 2) == a);
  cn_pool *b = cn_pool_of(ctx, 3);
  CHECK(b != NULL && cn_pool_threads(b) == 3);
  check_cover(b, 10);
  cn_ctx_destroy(ctx);
}

/* ---- Workers kept from running ---- */

/* A worker held in the SIGUSR1 handler stands for one descheduled while another process holds
 * its core: the job must complete without it (the caller runs its chunks), each chunk whole and
 * once, with the same ranges and the same per-chunk scratch as when the workers run. */
static atomic_int held, release_held;

static void hold(int sig) {
  (void)sig;
  atomic_fetch_add(&held, 1);
  while (!atomic_load(&release_held)) nanosleep(&(struct timespec){0, 1000000}, NULL);
  atomic_fetch_sub(&held, 1);
}

static void stalled(int sig) {
  (void)sig;
  static const char msg[] =
      "test_parallel: timed out holding the workers or running without them\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(2);
  _exit(1);
}

/* The state letter of thread tid of this process ('S' sleeping, 'R' running), '?' if unknown. */
static char thread_state(long tid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
  FILE *f = fopen(path, "r");
  size_t got = f ? fread(line, 1, sizeof line - 1, f) : 0;
  if (f) fclose(f);
  line[got] = 0;
  const char *close = strrchr(line, ')'); /* the name may hold spaces and parentheses */
  return close && close[1] == ' ' && close[2] ? close[2] : '?';
}

enum { MAX_THREADS = 64 };

/* The ids of this process's threads into tids (at most MAX_THREADS); -1 without /proc. */
static int list_threads(long *tids) {
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return -1;
  int count = 0;
  for (struct dirent *e; (e = readdir(dir)) && count < MAX_THREADS;)
    if (atol(e->d_name) > 0) tids[count++] = atol(e->d_name);
  closedir(dir);
  return count;
}

/* Holds the threads of `after` not in `before` (a pool's workers; not the sanitizer's threads)
 * once each sleeps waiting for a job (so it should hold no lock of the pool), and waits until all
 * are held; returns how many. */
static int hold_new_threads(const long *before, int n_before, const long *after, int n_after) {
  int count = 0;
  for (int i = 0; i < n_after; i++) {
    bool old = false;
    for (int j = 0; j < n_before; j++) old |= after[i] == before[j];
    if (old) continue;
    for (int tries = 0; tries < 10000 && thread_state(after[i]) != 'S'; tries++)
      nanosleep(&(struct timespec){0, 100000}, NULL);
    count += syscall(SYS_tgkill, (long)getpid(), after[i], SIGUSR1) == 0;
  }
  while (atomic_load(&held) < count) nanosleep(&(struct timespec){0, 100000}, NULL);
  return count;
}

static void release_workers(void) {
  atomic_store(&release_held, 1);
  while (atomic_load(&held) > 0) nanosleep(&(struct timespec){0, 100000}, NULL);
  atomic_store(&release_held, 0);
}

/* A job of no work, from another thread: it completes unless a held worker holds the pool's lock
 * (ThreadSanitizer delivers a signal at its next interceptor, which may be the lock's). */
static atomic_bool probed;

static void no_work(void *env, int64_t lo, int64_t hi) {
  (void)env, (void)lo, (void)hi;
}

static void *probe_pool(void *pool) {
  cn_pool_for(pool, 2, no_work, NULL);
  atomic_store(&probed, true);
  return NULL;
}

/* Holds the pool's workers (hold_new_threads) where they hold no lock of it: a held worker found
 * holding one (a job from another thread does not complete within a second) is released and the
 * workers held again. Returns how many are held, -1 if it never succeeds. */
static int hold_workers(cn_pool *pool, const long *before, int n_before, const long *after,
                        int n_after) {
  for (int attempt = 0; attempt < 10; attempt++) {
    int count = hold_new_threads(before, n_before, after, n_after);
    pthread_t probe;
    atomic_store(&probed, false);
    if (pthread_create(&probe, NULL, probe_pool, pool) != 0) return -1;
    for (int ms = 0; ms < 1000 && !atomic_load(&probed); ms++)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
    bool free_lock = atomic_load(&probed);
    if (!free_lock) release_workers();
    pthread_join(probe, NULL);
    if (free_lock) return count;
  }
  return -1;
}

enum { MAX_CALLS = 8 };
typedef struct {
  cn_pool *pool;
  atomic_int calls;
  struct {
    int64_t lo, hi;
    pthread_t thread;
    void *scratch;
  } call[MAX_CALLS];
} call_log;

static void log_call(void *env, int64_t lo, int64_t hi) {
  call_log *log = env;
  int c = atomic_fetch_add(&log->calls, 1);
  if (c >= MAX_CALLS) return;
  log->call[c].lo = lo;
  log->call[c].hi = hi;
  log->call[c].thread = pthread_self();
  log->call[c].scratch = cn_pool_scratch(log->pool, 64);
}

/* The same, a loop of its own for the pool's records: its first run is shared, not alone. */
static void log_held_call(void *env, int64_t lo, int64_t hi) {
  log_call(env, lo, hi);
}

/* The calls of log, one per chunk of `bounds` (chunk k [bounds[k], bounds[k + 1])), in any order;
 * each chunk's scratch into scratch[k]. */
static void check_chunks(const call_log *log, int chunks, const int64_t *bounds, void **scratch,
                         bool on_caller) {
  CHECK_INT(atomic_load(&log->calls), chunks);
  for (int k = 0; k < chunks; k++) {
    int found = 0;
    for (int c = 0; c < atomic_load(&log->calls) && c < MAX_CALLS; c++)
      if (log->call[c].lo == bounds[k] && log->call[c].hi == bounds[k + 1]) {
        found++;
        scratch[k] = log->call[c].scratch;
        if (on_caller) CHECK(pthread_equal(log->call[c].thread, pthread_self()));
      }
    CHECK_MSG(found == 1, "chunk [%lld, %lld) ran %d times", (long long)bounds[k],
              (long long)bounds[k + 1], found);
  }
}

static void test_held_workers(void) {
  struct sigaction act = {.sa_handler = hold};
  sigemptyset(&act.sa_mask);
  CHECK_INT(sigaction(SIGUSR1, &act, NULL), 0);
  signal(SIGALRM, stalled);
  cn_ctx *ctx = cn_ctx_create();
  /* n = 7 on 2 threads: [0, 4) [4, 7); n = 5 on 3 threads: [0, 2) [2, 4) [4, 5) */
  static const int64_t bounds2[] = {0, 4, 7}, bounds3[] = {0, 2, 4, 5};
  for (int threads = 2; threads <= 3; threads++) {
    const int64_t *bounds = threads == 2 ? bounds2 : bounds3;
    int64_t n = bounds[threads];
    long before[MAX_THREADS], after[MAX_THREADS];
    int n_before = list_threads(before);
    cn_pool *pool = cn_pool_create(ctx, threads);
    CHECK(pool != NULL);
    if (!pool) continue;
    int n_after = list_threads(after);
    if (n_before < 0 || n_after < 0) {
      fprintf(stderr, "test_parallel: no /proc/self/task, workers not held\n");
      cn_pool_destroy(pool);
      break;
    }
    call_log log = {.pool = pool};
    void *free_scratch[3], *held_scratch[3];
    cn_pool_for(pool, n, log_call, &log);
    check_chunks(&log, threads, bounds, free_scratch, false);
    alarm(60); /* a pool that waits for its held workers never returns */
    CHECK_INT(hold_workers(pool, before, n_before, after, n_after), threads - 1);
    /* twice shared (the first run of a loop is not timed), the caller taking every chunk */
    for (int run = 0; run < 2; run++) {
      log = (call_log){.pool = pool};
      cn_pool_for(pool, n, log_held_call, &log);
      check_chunks(&log, threads, bounds, held_scratch, true);
      for (int k = 0; k < threads; k++) CHECK(held_scratch[k] == free_scratch[k]);
    }
    /* sharing had friction (the caller ran more than its chunk): the next run is tried alone,
     * one call over [0, n) on the caller with chunk 0's scratch, as on one thread */
    log = (call_log){.pool = pool};
    cn_pool_for(pool, n, log_held_call, &log);
    int64_t whole[] = {0, n};
    void *alone_scratch;
    check_chunks(&log, 1, whole, &alone_scratch, true);
    CHECK(alone_scratch == free_scratch[0]);
    /* the same function at another site (the GEMM library's task function runs every GEMM) has
     * a record of its own: its first run is shared, not alone */
    static const char other_site;
    log = (call_log){.pool = pool};
    cn_pool_for_site(pool, n, log_held_call, &log, &other_site);
    check_chunks(&log, threads, bounds, held_scratch, true);
    alarm(0);
    /* released, the workers find the jobs they slept through done and take the next ones */
    release_workers();
    for (int64_t size = 0; size <= 64; size++) check_cover(pool, size);
    cn_pool_destroy(pool);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Procedures ---- */

static void fill(cn_node *n, int seed) {
  size_t count = 1;
  for (int d = 0; d < n->rank; d++) count *= (size_t)n->dims[d];
  double *v = malloc(count * sizeof *v);
  CHECK(v != NULL);
  if (!v) return;
  uint32_t s = (uint32_t)seed * 2654435761u + 1;
  for (size_t x = 0; x < count; x++) {
    s = s * 1664525u + 1013904223u;
    v[x] = (double)(s >> 8) / (1 << 24) * 2 - 1;
  }
  CHECK_INT(cn_node_set_values(n, false, v, count), CN_OK);
  free(v);
}

static cn_ll_stmt *loop(cn_ctx *ctx, cn_symbol s, int64_t to, unsigned marks, cn_ll_stmt *body) {
  return cn_lb_marks(cn_lb_loop(ctx, s, 0, to, body), marks);
}

static cn_ll_expr *get2(cn_ctx *ctx, int param, cn_symbol r, cn_symbol s) {
  return cn_lb_get(ctx, param, CN_PREC_SINGLE,
                   cn_lb_indices(ctx, 2, cn_index_iter(r), cn_index_iter(s)));
}

/* c[r, s] =: a[r, t] * b[t, s] over 67 x 45 x 93, loops r, t, s (s innermost, unit stride). */
static cn_ll_proc *matmul(cn_ctx *ctx, cn_node **nodes, unsigned par, unsigned vec) {
  cn_symbol r = cn_symbol_create(ctx, "r", 67), t = cn_symbol_create(ctx, "t", 45),
            s = cn_symbol_create(ctx, "s", 93);
  const cn_prec single = CN_PREC_SINGLE;
  cn_index *c_rs = cn_lb_indices(ctx, 2, cn_index_iter(r), cn_index_iter(s));
  cn_ll_stmt *prefill = loop(
      ctx, r, 67, par, loop(ctx, s, 93, vec, cn_lb_set(ctx, 2, c_rs, cn_lb_num(ctx, single, 0))));
  cn_ll_expr *product =
      cn_lb_op(ctx, CN_OP_MUL, single, get2(ctx, 0, r, t), get2(ctx, 1, t, s), NULL);
  cn_ll_stmt *acc =
      loop(ctx, r, 67, par,
           loop(ctx, t, 45, 0,
                loop(ctx, s, 93, vec, cn_lb_accum(ctx, 2, single, c_rs, CN_OP_ADD, product))));
  cn_ll_param params[3] = {{nodes[0], false}, {nodes[1], false}, {nodes[2], false}};
  return cn_lb_proc(ctx, "mm", cn_lb_seq(ctx, 2, prefill, acc), 3, params, 0, NULL);
}

/* c[i, j] := a[i, j] + 3 * b[i, j] over 1000 x 1000. */
static cn_ll_proc *elementwise(cn_ctx *ctx, cn_node **nodes, int64_t n, unsigned par,
                               unsigned vec) {
  cn_symbol i = cn_symbol_create(ctx, "i", n), j = cn_symbol_create(ctx, "j", n);
  const cn_prec single = CN_PREC_SINGLE;
  cn_ll_expr *value = cn_lb_op(
      ctx, CN_OP_ADD, single, get2(ctx, 0, i, j),
      cn_lb_op(ctx, CN_OP_MUL, single, cn_lb_num(ctx, single, 3), get2(ctx, 1, i, j), NULL), NULL);
  cn_ll_stmt *body = loop(
      ctx, i, n, par,
      loop(ctx, j, n, vec,
           cn_lb_set(ctx, 2, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j)), value)));
  cn_ll_param params[3] = {{nodes[0], false}, {nodes[1], false}, {nodes[2], false}};
  return cn_lb_proc(ctx, "ew", body, 3, params, 0, NULL);
}

/* v[b, i] =: sum over j of m[b, i, j], 3 x 301 x 257, the b loop outside the parallel i loop. */
static cn_ll_proc *reduction(cn_ctx *ctx, cn_node **nodes, unsigned par) {
  cn_symbol b = cn_symbol_create(ctx, "b", 3), i = cn_symbol_create(ctx, "i", 301),
            j = cn_symbol_create(ctx, "j", 257);
  const cn_prec single = CN_PREC_SINGLE;
  cn_index *v_bi = cn_lb_indices(ctx, 2, cn_index_iter(b), cn_index_iter(i));
  cn_ll_expr *m = cn_lb_get(
      ctx, 0, single, cn_lb_indices(ctx, 3, cn_index_iter(b), cn_index_iter(i), cn_index_iter(j)));
  cn_ll_stmt *body =
      loop(ctx, b, 3, 0,
           loop(ctx, i, 301, par,
                cn_lb_seq(ctx, 2, cn_lb_set(ctx, 1, v_bi, cn_lb_num(ctx, single, 0)),
                          loop(ctx, j, 257, 0, cn_lb_accum(ctx, 1, single, v_bi, CN_OP_ADD, m)))));
  cn_ll_param params[2] = {{nodes[0], false}, {nodes[1], false}};
  return cn_lb_proc(ctx, "red", body, 2, params, 0, NULL);
}

/* A routine of kernels (more than the 32 top-level statements of one function, cgen.c) over
 * e x e cells: y := x; 36 times y := y * 0.5 + x, marked `par` on i, unmarked, marked `par` on j
 * in turn, so that statements equal but for their parallel marks must not share a kernel;
 * w[b, i] =: sum over j of y[i, j] with the unmarked b loop outside the `par` i loop (an
 * enclosing loop variable in the environment); y[i, j] := y[i, j] + w[s, i] with s a static index
 * (a kernel parameter in the environment). Params x, w, y (the output last); free symbol s. */
static cn_ll_proc *kernels(cn_ctx *ctx, cn_node **nodes, int64_t e, unsigned par) {
  cn_symbol i = cn_symbol_create(ctx, "i", e), j = cn_symbol_create(ctx, "j", e),
            b = cn_symbol_create(ctx, "b", 3), s = cn_symbol_create(ctx, "s", 3);
  const cn_prec single = CN_PREC_SINGLE;
  cn_ll_stmt *items[40];
  int n = 0;
  cn_index *y_ij = cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j));
  items[n++] =
      loop(ctx, i, e, par, loop(ctx, j, e, 0, cn_lb_set(ctx, 2, y_ij, get2(ctx, 0, i, j))));
  for (int k = 0; k < 36; k++) {
    cn_ll_expr *half =
        cn_lb_op(ctx, CN_OP_MUL, single, get2(ctx, 2, i, j), cn_lb_num(ctx, single, 0.5), NULL);
    cn_ll_expr *value = cn_lb_op(ctx, CN_OP_ADD, single, half, get2(ctx, 0, i, j), NULL);
    items[n++] = loop(ctx, i, e, k % 3 == 0 ? par : 0,
                      loop(ctx, j, e, k % 3 == 2 ? par : 0, cn_lb_set(ctx, 2, y_ij, value)));
  }
  cn_index *w_bi = cn_lb_indices(ctx, 2, cn_index_iter(b), cn_index_iter(i));
  items[n++] =
      loop(ctx, b, 3, 0,
           loop(ctx, i, e, par,
                cn_lb_seq(ctx, 2, cn_lb_set(ctx, 1, w_bi, cn_lb_num(ctx, single, 0)),
                          loop(ctx, j, e, 0,
                               cn_lb_accum(ctx, 1, single, w_bi, CN_OP_ADD, get2(ctx, 2, i, j))))));
  items[n++] =
      loop(ctx, i, e, par,
           loop(ctx, j, e, 0, cn_lb_accum(ctx, 2, single, y_ij, CN_OP_ADD, get2(ctx, 1, s, i))));
  cn_ll_param params[3] = {{nodes[0], false}, {nodes[1], false}, {nodes[2], false}};
  return cn_lb_proc(ctx, "ks", cn_lb_seq_array(ctx, n, items), 3, params, 1, &s);
}

/* ---- Running ---- */

/* The free-symbol values of every run: the static index s of `kernels` (the other procedures
 * have no free symbol and read none). */
static const int64_t sym_values[1] = {2};

/* Compiles proc, runs it `runs` times (with the pool when not NULL) and copies the last param's
 * buffer to out (bytes). */
static void run(cn_ctx *ctx, const cn_ll_proc *proc, cn_pool *pool, int runs, void *out,
                size_t bytes) {
  void *compiled = NULL;
  cn_status st = cn_backend_c.compile(ctx, proc, &compiled, NULL);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  if (st != CN_OK) return;
  void *bufs[3];
  for (int k = 0; k < proc->n_params; k++)
    bufs[k] = cn_node_buffer(proc->params[k].node, proc->params[k].merge);
  cn_parallel par = cn_pool_parallel(pool);
  int failed = 0;
  for (int x = 0; x < runs; x++)
    failed += (pool ? cn_backend_c.run_parallel(ctx, compiled, bufs, sym_values, &par)
                    : cn_backend_c.run(ctx, compiled, bufs, sym_values)) != CN_OK;
  CHECK_INT(failed, 0);
  cn_backend_c.release(compiled);
  memcpy(out, bufs[proc->n_params - 1], bytes);
}

/* Runs `plain` once on one thread and `marked` on 1, 2 and 3 threads: the same bits. */
static void check_same_bits(cn_ctx *ctx, const cn_ll_proc *plain, const cn_ll_proc *marked,
                            cn_node *out) {
  size_t bytes = cn_node_buffer_cells(out) * cn_prec_table[out->prec].bytes;
  unsigned char *want = malloc(bytes), *got = malloc(bytes);
  CHECK(want && got);
  if (want && got) {
    run(ctx, plain, NULL, 1, want, bytes);
    for (int threads = 1; threads <= 3; threads++) {
      memset(cn_node_buffer(out, false), 0xff, bytes); /* every cell must be written again */
      cn_pool *pool = cn_pool_of(ctx, threads);
      CHECK(pool != NULL);
      if (pool) run(ctx, marked, pool, 1, got, bytes);
      CHECK_MSG(memcmp(want, got, bytes) == 0, "'%s' on %d threads", marked->name, threads);
    }
    float sample;
    memcpy(&sample, want + bytes / 2 / sizeof sample * sizeof sample, sizeof sample);
    CHECK(sample == sample && sample != 0); /* computed, not a NaN fill */
  }
  free(want);
  free(got);
}

static cn_ctx *test_ctx(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(ctx != NULL);
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", cache_dir), CN_OK);
  return ctx;
}

static void test_matmul(void) {
  cn_ctx *ctx = test_ctx();
  cn_node *n[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)67, (int64_t)45),
                   node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)45, (int64_t)93),
                   node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)67, (int64_t)93)};
  fill(n[0], 1);
  fill(n[1], 2);
  check_same_bits(ctx, matmul(ctx, n, 0, 0), matmul(ctx, n, CN_LL_PARALLEL, CN_LL_VECTOR), n[2]);
  cn_ctx_destroy(ctx);
}

static void test_elementwise(void) {
  cn_ctx *ctx = test_ctx();
  int64_t e = 1000;
  cn_node *n[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, e, e), node(ctx, "b", CN_PREC_SINGLE, 2, e, e),
                   node(ctx, "c", CN_PREC_SINGLE, 2, e, e)};
  fill(n[0], 3);
  fill(n[1], 4);
  cn_ll_proc *plain = elementwise(ctx, n, e, 0, 0);
  check_same_bits(ctx, plain, elementwise(ctx, n, e, CN_LL_PARALLEL, CN_LL_VECTOR), n[2]);
  /* The unmarked text has neither pool nor pragma. */
  cn_sbuf sb = {0};
  CHECK_INT(cn_cgen_source(ctx, plain, &sb), CN_OK);
  CHECK(sb.data && !strstr(sb.data, "cn_par") && !strstr(sb.data, "omp simd"));
  cn_sbuf_free(&sb);
  cn_ctx_destroy(ctx);
}

static void test_reduction(void) {
  cn_ctx *ctx = test_ctx();
  cn_node *n[2] = {node(ctx, "m", CN_PREC_SINGLE, 3, (int64_t)3, (int64_t)301, (int64_t)257),
                   node(ctx, "v", CN_PREC_SINGLE, 2, (int64_t)3, (int64_t)301)};
  fill(n[0], 5);
  check_same_bits(ctx, reduction(ctx, n, 0), reduction(ctx, n, CN_LL_PARALLEL), n[1]);
  cn_ctx_destroy(ctx);
}

static int count_occurrences(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p++) n++;
  return n;
}

/* The routine of kernels: its parallel loops are outlined from the kernels (the pool reaches them
 * through the steps), the statements differing by a parallel mark get two kernels, and the result
 * on 1, 2 and 3 threads is the unmarked routine's and the interpreter's, bit for bit. */
static void test_kernels(void) {
  cn_ctx *ctx = test_ctx();
  int64_t e = 256;
  cn_node *n[3] = {node(ctx, "x", CN_PREC_SINGLE, 2, e, e), node(ctx, "w", CN_PREC_SINGLE, 2, 3, e),
                   node(ctx, "y", CN_PREC_SINGLE, 2, e, e)};
  fill(n[0], 8);
  cn_ll_proc *plain = kernels(ctx, n, e, 0), *marked = kernels(ctx, n, e, CN_LL_PARALLEL);
  check_same_bits(ctx, plain, marked, n[2]);

  cn_sbuf sb = {0};
  CHECK_INT(cn_cgen_source(ctx, marked, &sb), CN_OK);
  const char *text = sb.data ? sb.data : "";
  /* y := x, the three updates, the reduction, the static-index update */
  CHECK_INT(count_occurrences(text, "CN_KERNEL void cn_kernel_"), 6);
  CHECK_INT(count_occurrences(text, "const cn_par_t *cn_par) {\n"), 7); /* 5 kernels, 2 steps */
  CHECK_INT(count_occurrences(text, "static void cn_body_"), 5);
  const char *body = strstr(text, "static void cn_body_0(");
  const char *kernel = strstr(text, "CN_KERNEL void cn_kernel_0(");
  const char *pool = strstr(text, "cn_par->pool_for(cn_par->pool, cn_to - cn_from, cn_body_0, ");
  CHECK(body && kernel && pool && body < kernel && kernel < pool);
  CHECK_HAS(text, "CN_KERNEL void cn_kernel_0(float *restrict y_");
  /* the loop runs in a function whose buffers are restrict parameters (what gcc vectorizes) */
  CHECK_HAS(text, "static void cn_range_0(float *restrict y_");
  CHECK_HAS(text, "  int64_t i;\n  int64_t cn_from;\n};\n"); /* the j-parallel update's i */
  CHECK_HAS(text, "  int64_t b;\n  int64_t cn_from;\n};\n"); /* the reduction's outer loop */
  CHECK_HAS(text, "  int64_t s;\n  int64_t cn_from;\n};\n"); /* the static index */
  CHECK_HAS(text,
            "void ks_entry_par(void *const *buffers, const int64_t *syms, const cn_par_t "
            "*par) {\n  cn_step_0(buffers, syms, par);\n  cn_step_1(buffers, syms, par);\n}\n");
  CHECK_HAS(text, "  ks_entry_par(buffers, syms, NULL);\n");
  cn_sbuf_free(&sb);
  /* The unmarked routine: every update shares one kernel, no pool anywhere. */
  CHECK_INT(cn_cgen_source(ctx, plain, &sb), CN_OK);
  CHECK(sb.data && !strstr(sb.data, "cn_par"));
  CHECK_INT(count_occurrences(sb.data ? sb.data : "", "CN_KERNEL void cn_kernel_"), 4);
  cn_sbuf_free(&sb);

  /* The interpreter runs the marked routine sequentially: the same bits. */
  size_t bytes = cn_node_buffer_cells(n[2]) * sizeof(float);
  unsigned char *want = malloc(bytes);
  void *compiled = NULL;
  CHECK(want != NULL);
  if (want) {
    run(ctx, plain, NULL, 1, want, bytes);
    memset(cn_node_buffer(n[2], false), 0xff, bytes);
    cn_status st = cn_backend_interp.compile(ctx, marked, &compiled, NULL);
    CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
    void *bufs[3] = {cn_node_buffer(n[0], false), cn_node_buffer(n[1], false),
                     cn_node_buffer(n[2], false)};
    if (st == CN_OK) CHECK_INT(cn_backend_interp.run(ctx, compiled, bufs, sym_values), CN_OK);
    if (st == CN_OK) cn_backend_interp.release(compiled);
    CHECK(memcmp(want, bufs[2], bytes) == 0);
  }
  free(want);
  cn_ctx_destroy(ctx);
}

/* A small parallel routine run 10 000 times on 3 threads: no error, the plain result. */
static void test_many_runs(void) {
  cn_ctx *ctx = test_ctx();
  int64_t e = 8;
  cn_node *n[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, e, e), node(ctx, "b", CN_PREC_SINGLE, 2, e, e),
                   node(ctx, "c", CN_PREC_SINGLE, 2, e, e)};
  fill(n[0], 6);
  fill(n[1], 7);
  float want[64], got[64];
  run(ctx, elementwise(ctx, n, e, 0, 0), NULL, 1, want, sizeof want);
  memset(cn_node_buffer(n[2], false), 0, sizeof got);
  cn_pool *pool = cn_pool_of(ctx, 3);
  CHECK(pool != NULL);
  if (pool) run(ctx, elementwise(ctx, n, e, CN_LL_PARALLEL, 0), pool, 10000, got, sizeof got);
  CHECK(memcmp(want, got, sizeof got) == 0);
  cn_ctx_destroy(ctx);
}

/* The vector-marked elementwise kernel compiled with -S -O3 -march=native: its assembly uses ymm
 * or zmm registers (skipped on a CPU without AVX2, where -march=native has none). */
static void test_vector_asm(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (!__builtin_cpu_supports("avx2")) return;
  cn_ctx *ctx = test_ctx();
  int64_t e = 64;
  cn_node *n[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, e, e), node(ctx, "b", CN_PREC_SINGLE, 2, e, e),
                   node(ctx, "c", CN_PREC_SINGLE, 2, e, e)};
  cn_sbuf sb = {0};
  CHECK_INT(cn_cgen_source(ctx, elementwise(ctx, n, e, 0, CN_LL_VECTOR), &sb), CN_OK);
  CHECK(sb.data && strstr(sb.data, "#pragma omp simd\n    for (int64_t j = 0;"));
  char c_path[256], s_path[256], cmd[1024];
  snprintf(c_path, sizeof c_path, "%s/vec.c", cache_dir);
  snprintf(s_path, sizeof s_path, "%s/vec.s", cache_dir);
  FILE *f = fopen(c_path, "w");
  CHECK(f != NULL);
  if (f && sb.data) {
    fputs(sb.data, f);
    fclose(f);
    const char *cc = getenv("CC");
    snprintf(cmd, sizeof cmd, "%s -S -O3 -march=native -fopenmp-simd -std=c11 -o %s %s",
             cc && *cc ? cc : "cc", s_path, c_path);
    CHECK_INT(system(cmd), 0);
    f = fopen(s_path, "r");
    CHECK(f != NULL);
    static char text[1 << 20];
    size_t len = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[len] = 0;
    const char *kernel = strstr(text, "ew_entry:");
    CHECK(kernel != NULL);
    CHECK(kernel && (strstr(kernel, "%ymm") || strstr(kernel, "%zmm")));
  }
  cn_sbuf_free(&sb);
  cn_ctx_destroy(ctx);
#endif
}

static void test_threads_option(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "threads", "3"), CN_OK);
  CHECK_STR(cn_ctx_option(ctx, "threads"), "3");
  CHECK_INT(cn_ctx_set_option(ctx, "threads", "0"), CN_ERR_INVALID);
  CHECK_INT(cn_ctx_set_option(ctx, "threads", "2x"), CN_ERR_INVALID);
  CHECK_INT(cn_ctx_set_option(ctx, "threads", NULL), CN_OK);
  const char *dflt = cn_ctx_option(ctx, "threads");
  CHECK(dflt != NULL && atoi(dflt) >= 1);
  cn_ctx_destroy(ctx);
}

int main(void) {
  CHECK(mkdtemp(cache_dir) != NULL);
  test_pool();
  test_scratch();
  test_held_workers();
  test_matmul();
  test_elementwise();
  test_reduction();
  test_kernels();
  test_many_runs();
  test_vector_asm();
  test_threads_option();
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", cache_dir);
  CHECK_INT(system(cmd), 0);
  CHECK_DONE();
}
