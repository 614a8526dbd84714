/* Unification, the solver's core pass (above term.c, worklist.c and conflict.c): pending
 * constraints, dimensions (equalities, affine terms, broadcasting inequalities), rows (equalities
 * with row variables, broadcasting inequalities that narrow as they pair axes), the row
 * constraints (Total_elems, minimum dims), cn_shape_solve, and propagation, which processes the
 * pending entries until nothing changes.
 *
 * Propagation processes entries in the order the reference sweeps would reach them: a sweep goes
 * up the entry indices; an entry woken by the entry being processed joins this sweep when its
 * index is larger, else the next one, and new entries join this sweep (they have the largest
 * index). Entries that nothing woke are skipped: processing an entry whose variables did not
 * change decides nothing new (the narrowing of row entries consumes what it paired), so the
 * result is the reference sweeps' result, at the cost of the work that changes something.
 *
 * Invariants: every write goes through worklist.c's trailed setters; a pending entry is retried
 * whenever a variable it mentions changes and marked done once decided; `events` grows on every
 * binding or simplification (the reference sweeps' fixpoint test); a deferred dim pair is its own
 * pending entry (a retried dim entry is updated in place, once per processing). */
#include "shape/solver.h"

#include <stdio.h>
#include <string.h>

/* ---- Pending constraints --------------------------------------------------------------------- */

static cn_sv_result push_pending(cn_shape_env *env, const cn_sv_pending *p) {
  if (!cn_arena_grow(env->ctx, (void **)&env->pend, &env->cap_pend, env->n_pend + 1,
                     sizeof(cn_sv_pending)))
    return CN_SV_FAIL;
  env->pend[env->n_pend++] = *p;
  return cn_sv_note_entry(env, env->n_pend - 1, true) ? CN_SV_PEND : CN_SV_FAIL;
}

/* Fills *p with a pending entry for a dim constraint of `kind` between a and b at site s (its
 * operation, the constraint it came from, the axes and the spec position that messages name).
 * The entry is zeroed first, padding included: entries are compared with memcmp. */
static void pending_at(cn_sv_pending *p, const cn_sv_site *s, cn_sc_kind kind, cn_dim *a,
                       cn_dim *b) {
  memset(p, 0, sizeof *p);
  p->op = s->op;
  if (s->c) p->c = *s->c;
  p->c.kind = kind;
  p->c.d1 = a;
  p->c.d2 = b;
  p->c.r1 = p->c.r2 = NULL;
  p->axis_a = s->axis_a;
  p->axis_b = s->axis_b;
  p->spec_row = s->spec_row;
  p->spec_pos = s->spec_pos;
}

static cn_sv_result defer_dim(cn_shape_env *env, const cn_sv_site *s, cn_sc_kind kind, cn_dim *a,
                              cn_dim *b) {
  if (s->self && !s->self->reused) {
    s->self->reused = true;
    s->self->c.kind = kind;
    s->self->c.d1 = a;
    s->self->c.d2 = b;
    return CN_SV_PEND;
  }
  cn_sv_pending p;
  pending_at(&p, s, kind, a, b);
  return push_pending(env, &p);
}

/* ---- Dimensions ------------------------------------------------------------------------------ */

static bool dim_mentions(cn_shape_env *env, cn_dim *d, int var) {
  d = cn_dim_resolve(env, d);
  if (!d) return false;
  if (d->kind == CN_DIM_VAR) return d->var == var;
  if (d->kind == CN_DIM_AFFINE)
    return dim_mentions(env, d->affine.over, var) ||
           (d->affine.conv && dim_mentions(env, d->affine.kernel, var));
  return false;
}

static cn_sv_result unify_dim(cn_shape_env *env, const cn_sv_site *s, cn_dim *a, cn_dim *b);

