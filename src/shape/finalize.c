/* Finalization (shape.h, cn_shape_finalize): once online propagation is stuck, close what is
 * left in stages, each retried after propagation digests the previous one's binding: leaves close
 * upward to the least upper bound of their uses (rows, then dims), results close to the fewest
 * axes their operands need, Total_elems closes its row, intermediates whose operand rows are
 * still open close upward to their uses, row equalities left as `L va = vb T` pair their flanks
 * (the fewest axes), and finally guessing: a parameter's open
 * dimension is an error, other row variables become "no more axes" and dim variables their
 * minimum size.
 *
 * Candidates: each stage visits its candidates in the order of a full scan (row variables by
 * index, entries by index, shapes by creation) but, outside reference mode, only those its queue
 * holds: the variables and entries that changed since they were last found not closable
 * (worklist.c refills the queues whenever an entry changes, and a candidate's closability reads
 * only the entries that mention it). A stage's work is then proportional to what changed, and
 * the bindings are the full scan's, one at a time, in the same order.
 *
 * Invariants: each stage makes at most one binding and reports CN_SV_DONE when it did, so the
 * cheap principled stages always run before any guess; finalization is not trailed (a failure
 * leaves the environment partially closed). It sits above unify.c (it binds through worklist.c's
 * setters, then runs unify.c's propagation) and is called only from outside the solver. */
#include "shape/solver.h"

#include <string.h>

/* The candidates of a stage: every id below `end` in reference mode, else the queue's. */
typedef struct {
  cn_sv_queue *queue;
  int next, end;
} candidates;

static int next_candidate(const cn_shape_env *env, candidates *c) {
  if (env->reference) return c->next < c->end ? c->next++ : -1;
  return cn_sv_queue_pop(c->queue);
}

static cn_sv_pending *live_entry(cn_shape_env *env, int i) {
  return i < env->n_pend && !env->pend[i].done ? &env->pend[i] : NULL;
}

static bool same_dim(cn_shape_env *env, cn_dim *a, cn_dim *b) {
  a = cn_dim_resolve(env, a);
  b = cn_dim_resolve(env, b);
  if (a == b) return true;
  if (a->kind == CN_DIM_VAR && b->kind == CN_DIM_VAR) return a->var == b->var;
  return a->kind == CN_DIM_SOLVED && b->kind == CN_DIM_SOLVED && a->size == b->size &&
         (!a->label || !b->label || strcmp(a->label, b->label) == 0);
}

/* The number of axes of a closed row made only of broadcast units (a number's [1]), else -1.
 * Such an operand bounds its result's rank from below but says nothing of its sizes: a result
 * that has uses takes its axes from them first (a parameter's initializer `0.5 * uniform1 ()`
 * must take the parameter's axes, not the number's one). */
static int unit_axes(const cn_row *r) {
  if (r->var >= 0 || r->n_trail == 0) return -1;
  for (int i = 0; i < r->n_trail; i++)
    if (!cn_dim_is_unit(r->trail[i])) return -1;
  return r->n_trail;
}

static int min_rank(cn_shape_env *env, int v);

/* Leaves close upward: a row variable w whose every pending use is "flat row ⊑ w" becomes the
 * least upper bound of those rows (the common right-aligned axes; dims that disagree become a
 * fresh dim with the same inequalities, closed in turn). With `through`, w may also be the result
 * (sub) of constraints whose operand still has a row variable: an intermediate between a
 * parameter and a use that fixes its axes (`w * x` in `b + w * x`) takes the axes of its uses,
 * which then reach the parameter as it closes upward in turn; w still gets the fewest axes that
 * open operand must have (min_rank), which dropping its uses' unit axes must not go below.
 * Operands made of units never block (they broadcast to whatever w becomes) as long as the bound
 * leaves w the axes they need. */
