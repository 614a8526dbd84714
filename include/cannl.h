/* cannl: a tensor compiler and deep-learning framework in C11 — the public API.
 *
 * Everything a user touches goes through a context (cn_ctx): it owns the arena that holds graph
 * and compile metadata (nodes, projections, assignments), the tensor buffers, the options of the
 * backends and the last error. Handles are opaque and live until the context is destroyed, except
 * routines, which have their own cn_routine_free.
 *
 * Errors are values: a function that can fail returns a cn_status (or NULL for a constructor) and
 * leaves a precise message in the context, read with cn_ctx_error. Nothing in the library aborts
 * or exits on user input.
 *
 * Sections, bottom to top (docs/ARCHITECTURE.md has the layers behind them): the context and its
 * options; precisions and primitive ops (the X-macro tables include/cannl/precisions.def and
 * ops.def); tensor nodes; index maps and projections records; the assignments IR; routines compiled
 * for a backend (the reference interpreter or generated C); tensors, graphs, autodiff and training;
 * the operation library; Tile; datasets; and the .cnl notation (scripts, %op, %cd). */
#ifndef CANNL_H
#define CANNL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CN_API marks the functions of the API: libcannl is built with -fvisibility=hidden, so these and
 * nothing else are in the shared library's dynamic symbol table (as SQLite's SQLITE_API).
 * tests/test_api_symbols.c checks the two lists are the same. */
#ifndef CN_API
#if defined(__GNUC__)
#define CN_API __attribute__((visibility("default")))
#else
#define CN_API
#endif
#endif

/* ---- Status codes and the context ---------------------------------------------------------- */

typedef enum {
  CN_OK = 0,
  CN_ERR_INVALID,     /* an argument or record is inconsistent (bad projections, bad index, ...) */
  CN_ERR_UNSUPPORTED, /* an op is not defined for a precision, or a feature is not available */
  CN_ERR_NOMEM,       /* an allocation failed */
  CN_ERR_COMPILE,     /* the C compiler or the loader rejected generated code */
  CN_ERR_IO,          /* a file or directory could not be read or written */
  CN_ERR_RUNTIME,     /* a routine could not run (unbound or out-of-range static index, ...) */
} cn_status;

typedef struct cn_ctx cn_ctx;

typedef enum { CN_LOG_DEBUG = 0, CN_LOG_INFO = 1, CN_LOG_WARN = 2, CN_LOG_ERROR = 3 } cn_log_level;

/* A logging hook: receives every message at or above the level given to cn_ctx_set_log. */
typedef void (*cn_log_fn)(void *user, cn_log_level level, const char *message);

/* Creates a context, or returns NULL when memory is exhausted. */
CN_API cn_ctx *cn_ctx_create(void);
/* Releases the context and everything it owns (arena, buffers, compiled routines). */
CN_API void cn_ctx_destroy(cn_ctx *ctx);
/* The message of the last failure ("" if none). Valid until the next failing call. */
CN_API const char *cn_ctx_error(const cn_ctx *ctx);
/* The status of the last failure (CN_OK if none since cn_ctx_clear_error). */
CN_API cn_status cn_ctx_status(const cn_ctx *ctx);
CN_API void cn_ctx_clear_error(cn_ctx *ctx);
CN_API void cn_ctx_set_log(cn_ctx *ctx, cn_log_fn fn, void *user, cn_log_level min_level);
/* A progress hook: while the context compiles routines or tunes GEMM plans for more than about a
 * second, it receives a one-line description of that work, such as "compiling 1 routine (6
 * done), tuning 1 GEMM nest (2 done) ... 4.2 s", again when the counts change and, while the
 * work goes on, up to five times a second; when the work ends after a line was given, it receives
 * NULL (erase the line), so a caller that draws the line on a terminal can clear it before anything
 * else is written. The work's clock runs across compilations separated by less than half a second
 * (a script compiles its statements one by one, running each in between). Called on the thread that
 * compiles; the line is valid during the call only. */
typedef void (*cn_progress_fn)(void *user, const char *line);
/* Installs the progress hook (fn NULL: none, the default). The delay before the first line is one
 * second, or CANNL_PROGRESS_AFTER_MS milliseconds when that variable holds a number when the hook
 * is installed (a knob for tests). */
CN_API void cn_ctx_set_progress(cn_ctx *ctx, cn_progress_fn fn, void *user);

/* Options of the generated-C backend (copied):
 *   "cc"        compiler command (default: $CC, else "cc")
 *   "cflags"    flags (default: $CANNL_CFLAGS, else
 *               "-O3 -march=native -fopenmp-simd -ffp-contract=off -shared -fPIC -std=c11",
 *               -fopenmp-simd for the `#pragma omp simd` of vector loops, -ffp-contract=off so
 *               that no compiler fuses a multiply and an add the code keeps apart (clang would
 *               by default): fused multiply-adds are only where a GEMM plan asks for them; the
 *               test suite's valgrind run drops -march=native, whose AVX-512 code valgrind
 *               cannot execute)
 *   "cache_dir" where generated sources and compiled objects are kept, each object with a
 *               record of its key and checksum verified before loading (default:
 *               $CANNL_CACHE_DIR, "off" for no disk cache, else $XDG_CACHE_HOME/cannl, else
 *               $HOME/.cache/cannl, else, when no home is usable, $TMPDIR/cannl-cache-<uid>,
 *               which must be the user's own directory, not writable by others)
 * And of every routine run:
 *   "check"     "nan": after each cn_routine_run, the first node the routine wrote that holds a
 *               NaN or an infinity (in write order, padding margins excepted) fails the run with
 *               CN_ERR_RUNTIME, naming the node, the cell and the value; "off" (default:
 *               $CANNL_CHECK as it was when the routine was compiled, else "off"). The scan
 *               reads every cell written: a debugging mode (bench_moons measures its cost).
 *               The label checks of cross_entropy, accuracy and confusion run whatever this
 *               option says, first.
 *   "threads"   the threads that run the parallel loops of a routine, the caller included: a
 *               count in [1, 1024] (default: $CANNL_THREADS, else the cores the process may run
 *               on, as they were when the routine was compiled). Results are the same bits for
 *               every count.
 * And of every routine compiled (read by cn_routine_compile):
 *   "schedule"  the passes of the scheduling stage: "all" (default: $CANNL_SCHEDULE, else "all"),
 *               "none", or a comma list of fill, virtual, gemm, order, fuse, tile, marks, jam; each
 *               loop pass keeps the results bit for bit, so switching them off bisects a
 *               failure, and gemm (packed, register-tiled matrix products) does too in exact
 *               mode (docs/ARCHITECTURE.md "Scheduling").
 *   "exact"     "off" (default: $CANNL_EXACT, else "off"): the matrix-product kernels of the
 *               gemm pass accumulate with fused multiply-adds, one rounding per update (as every
 *               BLAS); "on" (or "1"): a multiply and an add, each rounded, as the unscheduled
 *               nest does, bit for bit. Either way a cell's value depends on its operands only,
 *               never on tiles, blocks or the thread count.
 *   "reduce"    "ordered" (default: $CANNL_REDUCE, else "ordered"): a sum runs its updates in the
 *               order of its loop, one rounding after the other; "lanes": an add-accumulation
 *               loop of at least 1024 steps into one single or double cell (softmax's
 *               denominator, a long row's sum) runs as 256 lanes, step i into lane i mod 256 in
 *               order, the lanes folded by halves, then added to the cell: other bits than in
 *               order (within a sum's usual error, a smaller bound), the same on every backend,
 *               thread count, schedule and device, and vectorized (a work-group on a device).
 *   "tune"      "cached" (default: $CANNL_TUNE, else "cached"): how the plan of a matrix-product
 *               nest of at least 2^24 points is chosen when a routine for the generated-C backend
 *               is compiled. "cached": from a record of an earlier "quick" or "full" tuning of
 *               the same class of nest (geometry, strides, precision; the CPU model, compiler
 *               and flags) in the cache directory, else the heuristic plan; nothing is timed, so
 *               a first run starts at once. "quick": a record, else 4 candidate register tiles
 *               and reduction blocks compiled and timed once on private buffers, the fastest
 *               kept in a record that later compiles (any model, any process) reuse
 *               (CN_STAT_TUNE_RUNS, CN_STAT_TUNE_HITS); "full": 22 candidates; "off": the
 *               heuristic plan, records ignored. Never changes a result.
 *   "device_tile"  the tile of a device backend's matrix-product kernels (opencl, cuda): "auto"
 *               (default: $CANNL_DEVICE_TILE, else "auto"; the backend's own: 16 x 16 work items of
 *               4 x 4 cells on OpenCL, of 8 x 8 on CUDA, 16 reduction steps a slice in local
 *               memory) or "<items>x<cells>x<steps>", e.g. "16x8x16": work items along each side
 *               of a work-group, cells a work item computes along each side, steps a slice;
 *               powers of two up to 32, 16 and 64. The tile shrinks for a small product and to
 *               the device's limits. Never changes a result (a cell is one work item's, its
 *               steps in order).
 *   A value of $CANNL_EXACT, $CANNL_REDUCE, $CANNL_TUNE or $CANNL_DEVICE_TILE outside the
 *   option's values fails the compile (with the closest value suggested where there is one)
 *   rather than being ignored.
 *   "interpret_below"  the least work, in cell updates over all its loops, of a routine that a
 *               script's statement (cn_notation_run, `cannl run`) compiles with the C backend
 *               at once: a count in [0, 2^62] (default: $CANNL_INTERPRET_BELOW, else 4096; 0:
 *               every routine). A smaller one runs on the interpreter until its interpreted
 *               runs have taken about 30 ms, and is compiled then (a print or a scalar update
 *               never is); a statement outside loops (run once: an initialization, a final
 *               evaluation) is interpreted below 512 times the count, and a statement a loop
 *               body starts with (compiled ahead with the others) where its work times the
 *               loops' trip counts is. A cold start compiles only
 *               what pays, and a result never depends on it: the interpreter computes the
 *               generated code's bits. Not when the cache already holds the object (it is taken
 *               then); `--emit=c` compiles all.
 *   "parallel_work"  the least work, in cell updates, of a loop nest split across threads: a
 *               count in [1, 2^62] (default: $CANNL_PARALLEL_WORK, else 32768, some 20-50 us on
 *               one core; smaller nests stay on the caller's thread).
 * And of every graph of the context:
 *   "random_seed"  the global random seed (OCANNL's fixed_state_for_init): an integer in
 *               [0, 2^32) (default: $CANNL_RANDOM_SEED, else 42), read when a graph first builds
 *               random code (the seed tensor), unless cn_graph_set_seed (a script's `set_seed`)
 *               set that graph's.
 * And of printing (cn_tensor_format, a script's `print`):
 *   "print_threshold"  a tensor of more cells is printed elided (numpy's threshold): an integer
 *               in [0, 2^63) (default: $CANNL_PRINT_THRESHOLD, else 1000).
 *   "print_precision"  the most digits after the point of a printed number: an integer in
 *               [0, 17] (default: $CANNL_PRINT_PRECISION, else 8).
 * And of every caller that gives no backend (CN_BACKEND_DEFAULT: `cannl run` without --backend,
 * cn_notation_run with NULL options):
 *   "backend"   the name of a registered backend (cn_backend_list; default: $CANNL_BACKEND, else
 *               "c"); an unknown name is refused, with the closest names suggested, when set
 *               and, from the environment, when a routine needs it. */
CN_API cn_status cn_ctx_set_option(cn_ctx *ctx, const char *key, const char *value);
CN_API const char *cn_ctx_option(const cn_ctx *ctx, const char *key);

/* Counters, for tests and tuning. */
typedef enum {
  CN_STAT_COMPILER_RUNS, /* times a compiler was invoked (the C compiler; NVRTC for cuda) */
  CN_STAT_CACHE_HITS,    /* compiled objects found in the cache */
  CN_STAT_ROUTINE_RUNS,
  CN_STAT_TUNE_RUNS, /* GEMM nests tuned: candidate plans compiled and timed (option "tune") */
  CN_STAT_TUNE_HITS, /* GEMM plans taken from a tune record of an earlier tuning */
  /* Copies between the host and the devices of backends with memory of their own (a node's
   * buffer moved whole; cn_node_current): */
  CN_STAT_UPLOADS,        /* host buffers uploaded to a device */
  CN_STAT_DOWNLOADS,      /* device copies brought back to the host */
  CN_STAT_UPLOAD_BYTES,   /* their bytes */
  CN_STAT_DOWNLOAD_BYTES, /* their bytes */
  CN_STAT_TRANSFERS,      /* copies from one device to another (cn_node_transfer) */
  CN_STAT_TRANSFER_BYTES, /* their bytes */
  /* Where the time to a first result goes, in microseconds of wall time (bench/bench_startup,
   * `cannl run --timings`); the phases never overlap, so they add up: */
  CN_STAT_US_SCHEDULE,  /* lowering, simplifying and scheduling routines */
  CN_STAT_US_TUNE,      /* tuning GEMM plans: generating, compiling and timing candidates */
  CN_STAT_US_CGEN,      /* generating routines' C and looking them up in the cache */
  CN_STAT_US_COMPILE,   /* waiting for the C compiler and loading compiled objects */
  CN_STAT_US_RUN,       /* running routines */
  CN_STAT_US_FIRST_RUN, /* the first run of each routine (part of CN_STAT_US_RUN) */
  CN_STAT_COUNT
} cn_stat;
CN_API uint64_t cn_ctx_stat(const cn_ctx *ctx, cn_stat which);

/* A suggestion for a misspelled name, as the library's own messages make them: the (at most
 * three) names of known[0 .. n_known) closest to word by edit distance (optimal string alignment;
 * a name farther than a third of its length is not suggested), written into out as
 * ", did you mean 'a'?" / ", did you mean 'a' or 'b'?" / ", did you mean 'a', 'b' or 'c'?", or ""
 * when none is close; closest first, ties in byte order. Returns out (truncated to size). For
 * programs that read names from their users (the `cannl` command's commands and options). */
CN_API const char *cn_suggest_names(const char *word, int n_known, const char *const *known,
                                    char *out, size_t size);

/* ---- Precisions (table: include/cannl/precisions.def) -------------------------------------- */

