/* Standalone assignments (contraction-is-emergent "producer regime"): an update names tensors'
 * values or gradients by reference, contributes its own shape constraint through its logic ("."
 * pointwise, "@" compose, "T" transpose, an einsum spec), gets its projections inferred with the
 * tensors' at materialization, and lowers to one Accum_op. Buffers are the nodes such updates
 * introduce (a %cd inline declaration, an optimizer's state). */
#include "tensor/tensor.h"

#include "shape/einsum.h"

#include <stdio.h>
#include <string.h>

cn_tensor *cn_tensor_buffer(cn_graph *g, const char *label, const cn_dims *dims) {
  cn_shape_row_spec rows[CN_N_ROWS];
  return cn_tensor_new(g, label, CN_TK_BUFFER, g->prec, cn_dims_rows(dims, rows), CN_SL_TERMINAL,
                       NULL, 0, NULL);
}

cn_tensor *cn_tensor_grad_of(cn_graph *g, cn_tensor *t) {
  if (!t || t->g != g || !t->diff) {
    cn_fail(g->ctx, CN_ERR_INVALID, "gradient of %s%s%s: %s", t ? "\"" : "", t ? t->label : "NULL",
            t ? "\"" : "", t && t->g != g ? "a tensor of another graph" : "not differentiable");
    return NULL;
  }
  cn_shape_args args;
  memset(&args, 0, sizeof args);
  if (!(args.spec = cn_einsum_parse(g->ctx, "...|...->... => ...|...->..."))) return NULL;
  char label[256];
  snprintf(label, sizeof label, "%s.grad", t->label);
  cn_tensor *v = cn_tensor_new(g, label, CN_TK_VIEW, t->prec, NULL, CN_SL_EINSUM, &args, 1, &t);
  if (v) v->n_args = 0; /* read for its node only: args[0] keeps the tensor */
  return v;
}

cn_node *cn_tref_node(cn_tref ref) {
  if (!ref.grad) return ref.tensor->value;
  if (!ref.tensor->grad)
    cn_fail(ref.tensor->g->ctx, CN_ERR_INVALID, "\"%s\" (#%d) has no gradient", ref.tensor->label,
            ref.tensor->id);
  return ref.tensor->grad;
}

static bool check_ref(cn_graph *g, cn_tref ref, const char *what) {
  if (!ref.tensor || ref.tensor->g != g) {
    cn_fail(g->ctx, CN_ERR_INVALID, "update: the %s is %s", what,
            ref.tensor ? "a tensor of another graph" : "NULL");
    return false;
  }
  if (ref.grad && !ref.tensor->diff) {
    cn_fail(g->ctx, CN_ERR_INVALID,
            "update: the %s \"%s\".grad does not exist (not differentiable)", what,
            ref.tensor->label);
    return false;
  }
  return true;
}

/* The checks of an update's operands, before its logic is read (the text form's order too). */
static bool update_ok(cn_graph *g, cn_tref lhs, cn_op prim, int n_args, const cn_tref *args) {
  if (n_args < 1 || n_args > 3 || n_args != cn_op_arity(prim)) {
    cn_fail(g->ctx, CN_ERR_INVALID, "update: %s takes %d operand(s), got %d", cn_op_name(prim),
            cn_op_arity(prim), n_args);
    return false;
  }
  if (!check_ref(g, lhs, "target")) return false;
  for (int i = 0; i < n_args; i++)
    if (!check_ref(g, args[i], "operand")) return false;
  return true;
}

cn_update *cn_graph_update(cn_graph *g, cn_tref lhs, bool init, cn_op accum, cn_op prim, int n_args,
                           const cn_tref *args, const char *logic) {
  cn_shape_logic parsed;
  if (!update_ok(g, lhs, prim, n_args, args) ||
      (logic && cn_shape_logic_parse(g->ctx, logic, &parsed) != CN_OK))
    return NULL;
  return cn_graph_update_logic(g, lhs, init, accum, prim, n_args, args, logic ? &parsed : NULL);
}

cn_update *cn_graph_update_logic(cn_graph *g, cn_tref lhs, bool init, cn_op accum, cn_op prim,
                                 int n_args, const cn_tref *args, const cn_shape_logic *logic) {
  cn_ctx *ctx = g->ctx;
  if (!update_ok(g, lhs, prim, n_args, args)) return NULL;
  CN_ASSERT(!logic || logic->kind == CN_SL_POINTWISE || logic->kind == CN_SL_COMPOSE ||
            logic->kind == CN_SL_TRANSPOSE || logic->kind == CN_SL_EINSUM);
  cn_shape_args sargs;
  memset(&sargs, 0, sizeof sargs);
  /* without a logic, the primitive's default projection (the op table; syntax-extensions-cd-op):
   * compose for fma (compose-accumulate), pointwise otherwise (mul and div, which have none, too)
   * */
  cn_shape_kind kind = logic                                             ? logic->kind
                       : cn_op_table[prim].logic == CN_LOGIC_COMPOSE_ACC ? CN_SL_COMPOSE
                                                                         : CN_SL_POINTWISE;
  if (kind == CN_SL_EINSUM) {
    sargs.spec = logic->spec;
    sargs.unmarked = cn_graph_unmarked_conv(g);
  }
  cn_update *u = cn_alloc(ctx, sizeof *u);
  if (!u || !cn_arena_grow(ctx, (void **)&g->updates, &g->cap_updates, g->n_updates + 1,
                           sizeof(cn_update *)))
    return NULL;
  cn_shape *rhs[3];
  for (int i = 0; i < n_args; i++) {
    u->args[i] = args[i];
    rhs[i] = args[i].tensor->shape;
  }
  u->lhs = lhs;
  u->init = init;
  u->accum = accum;
  u->prim = prim;
  u->n_args = n_args;
  if (!(u->sop = cn_shape_add_op(g->shapes, kind, &sargs, lhs.tensor->shape, rhs, n_args)))
    return NULL;
  g->updates[g->n_updates++] = u;
  return u;
}

cn_asgn *cn_graph_update_code(cn_graph *g, cn_update *u) {
  if (!u) {
    cn_fail(g->ctx, CN_ERR_INVALID, "update code of a NULL update");
    return NULL;
  }
  if (cn_graph_materialize(g) != CN_OK) return NULL;
  cn_buffer buf[3];
  for (int i = 0; i < u->n_args; i++) buf[i] = (cn_buffer){cn_tref_node(u->args[i]), false};
  cn_node *lhs = cn_tref_node(u->lhs);
  if (!lhs) return NULL;
  return cn_asgn_accum(g->ctx, u->init, u->accum, lhs, u->prim, buf, u->proj);
}