static cn_sv_result close_row_upward_(cn_shape_env *env, bool through) {
  candidates c = {through ? &env->cand_through : &env->cand_upward, 0, env->n_rows};
  for (int w; (w = next_candidate(env, &c)) >= 0;) {
    if (env->row_bind[w]) continue;
    int n_uses = cn_sv_gather_row(env, w);
    if (n_uses < 0) return CN_SV_FAIL;
    int uses = 0, m = INT_MAX, need = 0;
    bool blocked = false;
    for (int u = 0; u < n_uses && !blocked; u++) {
      cn_sv_pending *p = &env->pend[env->gathered[u]];
      if (p->c.kind != CN_SC_ROW_INEQ) continue;
      cn_row *sup = cn_row_resolve(env, p->c.r2), *sub = cn_row_resolve(env, p->c.r1);
      if (!sup || !sub) return CN_SV_FAIL;
      if (sub->var == w) {
        int k = unit_axes(sup);
        if (k >= 0) {
          if (k - sub->n_lead - sub->n_trail > need) need = k - sub->n_lead - sub->n_trail;
        } else if (!through || sup->var < 0) {
          blocked = true;
        }
      }
      if (sup->var != w) continue;
      if (sub->var >= 0 || sup->n_lead || sup->n_trail) {
        blocked = true;
        break;
      }
      uses++;
      if (sub->n_trail < m) m = sub->n_trail;
    }
    if (blocked || !uses || m < need) continue;
    /* through an operand whose row is still open, w needs the axes that operand must get (its
     * own operands' units, a number's axis or a unit-sized batch row, reach w through it) */
    if (through) {
      int more = min_rank(env, w);
      if (more < 0) return CN_SV_FAIL;
      if (more > need) need = more;
      if (m < need) continue;
      if ((n_uses = cn_sv_gather_row(env, w)) < 0) return CN_SV_FAIL; /* min_rank reused it */
    }
    /* leftmost axes where every use has a unit need not exist in w: w broadcasts into them (a
     * number's axis in a result does not give the operand above an axis) */
    int drop = 0;
    for (bool all_units = true; all_units && drop < m - need; drop += all_units) {
      for (int u = 0; u < n_uses && all_units; u++) {
        cn_sv_pending *p = &env->pend[env->gathered[u]];
        if (p->c.kind != CN_SC_ROW_INEQ) continue;
        cn_row *sup = cn_row_resolve(env, p->c.r2), *sub = cn_row_resolve(env, p->c.r1);
        if (!sup || !sub) return CN_SV_FAIL;
        if (sup->var != w) continue;
        cn_dim *d = cn_dim_resolve(env, sub->trail[sub->n_trail - m + drop]);
        if (!d) return CN_SV_FAIL;
        all_units = cn_dim_is_unit(d);
      }
    }
    m -= drop;
    cn_dim **dims = cn_alloc(env->ctx, sizeof(cn_dim *) * (size_t)(m + 1));
    if (!dims) return CN_SV_FAIL;
    for (int j = 0; j < m; j++) {
      cn_dim *first = NULL;
      bool agree = true;
      for (int u = 0; u < n_uses; u++) {
        cn_sv_pending *p = &env->pend[env->gathered[u]];
        if (p->c.kind != CN_SC_ROW_INEQ) continue;
        cn_row *sup = cn_row_resolve(env, p->c.r2), *sub = cn_row_resolve(env, p->c.r1);
        if (!sup || !sub) return CN_SV_FAIL;
        if (sup->var != w) continue;
        cn_dim *d = sub->trail[sub->n_trail - m + j];
        if (!first)
          first = d;
        else if (!same_dim(env, first, d))
          agree = false;
      }
      dims[j] = agree ? first : cn_dim_var(env);
      if (!dims[j]) return CN_SV_FAIL;
    }
    cn_row *to = cn_row_make(env, 0, NULL, -1, m, dims);
    if (!to) return CN_SV_FAIL;
    if (!cn_sv_set_row(env, w, to)) return CN_SV_FAIL;
    env->events++;
    return CN_SV_DONE;
  }
  return CN_SV_PEND;
}

static cn_sv_result close_row_upward(cn_shape_env *env) {
  return close_row_upward_(env, false);
}

/* Runs only when the leaves, the results and Total_elems are closed, just before guessing. */
static cn_sv_result close_row_through(cn_shape_env *env) {
  return close_row_upward_(env, true);
}

/* A dim variable whose every pending use is "solved ⊑ v" becomes their least upper bound: the
 * common size, or 1 when they differ (1 broadcasts to every size). */
