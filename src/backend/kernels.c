/* The kernel view of a procedure (kernels.h): each top-level statement of the body (sequences
 * flattened, comments dropped) becomes one kernel of the program, its grid the maximal run of
 * directly nested CN_LL_PARALLEL loops at its top or, for a CN_LL_GEMM, the loops of its nest
 * before the first reduction loop (the rows, columns and batches: distinct cells of its output),
 * the rest of the statement run inside the work item by the dialect-neutral emitter
 * (cgen_emit.c) with no outlining, so inner parallel marks are plain loops.
 *
 * Invariants of the text: a kernel returns at once for a linear id >= its work_items (the
 * runtime rounds the grid up), decomposes the id into the grid loops' variables with the
 * innermost loop fastest (v_k = from_k + (id / prod_{j>k} extent_j) % extent_k), and runs the
 * body only where every grid loop's affine bounds hold (start <= v < end: the loop as written
 * runs exactly those values, the box containing them, loops.h); reductions and every loop that
 * is not the grid run sequentially in the nest's order, so every cell gets the stores the
 * interpreter gives it, in the same order (no atomics). A GEMM whose plan starts from zero
 * (c_zero: the fill it took) gets a kernel clearing its c first, as the interpreter clears it;
 * a plan with fma runs its store as one fused multiply-add (cgen.h `fused`). Deterministic: the
 * text is a function of the procedure and the dialect, so it can key a binary cache. */
#include "backend/kernels.h"

#include <stdlib.h>
#include <string.h>

/* The most grid loops a kernel takes (a device's schedule marks a nest's run of independent
 * loops: sched.h cn_sched_options.device). */
#define KERNEL_MAX_GRID 8
/* The most launches a GEMM under sequential loops becomes (hoisted_gemm). */
#define KERNEL_MAX_HOISTED 64

static int64_t extent(const cn_ll_stmt *loop) {
  return loop->u.loop.to > loop->u.loop.from ? loop->u.loop.to - loop->u.loop.from : 0;
}

/* A GEMM under sequential loops, as the GEMM pass makes of a convolution's input gradient: `for
 * kh_rev: for kw_rev: gemm ...`, each loop without affine bounds and holding only the next. The
 * loops (outermost first) in loops[0 .. *n) and the GEMM in *gemm; the number of points of the
 * loops, or 0 when s is not of that form or has more than KERNEL_MAX_HOISTED points. Run on one
 * work item, its nest would be the whole product in one thread; instead each point is launched
 * as the GEMM's own kernel (tiled, or a grid over its cells) with the loops' variables bound to
 * the point's values, the points in the loops' order: on the in-order queue every cell gets its
 * updates in the same order as the loops would give them. */
static int64_t hoisted_gemm(const cn_ll_stmt *s, const cn_ll_stmt **loops, int *n,
                            const cn_ll_stmt **gemm) {
  int64_t points = 1;
  *n = 0;
  while (s->kind == CN_LL_FOR && !(s->u.loop.marks & CN_LL_PARALLEL) && *n < KERNEL_MAX_GRID &&
         !s->u.loop.n_lower && !s->u.loop.n_upper) {
    points *= extent(s);
    if (points == 0 || points > KERNEL_MAX_HOISTED) return 0;
    loops[(*n)++] = s;
    s = s->u.loop.body;
    if (s->kind == CN_LL_SEQ && s->u.seq.count == 1) s = s->u.seq.items[0];
  }
  *gemm = s;
  return *n > 0 && s->kind == CN_LL_GEMM ? points : 0;
}

/* Appends the top-level statements of s (sequences flattened, comments dropped) to list. */
static void top_statements(const cn_ll_stmt *s, const cn_ll_stmt **list, int *n) {
  if (s->kind == CN_LL_SEQ) {
    for (int i = 0; i < s->u.seq.count; i++) top_statements(s->u.seq.items[i], list, n);
  } else if (s->kind != CN_LL_COMMENT) {
    list[(*n)++] = s;
  }
}

/* Whether s holds a CN_LL_GEMM starting from zero below its top: its clear of c is one loop
 * over the whole buffer, which only one work item may run. */
static bool nested_clear(const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (nested_clear(s->u.seq.items[i])) return true;
    return false;
  case CN_LL_FOR: return nested_clear(s->u.loop.body);
  case CN_LL_IF: return nested_clear(s->u.guard.body);
  case CN_LL_LET: return nested_clear(s->u.let.body);
  case CN_LL_GEMM: return s->u.gemm.plan->c_zero || nested_clear(s->u.gemm.nest);
  case CN_LL_COMMENT:
  case CN_LL_SET:
  case CN_LL_SET_VEC: return false;
  }
  return false;
}

static int count_top(const cn_ll_stmt *s) {
  if (s->kind != CN_LL_SEQ) return s->kind != CN_LL_COMMENT;
  int n = 0;
  for (int i = 0; i < s->u.seq.count; i++) n += count_top(s->u.seq.items[i]);
  return n;
}

/* The program being made: the kernels' text and table, heap-owned. */
typedef struct {
  cgen g;
  cn_sbuf text;
  cn_kernel *kernels;
  int n;
  const cn_kernel_limits *limits; /* NULL: no tiled kernel */
  /* Loop variables bound to values in the kernels being made (a hoisted GEMM's point) */
  const cn_ll_stmt *const *bound;
  const int64_t *bound_values;
  int n_bound;
} builder;

/* Adds kernel k's entry (name "<proc>_k<k>", the params of `accessed`) and writes its signature:
 * the buffers (const where not `written`), then every free symbol. */
