/* The top of the shape solver (see solver.h): what the graph adds to an environment. A shape
 * (cn_shape_new: fresh row variables for the rows not given; a parameter is registered for
 * finalization's checks), and an operation (cn_shape_add_op): its constraints come from its shape
 * logic (logic.c), are unified and propagated (unify.c) and checked for operands that can never
 * broadcast together; a failure rolls the environment back (worklist.c's trail), so a conflicting
 * operation leaves no trace.
 *
 * Invariants: calls go one way, from here to the passes below (logic.c, unify.c, conflict.c,
 * worklist.c, term.c), none of which calls back; the trail records writes only inside
 * cn_shape_add_op (env->trailing). */
#include "shape/solver.h"

#include <stdio.h>
#include <string.h>

/* ---- Shapes ---------------------------------------------------------------------------------- */

cn_shape *cn_shape_new(cn_shape_env *env, const char *label, bool is_param,
                       const cn_shape_row_spec *rows) {
  if (!cn_arena_grow(env->ctx, (void **)&env->shapes, &env->cap_shapes, env->n_shapes + 1,
                     sizeof(cn_shape *)))
    return NULL;
  cn_shape *sh = cn_alloc(env->ctx, sizeof *sh);
  if (!sh) return NULL;
  sh->id = env->n_shapes + 1;
  sh->label = cn_strdup(env->ctx, label ? label : "");
  sh->is_param = is_param;
  sh->guessable = false;
  if (!sh->label) return NULL;
  for (int k = 0; k < CN_N_ROWS; k++) {
    const cn_shape_row_spec *spec = rows ? &rows[k] : NULL;
    if (spec && spec->given) {
      if (spec->n < 0) {
        cn_fail(env->ctx, CN_ERR_INVALID, "shape of \"%s\": negative axis count %d for the %s row",
                sh->label, spec->n, cn_row_kind_name((cn_row_kind)k));
        return NULL;
      }
      cn_dim **dims = cn_alloc(env->ctx, sizeof(cn_dim *) * (size_t)(spec->n + 1));
      if (!dims) return NULL;
      for (int i = 0; i < spec->n; i++) {
        if (spec->dims[i] < 0) {
          cn_fail(env->ctx, CN_ERR_INVALID,
                  "shape of \"%s\": axis %d of the %s row has size %lld; sizes must be >= 1 "
                  "(or 0: inferred)",
                  sh->label, i, cn_row_kind_name((cn_row_kind)k), (long long)spec->dims[i]);
          return NULL;
        }
        const char *axis_label = spec->labels ? spec->labels[i] : NULL;
        if (axis_label && !(axis_label = cn_strdup(env->ctx, axis_label))) return NULL;
        dims[i] =
            spec->dims[i] == 0 ? cn_dim_var(env) : cn_dim_solved(env, spec->dims[i], axis_label);
        if (!dims[i]) return NULL;
      }
      sh->rows[k] = cn_row_make(env, 0, NULL, -1, spec->n, dims);
    } else if (is_param && k == CN_ROW_BATCH) {
      sh->rows[k] = cn_row_make(env, 0, NULL, -1, 0, NULL);
    } else {
      int var = cn_row_var_new(env);
      sh->rows[k] = var < 0 ? NULL : cn_row_make(env, 0, NULL, var, 0, NULL);
    }
    if (!sh->rows[k]) return NULL;
  }
  if (is_param && (!cn_arena_grow(env->ctx, (void **)&env->open_params, &env->cap_open_params,
                                  env->n_open_params + 1, sizeof(int)) ||
                   !cn_sv_note_param(env, sh, env->n_shapes, true)))
    return NULL;
  if (is_param) env->open_params[env->n_open_params++] = env->n_shapes;
  env->shapes[env->n_shapes++] = sh;
  return sh;
}

/* ---- Operations ------------------------------------------------------------------------------ */

static const cn_shape *super_shape(const cn_sv_pending *p) {
  if (!p->op || p->c.b.slot < 0) return NULL;
  return p->c.b.slot == 0 ? p->op->lhs : p->op->rhs[p->c.b.slot - 1];
}

/* An axis of a closed row r as the user wrote it: its label in quotes, else its position from the
 * left (0-based); k counts from the right (1 is the last axis). */
static void axis_name(char *out, size_t size, const cn_dim *d, const cn_row *r, int k) {
  if (d->label)
    snprintf(out, size, "'%s'", d->label);
  else
    snprintf(out, size, "%d", r->n_lead + r->n_trail - k);
}

/* Two pending `w ⊑ R1`, `w ⊑ R2` over one open result row w with closed operand rows: w must
 * broadcast to both, so their right-aligned solved dims must agree or be units. Checked for the
 * constraints of the operation just added, so a pointwise operation over operands that can
 * never broadcast together fails when it is built, not at finalization. */
