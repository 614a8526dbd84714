/* The solver's worklist (solver.h, issue 12), the layer just above term.c: min-heap queues, the
 * occurrence index (which pending entries and parameters mention which variable), gathering a
 * variable's entries for finalization, and the trailed writes to the substitution, which wake
 * the entries registered under the variable they change (propagation, in unify.c, then processes
 * them). It reads terms through resolution only and calls no pass above it.
 *
 * Invariants: the index and the queues are supersets (stale ids are filtered when read: an entry
 * past n_pend, done, or not mentioning the variable); a variable's chain exists once something
 * registers under it (before that it is empty); in reference mode none of them is used. Every
 * write made while an operation is added (env->trailing) is on the trail first, so
 * cn_sv_rollback restores the environment exactly. */
#include "shape/solver.h"

#include <stdlib.h>

/* ---- Queues ---------------------------------------------------------------------------------- */

static bool item_less(const cn_sv_queue_item *a, const cn_sv_queue_item *b) {
  return a->key < b->key;
}

bool cn_sv_queue_push(cn_ctx *ctx, cn_sv_queue *q, int id, int64_t key) {
  if (!cn_arena_grow(ctx, (void **)&q->queued, &q->cap_queued, id + 1, sizeof(bool))) return false;
  if (q->queued[id]) return true;
  if (!cn_arena_grow(ctx, (void **)&q->items, &q->cap, q->n + 1, sizeof(cn_sv_queue_item)))
    return false;
  q->queued[id] = true;
  int at = q->n++;
  cn_sv_queue_item item = {key, id};
  while (at > 0 && item_less(&item, &q->items[(at - 1) / 2])) {
    q->items[at] = q->items[(at - 1) / 2];
    at = (at - 1) / 2;
  }
  q->items[at] = item;
  return true;
}

int cn_sv_queue_pop(cn_sv_queue *q) {
  if (!q->n) return -1;
  int id = q->items[0].id;
  q->queued[id] = false;
  cn_sv_queue_item last = q->items[--q->n];
  int at = 0;
  for (;;) {
    int child = 2 * at + 1;
    if (child >= q->n) break;
    if (child + 1 < q->n && item_less(&q->items[child + 1], &q->items[child])) child++;
    if (!item_less(&q->items[child], &last)) break;
    q->items[at] = q->items[child];
    at = child;
  }
  if (q->n) q->items[at] = last;
  return id;
}

/* ---- The occurrence index -------------------------------------------------------------------- */

/* A variable's chain head; variables get their chains on demand (term.c creates them without
 * telling the index), so a variable past the array has an empty chain. */
static int chain_head(const int *head, int cap, int var) {
  return var < cap ? head[var] : -1;
}

/* The variable's chain head to register into, the array grown (new chains empty); NULL on
 * allocation failure. */
static int *chain_slot(cn_shape_env *env, int **head, int *cap, int var) {
  int old = *cap;
  if (!cn_arena_grow(env->ctx, (void **)head, cap, var + 1, sizeof(int))) return NULL;
  for (int v = old; v < *cap; v++) (*head)[v] = -1;
  return &(*head)[var];
}

static bool reg(cn_shape_env *env, int *head, int entry) {
  if (*head >= 0 && env->reg_entry[*head] == entry) return true;
  int need = env->n_reg + 1;
  if (!cn_arena_grow(env->ctx, (void **)&env->reg_entry, &env->cap_reg, need, sizeof(int)) ||
      !cn_arena_grow(env->ctx, (void **)&env->reg_next, &env->cap_reg_next, need, sizeof(int)))
    return false;
  env->reg_entry[env->n_reg] = entry;
  env->reg_next[env->n_reg] = *head;
  *head = env->n_reg++;
  return true;
}

/* The candidate queues a row variable feeds: the three row stages of finalization. */
static bool mark_row_var(cn_shape_env *env, int var) {
  return cn_sv_queue_push(env->ctx, &env->cand_upward, var, var) &&
         cn_sv_queue_push(env->ctx, &env->cand_operands, var, var) &&
         cn_sv_queue_push(env->ctx, &env->cand_through, var, var);
}

/* A dim inequality over the variable changed: the variable's closing upward is decided anew, so
 * its dim inequalities are candidates again. */
static bool mark_dim_var(cn_shape_env *env, int var) {
  for (int r = chain_head(env->dim_head, env->cap_dim_head, var); r >= 0; r = env->reg_next[r]) {
    int e = env->reg_entry[r];
    if (cn_sv_live(env, e) && env->pend[e].c.kind == CN_SC_DIM_INEQ &&
        !cn_sv_queue_push(env->ctx, &env->cand_dim, e, e))
      return false;
  }
  return true;
}

