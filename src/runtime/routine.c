/* Routines: an assignments tree lowered to the loop IR, simplified and compiled for one backend,
 * plus what running it needs (static-index bindings and private scratch for local nodes).
 *
 * Invariants: a routine holds its procedure (arena) and the loop-IR text (arena) for as long as
 * the context lives, and owns, through malloc, its struct, its binding and buffer tables, the
 * scratch of every CN_MEM_LOCAL parameter (and of every CN_MEM_VIRTUAL one the schedule did not
 * inline) and the backend's compiled state; all of those are
 * released exactly once, by cn_routine_free or, for routines the user did not free, by the
 * cleanup registered with the context (removed by cn_routine_free). A routine runs only once
 * every free symbol of its procedure is bound, each bound value lying in [0, range) when the
 * symbol has a range. Local scratch is zeroed before every run, so a run's result depends only on
 * the materialized buffers and the bindings (as OCANNL's kernel-local arrays, declared `= {0}`),
 * except a buffer whose first statement writes every cell before reading any
 * (cn_sched_written_first), where the zeros would never be seen.
 * A run checks the guard nodes it wrote (check_guards) and, with the "check" option at "nan",
 * scans what it wrote for NaNs and infinities (check_nonfinite).
 *
 * A procedure is scheduled (src/sched) after simplification, with the passes the "schedule"
 * option names when the routine is compiled; the loop-IR text is the scheduled one.
 * A routine counts as compiling (CN_PROGRESS_COMPILE, the context's progress hook) from its
 * lowering to its loaded object, on every path out, failures included.
 *
 * A routine is linked against the device of the backend it runs on (backend.h): for the host
 * backends (the interpreter, generated C) the nodes' buffers are the device's and a run passes
 * them as they are, through the host accessor (cn_node_host: a node a device wrote is brought
 * back first, and a write makes the device copies stale); for a backend with
 * CN_BACKEND_DEVICE_MEMORY a run passes the nodes' copies on the device (ir/resident.c: uploaded
 * only where stale), marks the copies of the params it writes as the only current ones, and
 * synchronizes; nothing is downloaded until the host reads. Its scratch lives on the device only
 * (the routine's, cleared there before the run): no host buffer. The checks below read on the
 * host what they check: the guard nodes written, on every run, and with "nan" every materialized
 * node written (a scratch node on a device is not scanned).
 * A routine of a host backend also runs on the context's CPU devices (cn_routine_run_on, ir/
 * devices.c): linked to each at its first run there (a table of buffers per device, the local
 * params' scratch the device's own), it passes the nodes' copies there as a run on a device of
 * its own memory does; those copies are host memory, so its checks read them, scratch included,
 * in place.
 *
 * A procedure with a CN_LL_PARALLEL loop runs through the backend's run_parallel with the
 * context's worker pool (pool.h) of "threads" threads (option, else $CANNL_THREADS, else the cores
 * the process may run on); the pool splits only iterations the schedule proved independent, so
 * results are the same bits for every thread count.
 *
 * The public option calls live here, the layer that knows every option: "check", "schedule",
 * "threads" and "backend" (the backend of CN_BACKEND_DEFAULT) are the routines' own, "cc", "cflags"
 * and "cache_dir" the generated-C backend's (cn_cc_option), "device_tile" the device backends'
 * (kernels.h); the context only stores the values set.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "backend/backend.h"
#include "backend/kernels.h"
#include "runtime/pool.h"
#include "runtime/routine.h"
#include "runtime/tune.h"
#include "sched/sched.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cn_routine {
  cn_ctx *ctx;
  const char *name; /* arena */
  const cn_backend *backend;
  const cn_ll_proc *proc; /* arena */
  const char *loops;      /* arena: the loop IR after simplification */
  void *compiled;         /* backend-owned state, NULL until compiled */
  const char *source;     /* owned by `compiled`; NULL for the interpreter */
  bool *local;            /* per param: scratch, the routine's own (LOCAL, or VIRTUAL kept) */
  /* per param: malloc'd zero-filled host buffer of a local node when the routine runs on the
   * host (or on a device without clear: the zeros uploaded), else NULL */
  void **scratch;
  size_t *scratch_bytes;  /* per param: the bytes zeroed before each run (0: the first statement
                             using it writes every cell, cn_sched_written_first) */
  void **buffers;         /* per param: the host buffer of the run (filled by cn_routine_run) */
  cn_host_access *access; /* per param: how a run on the host uses its buffer */
  int64_t *sym_values;    /* per free symbol */
  bool *sym_bound;        /* per free symbol */
  const char *env_check;  /* the "check" default when compiled ($CANNL_CHECK or "off"; arena) */
  /* The backend asked: `backend`, or the one a tiered routine is interpreted in place of. */
  const cn_backend *target;
  /* Linked to a device with its own memory (routine_link; NULL: the host's): per param the
   * buffer a run passes there (a local node's the routine's own; a materialized node's copy, the
   * node's, set by each run). */
  const cn_device *device;
  void **device_buffers;
  /* Linked to CPU devices (cn_routine_run_on, at the first run on each): per device number the
   * same table for that device, NULL where not linked; n_cpu_links entries. */
  void ***cpu_links;
  int n_cpu_links;
  /* Where the last run ran, for its checks: the device (NULL: the host) and its buffers. */
  const cn_device *run_device;
  void *const *run_buffers;
  /* the "threads" default when compiled ($CANNL_THREADS or the cores; arena): a run of a parallel
   * routine reads no environment */
  const char *env_threads;
  int *written; /* params the body writes, in the order of their first write (arena) */
  int n_written;
  bool parallel; /* the procedure has a CN_LL_PARALLEL loop */
  bool ran;      /* run at least once (CN_STAT_US_FIRST_RUN) */
  /* Interpreted in place of the generated C (cn_routine_compile_tiered) until its runs have taken
   * TIER_UP_US: then compiled, and every later run is the generated code's; a routine run once
   * (`once`) stays interpreted. */
  bool tiered, once;
  uint64_t interpreted_us;
  /* Compiling behind (cn_routine_compile_tiered_many): the backend's batch and this routine's
   * place in it until its first run takes the compiled state (NULL: not, or no longer). */
  void *batch;
  int batch_index;
  bool failed;         /* its compilation behind failed: it never runs */
  cn_cleanup *cleanup; /* registered with the context while the routine is alive */
};

/* Frees a device link's table and the local scratch in it (the materialized nodes' copies are
 * theirs). */
static void unlink_device(cn_routine *r, const cn_device *dev, void **buffers) {
  for (int i = 0; buffers && i < r->proc->n_params; i++)
    if (r->local[i] && buffers[i]) dev->free(dev, buffers[i]);
  free(buffers);
}

