/* Autotuning of GEMM plans (tune.h). For each CN_LL_GEMM statement of at least CN_TUNE_WORK
 * points: the key text (the machine: CPU model, compiler and flags; the mode; the precision and
 * the fused or exact mode; each loop's group and extent and each operand's step per loop) names
 * a tune record; a record's plan is taken as it is; otherwise every candidate (a register tile
 * and a reduction block; the heuristic plan first) is compiled as a procedure of its own, all in
 * one batch of the backend's compile_many, each run once to warm up and then timed on private
 * buffers of the operands' sizes (never the user's tensors; on the backend's device when it has
 * memory of its own), on one thread, best of a few runs; the fastest is kept in the statement and
 * stored in a record. The backend is the one the routine is compiled for (CN_BACKEND_TUNABLE):
 * every compile and run goes through it, and its name is part of the key (except generated C's,
 * whose records predate the line).
 *
 * The modes: "off" keeps the heuristic plans; "cached" (the default) takes a record of an
 * earlier full or quick tuning where there is one and keeps the heuristic plan elsewhere, timing
 * nothing, so a first run starts at once (the heuristic is within ~10% of the tuned plans on the
 * benchmarks, see sched/gemm.c); "quick" and "full" take a record (full first; "full" only its
 * own) and tune the rest. The key says nothing of the nest's text or its place in a model, so
 * every GEMM of the same class (geometry, strides, precision, machine) shares one record: a
 * forward and a gradient nest alike, in one routine, another routine or another model.
 *
 * Invariants: a candidate differs from the plan only in mr, nv and kc, which change how a cell's
 * updates are grouped into tiles and blocks, never their order or rounding (loops.h), so tuning
 * never changes a result; a statement's plan is replaced by an arena copy, never written through.
 * Counters: CN_STAT_TUNE_RUNS per statement tuned, CN_STAT_TUNE_HITS per record used; the context's
 * progress counts a statement as tuning (CN_PROGRESS_TUNE) while its candidates compile and run. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "runtime/tune.h"

#include "backend/backend.h"
#include "numeric/numeric.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  int mr, nv;
  int64_t kc; /* 0: the plan's */
} candidate;

/* The heuristic first: on full ties it stays. The tiles fit 32 vector registers (AVX-512,
 * aarch64); on 16 the larger ones spill and lose the timing. */
static const candidate quick_candidates[] = {{0, 0, 0}, {8, 3, 0}, {12, 2, 0}, {6, 4, 512}};
static const candidate full_tiles[] = {{6, 4, 0}, {8, 3, 0}, {12, 2, 0}, {14, 2, 0},
                                       {4, 5, 0}, {6, 2, 0}, {4, 3, 0}};
static const int64_t full_blocks[] = {256, 384, 512};
#define MAX_CANDIDATES 24

bool cn_tune_mode_valid(const char *text) {
  return strcmp(text, "off") == 0 || strcmp(text, "cached") == 0 || strcmp(text, "quick") == 0 ||
         strcmp(text, "full") == 0;
}

/* The tunings whose records a mode takes, best first: a full tuning's winner is at least as good
 * as a quick one's, and "cached" times nothing itself. */
static const char *const *records_of(const char *mode) {
  static const char *const full_only[] = {"full", NULL}, *const any[] = {"full", "quick", NULL};
  return strcmp(mode, "full") == 0 ? full_only : any;
}

static int candidates_of(const char *mode, candidate *out) {
  int n = 0;
  if (strcmp(mode, "quick") == 0) {
    for (size_t k = 0; k < sizeof quick_candidates / sizeof *quick_candidates; k++)
      out[n++] = quick_candidates[k];
    return n;
  }
  out[n++] = (candidate){0, 0, 0};
  for (size_t t = 0; t < sizeof full_tiles / sizeof *full_tiles; t++)
    for (size_t b = 0; b < sizeof full_blocks / sizeof *full_blocks; b++)
      out[n++] = (candidate){full_tiles[t].mr, full_tiles[t].nv, full_blocks[b]};
  return n;
}