static cn_status begin_kernel(builder *b, int64_t work_items, int64_t group_size,
                              const bool *accessed, const bool *written) {
  const cgen *g = &b->g;
  const cn_cgen_dialect *d = g->dialect;
  const cn_ll_proc *proc = g->proc;
  cn_kernel *k = &b->kernels[b->n];
  int n_args = 0;
  for (int p = 0; p < proc->n_params; p++) n_args += accessed[p];
  int *params = malloc(sizeof(int) * (size_t)(n_args > 0 ? n_args : 1));
  cn_sbuf name = {0};
  cn_sbuf_printf(&name, "%s_k%d", proc->name, b->n);
  if (!params || name.failed) {
    free(params);
    cn_sbuf_free(&name);
    return cn_fail(g->ctx, CN_ERR_NOMEM, "out of memory making the kernels of routine '%s'",
                   proc->name);
  }
  *k = (cn_kernel){.name = name.data,
                   .work_items = work_items,
                   .n_args = n_args,
                   .params = params,
                   .group_size = group_size};
  b->n++;
  cn_sbuf *sb = &b->text;
  cn_sbuf_printf(sb, "%s%s(", d->kernel_prefix, k->name);
  int arg = 0;
  for (int p = 0; p < proc->n_params; p++) {
    if (!accessed[p]) continue;
    params[arg] = p;
    cn_sbuf_puts(sb, arg++ ? ", " : "");
    cn_sbuf_puts(sb, d->global_qualifier);
    cn_cgen_buffer_type(g, sb, p, written[p]);
    cn_sbuf_printf(sb, "%s%s", d->restrict_qualifier, g->param_names[p]);
  }
  for (int i = 0; i < proc->n_free_syms; i++)
    cn_sbuf_printf(sb, "%s%s %s", arg + i ? ", " : "", d->index_type,
                   cn_cgen_sym_name(g, proc->free_syms[i]));
  if (n_args + proc->n_free_syms == 0) cn_sbuf_puts(sb, "void");
  cn_sbuf_puts(sb, ") {\n");
  cn_sbuf_printf(sb, "  const %s cn_id = %s;\n", d->index_type, d->linear_id);
  /* a kernel of work-groups has exactly work_items, and no return before its barriers (PoCL
   * 3.1 wrote cells past a tile's guard in unrolled loops after one, never taken) */
  if (group_size == 0) cn_sbuf_printf(sb, "  if (cn_id >= %lld) return;\n", (long long)work_items);
  for (int v = 0; v < b->n_bound; v++)
    cn_sbuf_printf(sb, "  const %s %s = %lld;\n", d->index_type,
                   cn_cgen_sym_name(g, b->bound[v]->u.loop.sym), (long long)b->bound_values[v]);
  return CN_OK;
}

/* begin_kernel for a kernel running statements s[0 .. count): the params they read or write. */
static cn_status begin_statements(builder *b, const cn_ll_stmt *const *s, int count,
                                  int64_t work_items, int64_t group_size) {
  const cn_ll_proc *proc = b->g.proc;
  bool *accessed = cn_alloc(b->g.ctx, sizeof(bool) * (size_t)(proc->n_params + 1));
  bool *written = cn_alloc(b->g.ctx, sizeof(bool) * (size_t)(proc->n_params + 1));
  if (!accessed || !written) return b->g.ctx->status;
  for (int k = 0; k < count; k++) cn_cgen_access(&b->g, s[k], accessed, written);
  return begin_kernel(b, work_items, group_size, accessed, written);
}

/* The kernel clearing a GEMM's c (every cell of its padded buffer +0) before a plan that starts
 * from zero. */
static cn_status clear_kernel(builder *b, int c) {
  const cn_ll_proc *proc = b->g.proc;
  bool *accessed = cn_alloc(b->g.ctx, sizeof(bool) * (size_t)proc->n_params);
  if (!accessed) return b->g.ctx->status;
  accessed[c] = true;
  int64_t cells = (int64_t)cn_node_buffer_cells(proc->params[c].node);
  cn_status status = begin_kernel(b, cells > 0 ? cells : 1, 0, accessed, accessed);
  if (status != CN_OK) return status;
  if (cells > 0) cn_sbuf_printf(&b->text, "  %s[cn_id] = 0;\n", b->g.param_names[c]);
  cn_sbuf_puts(&b->text, "}\n\n");
  return CN_OK;
}

/* Declares the variables of `loops` (n of them, outermost first) at depth from the flat index
 * `flat` over their boxes, row-major (the innermost fastest): v_k = from_k + flat / (the product
 * of the extents inside k) % extent_k. */
static void declare_loops(const cgen *g, int depth, const cn_ll_stmt *const *loops, int n,
                          const char *flat) {
  cn_sbuf *sb = g->out;
  int64_t inner = 1;
  for (int k = n - 1; k >= 0; k--) {
    const cn_ll_stmt *loop = loops[k];
    cn_sbuf_indent(sb, depth);
    cn_sbuf_printf(sb, "const %s %s = ", g->dialect->index_type,
                   cn_cgen_sym_name(g, loop->u.loop.sym));
    if (loop->u.loop.from != 0) cn_sbuf_printf(sb, "%lld + ", (long long)loop->u.loop.from);
    cn_sbuf_puts(sb, flat);
    if (inner > 1) cn_sbuf_printf(sb, " / %lld", (long long)inner);
    if (k > 0) cn_sbuf_printf(sb, " %% %lld", (long long)extent(loop));
    cn_sbuf_puts(sb, ";\n");
    inner *= extent(loop);
  }
}