/* Releases everything the routine owns except its cleanup registration. */
static void routine_release(cn_routine *r) {
  if (r->batch) r->backend->drop(r->batch, r->batch_index);
  if (r->compiled) r->backend->release(r->compiled);
  if (r->scratch)
    for (int i = 0; i < r->proc->n_params; i++) free(r->scratch[i]);
  unlink_device(r, r->device, r->device_buffers);
  for (int k = 0; k < r->n_cpu_links; k++)
    if (r->cpu_links[k]) unlink_device(r, cn_cpu_device(r->ctx, k, "routine"), r->cpu_links[k]);
  free(r->cpu_links);
  free(r->local);
  free(r->access);
  free(r->scratch);
  free(r->scratch_bytes);
  free(r->buffers);
  free(r->sym_values);
  free(r->sym_bound);
  free(r);
}

/* The context's cleanup: runs at cn_ctx_destroy, which frees the registration itself. */
static void routine_cleanup(void *arg) {
  routine_release(arg);
}

/* Appends, in body order, the params that stmt writes and that `seen` does not hold yet. The
 * recursion follows statement nesting (loops, guards, sequences), as shallow as the loop nest. */
static void collect_writes(const cn_ll_stmt *stmt, bool *seen, int *out, int *n) {
  int param = -1;
  switch (stmt->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < stmt->u.seq.count; i++) collect_writes(stmt->u.seq.items[i], seen, out, n);
    return;
  case CN_LL_COMMENT: return;
  case CN_LL_FOR: collect_writes(stmt->u.loop.body, seen, out, n); return;
  case CN_LL_IF: collect_writes(stmt->u.guard.body, seen, out, n); return;
  case CN_LL_GEMM: collect_writes(stmt->u.gemm.nest, seen, out, n); return;
  case CN_LL_LET: collect_writes(stmt->u.let.body, seen, out, n); return;
  case CN_LL_SET: param = stmt->u.set.param; break;
  case CN_LL_SET_VEC: param = stmt->u.vec.param; break;
  }
  if (!seen[param]) {
    seen[param] = true;
    out[(*n)++] = param;
  }
}

/* Whether some loop of stmt is marked CN_LL_PARALLEL. */
static bool has_parallel_loop(const cn_ll_stmt *stmt) {
  switch (stmt->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < stmt->u.seq.count; i++)
      if (has_parallel_loop(stmt->u.seq.items[i])) return true;
    return false;
  case CN_LL_FOR:
    return (stmt->u.loop.marks & CN_LL_PARALLEL) || has_parallel_loop(stmt->u.loop.body);
  case CN_LL_IF: return has_parallel_loop(stmt->u.guard.body);
  case CN_LL_LET: return has_parallel_loop(stmt->u.let.body);
  case CN_LL_GEMM: return true; /* its blocks of cells run on the pool */
  case CN_LL_COMMENT:
  case CN_LL_SET:
  case CN_LL_SET_VEC: return false;
  }
  return false;
}

/* "[i, j]": the coordinates of a cell, for messages. */
static void format_cell(const cn_node *node, const int64_t *at, char *cell, size_t cap) {
  snprintf(cell, cap, "[");
  for (int a = 0; a < node->rank; a++)
    snprintf(cell + strlen(cell), cap - strlen(cell), "%s%lld", a ? ", " : "", (long long)at[a]);
  snprintf(cell + strlen(cell), cap - strlen(cell), "]");
}

/* The shortest decimal that reads back as the same value of prec: a label 0.7 stored in single
 * precision shows as 0.7, not as its double expansion 0.699999988079071, and 2.0000002 is not
 * rounded to a misleading 2. */
static void format_value(cn_prec prec, double v, char *text, size_t cap) {
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(text, cap, "%.*g", digits, v);
    unsigned char cell[16]; /* the widest cell, uint4x32 */
    cn_value_store(prec, cn_value_of_double(prec, strtod(text, NULL)), cell);
    double back = cn_value_to_double(prec, cn_value_load(prec, cell));
    if (back == v || (isnan(back) && isnan(v))) return;
  }
}

/* The cells a run wrote into params[i], as the host sees them: the run's buffer on the host or on
 * a CPU device; on a device of its own memory the node's host buffer, brought back (a host read),
 * and NULL for a scratch node, which has none. False after a failed download. */
static bool written_cells(cn_routine *r, int i, const void **cells) {
  const cn_ll_param *p = &r->proc->params[i];
  const cn_device *dev = r->run_device;
  *cells = !dev               ? r->buffers[i]
           : dev->host_memory ? r->run_buffers[i] /* the device's own values, read in place */
           : r->local[i]      ? NULL
                              : cn_node_host(p->node, p->merge, CN_HOST_READ);
  return *cells || !dev || r->local[i];
}

/* The tests the program computes (cn_node.guard_what): the first written guard node holding a
 * nonzero cell fails the run (CN_ERR_RUNTIME) with its message, checked on every run since a
 * guard's cells are as few as a batch's labels. Before the NaN check: a guard's failure explains
 * the NaN the program then computes. */
static cn_status check_guards(cn_routine *r) {
  for (int w = 0; w < r->n_written; w++) {
    const cn_ll_param *p = &r->proc->params[r->written[w]];
    int64_t at[CN_MAX_RANK];
    double value;
    if (!p->node->guard_what || p->merge) continue;
    const void *cells;
    if (!written_cells(r, r->written[w], &cells)) return r->ctx->status;
    if (!cells || !cn_node_find_cell(p->node, cells, true, at, &value)) continue;
    char cell[CN_MAX_RANK * 24 + 3], text[32];
    format_cell(p->node, at, cell, sizeof cell);
    format_value(p->node->prec, value, text, sizeof text);
    return cn_fail(r->ctx, CN_ERR_RUNTIME, "routine '%s': %s %s at %s %s", r->name,
                   p->node->guard_what, text, cell, p->node->guard_rule);
  }
  return CN_OK;
}

/* "WHAT: unknown value 'VALUE', did you mean 'CLOSEST'? (known: KNOWN)": a value of an option or
 * of its environment variable outside the option's fixed list. */
static cn_status unknown_value(cn_ctx *ctx, const char *what, const char *value,
                               const char *known) {
  cn_suggest s;
  cn_suggest_init(&s, value);
  cn_suggest_consider_list(&s, known);
  return cn_fail(ctx, CN_ERR_INVALID, "%s: unknown value '%s'%s (known: %s)", what, value,
                 cn_suggest_text(&s), known);
}

/* The "check" = "nan" option: the first written node holding a NaN or an infinity fails the run
 * (CN_ERR_RUNTIME), naming the node, the cell and the value; ctx->failed_node keeps its id so that
 * higher layers can name the tensor, operation and script position. */
