/* Loop fusion: a nest that reads what the nest just before it wrote, cell by cell, joins its loops.
 *
 * Contract: two top-level perfect nests F and S of a procedure, consecutive but for comments, are
 * replaced by one nest running F's body then S's body (S's loop variables renamed to F's) under
 * F's loops when: they have the same depth and, loop by loop, the same box and no affine bounds;
 * every store of F and of S writes one cell per iteration (its indices are the nest's loop
 * variables, one per axis, each once, or 0 on an axis of size 1), all stores of a nest into one
 * buffer through one index map; S accesses a buffer F writes only at the index F writes it (its
 * loops renamed); and F accesses a buffer S writes only at the index S writes it (an update in
 * place, m := 0.9 m then m := m + 0.1 g). Then at iteration i, S reads cells that F wrote at
 * iteration i or cells F leaves alone, and F's later iterations never see what S writes at i:
 * every cell gets the same sequence of values as when F ran whole before S, so the results are
 * the same bits, while a
 * value S reads right after F stored it is still in a register or in L1 (c = a + 3*b lowered as
 * two nests reads the product back from memory otherwise). The fused nest may fuse again with the
 * next one, so a chain of element-wise operations becomes one loop nest. Every buffer is still
 * stored: fusion never removes a node the host or another routine may read (the virtual pass
 * removes those it may). Runs after the loop order, on nests whose loops it then no longer moves
 * (a nest of several stores keeps its order). */
#include "sched/sched.h"

#include <string.h>

/* The most stores a fused nest holds: fusing saves a reload per member, while one nest of hundreds
 * of stores (a long element-wise chain) would become one C function the compiler takes
 * superlinear time on, the reason routines are split into kernels (cgen.c). */
#define FUSE_MAX_STORES 8

static bool same_indices(int rank, const cn_index *a, const cn_index *b) {
  for (int d = 0; d < rank; d++)
    if (!cn_index_equal(&a[d], &b[d])) return false;
  return true;
}

/* Whether a write of F reaches one cell per iteration: each axis is a distinct loop variable of
 * the nest (every loop one axis), or 0 on an axis of size 1. */
static bool one_cell_per_iteration(const cn_ll_proc *proc, const cn_sched_nest *f,
                                   const cn_sched_access *w) {
  const cn_node *node = proc->params[w->param].node;
  int rank = node->rank, fixed = 0;
  for (int d = 0; d < rank; d++) fixed += cn_sched_single_cell_axis(node, d, &w->idx[d]);
  if (rank - fixed != f->depth) return false;
  unsigned seen = 0;
  for (int d = 0; d < rank; d++) {
    if (cn_sched_single_cell_axis(node, d, &w->idx[d])) continue;
    if (w->idx[d].kind != CN_IDX_ITER || w->idx[d].offset != 0) return false;
    int k = 0;
    while (k < f->depth && f->loops[k]->u.loop.sym != w->idx[d].syms[0]) k++;
    if (k == f->depth || (seen & (1u << k))) return false;
    seen |= 1u << k;
  }
  return true;
}

/* The renaming of nest s's loop variables to f's (loop k of s is loop k of f), as a
 * substitution (subst.c). */
typedef struct {
  cn_symbol from[CN_SCHED_MAX_DEPTH], to[CN_SCHED_MAX_DEPTH];
  int64_t one[CN_SCHED_MAX_DEPTH], zero[CN_SCHED_MAX_DEPTH];
  cn_sched_subst sub;
} renaming;

static void renaming_of(const cn_sched_nest *f, const cn_sched_nest *s, renaming *r) {
  for (int k = 0; k < s->depth; k++) {
    r->from[k] = s->loops[k]->u.loop.sym;
    r->to[k] = f->loops[k]->u.loop.sym;
    r->one[k] = 1;
    r->zero[k] = 0;
  }
  r->sub = (cn_sched_subst){s->depth, r->from, r->to, r->one, r->zero};
}

/* The nests fused so far: the first one's loops, the bodies in order (S's renamed), and per
 * param of the procedure the index map the group writes it through (NULL: not written), whether
 * the group accesses it, the map of its first access and whether a later one differs from it;
 * `touched` lists the params whose entries are set. */
typedef struct {
  cn_sched_nest first;
  cn_ll_stmt *first_stmt;
  int slot; /* its place in the output list */
  cn_ll_stmt **bodies;
  int n_bodies, cap_bodies, n_stores;
  const cn_index **write_idx, **first_idx;
  bool *accessed, *scattered;
  int *touched, n_touched;
} group;

