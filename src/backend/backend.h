/* The backend interface: compile a loop-IR procedure, run it on buffers, release it; the
 * process-wide registry of backends; devices and their buffers.
 *
 * A backend receives buffers in the procedure's param order (each the start of the node's padded
 * buffer, in the node's stored precision, or of the device's copy of it) and the values of its
 * free symbols in free_syms order. A backend is one registration (cn_backend_register): its id,
 * name and capabilities are what the rest of cannl asks (include/cannl.h cn_backend_find,
 * cn_backend_caps); the routine layer above handles buffer allocation, binding, transfers and
 * validation.
 *
 * Invariants of the registry: ids are dense from 0 (CN_BACKEND_INTERP, CN_BACKEND_C first),
 * names unique, entries never removed and never changed once published, so a reader needs no
 * lock (the count is published after its entry). */
#ifndef CN_BACKEND_H
#define CN_BACKEND_H

#include "loops/loops.h"

#include <stdatomic.h>

/* How a run splits a CN_LL_PARALLEL loop across threads: pool_for(pool, n, fn, env) runs fn on
 * contiguous chunks of [0, n) covering it exactly once and returns when all are done (the
 * runtime's cn_pool_for); scratch(pool, bytes) is a 64-byte aligned buffer of at least `bytes`
 * for the chunk being run (no two running chunks share one, whichever threads run them), owned
 * by the pool and kept across runs (cn_pool_scratch: GEMM packing
 * reuses it instead of allocating per call), NULL when memory runs out; pool_for_site (NULL:
 * pool_for) is pool_for with the choice between sharing a loop and running it alone made per
 * `site` rather than per fn (the runtime's cn_pool_for_site), for the GEMM library, whose one
 * task function runs every GEMM. Generated C declares the first three members as cn_par_t, so
 * the two must agree on them (the fourth is the library's, past the end of cn_par_t). A NULL
 * cn_parallel runs every loop on the caller's thread (and GEMM packing allocates per call). */
typedef struct {
  void (*pool_for)(void *pool, int64_t n, void (*fn)(void *env, int64_t lo, int64_t hi), void *env);
  void *pool;
  void *(*scratch)(void *pool, size_t bytes);
  void (*pool_for_site)(void *pool, int64_t n, void (*fn)(void *env, int64_t lo, int64_t hi),
                        void *env, const void *site);
} cn_parallel;

/* A device (cn_device, with its buffers, allocate, upload, download, synchronize, free, clear):
 * where a routine of a backend with CN_BACKEND_DEVICE_MEMORY runs, and its memory; defined in
 * ir/ir.h, since the nodes keep their copies there (ir/resident.c). */

typedef struct {
  const char *name; /* a lowercase identifier of at most CN_BACKEND_NAME_MAX characters */
  unsigned caps;    /* cn_backend_cap: PARALLEL exactly when run_parallel is set, DEVICE_MEMORY
                       exactly when open_device is */
  /* The device the routines of ctx run on (a backend with state opens it on first use and
   * registers its release with the context); allocate, upload, download, synchronize and free
   * set, clear optional. */
  cn_status (*open_device)(cn_ctx *ctx, const cn_device **device);
  /* On success *compiled is backend-owned state; *source (may be NULL) is text describing what
   * was compiled (the generated C), owned by the compiled state. */
  cn_status (*compile)(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled, const char **source);
  /* compile of n procedures at once, the same as n calls in order (same states, same sources),
   * but free to overlap their work (the generated-C backend runs their compilers at the same
   * time); on failure no state is left. NULL: the caller calls compile n times. */
  cn_status (*compile_many)(cn_ctx *ctx, int n, const cn_ll_proc *const *procs, void **compiled,
                            const char **sources);
  /* compile_many that returns once the compilers have started: the procedures compile "behind"
   * the caller, the earlier ones first. sources[k] is set at once; take(k) waits for procedure k
   * and hands out its state (or its compile failure, with the message); drop(k) gives it up.
   * Every k is taken or dropped once (the last frees *batch). NULL: only compile_many. */
  cn_status (*start_many)(cn_ctx *ctx, int n, const cn_ll_proc *const *procs, void **batch,
                          const char **sources);
  cn_status (*take)(cn_ctx *ctx, void *batch, int k, void **compiled);
  void (*drop)(void *batch, int k);
  /* compile, only where that costs nothing: an object of the backend's cache (*found true);
   * otherwise *found is false and nothing is left or started. NULL: no such cache. */
  cn_status (*compile_cached)(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled,
                              const char **source, bool *found);
  cn_status (*run)(cn_ctx *ctx, void *compiled, void *const *buffers, const int64_t *syms);
  void (*release)(void *compiled);
  /* run with a thread pool for the parallel-marked loops (NULL: the backend runs them
   * sequentially through `run`, as the interpreter does); results are those of `run` bit for bit.
   */
  cn_status (*run_parallel)(cn_ctx *ctx, void *compiled, void *const *buffers, const int64_t *syms,
                            const cn_parallel *par);
} cn_backend;