static cn_status check_nonfinite(cn_routine *r) {
  cn_ctx *ctx = r->ctx;
  /* an option set on the context wins; the environment was read at compile time (a getenv per
   * run would cost a measurable share of a microsecond step) */
  const char *set = cn_ctx_stored_option(ctx, "check");
  const char *check = set ? set : r->env_check;
  if (strcmp(check, "off") == 0) return CN_OK;
  if (strcmp(check, "nan") != 0) return unknown_value(ctx, "CANNL_CHECK", check, "nan, off");
  for (int w = 0; w < r->n_written; w++) {
    const cn_ll_param *p = &r->proc->params[r->written[w]];
    int64_t at[CN_MAX_RANK];
    double value;
    const void *cells;
    if (!written_cells(r, r->written[w], &cells)) return ctx->status;
    if (!cells || !cn_node_find_cell(p->node, cells, false, at, &value)) continue;
    char cell[CN_MAX_RANK * 24 + 3];
    format_cell(p->node, at, cell, sizeof cell);
    cn_fail(ctx, CN_ERR_RUNTIME,
            "routine '%s' wrote %s into %s%s at %s, its first non-finite value (check "
            "\"nan\")",
            r->name,
            isnan(value) ? "NaN"
            : value > 0  ? "+Inf"
                         : "-Inf",
            cn_node_describe(p->node), p->merge ? " (merge buffer)" : "", cell);
    ctx->failed_node = p->node->id;
    return CN_ERR_RUNTIME;
  }
  return CN_OK;
}

/* The bytes of a node's padded buffer; false with a message when they overflow. */
static bool node_bytes(cn_routine *r, const cn_node *node, size_t *bytes) {
  if (cn_mul_size(cn_node_buffer_cells(node), cn_prec_bytes(node->prec), bytes)) return true;
  cn_fail(r->ctx, CN_ERR_NOMEM, "routine '%s': scratch of %s is too large", r->name,
          cn_node_describe(node));
  return false;
}

/* A local node's zero-filled host scratch (allocated once). */
static cn_status host_scratch(cn_routine *r, int i) {
  size_t bytes;
  if (r->scratch[i]) return CN_OK;
  if (!node_bytes(r, r->proc->params[i].node, &bytes)) return r->ctx->status;
  r->scratch[i] = cn_calloc_cells(r->ctx, bytes);
  return r->scratch[i] ? CN_OK : r->ctx->status;
}

/* Allocates the per-param and per-symbol tables and, for a routine run on the host, the local
 * scratch buffers (a device's are made by routine_link). */
static cn_status routine_alloc_tables(cn_routine *r) {
  cn_ctx *ctx = r->ctx;
  const cn_ll_proc *proc = r->proc;
  r->local = cn_calloc(ctx, (size_t)proc->n_params + 1, sizeof(bool));
  r->access = cn_calloc(ctx, (size_t)proc->n_params + 1, sizeof(cn_host_access));
  r->scratch = cn_calloc(ctx, (size_t)proc->n_params, sizeof(void *));
  r->scratch_bytes = cn_calloc(ctx, (size_t)proc->n_params, sizeof(size_t));
  r->buffers = cn_calloc(ctx, (size_t)proc->n_params, sizeof(void *));
  r->sym_values = cn_calloc(ctx, (size_t)proc->n_free_syms, sizeof(int64_t));
  r->sym_bound = cn_calloc(ctx, (size_t)proc->n_free_syms, sizeof(bool));
  if (!r->local || !r->access || !r->scratch || !r->scratch_bytes || !r->buffers ||
      !r->sym_values || !r->sym_bound)
    return ctx->status;
  /* zero-filled: CN_HOST_READ, for the params the body only reads */
  for (int w = 0; w < r->n_written; w++) r->access[r->written[w]] = CN_HOST_WRITE;
  bool on_host = !(r->backend->caps & CN_BACKEND_DEVICE_MEMORY);
  for (int i = 0; i < proc->n_params; i++) {
    const cn_node *node = proc->params[i].node;
    if (node->mode == CN_MEM_MATERIALIZED) continue; /* LOCAL, or VIRTUAL left as scratch */
    size_t bytes;
    if (!node_bytes(r, node, &bytes)) return ctx->status;
    r->local[i] = true;
    r->scratch_bytes[i] = cn_sched_written_first(proc, i) ? 0 : bytes;
    if (on_host && host_scratch(r, i) != CN_OK) return ctx->status;
  }
  return CN_OK;
}

/* The table of a run's buffers on dev, the local params' scratch allocated there (and the host
 * zeros uploaded to clear it where the device cannot), the materialized nodes' copies left to the
 * runs (cn_node_device): made entirely or not at all. */
static cn_status link_device(cn_routine *r, const cn_device *dev, void ***out) {
  cn_ctx *ctx = r->ctx;
  const cn_ll_proc *proc = r->proc;
  void **buffers = cn_calloc(ctx, (size_t)proc->n_params + 1, sizeof(void *));
  cn_status status = buffers ? CN_OK : ctx->status;
  for (int i = 0; i < proc->n_params && status == CN_OK; i++) {
    size_t bytes;
    if (!r->local[i]) continue;
    if (!node_bytes(r, proc->params[i].node, &bytes))
      status = ctx->status;
    else if ((status = dev->allocate(ctx, dev, bytes, &buffers[i])) == CN_OK &&
             r->scratch_bytes[i] && !dev->clear)
      status = host_scratch(r, i);
  }
  if (status != CN_OK) {
    unlink_device(r, dev, buffers);
    return status;
  }
  *out = buffers;
  return CN_OK;
}

/* Links the routine to the device of the backend it runs on: for a backend with its own memory,
 * opens the device and allocates there the scratch of the local params (once, at the first run:
 * a routine compiles without its device, so that a CUDA routine's source and PTX are there
 * without a GPU, for --emit=c; the missing device is the first run's error), and the host zeros
 * uploaded to clear it where the device cannot;
 * the materialized nodes' copies are made by the runs (cn_node_device). Nothing for the host
 * backends. */
static cn_status routine_link(cn_routine *r) {
  if (!(r->backend->caps & CN_BACKEND_DEVICE_MEMORY) || r->device_buffers) return CN_OK;
  const cn_device *dev = NULL;
  cn_status status = r->backend->open_device(r->ctx, &dev);
  if (status == CN_OK && (status = link_device(r, dev, &r->device_buffers)) == CN_OK)
    r->device = dev;
  return status;
}

/* The "parallel_work" default: $CANNL_PARALLEL_WORK, else the schedule's threshold (in a
 * thread-local buffer until the thread's next call). */
static const char *work_default(void) {
  const char *env = getenv("CANNL_PARALLEL_WORK");
  if (env && *env) return env;
  static _Thread_local char text[24];
  snprintf(text, sizeof text, "%lld", (long long)CN_SCHED_PARALLEL_WORK);
  return text;
}

/* The values of an on/off option ("exact"). */
static bool is_switch(const char *value) {
  return strcmp(value, "on") == 0 || strcmp(value, "off") == 0 || strcmp(value, "1") == 0 ||
         strcmp(value, "0") == 0;
}