/* The key text of a statement (arena), see the file comment. */
static const char *key_of(cn_ctx *ctx, const cn_backend *backend, const cn_ll_proc *proc,
                          const cn_ll_stmt *s, const char *mode) {
  const cn_ll_gemm *plan = s->u.gemm.plan;
  cn_sbuf sb = {0};
  cn_sbuf_puts(&sb, "cannl gemm tune 1\n");
  if (backend != &cn_backend_c) cn_sbuf_printf(&sb, "backend %s\n", backend->name);
  cn_sbuf_printf(&sb, "machine %s | %s | %s\n%s %s %s\n", cn_cpu_model(), cn_cc_option(ctx, "cc"),
                 cn_cc_option(ctx, "cflags"), mode, cn_prec_name(proc->params[plan->c].node->prec),
                 plan->fma ? "fma" : "exact");
  cn_ll_gemm_parts parts;
  cn_ll_gemm_parts_of(s, &parts);
  for (int k = 0; k < plan->depth; k++) {
    const cn_ll_stmt *loop = parts.loops[k];
    cn_sbuf_printf(&sb, "loop %c %" PRId64, "MNKB"[plan->role[k]],
                   loop -> u.loop.to - loop->u.loop.from);
    for (int a = 0; a < 3; a++) {
      const cn_node *node = proc->params[parts.param[a]].node;
      int64_t strides[CN_MAX_RANK], step = 0;
      cn_node_strides(node, strides);
      for (int d = 0; d < node->rank; d++)
        step += cn_index_coeff(&parts.idx[a][d], loop->u.loop.sym) * strides[d];
      cn_sbuf_printf(&sb, " %c%" PRId64, "cxy"[a], step);
    }
    cn_sbuf_putc(&sb, '\n');
  }
  return cn_sbuf_finish(ctx, &sb);
}

static int64_t points_of(const cn_ll_stmt *s) {
  cn_ll_gemm_parts parts;
  cn_ll_gemm_parts_of(s, &parts);
  int64_t work = 1;
  for (int k = 0; k < s->u.gemm.plan->depth; k++) {
    int64_t extent = parts.loops[k]->u.loop.to - parts.loops[k]->u.loop.from;
    work = work > INT64_MAX / extent ? INT64_MAX : work * extent;
  }
  return work;
}

/* Replaces the statement's plan by a copy with the candidate's sizes. */
static cn_status apply(cn_ctx *ctx, cn_ll_stmt *s, candidate c) {
  cn_ll_gemm *plan = cn_alloc(ctx, sizeof *plan);
  if (!plan) return ctx->status;
  *plan = *s->u.gemm.plan;
  plan->mr = c.mr;
  plan->nv = c.nv;
  if (c.kc > 0) plan->kc = c.kc;
  s->u.gemm.plan = plan;
  return CN_OK;
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Private operand buffers of the nodes' padded sizes, filled with 1/4 (no subnormals, no
 * overflow over any reduction the timing runs); the other params NULL (never accessed). */
static bool scratch_buffers(const cn_ll_proc *proc, const cn_ll_gemm_parts *parts, void **bufs) {
  for (int k = 0; k < proc->n_params; k++) bufs[k] = NULL;
  for (int a = 0; a < 3; a++) {
    if (bufs[parts->param[a]]) continue; /* x and y may be one buffer */
    const cn_node *node = proc->params[parts->param[a]].node;
    size_t cells = cn_node_buffer_cells(node);
    void *buf = malloc(cells * cn_prec_bytes(node->prec) + 1);
    if (!buf) return false;
    cn_value quarter = cn_value_of_double(node->prec, 0.25);
    size_t bytes = cn_prec_bytes(node->prec);
    for (size_t i = 0; i < cells; i++) cn_value_store(node->prec, quarter, (char *)buf + i * bytes);
    bufs[parts->param[a]] = buf;
  }
  return true;
}

/* The buffers the candidates run on: the private host buffers, or, for a backend with memory of
 * its own, copies of them on its device (buffers malloc'd, NULL where host is NULL). */
typedef struct {
  void **host, **buffers;
  const cn_device *device; /* NULL: the host's */
} placed;

/* Places the private buffers where the backend runs (placed.buffers set on success). */
static cn_status place(cn_ctx *ctx, const cn_backend *backend, const cn_ll_proc *proc,
                       const cn_ll_gemm_parts *parts, placed *run) {
  if (!(backend->caps & CN_BACKEND_DEVICE_MEMORY)) {
    run->buffers = run->host;
    return CN_OK;
  }
  cn_status status = backend->open_device(ctx, &run->device);
  if (status != CN_OK) return status;
  if (!(run->buffers = cn_calloc(ctx, (size_t)proc->n_params + 1, sizeof(void *))))
    return ctx->status;
  for (int a = 0; a < 3 && status == CN_OK; a++) {
    int i = parts->param[a];
    if (run->buffers[i]) continue; /* x and y may be one buffer */
    const cn_node *node = proc->params[i].node;
    size_t bytes = cn_node_buffer_cells(node) * cn_prec_bytes(node->prec);
    status = run->device->allocate(ctx, run->device, bytes, &run->buffers[i]);
    if (status == CN_OK)
      status = run->device->upload(ctx, run->device, run->buffers[i], run->host[i], bytes);
  }
  cn_status synced = run->device->synchronize(ctx, run->device);
  return status != CN_OK ? status : synced;
}

