/* The reference interpreter backend: executes a loop-IR procedure directly, one scalar at a time,
 * with the semantics of src/numeric (cn_value_load/store/convert, cn_eval_op, cn_eval_vec_op).
 * Every other backend is compared with it, so it favors the obvious reading of the IR; it still
 * keeps the walk free of allocation: compile precomputes each parameter's padded strides, the cell
 * of its logical origin and its per-axis bounds, and sizes the symbol environment once. Schedule
 * marks (CN_LL_PARALLEL, CN_LL_VECTOR) say how a loop may run, never what it computes: the
 * interpreter ignores them and runs every loop sequentially (it has no run_parallel). A sum in
 * lanes (CN_LL_LANES) is another computation, which it runs as loops.h defines it.
 *
 * Invariants: the compiled state copies what it needs of the nodes (precision, padded geometry)
 * and points only at the procedure, which lives in the context arena and so outlives it; the
 * environment holds one int64 per symbol the context had at compile time, and compile checks that
 * every symbol the procedure reads is below that count and bound (by an enclosing loop or as a
 * free symbol; a loop's bounds by enclosing loops or as free symbols), so the walk indexes it
 * unchecked and never reads an entry it did not set: the environment is not cleared, and the
 * check's tables follow the procedure's symbol list (cn_ll_symbols), so compiling a small routine
 * costs nothing in proportion to the context's symbols, which grow with every operation built; a
 * loop's range is evaluated once per entry and checked to lie in its box; every cell access is
 * checked per axis against the padded buffer with CN_ASSERT (the IR is validated upstream: a
 * failure is an internal bug, never a user error). A compiled procedure is run by one thread at a
 * time, like its context. */
#include "backend/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* CN_LE_INDEX values are wrapped to 32 bits below; that is the meaning of the index precision. */
_Static_assert(CN_INDEX_PREC == CN_PREC_UINT32, "embedded indices are uint32 values");

/* One uint4x32 cell yields at most 16 cells (of a 1-byte precision). */
#define INTERP_MAX_LANES ((int)sizeof(cn_u4x32))

/* The padded geometry of one parameter, in cells of its stored precision. */
typedef struct {
  cn_prec prec;
  size_t cell_bytes;
  int rank;
  int64_t origin;  /* cell of logical index (0, ..., 0): sum of left_pad * stride */
  int64_t n_cells; /* cells of the whole padded buffer */
  int64_t stride[CN_MAX_RANK];
  int64_t lo[CN_MAX_RANK], hi[CN_MAX_RANK]; /* logical index range of an axis: [-left, dim+right) */
} interp_param;

typedef struct {
  const cn_ll_proc *proc;
  int n_env;
  int64_t *env; /* symbol values during a run; malloc'd */
  interp_param params[];
} interp_compiled;

/* What the walk reads: the geometry, this run's buffers and the environment; `fma` inside the
 * nest of a GEMM plan in fused mode, whose one store is c + x * y (loops.h). */
typedef struct {
  const interp_param *params;
  void *const *buffers;
  int64_t *env;
  bool fma;
} interp_machine;

/* ---- Compile: geometry and a check of the procedure's symbols and accesses ---- */

static void fill_param(interp_param *p, const cn_node *node) {
  p->prec = node->prec;
  p->cell_bytes = cn_prec_bytes(node->prec);
  p->rank = node->rank;
  p->n_cells = (int64_t)cn_node_buffer_cells(node);
  cn_node_strides(node, p->stride);
  p->origin = 0;
  for (int d = 0; d < node->rank; d++) {
    p->origin += node->pad[d][0] * p->stride[d];
    p->lo[d] = -node->pad[d][0];
    p->hi[d] = node->dims[d] + node->pad[d][1];
  }
}

typedef struct {
  const interp_compiled *compiled;
  cn_ll_symbols symbols;
  unsigned char *bound; /* per position in `symbols`: bound by an enclosing loop or free */
} interp_check;

/* The symbol's position in the procedure's symbol list, checking it is in the environment. */
static int check_slot(const interp_check *k, cn_symbol sym) {
  CN_ASSERT(sym >= 0 && sym < k->compiled->n_env);
  int slot = cn_ll_symbol_slot(&k->symbols, sym);
  CN_ASSERT(slot >= 0);
  return slot;
}

