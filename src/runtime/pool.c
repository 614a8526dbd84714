/* The worker pool of parallel loops (pool.h).
 *
 * A job is published by moving `generation` (to g) after its fields and its chunks' claim slots:
 * slot k holds 2g while chunk k of job g is unclaimed and 2g + 1 once a thread has claimed it
 * (a compare-and-swap), so each chunk runs exactly once, and a thread still holding an older
 * generation (descheduled through a whole job) never claims a chunk of a later one: no slot holds
 * 2g again. The caller claims chunk 0 as it publishes, worker k tries chunk k first, and a thread
 * done with its own takes the chunks nobody has claimed: a worker that does not get to run (its
 * core taken by another process) has its chunk run by the caller instead of being waited for.
 * The job is done when `unfinished` (its chunks not yet run) reaches 0; the caller waits for that,
 * not for the workers, so a worker that wakes late finds nothing to claim and waits again.
 *
 * Sharing does not always pay: a worker that claimed a chunk and then lost its core makes the
 * caller wait (with another process busy on one of two cores, the MLP step ran 2.5 times slower
 * on two threads than on one), and a small loop gains less than waking a worker costs. So the
 * caller times each loop (a record per function and size), shared and alone (one call over
 * [0, n) on the caller, as a pool of one thread runs it), and runs it the preferred way: shared
 * only when that saves an eighth of alone's time. Alone is first tried after a shared run with
 * friction (the caller ran more than its chunk or waited over an eighth of its own time), so a loop
 * that shares smoothly never runs alone; the other way is tried again after TRY_MIN runs, twice as
 * many each time the preference holds, up to TRY_MAX (sharing over two runs, the first waking the
 * workers, untimed). A loop moves to the caller alone within a few runs of a core being taken and
 * back at its next trial once it is free. Which thread runs a chunk changes, never the chunk's
 * range, and the scratch follows the chunk (chunk k's buffer); alone, the loop is one chunk 0 over
 * [0, n). Parallel marks promise independent iterations, so the bits are the same either way.
 *
 * Waiting spins (SPIN_ROUNDS, some tens of microseconds) before sleeping on a condition variable:
 * a training step runs dozens of parallel loops a few hundred microseconds apart, and waking a
 * sleeping thread costs about as much as a small loop. Every YIELD_ROUNDS the spinner yields its
 * core to any thread waiting for it and reads the clock: if more than PREEMPTED_NS passed, it was
 * descheduled, its core is wanted elsewhere, and it sleeps at once instead of spinning on.
 * Generation moves and `unfinished` reaching 0 happen under `lock` too, with a broadcast /
 * signal, so a thread that stopped spinning and sleeps is always woken. A thread knows its chunk
 * while it runs one (thread-local), for the scratch; outside any chunk only the caller can ask
 * (chunk 0's buffer), a context being used by one thread at a time.
 * Invariants: only the submitting thread, holding `submit`, writes a job and the loop records,
 * and it writes a job only once the previous job's chunks have all finished; a thread reads a
 * job's fields only after claiming one of its chunks (the claim acquires the slot the caller
 * released after writing them), so a job's fields never change under a running chunk. `stop` is
 * set once, by cn_pool_destroy, which then joins every worker it started. A worker counts
 * generations from 0, not from what it first reads: a job may be published before it first looks.
 */
#include "runtime/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* Rounds of checking before a waiting thread sleeps; each round is a CPU pause (tens of cycles). */
#define SPIN_ROUNDS 4096
/* Rounds between the yields and clock reads of a spinning thread (a few microseconds), and the
 * time between two reads that means it was descheduled (an order of magnitude more). */
#define YIELD_ROUNDS 256
#define PREEMPTED_NS 50000
/* The loops timed (2^RECORD_BITS, a loop in one of RECORD_WAYS slots from the hash of its function
 * and size), and the runs of a loop's preferred way before the other is tried again: TRY_MIN
 * after a change of way, doubling while it holds. */