/* ---- Tiled GEMM kernels ----
 * A top-level CN_LL_GEMM whose output tile the device can hold: its cells (b, m, n), the loops of
 * each group flattened row-major in nest order (loops.h: batch, rows, columns, and the reduction
 * steps k, each cell's order of accumulation), are cut into tiles of TM x TN cells, one per
 * work-group, the groups of one batch point in a row, the N tiles fastest. Each work item holds a
 * register block of RM x RN cells, rows ty + i * WM and columns tx + j * WN of the tile (strided,
 * so neighbouring work items touch neighbouring columns: coalesced stores of c, no bank conflicts
 * reading local memory). The reduction runs in slices of TK steps: the group copies the operands'
 * slices (TM rows of x, TN columns of y, storage bits, no conversion) into local memory, waits at a
 * barrier, each work item runs the slice's steps in order on its cells from registers, and waits
 * again before the next slice overwrites the copies. A cell is one work item's throughout, and its
 * steps are the nest's in the nest's order: each update is the nest's own store, emitted by the
 * emitter with the accesses aliased to registers (cgen.aliases: the same conversions, rounding of a
 * narrow precision at every step, fma only when the plan says so), so the bits are the plain
 * loops', the interpreter's and generated C's. A triangle bounds the steps (K below M: k < m + off;
 * M below K: m < k + off) or the cells (N below M: n < m + off) per cell, and the group's range of
 * slices by its rows; cells past an N triangle are never written, a group all past it runs no
 * slice. No work item returns early: all reach every barrier (the grid is exactly the groups). A
 * plan from zero starts its registers at +0 (its clear kernel still clears c first, for the cells
 * outside the nest). */

/* The default tile (kernels.h CN_KERNEL_TILE_DEFAULT): a work-group of 16 x 16 work items, each
 * 4 x 4 cells (64 x 64 cells a group, 16 multiply-adds per pair of values read from local memory),
 * slices of 16 steps (16 KiB of local memory in double, 8 in single), the common first step of GPU
 * GEMMs (CUTLASS's and clBLAST's smallest configurations are of this size). A backend may start
 * from another (CUDA: 8 x 8 cells a work item, kernels.h cn_kernel_limits) and the option
 * "device_tile" replaces both; the tile is then smaller along a group with fewer cells, and shrunk
 * to the device's limits. */

/* ---- The option "device_tile" ---- */

const char *cn_kernel_tile_option(const cn_ctx *ctx) {
  const char *set = cn_ctx_stored_option(ctx, "device_tile");
  if (set) return set;
  const char *env = getenv("CANNL_DEVICE_TILE");
  return env && *env ? env : "auto";
}

/* A power of two in [1, most] at *text, which moves past it. */
static bool tile_side(const char **text, int64_t most, int64_t *out) {
  int64_t v = 0;
  const char *p = *text;
  while (*p >= '0' && *p <= '9' && v <= most) v = v * 10 + (*p++ - '0');
  if (p == *text || v < 1 || v > most || (v & (v - 1)) != 0) return false;
  *text = p;
  *out = v;
  return true;
}

bool cn_kernel_tile_parse(const char *text, cn_kernel_tile *tile) {
  if (!text) return false;
  if (strcmp(text, "auto") == 0) return true;
  cn_kernel_tile t, most = CN_KERNEL_TILE_MAX;
  const char *p = text;
  if (!tile_side(&p, most.items, &t.items) || *p++ != 'x' || !tile_side(&p, most.cells, &t.cells) ||
      *p++ != 'x' || !tile_side(&p, most.steps, &t.steps) || *p != '\0')
    return false;
  *tile = t;
  return true;
}

cn_status cn_kernel_tile_check(cn_ctx *ctx, const char *what, const char *value) {
  cn_kernel_tile unused, most = CN_KERNEL_TILE_MAX;
  if (cn_kernel_tile_parse(value, &unused)) return CN_OK;
  return cn_fail(ctx, CN_ERR_INVALID,
                 "%s: '%s' is not a tile: \"auto\" or <items>x<cells>x<steps>, powers of two up "
                 "to %lldx%lldx%lld (e.g. 16x8x16)",
                 what, value ? value : "(null)", (long long)most.items, (long long)most.cells,
                 (long long)most.steps);
}

cn_status cn_kernel_tile_choose(cn_ctx *ctx, cn_kernel_tile backend_tile, cn_kernel_tile *tile) {
  const char *value = cn_kernel_tile_option(ctx);
  *tile = backend_tile;
  return cn_kernel_tile_parse(value, tile) ? CN_OK
                                           : cn_kernel_tile_check(ctx, "CANNL_DEVICE_TILE", value);
}

/* ---- Choosing a GEMM's tile ---- */

typedef struct {
  int64_t wm, wn; /* work items along M and N: a group holds wm * wn */
  int64_t rm, rn; /* cells per work item along M and N */
  int64_t tk;     /* steps per slice staged in local memory */
} gemm_tile;

/* The loops of one group of a GEMM's nest (outermost first) and how many values their flat index
 * runs. */
typedef struct {
  const cn_ll_stmt *loops[CN_GEMM_MAX_LOOPS];
  int n;
  int64_t total;
} gemm_group;

/* Bytes of local memory of a tile's two slices (a row of padding each, see tiled_gemm). */
static int64_t tile_local_bytes(const gemm_tile *t, int64_t bytes) {
  return t->tk * (t->wm * t->rm + 1 + t->wn * t->rn + 1) * bytes;
}

/* Halves the work items, then the register block, along a group while half the tile still covers
 * its `cells`. */
static void tile_fit(int64_t *items, int64_t *regs, int64_t cells) {
  while (*items > 1 && *items * *regs / 2 >= cells) *items /= 2;
  while (*regs > 1 && *regs / 2 >= cells) *regs /= 2;
}

/* The work-groups of tile t over `batch` points of rows x cols cells (saturating). */
static double tile_groups(const gemm_tile *t, int64_t batch, int64_t rows, int64_t cols) {
  int64_t tm = t->wm * t->rm, tn = t->wn * t->rn;
  return (double)batch * (double)((rows + tm - 1) / tm) * (double)((cols + tn - 1) / tn);
}

/* Halves the larger of two sides (the first on ties). */
static void halve_larger(int64_t *a, int64_t *b) {
  *(*a >= *b ? a : b) /= 2;
}

/* The tile of a GEMM of `batch` points of rows x cols cells of `bytes` a cell on a device with
 * `limits`; false when even a slice of one step does not fit its local memory. A GEMM with fewer
 * groups than the device has compute units gets more, smaller ones: a unit without a group idles
 * however fast the others run (cells a work item go first, since a large register block only
 * pays where memory traffic is what limits; then work items a group, down to 64: two warps). */
