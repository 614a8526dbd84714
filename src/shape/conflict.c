/* Conflict messages of the shape solver (above term.c, below unify.c): where a constraint comes
 * from (its operation, the tensors and rows of its two sides, the einsum spec's axis, row
 * variable or row and the tensor that already fixed its size) and what failed. A message site
 * (cn_sv_site) carries the location; this file only reads the environment and sets the status.
 *
 * Invariants: an axis of a tensor is named by its label when it has one, else by its position
 * from the left (0-based) or, while the row still has a row variable, from the right ("last
 * axis", "2nd axis from the right"), as the user counts; CN_SV_NO_AXIS names no axis (rank
 * conflicts); on side b of an einsum row equality the spec stands in for a tensor. */
#include "shape/solver.h"

#include <stdio.h>
#include <string.h>

static const cn_shape *side_tensor(const cn_shape_op *op, int slot) {
  if (!op || slot < 0) return NULL;
  return slot == 0 ? op->lhs : slot <= op->n_rhs ? op->rhs[slot - 1] : NULL;
}

static const cn_es_row *es_row(const cn_es_shape *sh, cn_row_kind kind) {
  return kind == CN_ROW_BATCH ? &sh->batch : kind == CN_ROW_INPUT ? &sh->input : &sh->output;
}

static const cn_es_shape *es_shape(const cn_einsum *spec, int slot) {
  return slot == 0 ? &spec->lhs : &spec->rhs[slot - 1];
}

/* The spec row on side b of an einsum row equality (the logic puts the tensor on side a), or
 * NULL for any other constraint. */
const cn_es_row *cn_sv_spec_row_of(const cn_shape_op *op, const cn_shape_constraint *c) {
  if (!op || op->kind != CN_SL_EINSUM || !op->args.spec || !c || c->b.slot >= 0 || c->a.slot < 0 ||
      c->a.slot > op->args.spec->n_rhs)
    return NULL;
  return es_row(es_shape(op->args.spec, c->a.slot), c->b.row);
}

/* Where a message axis of the resolved spec row (len axes when closed, else -1) falls in the
 * written row: a leading or trailing axis, or the row variable. */
int cn_sv_spec_pos(const cn_es_row *r, int len, int axis) {
  if (axis == CN_SV_NO_AXIS) return CN_SV_SPEC_WHOLE;
  if (axis >= 0 && axis < r->n_leading) return axis;
  if (axis < 0 && -axis <= r->n_trailing) return r->n_leading + r->n_trailing + axis;
  if (axis >= 0 && len >= 0 && axis >= len - r->n_trailing)
    return r->n_leading + axis - (len - r->n_trailing);
  return CN_SV_SPEC_IN_VAR;
}

static void es_var_print(cn_sbuf *sb, const cn_es_row *r) {
  if (r->ellipsis)
    cn_sbuf_puts(sb, "...");
  else
    cn_sbuf_printf(sb, "..%s..", r->row_var);
}

static void es_row_print(cn_sbuf *sb, const cn_es_row *r, bool multichar) {
  const char *sep = multichar ? ", " : "";
  for (int i = 0; i < r->n_leading; i++) {
    if (i) cn_sbuf_puts(sb, sep);
    cn_einsum_axis_print(sb, &r->leading[i]);
  }
  if (r->row_var) {
    if (r->n_leading) cn_sbuf_puts(sb, sep);
    es_var_print(sb, r);
  }
  for (int i = 0; i < r->n_trailing; i++) {
    if (i || r->n_leading || r->row_var) cn_sbuf_puts(sb, sep);
    cn_einsum_axis_print(sb, &r->trailing[i]);
  }
}

static bool es_row_has_label(const cn_es_row *r, const char *label) {
  for (int i = 0; i < r->n_leading + r->n_trailing; i++) {
    const cn_es_axis *ax = i < r->n_leading ? &r->leading[i] : &r->trailing[i - r->n_leading];
    if (ax->kind == CN_ES_LABEL && strcmp(ax->label, label) == 0) return true;
  }
  return false;
}