extern const cn_backend cn_backend_interp;
extern const cn_backend cn_backend_c;
extern const cn_backend cn_backend_opencl;
extern const cn_backend cn_backend_cuda; /* cuda.c */

/* Test hook (process-wide): how many OpenCL programs were built from source (not from a cached
 * binary) in this process. */
int cn_opencl_builds(void);

#define CN_BACKEND_MAX      16
#define CN_BACKEND_NAME_MAX 31

/* Adds a backend to the process-wide registry (impl must outlive the process's use of it: static
 * storage) and gives it the next id; CN_ERR_INVALID with a message for a name that is taken or not
 * an identifier, a missing compile/run/release, capabilities that disagree with the functions, or
 * a full registry (CN_BACKEND_MAX). Thread-safe. */
cn_status cn_backend_register(cn_ctx *ctx, const cn_backend *impl, cn_backend_kind *kind);
/* The backend of an id, NULL for one not registered. */
const cn_backend *cn_backend_get(cn_backend_kind kind);

/* The generated-C backend's options, for the public cn_ctx_option and cn_ctx_set_option
 * (src/runtime/routine.c): the value set on the context, else the default from the environment of
 * the moment (include/cannl.h); NULL for a key that is not one of CN_CC_OPTION_KEYS. A composed
 * default cache directory lives in a thread-local buffer until the thread's next call. */
#define CN_CC_OPTION_KEYS "cc, cflags, cache_dir"
const char *cn_cc_option(const cn_ctx *ctx, const char *key);

/* Tune records of the generated-C backend's cache directory (cc.c): the value stored for a key
 * text (both NUL-terminated text, the value one line) by an earlier cn_cc_tune_store, in this
 * process or another. *found is false without a shared cache directory, without a record, or for
 * a corrupted record (deleted, with a warning on the log or stderr). */
cn_status cn_cc_tune_load(cn_ctx *ctx, const char *key, char *value, size_t size, bool *found);
cn_status cn_cc_tune_store(cn_ctx *ctx, const char *key, const char *value);

/* A warning of the compiled backends (their caches): to the log hook when ctx has one, else to
 * stderr ("cannl: <message>"), only the first time when `once` (may be NULL) is given. */
void cn_cc_warn(cn_ctx *ctx, atomic_bool *once, const char *fmt, ...) CN_PRINTF(3, 4);

/* Records of the generated-C backend's cache directory (cc.c "Records"), the integrity scheme
 * tune records and the OpenCL backend's program binaries share: the body (any bytes) stored for
 * key (NUL-terminated text) in the slot <kind>-<hash of key>.<ext> by cn_cc_record_store, with
 * the key text and an FNV-1a checksum; load gives a malloc'd copy of the body (NUL-terminated
 * after len bytes) in *body. *found is false without a shared cache directory, without a
 * record, for another key's record, or for a corrupted one (deleted, with a warning on the log
 * or stderr). */
cn_status cn_cc_record_load(cn_ctx *ctx, const char *kind, const char *ext, const char *key,
                            char **body, size_t *len, bool *found);
cn_status cn_cc_record_store(cn_ctx *ctx, const char *kind, const char *ext, const char *key,
                             const char *body, size_t len);

/* Writes a device backend's generated source (NUL-terminated text) that failed to compile, so that
 * the error can name it: <cache dir>/<name>-<hash of text>.<ext>, written atomically; without a
 * shared cache directory it goes to a private temporary directory, which is kept. *path is the
 * file's path (malloc'd). */
cn_status cn_cc_source_store(cn_ctx *ctx, const char *name, const char *ext, const char *text,
                             char **path);

/* Lets the generated-C backend's compilations running behind (start_many) on ctx start their next
 * compiler processes, without waiting: a routine run calls it while ctx->compiling is set. */
void cn_cc_drive(cn_ctx *ctx);

/* Test hook (process-wide, tests only): with true, the compiler processes of a batch (the pieces
 * of each source, cgen.c "Routines in pieces", and their links) run one after the other instead
 * of one per online processor at a time. */
void cn_cc_set_serial_pieces(bool serial);

/* Test hook (process-wide, tests only): fn(path) runs between the verification of a cached object
 * at path and its dlopen, where a writer of the cache directory could swap the file; NULL: none. */
void cn_cc_set_load_hook(void (*fn)(const char *so_path));

/* Generates the C source of a procedure (used by cn_backend_c; exposed for golden tests).
 * The entry point is `void <name>_entry(void *const *buffers, const int64_t *syms)`; a procedure
 * with a CN_LL_PARALLEL loop also exports `void <name>_entry_par(void *const *buffers,
 * const int64_t *syms, const cn_par_t *par)` (cn_par_t laid out as cn_parallel; the plain entry
 * passes NULL: every loop on the caller). */
cn_status cn_cgen_source(cn_ctx *ctx, const cn_ll_proc *proc, cn_sbuf *out);

#endif