#define RECORD_BITS 8
#define RECORD_WAYS 4
#define TRY_MIN     16
#define TRY_MAX     256

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One loop's times, and when the way it does not prefer is tried again. */
typedef enum { SHARED, ALONE } run_way;
typedef struct {
  const void *site; /* the loop's function, or the site its caller names (cn_pool_for_site) */
  int64_t n;
  uint64_t ns[2]; /* per way: a run's wall time, smoothed (0: not timed yet) */
  int runs_left;  /* runs of the preferred way before the other may be tried */
  int interval;   /* what runs_left restarts from */
  bool warm;      /* run before: the first run (cold caches, first allocations) is not timed */
  bool woken;     /* a trial of sharing has run once, untimed, to wake the workers */
  bool friction;  /* in the last shared run (run_shared) */
} loop_record;

struct cn_pool {
  pthread_mutex_t lock, submit;
  pthread_cond_t wake, done;
  pthread_t *workers;
  int n_workers;
  atomic_uint_fast64_t generation;
  atomic_int unfinished;
  atomic_bool stop;
  /* per chunk (at most one per thread): 2g unclaimed in job g, 2g + 1 claimed */
  atomic_uint_fast64_t *slots;
  /* the current job */
  cn_pool_fn fn;
  void *env;
  int64_t n;
  int chunks;
  loop_record records[1 << RECORD_BITS];
  /* per chunk index: a buffer kept across jobs (cn_pool_scratch) */
  struct {
    void *data;
    size_t size;
  } * scratch;
};

typedef struct {
  cn_pool *pool;
  int index; /* 1-based: chunk 0 is the caller's */
} worker_arg;

/* Set on a thread while it runs a chunk, so that nested calls run inline instead of waiting on
 * the pool they are part of; with the pool and the chunk's index, for the scratch. */
static _Thread_local bool in_chunk;
static _Thread_local const cn_pool *chunk_pool;
static _Thread_local int chunk_index;

/* Runs [lo, hi) of the current job as chunk k (for the scratch). */
static void run_range(const cn_pool *pool, int k, int64_t lo, int64_t hi) {
  in_chunk = true;
  chunk_pool = pool;
  chunk_index = k;
  pool->fn(pool->env, lo, hi);
  in_chunk = false;
  chunk_pool = NULL;
}

/* Runs chunk k of the current job. */
static void run_chunk(const cn_pool *pool, int k) {
  int64_t q = pool->n / pool->chunks, r = pool->n % pool->chunks;
  int64_t lo = k * q + (k < r ? k : r);
  run_range(pool, k, lo, lo + q + (k < r ? 1 : 0));
}

/* Claims and runs every chunk of job g nobody has claimed, trying chunk `first` first; returns
 * how many it ran, and whether one was the job's last in *last (when not NULL). */
static int run_unclaimed(cn_pool *pool, uint_fast64_t g, int first, bool *last) {
  int slots = pool->n_workers + 1, ran = 0;
  for (int i = 0; i < slots; i++) {
    int k = (first + i) % slots;
    uint_fast64_t open = 2 * g;
    if (atomic_load_explicit(&pool->slots[k], memory_order_relaxed) == open &&
        atomic_compare_exchange_strong_explicit(&pool->slots[k], &open, open + 1,
                                                memory_order_acquire, memory_order_relaxed)) {
      run_chunk(pool, k);
      ran++;
      /* release: the chunk's writes before the caller's return; acquire: the last sees all */
      if (atomic_fetch_sub_explicit(&pool->unfinished, 1, memory_order_acq_rel) == 1 && last)
        *last = true;
    }
  }
  return ran;
}

/* One round of a waiting thread's spin (`mark`: the clock at its last yield); false when it
 * should sleep instead: its rounds are spent, or it was descheduled since the last yield. */