static cn_sv_result bind_dim(cn_shape_env *env, const cn_sv_site *s, cn_dim *var, cn_dim *to,
                             bool var_is_a) {
  if (dim_mentions(env, to, var->var)) {
    cn_sv_conflict(env, s, var_is_a ? var : to, var_is_a ? to : var,
                   "a dimension would have to contain itself (size cycle)");
    return CN_SV_FAIL;
  }
  int64_t min = env->dim_min[var->var];
  if (to->kind == CN_DIM_SOLVED && to->size < min) {
    char what[160];
    snprintf(what, sizeof what, "fixed index %lld is out of range of an axis of size %lld",
             (long long)(min - 1), (long long)to->size);
    cn_sv_conflict(env, s, var_is_a ? var : to, var_is_a ? to : var, what);
    return CN_SV_FAIL;
  }
  if (!cn_sv_set_dim(env, var->var, to)) return CN_SV_FAIL;
  env->events++;
  if (to->kind == CN_DIM_VAR && env->dim_min[to->var] < min && !cn_sv_set_min(env, to->var, min))
    return CN_SV_FAIL;
  if (to->kind == CN_DIM_AFFINE && min > 1) { /* checked once the affine term has a size */
    cn_sv_pending p;
    pending_at(&p, s, CN_SC_MIN_DIM, to, NULL);
    p.c.min = min;
    p.min_on_b = var_is_a;
    if (push_pending(env, &p) == CN_SV_FAIL) return CN_SV_FAIL;
  }
  return CN_SV_DONE;
}

static cn_sv_result same_solved(cn_shape_env *env, const cn_sv_site *s, cn_dim *a, cn_dim *b,
                                const char *what) {
  if (a->size != b->size) {
    cn_sv_conflict(env, s, a, b, what);
    return CN_SV_FAIL;
  }
  if (a->label && b->label && strcmp(a->label, b->label) != 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "axis labels differ ('%s' vs '%s')", a->label, b->label);
    cn_sv_conflict(env, s, a, b, msg);
    return CN_SV_FAIL;
  }
  return CN_SV_DONE;
}

/* aff (side a iff aff_is_a) reads an input of size n: solve its output or kernel. */
static cn_sv_result solve_affine(cn_shape_env *env, const cn_sv_site *s, cn_dim *aff, cn_dim *n_dim,
                                 bool aff_is_a) {
  int64_t n = n_dim->size, st = aff->affine.stride, dil = aff->affine.dilation;
  cn_dim *over = aff->affine.over, *kernel = aff->affine.kernel;
  char what[320];
  cn_sv_site inner = *s;
  if (!aff->affine.conv || aff->affine.use_padding) {
    if (n % st != 0) {
      snprintf(what, sizeof what, "input size %lld is not a multiple of the stride %lld",
               (long long)n, (long long)st);
      cn_sv_conflict(env, s, aff_is_a ? aff : n_dim, aff_is_a ? n_dim : aff, what);
      return CN_SV_FAIL;
    }
    cn_dim *o = cn_dim_solved(env, n / st, NULL); /* strided: not the input's basis */
    return o ? unify_dim(env, &inner, over, o) : CN_SV_FAIL;
  }
  if (kernel->kind == CN_DIM_SOLVED) {
    /* (kernel - 1) * dil beyond int64 is beyond n too: refused as a negative t */
    int64_t t;
    bool huge = __builtin_mul_overflow(kernel->size - 1, dil, &t);
    t = huge ? -1 : n - 1 - t;
    if (t < 0 || t % st != 0) {
      char value[24] = "below 0";
      if (!huge) snprintf(value, sizeof value, "%lld", (long long)t);
      snprintf(what, sizeof what,
               "a valid convolution does not tile: input size %lld, kernel %lld, dilation %lld, "
               "stride %lld: %lld - 1 - (%lld-1)*%lld = %s is not a non-negative multiple of "
               "%lld",
               (long long)n, (long long)kernel->size, (long long)dil, (long long)st, (long long)n,
               (long long)kernel->size, (long long)dil, value, (long long)st);
      cn_sv_conflict(env, s, aff_is_a ? aff : n_dim, aff_is_a ? n_dim : aff, what);
      return CN_SV_FAIL;
    }
    cn_dim *o = cn_dim_solved(env, t / st + 1, NULL);
    return o ? unify_dim(env, &inner, over, o) : CN_SV_FAIL;
  }
  if (over->kind == CN_DIM_SOLVED) {
    int64_t t;
    t = __builtin_mul_overflow(st, over->size - 1, &t) ? -1 : n - 1 - t; /* beyond n: none */
    if (t < 0 || t % dil != 0) {
      snprintf(what, sizeof what,
               "a valid convolution does not tile: input size %lld, output %lld, stride %lld, "
               "dilation %lld leave no whole kernel size",
               (long long)n, (long long)over->size, (long long)st, (long long)dil);
      cn_sv_conflict(env, s, aff_is_a ? aff : n_dim, aff_is_a ? n_dim : aff, what);
      return CN_SV_FAIL;
    }
    cn_dim *k = cn_dim_solved(env, t / dil + 1, NULL);
    return k ? unify_dim(env, &inner, kernel, k) : CN_SV_FAIL;
  }
  return aff_is_a ? defer_dim(env, s, CN_SC_DIM_EQ, aff, n_dim)
                  : defer_dim(env, s, CN_SC_DIM_EQ, n_dim, aff);
}