static bool choose_tile(const cn_kernel_limits *limits, int64_t bytes, int64_t batch, int64_t rows,
                        int64_t cols, gemm_tile *t) {
  cn_kernel_tile from = limits->tile.items > 0 ? limits->tile : CN_KERNEL_TILE_DEFAULT;
  *t = (gemm_tile){from.items, from.items, from.cells, from.cells, from.steps};
  tile_fit(&t->wm, &t->rm, rows);
  tile_fit(&t->wn, &t->rn, cols);
  while (tile_groups(t, batch, rows, cols) < (double)limits->min_groups) {
    if (t->rm > 1 || t->rn > 1)
      halve_larger(&t->rm, &t->rn);
    else if (t->wm * t->wn > 64)
      halve_larger(&t->wm, &t->wn);
    else
      break;
  }
  if (limits->max_group < 1) return false;
  while (t->wm * t->wn > limits->max_group) *(t->wm >= t->wn ? &t->wm : &t->wn) /= 2;
  while (t->tk > 1 && tile_local_bytes(t, bytes) > limits->local_bytes) t->tk /= 2;
  return tile_local_bytes(t, bytes) <= limits->local_bytes;
}

/* The coefficient of loop variable sym in the offset of an access (elements of the buffer). */
static int64_t access_stride(const cgen *g, int param, const cn_index *idx, cn_symbol sym) {
  int64_t stride = 0;
  for (int d = 0; d < g->proc->params[param].node->rank; d++)
    stride += cn_index_coeff(&idx[d], sym) * g->strides[param][d];
  return stride;
}

/* Whether an access mentions one of the loops of a group. */
static bool access_mentions(const cgen *g, int param, const cn_index *idx, const gemm_group *gr) {
  for (int d = 0; d < g->proc->params[param].node->rank; d++)
    for (int k = 0; k < gr->n; k++)
      if (cn_index_mentions(&idx[d], gr->loops[k]->u.loop.sym)) return true;
  return false;
}

/* Whether the slice of an operand is copied with the reduction step fastest (its innermost K loop
 * is unit stride and its own group's is not), else its row / column fastest: neighbouring work
 * items read neighbouring cells. */
static bool steps_fastest(const cgen *g, int param, const cn_index *idx, const gemm_group *own,
                          const gemm_group *k) {
  bool own_unit =
      own->n > 0 && access_stride(g, param, idx, own->loops[own->n - 1]->u.loop.sym) == 1;
  return !own_unit && k->n > 0 && access_stride(g, param, idx, k->loops[k->n - 1]->u.loop.sym) == 1;
}

/* The copy of an operand's slice into local memory `array` (leading dimension lead: one row of a
 * step): `cells` (TM or TN) of its own group `own` by the slice's steps, each work item a strided
 * share; cells past the group's end or the range's steps +0. */
static void copy_slice(const cgen *g, const char *array, int64_t lead, int64_t cells, int64_t tk,
                       int64_t items, int param, const cn_index *idx, const gemm_group *own,
                       const char *origin, const gemm_group *k) {
  cn_sbuf *sb = g->out;
  const char *it = g->dialect->index_type;
  bool steps = steps_fastest(g, param, idx, own, k);
  cn_sbuf_printf(sb, "    for (int cn_e = (int)cn_local; cn_e < %lld; cn_e += %lld) {\n",
                 (long long)(tk * cells), (long long)items);
  if (steps)
    cn_sbuf_printf(sb, "      const int cn_kk = cn_e %% %lld, cn_c = cn_e / %lld;\n", (long long)tk,
                   (long long)tk);
  else
    cn_sbuf_printf(sb, "      const int cn_kk = cn_e / %lld, cn_c = cn_e %% %lld;\n",
                   (long long)cells, (long long)cells);
  cn_sbuf_printf(sb, "      const %s cn_g = %s + cn_c, cn_k = cn_k0 + cn_kk;\n", it, origin);
  cn_sbuf_printf(sb, "      %s[cn_kk * %lld + cn_c] = 0;\n", array, (long long)lead);
  cn_sbuf_printf(sb, "      if (cn_g < %lld && cn_k < cn_kend) {\n", (long long)own->total);
  declare_loops(g, 4, own->loops, own->n, "cn_g");
  declare_loops(g, 4, k->loops, k->n, "cn_k");
  cn_sbuf_printf(sb, "        %s[cn_kk * %lld + cn_c] = ", array, (long long)lead);
  cn_cgen_cell(g, sb, param, idx);
  cn_sbuf_puts(sb, ";\n      }\n    }\n");
}

/* The loops over a work item's register block (cn_i rows, cn_j columns) opened at depth, with the
 * cell's row cn_m and column cn_n when `rows` and `cols` (declared only where used: NVRTC warns
 * of an unused variable); closed by close_block. */
static void open_block(const cgen *g, int depth, const gemm_tile *t, bool rows, bool cols) {
  cn_sbuf *sb = g->out;
  const char *it = g->dialect->index_type, *unroll = g->dialect->unroll_pragma;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "%s\n", unroll);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "for (int cn_i = 0; cn_i < %lld; ++cn_i) {\n", (long long)t->rm);
  if (rows) {
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "const %s cn_m = cn_m0 + cn_ty + cn_i * %lld;\n", it, (long long)t->wm);
  }
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "%s\n", unroll);
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "for (int cn_j = 0; cn_j < %lld; ++cn_j) {\n", (long long)t->rn);
  if (cols) {
    cn_sbuf_indent(sb, depth + 2);
    cn_sbuf_printf(sb, "const %s cn_n = cn_n0 + cn_tx + cn_j * %lld;\n", it, (long long)t->wn);
  }
}

static void close_block(cn_sbuf *sb, int depth) {
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "}\n");
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
}

/* The tiled kernel of GEMM statement s, when the builder has limits and the tile fits them
 * (*done); else nothing is written and the caller makes the plain kernel. */