/* Records a member's access of a param of `rank` axes (indices renamed to the group's loops). */
static void note_access(group *g, int param, int rank, const cn_index *idx, bool write) {
  if (!g->accessed[param]) {
    g->touched[g->n_touched++] = param;
    g->first_idx[param] = idx;
  } else if (!same_indices(rank, g->first_idx[param], idx)) {
    g->scattered[param] = true;
  }
  g->accessed[param] = true;
  if (write) g->write_idx[param] = idx;
}

/* Whether every write of nest n reaches one cell per iteration, each buffer through one map. */
static bool writes_cells(const cn_ll_proc *proc, const cn_sched_nest *n) {
  for (int a = 0; a < n->n_access; a++) {
    const cn_sched_access *w = &n->access[a];
    if (!w->write) continue;
    if (!one_cell_per_iteration(proc, n, w)) return false;
    for (int b = 0; b < a; b++)
      if (n->access[b].write && n->access[b].param == w->param &&
          !same_indices(proc->params[w->param].node->rank, n->access[b].idx, w->idx))
        return false;
  }
  return true;
}

static bool same_boxes(const cn_sched_nest *f, const cn_sched_nest *s) {
  if (f->depth != s->depth) return false;
  for (int k = 0; k < f->depth; k++) {
    const cn_ll_stmt *a = f->loops[k], *b = s->loops[k];
    if (a->u.loop.from != b->u.loop.from || a->u.loop.to != b->u.loop.to || a->u.loop.n_lower ||
        a->u.loop.n_upper || b->u.loop.n_lower || b->u.loop.n_upper)
      return false;
  }
  return true;
}

/* The accesses of s with its loop variables renamed to the group's; NULL on allocation failure. */
static cn_index *renamed_indices(cn_ctx *ctx, const cn_ll_proc *proc, const renaming *r,
                                 const cn_sched_nest *s) {
  int total = 0;
  for (int a = 0; a < s->n_access; a++) total += proc->params[s->access[a].param].node->rank;
  cn_index *all = cn_alloc(ctx, sizeof *all * (size_t)(total > 0 ? total : 1));
  if (!all) return NULL;
  for (int a = 0, at = 0; a < s->n_access; a++) {
    int rank = proc->params[s->access[a].param].node->rank;
    for (int d = 0; d < rank; d++)
      all[at + d] = cn_sched_subst_index(&r->sub, &s->access[a].idx[d]);
    at += rank;
  }
  return all;
}

/* Whether s, whose loops have the group's boxes, may join the group (the contract's conditions,
 * with the group as F). */
static bool may_join(const cn_ll_proc *proc, const group *g, const cn_sched_nest *s,
                     const cn_index *renamed) {
  if (g->n_stores + s->n_stores > FUSE_MAX_STORES || !writes_cells(proc, s)) return false;
  for (int a = 0, at = 0; a < s->n_access; a++) {
    const cn_sched_access *acc = &s->access[a];
    int rank = proc->params[acc->param].node->rank;
    const cn_index *w = g->write_idx[acc->param];
    /* s writes what the group accesses only where each of the group's iterations accesses the
     * very cell s's same iteration writes: the group's later iterations never see it */
    if (acc->write && g->accessed[acc->param] &&
        (g->scattered[acc->param] || !same_indices(rank, renamed + at, g->first_idx[acc->param])))
      return false;
    if (w && !same_indices(rank, renamed + at, w)) return false;
    at += rank;
  }
  return true;
}

static bool add_member(cn_ctx *ctx, const cn_ll_proc *proc, group *g, const cn_sched_nest *n,
                       const cn_index *renamed, cn_ll_stmt *body) {
  if (!cn_arena_grow(ctx, (void **)&g->bodies, &g->cap_bodies, g->n_bodies + 1, sizeof *g->bodies))
    return false;
  g->bodies[g->n_bodies++] = body;
  g->n_stores += n->n_stores;
  for (int a = 0, at = 0; a < n->n_access; a++) {
    note_access(g, n->access[a].param, proc->params[n->access[a].param].node->rank, renamed + at,
                n->access[a].write);
    at += proc->params[n->access[a].param].node->rank;
  }
  return true;
}

/* The group's nest: its first nest as it was when alone, else the first's loops around the
 * members' bodies in order. Clears the per-param entries. */
static cn_ll_stmt *close_group(cn_ctx *ctx, group *g) {
  for (int t = 0; t < g->n_touched; t++) {
    g->accessed[g->touched[t]] = g->scattered[g->touched[t]] = false;
    g->write_idx[g->touched[t]] = g->first_idx[g->touched[t]] = NULL;
  }
  g->n_touched = 0;
  if (g->n_bodies == 1) return g->first_stmt;
  cn_ll_stmt *body = cn_lb_seq_array(ctx, g->n_bodies, g->bodies);
  for (int k = g->first.depth - 1; k >= 0; k--)
    body = cn_sched_loop_copy(ctx, g->first.loops[k], body);
  return body;
}