static bool switch_on(const char *value) {
  return strcmp(value, "on") == 0 || strcmp(value, "1") == 0;
}

/* The values of the option "reduce" (loops.h CN_LL_LANES). */
#define REDUCE_VALUES "ordered, lanes"
static bool is_reduce(const char *value) {
  return strcmp(value, "ordered") == 0 || strcmp(value, "lanes") == 0;
}

/* The options "parallel_work" and "interpret_below": a decimal count of cell updates in
 * [least, 2^62]; false with a message naming the value otherwise (a bad $CANNL_PARALLEL_WORK or
 * $CANNL_INTERPRET_BELOW reaches here unchecked). */
static bool parse_count(cn_ctx *ctx, const char *key, const char *text, int least, int64_t *work) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end || errno || v < least || v > ((long long)1 << 62)) {
    cn_fail(ctx, CN_ERR_INVALID, "option %s: '%s' is not a count in [%d, 2^62]", key, text, least);
    return false;
  }
  *work = (int64_t)v;
  return true;
}

static bool parse_work(cn_ctx *ctx, const char *text, int64_t *work) {
  return parse_count(ctx, "parallel_work", text, 1, work);
}

/* How a routine may run on the interpreter in place of the generated C (cn_routine_compile_tiered):
 * the number of runs expected (1: once), RUNS_UNKNOWN (a routine that may run many times) or
 * NEVER_INTERPRETED. */
#define NEVER_INTERPRETED (-1)
#define RUNS_UNKNOWN      0

/* The cell updates of a statement over all its loops (saturating). */
static int64_t work_of(const cn_ll_stmt *s) {
  int64_t work = 0, body;
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) {
      body = work_of(s->u.seq.items[i]);
      work = body > INT64_MAX - work ? INT64_MAX : work + body;
    }
    return work;
  case CN_LL_FOR: {
    int64_t extent = s->u.loop.to > s->u.loop.from ? s->u.loop.to - s->u.loop.from : 0;
    body = work_of(s->u.loop.body);
    return extent > 0 && body > INT64_MAX / extent ? INT64_MAX : extent * body;
  }
  case CN_LL_IF: return work_of(s->u.guard.body);
  case CN_LL_LET: return work_of(s->u.let.body);
  case CN_LL_GEMM: return work_of(s->u.gemm.nest);
  case CN_LL_COMMENT: return 0;
  case CN_LL_SET:
  case CN_LL_SET_VEC: return 1;
  }
  return 0;
}

/* A routine of known runs is interpreted while its work over all of them is below this many times
 * the option "interpret_below": 2^21 cell updates at the default, some 20-60 ms on the
 * interpreter, less than one compiler run (0.1-0.4 s): a model's initialization, a final
 * evaluation or a print of a computed tensor run once, an update of a few hundred cells in a loop
 * of a few thousand steps. */
#define ONCE_FACTOR 512

/* A routine of asgn up to its backend compilation: lowered, simplified, scheduled, with its tables;
 * NULL with a message on failure. Owned by the caller until routine_adopt. */
static cn_routine *routine_prepare(cn_ctx *ctx, const cn_asgn *asgn, cn_backend_kind backend,
                                   const char *name, int64_t runs) {
  if (!name) name = "routine";
  if (!cn_is_c_name(name)) {
    cn_fail(ctx, CN_ERR_INVALID,
            "routine name '%s' is not a C identifier cannl can use (" CN_C_NAME_RULE ")", name);
    return NULL;
  }
  if (!asgn) {
    cn_fail(ctx, CN_ERR_INVALID, "routine '%s': no assignments to compile", name);
    return NULL;
  }
  if (backend == CN_BACKEND_DEFAULT && cn_routine_default_backend(ctx, &backend) != CN_OK)
    return NULL;
  const cn_backend *impl = cn_backend_get(backend), *target = impl;
  if (!impl) {
    cn_fail(ctx, CN_ERR_INVALID, "routine '%s': unknown backend kind %d", name, (int)backend);
    return NULL;
  }

  const char *name_copy = cn_strdup(ctx, name);
  if (!name_copy) return NULL;
  cn_ll_proc *proc;
  uint64_t start = cn_now_us();
  if (cn_ll_lower(ctx, asgn, name_copy, &proc) != CN_OK) return NULL;
  if (cn_ll_simplify(ctx, proc) != CN_OK) return NULL;
  const char *reduce = cn_ctx_option(ctx, "reduce");
  if (!is_reduce(reduce)) return unknown_value(ctx, "CANNL_REDUCE", reduce, REDUCE_VALUES), NULL;
  if (strcmp(reduce, "lanes") == 0) cn_ll_sum_lanes(proc); /* before the passes: loops.h */
  cn_sched_options sched;
  /* A backend with its own device runs every independent nest as a grid (kernels.h): its cost
   * is one launch per kernel whatever the work, so the threads' threshold is not its default. */
  const char *work = cn_ctx_option(ctx, "parallel_work");
  if ((impl->caps & CN_BACKEND_DEVICE_MEMORY) && !cn_ctx_stored_option(ctx, "parallel_work") &&
      !(getenv("CANNL_PARALLEL_WORK") && *getenv("CANNL_PARALLEL_WORK")))
    work = "1";
  if (cn_sched_parse(ctx, cn_ctx_option(ctx, "schedule"), &sched) != CN_OK ||
      !parse_work(ctx, work, &sched.parallel_work))
    return NULL;
  /* The NaN check names the first stored node holding a non-finite value: a script's unnamed
   * intermediates stay stored so that it is the operation that produced it. */
  sched.keep_fusable = strcmp(cn_ctx_option(ctx, "check"), "nan") == 0;
  const char *exact = cn_ctx_option(ctx, "exact");
  if (!is_switch(exact)) return unknown_value(ctx, "CANNL_EXACT", exact, "on, off, 1, 0"), NULL;
  sched.exact = switch_on(exact);
  sched.device = impl->caps & CN_BACKEND_DEVICE_MEMORY;
  if (cn_sched_proc(ctx, proc, &sched) != CN_OK) return NULL;
  uint64_t scheduled = cn_now_us();
  ctx->stats[CN_STAT_US_SCHEDULE] += scheduled - start;
  bool interpreted = false; /* for now, in place of the backend asked */
  /* On a backend with its own memory an interpreted run reads and writes the host's copies: in a
   * loop, beside the device's routines, every step would wait for the device's queue and move
   * the nodes both ways. Only a routine run once (an initialization, a final evaluation) is
   * worth that there. */
  bool device = impl->caps & CN_BACKEND_DEVICE_MEMORY;
  if (runs != NEVER_INTERPRETED && (impl->caps & CN_BACKEND_COMPILED) && (!device || runs == 1)) {
    int64_t below;
    if (!parse_count(ctx, "interpret_below", cn_ctx_option(ctx, "interpret_below"), 0, &below))
      return NULL;
    int64_t work = work_of(proc->body),
            budget = below > INT64_MAX / ONCE_FACTOR ? INT64_MAX : below * ONCE_FACTOR;
    /* work * runs < budget, without overflow */
    interpreted = runs == RUNS_UNKNOWN ? work < below : budget > 0 && work <= (budget - 1) / runs;
    if (interpreted) impl = &cn_backend_interp;
  }
  if (impl->caps & CN_BACKEND_TUNABLE) {
    const char *tune = cn_ctx_option(ctx, "tune");
    if (!cn_tune_mode_valid(tune))
      return unknown_value(ctx, "CANNL_TUNE", tune, CN_TUNE_MODES), NULL;
    if (cn_tune_proc(ctx, impl, proc, tune) != CN_OK) return NULL;
  }
  ctx->stats[CN_STAT_US_TUNE] += cn_now_us() - scheduled;
  const char *loops = cn_ll_to_string(ctx, proc);
  if (!loops) return NULL;

  cn_routine *r = cn_calloc(ctx, 1, sizeof *r);
  if (!r) return NULL;
  r->ctx = ctx;
  r->name = name_copy;
  r->backend = impl;
  r->target = target;
  r->proc = proc;
  r->loops = loops;
  r->tiered = interpreted;
  r->once = runs == 1;
  r->env_check = cn_strdup(ctx, cn_ctx_option(ctx, "check"));
  r->env_threads = cn_strdup(ctx, cn_ctx_option(ctx, "threads"));
  bool *seen = cn_alloc(ctx, sizeof *seen * (size_t)(proc->n_params + 1));
  r->written = cn_alloc(ctx, sizeof *r->written * (size_t)(proc->n_params + 1));
  if (!r->env_check || !r->env_threads || !seen || !r->written) {
    routine_release(r);
    return NULL;
  }
  collect_writes(proc->body, seen, r->written, &r->n_written);
  r->parallel = has_parallel_loop(proc->body);
  if (routine_alloc_tables(r) != CN_OK) {
    routine_release(r);
    return NULL;
  }
  return r;
}