static bool spin(int round, uint64_t *mark) {
  if (round >= SPIN_ROUNDS) return false;
  if (round % YIELD_ROUNDS != YIELD_ROUNDS - 1) {
    cpu_relax();
    return true;
  }
  sched_yield();
  uint64_t t = now_ns(), last = *mark;
  *mark = t;
  return t - last <= PREEMPTED_NS;
}

/* Waits until the generation differs from `seen` or the pool stops: spinning first, then asleep.
 * Returns the generation. */
static uint_fast64_t await_job(cn_pool *pool, uint_fast64_t seen) {
  uint64_t mark = now_ns();
  for (int round = 0; spin(round, &mark); round++) {
    uint_fast64_t g = atomic_load_explicit(&pool->generation, memory_order_acquire);
    if (g != seen || atomic_load_explicit(&pool->stop, memory_order_acquire)) return g;
  }
  pthread_mutex_lock(&pool->lock);
  while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
    pthread_cond_wait(&pool->wake, &pool->lock);
  pthread_mutex_unlock(&pool->lock);
  return atomic_load(&pool->generation);
}

static void *worker_main(void *arg) {
  cn_pool *pool = ((worker_arg *)arg)->pool;
  int index = ((worker_arg *)arg)->index;
  free(arg);
  uint_fast64_t seen = 0; /* every pool starts at generation 0 */
  for (;;) {
    seen = await_job(pool, seen);
    if (atomic_load(&pool->stop)) break;
    /* The thread that ran the last chunk wakes the submitter, under the lock it sleeps with. */
    bool last = false;
    run_unclaimed(pool, seen, index, &last);
    if (last) {
      pthread_mutex_lock(&pool->lock);
      pthread_cond_signal(&pool->done);
      pthread_mutex_unlock(&pool->lock);
    }
  }
  return NULL;
}

/* Starts up to `count` workers; returns how many started. */
static int start_workers(cn_pool *pool, int count) {
  int started = 0;
  while (started < count) {
    worker_arg *arg = malloc(sizeof *arg);
    if (!arg) break;
    *arg = (worker_arg){pool, started + 1};
    if (pthread_create(&pool->workers[started], NULL, worker_main, arg) != 0) {
      free(arg);
      break;
    }
    started++;
  }
  return started;
}

cn_pool *cn_pool_create(cn_ctx *ctx, int threads) {
  CN_ASSERT(threads >= 1);
  cn_pool *pool = cn_calloc(ctx, 1, sizeof *pool);
  if (!pool) return NULL;
  pool->workers = cn_calloc(ctx, (size_t)threads, sizeof *pool->workers);
  pool->slots = pool->workers ? cn_calloc(ctx, (size_t)threads, sizeof *pool->slots) : NULL;
  pool->scratch = pool->slots ? cn_calloc(ctx, (size_t)threads, sizeof *pool->scratch) : NULL;
  if (!pool->scratch) {
    free(pool->slots);
    free(pool->workers);
    free(pool);
    return NULL;
  }
  pthread_mutex_init(&pool->lock, NULL);
  pthread_mutex_init(&pool->submit, NULL);
  pthread_cond_init(&pool->wake, NULL);
  pthread_cond_init(&pool->done, NULL);
  pool->n_workers = start_workers(pool, threads - 1);
  return pool;
}

void cn_pool_destroy(cn_pool *pool) {
  if (!pool) return;
  pthread_mutex_lock(&pool->lock);
  atomic_store(&pool->stop, true);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  for (int k = 0; k < pool->n_workers; k++) pthread_join(pool->workers[k], NULL);
  pthread_cond_destroy(&pool->done);
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->submit);
  pthread_mutex_destroy(&pool->lock);
  for (int k = 0; k <= pool->n_workers; k++) free(pool->scratch[k].data);
  free(pool->scratch);
  free(pool->slots);
  free(pool->workers);
  free(pool);
}

int cn_pool_threads(const cn_pool *pool) {
  return pool->n_workers + 1;
}

