/* Embeddings: gather (rows of a table read at integer indices held in a tensor) and one_hot, and
 * the rewrite of a contraction with a one-hot into the same gather (docs/ARCHITECTURE.md
 * "Index-valued projections"; OCANNL rewrites one-hot products the same way).
 *
 * A gather is built as the one-hot contraction it stands for, so that shape inference and
 * projection inference need nothing new: the einsum `c, ..r..; IDS; IDS => ALL | -> ..r..` over
 * the table, the ids and the ids' range guard (ALL: every axis of the ids, in memory order, as
 * batch axes of the result), where the class label c drives the table's first axis and nothing
 * else. At materialization cn_tensor_gather_proj turns that record into an index-valued
 * projection: c's loop becomes a gathered symbol read from the ids' cells, the ids' and the
 * guard's slots go, and the assignment is `v =: table[s, ...]` with prim ID. The gradient is the
 * slot permutation of that record (deriv.c, unchanged): `table.grad[s, ...] =+ v.grad[...]`, a
 * scatter-add.
 *
 * Invariants: the ids are numbers (an integer precision, or whole numbers of a float one: the
 * gathered symbol truncates them, and the guard fails the run on any that is not a row index) and
 * their shape is solved when the gather or one_hot is built (their axes are spelled out in the
 * spec); a gather's args are (table, ids, guard) and only the table is an operand of prim
 * (cn_tensor_n_operands), the others are computed first by the forward code (code.c visits every
 * arg), so the guard runs wherever the gather does. */
#include "tensor/tensor.h"

#include "shape/einsum.h"

#include <stdio.h>
#include <string.h>

int cn_tensor_n_operands(const cn_tensor *t) {
  return t->gather ? 1 : t->n_args;
}

/* Indices are numbers: of an integer precision, or of a float one holding whole numbers (the
 * notation has no integer literals; cross_entropy's labels are read the same way), never words. */
static bool numeric_ids(cn_graph *g, const char *what, const cn_tensor *ids) {
  if (cn_prec_kind_of(ids->prec) != CN_PKIND_BITS) return true;
  cn_fail(g->ctx, CN_ERR_INVALID,
          "%s: the indices \"%s\" (#%d) are of precision %s; indices are integers (e.g. int32) "
          "or whole numbers of a float precision",
          what, ids->label, ids->id, cn_prec_name(ids->prec));
  return false;
}

/* The spec texts of the ids' axes, labeled x0, x1, ... in memory order: `own` their shape as it is
 * (batch | input -> output) and `all` every axis in one row. False with a message when a row of
 * the ids is not solved yet. */
static bool ids_specs(cn_graph *g, const char *what, const cn_tensor *ids, cn_sbuf *own,
                      cn_sbuf *all) {
  int n[CN_N_ROWS];
  int64_t dims[CN_MAX_RANK];
  for (int k = 0; k < CN_N_ROWS; k++)
    if ((n[k] = cn_shape_row_dims(g->shapes, ids->shape, (cn_row_kind)k, dims, CN_MAX_RANK)) < 0) {
      cn_fail(g->ctx, CN_ERR_INVALID,
              "%s: the shape of the indices \"%s\" (#%d) must be known when it is built (it is "
              "%s)",
              what, ids->label, ids->id, cn_tensor_shape(ids));
      return false;
    }
  /* memory order: batch, output, input */
  int first[CN_N_ROWS];
  first[CN_ROW_BATCH] = 0;
  first[CN_ROW_OUTPUT] = n[CN_ROW_BATCH];
  first[CN_ROW_INPUT] = n[CN_ROW_BATCH] + n[CN_ROW_OUTPUT];
  static const cn_row_kind own_order[CN_N_ROWS] = {CN_ROW_BATCH, CN_ROW_INPUT, CN_ROW_OUTPUT};
  static const char *const own_sep[CN_N_ROWS] = {" | ", " -> ", ""};
  for (int r = 0; r < CN_N_ROWS; r++) {
    cn_row_kind k = own_order[r];
    for (int a = 0; a < n[k]; a++) cn_sbuf_printf(own, "%sx%d", a ? ", " : "", first[k] + a);
    cn_sbuf_puts(own, own_sep[r]);
  }
  int total = n[CN_ROW_BATCH] + n[CN_ROW_OUTPUT] + n[CN_ROW_INPUT];
  for (int a = 0; a < total; a++) cn_sbuf_printf(all, "%sx%d", a ? ", " : "", a);
  return !own->failed && !all->failed;
}