static void check_symbol(const interp_check *k, cn_symbol sym) {
  CN_ASSERT(k->bound[check_slot(k, sym)]);
}

static void check_index(const interp_check *k, const cn_index *idx) {
  switch (idx->kind) {
  case CN_IDX_FIXED: return;
  case CN_IDX_ITER: check_symbol(k, idx->syms[0]); return;
  case CN_IDX_AFFINE:
    CN_ASSERT(idx->n_terms >= 1 && idx->n_terms <= CN_MAX_AFFINE_TERMS);
    for (int t = 0; t < idx->n_terms; t++) check_symbol(k, idx->syms[t]);
    return;
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown index kind");
}

static void check_access(const interp_check *k, int param, const cn_index *idx) {
  CN_ASSERT(param >= 0 && param < k->compiled->proc->n_params);
  int rank = k->compiled->params[param].rank;
  CN_ASSERT(rank == 0 || idx != NULL);
  for (int d = 0; d < rank; d++) check_index(k, &idx[d]);
}

static void check_expr(const interp_check *k, const cn_ll_expr *e) {
  CN_ASSERT(e != NULL);
  switch (e->kind) {
  case CN_LE_GET: check_access(k, e->u.get.param, e->u.get.idx); return;
  case CN_LE_CONST: return;
  case CN_LE_INDEX:
    CN_ASSERT(e->prec == CN_INDEX_PREC);
    check_index(k, &e->u.index);
    return;
  case CN_LE_OP:
    CN_ASSERT(!(cn_op_table[e->u.op.op].flags & CN_OPF_VEC));
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++) check_expr(k, e->u.op.args[a]);
    return;
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown expression kind");
}

static void check_stmt(const interp_check *k, const cn_ll_stmt *s) {
  CN_ASSERT(s != NULL);
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) check_stmt(k, s->u.seq.items[i]);
    return;
  case CN_LL_COMMENT: return;
  case CN_LL_FOR: {
    int slot = check_slot(k, s->u.loop.sym);
    /* A loop rebinding a bound symbol would clobber the outer value when it ends. */
    CN_ASSERT(!k->bound[slot]);
    /* Bounds read outer loop variables and free symbols only (sym is not bound yet). */
    CN_ASSERT((s->u.loop.n_lower == 0 || s->u.loop.lower) &&
              (s->u.loop.n_upper == 0 || s->u.loop.upper));
    for (int b = 0; b < s->u.loop.n_lower; b++) {
      CN_ASSERT(s->u.loop.lower[b].div >= 1);
      check_index(k, &s->u.loop.lower[b].expr);
    }
    for (int b = 0; b < s->u.loop.n_upper; b++) {
      CN_ASSERT(s->u.loop.upper[b].div >= 1);
      check_index(k, &s->u.loop.upper[b].expr);
    }
    k->bound[slot] = 1;
    check_stmt(k, s->u.loop.body);
    k->bound[slot] = 0;
    return;
  }
  case CN_LL_IF:
    CN_ASSERT(s->u.guard.n_conds == 0 || s->u.guard.conds != NULL);
    for (int c = 0; c < s->u.guard.n_conds; c++) check_index(k, &s->u.guard.conds[c].expr);
    check_stmt(k, s->u.guard.body);
    return;
  case CN_LL_SET:
    check_access(k, s->u.set.param, s->u.set.idx);
    check_expr(k, s->u.set.value);
    return;
  case CN_LL_SET_VEC:
    check_access(k, s->u.vec.param, s->u.vec.idx);
    CN_ASSERT(cn_op_table[s->u.vec.op].flags & CN_OPF_VEC);
    CN_ASSERT(s->u.vec.length == cn_vec_length(k->compiled->params[s->u.vec.param].prec));
    CN_ASSERT(s->u.vec.length <= INTERP_MAX_LANES);
    check_expr(k, s->u.vec.arg);
    return;
  case CN_LL_GEMM: check_stmt(k, s->u.gemm.nest); return;
  case CN_LL_LET: {
    check_access(k, s->u.let.param, s->u.let.idx);
    CN_ASSERT(cn_prec_kind_of(k->compiled->params[s->u.let.param].prec) != CN_PKIND_BITS);
    int slot = check_slot(k, s->u.let.sym);
    CN_ASSERT(!k->bound[slot]);
    k->bound[slot] = 1;
    check_stmt(k, s->u.let.body);
    k->bound[slot] = 0;
    return;
  }
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown statement kind");
}