static cn_sv_result unify_dim(cn_shape_env *env, const cn_sv_site *s, cn_dim *a, cn_dim *b) {
  a = cn_dim_resolve(env, a);
  b = cn_dim_resolve(env, b);
  if (!a || !b) return CN_SV_FAIL;
  if (a == b) return CN_SV_DONE;
  if (a->kind == CN_DIM_VAR && b->kind == CN_DIM_VAR && a->var == b->var) return CN_SV_DONE;
  if (a->kind == CN_DIM_VAR) return bind_dim(env, s, a, b, true);
  if (b->kind == CN_DIM_VAR) return bind_dim(env, s, b, a, false);
  if (a->kind == CN_DIM_SOLVED && b->kind == CN_DIM_SOLVED)
    return same_solved(env, s, a, b, "sizes differ");
  if (a->kind == CN_DIM_AFFINE && b->kind == CN_DIM_SOLVED) return solve_affine(env, s, a, b, true);
  if (b->kind == CN_DIM_AFFINE && a->kind == CN_DIM_SOLVED)
    return solve_affine(env, s, b, a, false);
  /* two affine terms: the same reading unifies component-wise, otherwise wait for sizes */
  if (a->affine.stride == b->affine.stride && a->affine.conv == b->affine.conv &&
      a->affine.dilation == b->affine.dilation && a->affine.use_padding == b->affine.use_padding) {
    cn_sv_result r_over = unify_dim(env, s, a->affine.over, b->affine.over);
    if (r_over == CN_SV_FAIL || !a->affine.conv) return r_over;
    cn_sv_result r_kernel = unify_dim(env, s, a->affine.kernel, b->affine.kernel);
    return r_kernel == CN_SV_DONE ? r_over : r_kernel;
  }
  return defer_dim(env, s, CN_SC_DIM_EQ, a, b);
}

/* sub ⊑ super: equal, or the super is a broadcasting unit (an unlabeled size 1). A variable below
 * a unit stays pending: it may take any size, and finalization closes a parameter's such dim to
 * its minimum instead of asking for it (a weight reading a number: `w * 2.0`). */
static cn_sv_result ineq_dim(cn_shape_env *env, const cn_sv_site *s, cn_dim *sub, cn_dim *super) {
  sub = cn_dim_resolve(env, sub);
  super = cn_dim_resolve(env, super);
  if (!sub || !super) return CN_SV_FAIL;
  if (super->kind == CN_DIM_SOLVED) {
    if (cn_dim_is_unit(super)) {
      if (sub->kind == CN_DIM_VAR) return defer_dim(env, s, CN_SC_DIM_INEQ, sub, super);
      return CN_SV_DONE;
    }
    if (sub->kind == CN_DIM_SOLVED)
      return same_solved(env, s, sub, super, "sizes differ and the operand's is not 1");
    return unify_dim(env, s, sub, super);
  }
  if (sub->kind == CN_DIM_SOLVED && sub->size == 1) return unify_dim(env, s, sub, super);
  if (sub == super ||
      (sub->kind == CN_DIM_VAR && super->kind == CN_DIM_VAR && sub->var == super->var))
    return CN_SV_DONE;
  return defer_dim(env, s, CN_SC_DIM_INEQ, sub, super);
}

/* ---- Rows ------------------------------------------------------------------------------------ */

