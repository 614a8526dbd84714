/* The solver's worklist (solver.h, issue 12): min-heap queues, the occurrence index (which
 * pending entries mention which variable), waking the entries of a changed variable, gathering a
 * variable's entries for finalization, and propagation.
 *
 * Propagation processes entries in the order the reference sweeps would reach them: a sweep goes
 * up the entry indices; an entry woken by the entry being processed joins this sweep when its
 * index is larger, else the next one, and new entries join this sweep (they have the largest
 * index). Entries that nothing woke are skipped: processing an entry whose variables did not
 * change decides nothing new (the narrowing of row entries consumes what it paired), so the
 * result is the reference sweeps' result, at the cost of the work that changes something.
 *
 * Invariants: the index and the queues are supersets (stale ids are filtered when read: an entry
 * past n_pend, done, or not mentioning the variable); in reference mode none of them is used. */
#include "shape/solver.h"

#include <stdlib.h>
#include <string.h>

/* ---- Queues ---------------------------------------------------------------------------------- */

static bool item_less(const cn_queue_item *a, const cn_queue_item *b) {
  return a->key < b->key;
}

bool cn_queue_push(cn_ctx *ctx, cn_queue *q, int id, int64_t key) {
  if (!cn_arena_grow(ctx, (void **)&q->queued, &q->cap_queued, id + 1, sizeof(bool))) return false;
  if (q->queued[id]) return true;
  if (!cn_arena_grow(ctx, (void **)&q->items, &q->cap, q->n + 1, sizeof(cn_queue_item)))
    return false;
  q->queued[id] = true;
  int at = q->n++;
  cn_queue_item item = {key, id};
  while (at > 0 && item_less(&item, &q->items[(at - 1) / 2])) {
    q->items[at] = q->items[(at - 1) / 2];
    at = (at - 1) / 2;
  }
  q->items[at] = item;
  return true;
}