static cn_sv_result close_dim_upward(cn_shape_env *env) {
  candidates c = {&env->cand_dim, 0, env->n_pend};
  for (int i; (i = next_candidate(env, &c)) >= 0;) {
    cn_sv_pending *p = live_entry(env, i);
    if (!p || p->c.kind != CN_SC_DIM_INEQ) continue;
    cn_dim *v = cn_dim_resolve(env, p->c.d2);
    if (!v || v->kind != CN_DIM_VAR) continue;
    int n_uses = cn_sv_gather_dim(env, v->var);
    if (n_uses < 0) return CN_SV_FAIL;
    cn_dim *lub = NULL;
    bool blocked = false;
    for (int u = 0; u < n_uses && !blocked; u++) {
      cn_sv_pending *q = &env->pend[env->gathered[u]];
      if (q->c.kind != CN_SC_DIM_INEQ) continue;
      cn_dim *sup = cn_dim_resolve(env, q->c.d2), *sub = cn_dim_resolve(env, q->c.d1);
      if (sub->kind == CN_DIM_VAR && sub->var == v->var && !cn_dim_is_unit(sup)) blocked = true;
      if (sup->kind != CN_DIM_VAR || sup->var != v->var) continue;
      if (sub->kind != CN_DIM_SOLVED) {
        blocked = true;
      } else if (!lub) {
        lub = sub;
      } else if (!same_dim(env, lub, sub) && !(lub = cn_dim_solved(env, 1, NULL))) {
        return CN_SV_FAIL;
      }
    }
    if (blocked || !lub) continue;
    if (!cn_sv_set_dim(env, v->var, lub)) return CN_SV_FAIL;
    env->events++;
    return CN_SV_DONE;
  }
  return CN_SV_PEND;
}

/* Binds row variable v to n fresh dim variables (no row variable left); the dims, or NULL on an
 * allocation failure. */
static cn_dim **bind_fresh_dims(cn_shape_env *env, int v, int n) {
  cn_dim **dims = cn_alloc(env->ctx, sizeof(cn_dim *) * (size_t)(n + 1));
  if (!dims) return NULL;
  for (int j = 0; j < n; j++)
    if (!(dims[j] = cn_dim_var(env))) return NULL;
  cn_row *to = cn_row_make(env, 0, NULL, -1, n, dims);
  if (!to || !cn_sv_set_row(env, v, to)) return NULL;
  env->events++;
  return dims;
}

/* Results close to the fewest axes their operands need: a row variable v that is the sub of
 * pending "L v T ⊑ closed row" constraints gets as many fresh dims as the longest such operand
 * leaves uncovered, or more when an operand that still has a row variable must have more
 * (min_rank: a result never has fewer axes than its operands). When only
 * operands made of units (numbers) ask for more, a v that is itself an operand of something
 * waits: its uses give it its axes (a parameter's initializer takes the parameter's), or, if
 * nothing does, guessing gives it the fewest the units need. */
static cn_sv_result close_row_to_operands(cn_shape_env *env) {
  candidates c = {&env->cand_operands, 0, env->n_rows};
  for (int v; (v = next_candidate(env, &c)) >= 0;) {
    if (env->row_bind[v]) continue;
    int n_uses = cn_sv_gather_row(env, v);
    if (n_uses < 0) return CN_SV_FAIL;
    int need = -1, need_units = -1;
    bool used = false, open_operand = false;
    for (int u = 0; u < n_uses; u++) {
      cn_sv_pending *p = &env->pend[env->gathered[u]];
      if (p->c.kind != CN_SC_ROW_INEQ) continue;
      cn_row *sup = cn_row_resolve(env, p->c.r2), *sub = cn_row_resolve(env, p->c.r1);
      if (!sup || !sub) return CN_SV_FAIL;
      if (sup->var == v) used = true;
      if (sub->var == v && sup->var >= 0 && sup->var != v) open_operand = true;
      if (sub->var != v || sup->var >= 0) continue;
      int uncovered = sup->n_trail - sub->n_trail - sub->n_lead;
      if (uncovered < 0) uncovered = 0;
      int *into = unit_axes(sup) >= 0 ? &need_units : &need;
      if (uncovered > *into) *into = uncovered;
    }
    if (need_units > need) {
      if (used) continue;
      need = need_units;
    }
    if (need < 0) continue;
    if (open_operand) { /* it may need more axes than v's closed operands: v needs them too */
      int more = min_rank(env, v);
      if (more < 0) return CN_SV_FAIL;
      if (more > need) need = more;
    }
    return bind_fresh_dims(env, v, need) ? CN_SV_DONE : CN_SV_FAIL;
  }
  return CN_SV_PEND;
}