/* Gives back what place made. */
static void unplace(const cn_ll_gemm_parts *parts, placed *run) {
  if (!run->device || !run->buffers) return;
  for (int a = 0; a < 3; a++) {
    int i = parts->param[a];
    if (run->buffers[i]) run->device->free(run->device, run->buffers[i]);
    run->buffers[i] = NULL; /* x and y may be one buffer */
  }
  free(run->buffers);
}

/* The loops around a statement (a GEMM planned inside hoisted loops reads their variables). */
typedef struct {
  const cn_ll_stmt *loops[CN_GEMM_MAX_LOOPS];
  int n;
} enclosing;

/* Compiles and times the candidates of one statement; the fastest goes into the statement. Each
 * candidate runs inside one iteration (the first) of the loops around the statement. */
static cn_status tune_stmt(cn_ctx *ctx, const cn_backend *backend, cn_ll_proc *proc, cn_ll_stmt *s,
                           const enclosing *around, const char *mode, const char *key) {
  candidate cands[MAX_CANDIDATES];
  int n = candidates_of(mode, cands);
  const cn_ll_proc *procs[MAX_CANDIDATES];
  void *states[MAX_CANDIDATES] = {0};
  const char *sources[MAX_CANDIDATES];
  const cn_ll_gemm *heuristic = s->u.gemm.plan;
  for (int k = 0; k < n; k++) {
    cn_ll_gemm plan = *heuristic;
    plan.mr = cands[k].mr;
    plan.nv = cands[k].nv;
    if (cands[k].kc > 0) plan.kc = cands[k].kc;
    cn_ll_stmt *stmt = cn_lb_gemm(ctx, s->u.gemm.nest, &plan);
    for (int a = around->n - 1; a >= 0 && stmt; a--)
      stmt = cn_lb_loop(ctx, around->loops[a]->u.loop.sym, around->loops[a]->u.loop.from,
                        around->loops[a]->u.loop.from + 1, stmt);
    procs[k] = stmt ? cn_lb_proc(ctx, "tune_gemm", stmt, proc->n_params, proc->params,
                                 proc->n_free_syms, proc->free_syms)
                    : NULL;
    if (!procs[k]) return ctx->status;
  }
  /* the candidates' C generation and compilation count as tuning (CN_STAT_US_TUNE) */
  uint64_t cgen_us = ctx->stats[CN_STAT_US_CGEN], compile_us = ctx->stats[CN_STAT_US_COMPILE];
  cn_status status = CN_OK;
  if (backend->compile_many)
    status = backend->compile_many(ctx, n, procs, states, sources);
  else
    for (int k = 0; k < n && status == CN_OK; k++)
      status = backend->compile(ctx, procs[k], &states[k], &sources[k]);
  ctx->stats[CN_STAT_US_CGEN] = cgen_us;
  ctx->stats[CN_STAT_US_COMPILE] = compile_us;
  if (status != CN_OK) {
    for (int k = 0; k < n; k++)
      if (states[k]) backend->release(states[k]);
    return status;
  }
  void **bufs = calloc((size_t)proc->n_params + 1, sizeof *bufs);
  int64_t *syms = calloc((size_t)proc->n_free_syms + 1, sizeof *syms); /* static indices at 0 */
  cn_ll_gemm_parts parts;
  cn_ll_gemm_parts_of(s, &parts);
  bool ready = bufs && syms && scratch_buffers(proc, &parts, bufs);
  if (!ready) status = cn_fail(ctx, CN_ERR_NOMEM, "out of memory tuning a GEMM plan");
  placed run = {.host = bufs};
  if (ready && (status = place(ctx, backend, proc, &parts, &run)) != CN_OK) ready = false;
  int reps = strcmp(mode, "full") == 0 ? 5 : 3, best = 0;
  double best_time = 0;
  for (int k = 0; ready && k < n; k++) {
    double fastest = 0;
    for (int r = 0; status == CN_OK && r <= reps; r++) {
      double start = seconds();
      status = backend->run(ctx, states[k], run.buffers, syms);
      if (status == CN_OK && run.device) status = run.device->synchronize(ctx, run.device);
      double took = seconds() - start;
      if (r > 0 && (r == 1 || took < fastest)) fastest = took; /* run 0 warms up */
      cn_progress_tick(ctx);
    }
    if (status != CN_OK) break;
    if (k == 0 || fastest < best_time) {
      best = k;
      best_time = fastest;
    }
  }
  for (int k = 0; k < n; k++) backend->release(states[k]);
  unplace(&parts, &run);
  for (int a = 0; bufs && a < 3; a++) {
    free(bufs[parts.param[a]]);
    bufs[parts.param[a]] = NULL; /* x and y may be one buffer */
  }
  free(bufs);
  free(syms);
  if (status != CN_OK) return status;
  ctx->stats[CN_STAT_TUNE_RUNS]++;
  status = apply(ctx, s, cands[best]);
  char value[128];
  snprintf(value, sizeof value, "%d %d %" PRId64, s->u.gemm.plan->mr, s->u.gemm.plan->nv,
           s->u.gemm.plan->kc);
  /* a record that cannot be written only costs a later tuning */
  if (status == CN_OK && cn_cc_tune_store(ctx, key, value) != CN_OK) cn_ctx_clear_error(ctx);
  return status;
}