int cn_queue_pop(cn_queue *q) {
  if (!q->n) return -1;
  int id = q->items[0].id;
  q->queued[id] = false;
  cn_queue_item last = q->items[--q->n];
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

static bool index_var(cn_shape_env *env, int **head, int *cap, int var) {
  int old = *cap;
  if (!cn_arena_grow(env->ctx, (void **)head, cap, var + 1, sizeof(int))) return false;
  for (int v = old; v < *cap; v++) (*head)[v] = -1;
  (*head)[var] = -1;
  return true;
}

bool cn_sv_index_row_var(cn_shape_env *env, int var) {
  return index_var(env, &env->row_head, &env->cap_row_head, var) &&
         index_var(env, &env->row_param_head, &env->cap_row_param_head, var);
}

bool cn_sv_index_dim_var(cn_shape_env *env, int var) {
  return index_var(env, &env->dim_head, &env->cap_dim_head, var) &&
         index_var(env, &env->dim_param_head, &env->cap_dim_param_head, var);
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

static bool live(const cn_shape_env *env, int entry) {
  return entry < env->n_pend && !env->pend[entry].done;
}

/* The candidate queues a row variable feeds: the three row stages of finalization. */
static bool mark_row_var(cn_shape_env *env, int var) {
  return cn_queue_push(env->ctx, &env->cand_upward, var, var) &&
         cn_queue_push(env->ctx, &env->cand_operands, var, var) &&
         cn_queue_push(env->ctx, &env->cand_through, var, var);
}

/* A dim inequality over the variable changed: the variable's closing upward is decided anew, so
 * its dim inequalities are candidates again. */
static bool mark_dim_var(cn_shape_env *env, int var) {
  for (int r = env->dim_head[var]; r >= 0; r = env->reg_next[r]) {
    int e = env->reg_entry[r];
    if (live(env, e) && env->pend[e].c.kind == CN_SC_DIM_INEQ &&
        !cn_queue_push(env->ctx, &env->cand_dim, e, e))
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
  if (n->param) return reg(env, &env->dim_param_head[d->var], n->entry);
  if (n->registering && !reg(env, &env->dim_head[d->var], n->entry)) return false;
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
  if (n->param) return reg(env, &env->row_param_head[r->var], n->entry);
  if (n->registering && !reg(env, &env->row_head[r->var], n->entry)) return false;
  return mark_row_var(env, r->var);
}

bool cn_sv_note_param(cn_shape_env *env, const cn_shape *sh, int i, bool queue) {
  if (env->reference) return true;
  noter n = {env, i, true, true, false};
  for (int k = 0; k < CN_N_ROWS; k++)
    if (!note_row(&n, sh->rows[k])) return false;
  return !queue || cn_queue_push(env->ctx, &env->cand_params, i, i);
}

bool cn_sv_note_entry(cn_shape_env *env, int i, bool fresh) {
  if (env->reference) return true;
  const pending *p = &env->pend[i];
  noter n = {env, i, false, !p->done, p->c.kind == CN_SC_DIM_INEQ};
  if ((p->c.r1 && !note_row(&n, p->c.r1)) || (p->c.r2 && !note_row(&n, p->c.r2)) ||
      (p->c.d1 && !note_dim(&n, p->c.d1)) || (p->c.d2 && !note_dim(&n, p->c.d2)))
    return false;
  if (p->done) return true;
  cn_ctx *ctx = env->ctx;
  if (p->c.kind == CN_SC_DIM_INEQ && !cn_queue_push(ctx, &env->cand_dim, i, i)) return false;
  if (p->c.kind == CN_SC_TOTAL)
    for (int sweep = 0; sweep < 3; sweep++)
      if (!cn_queue_push(ctx, &env->cand_total, 3 * i + sweep, ((int64_t)sweep << 32) | i))
        return false;
  if (!cn_queue_push(ctx, &env->cand_guess, i, i)) return false;
  if (!fresh) return true;
  return cn_queue_push(ctx, i > env->current ? &env->sweep_now : &env->sweep_next, i, i);
}

static bool wake(cn_shape_env *env, int head) {
  for (int r = head; r >= 0; r = env->reg_next[r]) {
    int e = env->reg_entry[r];
    if (!live(env, e)) continue;
    if (!cn_queue_push(env->ctx, e > env->current ? &env->sweep_now : &env->sweep_next, e, e))
      return false;
  }
  return true;
}

static bool wake_params(cn_shape_env *env, int head) {
  for (int r = head; r >= 0; r = env->reg_next[r]) {
    int i = env->reg_entry[r];
    if (i < env->n_shapes && !cn_queue_push(env->ctx, &env->cand_params, i, i)) return false;
  }
  return true;
}

bool cn_sv_wake_row(cn_shape_env *env, int var) {
  return env->reference ||
         (wake(env, env->row_head[var]) && wake_params(env, env->row_param_head[var]));
}

bool cn_sv_wake_dim(cn_shape_env *env, int var) {
  return env->reference ||
         (wake(env, env->dim_head[var]) && wake_params(env, env->dim_param_head[var]));
}

static int compare_ints(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

static int gather(cn_shape_env *env, int head) {
  int n = 0;
  if (env->reference) {
    for (int e = 0; e < env->n_pend; e++) {
      if (!live(env, e)) continue;
      if (!cn_arena_grow(env->ctx, (void **)&env->gathered, &env->cap_gathered, n + 1, sizeof(int)))
        return -1;
      env->gathered[n++] = e;
    }
    return n;
  }
  for (int r = head; r >= 0; r = env->reg_next[r]) {
    int e = env->reg_entry[r];
    if (!live(env, e)) continue;
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
  return gather(env, env->reference ? -1 : env->row_head[var]);
}

int cn_sv_gather_dim(cn_shape_env *env, int var) {
  return gather(env, env->reference ? -1 : env->dim_head[var]);
}

/* ---- Propagation ----------------------------------------------------------------------------- */

/* Processes entry i and records the outcome; false with the status set on failure. */
static bool step(cn_shape_env *env, int i) {
  pending local = env->pend[i]; /* processing may grow (move) the array */
  result r = cn_sv_process(env, &local);
  if (r == R_FAIL) return false;
  local.done = r == R_DONE;
  if (memcmp(&local, &env->pend[i], sizeof local) != 0 && !cn_sv_set_pending(env, i, &local)) {
    return false;
  }
  if (r == R_DONE) env->events++;
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
    int i = cn_queue_pop(&env->sweep_now);
    if (i < 0) {
      cn_queue t = env->sweep_now;
      env->sweep_now = env->sweep_next;
      env->sweep_next = t;
      if ((i = cn_queue_pop(&env->sweep_now)) < 0) break;
    }
    if (!live(env, i)) continue;
    env->current = i;
    if (!step(env, i)) {
      st = env->ctx->status ? env->ctx->status : CN_ERR_INVALID;
      break;
    }
  }
  env->current = -1;
  return st;
}