/* Publishes the current job (generation g) to the workers, runs chunk 0 and whatever chunks
 * nobody has claimed, and waits until every chunk has finished. True when sharing had friction:
 * the caller ran more than its chunk, or waited for the others more than an eighth of its own
 * time (a worker late or slowed, or chunks of unequal work). */
static bool run_shared(cn_pool *pool, uint_fast64_t g, uint64_t start) {
  atomic_store_explicit(&pool->unfinished, pool->chunks, memory_order_relaxed);
  atomic_store_explicit(&pool->slots[0], 2 * g + 1, memory_order_relaxed); /* the caller's */
  for (int k = 1; k < pool->chunks; k++)
    atomic_store_explicit(&pool->slots[k], 2 * g, memory_order_release);
  pthread_mutex_lock(&pool->lock);
  atomic_store_explicit(&pool->generation, g, memory_order_release);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  run_chunk(pool, 0);
  atomic_fetch_sub_explicit(&pool->unfinished, 1, memory_order_acq_rel);
  int ran = 1 + run_unclaimed(pool, g, 1, NULL);
  uint64_t mark = now_ns(), own = mark - start;
  for (int round = 0; atomic_load(&pool->unfinished) > 0 && spin(round, &mark); round++) {
  }
  if (atomic_load(&pool->unfinished) > 0) {
    pthread_mutex_lock(&pool->lock);
    while (atomic_load(&pool->unfinished) > 0) pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
  }
  return ran > 1 || (now_ns() - start - own) * 8 > own;
}

/* The way to prefer for a loop as timed so far: shared unless alone was timed and sharing saves
 * less than an eighth of alone's time. A loop about as fast either way runs alone: waking a
 * worker for it costs another core's time, and, with that core taken, the caller's. */
static run_way preferred_way(const loop_record *r) {
  return r->ns[ALONE] && r->ns[ALONE] * 7 < r->ns[SHARED] * 8 ? ALONE : SHARED;
}

/* The way to run the loop of record r this time: the preferred, unless the other's trial is due
 * (after `interval` runs; alone only once the last shared run had friction). */
static run_way choose_way(loop_record *r) {
  run_way preferred = preferred_way(r);
  if (r->runs_left > 0) {
    r->runs_left--;
    return preferred;
  }
  if (preferred == ALONE) return SHARED;
  return r->friction && r->ns[SHARED] ? ALONE : SHARED;
}

/* Records a run of the loop that took `ns`. The preferred way's times are smoothed: a quarter of
 * the new one, taken as at most twice the old (a run whose thread lost its core once moves the
 * time by a quarter, a lasting slowdown by a quarter each run); a trial's replaces the other
 * way's (it was tried to see whether things changed). A trial of sharing takes two runs, the
 * first not timed: the workers have slept through the runs alone, and waking them would count
 * against sharing. The next trial comes after `interval` runs, doubled while trials confirm the
 * preference. */
static void record_run(loop_record *r, run_way way, uint64_t ns, bool friction) {
  if (!r->warm) {
    r->warm = true;
    return;
  }
  run_way preferred = preferred_way(r);
  if (way == SHARED && preferred == ALONE && !r->woken) {
    r->woken = true; /* the next run shares again, timed, the workers awake */
    return;
  }
  r->woken = false;
  bool trial = way != preferred || !r->ns[way];
  ns = ns ? ns : 1;
  uint64_t most = 2 * r->ns[way];
  r->ns[way] = trial ? ns : (3 * r->ns[way] + (ns < most ? ns : most)) / 4;
  if (way == SHARED) r->friction = friction;
  if (trial && r->ns[SHARED] && r->ns[ALONE]) {
    bool held = preferred_way(r) == preferred && r->interval;
    r->interval = !held ? TRY_MIN : r->interval < TRY_MAX ? 2 * r->interval : TRY_MAX;
    r->runs_left = r->interval;
  }
}

/* The record of the loop (site, n): found among RECORD_WAYS slots from its hash, else a fresh
 * one in the first free of them, else in place of the first. */