static cn_status tiled_gemm(builder *b, const cn_ll_stmt *s, bool *done) {
  *done = false;
  const cn_ll_gemm *plan = s->u.gemm.plan;
  const cn_ll_proc *proc = b->g.proc;
  cn_ll_gemm_parts parts;
  cn_ll_gemm_parts_of(s, &parts);
  gemm_group groups[CN_GEMM_ROLES];
  memset(groups, 0, sizeof groups);
  for (int r = 0; r < CN_GEMM_ROLES; r++) groups[r].total = 1;
  for (int k = 0; k < plan->depth; k++) {
    gemm_group *gr = &groups[plan->role[k]];
    gr->loops[gr->n++] = parts.loops[k];
    int64_t e = extent(parts.loops[k]);
    if (e == 0) return CN_OK; /* runs nothing: the plain kernel says so */
    if (gr->total > INT64_MAX / e) return CN_OK;
    gr->total *= e;
  }
  const gemm_group *gm = &groups[CN_GEMM_M], *gn = &groups[CN_GEMM_N], *gk = &groups[CN_GEMM_K],
                   *gb = &groups[CN_GEMM_BATCH];
  cn_prec prec = proc->params[plan->c].node->prec;
  gemm_tile t;
  if (!choose_tile(b->limits, (int64_t)cn_prec_bytes(prec), gb->total, gm->total, gn->total, &t))
    return CN_OK;
  int64_t tm = t.wm * t.rm, tn = t.wn * t.rn, items = t.wm * t.wn;
  int64_t m_tiles = (gm->total + tm - 1) / tm, n_tiles = (gn->total + tn - 1) / tn;
  double groups_count = (double)gb->total * (double)m_tiles * (double)n_tiles;
  if (groups_count * (double)items > (double)(INT64_MAX / 2)) return CN_OK;
  /* which of the product's reads is x (the one walking no column: loops.h's roles) */
  int xa = access_mentions(&b->g, parts.param[1], parts.idx[1], gn) ? 2 : 1;
  const cn_index *x_idx = parts.idx[xa], *y_idx = parts.idx[3 - xa];
  CN_ASSERT(parts.param[xa] == plan->x && parts.param[3 - xa] == plan->y);
  *done = true;

  cgen h = b->g;
  h.out = &b->text;
  cn_sbuf *sb = h.out;
  cn_status status = begin_statements(b, &s, 1, (int64_t)groups_count * items, items);
  if (status != CN_OK) return status;
  const cn_cgen_dialect *d = h.dialect;
  const char *it = d->index_type, *storage = d->precs[prec].store_c;
  long long lx = (long long)(tm + 1), ly = (long long)(tn + 1), off = (long long)plan->tri_offset;
  /* the slices, a row of padding each: a step's row starts one bank further on */
  cn_sbuf_printf(sb, "  %s%s cn_xs[%lld];\n", d->local_qualifier, storage, (long long)t.tk * lx);
  cn_sbuf_printf(sb, "  %s%s cn_ys[%lld];\n", d->local_qualifier, storage, (long long)t.tk * ly);
  cn_sbuf_printf(sb, "  const %s cn_group = cn_id / %lld, cn_local = cn_id %% %lld;\n", it,
                 (long long)items, (long long)items);
  cn_sbuf_printf(sb, "  const %s cn_tx = cn_local %% %lld, cn_ty = cn_local / %lld;\n", it,
                 (long long)t.wn, (long long)t.wn);
  cn_sbuf_printf(sb, "  const %s cn_m0 = cn_group / %lld %% %lld * %lld;\n", it, (long long)n_tiles,
                 (long long)m_tiles, (long long)tm);
  cn_sbuf_printf(sb, "  const %s cn_n0 = cn_group %% %lld * %lld;\n", it, (long long)n_tiles,
                 (long long)tn);
  if (gb->n > 0) {
    cn_sbuf_printf(sb, "  const %s cn_b = cn_group / %lld;\n", it, (long long)(n_tiles * m_tiles));
    declare_loops(&h, 1, gb->loops, gb->n, "cn_b");
  }
  /* the group's last row, which bounds its triangle */
  const char *last_row = "cn_min_i64(cn_m0 + %lld, %lld) - 1";
  cn_sbuf_printf(sb, "  const %s cn_kbeg = ", it);
  if (plan->tri == CN_GEMM_TRI_M)
    cn_sbuf_printf(sb, "cn_max_i64(0, cn_m0 - %lld + 1);\n", off);
  else
    cn_sbuf_puts(sb, "0;\n");
  cn_sbuf_printf(sb, "  const %s cn_kend = ", it);
  if (plan->tri == CN_GEMM_TRI_K) {
    cn_sbuf_printf(sb, "cn_min_i64(%lld, ", (long long)gk->total);
    cn_sbuf_printf(sb, last_row, (long long)tm, (long long)gm->total);
    cn_sbuf_printf(sb, " + %lld);\n", off);
  } else if (plan->tri == CN_GEMM_TRI_N) { /* a group whose every cell is past it: no step */
    cn_sbuf_puts(sb, "cn_n0 >= ");
    cn_sbuf_printf(sb, last_row, (long long)tm, (long long)gm->total);
    cn_sbuf_printf(sb, " + %lld ? 0 : %lld;\n", off, (long long)gk->total);
  } else {
    cn_sbuf_printf(sb, "%lld;\n", (long long)gk->total);
  }
  /* the registers: +0, or c's cells */
  cn_sbuf_printf(sb, "  %s cn_acc[%lld][%lld];\n", storage, (long long)t.rm, (long long)t.rn);
  open_block(&h, 1, &t, !plan->c_zero, !plan->c_zero);
  cn_sbuf_puts(sb, "      cn_acc[cn_i][cn_j] = 0;\n");
  if (!plan->c_zero) {
    cn_sbuf_printf(sb, "      if (cn_m < %lld && cn_n < %lld) {\n", (long long)gm->total,
                   (long long)gn->total);
    declare_loops(&h, 4, gm->loops, gm->n, "cn_m");
    declare_loops(&h, 4, gn->loops, gn->n, "cn_n");
    cn_sbuf_puts(sb, "        cn_acc[cn_i][cn_j] = ");
    cn_cgen_cell(&h, sb, plan->c, parts.idx[0]);
    cn_sbuf_puts(sb, ";\n      }\n");
  }
  close_block(sb, 1);
  /* the slices */
  cn_sbuf_printf(sb, "  for (%s cn_k0 = cn_kbeg; cn_k0 < cn_kend; cn_k0 += %lld) {\n", it,
                 (long long)t.tk);
  copy_slice(&h, "cn_xs", lx, tm, t.tk, items, plan->x, x_idx, gm, "cn_m0", gk);
  copy_slice(&h, "cn_ys", ly, tn, t.tk, items, plan->y, y_idx, gn, "cn_n0", gk);
  cn_sbuf_printf(sb, "    %s\n", d->barrier);
  cn_sbuf_printf(sb, "    const int cn_steps = (int)cn_min_i64(%lld, cn_kend - cn_k0);\n",
                 (long long)t.tk);
  cn_sbuf_puts(sb, "    for (int cn_kk = 0; cn_kk < cn_steps; ++cn_kk) {\n");
  bool tri_steps = plan->tri == CN_GEMM_TRI_K || plan->tri == CN_GEMM_TRI_M;
  if (tri_steps) cn_sbuf_printf(sb, "      const %s cn_k = cn_k0 + cn_kk;\n", it);
  cn_sbuf_printf(sb, "      %s cn_xr[%lld], cn_yr[%lld];\n", storage, (long long)t.rm,
                 (long long)t.rn);
  cn_sbuf_printf(sb, "      %s\n", d->unroll_pragma);
  cn_sbuf_printf(sb,
                 "      for (int cn_i = 0; cn_i < %lld; ++cn_i) cn_xr[cn_i] = cn_xs[cn_kk * %lld + "
                 "(int)cn_ty + cn_i * %lld];\n",
                 (long long)t.rm, lx, (long long)t.wm);
  cn_sbuf_printf(sb, "      %s\n", d->unroll_pragma);
  cn_sbuf_printf(sb,
                 "      for (int cn_j = 0; cn_j < %lld; ++cn_j) cn_yr[cn_j] = cn_ys[cn_kk * %lld + "
                 "(int)cn_tx + cn_j * %lld];\n",
                 (long long)t.rn, ly, (long long)t.wn);
  open_block(&h, 3, &t, tri_steps, false);
  /* the nest's store on registers */
  const cn_ll_stmt *store = parts.loops[plan->depth - 1]->u.loop.body;
  if (store->kind == CN_LL_SEQ) store = store->u.seq.items[0];
  bool same = plan->x == plan->y;
  const cn_cgen_alias aliases[3] = {{plan->c, NULL, "cn_acc[cn_i][cn_j]"},
                                    {plan->x, same ? x_idx : NULL, "cn_xr[cn_i]"},
                                    {plan->y, same ? y_idx : NULL, "cn_yr[cn_j]"}};
  cgen regs = h;
  regs.fused = plan->fma;
  regs.n_aliases = 3;
  regs.aliases = aliases;
  int depth = 5;
  if (tri_steps) {
    cn_sbuf_printf(sb,
                   plan->tri == CN_GEMM_TRI_K ? "        if (cn_k < cn_m + %lld) {\n"
                                              : "        if (cn_m < cn_k + %lld) {\n",
                   off);
    depth = 6;
  }
  cn_cgen_stmt(&regs, depth, store);
  if (depth == 6) cn_sbuf_puts(sb, "        }\n");
  close_block(sb, 3);
  cn_sbuf_puts(sb, "    }\n");
  cn_sbuf_printf(sb, "    %s\n  }\n", d->barrier);
  /* the cells back into c */
  open_block(&h, 1, &t, true, true);
  cn_sbuf_printf(sb, "      if (cn_m < %lld && cn_n < %lld", (long long)gm->total,
                 (long long)gn->total);
  if (plan->tri == CN_GEMM_TRI_N) cn_sbuf_printf(sb, " && cn_n < cn_m + %lld", off);
  cn_sbuf_puts(sb, ") {\n");
  declare_loops(&h, 4, gm->loops, gm->n, "cn_m");
  declare_loops(&h, 4, gn->loops, gn->n, "cn_n");
  cn_sbuf_puts(sb, "        ");
  cn_cgen_cell(&h, sb, plan->c, parts.idx[0]);
  cn_sbuf_puts(sb, " = cn_acc[cn_i][cn_j];\n      }\n");
  close_block(sb, 1);
  cn_sbuf_puts(sb, "}\n\n");
  return CN_OK;
}