/* Total_elems closes the row variable of a row whose other dims are all known: to one axis
 * holding the rest when the count is known (none when nothing is left); when the count is still a
 * variable, first rows that already have axes close to no more (their product then gives the
 * count, as for the outputs of a vector conversion), then a bare row variable closes to one axis
 * that the count will size (the cells it converts). */
static cn_sv_result close_total(cn_shape_env *env) {
  int n_pend = env->n_pend;
  candidates c = {&env->cand_total, 0, 3 * n_pend}; /* sweep-major: (sweep, entry) */
  for (int k; (k = next_candidate(env, &c)) >= 0;) {
    int sweep = env->reference ? k / n_pend : k % 3, i = env->reference ? k % n_pend : k / 3;
    cn_sv_pending *p = live_entry(env, i);
    if (!p || p->c.kind != CN_SC_TOTAL) continue;
    cn_row *r = cn_row_resolve(env, p->c.r1);
    cn_dim *v = p->c.d1 ? cn_dim_resolve(env, p->c.d1) : NULL;
    if (!r || (p->c.d1 && !v)) return CN_SV_FAIL;
    if (r->var < 0) continue;
    int n = r->n_lead + r->n_trail;
    int64_t product = 1, num = p->c.count;
    bool all = true;
    bool huge = false; /* a count beyond int64: total_elems (unify.c) reports it */
    for (int j = 0; j < n; j++) {
      cn_dim *d = j < r->n_lead ? r->lead[j] : r->trail[j - r->n_lead];
      if (d->kind != CN_DIM_SOLVED)
        all = false;
      else
        huge = huge || __builtin_mul_overflow(product, d->size, &product);
    }
    bool known = !v || v->kind == CN_DIM_SOLVED;
    if (v && known) {
      huge = huge || __builtin_mul_overflow(v->size, p->c.coeff, &num);
      num /= p->c.denom;
    }
    if (huge) continue;
    if (!all || known != (sweep == 0) || (sweep == 1 && n == 0) || (sweep == 2 && n > 0)) continue;
    if (known && num % product) continue; /* reported once the row closes otherwise */
    cn_dim *rest = NULL;
    if (sweep == 2 || (sweep == 0 && num / product != 1)) {
      rest = sweep == 2 ? cn_dim_var(env) : cn_dim_solved(env, num / product, NULL);
      if (!rest) return CN_SV_FAIL;
    }
    cn_row *to = cn_row_make(env, 0, NULL, -1, rest ? 1 : 0, &rest);
    if (!to || !cn_sv_set_row(env, r->var, to)) return CN_SV_FAIL;
    env->events++;
    return CN_SV_DONE;
  }
  return CN_SV_PEND;
}

static bool row_has_var(cn_shape_env *env, const cn_row *r, int *row_var, cn_dim **dim_var,
                        int *axis) {
  cn_row *res = cn_row_resolve(env, r);
  if (!res) return false;
  *row_var = res->var;
  *dim_var = NULL;
  for (int i = 0; i < res->n_lead + res->n_trail; i++) {
    cn_dim *d = i < res->n_lead ? res->lead[i] : res->trail[i - res->n_lead];
    if (d->kind == CN_DIM_VAR || d->kind == CN_DIM_AFFINE) {
      *dim_var = d;
      *axis = res->var >= 0 && i >= res->n_lead ? -(res->n_lead + res->n_trail - i) : i;
      break;
    }
  }
  return res->var >= 0 || *dim_var;
}