/* Registers a compiled routine with the context (released at cn_ctx_destroy unless freed). */
static bool routine_adopt(cn_routine *r) {
  r->cleanup = cn_ctx_add_cleanup(r->ctx, routine_cleanup, r);
  if (!r->cleanup) return false;
  cn_log(r->ctx, CN_LOG_DEBUG, "compiled routine '%s' for backend %s (%d buffers, %d symbols)",
         r->name, r->backend->name, r->proc->n_params, r->proc->n_free_syms);
  return true;
}

/* A tiered routine prepared to run on the interpreter takes the cache's object instead when there
 * is one (compiled before: no reason to interpret); *done false when it is still to compile. */
static cn_status take_cached(cn_routine *r, bool *done) {
  bool found = false;
  *done = false;
  if (!r->tiered || !r->target->compile_cached) return CN_OK;
  cn_status status = r->target->compile_cached(r->ctx, r->proc, &r->compiled, &r->source, &found);
  if (status == CN_OK && found) {
    r->backend = r->target;
    r->tiered = false;
    *done = true;
    status = routine_link(r);
  }
  return status;
}

static cn_routine *routine_build(cn_ctx *ctx, const cn_asgn *asgn, cn_backend_kind backend,
                                 const char *name, int64_t runs) {
  cn_routine *r = routine_prepare(ctx, asgn, backend, name, runs);
  if (!r) return NULL;
  bool done;
  if (take_cached(r, &done) != CN_OK ||
      (!done && r->backend->compile(ctx, r->proc, &r->compiled, &r->source) != CN_OK) ||
      !routine_adopt(r)) {
    routine_release(r);
    return NULL;
  }
  return r;
}

/* A compiled routine (see cn_routine_compile_tiered for `runs`); counted on the progress line
 * from lowering to the loaded object. */
static cn_routine *routine_compile(cn_ctx *ctx, const cn_asgn *asgn, cn_backend_kind backend,
                                   const char *name, int64_t runs) {
  if (!ctx) return NULL;
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, 1);
  cn_routine *r = routine_build(ctx, asgn, backend, name, runs);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, -1);
  return r;
}

cn_routine *cn_routine_compile(cn_ctx *ctx, const cn_asgn *asgn, cn_backend_kind backend,
                               const char *name) {
  return routine_compile(ctx, asgn, backend, name, NEVER_INTERPRETED);
}

cn_routine *cn_routine_compile_tiered(cn_ctx *ctx, const cn_asgn *asgn, cn_backend_kind backend,
                                      const char *name, bool once) {
  return routine_compile(ctx, asgn, backend, name, once ? 1 : RUNS_UNKNOWN);
}

/* cn_routine_compile_many, routine k prepared for runs[k] (0: unknown; runs NULL: never
 * interpreted): the routines to compile go to the backend's compile_many together (or, `behind`,
 * to its start_many: each routine's first run waits for its own), the interpreted ones (and those
 * taken from the cache) one by one. */
static cn_status compile_many(cn_ctx *ctx, int n, const cn_asgn *const *asgns,
                              const char *const *names, cn_backend_kind backend,
                              const int64_t *runs, bool behind, cn_routine **out) {
  if (!ctx) return CN_ERR_INVALID;
  if (n < 0 || (n > 0 && (!asgns || !names || !out)))
    return cn_fail(ctx, CN_ERR_INVALID, "cn_routine_compile_many: %d routines, arrays missing", n);
  for (int k = 0; k < n; k++) out[k] = NULL;
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, n);
  size_t slots = n > 0 ? (size_t)n : 1;
  cn_routine **rs = cn_calloc(ctx, slots, sizeof *rs),
             **batch = cn_alloc(ctx, sizeof *batch * slots);
  const cn_ll_proc **procs = cn_alloc(ctx, sizeof *procs * slots);
  void **compiled = cn_calloc(ctx, slots, sizeof *compiled);
  const char **sources = cn_alloc(ctx, sizeof *sources * slots);
  cn_status status = rs && batch && procs && compiled && sources ? CN_OK : ctx->status;
  int m = 0; /* the routines compiled together: batch[0 .. m) */
  for (int k = 0; k < n && status == CN_OK; k++) {
    bool done = false;
    if (!(rs[k] =
              routine_prepare(ctx, asgns[k], backend, names[k],
                              runs ? (runs[k] > 0 ? runs[k] : RUNS_UNKNOWN) : NEVER_INTERPRETED)))
      status = ctx->status;
    else if ((status = take_cached(rs[k], &done)) == CN_OK && !done && rs[k]->tiered)
      status = rs[k]->backend->compile(ctx, rs[k]->proc, &rs[k]->compiled, &rs[k]->source);
    else if (status == CN_OK && !done) {
      batch[m] = rs[k];
      procs[m++] = rs[k]->proc;
    }
  }
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, -(n - m)); /* the line counts what compiles */
  const cn_backend *impl = status == CN_OK && m > 0 ? batch[0]->backend : NULL;
  if (impl && behind && impl->start_many) {
    void *started = NULL;
    status = impl->start_many(ctx, m, procs, &started, sources);
    for (int k = 0; k < m && status == CN_OK; k++) {
      batch[k]->batch = started;
      batch[k]->batch_index = k;
      batch[k]->source = sources[k];
    }
  } else {
    if (impl && impl->compile_many) {
      status = impl->compile_many(ctx, m, procs, compiled, sources);
    } else if (impl) {
      for (int k = 0; k < m && status == CN_OK; k++)
        status = impl->compile(ctx, procs[k], &compiled[k], &sources[k]);
    }
    for (int k = 0; k < m && status == CN_OK; k++) {
      batch[k]->compiled = compiled[k];
      batch[k]->source = compiled[k] ? sources[k] : NULL;
    }
  }
  for (int k = 0; k < n && rs; k++)
    if (rs[k] && status == CN_OK && !routine_adopt(rs[k])) status = ctx->status;
  for (int k = 0; k < n && rs; k++) {
    if (status == CN_OK) {
      out[k] = rs[k];
    } else if (rs[k]) {
      if (rs[k]->cleanup) cn_ctx_remove_cleanup(ctx, rs[k]->cleanup);
      routine_release(rs[k]);
    }
  }
  free(rs);
  free(compiled);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, -m);
  return status;
}