#ifndef CN_U4X32_DEFINED /* also defined by the generated-C prelude (src/numeric/builtins.h) */
#define CN_U4X32_DEFINED
typedef struct {
  uint32_t v[4];
} cn_u4x32; /* a 128-bit cell of precision uint4x32 */
#endif

typedef enum {
#define CN_PREC(ID, lc, bytes, store_t, compute_t, kind, rank) CN_PREC_##ID,
#include "cannl/precisions.def"
  CN_PREC_COUNT
} cn_prec;

typedef enum { CN_PKIND_INT, CN_PKIND_UINT, CN_PKIND_FLOAT, CN_PKIND_BITS } cn_prec_kind;

CN_API const char *cn_prec_name(cn_prec prec);
CN_API size_t cn_prec_bytes(cn_prec prec);
CN_API cn_prec_kind cn_prec_kind_of(cn_prec prec);
/* The dominant of two precisions (promotion order of the table). */
CN_API cn_prec cn_prec_promote(cn_prec a, cn_prec b);
/* Looks a precision up by name; false if there is none. */
CN_API bool cn_prec_from_name(const char *name, cn_prec *out);
/* Conversions of one stored cell. Float to integer truncates toward zero and saturates to the
 * target's range (NaN gives 0); integer to narrower integer wraps; bfloat16 and half round to
 * nearest even; fp8 is E5M2 (bias 15), rounding to nearest even. uint4x32 cells convert as in
 * ocannl-notes §7.2 (into) and by their first word(s) (out of). */
CN_API double cn_prec_cell_to_double(cn_prec prec, const void *cell);
CN_API void cn_prec_cell_from_double(cn_prec prec, double value, void *cell);
CN_API uint16_t cn_prec_single_to_bfloat16(float x);
CN_API float cn_prec_bfloat16_to_single(uint16_t bits);
CN_API uint16_t cn_prec_single_to_half(float x);
CN_API float cn_prec_half_to_single(uint16_t bits);
CN_API uint8_t cn_prec_single_to_fp8(float x);
CN_API float cn_prec_fp8_to_single(uint8_t bits);

/* ---- Primitive ops (table: include/cannl/ops.def) ------------------------------------------ */

typedef enum {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  CN_OP_##ID,
#include "cannl/ops.def"
  CN_OP_COUNT
} cn_op;

CN_API const char *cn_op_name(cn_op op);
/* The infix spelling in the notations, or NULL. */
CN_API const char *cn_op_infix(cn_op op);
CN_API int cn_op_arity(cn_op op);
/* True if the op can be an accumulation operator (=op / =:op); Arg2 only as `=:`. */
CN_API bool cn_op_can_accumulate(cn_op op);
/* The neutral element of the op as an accumulator, as a value of precision prec. */
CN_API double cn_op_neutral(cn_op op, cn_prec prec);
/* True if the op is defined on the precision. */
CN_API bool cn_op_supports(cn_op op, cn_prec prec);
CN_API bool cn_op_from_name(const char *name, cn_op *out);
/* Evaluates a scalar op with the reference semantics (double for float precisions, exact
 * 64-bit integers, 128-bit words for uint4x32). Cells are stored cells of precision prec (for
 * CN_OPF_TO_PREC ops the operand is uint4x32 and the result is of precision prec; the vectorized
 * uint4x32_to_prec_uniform writes 16/bytes(prec) cells). */
CN_API cn_status cn_op_eval(cn_ctx *ctx, cn_op op, cn_prec prec, const void *const *args,
                            void *result);

/* ---- Tensor nodes -------------------------------------------------------------------------- */

typedef struct cn_node cn_node;

typedef enum {
  CN_MEM_MATERIALIZED, /* a host-visible buffer: set and read with cn_node_set/get_values */
  CN_MEM_LOCAL,        /* scratch owned by each routine that uses it, not visible outside */
  /* written and read within one routine only, never by the host: the schedule (pass "virtual")
   * inlines its computation at its reads where that is exact, else it is LOCAL scratch */
  CN_MEM_VIRTUAL,
} cn_memory_mode;

/* A node of the given precision and dims (rank <= CN_MAX_RANK; dims >= 0). Its buffers are
 * allocated, zero-filled, on first use. */
#define CN_MAX_RANK 16
CN_API cn_node *cn_node_create(cn_ctx *ctx, const char *label, cn_prec prec, int rank,
                               const int64_t *dims);
CN_API int cn_node_id(const cn_node *node);
CN_API const char *cn_node_label(const cn_node *node);
CN_API cn_prec cn_node_prec(const cn_node *node);
CN_API int cn_node_rank(const cn_node *node);
CN_API int64_t cn_node_dim(const cn_node *node, int axis);
CN_API int64_t cn_node_numel(const cn_node *node); /* product of the (unpadded) dims */
/* Padding margins of one axis: the buffer holds left + dim + right cells along it while the
 * node's shape stays dim. Must be set before the node's buffer is first used. */
CN_API cn_status cn_node_set_padding(cn_node *node, int axis, int64_t left, int64_t right);
CN_API int64_t cn_node_padding(const cn_node *node, int axis, bool right);
CN_API cn_status cn_node_set_memory(cn_node *node, cn_memory_mode mode);
CN_API cn_memory_mode cn_node_memory(const cn_node *node);
/* Host values of the unpadded cells in row-major order, converted from/to double. `merge`
 * selects the node's merge buffer instead of its value buffer. */
CN_API cn_status cn_node_set_values(cn_node *node, bool merge, const double *values, size_t count);
CN_API cn_status cn_node_get_values(cn_node *node, bool merge, double *values, size_t count);
/* Raw stored cells (count * cn_prec_bytes), unpadded, row-major. */
CN_API cn_status cn_node_set_cells(cn_node *node, bool merge, const void *cells, size_t count);
CN_API cn_status cn_node_get_cells(cn_node *node, bool merge, void *cells, size_t count);
/* Device-resident nodes. A routine of a backend with its own memory (CN_BACKEND_DEVICE_MEMORY)
 * runs on the node's copy on its device: one per node and device, shared by every routine run
 * there, kept between runs and released with the context. A run uploads only the buffers whose
 * copy there is stale (the host or another device wrote the node since) and downloads nothing;
 * the host buffer is brought back when the host reads the node: cn_node_get_values and the other
 * readers (printing, checkpoints, save_npy, export, runs on the host backends) do so themselves,
 * and a host write (cn_node_set_values, loading) makes the device copies stale. Which copies hold
 * the newest value: CN_CURRENT_HOST and/or CN_CURRENT_DEVICE (some device's copy). The counts
 * and bytes of the copies made are the stats CN_STAT_UPLOADS ... CN_STAT_DOWNLOAD_BYTES. The
 * checks of a run read on the host: the label checks (cross_entropy, accuracy, confusion) bring
 * their few cells back after every run, the check "nan" every node the run wrote. The host
 * backends (interpreter, generated C) run on the host buffers themselves: no copy. */
typedef enum { CN_CURRENT_HOST = 1, CN_CURRENT_DEVICE = 2 } cn_node_where;
CN_API unsigned cn_node_current(const cn_node *node, bool merge);
/* Brings the host buffer up to date now (a download, waited for), as a host read would. */
CN_API cn_status cn_node_to_host(cn_node *node, bool merge);

/* CPU devices (data parallelism in one process): several devices of host memory, numbered
 * 0 .. count-1 per context, each holding its own copy of every node a routine run there uses
 * (values and merge buffers, as the devices of CN_BACKEND_DEVICE_MEMORY do; scratch its own). A
 * routine compiled once for a host backend (interpreter or generated C) runs on any of them:
 * cn_routine_run_on. A run on a device happens on the caller's thread, its parallel loops on the
 * context's one worker pool (option "threads"), so devices share the cores through that pool and
 * run one after the other: N devices divide a batch, not the machine (the processes of MPI do).
 * cn_ctx_open_devices makes sure the context has at least count devices (in [1, CN_MAX_DEVICES]);
 * devices live until the context is destroyed. */
#define CN_MAX_DEVICES 64
CN_API cn_status cn_ctx_open_devices(cn_ctx *ctx, int count);
CN_API int cn_ctx_device_count(const cn_ctx *ctx); /* 0 before cn_ctx_open_devices */
/* A replicated node holds a value per device and one on the host (a device's gradient, a shard
 * of data): a run on one device leaves the other devices' copies and the host's value as they
 * were, where a node that is not replicated has one newest value, a device write making the other
 * copies and the host's stale. A device's copy is first made from the host's value; a host write
 * (cn_node_set_values, loading, a run on the host) sets every device's value (each copy uploaded
 * at its next use); the host's readers (cn_node_get_values, printing, checkpoints) read the host's
 * value, which cn_node_transfer(node, k, CN_DEVICE_HOST, false) sets to device k's; the functions
 * below name the device. Set before the node's first run on a device (CN_ERR_INVALID after). */
CN_API cn_status cn_node_set_replicated(cn_node *node, bool replicated);
CN_API bool cn_node_replicated(const cn_node *node);
/* cn_node_set/get_values and _cells on CPU device `device`'s copy of the buffer: a read sees what
 * a run there would (a stale copy is brought up to date first), a write is a write by that device
 * (for a node that is not replicated, the other copies and the host become stale). */
CN_API cn_status cn_node_set_device_values(cn_node *node, bool merge, int device,
                                           const double *values, size_t count);
CN_API cn_status cn_node_get_device_values(cn_node *node, bool merge, int device, double *values,
                                           size_t count);
CN_API cn_status cn_node_set_device_cells(cn_node *node, bool merge, int device, const void *cells,
                                          size_t count);
CN_API cn_status cn_node_get_device_cells(cn_node *node, bool merge, int device, void *cells,
                                          size_t count);
/* Copies the value of a materialized node as device `from` holds it into device to's copy of its
 * value or, into_merge, of its merge buffer (OCANNL's into_merge_buffer); either end may be
 * CN_DEVICE_HOST, the host's buffers. The whole padded buffer moves, one memcpy between CPU
 * devices (CN_STAT_TRANSFERS, CN_STAT_TRANSFER_BYTES). A routine reading `node.merge` run on `to`
 * afterwards (the notation's `p.grad =+ p.grad.merge`) merges it. */
#define CN_DEVICE_HOST (-1)
CN_API cn_status cn_node_transfer(cn_node *node, int from, int to, bool into_merge);

/* ---- Index maps and projections ------------------------------------------------------------ */

/* A symbol is a loop or index variable: a product-space iterator, or a static index bound by the
 * caller before a routine runs (with range > 0 checked on binding). */
typedef int cn_symbol;
CN_API cn_symbol cn_symbol_create(cn_ctx *ctx, const char *name, int64_t range);
CN_API const char *cn_symbol_name(const cn_ctx *ctx, cn_symbol sym);

#define CN_MAX_AFFINE_TERMS 4
typedef enum { CN_IDX_FIXED, CN_IDX_ITER, CN_IDX_AFFINE } cn_index_kind;
/* One axis of an index map: Fixed(offset) | Iter(syms[0]) | Affine(sum coeffs[i]*syms[i] +
 * offset). Canonical form (convolution-is-a-contraction): an Affine has at least one term, no zero
 * coefficient, no repeated symbol, and is never a single unit-coefficient term with offset 0 (that
 * is an Iter); the constructors normalize to it. */
typedef struct {
  cn_index_kind kind;
  int n_terms;
  cn_symbol syms[CN_MAX_AFFINE_TERMS];
  int64_t coeffs[CN_MAX_AFFINE_TERMS];
  int64_t offset;
} cn_index;

CN_API cn_index cn_index_fixed(int64_t position);
CN_API cn_index cn_index_iter(cn_symbol sym);
/* Sums duplicate symbols, drops zero terms, and returns the canonical form. More than
 * CN_MAX_AFFINE_TERMS distinct symbols yields kind CN_IDX_AFFINE with n_terms = -1, which every
 * consumer rejects as invalid. */
CN_API cn_index cn_index_affine(int n_terms, const cn_symbol *syms, const int64_t *coeffs,
                                int64_t offset);
/* Equality of canonical indices (the order of affine terms does not matter). */
CN_API bool cn_index_equal(const cn_index *a, const cn_index *b);

/* The projections record of one assignment (contraction-is-emergent "What we compile to"): a
 * product space of iterators with sizes, and for the LHS and each of up to 3 RHS tensors its dims
 * and one index per axis. Dims are the unpadded shape; indices may reach into padding margins. */
typedef struct cn_proj cn_proj;
typedef struct {
  int rank;
  const int64_t *dims;
  const cn_index *map;
} cn_proj_tensor;
CN_API cn_proj *cn_proj_create(cn_ctx *ctx, int n_product, const cn_symbol *iterators,
                               const int64_t *sizes, cn_proj_tensor lhs, int n_rhs,
                               const cn_proj_tensor *rhs);

/* Tile's valid index sets (tile-edsl "Valid Indices"), as an extension of the product space:
 *   - each iterator ranges over [lo, hi), which may start below 0 (a plain record is lo = 0,
 *     hi = size);
 *   - constraints `0 <= expr < bound`, expr an index over product iterators (or static indices
 *     with a range);
 *   - valid_only: besides the constraints, a point is visited only if every index of every slot
 *     (the LHS included) lies within its tensor's unpadded dims, and out-of-range indices are then
 *     not an error at construction; without it the maps must stay within the padded buffers over
 *     the whole box, as for cn_proj_create;
 *   - zero_unreached: with `=:`, LHS cells that no visited point writes end as 0 while written
 *     cells start from the accumulator's neutral element (Tile's initialization, tile-edsl
 *     "Skipping"); without it `=:` gives every cell the neutral element first, as usual.
 * An assignment visits exactly the points of the box where every constraint (and, with
 * valid_only, every bound) holds. Constraints or valid_only make cn_proj_lhs_surjective answer
 * false (it cannot see through them); injectivity is unaffected (fewer points stay injective). */
typedef struct {
  cn_index expr;
  int64_t bound; /* the constraint holds where 0 <= expr < bound */
} cn_proj_constraint;
typedef struct {
  int n_product;
  const cn_symbol *iterators;
  const int64_t *lo; /* first value of each iterator; NULL: all 0 */
  const int64_t *hi; /* one past the last value; hi >= lo */
  int n_constraints;
  const cn_proj_constraint *constraints;
  bool valid_only;
  bool zero_unreached;
} cn_proj_space;
CN_API cn_proj *cn_proj_create_ranged(cn_ctx *ctx, const cn_proj_space *space, cn_proj_tensor lhs,
                                      int n_rhs, const cn_proj_tensor *rhs);