typedef struct {
  cn_shape_env *env;
  int entry;        /* or a parameter's shape index */
  bool param;       /* registers a parameter's shape, marks nothing */
  bool registering; /* a live entry registers; a decided one only marks */
  bool dim_ineq;
} noter;

static bool note_dim(noter *n, cn_dim *d) {
  cn_shape_env *env = n->env;
  d = cn_dim_resolve(env, d);
  if (!d) return false;
  if (d->kind == CN_DIM_AFFINE)
    return note_dim(n, d->affine.over) && (!d->affine.conv || note_dim(n, d->affine.kernel));
  if (d->kind != CN_DIM_VAR) return true;
  if (n->param) {
    int *head = chain_slot(env, &env->dim_param_head, &env->cap_dim_param_head, d->var);
    return head && reg(env, head, n->entry);
  }
  if (n->registering) {
    int *head = chain_slot(env, &env->dim_head, &env->cap_dim_head, d->var);
    if (!head || !reg(env, head, n->entry)) return false;
  }
  return !n->dim_ineq || mark_dim_var(env, d->var);
}

static bool note_row(noter *n, const cn_row *r) {
  cn_shape_env *env = n->env;
  r = cn_row_resolve(env, r);
  if (!r) return false;
  for (int i = 0; i < r->n_lead; i++)
    if (!note_dim(n, r->lead[i])) return false;
  for (int i = 0; i < r->n_trail; i++)
    if (!note_dim(n, r->trail[i])) return false;
  if (r->var < 0) return true;
  if (n->param) {
    int *head = chain_slot(env, &env->row_param_head, &env->cap_row_param_head, r->var);
    return head && reg(env, head, n->entry);
  }
  if (n->registering) {
    int *head = chain_slot(env, &env->row_head, &env->cap_row_head, r->var);
    if (!head || !reg(env, head, n->entry)) return false;
  }
  return mark_row_var(env, r->var);
}

bool cn_sv_note_param(cn_shape_env *env, const cn_shape *sh, int i, bool queue) {
  if (env->reference) return true;
  noter n = {env, i, true, true, false};
  for (int k = 0; k < CN_N_ROWS; k++)
    if (!note_row(&n, sh->rows[k])) return false;
  return !queue || cn_sv_queue_push(env->ctx, &env->cand_params, i, i);
}

bool cn_sv_note_entry(cn_shape_env *env, int i, bool fresh) {
  if (env->reference) return true;
  const cn_sv_pending *p = &env->pend[i];
  noter n = {env, i, false, !p->done, p->c.kind == CN_SC_DIM_INEQ};
  if ((p->c.r1 && !note_row(&n, p->c.r1)) || (p->c.r2 && !note_row(&n, p->c.r2)) ||
      (p->c.d1 && !note_dim(&n, p->c.d1)) || (p->c.d2 && !note_dim(&n, p->c.d2)))
    return false;
  if (p->done) return true;
  cn_ctx *ctx = env->ctx;
  if (p->c.kind == CN_SC_DIM_INEQ && !cn_sv_queue_push(ctx, &env->cand_dim, i, i)) return false;
  if (p->c.kind == CN_SC_TOTAL)
    for (int sweep = 0; sweep < 3; sweep++)
      if (!cn_sv_queue_push(ctx, &env->cand_total, 3 * i + sweep, ((int64_t)sweep << 32) | i))
        return false;
  if (!cn_sv_queue_push(ctx, &env->cand_guess, i, i)) return false;
  if (!fresh) return true;
  return cn_sv_queue_push(ctx, i > env->current ? &env->sweep_now : &env->sweep_next, i, i);
}

static bool wake(cn_shape_env *env, int head) {
  for (int r = head; r >= 0; r = env->reg_next[r]) {
    int e = env->reg_entry[r];
    if (!cn_sv_live(env, e)) continue;
    if (!cn_sv_queue_push(env->ctx, e > env->current ? &env->sweep_now : &env->sweep_next, e, e))
      return false;
  }
  return true;
}

static bool wake_params(cn_shape_env *env, int head) {
  for (int r = head; r >= 0; r = env->reg_next[r]) {
    int i = env->reg_entry[r];
    if (i < env->n_shapes && !cn_sv_queue_push(env->ctx, &env->cand_params, i, i)) return false;
  }
  return true;
}

/* A binding or minimum of the variable changed: its entries are processed again and its
 * parameters checked again. */