cn_status cn_routine_compile_many(cn_ctx *ctx, int n, const cn_asgn *const *asgns,
                                  const char *const *names, cn_backend_kind backend,
                                  cn_routine **out) {
  return compile_many(ctx, n, asgns, names, backend, NULL, false, out);
}

cn_status cn_routine_compile_tiered_many(cn_ctx *ctx, int n, const cn_asgn *const *asgns,
                                         const char *const *names, cn_backend_kind backend,
                                         const int64_t *runs, cn_routine **out) {
  return compile_many(ctx, n, asgns, names, backend, runs, true, out);
}

/* ---- Threads ---- */

#define MAX_THREADS 1024

/* A thread count: a decimal integer in [1, MAX_THREADS]. */
static bool parse_threads(const char *text, int *threads) {
  char *end;
  long v = strtol(text, &end, 10);
  if (end == text || *end || v < 1 || v > MAX_THREADS) return false;
  *threads = (int)v;
  return true;
}

/* The "threads" default: $CANNL_THREADS, else the cores the process may run on (in a thread-local
 * buffer until the thread's next call). */
static const char *threads_default(void) {
  const char *env = getenv("CANNL_THREADS");
  if (env && *env) return env;
  static _Thread_local char text[16];
  cpu_set_t set;
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  snprintf(text, sizeof text, "%d", cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : cores);
  return text;
}

/* Runs the backend on buffers with the context's pool. */
static cn_status run_parallel(cn_routine *routine, void *const *buffers) {
  cn_ctx *ctx = routine->ctx;
  /* a value set on the context wins; the default was read when the routine was compiled */
  const char *set = cn_ctx_stored_option(ctx, "threads");
  const char *text = set ? set : routine->env_threads;
  int threads;
  if (!parse_threads(text, &threads))
    return cn_fail(ctx, CN_ERR_INVALID, "CANNL_THREADS=%s: not a thread count in [1, %d]", text,
                   MAX_THREADS);
  cn_pool *pool = cn_pool_of(ctx, threads);
  if (!pool) return ctx->status;
  cn_parallel par = cn_pool_parallel(pool);
  return routine->backend->run_parallel(ctx, routine->compiled, buffers, routine->sym_values, &par);
}

/* Runs the backend on buffers (the host's or the device's). */
static cn_status run_backend(cn_routine *r, void *const *buffers) {
  return r->parallel && (r->backend->caps & CN_BACKEND_PARALLEL)
             ? run_parallel(r, buffers)
             : r->backend->run(r->ctx, r->compiled, buffers, r->sym_values);
}

/* Clears a local param's scratch on the device before a run (where its first statement does not
 * write every cell): the device's clear, else an upload of host zeros. */
static cn_status clear_scratch(cn_routine *r, const cn_device *dev, void *const *buffers, int i) {
  size_t bytes = r->scratch_bytes[i];
  if (!bytes) return CN_OK;
  if (dev->clear) return dev->clear(r->ctx, dev, buffers[i], bytes);
  /* the previous run's upload of these zeros may still be reading them */
  cn_status status = r->ran ? dev->synchronize(r->ctx, dev) : CN_OK;
  if (status != CN_OK) return status;
  memset(r->scratch[i], 0, bytes); /* a tiered routine's host runs left their values there */
  r->ctx->stats[CN_STAT_UPLOADS]++;
  r->ctx->stats[CN_STAT_UPLOAD_BYTES] += bytes;
  return dev->upload(r->ctx, dev, buffers[i], r->scratch[i], bytes);
}

/* Runs the backend on the host buffers, or, linked to a device with its own memory, on the
 * device's: the nodes' copies there (uploaded where stale), the scratch cleared; the written
 * copies become the current ones (also after a failed run, which may have written part of
 * them). The run is queued, not waited for: the host waits when it reads a node the run wrote or
 * writes a buffer an upload reads (resident.c), where a failure of the queued work is reported;
 * a run that fails to queue is waited for at once. */
static cn_status run_on_device(cn_routine *r, const cn_device *dev, void **buffers) {
  if (!dev) return run_backend(r, r->buffers);
  const cn_ll_proc *proc = r->proc;
  cn_status status = CN_OK;
  for (int i = 0; i < proc->n_params && status == CN_OK; i++)
    status = r->local[i]
                 ? clear_scratch(r, dev, buffers, i)
                 : cn_node_device(proc->params[i].node, proc->params[i].merge, dev, &buffers[i]);
  if (status == CN_OK) {
    status = run_backend(r, buffers);
    for (int w = 0; w < r->n_written; w++) {
      const cn_ll_param *p = &proc->params[r->written[w]];
      if (!r->local[r->written[w]]) cn_node_device_wrote(p->node, p->merge, dev);
    }
  }
  if (status != CN_OK) dev->synchronize(r->ctx, dev); /* the error is the run's */
  return status;
}

/* The position of sym among the procedure's free symbols, or -1. */
static int free_sym_slot(const cn_ll_proc *proc, cn_symbol sym) {
  for (int i = 0; i < proc->n_free_syms; i++)
    if (proc->free_syms[i] == sym) return i;
  return -1;
}

bool cn_routine_reads(const cn_routine *routine, cn_symbol sym) {
  return free_sym_slot(routine->proc, sym) >= 0;
}