static cn_status check_proc(cn_ctx *ctx, const interp_compiled *compiled) {
  const cn_ll_proc *proc = compiled->proc;
  interp_check k = {.compiled = compiled};
  cn_status status = cn_ll_symbols_of(ctx, proc, &k.symbols);
  if (status != CN_OK) return status;
  if (!(k.bound = cn_calloc(ctx, (size_t)(k.symbols.n ? k.symbols.n : 1), 1))) return CN_ERR_NOMEM;
  for (int i = 0; i < proc->n_free_syms; i++) k.bound[check_slot(&k, proc->free_syms[i])] = 1;
  check_stmt(&k, proc->body);
  free(k.bound);
  return CN_OK;
}

static void interp_release(void *compiled) {
  interp_compiled *c = compiled;
  if (!c) return;
  free(c->env);
  free(c);
}

static cn_status interp_compile(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled,
                                const char **source) {
  CN_ASSERT(proc->n_params >= 0 && proc->n_free_syms >= 0);
  size_t params_bytes;
  if (!cn_mul_size((size_t)proc->n_params, sizeof(interp_param), &params_bytes) ||
      params_bytes > SIZE_MAX - sizeof(interp_compiled))
    return cn_fail(ctx, CN_ERR_NOMEM, "procedure %s: %d parameters exceed the address space",
                   proc->name, proc->n_params);
  interp_compiled *c = cn_malloc(ctx, sizeof(interp_compiled) + params_bytes);
  if (!c) return CN_ERR_NOMEM;
  c->proc = proc;
  c->n_env = ctx->n_symbols;
  c->env = cn_malloc(ctx, (size_t)c->n_env * sizeof(int64_t)); /* not cleared: see the top */
  if (!c->env) {
    free(c);
    return CN_ERR_NOMEM;
  }
  for (int k = 0; k < proc->n_params; k++) fill_param(&c->params[k], proc->params[k].node);
  cn_status status = check_proc(ctx, c);
  if (status != CN_OK) {
    interp_release(c);
    return status;
  }
  *compiled = c;
  if (source) *source = NULL;
  return CN_OK;
}

/* ---- Run: the walk ---- */