static cn_sv_result bind_row(cn_shape_env *env, const cn_sv_site *s, int var, cn_row *to) {
  if (to->var == var) {
    cn_sv_conflict(env, s, NULL, NULL, "rank cycle: a row variable would have to contain itself");
    return CN_SV_FAIL;
  }
  if (!cn_sv_set_row(env, var, to)) return CN_SV_FAIL;
  env->events++;
  return CN_SV_DONE;
}

/* The message index of dim j of the n trailing dims of a row (right_off more were already
 * paired from the right): absolute for a closed row, counted from the right otherwise. */
static int trail_axis(const cn_row *r, int j, int n, int left_off, int right_off) {
  return r->var < 0 ? left_off + j : -(n - j) - right_off;
}

static cn_sv_result pair_dims(cn_shape_env *env, const cn_sv_site *base, bool ineq, cn_dim *a,
                              int axis_a, cn_dim *b, int axis_b) {
  cn_sv_site s = *base;
  s.axis_a = axis_a;
  s.axis_b = axis_b;
  s.spec_pos = s.spec_row ? cn_sv_spec_pos(s.spec_row, s.spec_len, axis_b) : CN_SV_SPEC_WHOLE;
  cn_sv_result r = ineq ? ineq_dim(env, &s, a, b) : unify_dim(env, &s, a, b);
  return r == CN_SV_FAIL ? CN_SV_FAIL : CN_SV_DONE; /* a deferred pair is its own pending entry */
}

/* Two closed rows: the same number of axes, paired in order. */
static cn_sv_result unify_closed(cn_shape_env *env, const cn_sv_site *s, const int off[2][2],
                                 const cn_row *a, const cn_row *b) {
  if (a->n_trail != b->n_trail) {
    cn_sv_rank_conflict(env, s, a, b, "the rows have different numbers of axes");
    return CN_SV_FAIL;
  }
  for (int i = 0; i < a->n_trail; i++)
    if (pair_dims(env, s, false, a->trail[i], off[0][0] + i, b->trail[i], off[1][0] + i) ==
        CN_SV_FAIL)
      return CN_SV_FAIL;
  return CN_SV_DONE;
}

/* One closed row c and one open row o: o's axes pair with c's ends, o's variable takes the middle
 * (the message axes stay on the sides a and b they came from). */
static cn_sv_result unify_closed_open(cn_shape_env *env, const cn_sv_site *s, const int off[2][2],
                                      cn_row *a, cn_row *b) {
  bool a_closed = a->var < 0;
  cn_row *c = a_closed ? a : b, *o = a_closed ? b : a;
  int n = c->n_trail;
  if (n < o->n_lead + o->n_trail) {
    cn_sv_rank_conflict(env, s, a, b, "too few axes");
    return CN_SV_FAIL;
  }
  for (int i = 0; i < o->n_lead; i++) {
    int ac = off[a_closed ? 0 : 1][0] + i, ao = off[a_closed ? 1 : 0][0] + i;
    if (pair_dims(env, s, false, a_closed ? c->trail[i] : o->lead[i], a_closed ? ac : ao,
                  a_closed ? o->lead[i] : c->trail[i], a_closed ? ao : ac) == CN_SV_FAIL)
      return CN_SV_FAIL;
  }
  for (int j = 0; j < o->n_trail; j++) {
    int ci = n - o->n_trail + j, oi = j;
    int ac = off[a_closed ? 0 : 1][0] + ci, ao = -(o->n_trail - j) - off[a_closed ? 1 : 0][1];
    if (pair_dims(env, s, false, a_closed ? c->trail[ci] : o->trail[oi], a_closed ? ac : ao,
                  a_closed ? o->trail[oi] : c->trail[ci], a_closed ? ao : ac) == CN_SV_FAIL)
      return CN_SV_FAIL;
  }
  cn_row *middle = cn_row_make(env, 0, NULL, -1, n - o->n_lead - o->n_trail, c->trail + o->n_lead);
  return middle ? bind_row(env, s, o->var, middle) : CN_SV_FAIL;
}

/* A pending row entry p whose first kl leading and kr trailing axes were paired keeps what is left,
 * r1 and r2 (NULL: allocation failure), the offsets locating it for messages. */