cn_status cn_routine_bind(cn_routine *routine, cn_symbol sym, int64_t value) {
  cn_ctx *ctx = routine->ctx;
  int slot = free_sym_slot(routine->proc, sym);
  if (slot < 0)
    return cn_fail(ctx, CN_ERR_INVALID, "routine '%s' does not read symbol '%s'", routine->name,
                   cn_symbol_name(ctx, sym));
  const cn_symbol_info *info = cn_ctx_symbol(ctx, sym);
  CN_ASSERT(info != NULL);
  if (info->range > 0 && (value < 0 || value >= info->range))
    return cn_fail(ctx, CN_ERR_INVALID,
                   "routine '%s': value %lld of symbol '%s' is outside its range [0, %lld)",
                   routine->name, (long long)value, info->name, (long long)info->range);
  routine->sym_values[slot] = value;
  routine->sym_bound[slot] = true;
  return CN_OK;
}

/* A tiered routine's interpreted runs may take this long (about what compiling it costs) before
 * it is compiled: a routine run a few times (a print, a scalar update per epoch) never is, one in
 * a training loop soon is. */
#define TIER_UP_US 30000

/* Compiles a tiered routine for the backend it was interpreted in place of; its runs are the
 * interpreter's bit for bit, so a result never depends on when this happens. */
static cn_status tier_up(cn_routine *r) {
  void *compiled = NULL;
  const char *source = NULL;
  cn_progress_add(r->ctx, CN_PROGRESS_COMPILE, 1);
  cn_status status = r->target->compile(r->ctx, r->proc, &compiled, &source);
  cn_progress_add(r->ctx, CN_PROGRESS_COMPILE, -1);
  if (status != CN_OK) return status;
  r->backend->release(r->compiled);
  r->backend = r->target;
  r->compiled = compiled;
  r->source = source;
  r->tiered = false;
  if ((status = routine_link(r)) != CN_OK) return status;
  cn_log(r->ctx, CN_LOG_DEBUG, "routine '%s': compiled after %.3f s of interpreted runs", r->name,
         (double)r->interpreted_us * 1e-6);
  return CN_OK;
}

/* The first run of a routine compiling behind takes its compiled state (waiting for it). */
static cn_status take_compiled(cn_routine *r) {
  void *batch = r->batch;
  r->batch = NULL;
  cn_status status = r->backend->take(r->ctx, batch, r->batch_index, &r->compiled);
  if (status != CN_OK) { /* the source went with the failed compilation's state */
    r->failed = true;
    r->source = NULL;
  }
  return status;
}

/* A run on dev with the buffers linked there (NULL: the host's). */
static cn_status routine_run(cn_routine *routine, const cn_device *dev, void **dev_buffers) {
  cn_ctx *ctx = routine->ctx;
  const cn_ll_proc *proc = routine->proc;
  if (ctx->compiling) cn_cc_drive(ctx);
  if (routine->batch && take_compiled(routine) != CN_OK) return ctx->status;
  if (routine->failed)
    return cn_fail(ctx, CN_ERR_COMPILE, "routine '%s': its compilation failed (at its first run)",
                   routine->name);
  for (int i = 0; i < proc->n_free_syms; i++)
    if (!routine->sym_bound[i])
      return cn_fail(ctx, CN_ERR_RUNTIME, "routine '%s': symbol '%s' is not bound", routine->name,
                     cn_symbol_name(ctx, proc->free_syms[i]));
  for (int i = 0; i < proc->n_params && !dev; i++) {
    if (routine->local[i]) {
      memset(routine->scratch[i], 0, routine->scratch_bytes[i]);
      routine->buffers[i] = routine->scratch[i];
      continue;
    }
    const cn_ll_param *p = &proc->params[i];
    if (!(routine->buffers[i] = cn_node_host(p->node, p->merge, routine->access[i])))
      return ctx->status;
  }
  routine->run_device = dev;
  routine->run_buffers = dev_buffers;
  uint64_t start = cn_now_us();
  cn_status status = run_on_device(routine, dev, dev_buffers);
  uint64_t took = cn_now_us() - start;
  ctx->stats[CN_STAT_US_RUN] += took;
  if (!routine->ran) ctx->stats[CN_STAT_US_FIRST_RUN] += took;
  routine->ran = true;
  if (status != CN_OK) return status;
  ctx->stats[CN_STAT_ROUTINE_RUNS]++;
  if ((status = check_guards(routine)) != CN_OK) return status;
  if ((status = check_nonfinite(routine)) != CN_OK) return status;
  if (routine->tiered && !routine->once && (routine->interpreted_us += took) > TIER_UP_US)
    return tier_up(routine);
  return CN_OK;
}

cn_status cn_routine_run(cn_routine *routine) {
  cn_status status = routine_link(routine);
  if (status != CN_OK) return status;
  return routine_run(routine, routine->device, routine->device_buffers);
}

cn_status cn_routine_synchronize(cn_routine *routine) {
  if (!routine) return CN_ERR_INVALID;
  return routine->device ? routine->device->synchronize(routine->ctx, routine->device) : CN_OK;
}

cn_status cn_routine_run_on(cn_routine *routine, int device) {
  if (!routine) return CN_ERR_INVALID;
  cn_ctx *ctx = routine->ctx;
  const cn_device *dev = cn_cpu_device(ctx, device, "cn_routine_run_on");
  if (!dev) return ctx->status;
  if (routine->target->caps & CN_BACKEND_DEVICE_MEMORY)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "cn_routine_run_on: routine '%s' is compiled for backend %s, which runs on its "
                   "own device (cn_routine_run); the CPU devices run the host backends' routines",
                   routine->name, routine->target->name);
  if (device >= routine->n_cpu_links) {
    void ***links = realloc(routine->cpu_links, sizeof *links * (size_t)(device + 1));
    if (!links) return cn_fail(ctx, CN_ERR_NOMEM, "cn_routine_run_on: out of memory");
    for (int k = routine->n_cpu_links; k <= device; k++) links[k] = NULL;
    routine->cpu_links = links;
    routine->n_cpu_links = device + 1;
  }
  if (!routine->cpu_links[device] &&
      link_device(routine, dev, &routine->cpu_links[device]) != CN_OK)
    return ctx->status;
  return routine_run(routine, dev, routine->cpu_links[device]);
}

const char *cn_routine_loops(const cn_routine *routine) {
  return routine->loops;
}

const char *cn_routine_source(const cn_routine *routine) {
  return routine->source;
}

const cn_ll_proc *cn_routine_proc(const cn_routine *routine) {
  return routine->proc;
}

bool cn_routine_writes(const cn_routine *routine, int param) {
  for (int i = 0; i < routine->n_written; i++)
    if (routine->written[i] == param) return true;
  return false;
}

void cn_routine_free(cn_routine *routine) {
  if (!routine) return;
  cn_ctx_remove_cleanup(routine->ctx, routine->cleanup);
  routine_release(routine);
}

/* ---- Options ---- */

