/* The worker pool of parallel loops (pool.h).
 *
 * Workers wait until `generation` moves; each then runs its own chunk of the current job (if the
 * job has one for it), and the last to finish signals `done`. Only the submitting thread, holding
 * `submit`, changes the job, and it publishes the job's fields before it moves `generation`
 * (release), which a worker reads (acquire) before the fields, so a worker always reads a complete
 * job. Waiting spins for a while (SPIN_ROUNDS, some tens of microseconds) before sleeping on a
 * condition variable: a training step runs dozens of parallel loops a few hundred microseconds
 * apart, and waking a sleeping thread costs about as much as a small loop (a model's step on two
 * threads was slower than on one). Generation moves and `pending` reaching 0 happen under `lock`
 * too, with a broadcast / signal, so a thread that stopped spinning and sleeps is always woken.
 * Each thread of the pool (the caller at 0, worker k at k) owns one scratch buffer, grown on
 * demand and freed with the pool; a thread knows its index while it runs a chunk (thread-local),
 * and outside any chunk only the caller can ask, a context being used by one thread at a time.
 * Invariants: `pending` counts the workers that have not finished the current job; a job is
 * published only when it is 0; `stop` is set once, by cn_pool_destroy, which then joins every
 * worker it started. A worker counts generations from 0, not from what it first reads: a job may be
 * published before a fresh worker first looks, and it must still run its chunk. */
#include "runtime/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Rounds of checking before a waiting thread sleeps; each round is a CPU pause (tens of cycles). */
#define SPIN_ROUNDS 4096

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

struct cn_pool {
  pthread_mutex_t lock, submit;
  pthread_cond_t wake, done;
  pthread_t *workers;
  int n_workers;
  atomic_uint_fast64_t generation;
  atomic_int pending;
  atomic_bool stop;
  /* the current job */
  cn_pool_fn fn;
  void *env;
  int64_t n;
  int chunks;
  /* per thread (the caller 0, worker k at k): a buffer kept across jobs (cn_pool_scratch) */
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
 * the pool they are part of; with the pool and the chunk's thread index, for the scratch. */
static _Thread_local bool in_chunk;
static _Thread_local const cn_pool *chunk_pool;
static _Thread_local int chunk_thread;

static void run_chunk(const cn_pool *pool, int64_t n, int chunks, int k) {
  int64_t q = n / chunks, r = n % chunks;
  int64_t lo = k * q + (k < r ? k : r);
  int64_t hi = lo + q + (k < r ? 1 : 0);
  in_chunk = true;
  chunk_pool = pool;
  chunk_thread = k;
  pool->fn(pool->env, lo, hi);
  in_chunk = false;
  chunk_pool = NULL;
}

/* Waits until the generation differs from `seen` or the pool stops: spinning first, then asleep.
 * Returns the generation (acquire: the job's fields written before it are visible). */
static uint_fast64_t await_job(cn_pool *pool, uint_fast64_t seen) {
  for (int round = 0; round < SPIN_ROUNDS; round++) {
    uint_fast64_t g = atomic_load_explicit(&pool->generation, memory_order_acquire);
    if (g != seen || atomic_load_explicit(&pool->stop, memory_order_acquire)) return g;
    cpu_relax();
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
    if (index < pool->chunks) run_chunk(pool, pool->n, pool->chunks, index);
    /* The last worker done wakes the submitter, under the lock it sleeps with. */
    if (atomic_fetch_sub(&pool->pending, 1) == 1) {
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
  pool->scratch = pool->workers ? cn_calloc(ctx, (size_t)threads, sizeof *pool->scratch) : NULL;
  if (!pool->scratch) {
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
  free(pool->workers);
  free(pool);
}

int cn_pool_threads(const cn_pool *pool) {
  return pool->n_workers + 1;
}

void cn_pool_for(cn_pool *pool, int64_t n, cn_pool_fn fn, void *env) {
  if (n <= 0) return;
  int threads = pool->n_workers + 1;
  if (in_chunk || threads == 1 || n == 1) {
    fn(env, 0, n);
    return;
  }
  int chunks = n < threads ? (int)n : threads;
  pthread_mutex_lock(&pool->submit);
  pthread_mutex_lock(&pool->lock);
  pool->fn = fn;
  pool->env = env;
  pool->n = n;
  pool->chunks = chunks;
  atomic_store(&pool->pending, pool->n_workers);
  atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->lock);
  run_chunk(pool, n, chunks, 0);
  for (int round = 0; round < SPIN_ROUNDS && atomic_load(&pool->pending) > 0; round++) cpu_relax();
  if (atomic_load(&pool->pending) > 0) {
    pthread_mutex_lock(&pool->lock);
    while (atomic_load(&pool->pending) > 0) pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
  }
  pthread_mutex_unlock(&pool->submit);
}

void *cn_pool_scratch(cn_pool *pool, size_t bytes) {
  /* outside a chunk of this pool: the caller's (a context runs on one thread at a time) */
  int k = chunk_pool == pool ? chunk_thread : 0;
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