static cn_sv_result narrow(cn_shape_env *env, cn_sv_pending *p, int kl, int kr, cn_row *r1,
                           cn_row *r2) {
  if (!r1 || !r2) return CN_SV_FAIL;
  p->c.r1 = r1;
  p->c.r2 = r2;
  p->off[0][0] += kl;
  p->off[1][0] += kl;
  p->off[0][1] += kr;
  p->off[1][1] += kr;
  env->events++;
  return CN_SV_PEND;
}

/* What two open rows leave once their common leading (kl) and trailing (kr) axes are paired:
 * one variable takes the other's rest when one side has nothing left. When one side keeps leading
 * axes and the other trailing ones, `L va = vb T` (L, T not empty) has no most general unifier:
 * the rows may stack (va = w T, vb = L w) or overlap, pairing the end of L with the start of T,
 * and no choice is safe while neither rank is known (stacking them made a pooled map feeding a
 * convolution keep both its pooled and unpooled axes). The entry waits, narrowed to what is left,
 * until some other constraint binds va or vb (the equation then has one solution), or until
 * finalization applies its rule (finalize.c, close_flanks: the fewest axes, pairing). */
static cn_sv_result bind_open_rest(cn_shape_env *env, const cn_sv_site *s, cn_sv_pending *self,
                                   const cn_row *a, const cn_row *b, int kl, int kr) {
  int al = a->n_lead - kl, at = a->n_trail - kr, bl = b->n_lead - kl, bt = b->n_trail - kr;
  if (a->var == b->var) {
    if (al || at || bl || bt) {
      cn_sv_conflict(env, s, NULL, NULL,
                     "rank cycle: a row variable would have to equal itself plus more axes");
      return CN_SV_FAIL;
    }
    return CN_SV_DONE;
  }
  if (!al && !at) {
    cn_row *to = cn_row_make(env, bl, b->lead + kl, b->var, bt, b->trail);
    return to ? bind_row(env, s, a->var, to) : CN_SV_FAIL;
  }
  if (!bl && !bt) {
    cn_row *to = cn_row_make(env, al, a->lead + kl, a->var, at, a->trail);
    return to ? bind_row(env, s, b->var, to) : CN_SV_FAIL;
  }
  CN_ASSERT(self != NULL); /* every row equality is processed as a pending entry */
  self->flanks = true;
  if (!kl && !kr) return CN_SV_PEND;
  return narrow(env, self, kl, kr, cn_row_make(env, al, a->lead + kl, a->var, at, a->trail),
                cn_row_make(env, bl, b->lead + kl, b->var, bt, b->trail));
}

/* Two open rows: the common leading and trailing axes pair, then the variables settle the rest. */
static cn_sv_result unify_open(cn_shape_env *env, const cn_sv_site *s, cn_sv_pending *self,
                               const cn_row *a, const cn_row *b) {
  const int(*off)[2] = (const int(*)[2])self->off;
  int kl = a->n_lead < b->n_lead ? a->n_lead : b->n_lead;
  int kr = a->n_trail < b->n_trail ? a->n_trail : b->n_trail;
  for (int i = 0; i < kl; i++)
    if (pair_dims(env, s, false, a->lead[i], off[0][0] + i, b->lead[i], off[1][0] + i) ==
        CN_SV_FAIL)
      return CN_SV_FAIL;
  for (int j = 0; j < kr; j++)
    if (pair_dims(env, s, false, a->trail[a->n_trail - kr + j], -(kr - j) - off[0][1],
                  b->trail[b->n_trail - kr + j], -(kr - j) - off[1][1]) == CN_SV_FAIL)
      return CN_SV_FAIL;
  return bind_open_rest(env, s, self, a, b, kl, kr);
}

static cn_sv_result unify_row(cn_shape_env *env, const cn_sv_site *base, cn_sv_pending *self) {
  const int(*off)[2] = (const int(*)[2])self->off;
  cn_row *a = cn_row_resolve(env, self->c.r1), *b = cn_row_resolve(env, self->c.r2);
  if (!a || !b) return CN_SV_FAIL;
  cn_sv_site spec_site = *base;
  spec_site.spec_len = b->var < 0 ? b->n_trail : -1;
  if (a->var < 0 && b->var < 0) return unify_closed(env, &spec_site, off, a, b);
  if (a->var < 0 || b->var < 0) return unify_closed_open(env, &spec_site, off, a, b);
  return unify_open(env, &spec_site, self, a, b);
}