/* Derived properties of the LHS map (contraction-is-emergent): every LHS cell written by some
 * product point / by at most one. Both are decided conservatively for affine maps (a "false" may be
 * a cell that is in fact covered, never the converse). */
CN_API bool cn_proj_lhs_surjective(const cn_proj *proj);
CN_API bool cn_proj_lhs_injective(const cn_proj *proj);
/* The record of an assignment whose tensors are named by slot (contraction-is-emergent "slot"
 * naming: lhs, t, v, g = slot 0; t1, v1, g1 = slot 1; ...): its LHS is the original's slot lhs_slot
 * and its RHS i the original's slot rhs_slots[i], with the same product space. E.g. the gradient g1
 * =+ g * v2 of a binary operation is cn_proj_permute(ctx, fwd, 1, 2, (int[]){0, 2}). Ranges,
 * constraints and flags are kept, and under valid_only the bounds of a dropped slot become
 * constraints, so the new record visits the same points. */
CN_API cn_proj *cn_proj_permute(cn_ctx *ctx, const cn_proj *proj, int lhs_slot, int n_rhs,
                                const int *rhs_slots);
/* A readable dump: product space (a ranged iterator as `j=-1..2`), constraints and flags when
 * present, then each tensor's dims and map. Arena-owned. */
CN_API const char *cn_proj_to_string(cn_ctx *ctx, const cn_proj *proj);

/* ---- Assignments IR ------------------------------------------------------------------------ */

typedef struct cn_asgn cn_asgn;
typedef struct {
  cn_node *node;
  bool merge; /* the node's merge buffer instead of its value */
} cn_buffer;

/* lhs <accum>= op(rhs...), with `=:` clearing to accum's neutral element first when
 * init_neutral (syntax-extensions-cd-op Accum_op). The projections record's LHS / RHS entries
 * correspond to lhs / rhs[i]. */
CN_API cn_asgn *cn_asgn_accum(cn_ctx *ctx, bool init_neutral, cn_op accum, cn_node *lhs, cn_op op,
                              const cn_buffer *rhs, const cn_proj *proj);
/* lhs[...] = vec_op(rhs[...]), writing length = 16/bytes(lhs prec) cells per product point: the
 * LHS map addresses the first of them, the rest follow in row-major order (the LHS must be
 * unpadded and the group must stay inside it). */
CN_API cn_asgn *cn_asgn_vec_unop(cn_ctx *ctx, cn_op op, cn_node *lhs, cn_buffer rhs,
                                 const cn_proj *proj);
CN_API cn_asgn *cn_asgn_fetch_constant(cn_ctx *ctx, cn_node *lhs, double value);
CN_API cn_asgn *cn_asgn_fetch_constant_bits(cn_ctx *ctx, cn_node *lhs, uint64_t bits);
/* Cell with row-major offset o gets values[o % count]. */
CN_API cn_asgn *cn_asgn_fetch_constant_fill(cn_ctx *ctx, cn_node *lhs, const double *values,
                                            size_t count);
CN_API cn_asgn *cn_asgn_fetch_range_over_offsets(cn_ctx *ctx, cn_node *lhs);
/* lhs[...] = sliced[batch_index, ...]; lhs has the dims of sliced without the leading axis. */
CN_API cn_asgn *cn_asgn_fetch_slice(cn_ctx *ctx, cn_node *lhs, cn_symbol batch_index,
                                    cn_node *sliced);
CN_API cn_asgn *cn_asgn_fetch_embed_symbol(cn_ctx *ctx, cn_node *lhs, cn_symbol sym);
CN_API cn_asgn *cn_asgn_fetch_embed_self_id(cn_ctx *ctx, cn_node *lhs);
/* Fills with *dim, read when the assignment is lowered (a size solved later by inference). */
CN_API cn_asgn *cn_asgn_fetch_embed_dim(cn_ctx *ctx, cn_node *lhs, const int64_t *dim);
CN_API cn_asgn *cn_asgn_seq(cn_ctx *ctx, int count, cn_asgn *const *items);
CN_API cn_asgn *cn_asgn_comment(cn_ctx *ctx, const char *text, cn_asgn *body);
CN_API cn_asgn *cn_asgn_noop(cn_ctx *ctx);
/* The assignments in %cd syntax (`c =:+ a * b;`), one per line. Arena-owned. */
CN_API const char *cn_asgn_to_string(cn_ctx *ctx, const cn_asgn *asgn);

/* ---- Routines ------------------------------------------------------------------------------ */

/* Backends are a process-wide registry (docs/ARCHITECTURE.md "Backends and devices"): the two
 * built-in ones have the ids below, a backend registered later (src/backend/backend.h,
 * cn_backend_register) the next id. CN_BACKEND_DEFAULT, wherever a backend is given (routines,
 * cn_notation_options, cn_text_sample): the one the context's option "backend" names. */
typedef enum { CN_BACKEND_DEFAULT = -1, CN_BACKEND_INTERP, CN_BACKEND_C } cn_backend_kind;
typedef struct cn_routine cn_routine;

/* What a backend can do (cn_backend_caps, a mask): TUNABLE, its GEMM plans are tuned by timing
 * candidates (option tune); PARALLEL, it runs parallel-marked loops on the context's threads
 * (option threads); DEVICE_MEMORY, its buffers live in its device's own memory (the nodes'
 * copies there, uploaded only when stale and brought back when the host reads: cn_node_current;
 * without it a routine runs on the nodes' buffers, no copy);
 * COMPILED, building its code costs more than a small routine's runs, so a script runs such
 * routines on the interpreter until they are worth building (option interpret_below) and
 * builds the routines of a loop ahead, behind the script. */
typedef enum {
  CN_BACKEND_TUNABLE = 1,
  CN_BACKEND_PARALLEL = 2,
  CN_BACKEND_DEVICE_MEMORY = 4,
  CN_BACKEND_COMPILED = 8
} cn_backend_cap;
/* The registered backends: their count (ids 0 .. count-1), the id of a name (-1: none), the name
 * and capabilities of an id (NULL and 0 for an id not registered), and their names in id order
 * separated by ", " ("interp, c"; a thread-local buffer until the thread's next call). */
CN_API int cn_backend_count(void);
CN_API int cn_backend_find(const char *name);
CN_API const char *cn_backend_name(cn_backend_kind kind);
CN_API unsigned cn_backend_caps(cn_backend_kind kind);
CN_API const char *cn_backend_list(void);
/* The registered backends' names closest to a misspelled one, as cn_suggest_names words them
 * (", did you mean 'opencl'?", or "" when none is close), written into out (size bytes); returns
 * out. For front ends refusing an unknown `--backend NAME`. */
CN_API const char *cn_backend_suggest(const char *name, char *out, size_t size);
/* The device a backend's routines run on, as one line into out (cap bytes): for the interpreter
 * and generated C "the host: CPU MODEL, N cores, M GiB of memory" (the cores online); for a backend
 * with its own memory, the device it opens for ctx (an error, with its message, when it cannot:
 * no driver, no device). `cannl devices` prints one per backend. */
CN_API cn_status cn_backend_device(cn_ctx *ctx, cn_backend_kind kind, char *out, size_t cap);

/* Lowers, optimizes and compiles an assignments tree for a backend. name: a letter, then ASCII
 * letters, digits and '_', not starting with cn_ or CN_ (generated C spells it with suffixes:
 * NAME_entry). */
CN_API cn_routine *cn_routine_compile(cn_ctx *ctx, const cn_asgn *asgn, cn_backend_kind backend,
                                      const char *name);
/* Compiles n routines (asgns[k] named names[k]) as n calls of cn_routine_compile would, except
 * that the generated-C backend runs the C compilers of the routines missing from the cache at the
 * same time (one compiler process per online processor at a time, the largest first): a model's
 * routines compile in about the time of the longest, or of their total over the processors. CN_OK
 * with out[k] set for every k; otherwise the status of the first failure, its message, and every
 * out[k] NULL (no routine kept). */
CN_API cn_status cn_routine_compile_many(cn_ctx *ctx, int n, const cn_asgn *const *asgns,
                                         const char *const *names, cn_backend_kind backend,
                                         cn_routine **out);
/* Whether the routine reads the static index symbol (binding one it does not read fails). */
CN_API bool cn_routine_reads(const cn_routine *routine, cn_symbol sym);
/* Binds a static index symbol the routine reads (a batch-slice index, a step counter). */
CN_API cn_status cn_routine_bind(cn_routine *routine, cn_symbol sym, int64_t value);
/* Runs the routine. On a backend with its own device (opencl, cuda) the run is queued and not
 * waited for: reading a node it wrote (cn_node_get_values, printing, ...) waits for the device,
 * and a failure of the queued work is that read's status and message. */
CN_API cn_status cn_routine_run(cn_routine *routine);
/* Waits until the routine's queued runs on its device have finished (nothing to wait for on the
 * host backends): their first failure, with its message, else CN_OK. For timing device runs. */
CN_API cn_status cn_routine_synchronize(cn_routine *routine);
/* Runs the routine on CPU device `device` (cn_ctx_open_devices): on the device's copies of its
 * nodes (brought up to date where stale), its scratch the device's own; the copies it writes
 * become that device's newest values. Every routine of a host backend (interpreter, generated C)
 * can run on every device and on the host, its compiled code shared. CN_ERR_INVALID for a device
 * the context does not have or a routine of a backend with its own memory (it runs on its
 * backend's device: cn_routine_run). */
CN_API cn_status cn_routine_run_on(cn_routine *routine, int device);
/* An all-reduce of replicated nodes across the context's CPU devices: afterwards every device
 * holds, for each node, the sum of the values the devices held, the same bits on every device.
 * It is transfers into merge buffers and merges (`p =+ p.merge`, one routine for all the nodes,
 * compiled once for `backend`, a host backend) in a fixed order, a binary tree onto device 0:
 * at stride s = 1, 2, 4, ... device d (d a multiple of 2s) merges device d + s's value, then
 * device 0's result is copied to every other device. The sums are thus
 * ((v0 + v1) + (v2 + v3)) + ... grouped by the tree, the same bits run to run. cn_allreduce_create
 * refuses (NULL with a message) a node that is not replicated or not materialized, or a
 * precision without addition; cn_allreduce_run fails on a context without devices and does
 * nothing with one. Freed with the context unless freed before. */
typedef struct cn_allreduce cn_allreduce;
CN_API cn_allreduce *cn_allreduce_create(cn_ctx *ctx, int n, cn_node *const *nodes,
                                         cn_backend_kind backend);
CN_API cn_status cn_allreduce_run(cn_allreduce *allreduce);
CN_API void cn_allreduce_free(cn_allreduce *allreduce);
/* ---- Across processes: MPI (src/dist/mpi.c; absent when built without MPI) -----------------
 * A rank is a process holding one or more CPU devices (or none: the host's values). Built
 * without MPI (CMake option CANNL_MPI off, or no MPI found) every function below that does work
 * fails with CN_ERR_UNSUPPORTED "cannl was built without MPI"; cn_dist_available says which.
 * cn_dist_init initializes MPI (MPI_Init_thread, MPI_THREAD_FUNNELED, unless the program did)
 * on MPI_COMM_WORLD with errors returned, not fatal; timeout_s (> 0; 0: the environment's
 * CANNL_DIST_TIMEOUT, else 20 s) bounds every wait on the other ranks: a collective that has not
 * completed by then fails with CN_ERR_RUNTIME naming the operation and the wait (a rank died or
 * stalled), and the caller should stop (cn_dist_abort: MPI cannot be finalized after a broken
 * collective). Unless the program has its own handler, SIGTERM (what mpirun sends the other
 * ranks when one dies) prints "cannl rank R of N: stopped by the launcher (SIGTERM) ..." and
 * exits with status 143. cn_dist_rank / cn_dist_size: 0 / 1 before init and without MPI.
 * cn_dist_finalize finalizes MPI if cn_dist_init initialized it. The state is the process's (one
 * MPI per process): the context only receives the messages; MPI is called from one thread. */
CN_API bool cn_dist_available(void);
CN_API cn_status cn_dist_init(cn_ctx *ctx, double timeout_s);
CN_API int cn_dist_rank(void);
CN_API int cn_dist_size(void);
CN_API cn_status cn_dist_finalize(cn_ctx *ctx);
/* Ends every rank of the job now (MPI_Abort) with exit status `code`; returns only without MPI
 * or before cn_dist_init. */
CN_API void cn_dist_abort(int code);
/* An all-reduce of materialized nodes across ranks: afterwards every rank holds, for each node,
 * the sum over ranks of the values the ranks held, the same bits on every rank. On a context
 * with CPU devices each rank first reduces its devices (cn_allreduce_run, the nodes must be
 * replicated), then ranks reduce device 0's sums, then the result is written to the host's value
 * and so to every device. The order is fixed: each node's cells are split into one segment per
 * rank; rank r receives segment r from every rank (MPI_Ialltoallv), adds the contributions in
 * rank order ((v0 + v1) + v2) + ..., each addition rounded to the node's precision (integers
 * wrap), and every rank receives every segment (MPI_Iallgatherv): the sum's grouping depends only
 * on the rank count. Every precision with addition (float, integer); uint4x32 is refused.
 * cn_dist_allreduce_create is collective: the ranks exchange a hash of their node lists (labels,
 * precisions, dims, padding, device counts) and, where one differs, every rank fails with
 * CN_ERR_INVALID naming the first rank whose list differs from rank 0's, the node and both
 * shapes; a rank that refuses its own list (a node NULL, not materialized, not replicated on a
 * context with devices) sends its message instead, and every rank fails with it at once. Freed
 * with the context unless freed before. */
typedef struct cn_dist_allreduce cn_dist_allreduce;
CN_API cn_dist_allreduce *cn_dist_allreduce_create(cn_ctx *ctx, int n, cn_node *const *nodes,
                                                   cn_backend_kind backend);
