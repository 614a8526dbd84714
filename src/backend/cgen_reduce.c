/* Max reductions without order in generated C. An innermost loop whose whole body is the store
 * `c := max(c, v)` of a single or double cell c its variable does not index (softmax's max,
 * max pooling, `=@^` einsums) runs in two parts: a loop that keeps the maximum of the values'
 * order keys and an OR of their NaN bits (builtins.h cn_max_key_*, cn_nan_bit_*: integer
 * reductions, which the compiler vectorizes; cn_max itself, a function with branches, is not),
 * then the cell from the key, or, when the cell or a value was a NaN, the loop as written.
 *
 * Invariant: the cell gets the bits the loop as written gives. Without NaN, cn_max is the maximum
 * of a total order (-0 < +0), which the keys' unsigned order is, so the order of the updates does
 * not matter; with a NaN the result is the first NaN in loop order, which only the loop as written
 * finds. The interpreter runs the loop as written; tests/test_vexp.c compares. */
#include "backend/cgen.h"

/* The text of a builder ("" when it failed: the caller marks the output failed). */
static const char *text(const cn_sbuf *sb) {
  return !sb->failed && sb->data ? sb->data : "";
}

/* Whether `e` reads param. */
static bool reads_param(const cn_ll_expr *e, int param) {
  switch (e->kind) {
  case CN_LE_GET: return e->u.get.param == param;
  case CN_LE_OP:
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
      if (reads_param(e->u.op.args[a], param)) return true;
    return false;
  case CN_LE_CONST:
  case CN_LE_INDEX: return false;
  }
  return true;
}

/* The store `c := max(c, v)` when it is the whole body of `loop` and a reduction it may run
 * without order, else NULL. */
static const cn_ll_stmt *max_store(const cgen *g, const cn_ll_stmt *loop) {
  const cn_ll_stmt *set = loop->u.loop.body;
  if (set->kind != CN_LL_SET) return NULL;
  int param = set->u.set.param;
  const cn_node *node = g->proc->params[param].node;
  const cn_ll_expr *v = set->u.set.value;
  if ((node->prec != CN_PREC_SINGLE && node->prec != CN_PREC_DOUBLE) || v->kind != CN_LE_OP ||
      v->u.op.op != CN_OP_MAX || v->prec != node->prec)
    return NULL;
  const cn_ll_expr *acc = v->u.op.args[0];
  if (acc->kind != CN_LE_GET || acc->u.get.param != param || reads_param(v->u.op.args[1], param))
    return NULL;
  for (int d = 0; d < node->rank; d++)
    if (!cn_index_equal(&acc->u.get.idx[d], &set->u.set.idx[d]) ||
        cn_index_mentions(&set->u.set.idx[d], loop->u.loop.sym))
      return NULL;
  return set;
}

/* "f32" or "f64", the suffix of the builtins for the store's precision. */
static const char *suffix(const cgen *g, const cn_ll_stmt *set) {
  return g->proc->params[set->u.set.param].node->prec == CN_PREC_SINGLE ? "f32" : "f64";
}

static void max_open(const cgen *g, int depth, const cn_ll_stmt *set) {
  cn_sbuf *sb = g->out, cell = {0};
  bool single = g->proc->params[set->u.set.param].node->prec == CN_PREC_SINGLE;
  const char *sx = suffix(g, set);
  cn_cgen_cell(g, &cell, set->u.set.param, set->u.set.idx);
  if (cell.failed) sb->failed = true;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "{ /* max without order: the keys' maximum, or the loop when a NaN occurs */\n");
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "%s cn_key = cn_max_key_%s(%s), cn_nan = cn_nan_bit_%s(%s);\n",
                 single ? "uint32_t" : "uint64_t", sx, text(&cell), sx, text(&cell));
  cn_sbuf_free(&cell);
}

void cn_cgen_max_update(const cgen *g, int depth, const cn_ll_stmt *set) {
  cn_sbuf *sb = g->out, value = {0};
  cn_prec prec = g->proc->params[set->u.set.param].node->prec;
  const char *sx = suffix(g, set);
  cn_cgen_value(g, &value, set->u.set.value->u.op.args[1], prec);
  if (value.failed) sb->failed = true;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "%s cn_v = %s;\n", prec == CN_PREC_SINGLE ? "float" : "double", text(&value));
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "cn_key = cn_key > cn_max_key_%s(cn_v) ? cn_key : cn_max_key_%s(cn_v);\n", sx,
                 sx);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "cn_nan |= cn_nan_bit_%s(cn_v);\n", sx);
  cn_sbuf_free(&value);
}

static void max_fallback(const cgen *g, int depth) {
  cn_sbuf_indent(g->out, depth + 1);
  cn_sbuf_puts(g->out, "if (cn_nan) {\n");
}

static void max_close(const cgen *g, int depth, const cn_ll_stmt *set) {
  cn_sbuf *sb = g->out, cell = {0};
  cn_cgen_cell(g, &cell, set->u.set.param, set->u.set.idx);
  if (cell.failed) sb->failed = true;
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "} else {\n");
  cn_sbuf_indent(sb, depth + 2);
  cn_sbuf_printf(sb, "%s = cn_of_max_key_%s(cn_key);\n", text(&cell), suffix(g, set));
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "}\n");
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
  cn_sbuf_free(&cell);
}

bool cn_cgen_max_reduction(const cgen *g, int depth, const cn_ll_stmt *loop) {
  const cn_ll_stmt *set = g->max_as_written ? NULL : max_store(g, loop);
  if (!set) return false;
  cgen keyed = *g, as_written = *g;
  keyed.max_keyed = set;
  keyed.max_as_written = as_written.max_as_written = true;
  max_open(g, depth, set);
  cn_cgen_stmt(&keyed, depth + 1, loop);
  max_fallback(g, depth);
  cn_cgen_stmt(&as_written, depth + 2, loop);
  max_close(g, depth, set);
  return true;
}