/* The reduction of one cell that top-level statement s is, alone or under its grid (parallel
 * loops without affine bounds, into grid[0 .. *n)), run as a work-group per point of the grid, a
 * work item per lane: a sum in lanes (loops.h CN_LL_LANES, cgen.h cn_cgen_lanes_group) or a max
 * of at least CN_LL_LANES_MIN steps without affine bounds, which runs without order in any mode
 * (cn_cgen_max_group). NULL when s is not that, or the device's work-groups cannot hold the
 * lanes. */
static const cn_ll_stmt *group_reduction(const builder *b, const cn_ll_stmt *s,
                                         const cn_ll_stmt **grid, int *n) {
  *n = 0;
  if (!b->limits || b->limits->max_group < CN_LL_LANES_COUNT ||
      b->limits->local_bytes < 2 * CN_LL_LANES_COUNT * (int64_t)sizeof(double))
    return NULL;
  while (s->kind == CN_LL_FOR && (s->u.loop.marks & CN_LL_PARALLEL) && !s->u.loop.n_lower &&
         !s->u.loop.n_upper && *n < KERNEL_MAX_GRID) {
    grid[(*n)++] = s;
    s = s->u.loop.body;
    if (s->kind == CN_LL_SEQ && s->u.seq.count == 1) s = s->u.seq.items[0];
  }
  if (s->kind != CN_LL_FOR) return NULL;
  if (s->u.loop.marks & CN_LL_LANES) return s;
  return cn_ll_long_reduction_store(b->g.proc, s, CN_OP_MAX) ? s : NULL;
}