static loop_record *find_record(cn_pool *pool, const void *site, int64_t n) {
  /* Fibonacci hashing: the product's top bits depend on all of the site's and size's */
  uint64_t key =
      ((uint64_t)(uintptr_t)site ^ (uint64_t)n * 0xff51afd7ed558ccdu) * 0x9e3779b97f4a7c15u;
  size_t first = key >> (64 - RECORD_BITS), mask = ((size_t)1 << RECORD_BITS) - 1;
  loop_record *slot = &pool->records[first];
  for (size_t i = 0; i < RECORD_WAYS; i++) {
    loop_record *r = &pool->records[(first + i) & mask];
    if (r->site == site && r->n == n) return r;
    if (!r->site && slot->site) slot = r;
  }
  *slot = (loop_record){.site = site, .n = n};
  return slot;
}

void cn_pool_for(cn_pool *pool, int64_t n, cn_pool_fn fn, void *env) {
  cn_pool_for_site(pool, n, fn, env, (const void *)(uintptr_t)fn);
}

void cn_pool_for_site(cn_pool *pool, int64_t n, cn_pool_fn fn, void *env, const void *site) {
  if (n <= 0) return;
  int threads = pool->n_workers + 1;
  if (in_chunk || threads == 1 || n == 1) {
    fn(env, 0, n);
    return;
  }
  pthread_mutex_lock(&pool->submit);
  pool->fn = fn;
  pool->env = env;
  pool->n = n;
  pool->chunks = n < threads ? (int)n : threads;
  loop_record *r = find_record(pool, site, n);
  run_way way = choose_way(r);
  uint64_t start = now_ns();
  bool friction = false;
  if (way == SHARED)
    friction =
        run_shared(pool, atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1, start);
  else
    run_range(pool, 0, 0, n);
  record_run(r, way, now_ns() - start, friction);
  pthread_mutex_unlock(&pool->submit);
}

void *cn_pool_scratch(cn_pool *pool, size_t bytes) {
  /* outside a chunk of this pool: chunk 0's, the caller's (a context runs on one thread at a
   * time, and no chunk runs between jobs) */
  int k = chunk_pool == pool ? chunk_index : 0;
  bytes = (bytes + 63) / 64 * 64;
  if (pool->scratch[k].size < bytes) {
    free(pool->scratch[k].data);
    pool->scratch[k].data = bytes ? aligned_alloc(64, bytes) : NULL;
    pool->scratch[k].size = pool->scratch[k].data ? bytes : 0;
  }
  return pool->scratch[k].data;
}
static void pool_cleanup(void *pool) {
  cn_pool_destroy(pool);
}

cn_pool *cn_pool_of(cn_ctx *ctx, int threads) {
  cn_cleanup *owner = ctx->worker_pool;
  if (owner) {
    if (cn_pool_threads(owner->arg) == threads) return owner->arg;
    cn_pool_destroy(owner->arg);
    cn_ctx_remove_cleanup(ctx, owner);
    ctx->worker_pool = NULL;
  }
  cn_pool *pool = cn_pool_create(ctx, threads);
  if (!pool) return NULL;
  if (!(ctx->worker_pool = cn_ctx_add_cleanup(ctx, pool_cleanup, pool))) {
    cn_pool_destroy(pool);
    return NULL;
  }
  return pool;
}

static void parallel_for(void *pool, int64_t n, void (*fn)(void *env, int64_t lo, int64_t hi),
                         void *env) {
  cn_pool_for(pool, n, fn, env);
}

static void parallel_for_site(void *pool, int64_t n, void (*fn)(void *env, int64_t lo, int64_t hi),
                              void *env, const void *site) {
  cn_pool_for_site(pool, n, fn, env, site);
}

static void *parallel_scratch(void *pool, size_t bytes) {
  return cn_pool_scratch(pool, bytes);
}

cn_parallel cn_pool_parallel(cn_pool *pool) {
  return (cn_parallel){parallel_for, pool, parallel_scratch, parallel_for_site};
}