static cn_status check_joint_bounds(cn_shape_env *env, const cn_shape_op *op, int first) {
  for (int i = first; i < env->n_pend; i++) {
    const cn_sv_pending *p = &env->pend[i];
    if (p->done || p->op != op || p->c.kind != CN_SC_ROW_INEQ) continue;
    cn_row *w = cn_row_resolve(env, p->c.r1), *r1 = cn_row_resolve(env, p->c.r2);
    if (!w || !r1) return CN_ERR_NOMEM;
    if (w->var < 0 || w->n_lead || w->n_trail || r1->var >= 0) continue;
    int n_uses = cn_sv_gather_row(env, w->var);
    if (n_uses < 0) return CN_ERR_NOMEM;
    for (int u = 0; u < n_uses; u++) {
      int j = env->gathered[u];
      const cn_sv_pending *q = &env->pend[j];
      if (j == i || q->c.kind != CN_SC_ROW_INEQ || (q->op == op && j < i)) continue;
      cn_row *w2 = cn_row_resolve(env, q->c.r1), *r2 = cn_row_resolve(env, q->c.r2);
      if (!w2 || !r2) return CN_ERR_NOMEM;
      if (w2->var != w->var || w2->n_lead || w2->n_trail || r2->var >= 0) continue;
      int n = r1->n_trail < r2->n_trail ? r1->n_trail : r2->n_trail;
      for (int k = 1; k <= n; k++) {
        cn_dim *a = cn_dim_resolve(env, r1->trail[r1->n_trail - k]);
        cn_dim *b = cn_dim_resolve(env, r2->trail[r2->n_trail - k]);
        if (!a || !b) return CN_ERR_NOMEM;
        if (a->kind != CN_DIM_SOLVED || b->kind != CN_DIM_SOLVED || a->size == b->size ||
            cn_dim_is_unit(a) || cn_dim_is_unit(b))
          continue;
        const cn_shape *sa = super_shape(p), *sb = super_shape(q);
        const char *row = cn_row_kind_name(q->c.b.row);
        char what[560], axis_a[80], axis_b[80];
        axis_name(axis_a, sizeof axis_a, a, r1, k);
        axis_name(axis_b, sizeof axis_b, b, r2, k);
        snprintf(what, sizeof what,
                 "operands that cannot broadcast together: %s axis %s of \"%s\" (#%d) has size "
                 "%lld and %s axis %s of \"%s\" (#%d) size %lld (axes align from the right%s)",
                 row, axis_a, sa ? sa->label : "?", sa ? sa->id : 0, (long long)a->size, row,
                 axis_b, sb ? sb->label : "?", sb ? sb->id : 0, (long long)b->size,
                 (a->label && a->size == 1) || (b->label && b->size == 1)
                     ? "; a labeled axis of size 1 does not broadcast"
                     : "");
        return cn_sv_pending_conflict(env, q, what);
      }
    }
  }
  return CN_OK;
}

static bool copy_args(cn_shape_env *env, cn_shape_args *dst, const cn_shape_args *src) {
  *dst = *src;
  if (src->n_bindings) {
    cn_shape_binding *b = cn_alloc(env->ctx, sizeof *b * (size_t)src->n_bindings);
    if (!b) return false;
    for (int i = 0; i < src->n_bindings; i++) {
      b[i].value = src->bindings[i].value;
      if (!(b[i].name = cn_strdup(env->ctx, src->bindings[i].name))) return false;
    }
    dst->bindings = b;
  }
  for (int k = 0; k < CN_N_ROWS; k++) {
    if (!src->n_dims[k]) continue;
    int64_t *d = cn_alloc(env->ctx, sizeof *d * (size_t)src->n_dims[k]);
    if (!d) return false;
    memcpy(d, src->dims[k], sizeof *d * (size_t)src->n_dims[k]);
    dst->dims[k] = d;
    if (src->labels[k]) {
      const char **l = cn_alloc(env->ctx, sizeof *l * (size_t)src->n_dims[k]);
      if (!l) return false;
      for (int i = 0; i < src->n_dims[k]; i++)
        if (src->labels[k][i] && !(l[i] = cn_strdup(env->ctx, src->labels[k][i]))) return false;
      dst->labels[k] = l;
    }
  }
  return true;
}

cn_shape_op *cn_shape_add_op(cn_shape_env *env, cn_shape_kind kind, const cn_shape_args *args,
                             cn_shape *lhs, cn_shape *const *rhs, int n_rhs) {
  static const cn_shape_args no_args;
  if (!args) args = &no_args;
  if (!cn_arena_grow(env->ctx, (void **)&env->ops, &env->cap_ops, env->n_ops + 1,
                     sizeof(cn_shape_op *)))
    return NULL;
  cn_shape_op *op = cn_alloc(env->ctx, sizeof *op);
  if (!op || !copy_args(env, &op->args, args)) return NULL;
  op->id = env->n_ops + 1;
  op->kind = kind;
  op->lhs = lhs;
  op->n_rhs = n_rhs;
  for (int i = 0; i < n_rhs && i < 3; i++) op->rhs[i] = rhs[i];
  if (cn_shape_derive(env, kind, &op->args, lhs, rhs, n_rhs, &op->constraints,
                      &op->n_constraints) != CN_OK)
    return NULL;
  int n_pend = env->n_pend;
  env->ops[env->n_ops++] = op;
  env->trailing = true;
  env->n_trail = 0;
  bool ok = true;
  for (int i = 0; i < op->n_constraints && ok; i++)
    ok = cn_shape_solve(env, op, &op->constraints[i]) == CN_OK;
  ok = ok && cn_shape_propagate(env) == CN_OK && check_joint_bounds(env, op, n_pend) == CN_OK;
  /* a span past int64 is the cause of whatever else failed meanwhile (its stand-in size) */
  if (env->span_overflow) ok = cn_sv_span_status(env) == CN_OK;
  env->trailing = false;
  if (!ok) {
    cn_sv_rollback(env, n_pend);
    env->n_ops--;
    env->span_overflow = NULL; /* the sizes that made it are rolled back */
    return NULL;
  }
  env->n_trail = 0;
  return op;
}