/* Whether top-level statement s is a kernel of one work item: no GEMM at its top, no grid
 * (statement_kernel's rule: a parallel loop at the top, without a GEMM clear below) and not a
 * work-groups' reduction (group_reduction). */
static bool one_work_item(const builder *b, const cn_ll_stmt *s) {
  const cn_ll_stmt *loops[KERNEL_MAX_GRID], *gemm;
  int n;
  return s->kind != CN_LL_GEMM && !hoisted_gemm(s, loops, &n, &gemm) &&
         !group_reduction(b, s, loops, &n) &&
         (s->kind != CN_LL_FOR || !(s->u.loop.marks & CN_LL_PARALLEL) || nested_clear(s));
}

static cn_status statement_kernel(builder *b, const cn_ll_stmt *s);

/* The kernel of top-level statement s, the reduction `lanes` under grid[0 .. n_grid)
 * (group_reduction): a work-group of a work item per lane for each point of the grid, the point's
 * variables from the group's index. */
static cn_status group_kernel(builder *b, const cn_ll_stmt *s, const cn_ll_stmt *lanes,
                              const cn_ll_stmt *const *grid, int n_grid) {
  cgen h = b->g;
  h.out = &b->text;
  int64_t points = 1;
  for (int k = 0; k < n_grid; k++) {
    if (extent(grid[k]) == 0) return CN_OK; /* runs nothing */
    if (points > INT64_MAX / 2 / CN_LL_LANES_COUNT / extent(grid[k]))
      return statement_kernel(b, s); /* more groups than a launch takes */
    points *= extent(grid[k]);
  }
  cn_status status = begin_statements(b, &s, 1, points * CN_LL_LANES_COUNT, CN_LL_LANES_COUNT);
  if (status != CN_OK) return status;
  char group[64];
  snprintf(group, sizeof group, "(cn_id / %d)", CN_LL_LANES_COUNT);
  declare_loops(&h, 1, grid, n_grid, group);
  cn_sbuf_printf(&b->text, "  const %s cn_lane_id = cn_id %% %d;\n", h.dialect->index_type,
                 CN_LL_LANES_COUNT);
  if (lanes->u.loop.marks & CN_LL_LANES)
    cn_cgen_lanes_group(&h, 1, lanes);
  else
    cn_cgen_max_group(&h, 1, lanes);
  cn_sbuf_puts(&b->text, "}\n\n");
  return CN_OK;
}

/* One kernel of one work item running statements s[0 .. count) in order: the kernels they would
 * be one by one run that way on the in-order queue, so the work is the same, with one launch
 * instead of `count` (a training step's scalar statements: a learning rate, Adam's bias
 * corrections, a loss's mean). */
static cn_status sequence_kernel(builder *b, const cn_ll_stmt *const *s, int count) {
  cgen h = b->g;
  h.out = &b->text;
  cn_status status = begin_statements(b, s, count, 1, 0);
  if (status != CN_OK) return status;
  for (int k = 0; k < count; k++) cn_cgen_stmt(&h, 1, s[k]);
  cn_sbuf_puts(&b->text, "}\n\n");
  return CN_OK;
}

/* The kernel of top-level statement s. */
static cn_status statement_kernel(builder *b, const cn_ll_stmt *s) {
  cgen h = b->g;
  h.out = &b->text;
  const cn_ll_stmt *t = s;
  const cn_ll_gemm *plan = NULL;
  if (s->kind == CN_LL_GEMM) {
    plan = s->u.gemm.plan;
    if (plan->c_zero) {
      cn_status status = clear_kernel(b, plan->c);
      if (status != CN_OK) return status;
    }
    bool tiled = false;
    cn_status status = b->limits ? tiled_gemm(b, s, &tiled) : CN_OK;
    if (status != CN_OK || tiled) return status;
    h.fused = plan->fma;
    t = s->u.gemm.nest;
  }
  const cn_ll_stmt *grid[KERNEL_MAX_GRID] = {NULL};
  int n_grid = 0;
  int64_t work_items = 1;
  bool gridded = !nested_clear(t);
  /* A GEMM's loops before its first reduction loop index distinct cells of c (loops.h: work may
   * be reordered across cells, never within one), so they are the grid, marked or not. */
  while (gridded && t->kind == CN_LL_FOR && n_grid < KERNEL_MAX_GRID &&
         (plan ? plan->role[n_grid] != CN_GEMM_K : (t->u.loop.marks & CN_LL_PARALLEL) != 0)) {
    if (extent(t) == 0) return CN_OK; /* runs nothing */
    grid[n_grid++] = t;
    work_items *= extent(t);
    t = t->u.loop.body;
    if (t->kind == CN_LL_SEQ && t->u.seq.count == 1) t = t->u.seq.items[0];
  }
  cn_status status = begin_statements(b, &s, 1, work_items, 0);
  if (status != CN_OK) return status;
  cn_sbuf *sb = &b->text;
  declare_loops(&h, 1, grid, n_grid, "cn_id");
  /* the grid loops' affine bounds: their variables run only [start, end) as the loops would */
  int depth = 1, conds = 0;
  for (int k = 0; k < n_grid; k++) {
    const cn_ll_stmt *loop = grid[k];
    if (loop->u.loop.n_lower + loop->u.loop.n_upper == 0) continue;
    const char *var = cn_cgen_sym_name(&h, loop->u.loop.sym);
    cn_sbuf_puts(sb, conds++ ? " && " : "  if (");
    cn_cgen_range_side(&h, loop->u.loop.from, loop->u.loop.n_lower, loop->u.loop.lower,
                       "cn_max_i64");
    cn_sbuf_printf(sb, " <= %s && %s < ", var, var);
    cn_cgen_range_side(&h, loop->u.loop.to, loop->u.loop.n_upper, loop->u.loop.upper, "cn_min_i64");
  }
  if (conds) {
    cn_sbuf_puts(sb, ") {\n");
    depth = 2;
  }
  cn_cgen_stmt(&h, depth, t);
  if (conds) cn_sbuf_puts(sb, "  }\n");
  cn_sbuf_puts(sb, "}\n\n");
  return CN_OK;
}