static int64_t index_value(const int64_t *env, const cn_index *idx) {
  switch (idx->kind) {
  case CN_IDX_FIXED: return idx->offset;
  case CN_IDX_ITER: return env[idx->syms[0]];
  case CN_IDX_AFFINE: {
    int64_t v = idx->offset;
    for (int t = 0; t < idx->n_terms; t++) v += idx->coeffs[t] * env[idx->syms[t]];
    return v;
  }
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown index kind");
}

/* The cell (in the padded buffer) a per-axis index list addresses. */
static int64_t cell_of(const interp_machine *m, int param, const cn_index *idx) {
  const interp_param *p = &m->params[param];
  int64_t cell = p->origin;
  for (int d = 0; d < p->rank; d++) {
    int64_t i = index_value(m->env, &idx[d]);
    CN_ASSERT(i >= p->lo[d] && i < p->hi[d]);
    cell += i * p->stride[d];
  }
  return cell;
}

static void *cell_pointer(const interp_machine *m, int param, int64_t cell) {
  return (char *)m->buffers[param] + (size_t)cell * m->params[param].cell_bytes;
}

static cn_value eval_expr(const interp_machine *m, const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: {
    int param = e->u.get.param;
    int64_t cell = cell_of(m, param, e->u.get.idx);
    return cn_value_load(m->params[param].prec, cell_pointer(m, param, cell));
  }
  case CN_LE_CONST: return e->u.constant;
  case CN_LE_INDEX: {
    cn_value v;
    v.i = (int64_t)(uint32_t)index_value(m->env, &e->u.index);
    return v;
  }
  case CN_LE_OP: {
    cn_op op = e->u.op.op;
    bool cond = cn_op_table[op].flags & CN_OPF_COND;
    cn_value args[3] = {{0}};
    for (int a = 0; a < cn_op_table[op].arity; a++) {
      const cn_ll_expr *arg = e->u.op.args[a];
      cn_prec operand = cn_op_operand_prec(op, e->prec, a, arg->prec);
      cn_value v = eval_expr(m, arg);
      if (operand != arg->prec) v = cn_value_convert(arg->prec, operand, v);
      /* The condition of a CN_OPF_COND op reaches cn_eval_op as 1 or 0 of the op's precision. */
      if (cond && a == 0) v = cn_value_of_double(e->prec, cn_value_truth(operand, v) ? 1.0 : 0.0);
      args[a] = v;
    }
    return cn_eval_op(op, e->prec, args);
  }
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown expression kind");
}

/* The value of a GEMM store c + x * y (one floating precision, loops.h) as one fused
 * multiply-add, rounded once to the precision. */
static cn_value eval_fused(const interp_machine *m, const cn_ll_expr *sum) {
  const cn_ll_expr *product = sum->u.op.args[1];
  double c = eval_expr(m, sum->u.op.args[0]).f, x = eval_expr(m, product->u.op.args[0]).f;
  double y = eval_expr(m, product->u.op.args[1]).f;
  cn_value v;
  CN_ASSERT(cn_prec_table[sum->prec].kind == CN_PKIND_FLOAT);
  /* double in double; single and the narrow precisions (computed in float) in float, the store
   * rounding a narrow one */
  v.f = sum->prec == CN_PREC_DOUBLE ? fma(x, y, c) : fmaf((float)x, (float)y, (float)c);
  return v;
}

static void exec_set_vec(const interp_machine *m, const cn_ll_stmt *s) {
  int param = s->u.vec.param;
  const interp_param *p = &m->params[param];
  const cn_ll_expr *arg = s->u.vec.arg;
  cn_value word = eval_expr(m, arg);
  if (arg->prec != CN_PREC_UINT4X32) word = cn_value_convert(arg->prec, CN_PREC_UINT4X32, word);
  cn_value lanes[INTERP_MAX_LANES];
  int length = cn_eval_vec_op(s->u.vec.op, p->prec, word.w, lanes);
  CN_ASSERT(length == s->u.vec.length);
  int64_t cell = cell_of(m, param, s->u.vec.idx);
  CN_ASSERT(cell + length <= p->n_cells);
  for (int j = 0; j < length; j++)
    cn_value_store(p->prec, lanes[j], cell_pointer(m, param, cell + j));
}

/* The first value a loop runs (lower) or the first it does not (upper): the box's edge without
 * bounds, else the largest lower or smallest upper ceil(expr / div). */
static int64_t loop_edge(const int64_t *env, int64_t edge, int n, const cn_ll_bound *bounds,
                         bool lower) {
  for (int k = 0; k < n; k++) {
    int64_t v = cn_ceil_div_i64(index_value(env, &bounds[k].expr), bounds[k].div);
    if (k == 0 || (lower ? v > edge : v < edge)) edge = v;
  }
  return edge;
}

static void exec_stmt(const interp_machine *m, const cn_ll_stmt *s);

/* A sum in lanes over [start, end) (loops.h CN_LL_LANES): every add in the precision of the
 * store's add, as eval_expr computes one. */
static void exec_lanes(const interp_machine *m, const cn_ll_stmt *loop, int64_t start,
                       int64_t end) {
  const cn_ll_stmt *set = loop->u.loop.body;
  const cn_ll_expr *sum = set->u.set.value, *v = sum->u.op.args[1];
  const int param = set->u.set.param;
  const cn_prec prec = sum->prec, operand = cn_op_operand_prec(CN_OP_ADD, prec, 1, v->prec);
  CN_ASSERT(m->params[param].prec == prec && cn_op_operand_prec(CN_OP_ADD, prec, 0, prec) == prec);
  cn_value lane[CN_LL_LANES_COUNT];
  for (int l = 0; l < CN_LL_LANES_COUNT; l++) lane[l] = cn_value_of_double(prec, -0.0);
  for (int64_t i = start; i < end; i++) {
    m->env[loop->u.loop.sym] = i;
    cn_value x = eval_expr(m, v);
    if (operand != v->prec) x = cn_value_convert(v->prec, operand, x);
    const int l = (int)((i - start) % CN_LL_LANES_COUNT);
    lane[l] = cn_eval_op(CN_OP_ADD, prec, (cn_value[3]){lane[l], x});
  }
  for (int w = CN_LL_LANES_COUNT / 2; w > 0; w /= 2)
    for (int l = 0; l < w; l++)
      lane[l] = cn_eval_op(CN_OP_ADD, prec, (cn_value[3]){lane[l], lane[l + w]});
  void *cell = cell_pointer(m, param, cell_of(m, param, set->u.set.idx));
  cn_value c = cn_value_load(prec, cell);
  cn_value_store(prec, cn_eval_op(CN_OP_ADD, prec, (cn_value[3]){c, lane[0]}), cell);
}

static void exec_stmt(const interp_machine *m, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) exec_stmt(m, s->u.seq.items[i]);
    return;
  case CN_LL_COMMENT: return;
  case CN_LL_FOR: {
    int64_t *var = &m->env[s->u.loop.sym];
    int64_t start = loop_edge(m->env, s->u.loop.from, s->u.loop.n_lower, s->u.loop.lower, true);
    int64_t end = loop_edge(m->env, s->u.loop.to, s->u.loop.n_upper, s->u.loop.upper, false);
    /* loops.h: the box contains every value the loop runs. */
    CN_ASSERT(start >= end || (start >= s->u.loop.from && end <= s->u.loop.to));
    if (s->u.loop.marks & CN_LL_LANES) {
      exec_lanes(m, s, start, end);
      return;
    }
    for (int64_t i = start; i < end; i++) {
      *var = i;
      exec_stmt(m, s->u.loop.body);
    }
    return;
  }
  case CN_LL_IF:
    for (int c = 0; c < s->u.guard.n_conds; c++) {
      const cn_ll_cond *cond = &s->u.guard.conds[c];
      int64_t v = index_value(m->env, &cond->expr);
      if (v < cond->lo || v >= cond->hi) return;
    }
    exec_stmt(m, s->u.guard.body);
    return;
  case CN_LL_SET: {
    int param = s->u.set.param;
    cn_prec prec = m->params[param].prec;
    const cn_ll_expr *value = s->u.set.value;
    cn_value v = m->fma ? eval_fused(m, value) : eval_expr(m, value);
    if (value->prec != prec) v = cn_value_convert(value->prec, prec, v);
    cn_value_store(prec, v, cell_pointer(m, param, cell_of(m, param, s->u.set.idx)));
    return;
  }
  case CN_LL_SET_VEC: exec_set_vec(m, s); return;
  case CN_LL_GEMM: {
    interp_machine fused = *m;
    fused.fma = s->u.gemm.plan->fma;
    if (s->u.gemm.plan->c_zero) { /* the clear the plan took: every cell +0 */
      int c = s->u.gemm.plan->c;
      memset(m->buffers[c], 0, (size_t)m->params[c].n_cells * m->params[c].cell_bytes);
    }
    exec_stmt(&fused, s->u.gemm.nest);
    return;
  }
  case CN_LL_LET: {
    int param = s->u.let.param;
    cn_prec prec = m->params[param].prec;
    cn_value v = cn_value_load(prec, cell_pointer(m, param, cell_of(m, param, s->u.let.idx)));
    int64_t value = cn_value_convert(prec, CN_PREC_INT64, v).i;
    if (value < 0 || value >= s->u.let.bound) return; /* skipped: the guard node reports it */
    m->env[s->u.let.sym] = value;
    exec_stmt(m, s->u.let.body);
    return;
  }
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown statement kind");
}

static cn_status interp_run(cn_ctx *ctx, void *compiled, void *const *buffers,
                            const int64_t *syms) {
  (void)ctx; /* a validated procedure cannot fail at run time */
  interp_compiled *c = compiled;
  const cn_ll_proc *proc = c->proc;
  for (int i = 0; i < proc->n_free_syms; i++) c->env[proc->free_syms[i]] = syms[i];
  interp_machine m = {c->params, buffers, c->env, false};
  exec_stmt(&m, proc->body);
  return CN_OK;
}

const cn_backend cn_backend_interp = {
    .name = "interp",
    .compile = interp_compile,
    .run = interp_run,
    .release = interp_release,
};