cn_status cn_routine_default_backend(cn_ctx *ctx, cn_backend_kind *kind) {
  const char *name = cn_ctx_option(ctx, "backend");
  int found = cn_backend_find(name);
  if (found < 0) /* only the environment's can be unknown: a set value was checked */
    return unknown_value(ctx, "CANNL_BACKEND", name, cn_backend_list());
  *kind = (cn_backend_kind)found;
  return CN_OK;
}

cn_status cn_ctx_set_option(cn_ctx *ctx, const char *key, const char *value) {
  bool check = key && strcmp(key, "check") == 0, schedule = key && strcmp(key, "schedule") == 0;
  bool threads = key && strcmp(key, "threads") == 0;
  bool work = key && strcmp(key, "parallel_work") == 0, exact = key && strcmp(key, "exact") == 0;
  bool tune = key && strcmp(key, "tune") == 0, reduce = key && strcmp(key, "reduce") == 0;
  bool below = key && strcmp(key, "interpret_below") == 0;
  bool seed = key && strcmp(key, "random_seed") == 0;
  bool backend = key && strcmp(key, "backend") == 0;
  bool tile = key && strcmp(key, "device_tile") == 0;
  bool printing =
      key && (strcmp(key, "print_threshold") == 0 || strcmp(key, "print_precision") == 0);
  if (!check && !schedule && !threads && !work && !exact && !tune && !below && !seed && !printing &&
      !backend && !tile && !reduce && !(key && cn_cc_option(ctx, key))) {
    static const char known[] = CN_CC_OPTION_KEYS ", check, schedule, threads, parallel_work, "
                                                  "exact, tune, interpret_below, random_seed, "
                                                  "print_threshold, print_precision, backend, "
                                                  "device_tile, reduce";
    cn_suggest s;
    cn_suggest_init(&s, key ? key : "");
    cn_suggest_consider_list(&s, known);
    return cn_fail(ctx, CN_ERR_INVALID, "unknown option '%s'%s (known: %s)", key ? key : "(null)",
                   cn_suggest_text(&s), known);
  }
  int64_t unused_count;
  if (below && value && !parse_count(ctx, "interpret_below", value, 0, &unused_count))
    return cn_ctx_status(ctx);
  uint64_t unused_seed;
  if (seed && value && !cn_parse_natural(value, strlen(value), UINT32_MAX, &unused_seed))
    return cn_fail(ctx, CN_ERR_INVALID,
                   "option random_seed: '%s' is not a seed (an integer in [0, 2^32))", value);
  /* src/tensor/format.c reads them by the same rule */
  uint64_t print_max = printing && strcmp(key, "print_precision") == 0 ? 17 : INT64_MAX;
  if (printing && value && !cn_parse_natural(value, strlen(value), print_max, &unused_seed))
    return cn_fail(ctx, CN_ERR_INVALID, "option %s: '%s' is not an integer in [0, %llu]", key,
                   value, (unsigned long long)print_max);
  if (tile && value && cn_kernel_tile_check(ctx, "option device_tile", value) != CN_OK)
    return cn_ctx_status(ctx);
  if (backend && value && cn_backend_find(value) < 0)
    return unknown_value(ctx, "option backend", value, cn_backend_list());
  if (tune && value && !cn_tune_mode_valid(value))
    return unknown_value(ctx, "option tune", value, CN_TUNE_MODES);
  if (exact && value && !is_switch(value))
    return unknown_value(ctx, "option exact", value, "on, off, 1, 0");
  if (reduce && value && !is_reduce(value))
    return unknown_value(ctx, "option reduce", value, REDUCE_VALUES);
  int64_t unused_work;
  if (work && value && !parse_work(ctx, value, &unused_work)) return cn_ctx_status(ctx);
  int count;
  if (threads && value && !parse_threads(value, &count))
    return cn_fail(ctx, CN_ERR_INVALID, "option threads: '%s' is not a count in [1, %d]", value,
                   MAX_THREADS);
  if (check && value && strcmp(value, "nan") != 0 && strcmp(value, "off") != 0)
    return unknown_value(ctx, "option check", value, "nan, off");
  cn_sched_options unused;
  if (schedule && cn_sched_parse(ctx, value, &unused) != CN_OK) return cn_ctx_status(ctx);
  return cn_ctx_store_option(ctx, key, value);
}

/* The defaults are computed on each call (environment lookups), so they follow the environment
 * of the moment; a value set with cn_ctx_set_option wins. */
const char *cn_ctx_option(const cn_ctx *ctx, const char *key) {
  if (!key) return NULL;
  if (strcmp(key, "device_tile") == 0) return cn_kernel_tile_option(ctx);
  bool check = strcmp(key, "check") == 0, schedule = strcmp(key, "schedule") == 0;
  bool threads = strcmp(key, "threads") == 0, work = strcmp(key, "parallel_work") == 0;
  bool exact = strcmp(key, "exact") == 0, tune = strcmp(key, "tune") == 0;
  bool reduce = strcmp(key, "reduce") == 0;
  bool below = strcmp(key, "interpret_below") == 0, seed = strcmp(key, "random_seed") == 0;
  bool threshold = strcmp(key, "print_threshold") == 0;
  bool precision = strcmp(key, "print_precision") == 0, backend = strcmp(key, "backend") == 0;
  if (!check && !schedule && !threads && !work && !exact && !tune && !below && !seed &&
      !threshold && !precision && !backend && !reduce)
    return cn_cc_option(ctx, key);
  const char *set = cn_ctx_stored_option(ctx, key);
  if (set) return set;
  if (backend) { /* cn_routine_default_backend refuses an unknown name */
    const char *env = getenv("CANNL_BACKEND");
    return env && *env ? env : "c";
  }
  if (seed) { /* src/tensor/ops.c reads it, and refuses a bad variable */
    const char *env = getenv("CANNL_RANDOM_SEED");
    return env && *env ? env : "42";
  }
  if (threshold || precision) { /* src/tensor/format.c reads them, and refuses a bad variable */
    const char *env = getenv(threshold ? "CANNL_PRINT_THRESHOLD" : "CANNL_PRINT_PRECISION");
    return env && *env ? env : threshold ? "1000" : "8";
  }
  if (below) {
    const char *env = getenv("CANNL_INTERPRET_BELOW");
    return env && *env ? env : "4096";
  }
  if (threads) return threads_default();
  if (work) return work_default();
  if (reduce) {
    const char *env = getenv("CANNL_REDUCE"); /* a value outside the two fails the compile */
    return env && *env ? env : "ordered";
  }
  if (exact) {
    const char *env = getenv("CANNL_EXACT");
    return env && *env ? env : "off"; /* a value outside the switches fails the compile */
  }
  if (tune) {
    const char *env = getenv("CANNL_TUNE"); /* a value outside the modes fails the compile */
    return env && *env ? env : "cached";
  }
  const char *env = getenv(check ? "CANNL_CHECK" : "CANNL_SCHEDULE");
  return env && *env ? env : check ? "off" : "all";
}
