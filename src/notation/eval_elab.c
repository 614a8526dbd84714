/* The evaluator's statement floor (eval_stmt.h: it may include every floor's header), its
 * first file: what a statement works on. Its tensor, evaluated once (the statement keeps it for
 * its later executions: a value chosen by reading an enclosing loop's index is refused) and
 * computed at each execution (its parameters initialized first, once; a tensor without forward
 * code runs nothing beyond that); host arguments, evaluated again at each execution, a static
 * index an enclosing loop binds reading as its value; a one-cell tensor argument (printf's, plot's)
 * computed as print computes it. eval_plot.c and eval_stmt.c call these; they call neither.
 *
 * Invariants: outside loops a statement's routine runs once and is freed; in a loop body its
 * init runs once on its own and its main routine is kept in the statement's state. */
#include "notation/eval_stmt.h"

/* Runs a statement's parameter init code and its main code. Outside loops as one routine, freed
 * after the run; in a loop body the init code (if any) runs on its own, once, and main is
 * compiled into st->routine, which later executions run again. */
bool nt_run_statement(nt_interp *I, nt_item_state *st, cn_asgn *init, cn_asgn *main, cn_nt_pos at) {
  if (!init || !main) return nt_fail_here(I, at), false;
  if (I->n_bound == 0)
    return nt_run_asgn(I, cn_asgn_seq(I->ctx, 2, (cn_asgn *[]){init, main}), NULL, at);
  if (!nt_asgn_empty(init) && !nt_run_asgn(I, init, NULL, at)) return false;
  return nt_run_asgn(I, main, &st->routine, at);
}

/* The tensor of v (x's value) becomes the statement's, with the graph materialized. */
bool nt_set_statement_tensor(nt_interp *I, nt_value *v, const cn_nt_expr *x, nt_item_state *st) {
  st->grad = v && v->kind == NT_V_TENSOR && v->grad;
  st->tensor = v && v->kind == NT_V_TENSOR ? v->t : v ? nt_tensor_of(I, v, x->pos) : NULL;
  if (st->tensor) cn_tensor_set_named(st->tensor); /* printed, or a loss the host reports */
  return st->tensor != NULL && nt_materialize(I, x->pos);
}

/* x evaluated for a statement that keeps what it builds (tensors, options, its routine) for its
 * later executions: a value chosen by reading an enclosing loop's index (an if expression testing
 * it) would keep the index's value now, an error. */
nt_value *nt_elab_eval(nt_interp *I, nt_env *scope, const cn_nt_expr *x) {
  I->index_read = false;
  nt_value *v = nt_eval(I, scope, &I->top, x);
  if (v && I->index_read)
    return nt_fail(I, x->pos, "%s",
                   "this value would keep the value the loop's index has now (the statement "
                   "builds it once): read the index as a tensor with !@");
  return v;
}

/* The tensor a statement works on (built once per statement state), with the graph
 * materialized. */
bool nt_statement_tensor(nt_interp *I, nt_env *scope, const cn_nt_expr *x, nt_item_state *st) {
  return st->tensor || nt_set_statement_tensor(I, nt_elab_eval(I, scope, x), x, st);
}

/* Runs the forward code of the statement's tensor (its parameters initialized first, once);
 * a gradient is read as it is. A tensor without forward code (a literal, a parameter, a data
 * set's tensor, one an earlier statement computed) compiles and runs nothing beyond its
 * parameters' init, here and at every later execution; the data sets are still written. */
bool nt_compute_tensor(nt_interp *I, nt_item_state *st, cn_nt_pos at) {
  if (st->grad) return true;
  if (st->no_code) return nt_begin_datasets(I, at);
  if (st->routine) return nt_run_asgn(I, NULL, &st->routine, at);
  nt_consume(I, st->tensor);
  cn_asgn *init = cn_graph_init_params(I->g, st->tensor);
  cn_asgn *main = init ? cn_graph_forward_embedded(I->g, st->tensor) : NULL;
  if (!main || !nt_asgn_empty(main)) return nt_run_statement(I, st, init, main, at);
  st->no_code = true;
  return nt_asgn_empty(init) ? nt_begin_datasets(I, at) : nt_run_asgn(I, init, NULL, at);
}

nt_value *nt_host_eval(nt_interp *I, nt_env *scope, const cn_nt_expr *x) {
  bool was = I->host_eval;
  I->host_eval = true;
  I->index_read = false;
  nt_value *v = nt_eval(I, scope, &I->top, x);
  if (v) v = nt_host_index(I, v, x->pos);
  I->host_eval = was;
  if (v && I->index_read && (v->kind == NT_V_TENSOR || v->kind == NT_V_LIST))
    return nt_fail(I, x->pos, "%s",
                   "this tensor would keep the value the loop's index has now: read the index "
                   "as a tensor with !@");
  return v;
}

nt_value *nt_host_of(nt_interp *I, nt_env *scope, const cn_nt_expr *x, nt_vkind kind,
                     const char *what) {
  nt_value *v = nt_host_eval(I, scope, x);
  if (v && v->kind != kind) return nt_fail(I, x->pos, "%s, found %s", what, nt_kind_name(v->kind));
  return v;
}

nt_value *nt_cell_value(nt_interp *I, nt_env *scope, const cn_nt_expr *x, nt_item_state **slot,
                        bool first, const char *what) {
  nt_item_state *a = *slot;
  if (!a) {
    nt_value *v = nt_host_eval(I, scope, x);
    bool tensor = v && (v->kind == NT_V_TENSOR || (v->kind == NT_V_LIST && v->literal));
    if (!v || !tensor) return v;
    if (!first) /* kinds do not change between executions */
      return nt_fail(I, x->pos, "%s", "this argument became a tensor");
    if (!(a = *slot = cn_alloc(I->ctx, sizeof *a)) || !nt_set_statement_tensor(I, v, x, a))
      return NULL;
  }
  if (!nt_compute_tensor(I, a, x->pos)) return NULL;
  cn_node *node = a->grad ? cn_tensor_grad(a->tensor) : cn_tensor_value(a->tensor);
  double value;
  if (!node) return nt_fail_here(I, x->pos);
  if (cn_node_numel(node) != 1)
    return nt_fail(I, x->pos, "%s one value: \"%s\" (#%d) has %lld cells", what, a->tensor->label,
                   a->tensor->id, (long long)cn_node_numel(node));
  if (cn_node_get_values(node, false, &value, 1) != CN_OK) return nt_fail_here(I, x->pos);
  return nt_num(I, value, false);
}

cn_node *nt_computed_node(nt_interp *I, nt_env *scope, const cn_nt_expr *x, nt_item_state *st) {
  if (!nt_statement_tensor(I, scope, x, st) || !nt_compute_tensor(I, st, x->pos)) return NULL;
  cn_node *node = st->grad ? cn_tensor_grad(st->tensor) : cn_tensor_value(st->tensor);
  if (!node) nt_fail_here(I, x->pos);
  return node;
}