/* The kernels of a GEMM under sequential loops (hoisted_gemm), one point after the other. */
static cn_status hoisted_kernels(builder *b, const cn_ll_stmt *const *loops, int n, int64_t points,
                                 const cn_ll_stmt *gemm) {
  int64_t values[KERNEL_MAX_GRID];
  b->bound = loops;
  b->bound_values = values;
  b->n_bound = n;
  cn_status status = CN_OK;
  for (int64_t p = 0; p < points && status == CN_OK; p++) {
    for (int64_t k = n - 1, rest = p; k >= 0; k--) { /* row-major: the innermost fastest */
      values[k] = loops[k]->u.loop.from + rest % extent(loops[k]);
      rest /= extent(loops[k]);
    }
    status = statement_kernel(b, gemm);
  }
  b->n_bound = 0;
  return status;
}

void cn_kernel_program_free(cn_kernel_program *program) {
  for (int k = 0; k < program->n_kernels; k++) {
    free((char *)program->kernels[k].name);
    free((int *)program->kernels[k].params);
  }
  free(program->kernels);
  free(program->source);
  *program = (cn_kernel_program){0};
}

cn_status cn_kernel_program_make(cn_ctx *ctx, const cn_ll_proc *proc,
                                 const cn_cgen_dialect *dialect, const cn_kernel_limits *limits,
                                 cn_kernel_program *out) {
  CN_ASSERT(dialect->kernel_prefix && dialect->global_qualifier && dialect->linear_id);
  *out = (cn_kernel_program){0};
  builder b = {.limits = limits};
  cn_status status = cn_cgen_init(&b.g, ctx, proc, dialect, &b.text);
  int n_top = count_top(proc->body), n = 0;
  const cn_ll_stmt **top = cn_alloc(ctx, sizeof(*top) * (size_t)(n_top + 1));
  if (top) top_statements(proc->body, top, &n);
  /* at most two kernels a statement (a GEMM's clear and its nest), or a point of its loops */
  int64_t most = 1;
  for (int i = 0; i < n; i++) {
    const cn_ll_stmt *loops[KERNEL_MAX_GRID], *gemm;
    int n_loops;
    int64_t points = hoisted_gemm(top[i], loops, &n_loops, &gemm);
    most += 2 * (points > 0 ? points : 1);
  }
  b.kernels = calloc((size_t)most, sizeof(cn_kernel));
  if (status == CN_OK && (!top || !b.kernels))
    status = top ? cn_fail(ctx, CN_ERR_NOMEM, "out of memory making the kernels of routine '%s'",
                           proc->name)
                 : ctx->status;
  for (int i = 0; i < n && status == CN_OK; i++) {
    const cn_ll_stmt *loops[KERNEL_MAX_GRID], *gemm, *grid[KERNEL_MAX_GRID], *lanes;
    int n_loops, n_grid, run = 0;
    int64_t points = hoisted_gemm(top[i], loops, &n_loops, &gemm);
    while (i + run < n && one_work_item(&b, top[i + run])) run++;
    if (points > 0) {
      status = hoisted_kernels(&b, loops, n_loops, points, gemm);
    } else if ((lanes = group_reduction(&b, top[i], grid, &n_grid))) {
      status = group_kernel(&b, top[i], lanes, grid, n_grid);
    } else if (run > 1) {
      status = sequence_kernel(&b, top + i, run);
      i += run - 1;
    } else {
      status = statement_kernel(&b, top[i]);
    }
  }
  cn_sbuf source = {0};
  cn_sbuf_printf(&source, "/* Generated by cannl: routine %s as %d kernels. Do not edit. */\n",
                 proc->name, b.n);
  if (status == CN_OK) status = dialect->prelude(ctx, &source, &b.text);
  cn_sbuf_puts(&source, "\n");
  cn_sbuf_puts(&source, cn_cgen_text(&b.text));
  cn_kernel_program program = {.source = source.data, .n_kernels = b.n, .kernels = b.kernels};
  if (status == CN_OK && (source.failed || b.text.failed))
    status =
        cn_fail(ctx, CN_ERR_NOMEM, "out of memory making the kernels of routine '%s'", proc->name);
  cn_sbuf_free(&b.text);
  if (status != CN_OK) {
    cn_kernel_program_free(&program);
    return status;
  }
  *out = program;
  return CN_OK;
}

/* A CN_LL_GEMM below the top of a statement (kernel dialects' `gemm` hook): its nest as plain
 * loops, its store fused when the plan says fma, after a sequential clear of c when the plan
 * starts from zero (statement_kernel keeps such a statement to one work item). */
void cn_kernel_gemm(const cgen *g, int depth, const cn_ll_stmt *s) {
  const cn_ll_gemm *plan = s->u.gemm.plan;
  cn_sbuf *sb = g->out;
  if (plan->c_zero) {
    cn_sbuf_indent(sb, depth);
    cn_sbuf_printf(sb, "for (%s cn_cell = 0; cn_cell < %lld; ++cn_cell) %s[cn_cell] = 0;\n",
                   g->dialect->index_type,
                   (long long)cn_node_buffer_cells(g->proc->params[plan->c].node),
                   g->param_names[plan->c]);
  }
  cgen h = *g;
  h.fused = plan->fma;
  cn_cgen_stmt(&h, depth, s->u.gemm.nest);
}