static cn_dim *first_var_in(cn_shape_env *env, cn_dim *d) {
  d = cn_dim_resolve(env, d);
  if (d->kind == CN_DIM_VAR) return d;
  if (d->kind == CN_DIM_AFFINE) {
    cn_dim *o = first_var_in(env, d->affine.over);
    if (o) return o;
    if (d->affine.conv) return first_var_in(env, d->affine.kernel);
  }
  return NULL;
}

/* The fewest axes row variable v must get: the operands it broadcasts (pending "L v T ⊑ S") must
 * not outrank it, and an operand's open row needs as many in turn (a number's unit axis reaches
 * every result below it: in `w =+ (w *. 2)` the parameter w is below the number's result). Only
 * operands are followed, never uses: a result's axes do not flow up into its operands. Each
 * variable is visited once per call (memo in env, keyed by env->rank_call); a cycle, or a chain
 * deeper than MAX_RANK_DEPTH, counts 0 (a lower bound). -1 on allocation failure. */
#define MAX_RANK_DEPTH 64
static int min_rank_(cn_shape_env *env, int v, int depth) {
  if (depth > MAX_RANK_DEPTH) return 0;
  if (env->rank_seen[v] == env->rank_call) return env->rank_need[v];
  env->rank_seen[v] = env->rank_call;
  env->rank_need[v] = 0; /* what a cycle back to v reads */
  int n_uses = cn_sv_gather_row(env, v);
  if (n_uses < 0) return -1;
  /* the gathered list is scratch that the recursion reuses: copy the entries first */
  int *entries = cn_alloc(env->ctx, sizeof(int) * (size_t)(n_uses + 1));
  if (!entries) return -1;
  if (n_uses) memcpy(entries, env->gathered, sizeof(int) * (size_t)n_uses);
  int need = 0;
  for (int u = 0; u < n_uses; u++) {
    cn_sv_pending *p = &env->pend[entries[u]];
    if (p->done || p->c.kind != CN_SC_ROW_INEQ) continue;
    cn_row *sup = cn_row_resolve(env, p->c.r2), *sub = cn_row_resolve(env, p->c.r1);
    if (!sup || !sub) return -1;
    if (sub->var != v || sup->var == v) continue;
    int rank = sup->n_lead + sup->n_trail;
    if (sup->var >= 0) {
      int more = min_rank_(env, sup->var, depth + 1);
      if (more < 0) return -1;
      rank += more;
    }
    if (rank - sub->n_lead - sub->n_trail > need) need = rank - sub->n_lead - sub->n_trail;
  }
  env->rank_need[v] = need;
  return need;
}

static int min_rank(cn_shape_env *env, int v) {
  int had = env->cap_rank_seen;
  if (!cn_arena_grow(env->ctx, (void **)&env->rank_seen, &env->cap_rank_seen, env->n_rows,
                     sizeof(long)) ||
      !cn_arena_grow(env->ctx, (void **)&env->rank_need, &env->cap_rank_need, env->n_rows,
                     sizeof(int)))
    return -1;
  for (int i = had; i < env->cap_rank_seen; i++) env->rank_seen[i] = 0; /* arena memory */
  env->rank_call++;
  return min_rank_(env, v, 0);
}

static cn_sv_result bind_guess_dim(cn_shape_env *env, cn_dim *d) {
  cn_dim *v = first_var_in(env, d);
  CN_ASSERT(v);
  cn_dim *guessed = cn_dim_solved(env, env->dim_min[v->var], NULL);
  if (!guessed) return CN_SV_FAIL;
  if (!cn_sv_set_dim(env, v->var, guessed)) return CN_SV_FAIL;
  env->events++;
  return CN_SV_DONE;
}

/* Whether dim variable d is bounded only by broadcast units: every pending constraint on it is
 * "d ⊑ unit" or has d as the operand side. -1 on allocation failure. */