/* sub ⊑ super; may narrow the pending entry's rows to what is still undecided. */
static cn_sv_result ineq_row(cn_shape_env *env, const cn_sv_site *s, cn_sv_pending *p) {
  cn_row *sub = cn_row_resolve(env, p->c.r1), *sup = cn_row_resolve(env, p->c.r2);
  if (!sub || !sup) return CN_SV_FAIL;
  int sl = sup->var >= 0 ? sup->n_lead : 0, st = sup->n_trail, w = sup->var;
  cn_dim **supL = sup->lead, **supT = sup->trail;
  if (sub->var < 0) {
    int n = sub->n_trail;
    if (n < sl + st) {
      cn_sv_rank_conflict(env, s, sub, sup,
                          "the result has fewer axes than the operand it broadcasts");
      return CN_SV_FAIL;
    }
    for (int i = 0; i < sl; i++)
      if (pair_dims(env, s, true, sub->trail[i], p->off[0][0] + i, supL[i], p->off[1][0] + i) ==
          CN_SV_FAIL)
        return CN_SV_FAIL;
    for (int j = 0; j < st; j++)
      if (pair_dims(env, s, true, sub->trail[n - st + j], p->off[0][0] + n - st + j, supT[j],
                    trail_axis(sup, j, st, p->off[1][0], p->off[1][1])) == CN_SV_FAIL)
        return CN_SV_FAIL;
    if (w < 0) return CN_SV_DONE;
    if (sl == 0 && st == 0) return CN_SV_PEND; /* a lower bound of w, for finalization */
    p->c.r1 = cn_row_make(env, 0, NULL, -1, n - sl - st, sub->trail + sl);
    p->c.r2 = cn_row_make(env, 0, NULL, w, 0, NULL);
    p->off[0][0] += sl;
    p->off[1][0] += sl;
    p->off[1][1] += st;
    env->events++;
    return p->c.r1 && p->c.r2 ? CN_SV_PEND : CN_SV_FAIL;
  }
  int kr = sub->n_trail < st ? sub->n_trail : st;
  int kl = w >= 0 ? (sub->n_lead < sl ? sub->n_lead : sl) : 0;
  for (int j = 0; j < kr; j++)
    if (pair_dims(env, s, true, sub->trail[sub->n_trail - kr + j], -(kr - j) - p->off[0][1],
                  supT[st - kr + j],
                  trail_axis(sup, st - kr + j, st, p->off[1][0], p->off[1][1])) == CN_SV_FAIL)
      return CN_SV_FAIL;
  for (int i = 0; i < kl; i++)
    if (pair_dims(env, s, true, sub->lead[i], p->off[0][0] + i, supL[i], p->off[1][0] + i) ==
        CN_SV_FAIL)
      return CN_SV_FAIL;
  if (w == sub->var) {
    if (sub->n_lead - kl || sub->n_trail - kr || sl - kl || st - kr) {
      cn_sv_conflict(env, s, NULL, NULL,
                     "rank cycle: a row variable would have to broadcast to itself plus more axes");
      return CN_SV_FAIL;
    }
    return CN_SV_DONE;
  }
  if (w < 0 && st - kr == 0) return CN_SV_DONE; /* the implicit variable absorbs the rest */
  if (!kl && !kr) return CN_SV_PEND;
  return narrow(
      env, p, kl, kr,
      cn_row_make(env, sub->n_lead - kl, sub->lead + kl, sub->var, sub->n_trail - kr, sub->trail),
      w >= 0 ? cn_row_make(env, sl - kl, supL + kl, w, st - kr, supT)
             : cn_row_make(env, 0, NULL, -1, st - kr, supT));
}

/* ---- Row constraints ------------------------------------------------------------------------- */