/* Names a tensor the operation already equated with the spec's label (or row variable, when
 * label is NULL): the operands before `slot` first, then the result, which the logic processes
 * first. The size found on the spec side is that tensor's. */
static void es_source(cn_sbuf *sb, const cn_shape_op *op, int slot, const char *label,
                      const char *row_var) {
  int order[4], n = 0;
  if (slot > 0) {
    for (int t = 1; t < slot; t++) order[n++] = t;
    order[n++] = 0;
  }
  for (int i = 0; i < n; i++) {
    const cn_shape *tensor = side_tensor(op, order[i]);
    for (int k = 0; k < CN_N_ROWS && tensor; k++) {
      const cn_es_row *r = es_row(es_shape(op->args.spec, order[i]), (cn_row_kind)k);
      if (label ? es_row_has_label(r, label)
                : row_var && r->row_var && !strcmp(r->row_var, row_var)) {
        cn_sbuf_printf(sb, ", as in the %s row of \"%s\" (#%d)", cn_row_kind_name((cn_row_kind)k),
                       tensor->label, tensor->id);
        return;
      }
    }
  }
}

/* An axis as the user counts it: from the left (0-based), or, in a row that still has a row
 * variable (it may grow on the left), "last axis" and "2nd axis from the right". */
static void describe_axis(cn_sbuf *sb, int axis) {
  if (axis == CN_SV_NO_AXIS) return;
  int k = -axis;
  if (axis >= 0)
    cn_sbuf_printf(sb, " axis %d", axis);
  else if (k == 1)
    cn_sbuf_puts(sb, " last axis");
  else
    cn_sbuf_printf(sb, " %d%s axis from the right", k,
                   k % 100 / 10 == 1 ? "th"
                   : k % 10 == 2     ? "nd"
                   : k % 10 == 3     ? "rd"
                                     : "th");
}

/* The axis of tensor t's row, as describe_axis, or by its label when it has one; a position from
 * the right is counted from the left once the row is closed. */
static void describe_tensor_axis(cn_sbuf *sb, cn_shape_env *env, const cn_shape *t, cn_row_kind row,
                                 int axis, cn_dim *d) {
  cn_dim *solved = d ? cn_dim_resolve(env, d) : NULL;
  if (axis != CN_SV_NO_AXIS && solved && solved->kind == CN_DIM_SOLVED && solved->label) {
    cn_sbuf_printf(sb, " axis '%s'", solved->label);
    return;
  }
  cn_row *r = axis < 0 && axis != CN_SV_NO_AXIS ? cn_row_resolve(env, t->rows[row]) : NULL;
  if (r && r->var < 0 && r->n_lead + r->n_trail + axis >= 0) axis += r->n_lead + r->n_trail;
  describe_axis(sb, axis);
}

static void describe_spec(cn_sbuf *sb, cn_shape_env *env, const cn_sv_site *s, cn_dim *d) {
  const cn_es_row *r = s->spec_row;
  const cn_es_axis *ax = NULL;
  bool multichar = s->op->args.spec->multichar;
  if (s->spec_pos >= 0) {
    ax = s->spec_pos < r->n_leading ? &r->leading[s->spec_pos]
                                    : &r->trailing[s->spec_pos - r->n_leading];
    cn_sbuf_puts(sb, "spec axis '");
    cn_einsum_axis_print(sb, ax);
    cn_sbuf_putc(sb, '\'');
  } else if (s->spec_pos == CN_SV_SPEC_IN_VAR && r->row_var) {
    cn_sbuf_puts(sb, "spec row variable '");
    es_var_print(sb, r);
    cn_sbuf_putc(sb, '\'');
  } else {
    cn_sbuf_printf(sb, "the spec's %s row", cn_row_kind_name(s->c->b.row));
    if (r->n_leading || r->row_var || r->n_trailing) {
      cn_sbuf_puts(sb, " '");
      es_row_print(sb, r, multichar);
      cn_sbuf_putc(sb, '\'');
    }
    if (s->spec_pos == CN_SV_SPEC_IN_VAR) describe_axis(sb, s->axis_b);
  }
  d = d ? cn_dim_resolve(env, d) : NULL;
  if (!d || d->kind != CN_DIM_SOLVED) return; /* a spec variable's name says more than 'd7 */
  cn_sbuf_puts(sb, " (size ");
  cn_sv_dim_print(sb, env, d);
  if (ax && ax->kind == CN_ES_LABEL)
    es_source(sb, s->op, s->c->a.slot, ax->label, NULL);
  else if (!ax && r->row_var)
    es_source(sb, s->op, s->c->a.slot, NULL, r->row_var);
  cn_sbuf_putc(sb, ')');
}