static int reads_only_units(cn_shape_env *env, const cn_dim *d) {
  int n_uses = cn_sv_gather_dim(env, d->var);
  if (n_uses < 0) return -1;
  bool any = false;
  for (int u = 0; u < n_uses; u++) {
    cn_sv_pending *q = &env->pend[env->gathered[u]];
    if (q->done) continue;
    if (q->c.kind != CN_SC_DIM_INEQ) return 0;
    cn_dim *sub = cn_dim_resolve(env, q->c.d1), *sup = cn_dim_resolve(env, q->c.d2);
    if (!sub || !sup) return -1;
    if (sub->kind != CN_DIM_VAR || sub->var != d->var) continue;
    if (!cn_dim_is_unit(sup)) return 0;
    any = true;
  }
  return any;
}

/* A row variable nothing determines gets the fewest axes it must have (min_rank), usually
 * none. Its fresh axes take what their operands give (propagation); those that only read units
 * (numbers) are guessed at once, before anything closes upward from this row: a number's unit
 * axis in a result must not become an open axis of the operands above it (a parameter's). */
static cn_sv_result bind_guess_row(cn_shape_env *env, int rv) {
  int need = min_rank(env, rv);
  cn_dim **dims = need < 0 ? NULL : bind_fresh_dims(env, rv, need);
  if (!dims) return CN_SV_FAIL;
  if (need && cn_shape_propagate(env) != CN_OK) return CN_SV_FAIL;
  for (int j = 0; j < need; j++) {
    cn_dim *d = cn_dim_resolve(env, dims[j]);
    if (!d) return CN_SV_FAIL;
    if (d->kind != CN_DIM_VAR) continue;
    int units = reads_only_units(env, d);
    if (units < 0 || (units && bind_guess_dim(env, d) == CN_SV_FAIL)) return CN_SV_FAIL;
  }
  return CN_SV_DONE;
}

static cn_sv_result param_undetermined(cn_shape_env *env, const cn_shape *sh, int k, bool dim,
                                       int axis) {
  if (dim)
    cn_fail(env->ctx, CN_ERR_INVALID,
            "shape inference: dimension %d of the %s row of parameter \"%s\" (#%d) is not "
            "determined: give it (shape so far: %s; ... is any number of axes and ? a size, not "
            "decided yet)",
            axis, cn_row_kind_name((cn_row_kind)k), sh->label, sh->id, cn_shape_str(env, sh));
  else
    cn_fail(env->ctx, CN_ERR_INVALID,
            "shape inference: the number of %s axes of parameter \"%s\" (#%d) is not "
            "determined: give its %s dims (shape so far: %s; ... is any number of axes and ? a "
            "size, not decided yet)",
            cn_row_kind_name((cn_row_kind)k), sh->label, sh->id, cn_row_kind_name((cn_row_kind)k),
            cn_shape_str(env, sh));
  return CN_SV_FAIL;
}

/* The first row of sh with a variable (k = CN_N_ROWS when none); with dims_only, the first with
 * an open dimension. False only on allocation failure. */
static bool open_row(cn_shape_env *env, const cn_shape *sh, bool dims_only, int *k, int *rv,
                     cn_dim **dv, int *axis) {
  for (*k = 0; *k < CN_N_ROWS; (*k)++) {
    *axis = 0;
    if (!row_has_var(env, sh->rows[*k], rv, dv, axis)) {
      if (env->ctx->status == CN_ERR_NOMEM) return false;
      continue;
    }
    if (!dims_only || *dv) return true;
  }
  return true;
}

/* Whether the dim variable v of parameter sh reads a broadcast unit: sh's own axis is the result
 * side of a pending "v ⊑ unit" (w.input against a number's output in `w * 2.0`), so any size
 * fits and its minimum is the least commitment. Units reached through other tensors (the
 * numbers of its initializer, which takes the parameter's axes) do not count. -1 on allocation
 * failure. */
static int reads_unit(cn_shape_env *env, const cn_shape *sh, cn_dim *v) {
  int n_uses = cn_sv_gather_dim(env, v->var);
  if (n_uses < 0) return -1;
  for (int u = 0; u < n_uses; u++) {
    cn_sv_pending *q = &env->pend[env->gathered[u]];
    if (q->done || q->c.kind != CN_SC_DIM_INEQ || !q->op || q->c.a.slot < 0) continue;
    if ((q->c.a.slot == 0 ? q->op->lhs : q->op->rhs[q->c.a.slot - 1]) != sh) continue;
    cn_dim *sub = cn_dim_resolve(env, q->c.d1), *sup = cn_dim_resolve(env, q->c.d2);
    if (!sub || !sup) return -1;
    if (sub->kind == CN_DIM_VAR && sub->var == v->var && cn_dim_is_unit(sup)) return 1;
  }
  return 0;
}