/* The einsum of `spec_text` over operands, without the arity check of cn_tensor_einsum (a
 * gather's prim reads only its first operand). */
static cn_tensor *einsum_tensor(cn_graph *g, const char *label, const char *spec_text, cn_prec prec,
                                cn_op prim, int n, cn_tensor *const *operands) {
  cn_shape_args sargs;
  memset(&sargs, 0, sizeof sargs);
  if (!(sargs.spec = cn_einsum_parse(g->ctx, spec_text))) return NULL;
  cn_tensor *t =
      cn_tensor_new(g, label, CN_TK_ACCUM, prec, NULL, CN_SL_EINSUM, &sargs, n, operands);
  if (!t) return NULL;
  t->accum = CN_OP_ADD;
  t->prim = prim;
  return t;
}

/* The ids' guard (cn_node.guard_what, as cross_entropy's labels): 0 where an index is a row of the
 * table's first axis (a whole number in [0, V)), the index itself elsewhere (never 0 then; NaN
 * for NaN), computed in the ids' precision against the axis size read when lowered. */
static cn_tensor *ids_guard(cn_graph *g, cn_tensor *table, cn_tensor *ids) {
  cn_tensor *rows = cn_tensor_embed_dim_prec(g, table, 0, ids->prec);
  cn_tensor *zero = cn_tensor_typed_scalar(g, ids->prec, 0);
  cn_tensor *whole = cn_tensor_apply2(g, CN_OP_EQ, ids, cn_tensor_apply1(g, CN_OP_TRUNC, ids));
  cn_tensor *negative = cn_tensor_apply2(g, CN_OP_LT, ids, zero);
  cn_tensor *valid =
      cn_tensor_apply2(g, CN_OP_MUL, whole,
                       cn_tensor_apply2(g, CN_OP_MUL, cn_tensor_apply1(g, CN_OP_NOT, negative),
                                        cn_tensor_apply2(g, CN_OP_LT, ids, rows)));
  cn_tensor *guard =
      valid ? cn_tensor_apply(g, CN_OP_WHERE, 3,
                              (cn_tensor *[]){valid, cn_tensor_typed_scalar(g, ids->prec, 0), ids})
            : NULL;
  cn_label_check *check = guard ? cn_alloc(g->ctx, sizeof *check) : NULL;
  if (!check) return NULL;
  *check = (cn_label_check){"gather", ids, table, NULL};
  guard->label_check = check;
  return cn_tensor_labeled(guard, "gather_check");
}

cn_tensor *cn_tensor_gather(cn_graph *g, cn_tensor *table, cn_tensor *ids) {
  if (!cn_tensor_operands(g, "gather", 2, (cn_tensor *[]){table, ids}) ||
      !numeric_ids(g, "gather", ids))
    return NULL;
  cn_sbuf own = {0}, all = {0}, spec = {0};
  cn_tensor *t = NULL, *guard = NULL;
  if (ids_specs(g, "gather", ids, &own, &all) && (guard = ids_guard(g, table, ids))) {
    cn_sbuf_printf(&spec, "c, ..r..; %s; %s => %s | -> ..r..", own.data, own.data, all.data);
    const char *text = cn_sbuf_finish(g->ctx, &spec);
    t = text ? einsum_tensor(g, "gather", text, table->prec, CN_OP_ID, 3,
                             (cn_tensor *[]){table, ids, guard})
             : NULL;
  }
  cn_sbuf_free(&own);
  cn_sbuf_free(&all);
  if (!t) return NULL;
  t->gather = true;
  t->diff = cn_tensor_op_diff(t);
  return t;
}

