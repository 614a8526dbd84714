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

/* The most grid loops a kernel takes (the schedule marks one loop per nest today). */
#define KERNEL_MAX_GRID 8

static int64_t extent(const cn_ll_stmt *loop) {
  return loop->u.loop.to > loop->u.loop.from ? loop->u.loop.to - loop->u.loop.from : 0;
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
} builder;

/* Adds kernel k's entry (name "<proc>_k<k>", the params of `accessed`) and writes its signature:
 * the buffers (const where not `written`), then every free symbol. */
static cn_status begin_kernel(builder *b, int64_t work_items, const bool *accessed,
                              const bool *written) {
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
  *k = (cn_kernel){.name = name.data, .work_items = work_items, .n_args = n_args, .params = params};
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
  cn_sbuf_printf(sb, "  if (cn_id >= %lld) return;\n", (long long)work_items);
  return CN_OK;
}

/* The kernel clearing a GEMM's c (every cell of its padded buffer +0) before a plan that starts
 * from zero. */
static cn_status clear_kernel(builder *b, int c) {
  const cn_ll_proc *proc = b->g.proc;
  bool *accessed = cn_alloc(b->g.ctx, sizeof(bool) * (size_t)proc->n_params);
  if (!accessed) return b->g.ctx->status;
  accessed[c] = true;
  int64_t cells = (int64_t)cn_node_buffer_cells(proc->params[c].node);
  cn_status status = begin_kernel(b, cells > 0 ? cells : 1, accessed, accessed);
  if (status != CN_OK) return status;
  if (cells > 0) cn_sbuf_printf(&b->text, "  %s[cn_id] = 0;\n", b->g.param_names[c]);
  cn_sbuf_puts(&b->text, "}\n\n");
  return CN_OK;
}

/* The kernel of top-level statement s. */
static cn_status statement_kernel(builder *b, const cn_ll_stmt *s) {
  cgen h = b->g;
  h.out = &b->text;
  const cn_ll_proc *proc = h.proc;
  const cn_ll_stmt *t = s;
  const cn_ll_gemm *plan = NULL;
  if (s->kind == CN_LL_GEMM) {
    plan = s->u.gemm.plan;
    if (plan->c_zero) {
      cn_status status = clear_kernel(b, plan->c);
      if (status != CN_OK) return status;
    }
    h.fused = plan->fma;
    t = s->u.gemm.nest;
  }
  const cn_ll_stmt *grid[KERNEL_MAX_GRID];
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
  bool *accessed = cn_alloc(h.ctx, sizeof(bool) * (size_t)(proc->n_params + 1));
  bool *written = cn_alloc(h.ctx, sizeof(bool) * (size_t)(proc->n_params + 1));
  if (!accessed || !written) return h.ctx->status;
  cn_cgen_access(&h, s, accessed, written);
  cn_status status = begin_kernel(b, work_items, accessed, written);
  if (status != CN_OK) return status;
  cn_sbuf *sb = &b->text;
  const char *index_type = h.dialect->index_type;
  int64_t inner = 1; /* the product of the extents inside grid loop k */
  for (int k = n_grid - 1; k >= 0; k--) {
    const cn_ll_stmt *loop = grid[k];
    cn_sbuf_printf(sb, "  const %s %s = ", index_type, cn_cgen_sym_name(&h, loop->u.loop.sym));
    if (loop->u.loop.from != 0) cn_sbuf_printf(sb, "%lld + ", (long long)loop->u.loop.from);
    cn_sbuf_puts(sb, "cn_id");
    if (inner > 1) cn_sbuf_printf(sb, " / %lld", (long long)inner);
    if (k > 0) cn_sbuf_printf(sb, " %% %lld", (long long)extent(loop));
    cn_sbuf_puts(sb, ";\n");
    inner *= extent(loop);
  }
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
                                 const cn_cgen_dialect *dialect, cn_kernel_program *out) {
  CN_ASSERT(dialect->kernel_prefix && dialect->global_qualifier && dialect->linear_id);
  *out = (cn_kernel_program){0};
  builder b = {0};
  cn_status status = cn_cgen_init(&b.g, ctx, proc, dialect, &b.text);
  int n_top = count_top(proc->body);
  const cn_ll_stmt **top = cn_alloc(ctx, sizeof(*top) * (size_t)(n_top + 1));
  /* at most two kernels a statement: a GEMM's clear and its nest */
  b.kernels = calloc((size_t)(2 * n_top + 1), sizeof(cn_kernel));
  if (status == CN_OK && (!top || !b.kernels))
    status = top ? cn_fail(ctx, CN_ERR_NOMEM, "out of memory making the kernels of routine '%s'",
                           proc->name)
                 : ctx->status;
  int n = 0;
  if (status == CN_OK) top_statements(proc->body, top, &n);
  for (int i = 0; i < n && status == CN_OK; i++) status = statement_kernel(&b, top[i]);
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
