/* Reductions in generated C that do not run as written: max reductions without order, and sums
 * in lanes.
 *
 * Max reductions without order. An innermost loop whose whole body is the store
 * `c := max(c, v)` of a single or double cell c its variable does not index (softmax's max,
 * max pooling, `=@^` einsums) runs in two parts: a loop that keeps the maximum of the values'
 * order keys and an OR of their NaN bits (builtins.h cn_max_key_*, cn_nan_bit_*: integer
 * reductions, which the compiler vectorizes; cn_max itself, a function with branches, is not),
 * then the cell from the key, or, when the cell or a value was a NaN, the loop as written.
 *
 * Invariant: the cell gets the bits the loop as written gives. Without NaN, cn_max is the maximum
 * of a total order (-0 < +0), which the keys' unsigned order is, so the order of the updates does
 * not matter; with a NaN the result is the first NaN in loop order, which only the loop as written
 * finds. The interpreter runs the loop as written; tests/test_vexp.c compares.
 *
 * Sums in lanes (loops.h CN_LL_LANES, the option "reduce" = "lanes"): a block of the lanes, the
 * loop's iterations by rows of CN_LL_LANES_COUNT, one lane per column (a loop of independent
 * lanes, which the compiler vectorizes), the fold of halves and the cell's add. Every add is the
 * dialect's add in the cell's precision, as loops.h defines it: the interpreter, generated C and
 * the kernel dialects (in one work item) give the same bits; tests/e2e_cases.h compares. */
#include "backend/cgen.h"

/* The text of a builder ("" when it failed: the caller marks the output failed). */
static const char *text(const cn_sbuf *sb) {
  return !sb->failed && sb->data ? sb->data : "";
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
  const cn_ll_stmt *set =
      g->max_as_written ? NULL : cn_ll_reduction_store(g->proc, loop, CN_OP_MAX);
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

/* One row of lanes: `cn_lane[cn_l] = cn_lane[cn_l] + v` for cn_l from 0 while `more` holds, the
 * loop's variable cn_base + cn_l. */
static void lanes_row(const cgen *g, int depth, const cn_ll_stmt *loop, const char *more,
                      const char *v) {
  cn_sbuf *sb = g->out, add = {0};
  const cn_ll_stmt *set = loop->u.loop.body;
  const cn_prec prec = g->proc->params[set->u.set.param].node->prec;
  g->dialect->op(&add, CN_OP_ADD, prec, (const char *const[3]){"cn_lane[cn_l]", v, NULL});
  if (add.failed) sb->failed = true;
  if (g->dialect->vector_pragma) {
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, g->dialect->vector_pragma);
  }
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "for (int cn_l = 0; %s; ++cn_l) {\n", more);
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "const %s %s = cn_base + cn_l;\n", g->dialect->index_type,
                 cn_cgen_sym_name(g, loop->u.loop.sym));
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "cn_lane[cn_l] = %s;\n", text(&add));
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
  cn_sbuf_free(&add);
}