static cn_sv_result total_elems(cn_shape_env *env, const cn_sv_site *s, cn_sv_pending *p) {
  cn_row *r = cn_row_resolve(env, p->c.r1);
  if (!r) return CN_SV_FAIL;
  int64_t product = 1;
  int unknown = 0;
  cn_dim *last_unknown = NULL;
  for (int i = 0; i < r->n_lead + r->n_trail; i++) {
    cn_dim *d = i < r->n_lead ? r->lead[i] : r->trail[i - r->n_lead];
    if (d->kind != CN_DIM_SOLVED) {
      unknown++;
      last_unknown = d;
    } else if (__builtin_mul_overflow(product, d->size, &product)) {
      cn_sv_conflict(env, s, NULL, NULL, "the row's known axes hold more than 2^63 - 1 elements");
      return CN_SV_FAIL;
    }
  }
  char what[256];
  int64_t num = p->c.count;
  bool known = true;
  if (p->c.d1) {
    cn_dim *v = cn_dim_resolve(env, p->c.d1);
    if (!v) return CN_SV_FAIL;
    known = v->kind == CN_DIM_SOLVED;
    int64_t scaled;
    if (known && __builtin_mul_overflow(v->size, p->c.coeff, &scaled)) {
      cn_sv_conflict(env, s, v, NULL, "the element count exceeds 2^63 - 1");
      return CN_SV_FAIL;
    }
    if (known) {
      if (scaled % p->c.denom != 0) {
        snprintf(what, sizeof what, "%lld * %lld is not divisible by %lld", (long long)p->c.coeff,
                 (long long)v->size, (long long)p->c.denom);
        cn_sv_conflict(env, s, v, NULL, what);
        return CN_SV_FAIL;
      }
      num = scaled / p->c.denom;
    }
  }
  if (known) {
    if (num % product != 0 || (r->var < 0 && unknown == 0 && num != product)) {
      snprintf(what, sizeof what, "the row must hold %lld elements but its known axes hold %lld%s",
               (long long)num, (long long)product, num % product ? " (not a divisor)" : "");
      cn_sv_conflict(env, s, NULL, NULL, what);
      return CN_SV_FAIL;
    }
    if (r->var < 0 && unknown == 0) return CN_SV_DONE;
    if (r->var < 0 && unknown == 1 && last_unknown->kind == CN_DIM_VAR) {
      cn_dim *d = cn_dim_solved(env, num / product, NULL);
      return d ? unify_dim(env, s, last_unknown, d) : CN_SV_FAIL;
    }
    return CN_SV_PEND;
  }
  if (r->var >= 0 || unknown) return CN_SV_PEND;
  int64_t count;
  if (__builtin_mul_overflow(product, p->c.denom, &count)) {
    cn_sv_conflict(env, s, NULL, NULL, "the element count exceeds 2^63 - 1");
    return CN_SV_FAIL;
  }
  if (count % p->c.coeff != 0) {
    snprintf(what, sizeof what, "%lld elements are not a multiple of %lld", (long long)product,
             (long long)p->c.coeff);
    cn_sv_conflict(env, s, NULL, NULL, what);
    return CN_SV_FAIL;
  }
  cn_dim *d = cn_dim_solved(env, count / p->c.coeff, NULL);
  return d ? unify_dim(env, s, p->c.d1, d) : CN_SV_FAIL;
}

static cn_sv_result min_dim(cn_shape_env *env, const cn_sv_site *s, cn_sv_pending *p) {
  cn_dim *d = cn_dim_resolve(env, p->c.d1);
  if (!d) return CN_SV_FAIL;
  if (d->kind == CN_DIM_VAR) {
    if (env->dim_min[d->var] < p->c.min && !cn_sv_set_min(env, d->var, p->c.min)) return CN_SV_FAIL;
    return CN_SV_DONE;
  }
  if (d->kind == CN_DIM_AFFINE) return CN_SV_PEND;
  if (d->size < p->c.min) {
    char what[160];
    snprintf(what, sizeof what, "fixed index %lld is out of range of an axis of size %lld",
             (long long)(p->c.min - 1), (long long)d->size);
    cn_sv_conflict(env, s, p->min_on_b ? NULL : d, p->min_on_b ? d : NULL, what);
    return CN_SV_FAIL;
  }
  return CN_SV_DONE;
}