CN_API cn_status cn_dist_allreduce_run(cn_dist_allreduce *allreduce);
CN_API void cn_dist_allreduce_free(cn_dist_allreduce *allreduce);
/* Collective start-up check that every rank compiled the same routines: each rank describes
 * routines[0..n) (per routine a line per buffer: its node's label, precision, dims and padding;
 * then a 64-bit hash of its code: the loop IR after optimization and, for the C backend, the
 * generated source), the ranks exchange a hash of the description and, where one differs, the
 * descriptions: every rank fails with CN_ERR_INVALID "cn_dist_check_routines: the ranks'
 * compiled routines differ: rank R has routine `NAME` buffer `x` single [5,2] where rank 0 has
 * routine `NAME` buffer `x` single [4,2]" (or "... routine `NAME` code HASH ..." for the same
 * shapes and other code): the first rank and the first line that differ from rank 0's. A rank
 * that refuses (n < 1, a NULL routine) sends its message and every rank fails with it. */
CN_API cn_status cn_dist_check_routines(cn_ctx *ctx, int n, cn_routine *const *routines);
/* The loop IR (after optimization) and, for the C backend, the generated source. Owned by the
 * routine. */
CN_API const char *cn_routine_loops(const cn_routine *routine);
CN_API const char *cn_routine_source(const cn_routine *routine);
CN_API void cn_routine_free(cn_routine *routine);

/* ---- Tensors, autodiff, training ------------------------------------------------------------ */

/* A graph owns tensors: their shapes are inferred as they are built (contraction-is-emergent,
 * syntax-extensions-cd-op), their nodes, projections and code are produced when first asked for.
 * Arena-owned by the context. */
typedef struct cn_graph cn_graph;
typedef struct cn_tensor cn_tensor;

CN_API cn_graph *cn_graph_create(cn_ctx *ctx);
CN_API cn_ctx *cn_graph_ctx(const cn_graph *g);
/* The value precision of tensors built from now on (default single). */
CN_API void cn_graph_set_prec(cn_graph *g, cn_prec prec);
/* The global random seed (default: the context's option "random_seed", else 42); fails once random
 * init code has been built. */
CN_API cn_status cn_graph_set_seed(cn_graph *g, uint32_t seed);
/* How a kernel term written without a padding marker ("o+k", where "o=+k" is padded and "o<+k"
 * valid) reads in the einsum specs (and %cd ~logic specs) of tensors built from now on: OCANNL's
 * use_padding in scope (convolution-is-a-contraction: the marker is "omitted where use_padding is
 * in scope"). CN_USE_PADDING_UNSET (default): such a term is an error naming its column. */
typedef enum { CN_USE_PADDING_UNSET, CN_USE_PADDING_FALSE, CN_USE_PADDING_TRUE } cn_use_padding;
CN_API void cn_graph_set_use_padding(cn_graph *g, cn_use_padding use_padding);

/* The axes of one row: n < 0 leaves the row to inference; a size 0 leaves that axis's size to
 * inference. labels may be NULL. */
typedef struct {
  int n;
  const int64_t *dims;
  const char *const *labels;
} cn_axes;
typedef struct {
  cn_axes batch, input, output;
} cn_dims;
#define CN_AXES_INFER ((cn_axes){-1, NULL, NULL})
#define CN_AXES_NONE  ((cn_axes){0, NULL, NULL})

typedef enum { CN_GRAD_IF_NEEDED, CN_GRAD_PROHIBIT, CN_GRAD_REQUIRE } cn_grad_spec;

/* Terminals. A number is an array of one unlabeled output axis of size 1 (syntax-extensions-cd-op):
 * the axis broadcasts to any size (pointwise and through compose), and a result of numbers alone
 * keeps it (|->1). Data: a literal with the given rows (dims given: Exact), or, with dims NULL,
 * values laid into whatever axes inference assigns (Total_elems, a reshape). */
CN_API cn_tensor *cn_tensor_number(cn_graph *g, double value);
CN_API cn_tensor *cn_tensor_data(cn_graph *g, const char *label, const cn_dims *dims,
                                 const double *values, size_t count);
/* A parameter: differentiable, its value initialized by init's value (NULL: the default
 * 0.5 * (uniform1 - 0.5)); dims NULL or rows with n < 0 are inferred, but a parameter's
 * dimension that nothing determines is an error at materialization. A number init
 * (cn_tensor_number) fills the parameter without fixing its shape; such a parameter, when nothing
 * determines it, gets the fewest axes its uses need instead of an error. */
CN_API cn_tensor *cn_tensor_param(cn_graph *g, const char *label, const cn_dims *dims,
                                  cn_tensor *init);

/* Fetch terminals: each cell's row-major offset (uint32; shape inferred), the tensor's own node
 * id as a uint4x32 word {id, 0, 0, 0}, and a static index symbol's value (scalars). */
CN_API cn_tensor *cn_tensor_range_over_offsets(cn_graph *g);
CN_API cn_tensor *cn_tensor_embed_self_id(cn_graph *g);
CN_API cn_tensor *cn_tensor_embed_symbol(cn_graph *g, cn_symbol sym);
/* The graph's global seed as a uint4x32 scalar {seed, 0, 0, 0}, one tensor shared by every use
 * (convolution-is-a-contraction's `random_seed ()`); building it fixes the seed. */
CN_API cn_tensor *cn_tensor_random_seed(cn_graph *g);
/* threefry4x32 of the configured variant, the one the initializers use: the 2-round ("light",
 * OCANNL's default_prng_variant) CN_OP_THREEFRY_LIGHT of key and counter, pointwise. */
CN_API cn_tensor *cn_tensor_threefry4x32(cn_graph *g, cn_tensor *key, cn_tensor *counter);
/* Counter-based random values in [0, 1) at the graph's precision, shape inferred
 * (convolution-is-a-contraction): uniform1 =
 * uint4x32_to_prec_uniform1(threefry(threefry(embed_self_id, seed), range_over_offsets)), one value
 * per cell; uniform_at hashes an extra counter tensor into the key; uniform is the vectorized
 * conversion (16 / bytes(prec) values per hashed cell). */
CN_API cn_tensor *cn_tensor_uniform1(cn_graph *g);
CN_API cn_tensor *cn_tensor_uniform_at(cn_graph *g, cn_tensor *counter);
CN_API cn_tensor *cn_tensor_uniform(cn_graph *g);

/* Pointwise application of a primitive op with broadcasting (syntax-extensions-cd-op "."): arity 1,
 * 2 or 3. */
CN_API cn_tensor *cn_tensor_apply(cn_graph *g, cn_op op, int n_args, cn_tensor *const *args);
/* Generalized einsum with 1, 2 or 3 operands: v =:accum prim(v1, ...) over the spec's
 * projections; e.g. `+*` is (ADD, MUL), `++` (ADD, ID), `@^+` (MAX, ADD), `@^^` (MAX, ID).
 * Strides and dilations are integers in the spec; an affine axis without '<' or '=' is valid. */
CN_API cn_tensor *cn_tensor_einsum(cn_graph *g, const char *spec, cn_op accum, cn_op prim,
                                   int n_args, cn_tensor *const *args);
/* The same with the compose logic (`*`: rhs2's output axes feed rhs1's input axes) or the
 * transpose logic (unary, input and output rows swapped). */
CN_API cn_tensor *cn_tensor_compose(cn_graph *g, cn_op accum, cn_op prim, cn_tensor *a,
                                    cn_tensor *b);
CN_API cn_tensor *cn_tensor_transpose(cn_graph *g, cn_tensor *a);
/* Everything built from t is not differentiated through t. */
CN_API cn_tensor *cn_tensor_stop_gradient(cn_graph *g, cn_tensor *t);
/* The leftmost batch axis of t at a static index symbol (`@|`). */
CN_API cn_tensor *cn_tensor_batch_slice(cn_graph *g, cn_tensor *t, cn_symbol index);

/* Whether t has a gradient: PROHIBIT (e.g. a frozen parameter: backprop stops there and SGD
 * leaves it alone), REQUIRE (a gradient node even when nothing below t needs one), IF_NEEDED (the
 * default: parameters always, operations when an operand has one). Only before t is used by
 * another tensor or materialized. */
CN_API cn_status cn_tensor_set_grad_spec(cn_tensor *t, cn_grad_spec spec);
CN_API cn_status cn_tensor_set_label(cn_tensor *t, const char *label);
CN_API const char *cn_tensor_label(const cn_tensor *t);
CN_API int cn_tensor_id(const cn_tensor *t);
CN_API bool cn_tensor_is_diff(const cn_tensor *t);
/* "2|3->4" (batch|input->output); a size not decided yet prints as ?, axes whose number is not
 * decided yet as ... ("|...->?"). Arena-owned. */
CN_API const char *cn_tensor_shape(const cn_tensor *t);
/* The nodes (materializing the graph first): NULL with a message if shapes do not close. The
 * gradient is NULL for a tensor without one. */
CN_API cn_node *cn_tensor_value(cn_tensor *t);
CN_API cn_node *cn_tensor_grad(cn_tensor *t);
/* cn_node_to_host of the tensor's value and, when it has one, its gradient. */
CN_API cn_status cn_tensor_to_host(cn_tensor *t);
/* How a tensor prints (cn_tensor_format_with). */
typedef struct {
  bool json;         /* one JSON line (every value at full precision) instead of the grid */
  int64_t threshold; /* a tensor of more cells is elided: each axis longer than 6 shows its
                        first and last 3 positions around "..."; negative: never */
  int precision;     /* the most digits after the point (0 .. 17) */
} cn_print_options;
/* The context's options "print_threshold" (default 1000, else $CANNL_PRINT_THRESHOLD) and
 * "print_precision" (default 8, else $CANNL_PRINT_PRECISION), json false; an error for a
 * variable that is not an integer in range (the options are checked when set). */
CN_API cn_status cn_tensor_print_options(cn_ctx *ctx, cn_print_options *out);
/* The tensor's values (or its gradient's) as text, numpy's layout with OCANNL's axis labels: the
 * header `"label" (#id) SHAPE`, then the last output axis against the last input axis (without
 * input axes, the last two output axes) as a grid of aligned columns, the indices of a labeled
 * axis as row or column headers; the other axes (batch first) as blocks headed `[i, :, :]`; a
 * single axis on one line (wrapped at 80 columns); elided past the threshold. Numbers as numpy
 * prints them: the fewest digits (at most the precision) that read back as the stored value,
 * points aligned, scientific notation when magnitudes reach 1e8, go below 1e-4 or span over 1e3.
 * Or, json, one JSON line {"label", "batch", "input", "output", "values" (memory order, full
 * precision)}. Owned by the graph and valid until its next format (the buffer is reused, so
 * printing every step of a long loop takes no new memory); NULL with a message if the tensor
 * cannot be materialized or the precision is out of range. cn_tensor_format prints with the
 * context's options (cn_tensor_print_options). */
CN_API const char *cn_tensor_format_with(cn_tensor *t, bool grad, const cn_print_options *o);
CN_API const char *cn_tensor_format(cn_tensor *t, bool grad, bool json);

/* A node of its own, written only by standalone updates (a %cd inline declaration, an optimizer
 * state): zero-filled, not differentiable, rows given or inferred from the updates. */
CN_API cn_tensor *cn_tensor_buffer(cn_graph *g, const char *label, const cn_dims *dims);

/* t's gradient as a (non-differentiable) tensor of t's shape, to read in expressions (the %cd
 * `p.grad` inside an embedded expression); it is computed by backprop, never by forward code. */
CN_API cn_tensor *cn_tensor_grad_of(cn_graph *g, cn_tensor *t);

/* Standalone assignments (contraction-is-emergent's producer regime): `lhs <accum>= prim(args...)`,
 * `=:` when init, contributing their own constraint to inference through `logic`: "." pointwise,
 * "@" compose (with fma's three operands: compose-accumulate, the third read like the result), "T"
 * transpose (unary), or an einsum spec; NULL: the primitive's default projection (compose for fma,
 * pointwise for every other, syntax-extensions-cd-op's op table). A reference names a tensor's
 * value or its gradient. The assignment's code is produced after materialization. */
typedef struct {
  cn_tensor *tensor;
  bool grad;
} cn_tref;
typedef struct cn_update cn_update;
CN_API cn_update *cn_graph_update(cn_graph *g, cn_tref lhs, bool init, cn_op accum, cn_op prim,
                                  int n_args, const cn_tref *args, const char *logic);
CN_API cn_asgn *cn_graph_update_code(cn_graph *g, cn_update *u);

/* Code. Each materializes the graph and returns an assignments tree to compile with
 * cn_routine_compile (trees can be joined with cn_asgn_seq into one routine).
 *   forward: the forward code of t, each sub-expression once, parameters only read;
 *   init_params: the init code of the parameters t depends on (transitively) that no earlier
 *     call handed out;
 *   backprop: zero every gradient of loss's graph, loss.grad =: 1, then the gradient
 *     assignments in reverse order;
 *   grad_update: forward then backprop;
 *   sgd_update: for each parameter p of loss: delta =: p.grad + weight_decay * p; with momentum
 *     m =: momentum * m + delta and delta = nesterov ? delta + momentum * m : m; then
 *     p =- learning_rate * delta, where learning_rate is a tensor expression (its forward code
 *     comes first), so a schedule over a step symbol works. */
CN_API cn_asgn *cn_graph_forward(cn_graph *g, cn_tensor *t);
CN_API cn_asgn *cn_graph_init_params(cn_graph *g, cn_tensor *t);
CN_API cn_asgn *cn_graph_backprop(cn_graph *g, cn_tensor *loss);
CN_API cn_asgn *cn_graph_grad_update(cn_graph *g, cn_tensor *loss);
typedef struct {
  cn_tensor *learning_rate;
  double momentum, weight_decay;
  bool nesterov;
} cn_sgd;
CN_API cn_asgn *cn_graph_sgd_update(cn_graph *g, cn_tensor *loss, const cn_sgd *sgd);
/* Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_, as nanoGPT clips at 1.0): over
 * every differentiable parameter p of loss, total = sqrt(sum_p sum(p.grad^2)) and
 * scale = min(1, max_norm / (total + 1e-6)) (in double), then p.grad =: scale * p.grad for each.
 * A tree of its own rather than an optimizer field: run it between the gradient and any update,
 * e.g. cn_asgn_seq of grad_update, clip_grad_norm and adam_update, so the scale is computed once
 * per step from all the gradients before any parameter moves, for SGD and Adam alike. max_norm
 * must be positive and finite. */