/* A record's value as tune_stmt writes it, "MR NV KC": three decimal numbers separated by one
 * space, MR and NV a register tile (both 0, the heuristic's, or MR <= 32 and NV <= 8) and KC >= 1.
 * False for anything else: the record's checksum is no protection against a crafted value, so
 * each number goes through the checked cn_parse_natural (sscanf's %d is undefined on one out of
 * range). */
static bool parse_value(const char *value, candidate *c) {
  static const uint64_t max[3] = {32, 8, INT64_MAX};
  uint64_t field[3];
  const char *at = value;
  for (int k = 0; k < 3; k++) {
    size_t len = strcspn(at, " ");
    if (!cn_parse_natural(at, len, max[k], &field[k])) return false;
    at += len;
    if (k < 2 && *at++ != ' ') return false;
  }
  if (*at || (field[0] == 0) != (field[1] == 0) || field[2] < 1) return false;
  *c = (candidate){(int)field[0], (int)field[1], (int64_t)field[2]};
  return true;
}

static cn_status tune_in(cn_ctx *ctx, const cn_backend *backend, cn_ll_proc *proc, cn_ll_stmt *s,
                         enclosing *around, const char *mode) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) {
      cn_status status = tune_in(ctx, backend, proc, s->u.seq.items[i], around, mode);
      if (status != CN_OK) return status;
    }
    return CN_OK;
  case CN_LL_FOR: {
    if (around->n == CN_GEMM_MAX_LOOPS || s->u.loop.from >= s->u.loop.to) return CN_OK;
    around->loops[around->n++] = s;
    cn_status status = tune_in(ctx, backend, proc, s->u.loop.body, around, mode);
    around->n--;
    return status;
  }
  case CN_LL_IF: return CN_OK;  /* a guard's variables need no value the tuner knows */
  case CN_LL_LET: return CN_OK; /* no GEMM plan is made under one (sched/gemm.c) */
  case CN_LL_GEMM: break;
  case CN_LL_COMMENT:
  case CN_LL_SET:
  case CN_LL_SET_VEC: return CN_OK;
  }
  if (points_of(s) < CN_TUNE_WORK) return CN_OK;
  for (const char *const *tuning = records_of(mode); *tuning; tuning++) {
    const char *key = key_of(ctx, backend, proc, s, *tuning);
    if (!key) return ctx->status;
    char value[128];
    bool found = false;
    cn_status status = cn_cc_tune_load(ctx, key, value, sizeof value, &found);
    if (status != CN_OK) return status;
    candidate c;
    if (found && parse_value(value, &c)) {
      ctx->stats[CN_STAT_TUNE_HITS]++;
      return apply(ctx, s, c);
    }
  }
  if (strcmp(mode, "cached") == 0) return CN_OK; /* the heuristic plan */
  const char *key = key_of(ctx, backend, proc, s, mode);
  if (!key) return ctx->status;
  cn_progress_add(ctx, CN_PROGRESS_TUNE, 1);
  cn_status status = tune_stmt(ctx, backend, proc, s, around, mode, key);
  cn_progress_add(ctx, CN_PROGRESS_TUNE, -1);
  return status;
}

cn_status cn_tune_proc(cn_ctx *ctx, const cn_backend *backend, cn_ll_proc *proc, const char *mode) {
  CN_ASSERT(cn_tune_mode_valid(mode) && (backend->caps & CN_BACKEND_TUNABLE));
  if (strcmp(mode, "off") == 0) return CN_OK;
  enclosing around = {.n = 0};
  return tune_in(ctx, backend, proc, proc->body, &around, mode);
}