static cn_sv_result process(cn_shape_env *env, cn_sv_pending *p) {
  bool dim_entry = p->c.kind == CN_SC_DIM_EQ || p->c.kind == CN_SC_DIM_INEQ;
  bool row_eq = p->c.kind == CN_SC_ROW_EQ;
  cn_sv_site s = {.op = p->op,
                  .c = &p->c,
                  .axis_a = p->axis_a,
                  .axis_b = p->axis_b,
                  .self = dim_entry ? p : NULL,
                  .spec_row = row_eq ? cn_sv_spec_row_of(p->op, &p->c) : p->spec_row,
                  .spec_len = -1,
                  .spec_pos = row_eq ? CN_SV_SPEC_WHOLE : p->spec_pos};
  p->reused = false;
  switch (p->c.kind) {
  case CN_SC_DIM_EQ: return unify_dim(env, &s, p->c.d1, p->c.d2);
  case CN_SC_DIM_INEQ: return ineq_dim(env, &s, p->c.d1, p->c.d2);
  case CN_SC_ROW_EQ:
  case CN_SC_EXACT: return unify_row(env, &s, p);
  case CN_SC_ROW_INEQ: return ineq_row(env, &s, p);
  case CN_SC_TOTAL: return total_elems(env, &s, p);
  case CN_SC_MIN_DIM: return min_dim(env, &s, p);
  }
  return CN_SV_FAIL;
}

/* Entry i has just become a `L va = vb T` row equality: a candidate of close_flanks. */
static bool note_flanks(cn_shape_env *env, int i) {
  if (!cn_arena_grow(env->ctx, (void **)&env->flank_entries, &env->cap_flank_entries,
                     env->n_flank_entries + 1, sizeof(int)))
    return false;
  env->flank_entries[env->n_flank_entries++] = i;
  return true;
}

cn_status cn_shape_solve(cn_shape_env *env, const cn_shape_op *op, const cn_shape_constraint *c) {
  cn_sv_pending p = {0};
  p.op = op;
  p.c = *c;
  p.axis_a = p.axis_b = CN_SV_NO_AXIS;
  cn_sv_result r = process(env, &p);
  if (r == CN_SV_FAIL) return env->ctx->status ? env->ctx->status : CN_ERR_INVALID;
  if (r == CN_SV_PEND && push_pending(env, &p) == CN_SV_FAIL) return CN_ERR_NOMEM;
  if (r == CN_SV_PEND && p.flanks && !note_flanks(env, env->n_pend - 1)) return CN_ERR_NOMEM;
  return CN_OK;
}

/* ---- Propagation ----------------------------------------------------------------------------- */

/* Processes entry i and records the outcome; false with the status set on failure. */
static bool step(cn_shape_env *env, int i) {
  cn_sv_pending local = env->pend[i]; /* processing may grow (move) the array */
  cn_sv_result r = process(env, &local);
  if (r == CN_SV_FAIL) return false;
  local.done = r == CN_SV_DONE;
  if (local.flanks && !env->pend[i].flanks && !note_flanks(env, i)) return false;
  if (memcmp(&local, &env->pend[i], sizeof local) != 0 && !cn_sv_set_pending(env, i, &local)) {
    return false;
  }
  if (r == CN_SV_DONE) env->events++;
  return cn_sv_note_entry(env, i, false);
}

static cn_status reference_sweeps(cn_shape_env *env) {
  long before;
  do {
    before = env->events;
    for (int i = 0; i < env->n_pend; i++)
      if (!env->pend[i].done && !step(env, i))
        return env->ctx->status ? env->ctx->status : CN_ERR_INVALID;
  } while (env->events != before);
  return CN_OK;
}

cn_status cn_shape_propagate(cn_shape_env *env) {
  if (env->reference) return reference_sweeps(env);
  cn_status st = CN_OK;
  for (;;) {
    int i = cn_sv_queue_pop(&env->sweep_now);
    if (i < 0) {
      cn_sv_queue t = env->sweep_now;
      env->sweep_now = env->sweep_next;
      env->sweep_next = t;
      if ((i = cn_sv_queue_pop(&env->sweep_now)) < 0) break;
    }
    if (!cn_sv_live(env, i)) continue;
    env->current = i;
    if (!step(env, i)) {
      st = env->ctx->status ? env->ctx->status : CN_ERR_INVALID;
      break;
    }
  }
  env->current = -1;
  return st;
}
