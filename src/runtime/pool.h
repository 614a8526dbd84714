/* A persistent pool of worker threads for the parallel loops of generated code.
 *
 * cn_pool_for(pool, n, fn, env) splits [0, n) into min(threads, n) contiguous chunks, chunk k being
 * [k*n/c, (k+1)*n/c) in exact 128-bit-free arithmetic (q = n/c, r = n%c: the first r chunks hold
 * q + 1), calls fn once per chunk, and returns when all are done: every index runs exactly once,
 * and the chunks depend only on n and the thread count (the results on neither: the loops are
 * marked parallel, their iterations independent). Chunk 0 runs on the caller and chunk k on
 * worker k unless that worker is late (its core taken): the caller then runs it; and a loop that
 * runs no faster shared (timed) runs whole on the caller, fn(env, 0, n), as on one thread. Calls on
 * one pool are serialized (a mutex), and a call made from inside a chunk (a worker or the caller
 * running fn) runs its whole range on that thread, so nested loops never deadlock. A pool is
 * created lazily per context (cn_pool_of) and released by the context's cleanups. */
#ifndef CN_POOL_H
#define CN_POOL_H

#include "backend/backend.h"
#include "core/core.h"

typedef struct cn_pool cn_pool;
typedef void (*cn_pool_fn)(void *env, int64_t lo, int64_t hi);

/* A pool running on `threads` threads in all (the caller and threads - 1 workers); NULL with a
 * message when memory runs out. When the system refuses a thread the pool keeps the workers it
 * got (at least the caller), so a run never fails for lack of threads. */
cn_pool *cn_pool_create(cn_ctx *ctx, int threads);
/* Stops and joins the workers and frees the pool (NULL: nothing). */
void cn_pool_destroy(cn_pool *pool);
/* The threads a call uses: the caller plus the workers. */
int cn_pool_threads(const cn_pool *pool);
void cn_pool_for(cn_pool *pool, int64_t n, cn_pool_fn fn, void *env);
/* cn_pool_for, its way (shared or alone) timed and chosen for `site` instead of fn: for a function
 * that runs many loops of different work (the GEMM library's one task function runs every GEMM,
 * site its arguments' address, a static array of the generated code per GEMM), whose timings
 * would otherwise mix and settle every GEMM on one way. */
void cn_pool_for_site(cn_pool *pool, int64_t n, cn_pool_fn fn, void *env, const void *site);
/* A 64-byte aligned buffer of at least `bytes` for the calling chunk (inside chunk k of this pool,
 * chunk k's, whichever thread runs it; outside, chunk 0's, the caller's), kept until a chunk of
 * that index asks again for more or the pool ends: what a kernel's packing reuses across runs.
 * NULL when memory runs out. */
void *cn_pool_scratch(cn_pool *pool, size_t bytes);
/* The pool as a backend's run sees it (backend.h cn_parallel: cn_pool_for, cn_pool_scratch,
 * cn_pool_for_site). */
cn_parallel cn_pool_parallel(cn_pool *pool);

/* The context's pool with `threads` threads: created on first use and registered as a cleanup;
 * one with another count is destroyed and replaced. NULL with a message on failure. Not to be
 * called while another thread runs routines of the same context. */
cn_pool *cn_pool_of(cn_ctx *ctx, int threads);

#endif