bool cn_cgen_sum_lanes(const cgen *g, int depth, const cn_ll_stmt *loop) {
  if (!(loop->u.loop.marks & CN_LL_LANES)) return false;
  const cn_ll_stmt *set = loop->u.loop.body;
  CN_ASSERT(cn_ll_lanes_store(g->proc, loop) == set);
  cn_sbuf *sb = g->out, cell = {0}, v = {0}, zero = {0}, fold = {0}, total = {0}, more = {0};
  const int param = set->u.set.param;
  const cn_prec prec = g->proc->params[param].node->prec;
  const char *it = g->dialect->index_type;
  cn_cgen_cell(g, &cell, param, set->u.set.idx);
  cn_cgen_value(g, &v, set->u.set.value->u.op.args[1], prec);
  g->dialect->constant(&zero, prec, cn_value_of_double(prec, -0.0));
  g->dialect->op(&fold, CN_OP_ADD, prec,
                 (const char *const[3]){"cn_lane[cn_l]", "cn_lane[cn_l + cn_w]", NULL});
  g->dialect->op(&total, CN_OP_ADD, prec, (const char *const[3]){text(&cell), "cn_lane[0]", NULL});
  cn_sbuf_printf(&more, "cn_l < %lld - cn_base", (long long)loop->u.loop.to);
  if (cell.failed || v.failed || zero.failed || fold.failed || total.failed || more.failed)
    sb->failed = true;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "{ /* a sum in %d lanes (option reduce = lanes) */\n", CN_LL_LANES_COUNT);
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "%s cn_lane[%d];\n", g->dialect->precs[prec].compute_c, CN_LL_LANES_COUNT);
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "for (int cn_l = 0; cn_l < %d; ++cn_l) cn_lane[cn_l] = %s;\n",
                 CN_LL_LANES_COUNT, text(&zero));
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "%s cn_base = %lld;\n", it, (long long)loop->u.loop.from);
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "for (; cn_base + %d <= %lld; cn_base += %d) {\n", CN_LL_LANES_COUNT,
                 (long long)loop->u.loop.to, CN_LL_LANES_COUNT);
  if (g->par) g->par->scope[g->par->n_scope++] = loop->u.loop.sym;
  char full[32];
  snprintf(full, sizeof full, "cn_l < %d", CN_LL_LANES_COUNT);
  lanes_row(g, depth + 2, loop, full, text(&v));
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "}\n");
  lanes_row(g, depth + 1, loop, text(&more), text(&v)); /* the last, partial row */
  if (g->par) g->par->n_scope--;
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "for (int cn_w = %d; cn_w > 0; cn_w /= 2)\n", CN_LL_LANES_COUNT / 2);
  cn_sbuf_indent(sb, depth + 2);
  cn_sbuf_printf(sb, "for (int cn_l = 0; cn_l < cn_w; ++cn_l) cn_lane[cn_l] = %s;\n", text(&fold));
  cn_sbuf_indent(sb, depth + 1);
  g->dialect->store(sb, prec, text(&cell), text(&total));
  cn_sbuf_puts(sb, ";\n");
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
  cn_sbuf *parts[] = {&cell, &v, &zero, &fold, &total, &more};
  for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) cn_sbuf_free(parts[k]);
  return true;
}

/* The loop of a work item's lane in a work-group's reduction: `loop`'s variable from its first
 * value plus cn_lane_id, by CN_LL_LANES_COUNT (the braces opened; the caller closes them). */
static void group_lane_loop(const cgen *g, int depth, const cn_ll_stmt *loop) {
  const char *var = cn_cgen_sym_name(g, loop->u.loop.sym);
  cn_sbuf_indent(g->out, depth);
  cn_sbuf_printf(g->out, "for (%s %s = %lld + cn_lane_id; %s < %lld; %s += %d) {\n",
                 g->dialect->index_type, var, (long long)loop->u.loop.from, var,
                 (long long)loop->u.loop.to, var, CN_LL_LANES_COUNT);
}

/* The fold of a work-group's lanes by halves: after a barrier, for cn_w = CN_LL_LANES_COUNT / 2
 * down to 1, the work items below cn_w run `lines` (each one statement) and all meet at a
 * barrier. */
static void group_fold(const cgen *g, int depth, const char *const *lines, int n_lines) {
  cn_sbuf *sb = g->out;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "%s\n", g->dialect->barrier);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "for (int cn_w = %d; cn_w > 0; cn_w /= 2) {\n", CN_LL_LANES_COUNT / 2);
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "if (cn_lane_id < cn_w) {\n");
  for (int k = 0; k < n_lines; k++) {
    cn_sbuf_indent(sb, depth + 2);
    cn_sbuf_printf(sb, "%s\n", lines[k]);
  }
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "}\n");
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "%s\n", g->dialect->barrier);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
}