CN_API cn_asgn *cn_graph_clip_grad_norm(cn_graph *g, cn_tensor *loss, double max_norm);
/* p.grad =: factor * p.grad for every differentiable parameter p of loss (a tree to put before an
 * update, as clip_grad_norm's; the notation's data-parallel loops average the gradients summed
 * across devices with it). */
CN_API cn_asgn *cn_graph_scale_grads(cn_graph *g, cn_tensor *loss, double factor);
/* Adam (Kingma & Ba, bias-corrected) and AdamW (decoupled weight decay): for each parameter p
 * of loss, with p's Adam step counter t (a state scalar of its own, like its moments, so a second
 * update tree of p continues the first while two updates of different parameters count their
 * own steps; each tree does t =+ 1 first):
 *   g = p.grad (+ weight_decay * p unless decoupled);
 *   m =: beta1 * m + (1 - beta1) * g;  v =: beta2 * v + (1 - beta2) * g * g;
 *   p =- learning_rate * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
 *        (+ learning_rate * weight_decay * p, applied first, when decoupled).
 * m, v and t are state tensors labeled "<param>.adam_m", "<param>.adam_v" and
 * "<param>.adam_step", zero at creation, saved by checkpoints (cn_graph_state). Every field is
 * taken as given: start from cn_adam_defaults (beta1 0.9, beta2 0.999, eps 1e-8, no weight decay)
 * and change what differs; beta1 and beta2 lie in [0, 1) (beta1 = 0: no momentum, an RMSprop-like
 * step lr * g / (sqrt(v / (1 - beta2^t)) + eps)), eps is positive. decay_matrices_only (false
 * in the defaults) applies weight_decay only to parameters whose value has 2 or more axes (batch,
 * input and output axes together: the weights of linear layers, embeddings), not to 1-axis ones
 * (biases, layer-norm gains) nor scalars, as nanoGPT's AdamW groups do; the biases and gains the
 * attention blocks create are exempt whatever their axes (attention's q/k/v biases are |->H,D,
 * nanoGPT's one c_attn.bias of 3C cells). */
typedef struct {
  cn_tensor *learning_rate;
  double beta1, beta2, eps, weight_decay;
  bool decoupled, decay_matrices_only;
} cn_adam;
CN_API cn_adam cn_adam_defaults(cn_tensor *learning_rate);
CN_API cn_asgn *cn_graph_adam_update(cn_graph *g, cn_tensor *loss, const cn_adam *adam);
/* The parameters of t (its params set), in creation order; returns the count, writes at most
 * cap. */
CN_API int cn_graph_params(cn_graph *g, cn_tensor *t, cn_tensor **out, int cap);

/* ---- Data-parallel training (src/tensor/data_parallel.c) ----
 * A training step run on `devices` CPU devices of the context (cn_ctx_open_devices, opened here):
 * `grad` is the loss's forward and backprop (cn_graph_grad_update), `update` the optimizer's
 * (cn_graph_sgd_update / cn_graph_adam_update), two routines of a host backend compiled from the
 * graph as built for ONE SHARD of the batch (global batch B, B / devices per device). Every node
 * they write (parameters, gradients, optimizer state) is made replicated, so each device keeps its
 * own. Scaling: the driver sums the shards' gradients and does not scale them, so the loss must be
 * the shard's sum divided by the GLOBAL batch size B (not a mean over the shard): the sum is then
 * the gradient of the whole batch's mean, what one device would compute (up to the grouping of
 * the sums). cn_dp_create returns NULL with a message for a loss without parameters or a
 * parameter whose gradient `grad` does not write. Freed with the context unless freed before.
 * Across MPI ranks (cn_dist_init before, cn_dist_size() > 1): every rank calls cn_dp_create with
 * the same model and device count, the global batch B is cut into ranks x devices shards (rank
 * r's device d takes shard r * devices + d; B / (ranks x devices) per device, still divided by B
 * in the loss), and cn_dp_create is collective: it runs cn_dist_check_routines on grad and update
 * (their buffers' shapes and code) and creates a cn_dist_allreduce of the gradients and the loss
 * (the node lists and device counts), so a rank with another model fails at start on every rank
 * with a message naming the rank and the difference. cn_dp_step, cn_dp_check, cn_dp_save and
 * cn_dp_load are collective then too: every rank calls them in the same order. */
typedef struct cn_dp cn_dp;
CN_API cn_dp *cn_dp_create(cn_graph *g, cn_tensor *loss, cn_routine *grad, cn_routine *update,
                           int devices, cn_backend_kind backend);
/* Splits a global batch of `global` items along axis `axis` of a data tensor (whose node holds
 * one shard: dims[axis] == global / (ranks x devices)) and gives shard s = rank * devices + d,
 * the items [s * shard, (s + 1) * shard) of every index of the axes before it, to device d;
 * values are the whole batch's (every rank passes all of it) in row-major order with dims[axis]
 * = global. CN_ERR_INVALID with a message when global does not divide among the ranks x devices,
 * the axis is not the shard's size, or count is not the size. */
CN_API cn_status cn_dp_shard(cn_dp *dp, cn_tensor *data, int axis, int64_t global,
                             const double *values, size_t count);
/* Binds a static index on whichever of the two routines reads it (an error when neither does). */
CN_API cn_status cn_dp_bind(cn_dp *dp, cn_symbol sym, int64_t value);
/* Binds a static index of the gradient routine on one device: each step runs `grad` on device d
 * with sym = the value given for d (so each device reads its own minibatch of a data set sliced
 * by the index, the notation's data-parallel loops), overriding cn_dp_bind's value for `grad`;
 * `update` keeps cn_dp_bind's. Once a symbol is bound per device, cn_dp_step refuses until every
 * device has a value. CN_ERR_INVALID when `grad` does not read sym or the device is not one of
 * dp's. */
CN_API cn_status cn_dp_bind_device(cn_dp *dp, cn_symbol sym, int device, int64_t value);
/* One step: `grad` run on every device, the parameters' gradients (and the loss, when
 * materialized, so it becomes the global batch's) all-reduced (cn_allreduce_run: one call;
 * across ranks cn_dist_allreduce_run, which runs it, then sums the ranks' in rank order), `update`
 * run on every device, then cn_dp_check; device 0's values of what `update` writes (parameters,
 * optimizer state) and the loss are then copied to the host (cn_node_get_values, evaluation,
 * checkpoints see them). */
CN_API cn_status cn_dp_step(cn_dp *dp);
/* Compares every parameter's bits on every device with device 0's: CN_ERR_RUNTIME naming the
 * parameter and the device where they differ ("cn_dp_check: parameter 'w2' differs between
 * device 0 and device 1"). Across ranks, then a 64-bit hash of each parameter's bits on device 0
 * against rank 0's: "cn_dp_check: parameter 'w2' differs between rank 0 and rank 1 of 2" on
 * every rank (a rank whose devices differ keeps its own message; the others name it). */
CN_API cn_status cn_dp_check(cn_dp *dp);
/* Checkpoints of the training state (cn_graph_state of the loss: parameters and optimizer
 * state, as the host holds them after cn_dp_step: device 0's) in a safetensors file. cn_dp_save:
 * rank 0 alone writes it (atomically: cn_data_save_safetensors, a temporary file renamed over
 * the old one) and every rank returns once the file is complete, with rank 0's failure if it
 * failed. cn_dp_load: every rank reads the file into the host's values (so every device's copy),
 * then cn_dp_check: every device of every rank holds the same bits. The symbols the caller binds
 * (the step number) are the caller's to restore. */
CN_API cn_status cn_dp_save(cn_dp *dp, const char *path);
CN_API cn_status cn_dp_load(cn_dp *dp, const char *path);
CN_API void cn_dp_free(cn_dp *dp);

/* ---- The operation library (src/tensor/library.c) ----
 * Structured operations composed from the constructors above, so each has the gradient of its
 * pieces. Primitive ops have no wrappers: use cn_tensor_apply with CN_OP_RELU etc. */

/* `*`: compose with (ADD, MUL), rhs2's output axes feeding rhs1's input axes. */
CN_API cn_tensor *cn_tensor_matmul(cn_graph *g, cn_tensor *a, cn_tensor *b);
/* An operation defined by its code (syntax-extensions-cd-op "Tensor.binop ~op_asn ~grad_asn";
 * contraction-is-emergent's consumer regime). The operands' axes relate by `logic`: NULL or "."
 * pointwise with broadcasting, "@" compose (two operands), or an einsum spec (a kernel term
 * without padding marker reads as cn_graph_set_use_padding says); "T", transpose, is an update's
 * logic and refused here. At each point of that one
 * inferred record the result accumulates `forward`, an expression over the operands a, b, c:
 * `accum` CN_OP_ARG2 (=:, one point per result cell), CN_OP_ADD (=:+), CN_OP_MAX (=:@^) or
 * CN_OP_MIN (=:^^); operand k's gradient accumulates grad[k] (=+), an expression over a, b, c,
 * the result v (where one point writes each cell) and the incoming gradient g (NULL or "":
 * nothing flows into operand k), each leaf read through its slot of the record: every
 * assignment is a slot-permuted view of it. The expressions are the derivative table's language
 * (src/tensor/derivs.def): decimal numbers, + - * /, unary -, parentheses and the primitive ops
 * by name, `name(x, ...)`; a compound part becomes an intermediate over the record's points.
 * Under max or min a gradient counts where the point attains the result (the argmax rule).
 * no_grad: the result has no gradient (grad_spec Prohibit_grad). The result's precision is the
 * promotion of the operands' (as for a primitive op). An operation whose forward is one primitive
 * over the operands in order ("mul(a, b)", "relu(a)", "a") and whose gradients are the derivative
 * table's for it is that primitive's operation, the tensor cn_tensor_apply, _compose or _einsum
 * builds (a pointwise =: being its =:+): the same code and speed. NULL with a message (the
 * formula and the column of its first error, the operand count, the logic). */
typedef struct {
  const char *label;
  int arity; /* 1 to 3 */
  const char *logic;
  cn_op accum;
  const char *forward;
  const char *grad[3];
  bool no_grad;
} cn_op_code;
CN_API cn_tensor *cn_tensor_operation(cn_graph *g, const cn_op_code *code, cn_tensor *const *args);
/* `**.`: a to the power p, pointwise (p is a number: no gradient flows into it). */
CN_API cn_tensor *cn_tensor_pointpow(cn_graph *g, cn_tensor *a, double p);
/* Einsum forms: einsum1 `++` (ADD, ID), einsum2 `+*` (ADD, MUL), einsum3 (ADD, MUL3: the sum of
 * triple products), outer_sum `+++` (ADD, ADD), einmax1 `@^^` (MAX, ID), tropical `@^+`
 * (MAX, ADD: max-plus). Under MAX the gradient goes to every operand cell attaining the max. */
CN_API cn_tensor *cn_tensor_einsum1(cn_graph *g, const char *spec, cn_tensor *a);
CN_API cn_tensor *cn_tensor_einsum2(cn_graph *g, const char *spec, cn_tensor *a, cn_tensor *b);
CN_API cn_tensor *cn_tensor_einsum3(cn_graph *g, const char *spec, cn_tensor *a, cn_tensor *b,
                                    cn_tensor *c);
CN_API cn_tensor *cn_tensor_outer_sum(cn_graph *g, const char *spec, cn_tensor *a, cn_tensor *b);
CN_API cn_tensor *cn_tensor_einmax1(cn_graph *g, const char *spec, cn_tensor *a);
CN_API cn_tensor *cn_tensor_tropical(cn_graph *g, const char *spec, cn_tensor *a, cn_tensor *b);
/* The leftmost batch axis of t at a constant index (the einsum "i...|...->... => ...|...->..."
 * with i the index): the axis has at least index + 1 positions. */
CN_API cn_tensor *cn_tensor_batch_slice_at(cn_graph *g, cn_tensor *t, int64_t index);

/* Index terminals at the graph's precision, never differentiable: range holds 0 .. n-1 along
 * one output axis of size n; range_of_shape has the given rows (all must be given) and each cell
 * its row-major offset in memory order (batch, output, input); offsets is the same with the
 * shape inferred. embed_dim is a scalar holding the size of t's axis `axis` (memory order) once
 * inference has solved it; t is read for its shape only, not computed. */
CN_API cn_tensor *cn_tensor_range(cn_graph *g, int64_t n);
CN_API cn_tensor *cn_tensor_range_of_shape(cn_graph *g, const cn_dims *dims);
CN_API cn_tensor *cn_tensor_offsets(cn_graph *g);
CN_API cn_tensor *cn_tensor_embed_dim(cn_graph *g, cn_tensor *t, int axis);

/* Along the last output axis (convolution-is-a-contraction "Striding without a kernel"): interleave
 * puts a's cells at the even positions and b's at the odd ones (a and b of equal shape; the
 * result's axis is twice as long); deinterleave_even / _odd read positions 2i / 2i+1 (the axis must
 * have even size). */
/* Moving cells (src/tensor/layout.c). Axes are counted in memory order: the batch axes, then the
 * output axes, then the input axes. Both need their operands' dims solved when they are built
 * (give them, or materialize the graph first); NULL with a message otherwise.
 * concat: a and b side by side along `axis` (numpy.concatenate, torch.cat): the same batch,
 *   output and input axes, equal dims but along `axis`, where the result has both; the result
 *   keeps the operands' rows. The gradient is split back: a.grad gets the result's first n_a
 *   cells along the axis, b.grad the rest. (The seeds defer concatenation; OCANNL has it.)
 * reshape: the same cells in the given rows, row-major: every cell keeps its offset in memory
 *   order (batch, output, input), so reshaping a |3->2 tensor (output 2, input 3, memory [2][3])
 *   to output [6] lists row 0 then row 1, and to batch [2] output [3] makes each output row a
 *   batch position. The cell counts must agree; every dim at least 1. The gradient is reshaped
 *   back. */
CN_API cn_tensor *cn_tensor_concat(cn_graph *g, cn_tensor *a, cn_tensor *b, int axis);
CN_API cn_tensor *cn_tensor_reshape(cn_graph *g, cn_tensor *t, const cn_dims *dims);
CN_API cn_tensor *cn_tensor_interleave(cn_graph *g, cn_tensor *a, cn_tensor *b);
CN_API cn_tensor *cn_tensor_deinterleave_even(cn_graph *g, cn_tensor *t);
CN_API cn_tensor *cn_tensor_deinterleave_odd(cn_graph *g, cn_tensor *t);