/* A parameter with an open dimension: an error naming the first, unless that dimension reads a
 * broadcast unit (it closes to its minimum). Outside reference mode only the
 * parameters whose variables changed since their last check are candidates: at the previous
 * guess no parameter had an open dimension (it would have failed), and one gains a dimension
 * variable only through a binding of a variable of its rows, which queues it. */
static cn_sv_result guess_param_dims(cn_shape_env *env) {
  candidates c = {&env->cand_params, 0, env->n_shapes};
  for (int i; (i = next_candidate(env, &c)) >= 0;) {
    cn_shape *sh = env->shapes[i];
    if (!sh->is_param || sh->guessable) continue;
    int k, rv, axis;
    cn_dim *dv;
    if (!cn_sv_note_param(env, sh, i, false) || !open_row(env, sh, true, &k, &rv, &dv, &axis))
      return CN_SV_FAIL;
    if (k == CN_N_ROWS) continue;
    if (!env->reference && !cn_sv_queue_push(env->ctx, &env->cand_params, i, i)) return CN_SV_FAIL;
    if (dv->kind == CN_DIM_VAR) {
      int unit = reads_unit(env, sh, dv);
      if (unit < 0) return CN_SV_FAIL;
      if (unit) return bind_guess_dim(env, dv);
    }
    return param_undetermined(env, sh, k, true, axis); /* still a candidate if asked again */
  }
  return CN_SV_PEND;
}

/* Parameters with an open row, once nothing else can close: an error naming the first. The
 * open-parameter list drops the parameters found closed for good. */
static cn_sv_result guess_param_rows(cn_shape_env *env) {
  int n = env->reference ? env->n_shapes : env->n_open_params, kept = 0;
  for (int i = 0; i < n; i++) {
    cn_shape *sh = env->shapes[env->reference ? i : env->open_params[i]];
    if (!sh->is_param || sh->guessable) continue;
    int k, rv, axis;
    cn_dim *dv;
    if (!open_row(env, sh, false, &k, &rv, &dv, &axis)) return CN_SV_FAIL;
    if (k == CN_N_ROWS) continue; /* closed: never open again */
    if (!env->reference) env->open_params[kept++] = env->open_params[i];
    return param_undetermined(env, sh, k, dv != NULL, axis);
  }
  if (!env->reference) env->n_open_params = kept;
  return CN_SV_PEND;
}

/* A non-parameter's first open row: its row variable becomes "no more axes", or its first dim
 * variable its minimum. Shapes before the cursor are closed (or parameters), for good. */
static cn_sv_result guess_shapes(cn_shape_env *env) {
  for (int i = env->reference ? 0 : env->guess_cursor; i < env->n_shapes; i++) {
    cn_shape *sh = env->shapes[i];
    if (!sh->is_param || sh->guessable) {
      int k, rv, axis;
      cn_dim *dv;
      if (!open_row(env, sh, false, &k, &rv, &dv, &axis)) return CN_SV_FAIL;
      if (k < CN_N_ROWS) return rv >= 0 ? bind_guess_row(env, rv) : bind_guess_dim(env, dv);
    }
    if (!env->reference) env->guess_cursor = i + 1;
  }
  return CN_SV_PEND;
}

/* Variables that only pending constraints mention (spec axes that no tensor keeps). */
static cn_sv_result guess_pending(cn_shape_env *env) {
  candidates c = {&env->cand_guess, 0, env->n_pend};
  for (int i; (i = next_candidate(env, &c)) >= 0;) {
    cn_sv_pending *p = live_entry(env, i);
    if (!p) continue;
    cn_dim *ds[2] = {p->c.d1, p->c.d2};
    for (int j = 0; j < 2; j++)
      if (ds[j] && first_var_in(env, ds[j])) return bind_guess_dim(env, ds[j]);
    cn_row *rs[2] = {p->c.r1, p->c.r2};
    for (int j = 0; j < 2; j++) {
      int rv, axis;
      cn_dim *dv;
      if (!rs[j] || !row_has_var(env, rs[j], &rv, &dv, &axis)) continue;
      return rv >= 0 ? bind_guess_row(env, rv) : bind_guess_dim(env, dv);
    }
  }
  return CN_SV_PEND;
}