/* Opens a group on nest n (read from stmt) at output slot `slot`, when its writes qualify. */
static cn_status open_group(cn_ctx *ctx, const cn_ll_proc *proc, group *g, cn_ll_stmt *stmt,
                            int slot, bool *opened) {
  bool found;
  g->first_stmt = stmt;
  cn_status st = cn_sched_nest_read(ctx, &g->first_stmt, &g->first, &found);
  *opened = st == CN_OK && found && !g->first.lanes && writes_cells(proc, &g->first);
  if (st != CN_OK || !*opened) return st;
  g->slot = slot;
  g->n_bodies = g->n_stores = 0;
  /* The first nest's own indices: renaming it to itself is the identity. */
  renaming self;
  renaming_of(&g->first, &g->first, &self);
  cn_index *same = renamed_indices(ctx, proc, &self, &g->first);
  if (!same ||
      !add_member(ctx, proc, g, &g->first, same, g->first.loops[g->first.depth - 1]->u.loop.body))
    return CN_ERR_NOMEM;
  return CN_OK;
}

cn_status cn_sched_fuse(cn_ctx *ctx, cn_ll_proc *proc) {
  cn_sched_stmts list = {0}, out = {0};
  if (!cn_sched_stmts_flatten(ctx, proc->body, &list)) return CN_ERR_NOMEM;
  size_t n_params = (size_t)(proc->n_params > 0 ? proc->n_params : 1);
  group g = {.write_idx = cn_alloc(ctx, sizeof *g.write_idx * n_params),
             .first_idx = cn_alloc(ctx, sizeof *g.first_idx * n_params),
             .accessed = cn_alloc(ctx, sizeof *g.accessed * n_params),
             .scattered = cn_alloc(ctx, sizeof *g.scattered * n_params),
             .touched = cn_alloc(ctx, sizeof *g.touched * n_params)};
  if (!g.write_idx || !g.first_idx || !g.accessed || !g.scattered || !g.touched)
    return CN_ERR_NOMEM;
  memset(g.write_idx, 0, sizeof *g.write_idx * n_params);
  memset(g.first_idx, 0, sizeof *g.first_idx * n_params);
  memset(g.accessed, 0, sizeof *g.accessed * n_params);
  memset(g.scattered, 0, sizeof *g.scattered * n_params);
  bool open = false;
  int fused = 0;
  for (int i = 0; i < list.n; i++) {
    cn_ll_stmt *st = list.items[i];
    if (st->kind == CN_LL_COMMENT) {
      if (!cn_sched_stmts_push(ctx, &out, st)) return CN_ERR_NOMEM;
      continue;
    }
    if (st->kind == CN_LL_FOR && open) {
      cn_sched_nest s;
      bool found;
      cn_ll_stmt *slot = st;
      if (cn_sched_nest_read(ctx, &slot, &s, &found) != CN_OK) return CN_ERR_NOMEM;
      /* renaming needs loop k <-> loop k; a sum in lanes keeps its body (loops.h) */
      bool aligned = found && !s.lanes && same_boxes(&g.first, &s);
      renaming r;
      if (aligned) renaming_of(&g.first, &s, &r);
      cn_index *renamed = aligned ? renamed_indices(ctx, proc, &r, &s) : NULL;
      if (aligned && !renamed) return CN_ERR_NOMEM;
      if (aligned && may_join(proc, &g, &s, renamed)) {
        cn_ll_stmt *body =
            cn_sched_subst_body(ctx, proc, &r.sub, s.loops[s.depth - 1]->u.loop.body);
        if (!body || !add_member(ctx, proc, &g, &s, renamed, body)) return CN_ERR_NOMEM;
        fused++;
        continue;
      }
    }
    if (open) {
      if (!(out.items[g.slot] = close_group(ctx, &g))) return CN_ERR_NOMEM;
      open = false;
    }
    if (!cn_sched_stmts_push(ctx, &out, st)) return CN_ERR_NOMEM;
    if (st->kind == CN_LL_FOR) {
      cn_status status = open_group(ctx, proc, &g, st, out.n - 1, &open);
      if (status != CN_OK) return status;
    }
  }
  if (open && !(out.items[g.slot] = close_group(ctx, &g))) return CN_ERR_NOMEM;
  if (fused == 0) return CN_OK;
  cn_ll_stmt *body = cn_lb_seq_array(ctx, out.n, out.items);
  if (!body) return CN_ERR_NOMEM;
  proc->body = body;
  return CN_OK;
}