static void describe_op(cn_sbuf *sb, const cn_shape_op *op) {
  if (!op) {
    cn_sbuf_puts(sb, "a shape constraint");
    return;
  }
  if (op->kind == CN_SL_EINSUM && op->args.spec)
    cn_sbuf_printf(sb, "einsum \"%s\"", op->args.spec->text);
  else
    cn_sbuf_puts(sb, cn_shape_kind_name(op->kind));
  cn_sbuf_printf(sb, " (operation #%d", op->id);
  if (op->lhs) cn_sbuf_printf(sb, " computing \"%s\" (#%d)", op->lhs->label, op->lhs->id);
  cn_sbuf_putc(sb, ')');
}

static void describe_side(cn_sbuf *sb, cn_shape_env *env, const cn_sv_site *s, bool side_b,
                          cn_dim *d) {
  cn_sc_side side = s->c ? (side_b ? s->c->b : s->c->a) : (cn_sc_side){-1, CN_ROW_OUTPUT};
  int axis = side_b ? s->axis_b : s->axis_a;
  const cn_shape *t = side_tensor(s->op, side.slot);
  if (!t && side_b && s->spec_row) {
    describe_spec(sb, env, s, d);
    return;
  }
  if (t) {
    cn_sbuf_printf(sb, "%s row of \"%s\" (#%d)", cn_row_kind_name(side.row), t->label, t->id);
    describe_tensor_axis(sb, env, t, side.row, axis, d);
  } else {
    cn_sbuf_puts(sb, s->op && s->op->kind == CN_SL_EINSUM ? "the spec" : "the constraint");
    describe_axis(sb, axis);
  }
  if (d) {
    cn_sbuf_puts(sb, " (size ");
    cn_sv_dim_print(sb, env, d);
    cn_sbuf_putc(sb, ')');
  }
}

/* A conflict between the two sides of the site; d_a / d_b may be NULL (rank conflicts). */
cn_status cn_sv_conflict(cn_shape_env *env, const cn_sv_site *s, cn_dim *d_a, cn_dim *d_b,
                         const char *what) {
  cn_sbuf sb = {0};
  cn_sbuf_puts(&sb, "shape conflict in ");
  describe_op(&sb, s->op);
  cn_sbuf_printf(&sb, ": %s: ", what);
  describe_side(&sb, env, s, false, d_a);
  cn_sbuf_puts(&sb, " vs ");
  describe_side(&sb, env, s, true, d_b);
  cn_status st = cn_fail(env->ctx, CN_ERR_INVALID, "%s", sb.failed ? what : sb.data);
  cn_sbuf_free(&sb);
  return st;
}

cn_status cn_sv_pending_conflict(cn_shape_env *env, const cn_sv_pending *p, const char *what) {
  cn_sv_site s = {.op = p->op,
                  .c = &p->c,
                  .axis_a = p->axis_a,
                  .axis_b = p->axis_b,
                  .spec_row = p->spec_row,
                  .spec_len = -1,
                  .spec_pos = p->spec_pos};
  return cn_sv_conflict(env, &s, NULL, NULL, what);
}

cn_status cn_sv_rank_conflict(cn_shape_env *env, const cn_sv_site *s, const cn_row *a,
                              const cn_row *b, const char *what) {
  char msg[200];
  snprintf(msg, sizeof msg, "%s (%d%s axes vs %d%s axes)", what, a->n_lead + a->n_trail,
           a->var >= 0 ? " or more" : "", b->n_lead + b->n_trail, b->var >= 0 ? " or more" : "");
  return cn_sv_conflict(env, s, NULL, NULL, msg);
}