void cn_cgen_lanes_group(const cgen *g, int depth, const cn_ll_stmt *loop) {
  const cn_ll_stmt *set = loop->u.loop.body;
  CN_ASSERT(cn_ll_lanes_store(g->proc, loop) == set && g->dialect->local_qualifier &&
            g->dialect->barrier);
  const cn_cgen_dialect *d = g->dialect;
  cn_sbuf *sb = g->out, cell = {0}, v = {0}, zero = {0}, add = {0}, fold = {0}, total = {0};
  cn_sbuf step = {0};
  const int param = set->u.set.param;
  const cn_prec prec = g->proc->params[param].node->prec;
  const char *type = d->precs[prec].compute_c;
  cn_cgen_cell(g, &cell, param, set->u.set.idx);
  cn_cgen_value(g, &v, set->u.set.value->u.op.args[1], prec);
  d->constant(&zero, prec, cn_value_of_double(prec, -0.0));
  d->op(&add, CN_OP_ADD, prec, (const char *const[3]){"cn_lane", text(&v), NULL});
  d->op(&fold, CN_OP_ADD, prec,
        (const char *const[3]){"cn_lanes[cn_lane_id]", "cn_lanes[cn_lane_id + cn_w]", NULL});
  d->op(&total, CN_OP_ADD, prec, (const char *const[3]){text(&cell), "cn_lanes[0]", NULL});
  if (cell.failed || v.failed || zero.failed || add.failed || fold.failed || total.failed)
    sb->failed = true;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "%s%s cn_lanes[%d]; /* a sum in lanes (option reduce = lanes) */\n",
                 d->local_qualifier, type, CN_LL_LANES_COUNT);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "%s cn_lane = %s;\n", type, text(&zero));
  group_lane_loop(g, depth, loop);
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "cn_lane = %s;\n", text(&add));
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "cn_lanes[cn_lane_id] = cn_lane;\n");
  cn_sbuf_printf(&step, "cn_lanes[cn_lane_id] = %s;", text(&fold));
  if (step.failed) sb->failed = true;
  group_fold(g, depth, (const char *const[]){text(&step)}, 1);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "if (cn_lane_id == 0) ");
  d->store(sb, prec, text(&cell), text(&total));
  cn_sbuf_puts(sb, ";\n");
  cn_sbuf *parts[] = {&cell, &v, &zero, &add, &fold, &total, &step};
  for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) cn_sbuf_free(parts[k]);
}

void cn_cgen_max_group(const cgen *g, int depth, const cn_ll_stmt *loop) {
  const cn_ll_stmt *set = cn_ll_reduction_store(g->proc, loop, CN_OP_MAX);
  CN_ASSERT(set && g->dialect->local_qualifier && g->dialect->barrier);
  const cn_cgen_dialect *d = g->dialect;
  cn_sbuf *sb = g->out, cell = {0};
  const bool single = g->proc->params[set->u.set.param].node->prec == CN_PREC_SINGLE;
  const char *sx = suffix(g, set), *key = single ? "uint32_t" : "uint64_t";
  cn_cgen_cell(g, &cell, set->u.set.param, set->u.set.idx);
  if (cell.failed) sb->failed = true;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "%s%s cn_keys[%d], cn_nans[%d]; /* max without order, in lanes */\n",
                 d->local_qualifier, key, CN_LL_LANES_COUNT, CN_LL_LANES_COUNT);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "%s cn_key = cn_max_key_%s(%s), cn_nan = cn_nan_bit_%s(%s);\n", key, sx,
                 text(&cell), sx, text(&cell));
  group_lane_loop(g, depth, loop);
  cn_cgen_max_update(g, depth + 1, set);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "cn_keys[cn_lane_id] = cn_key;\n");
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "cn_nans[cn_lane_id] = cn_nan;\n");
  char other[64];
  snprintf(other, sizeof other, "const %s cn_other = cn_keys[cn_lane_id + cn_w];", key);
  group_fold(g, depth,
             (const char *const[]){other,
                                   "if (cn_other > cn_keys[cn_lane_id]) cn_keys[cn_lane_id] = "
                                   "cn_other;",
                                   "cn_nans[cn_lane_id] |= cn_nans[cn_lane_id + cn_w];"},
             3);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "if (cn_lane_id == 0 && cn_nans[0]) { /* a NaN: the first, in loop order */\n");
  cgen as_written = *g;
  as_written.max_as_written = true;
  cn_cgen_stmt(&as_written, depth + 1, loop);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "} else if (cn_lane_id == 0) {\n");
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "%s = cn_of_max_key_%s(cn_keys[0]);\n", text(&cell), sx);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
  cn_sbuf_free(&cell);
}