/* 2-D convolution. x: any batch axes and output axes (h, w, ic); kernel: input axes (kh, kw, ic)
 * and output axis oc (memory order [oc, kh, kw, ic]; typically a parameter); bias: NULL or
 * output axis oc. Result: x's batch axes, output axes (oh, ow, oc), with
 *   y[oh, ow, oc] = bias[oc] + sum_{kh, kw, ic} x[S*oh + D*kh - left, S*ow + D*kw - left, ic]
 *                                                * kernel[oc, kh, kw, ic]
 * for stride S and dilation D. Padded (default): h = S*oh, out-of-range cells read 0, with
 * convolution-is-a-contraction's split of a kernel of size k, left = D*(k - (k+1)/2) (the right
 * margin is D*((k+1)/2); the buffer's margins are the maximum over its readers). Valid: left = 0
 * and h = S*(oh-1) + 1 + D*(k-1). Zeroed fields of opts (or opts NULL) mean stride 1, dilation 1,
 * padded. */
typedef struct {
  int64_t stride, dilation;
  bool valid;
} cn_conv2d;
CN_API cn_tensor *cn_tensor_conv2d(cn_graph *g, cn_tensor *x, cn_tensor *kernel, cn_tensor *bias,
                                   const cn_conv2d *opts);
/* Pooling over windows of window x window cells moved by stride (0: stride = window), valid
 * mode: x has any batch axes and output axes (h, w, channels...) with h = stride*(oh-1) + window
 * (likewise w); the result has output axes (oh, ow, channels...). max_pool2d is tropical with a
 * zero kernel (its gradient goes to the cells attaining each max), avg_pool2d the einsum with a
 * kernel of 1/window^2. */
CN_API cn_tensor *cn_tensor_max_pool2d(cn_graph *g, cn_tensor *x, int64_t window, int64_t stride);
CN_API cn_tensor *cn_tensor_avg_pool2d(cn_graph *g, cn_tensor *x, int64_t window, int64_t stride);
/* exp(x - max) / sum(exp(x - max)) over all output axes of x, for each batch and input position
 * (the max is reduced with einmax1 and not differentiated: the softmax does not depend on it). */
CN_API cn_tensor *cn_tensor_softmax(cn_graph *g, cn_tensor *x);
/* Training pieces (src/tensor/train.c). Classes lie along x's output axes (one axis in
 * practice); an example is one batch (and input) position.
 *   log_softmax: x - max - log(sum(exp(x - max))) over the output axes, computed so that no exp
 *     overflows (the max is not differentiated, as in softmax);
 *   sigmoid: 1 / (1 + exp(-x)); softplus: log(1 + exp(x)), as max(x, 0) + log(1 + exp(-|x|));
 *   sum, mean: of every cell of x, a scalar;
 *   mse: the mean over every cell of (pred - target)^2;
 *   binary_cross_entropy: from logits z and targets y in [0, 1], the mean over every cell of
 *     softplus(z) - y z (stable for any z);
 *   cross_entropy: from logits over classes and integer class labels (a tensor of x's batch
 *     axes holding 0 .. C-1 in any precision, with no output axis or one of size 1), the mean
 *     over examples of -log_softmax(x)[label];
 *   argmax: per example, the first class attaining the maximum, as a value of x's precision;
 *   accuracy: the fraction of examples whose argmax equals the label, a scalar in [0, 1];
 *   confusion: a C x C tensor (output axes: true class, predicted class) of example counts
 *     (x must have one class axis).
 * A label of cross_entropy, accuracy or confusion that is not a class index (outside 0 .. C-1,
 * not an integer, NaN: a 1-based or corrupt label file) fails every run that computes the result,
 * whatever the "check" option: cn_routine_run returns CN_ERR_RUNTIME with "routine 'R':
 * cross_entropy: label 7 at [1] of "labels" (#5) is not one of the 3 class indices of "x" (#1):
 * an integer from 0 to 2" (the first bad cell of the labels tensor, row-major), after the routine
 * ran, its example's term NaN.
 * None of argmax, accuracy and confusion is differentiable. */