cn_tensor *cn_tensor_one_hot(cn_graph *g, cn_tensor *ids, int64_t n_classes) {
  if (!cn_tensor_operands(g, "one_hot", 1, &ids) || !numeric_ids(g, "one_hot", ids)) return NULL;
  cn_tensor *classes = cn_tensor_range(g, n_classes);
  cn_sbuf own = {0}, all = {0}, spec = {0};
  cn_tensor *t = NULL;
  if (classes && ids_specs(g, "one_hot", ids, &own, &all)) {
    /* the commas make the spec multi-char whatever the ids' rank (x0 is one label) */
    cn_sbuf_printf(&spec, "%s; c, => %s | -> c,", own.data, all.data);
    const char *text = cn_sbuf_finish(g->ctx, &spec);
    t = text ? einsum_tensor(g, "one_hot", text, classes->prec, CN_OP_EQ, 2,
                             (cn_tensor *[]){ids, classes})
             : NULL;
  }
  cn_sbuf_free(&own);
  cn_sbuf_free(&all);
  if (!t) return NULL;
  t->diff = false; /* integer indices and constant classes */
  t->one_hot_ids = ids;
  return t;
}

/* The rewrite of a `+`-accumulated product of a one-hot and a table, when the one-hot's class
 * loop drives one axis of the table and nothing else (a contraction over the classes): the
 * product becomes a gather of the table, so the one-hot is never computed. A class outside the
 * table's rows is a row of zeros in the one-hot, and a skipped point of the gather into a result
 * cleared to 0: the same value (the values differ only where an unselected row holds an infinity
 * or a NaN, which the product turns into a NaN and the gather never reads). */
static cn_status rewrite_one_hot(cn_tensor *t) {
  if (t->kind != CN_TK_ACCUM || t->accum != CN_OP_ADD || t->prim != CN_OP_MUL || t->n_args != 2 ||
      t->has_slice)
    return CN_OK;
  for (int h = 0; h < 2; h++) {
    cn_tensor *hot = t->args[h], *table = t->args[1 - h];
    if (!hot->one_hot_ids || table->one_hot_ids) continue;
    const cn_proj_slot *hs = &t->proj->slot[1 + h], *ts = &t->proj->slot[2 - h];
    int class_axis = hs->rank - 1; /* memory order: the ids' axes, then the class axis */
    for (int a = 0; a < ts->rank; a++) {
      if (class_axis < 0 || !cn_index_equal(&ts->map[a], &hs->map[class_axis])) continue;
      cn_node *ids = hot->one_hot_ids->value;
      if (cn_proj_gather_refusal(t->proj, 2 - h, a, 1 + h, class_axis, ids)) continue;
      cn_proj *p = cn_proj_gather(t->g->ctx, t->proj, 2 - h, a, 1 + h, class_axis, ids);
      if (!p) return t->g->ctx->status;
      t->proj = p;
      t->prim = CN_OP_ID;
      t->args[0] = table;
      t->args[1] = hot->one_hot_ids;
      t->gather = true;
      return CN_OK;
    }
  }
  return CN_OK;
}

cn_status cn_tensor_gather_proj(cn_tensor *t) {
  if (!t->gather) return rewrite_one_hot(t);
  cn_ctx *ctx = t->g->ctx;
  /* slots: the result, the table, the ids, the guard; the ids' slot becomes the gathered symbol,
   * the guard's goes (it is computed for its check, not read here) */
  cn_proj *p = cn_proj_gather(ctx, t->proj, 1, 0, 2, -1, t->args[1]->value);
  if (p) p = cn_proj_permute(ctx, p, 0, 1, (int[]){1});
  if (!p) return ctx->status;
  t->proj = p;
  return CN_OK;
}