/* A row equality left as `L va = vb T` (unify.c's bind_open_rest: no rank decided it): the
 * rule is the fewest axes, so the flanks pair as far as they go. The variable beside the longer
 * flank closes as a guess does (to no axes, unless its uses ask for more) and the other then
 * takes what is left: `oh, ow, ..c..` = `..v.., h, w, ic` pairs oh = h, ow = w and gives c the
 * one axis ic, where stacking would have made four axes. The earliest such entry first, in every
 * mode (the list is in order of deferral, which the modes need not share). */
static cn_sv_result close_flanks(cn_shape_env *env) {
  int best = -1, best_var = -1;
  for (int k = 0; k < env->n_flank_entries; k++) {
    int i = env->flank_entries[k];
    cn_sv_pending *p = live_entry(env, i);
    if (!p || !p->flanks || (best >= 0 && i > best)) continue;
    cn_row *a = cn_row_resolve(env, p->c.r1), *b = cn_row_resolve(env, p->c.r2);
    if (!a || !b) return CN_SV_FAIL;
    if (a->var < 0 || b->var < 0 || a->var == b->var) continue; /* propagation's to settle */
    int kl = a->n_lead < b->n_lead ? a->n_lead : b->n_lead;
    int kr = a->n_trail < b->n_trail ? a->n_trail : b->n_trail;
    int al = a->n_lead - kl, at = a->n_trail - kr, bl = b->n_lead - kl, bt = b->n_trail - kr;
    if (al && bt)
      best_var = al >= bt ? a->var : b->var;
    else if (bl && at)
      best_var = bl >= at ? b->var : a->var;
    else
      continue;
    best = i;
  }
  return best < 0 ? CN_SV_PEND : bind_guess_row(env, best_var);
}

/* Guessing, once nothing can be inferred: a parameter's open dimension is an error (parameters
 * refuse to be guessed); then a non-parameter's (or number-initialized parameter's) row variable
 * closes to "no more axes" and its dim variables to size 1 (or their minimum); then variables only
 * pending constraints mention; a parameter's row variable that nothing bounded even after that is
 * an error. */
static cn_sv_result guess(cn_shape_env *env) {
  cn_sv_result r = guess_param_dims(env);
  if (r == CN_SV_PEND) r = guess_shapes(env);
  if (r == CN_SV_PEND) r = guess_pending(env);
  return r == CN_SV_PEND ? guess_param_rows(env) : r;
}

cn_status cn_shape_finalize(cn_shape_env *env) {
  cn_sv_result (*const stages[])(cn_shape_env *) = {close_row_upward,
                                                    close_dim_upward,
                                                    close_row_to_operands,
                                                    close_total,
                                                    close_row_through,
                                                    close_flanks,
                                                    guess};
  for (;;) {
    cn_status st = cn_shape_propagate(env);
    if (env->span_overflow) return cn_sv_span_status(env); /* the cause of any other failure */
    if (st != CN_OK) return st;
    cn_sv_result r = CN_SV_PEND;
    for (size_t i = 0; i < sizeof stages / sizeof stages[0] && r == CN_SV_PEND; i++)
      r = stages[i](env);
    if (env->span_overflow) return cn_sv_span_status(env);
    if (r == CN_SV_FAIL) return env->ctx->status ? env->ctx->status : CN_ERR_INVALID;
    if (r == CN_SV_PEND) break;
  }
  /* A done entry stays done (a rollback only undoes the failed operation's own writes, made
   * after this cursor moved), so each entry is passed once over all finalizations. */
  while (env->first_open < env->n_pend && env->pend[env->first_open].done) env->first_open++;
  if (env->first_open < env->n_pend)
    return cn_sv_pending_conflict(env, &env->pend[env->first_open],
                                  "a constraint remains unsatisfiable after closing");
  return CN_OK;
}