static bool wake_row(cn_shape_env *env, int var) {
  return env->reference ||
         (wake(env, chain_head(env->row_head, env->cap_row_head, var)) &&
          wake_params(env, chain_head(env->row_param_head, env->cap_row_param_head, var)));
}

static bool wake_dim(cn_shape_env *env, int var) {
  return env->reference ||
         (wake(env, chain_head(env->dim_head, env->cap_dim_head, var)) &&
          wake_params(env, chain_head(env->dim_param_head, env->cap_dim_param_head, var)));
}

static int compare_ints(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static int gather(cn_shape_env *env, int head) {
  int n = 0;
  if (env->reference) {
    for (int e = 0; e < env->n_pend; e++) {
      if (!cn_sv_live(env, e)) continue;
      if (!cn_arena_grow(env->ctx, (void **)&env->gathered, &env->cap_gathered, n + 1, sizeof(int)))
        return -1;
      env->gathered[n++] = e;
    }
    return n;
  }
  for (int r = head; r >= 0; r = env->reg_next[r]) {
    int e = env->reg_entry[r];
    if (!cn_sv_live(env, e)) continue;
    if (!cn_arena_grow(env->ctx, (void **)&env->gathered, &env->cap_gathered, n + 1, sizeof(int)))
      return -1;
    env->gathered[n++] = e;
  }
  if (n < 2) return n;
  qsort(env->gathered, (size_t)n, sizeof(int), compare_ints);
  int kept = 0;
  for (int k = 0; k < n; k++)
    if (!kept || env->gathered[kept - 1] != env->gathered[k])
      env->gathered[kept++] = env->gathered[k];
  return kept;
}

int cn_sv_gather_row(cn_shape_env *env, int var) {
  return gather(env, env->reference ? -1 : chain_head(env->row_head, env->cap_row_head, var));
}

int cn_sv_gather_dim(cn_shape_env *env, int var) {
  return gather(env, env->reference ? -1 : chain_head(env->dim_head, env->cap_dim_head, var));
}

/* ---- Trailed writes -------------------------------------------------------------------------- */

static bool record(cn_shape_env *env, const cn_sv_undo *u) {
  if (!env->trailing) return true;
  if (!cn_arena_grow(env->ctx, (void **)&env->trail, &env->cap_trail, env->n_trail + 1,
                     sizeof(cn_sv_undo)))
    return false;
  env->trail[env->n_trail++] = *u;
  return true;
}

bool cn_sv_set_dim(cn_shape_env *env, int var, cn_dim *to) {
  cn_sv_undo u = {.kind = CN_SV_UNDO_DIM, .index = var, .dim = env->dim_bind[var]};
  if (!record(env, &u)) return false;
  env->dim_bind[var] = to;
  env->stamp++;
  return wake_dim(env, var);
}

bool cn_sv_set_row(cn_shape_env *env, int var, cn_row *to) {
  cn_sv_undo u = {.kind = CN_SV_UNDO_ROW, .index = var, .row = env->row_bind[var]};
  if (!record(env, &u)) return false;
  env->row_bind[var] = to;
  env->stamp++;
  return wake_row(env, var);
}

bool cn_sv_set_min(cn_shape_env *env, int var, int64_t min) {
  cn_sv_undo u = {.kind = CN_SV_UNDO_MIN, .index = var, .min = env->dim_min[var]};
  if (!record(env, &u)) return false;
  env->dim_min[var] = min;
  env->stamp++;
  return wake_dim(env, var);
}

bool cn_sv_set_pending(cn_shape_env *env, int i, const cn_sv_pending *p) {
  cn_sv_undo u = {.kind = CN_SV_UNDO_PEND, .index = i, .pend = env->pend[i]};
  if (!record(env, &u)) return false;
  env->pend[i] = *p;
  return true;
}

/* Undoes every recorded write, newest first, and drops the pending entries added since (the
 * index and the queues may still name them: they are filtered when read). */
void cn_sv_rollback(cn_shape_env *env, int n_pend) {
  for (int i = env->n_trail - 1; i >= 0; i--) {
    const cn_sv_undo *u = &env->trail[i];
    switch (u->kind) {
    case CN_SV_UNDO_DIM: env->dim_bind[u->index] = u->dim; break;
    case CN_SV_UNDO_MIN: env->dim_min[u->index] = u->min; break;
    case CN_SV_UNDO_ROW: env->row_bind[u->index] = u->row; break;
    case CN_SV_UNDO_PEND: env->pend[u->index] = u->pend; break;
    }
  }
  env->n_trail = 0;
  env->n_pend = n_pend;
  env->stamp++;
}