CN_API cn_tensor *cn_tensor_log_softmax(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tensor_sigmoid(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tensor_softplus(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tensor_sum(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tensor_mean(cn_graph *g, cn_tensor *x);
/* The largest (smallest) cell of x: of every cell, a scalar without axes, when spec is NULL;
 * else over the axes the einsum spec "RHS => LHS" reduces ("b|i => b": per batch position), an
 * einsum accumulating with max (min). The gradient goes to every cell attaining its result (all
 * of them on a tie, where PyTorch's amax would share it). Labeled "max" ("min"). */
CN_API cn_tensor *cn_tensor_reduce_max(cn_graph *g, cn_tensor *x, const char *spec);
CN_API cn_tensor *cn_tensor_reduce_min(cn_graph *g, cn_tensor *x, const char *spec);
/* numpy.clip / torch.clamp: min(max(x, lo), hi) pointwise; lo = -INFINITY (hi = INFINITY) leaves
 * that side open. The gradient passes where lo <= x <= hi, as torch.clamp's, else 0. Refused
 * (NULL with a message) unless lo <= hi, neither NaN. Labeled "clip". The pointwise |x| is the
 * primitive op CN_OP_ABS (cn_tensor_apply; its gradient sign(x) g, 0 at 0), and selection the
 * primitive CN_OP_WHERE: where(c, a, b) is a where c != 0, else b, with broadcasting, its
 * gradient flowing to a or b as c selects (none into c). */
CN_API cn_tensor *cn_tensor_clip(cn_graph *g, cn_tensor *x, double lo, double hi);
CN_API cn_tensor *cn_tensor_mse(cn_graph *g, cn_tensor *pred, cn_tensor *target);
CN_API cn_tensor *cn_tensor_binary_cross_entropy(cn_graph *g, cn_tensor *logits, cn_tensor *target);
CN_API cn_tensor *cn_tensor_cross_entropy(cn_graph *g, cn_tensor *logits, cn_tensor *labels);
CN_API cn_tensor *cn_tensor_argmax(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tensor_accuracy(cn_graph *g, cn_tensor *logits, cn_tensor *labels);
CN_API cn_tensor *cn_tensor_confusion(cn_graph *g, cn_tensor *logits, cn_tensor *labels);

/* Embeddings (src/tensor/gather.c; docs/ARCHITECTURE.md "Index-valued projections"):
 *   gather: rows of `table` at the indices `ids` (of an integer precision, or whole numbers of a
 *     float one, as cross_entropy's labels; their shape must be solved when the gather is built).
 * The first axis of the table (its first output axis: the table's axes are all output axes, e.g. a
 * parameter [V; D]) is the one indexed; the result has every axis of ids, in memory order, as batch
 * axes, then the rest of the table's axes as output axes: table [V; D] and ids int32 [B; T] (or [B]
 * -> [T]) give B,T | -> D, in the table's precision. The generated code reads the table at each
 * index (no one-hot); the gradient is a scatter-add into the table's gradient (repeated indices
 * accumulate, in the order of the ids' cells, on any thread count). An index outside [0, V) reads
 * nothing (its result row is 0), as does one that is not a whole number, and fails the run that
 * computes the gather with "gather: index <v> at [cell] of "<ids>" (#n) is not one of the V rows of
 * "<table>" (#m): ...", as cross_entropy's labels do. one_hot: 1 where the class index equals the
 * index, else 0, in the graph's precision: every axis of ids as batch axes, then one output axis of
 * n_classes classes (an index outside [0, n_classes) gives a row of zeros). A `+` contraction of a
 * one_hot with another tensor whose only use of the class axis is to sum it against one axis of
 * that tensor (an einsum or compose `table * one_hot ids` with table {V -> D}) is computed as a
 * gather of that axis: the one-hot is never computed nor stored. */
CN_API cn_tensor *cn_tensor_gather(cn_graph *g, cn_tensor *table, cn_tensor *ids);
CN_API cn_tensor *cn_tensor_one_hot(cn_graph *g, cn_tensor *ids, int64_t n_classes);

/* Neural-network blocks (src/tensor/nn.c), composed from primitive ops so their gradients are the
 * core's:
 *   gelu: the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)));
 *   layer_norm: over x's whole output row, for each batch and input position (as softmax),
 *     (x - mean) / sqrt(var + eps) * scale + shift with the biased variance mean((x - mean)^2);
 *     scale and shift (NULL: none) are per feature, with exactly x's output axes, shared by
 *     every batch and input position: typically parameters initialized to 1 and 0
 *     (cn_tensor_param with init cn_tensor_number(g, 1) / cn_tensor_number(g, 0), whose shape
 *     inference then gives the output row); eps must be finite and >= 0 (1e-5 is usual). */
CN_API cn_tensor *cn_tensor_gelu(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tensor_layer_norm(cn_graph *g, cn_tensor *x, cn_tensor *scale,
                                       cn_tensor *shift, double eps);
/* Dropout: each cell of x is zeroed with probability rate, the others divided by 1 - rate, by a
 * counter-based mask uniform_at(step) < rate (a threefry hash of the mask's own tensor id, the
 * graph's seed, step's raw bits and the cell's offset: the same for a seed and step, another for
 * another step or another dropout). rate is a tensor of values in [0, 1) broadcast against x
 * (one cell in practice), step the counter (e.g. a one-cell cn_tensor_buffer the host sets to
 * the step number before each run). Evaluation is signalled by the rate: a rate buffer set to 0
 * (cn_node_set_values) makes the result x exactly, without recompiling; a rate of
 * cn_tensor_number(g, 0) is the identity for good. */
CN_API cn_tensor *cn_tensor_dropout(cn_graph *g, cn_tensor *x, cn_tensor *rate, cn_tensor *step);

/* Causal attention (src/tile/attention.c). The mask is a Tile constraint k <= q on every product
 * that could read a future key (scores, the softmax's max and sum, the normalization, the mix with
 * V): their loops run `for k in 0..q + 1`, so masked cells cost nothing and no gradient reaches a
 * future position; masked probabilities are exactly 0. Tile needs its operands' dims: an operand
 * whose shape is still open (a pointwise result) first settles the shapes of the graph built so
 * far, as cn_tensor_value does. Dims below are in memory order (batch, output, input axes).
 *   causal_softmax: scores [B, H, T, T] (query, key) -> probabilities of the same dims, the
 *     softmax over k <= q of each (b, h, q) row, computed from the row's max over k <= q (the
 *     max's gradient, through its winning key as for any Tile max, sums to 0 up to rounding:
 *     the softmax does not depend on it);
 *   causal_sdpa: q, k, v [B, T, H, D] -> [B, T, H, D] (output axes), the scaled dot-product
 *     attention softmax(q k^T / sqrt(D), k <= q) v per batch and head; with a dropout rate (a
 *     tensor as cn_tensor_dropout's; NULL: none) the probabilities go through dropout keyed by
 *     step;
 *   causal_attention: nanoGPT's CausalSelfAttention on x of shape B,T|->C (two batch axes,
 *     batch and time, one output axis): q, k, v = x Wq + bq, ... with weights |C->H,D (memory
 *     [H, D, C]: the rows of nanoGPT's c_attn.weight for q, k, v in turn) and biases |->H,D,
 *     H = n_heads heads of size D = C / H, then causal_sdpa, then the projection |H,D->C plus a
 *     bias |->C, then dropout; the result is B,T|->C;
 *   transformer_block: nanoGPT's pre-norm Block: x1 = x + causal_attention(ln_1(x)),
 *     x1 + dropout(c_proj(gelu(c_fc(ln_2(x1))))) with c_fc |C->4C, c_proj |4C->C and layer norms
 *     of eps 1e-5 with learned scale and shift.
 * Parameters are created as nanoGPT initializes them: weights normal with std 0.02, the two
 * residual projections (attn.c_proj, mlp.c_proj) with std 0.02 / sqrt(2 n_layer), biases 0,
 * layer-norm scales 1 and shifts 0. Their labels are prefix "." nanoGPT's names:
 * attn.{q,k,v}.{weight,bias}, attn.c_proj.{weight,bias}, ln_1 and ln_2 .{weight,bias},
 * mlp.c_fc.{weight,bias}, mlp.c_proj.{weight,bias} (prefix "h0": "h0.attn.q.weight"; give each
 * block its own prefix). A parameter of g that already has such a label is reused, not created:
 * applying a block again with the same prefix (the model on a validation batch, on a sampling
 * window) reads the same weights; one of that label with other dims is an error. dropout_rate NULL:
 * no dropout (nanoGPT's dropout 0); with a rate, a step counter is required (see
 * cn_tensor_dropout). last_position (causal_attention and transformer_block): the result is the
 * last position's only, B,1|->C, computed from every position's keys and values and the last
 * one's query (which every key precedes: no mask) — the forward that sampling the next token
 * needs, a fifth of a 4-layer model's products less when the last block is applied so; its
 * values are the full block's last row (the same operations, except that products below the
 * matrix-product threshold round each update in the fused mode as the nest says, see "exact");
 * no dropout with it. */
typedef struct {
  int n_heads, n_layer;
  cn_tensor *dropout_rate, *dropout_step;
  bool last_position;
} cn_attention;
CN_API cn_tensor *cn_tensor_causal_softmax(cn_graph *g, cn_tensor *scores);
CN_API cn_tensor *cn_tensor_causal_sdpa(cn_graph *g, cn_tensor *q, cn_tensor *k, cn_tensor *v,
                                        cn_tensor *rate, cn_tensor *step);
CN_API cn_tensor *cn_tensor_causal_attention(cn_graph *g, cn_tensor *x, const char *prefix,
                                             const cn_attention *cfg);
CN_API cn_tensor *cn_tensor_transformer_block(cn_graph *g, cn_tensor *x, const char *prefix,
                                              const cn_attention *cfg);

/* Random initializers of inferred shape (use them as a parameter's init), built from uniform1 /
 * uniform_at and arithmetic, so they are deterministic like those:
 *   normal: standard normal by Box-Muller, sqrt(-2 ln(1 - u1)) * cos(2 pi u2), from two uniform1
 *     streams (normal_at: two uniform_at(counter) streams);
 *   xavier: uniform in [-b, b) with b = sqrt(6 / (fan_in + fan_out));
 *   kaiming_uniform: uniform in [-b, b) with b = sqrt(6 / fan_in) (variance 2 / fan_in);
 *   kaiming_normal: normal with standard deviation sqrt(2 / fan_in). */
CN_API cn_tensor *cn_tensor_normal(cn_graph *g);
CN_API cn_tensor *cn_tensor_normal_at(cn_graph *g, cn_tensor *counter);
CN_API cn_tensor *cn_tensor_xavier(cn_graph *g, double fan_in, double fan_out);
CN_API cn_tensor *cn_tensor_kaiming_uniform(cn_graph *g, double fan_in);
CN_API cn_tensor *cn_tensor_kaiming_normal(cn_graph *g, double fan_in);

/* ---- Tile (src/tile, tile-edsl) ------------------------------------------------------------- */

/* A name a Tile statement refers to: a tensor (tensor non-NULL; `dims`, if not NULL, names its
 * axes in memory order as Tile dims, e.g. "M, N" is I.bind_dims(M, N); a name repeated across
 * bindings must have one size), or a dim (tensor NULL) of size `dim`. Dim names are upper-case. */
typedef struct {
  const char *name;
  cn_tensor *tensor;
  const char *dims;
  int64_t dim;
} cn_tile_binding;
/* One contraction (tile-edsl), e.g. "O[i : (N + 1) / 2] >= I[2*i + j], j < 2" with
 * {"I", I, "N"}: the output's name and index polynomials with optional sizes (`: SIZE`, an
 * integer expression of dims with + - * and floor division `/` or `//`; an axis without one is
 * sized by the largest value its index reaches over the operands and constraints), an
 * aggregation (`+=` sum, `*=` product, `>=` max, `<=` min, `=` assign), a combination (a single
 * tensor access, two combined by `*`, `+` or `==`, or `cond(A[..], B[..], C[..])`: C where A
 * equals B, else 0), then constraints `, poly < bound` (implicitly 0 <= poly). Index
 * polynomials are affine combinations of lower-case index variables and dims, which may be
 * divided by dims and integers: that division is exact (a division between integers alone is
 * floor division, as in sizes); `[]` and `()` brackets are interchangeable, `[()]` is an empty
 * index list. The contraction aggregates over exactly the valid index sets (every index an
 * integer within its tensor's bounds, the output included, every constraint's polynomial an
 * integer that holds): a point where a division leaves a fraction is skipped, so
 * "O[x : 2 * N] += I[x / 2]" upsamples (odd cells 0) and "O[x : (N - 1) * S + K] +=
 * I[(x - k) / S] * W[k]" is a transposed convolution. Output cells no valid set reaches are 0.
 * The loops run over a change of variables that keeps only integer points (`cannl run
 * --emit=loops`: `i_2` for i = 2*i_2). `=` is refused when two valid sets may write one output
 * cell (decided conservatively). The operands' shapes must be known when the statement is built
 * (a pointwise result's shape is only known once the graph is materialized). The result has the
 * statement's output axes as output axes. Errors are positioned ("... at column C" with the text
 * and a caret). */
CN_API cn_tensor *cn_tile(cn_graph *g, const char *text, int n_bindings,
                          const cn_tile_binding *bindings);

/* Tile functions: the body of a tile-edsl function in its Python flavor or its C++ flavor
 * (`Tensor f(const Tensor& I) { TensorDim N; I.bind_dims(N); ...; return O; }`, the header
 * optional; with a header and n_params 0 the header's parameters are taken; see
 * docs/notation.md "Tile functions"), e.g. in Python with parameter I:
 *     I.bind_dims(N)
 *     O = TensorOutput((N + 1) / 2)
 *     O[i] >= I[2 * i + j]
 *     O.add_constraint(j < 2)
 *     return O
 * Statements are separated by newlines or ';' (a statement continues over lines inside
 * brackets); `#` comments. Besides contractions (as cn_tile; with TensorOutput their dims come
 * from it, and add_constraint statements anywhere in the body apply to them): TensorDims /
 * TensorIndexes declarations, X.bind_dims(...) (the tensor's axes in memory order: batch, output,
 * input), dim assignments `P = ((Y - 1) * s + EK - X) / 2` (integer arithmetic, floor division),
 * elementwise statements `R = Sum / (X * Y)` (+ - * / unary -, == != < > <= >=, sqrt, exp, log,
 * sin, cos, tanh, sigmoid, pow, select; NumPy broadcasting over memory-order dims; dims are
 * scalar constants there), and a final `return EXPR` (or a bare expression). A name bound to a
 * dim is a dim whatever its case; other lower-case names are index variables.
 * create parses and checks the body once (copied into the context's arena); file, line and col
 * (1-based, of body[0]) position its messages as FILE:LINE:COL with the line and a caret (file
 * NULL: the function's name). NULL with a message on a syntax error. The function lives in
 * ctx's arena and applies to graphs of ctx. */
typedef struct cn_tile_fn cn_tile_fn;
CN_API cn_tile_fn *cn_tile_fn_create(cn_ctx *ctx, const char *name, int n_params,
                                     const char *const *params, const char *body, const char *file,
                                     int line, int col);
/* An argument: a tensor, or (tensor NULL) an integer dim (e.g. a stride). */
typedef struct {
  cn_tensor *tensor;
  int64_t dim;
} cn_tile_arg;
/* Runs the body on the arguments (one per parameter, in order): builds the tensors of its
 * contractions and elementwise statements in g and returns the result, an ordinary tensor with
 * output axes (or an argument itself). Tensor arguments must have known shapes where the body
 * uses them. NULL with a positioned message. */
CN_API cn_tensor *cn_tile_fn_apply(cn_graph *g, const cn_tile_fn *fn, int n_args,
                                   const cn_tile_arg *args);

/* The seed's examples as operations (src/tile/library.c), each a Tile function; shapes are the
 * tensors' dims in memory order (I is x, K the kernel):
 *   sum_over_axis, max_over_axis: I [M, N] -> [N], the sum / max over axis 0;
 *   global_min: I [X, Y, Z] -> [] (as -max(-I));
 *   average: I [X, Y] -> [], the mean of every cell;
 *   max_pool_1d: I [N] -> [N / 2], the max of each pair (round_up: [(N + 1) / 2], the last
 *     pool holding one cell when N is odd);
 *   cumsum: I [N] -> [N], O[i] = sum of I[k] for k <= i;
 *   conv_1d: I [N, X, CI], K [KX, CI, CO] -> [N, X - KX + 1, CO] (valid);
 *   conv_2d_dilated: I [N, X, Y, CI], K [KX, KY, CI, CO] with dilation (d0, d1) ->
 *     [N, X - d0 (KX - 1), Y - d1 (KY - 1), CO] (valid);
 *   complex_conv_2d: I [N, X0, X1, G, GCI], K [K0, K1, G, GCI, GCO], strides s0, s1, dilations
 *     d0, d1, "same-lower" padding -> [N, Y0, Y1, G, GCO] with Yi = (Xi + si - 1) / si, reading
 *     I[n, si*yi + di*ki - Pi, ...] with Pi = ((Yi - 1) si + di (Ki - 1) + 1 - Xi) / 2
 *     (cells outside I are skipped). */
CN_API cn_tensor *cn_tile_sum_over_axis(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tile_max_over_axis(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tile_global_min(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tile_average(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tile_max_pool_1d(cn_graph *g, cn_tensor *x, bool round_up);
CN_API cn_tensor *cn_tile_cumsum(cn_graph *g, cn_tensor *x);
CN_API cn_tensor *cn_tile_conv_1d(cn_graph *g, cn_tensor *x, cn_tensor *kernel);
CN_API cn_tensor *cn_tile_conv_2d_dilated(cn_graph *g, cn_tensor *x, cn_tensor *kernel, int64_t d0,
                                          int64_t d1);
CN_API cn_tensor *cn_tile_complex_conv_2d(cn_graph *g, cn_tensor *x, cn_tensor *kernel, int64_t s0,
                                          int64_t s1, int64_t d0, int64_t d1);

/* ---- Datasets (src/tensor/datasets.c) -------------------------------------------------------- */

/* n points of two noisy interleaved half circles ("half moons"), the same for a given seed on
 * every machine (splitmix64, Box-Muller). Point i is (xy[2i], xy[2i+1]) with label labels[i]:
 * even points lie on the upper half circle (cos t, sin t), label +1; odd points on the lower one
 * (1 - cos t, 0.5 - sin t), label -1; t is uniform in [0, pi) and each coordinate gets Gaussian
 * noise of standard deviation `noise`. The interleaving gives every batch of an even number of
 * consecutive points as many points of each class. xy holds 2n values, labels n. */
CN_API void cn_dataset_half_moons(uint64_t seed, double noise, size_t n, double *xy,
                                  double *labels);

/* ---- Data files and checkpoints (src/data) --------------------------------------------------- */

/* An array read from or written to a file: stored cells of one precision in row-major order.
 * Loaders fill it with malloc'd cells (NULL when it has no cell); cn_array_free releases them. */
typedef struct {
  cn_prec prec;
  int rank;
  int64_t dims[CN_MAX_RANK];
  void *cells;
} cn_array;
CN_API int64_t cn_array_numel(const cn_array *a);
CN_API void cn_array_free(cn_array *a);

/* IDX files (the MNIST family: magic 0 0 type rank, big-endian u32 dims, big-endian payload),
 * plain or gzip-compressed (recognized by the gzip magic, whatever the name). Types: u8 -> byte,
 * i8 and i16 -> int32 (widened, exact), i32 -> int32, f32 -> single, f64 -> double. A missing
 * file, a truncated header or payload, a wrong magic, a size that overflows, a claim beyond
 * 2^31 cells or trailing bytes fail with a message naming the file, the byte offset and what was
 * expected; nothing is left in *out then. */
CN_API cn_status cn_data_load_idx(cn_ctx *ctx, const char *path, cn_array *out);
/* NumPy .npy files, header versions 1.0, 2.0 and 3.0, little- or big-endian, C order: dtypes
 * u1 u2 i4 u4 i8 u8 f2 f4 f8 (byte, uint16, int32, uint32, int64, uint64, half, single,
 * double), and on load also i1, i2 and b1 (widened to int32, int32, byte). Fortran order is
 * refused with a message. Saving writes version 1.0 (2.0 for a header past 65535 bytes),
 * little-endian; bfloat16, fp8 and uint4x32 have no NumPy dtype and are refused. */
CN_API cn_status cn_data_load_npy(cn_ctx *ctx, const char *path, cn_array *out);
CN_API cn_status cn_data_save_npy(cn_ctx *ctx, const char *path, const cn_array *a);
/* Either of the two, told apart by the file's first bytes: .npy's magic "\x93NUMPY", else IDX
 * (plain or gzip). The file is read once. */
CN_API cn_status cn_data_load(cn_ctx *ctx, const char *path, cn_array *out);

/* safetensors files (8-byte little-endian header length, a JSON header of
 * {"NAME": {"dtype", "shape", "data_offsets"}} plus "__metadata__", then the payload), with
 * each node's unpadded cells under its name; dtypes U8 U16 I32 U32 I64 U64 F16 BF16 F8_E5M2 F32
 * F64 (uint4x32 as U32 with a trailing axis of 4). Saving is atomic: the file is written under a
 * temporary name in the same directory, flushed to disk (fsync), then renamed over the old one,
 * so an interruption at any moment leaves the previous file whole (and the next save of the file
 * removes the temporary file a killed save left). Only a regular file is replaced: a symbolic
 * link is written through (the file it points to gets the new data, the link stays), while a
 * directory, a FIFO, a socket, a device, a dangling link, or another user's link in a sticky
 * world-writable directory such as /tmp, is refused with CN_ERR_IO naming what it is. The same
 * holds for .npy saves and exports. The metadata holds the given
 * entries and "cannl_crc32", the CRC-32 of the payload, checked on load (a mismatch is
 * reported as corruption). Loading fills each given node from the tensor of its name: a
 * missing name, another dtype or shape fails naming the tensor, before any node is written. */
typedef struct {
  const char *name;
  cn_node *node;
} cn_named_node;
typedef struct {
  const char *key, *value;
} cn_metadata_entry;
CN_API cn_status cn_data_save_safetensors(cn_ctx *ctx, const char *path, int n_nodes,
                                          const cn_named_node *nodes, int n_meta,
                                          const cn_metadata_entry *meta);
/* With n_meta_out and meta_out not NULL, the file's metadata entries (arena-owned, without
 * cannl_crc32) are returned too. */
CN_API cn_status cn_data_load_safetensors(cn_ctx *ctx, const char *path, int n_nodes,
                                          const cn_named_node *nodes, int *n_meta_out,
                                          cn_metadata_entry **meta_out);
/* A data set: arrays of examples along their axis 0 (images and labels, say), all with the same
 * count, shown to a graph as one tensor each, in the array's precision, with batch axes
 * [batches, batch_size] and the array's other axes as output axes: `t @| batch` (a static index
 * over the batches, as the half-moons data uses) is one mini-batch. batches = count / batch_size;
 * the examples past the last whole batch are left out of that epoch (a shuffled set shows each
 * of them in other epochs). Epoch e shows the examples in the order of cn_dataset_permute(seed,
 * e, count, .) when the set is shuffled, else in their order; the same order for every array,
 * so an image stays with its label. create takes the arrays' cells (the caller's arrays are left
 * empty, freed with the context); the tensors' nodes are written by cn_dataset_begin_epoch,
 * which materializes the graph (so call it once the model is built) and rewrites them only
 * when the order changes. Arena-owned by the graph's context. */
typedef struct cn_dataset cn_dataset;
CN_API cn_dataset *cn_dataset_create(cn_graph *g, const char *label, int n_arrays, cn_array *arrays,
                                     int64_t batch_size, bool shuffle, uint64_t seed);
CN_API cn_tensor *cn_dataset_tensor(const cn_dataset *d, int k);
CN_API int64_t cn_dataset_batches(const cn_dataset *d);
CN_API int64_t cn_dataset_examples(const cn_dataset *d);
CN_API cn_status cn_dataset_begin_epoch(cn_dataset *d, uint64_t epoch);
/* A counter-based permutation of [0, n): the example that slot i of epoch e's order holds (a
 * bijection for each (seed, epoch), computed from no state: a keyed six-round Feistel network
 * over the smallest power of 4 >= n, walked until the value falls in [0, n)). -1 unless
 * 1 <= n < 2^62 and 0 <= i < n. */
CN_API int64_t cn_dataset_permute(uint64_t seed, uint64_t epoch, int64_t n, int64_t i);
/* A held-out split: moves n_test examples, chosen by the seeded permutation, out of each of the
 * n arrays into test[k] (in their original order; the rest keep theirs). 0 <= n_test <= count. */
CN_API cn_status cn_dataset_split(cn_ctx *ctx, int n, cn_array *arrays, int64_t n_test,
                                  uint64_t seed, cn_array *test);

/* A text corpus (src/data/text.c), for character-level sequence models: the bytes of text files
 * as one sequence of token ids. cn_data_load_text reads the paths in the order given; a
 * directory stands for its text files in the byte order of their names: the regular files (a
 * symbolic link in the directory is not followed: fortune's NAME.u8 links repeat NAME) whose
 * names start with no '.' and do not end in ".dat" (strfile's index files); a path given
 * itself is followed when it is a link (/usr/share/dict/words) and must be a regular file. Files
 * are read without blocking on a FIFO; anything but a regular file is refused. Every line that
 * is exactly "%" (the separator of fortune files) is dropped with its newline, and a file whose
 * last line has no newline gets one, so files never run into each other; a word list (one word
 * a line) keeps its newlines, the end-of-word token of a names model. The vocabulary is the set
 * of bytes that occur, ascending (token id k is byte bytes[k]; not characters: a UTF-8
 * character is several tokens); the tokens are split as nanoGPT does: the first
 * train = floor(9 count / 10) tokens for training, the rest for validation. The corpus holds at
 * most CN_TEXT_MAX_BYTES bytes (before the "%" lines are dropped), checked before a file is
 * read. Failures: CN_ERR_IO naming the path (missing, unreadable, not a regular file),
 * CN_ERR_INVALID for a directory without text files and for a corpus without a byte,
 * CN_ERR_UNSUPPORTED past the limit; *out is left empty then. cn_text_free releases tokens. */
#define CN_TEXT_MAX_BYTES ((int64_t)64 << 20)
typedef struct {
  int vocab;                /* distinct bytes, 1 to 256 */
  unsigned char bytes[256]; /* bytes[id]: the byte of token id, ascending in id */
  int16_t ids[256];         /* ids[byte]: the token id of byte, -1 when it does not occur */
  int64_t count;            /* tokens */
  int64_t train;   /* tokens [0, train) are the training split, [train, count) validation */
  int files;       /* files read */
  uint8_t *tokens; /* count token ids (malloc'd) */
} cn_text;
CN_API cn_status cn_data_load_text(cn_ctx *ctx, int n_paths, const char *const *paths,
                                   cn_text *out);
CN_API void cn_text_free(cn_text *t);
/* A corpus of len bytes in memory, as cn_data_load_text would make of a file holding exactly them
 * (no "%" line dropped, no newline added; files 0): the vocabulary and split of a model trained
 * elsewhere, or a test's corpus. CN_ERR_INVALID for no byte, CN_ERR_UNSUPPORTED past the limit. */
CN_API cn_status cn_text_from_bytes(cn_ctx *ctx, const void *bytes, size_t len, cn_text *out);
/* A batch of random windows of a split: for b in [0, batch) and i in [0, context),
 * x[b * context + i] = tokens[s_b + i] and y[b * context + i] = tokens[s_b + i + 1] (the next
 * token), where s_b is a start in the split such that the window and its targets lie in it. The
 * starts of a step are slots 0 .. batch - 1 of cn_dataset_permute(seed, step, starts, .) over
 * the split's `starts` = length - context window starts: distinct within a batch, and a pure
 * function of (seed, step, b), so a resumed run draws the same batches. CN_ERR_INVALID unless
 * 1 <= context < the split's length and 1 <= batch <= starts. x and y hold batch * context
 * cells each. */
typedef enum { CN_TEXT_TRAIN, CN_TEXT_VALID } cn_text_split;
CN_API cn_status cn_text_draw_windows(cn_ctx *ctx, const cn_text *t, cn_text_split split,
                                      uint64_t seed, uint64_t step, int64_t batch, int64_t context,
                                      int32_t *x, int32_t *y);

/* Sampling and the bigram baseline (src/data/sample.c), for a model whose input is a window of
 * token ids and whose output is logits over the corpus's vocabulary.
 *
 * cn_text_sample draws o->count tokens into out (count + 1 bytes: the sampled bytes and a NUL;
 * the prompt is not repeated). The window is input's cells (numel(input) = T tokens, any shape:
 * [T], [1; T], ...; stored in input's precision), first filled with the prompt's first token,
 * then the prompt's bytes shifted in one by one (so the window ends with the prompt; a prompt
 * longer than T keeps its last T bytes). o->prompt NULL means "\n" (a word list's end of word).
 * The forward code of logits is compiled once (backend, the context's options) and run once per
 * token; the last vocab cells of logits (row-major: the last position's logits when logits is
 * [T; V]) give token i = cn_text_sample_pick(them, vocab, temperature,
 * cn_text_sample_uniform(seed, i)); its byte is written out and shifted into the window. The
 * caller initializes the model's parameters first. Errors (CN_ERR_INVALID): input computed by
 * code (it must be a data or buffer tensor, a placeholder), logits whose last axis is not the
 * vocabulary, an empty prompt or a prompt byte outside the vocabulary, count < 0, a temperature
 * negative, infinite or NaN; CN_ERR_RUNTIME for logits holding a NaN (out is then "").
 *
 * cn_text_sample_uniform: a double in [0, 1), the top 53 bits of threefry4x32_crypto (20 rounds)
 * with the key {seed low, seed high, CN_SAMPLE_KEY2, CN_SAMPLE_KEY3} and the counter {i low,
 * i high, 0, 0}: a pure function of (seed, i).
 * cn_text_sample_pick: temperature 0 (or an infinite largest logit), the first largest logit;
 * otherwise p_k = exp((l_k - max) / temperature) in double, summed in index order, and the first
 * k with u * sum < p_0 + ... + p_k (the last k with p_k > 0 when rounding leaves none); -1 when
 * a logit is NaN.
 *
 * cn_text_bigram_loss: the mean cross-entropy (nats) over the consecutive token pairs of the
 * split of the bigram model fitted on the training split's pairs with add-one smoothing,
 * P(b | a) = (n(a, b) + 1) / (n(a) + vocab), n counting the pairs (a, b) of the training split
 * and n(a) those starting with a. CN_ERR_INVALID when the training split or the split asked for
 * holds fewer than 2 tokens. */
#define CN_SAMPLE_KEY2 0x73616d70u /* "samp" */
#define CN_SAMPLE_KEY3 0x6c652121u /* "le!!" */
typedef struct {
  int64_t count;
  double temperature;
  uint64_t seed;
  const char *prompt; /* prompt_len bytes, NULL: "\n" */
  size_t prompt_len;
} cn_sample_options;
CN_API cn_status cn_text_sample(cn_graph *g, const cn_text *t, cn_tensor *input, cn_tensor *logits,
                                cn_backend_kind backend, const cn_sample_options *o, char *out);
CN_API double cn_text_sample_uniform(uint64_t seed, uint64_t i);
CN_API int cn_text_sample_pick(const double *logits, int vocab, double temperature, double u);
CN_API cn_status cn_text_bigram_loss(cn_ctx *ctx, const cn_text *t, cn_text_split split,
                                     double *loss);

/* Ahead-of-time export: the forward code of output, computed from input, as a self-contained C
 * file DIR/NAME.c and a header DIR/NAME.h declaring
 *     void NAME_forward(const float *in, float *out);
 * in holds the numel(input) cells of input and out receives the numel(output) cells of output,
 * row-major. The file holds the generated code of the routine cannl itself runs (generated C
 * backend, the context's options), every other buffer it reads as a static array of its current
 * cells, exactly (the trained parameters), and includes only the C standard library: it builds
 * alone with `cc -std=c11 -c NAME.c` (link with -lm). Input and output must be single
 * precision, input a terminal the forward code does not compute (a data or buffer tensor: the
 * model applied to a placeholder), and the forward code must read no static index.
 * NAME_forward keeps its intermediates in static arrays: it is not reentrant. NAME must pass the
 * rule of routine names (cn_routine_compile); labels and shapes appear only in comments, escaped
 * (a label is never code). */
CN_API cn_status cn_graph_export_c(cn_graph *g, cn_tensor *input, cn_tensor *output,
                                   const char *name, const char *dir);
/* The sampler of an exported language model (cannl export --sampler): DIR/NAME_sample.c and
 * DIR/NAME_sample.h, standard C that calls NAME_forward (cn_graph_export_c of the same input,
 * logits and NAME) and declares
 *     int NAME_sample(const char *prompt, size_t prompt_len, long long count,
 *                     double temperature, unsigned long long seed, char *out);
 * which does what cn_text_sample does, with the corpus's vocabulary embedded, the same draw
 * (threefry4x32_crypto, the same key) and the same pick, so it writes the same count + 1 bytes
 * for the same prompt (NULL: "\n"), temperature and seed. It returns 0, or -1 with out = "" for
 * an empty prompt, a prompt byte outside the vocabulary, a negative count or temperature, or
 * logits holding a NaN. Built with -DNAME_SAMPLE_MAIN it has a main(): `NAME_sample [COUNT
 * [TEMPERATURE [SEED [PROMPT]]]]` (defaults 500, 1, 0, "\n") prints the text. Input and logits
 * are checked as for cn_text_sample (and single precision, as for cn_graph_export_c). */
CN_API cn_status cn_text_export_sampler(cn_graph *g, const cn_text *t, cn_tensor *input,
                                        cn_tensor *logits, const char *name, const char *dir);

/* The training state of t: each parameter of t by its label, then the optimizer state that
 * updates built for them (SGD momentum "<param>.sgd_momentum", Adam's "<param>.adam_m",
 * "<param>.adam_v" and "<param>.adam_step"), in creation order; the nodes a checkpoint holds.
 * Returns the count (materializing the graph first; -1 with a message on failure, or when two
 * entries share a label), writes at most cap. */
CN_API int cn_graph_state(cn_graph *g, cn_tensor *t, cn_named_node *out, int cap);

/* ---- The notation: .cnl scripts, %op and %cd text (docs/notation.md) ----------------------- */

typedef struct {
  cn_backend_kind backend;            /* CN_BACKEND_DEFAULT: the context's option "backend" */
  bool json;                          /* print tensors as JSON lines (cn_tensor_format) */
  bool emit_asgn, emit_loops, emit_c; /* print each compiled routine's code */
  FILE *out;                          /* NULL: stdout */
  /* The warning at the end of a run that printed a NaN or an infinity (print, printf) or showed
   * a progress loss that is not finite, without the check "nan" that would have stopped it: one
   * line per kind ("warning: the script printed a NaN or an infinity 3 times, first nan in
   * \"y\" (#2) at FILE:LINE:COL ..."), also with json (the JSON lines stay on out). The status
   * is unchanged. NULL: stderr. */
  FILE *err;
  /* When not NULL, cn_notation_run sets it to whether a failure happened while parsing (a syntax
   * error, or memory exhausted by the parser: nothing ran); `cannl run` exits 2 then, 1 for a
   * failure while running. */
  bool *syntax_error;
  /* Export (`cannl export`): when export_input and export_output are set (one alone is an
   * error), cn_notation_run, after the script ends, writes cn_graph_export_c of the tensors bound
   * at the script's top level to these two names (the output's parameters initialized first if
   * nothing did), as export_name (NULL: the output's name) in export_dir (NULL: the current
   * directory). An unknown name, or a name bound to something else than a tensor, is a positioned
   * error. NULL: no export. */
  const char *export_input, *export_output, *export_name, *export_dir;
  /* Script parameters (`cannl run FILE --set NAME=VALUE`): n_sets texts "NAME=VALUE", applied in
   * order before the script runs. Each replaces the literal of every top-level `let NAME =
   * LITERAL` (a number, boolean or string literal), VALUE read as that literal's kind (an
   * integer for an integer literal, true or false for a boolean, any text for a string). A
   * NAME no such let binds is an error listing the names that can be set; a VALUE of another
   * kind an error at the let. 0 / NULL: none. */
  int n_sets;
  const char *const *sets;
  /* With the export: also cn_text_export_sampler of the same input, output and name, over the
   * corpus of the script's first text_windows (none: a positioned error). */
  bool export_sampler;
  /* Where the files a script writes go when their path is relative: plot's SVG, checkpoint (and
   * the restore that reads it back), save_npy. Directories are created as needed, and at the
   * end of the run a line on err names the files written ("wrote DIR/a.svg, DIR/a.safetensors").
   * NULL: the current directory (`cannl run` gives "runs" unless --out says otherwise). */
  const char *out_dir;
} cn_notation_options;
/* Runs a script; errors are "FILE:LINE:COL: message" with the line and a caret. NULL opts: every
 * default, the backend the context's option "backend" (a zeroed struct's is the interpreter). */
CN_API cn_status cn_notation_run(cn_graph *g, const char *file, const char *text,
                                 const cn_notation_options *opts);
/* Parses a script without running it (a syntax error is reported as by cn_notation_run). */
CN_API cn_status cn_notation_check(cn_ctx *ctx, const char *file, const char *text);
/* Names the text refers to: a tensor, or (tensor NULL) a host number. */
typedef struct {
  const char *name;
  cn_tensor *tensor;
  double number;
} cn_notation_binding;
/* A %op expression, e.g. cn_notation_op(g, "relu({w} * x + {b; o = [16]})", 1,
 * &(cn_notation_binding){"x", x}). */
CN_API cn_tensor *cn_notation_op(cn_graph *g, const char *text, int n_bindings,
                                 const cn_notation_binding *bindings);
/* %cd assignments, e.g. cn_notation_cd(g, "c =:+ a * b ~logic:\"@\"", 3, bindings); the tree is
 * ready to compile (the graph is materialized). */
CN_API cn_asgn *cn_notation_cd(cn_graph *g, const char *text, int n_bindings,
                               const cn_notation_binding *bindings);

#ifdef __cplusplus
}
#endif
#endif /* CANNL_H */
