/* The iteration space of a Tile contraction (space.h): interval propagation over the conditions
 * 0 <= poly < bound, joint bounds (Fourier-Motzkin) for the variables it leaves unbounded, the
 * sizes of unsized output axes, and the change of variables x = x0 + B*y that keeps the integer
 * points of exact divisions (tile-edsl "Skipping"), chosen among the orders of the variables the
 * divisions involve so that the loops visit the fewest points.
 *
 * Ranges are inclusive [lo, hi] with known[v] when bounded; a range with hi < lo is empty. The
 * box of ranges contains every valid point (it may hold invalid ones: the loops test every
 * condition). All arithmetic is int64 with overflow checks: an overflowing step bounds nothing
 * (propagation), drops an inequality (elimination: fewer inequalities bound a larger set) or
 * discards a candidate order (the change of variables). */
#include "tile/space.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_ROUNDS 64

/* ---- Ranges ---- */

typedef struct {
  const cn_tile_poly *e;
  int64_t bound; /* 0 <= e < bound */
} condition;

/* Narrows [lo, hi] (inclusive, known[v] when bounded) by the conditions (integer polynomials), to
 * a fixpoint: for 0 <= c*v + rest < bound with every other variable of rest bounded, c*v lies in
 * [-max(rest), bound - 1 - min(rest)]. */
static void propagate(int nv, const condition *cs, int n, int64_t *lo, int64_t *hi, bool *known) {
  for (int round = 0; round < MAX_ROUNDS; round++) {
    bool changed = false;
    for (int k = 0; k < n; k++) {
      const cn_tile_poly *e = cs[k].e;
      for (int v = 0; v < nv; v++) {
        if (!e->c[v]) continue;
        int64_t rmin = e->off, rmax = e->off;
        bool ok = true;
        for (int w = 0; w < nv && ok; w++) {
          if (w == v || !e->c[w]) continue;
          int64_t a, b;
          ok = known[w] && !__builtin_mul_overflow(e->c[w], lo[w], &a) &&
               !__builtin_mul_overflow(e->c[w], hi[w], &b) &&
               !__builtin_add_overflow(rmin, a < b ? a : b, &rmin) &&
               !__builtin_add_overflow(rmax, a < b ? b : a, &rmax);
        }
        int64_t l, h;
        if (!ok || __builtin_sub_overflow(0, rmax, &l) ||
            __builtin_sub_overflow(cs[k].bound - 1, rmin, &h))
          continue;
        int64_t c = e->c[v];
        int64_t vl = c > 0 ? cn_ceil_div_i64(l, c) : cn_ceil_div_i64(h, c);
        int64_t vh = c > 0 ? cn_floor_div_i64(h, c) : cn_floor_div_i64(l, c);
        if (!known[v] || vl > lo[v] || vh < hi[v]) {
          if (!known[v] || vl > lo[v]) lo[v] = vl;
          if (!known[v] || vh < hi[v]) hi[v] = vh;
          known[v] = changed = true;
        }
      }
    }
    if (!changed) return;
  }
}

/* The largest value an integer polynomial reaches over the box, plus one (0 when it stays
 * negative); false when a variable is unbounded or on overflow. */
static bool reach(int nv, const cn_tile_poly *e, const int64_t *lo, const int64_t *hi,
                  const bool *known, int64_t *out) {
  int64_t top = e->off;
  for (int v = 0; v < nv; v++) {
    int64_t t;
    if (e->c[v] && (!known[v] || __builtin_mul_overflow(e->c[v], e->c[v] > 0 ? hi[v] : lo[v], &t) ||
                    __builtin_add_overflow(top, t, &top)))
      return false;
  }
  if (top == INT64_MAX) return false;
  *out = top < 0 ? 0 : top + 1;
  return true;
}

/* ---- Joint bounds: Fourier-Motzkin elimination ---- */

/* The joint bounds of one box: allowed (else a variable left unbounded stays so), used when
 * propagation alone did not bound everything, capped[v] when a cap stopped y_v's. */
typedef struct {
  cn_tile_rows *fm; /* two systems */
  bool allow, used;
  bool capped[CN_TILE_MAX_VARS];
  int budget; /* pairs left to combine */
} joint_bounds;

/* Adds c . y + k >= 0 to s in lowest terms: with g the gcd of c, c / g . y is an integer >=
 * -k / g, so k becomes floor(k / g). A row without variables is dropped when it holds; a row
 * whose c is already in s keeps the smaller k. Returns 0 when the row fails (no integer point is
 * valid), -1 when s is full, else 1. */
static int add_row(int nv, cn_tile_rows *s, const int64_t *c, int64_t k) {
  uint64_t g = 0;
  for (int v = 0; v < nv; v++) g = cn_u64_gcd(g, cn_i64_magnitude(c[v]));
  if (!g) return k >= 0;
  if (g > INT64_MAX) return 1; /* every c[v] is 0 or INT64_MIN: dropped */
  cn_tile_row r = {.k = cn_floor_div_i64(k, (int64_t)g)};
  for (int v = 0; v < nv; v++) r.c[v] = c[v] / (int64_t)g;
  for (int i = 0; i < s->n; i++)
    if (memcmp(s->r[i].c, r.c, sizeof r.c) == 0) {
      if (r.k < s->r[i].k) s->r[i].k = r.k;
      return 1;
    }
  if (s->n == CN_TILE_MAX_ROWS) return -1;
  s->r[s->n++] = r;
  return 1;
}

/* The rows of the conditions (0 <= e and e <= bound - 1) and of the known ranges into s (an
 * overflowing one is dropped); returns as add_row. */
static int condition_rows(int nv, const condition *cs, int n, const int64_t *lo, const int64_t *hi,
                          const bool *known, cn_tile_rows *s) {
  s->n = 0;
  int64_t c[CN_TILE_MAX_VARS] = {0}, k;
  int st = 1;
  for (int i = 0; i < n && st > 0; i++) {
    const cn_tile_poly *e = cs[i].e;
    st = add_row(nv, s, e->c, e->off);
    bool ok = !__builtin_sub_overflow(cs[i].bound, 1, &k) && !__builtin_sub_overflow(k, e->off, &k);
    for (int v = 0; v < nv && ok; v++) ok = !__builtin_sub_overflow(0, e->c[v], &c[v]);
    if (st > 0 && ok) st = add_row(nv, s, c, k);
  }
  for (int v = 0; v < nv && st > 0; v++) {
    if (!known[v]) continue;
    memset(c, 0, sizeof c);
    c[v] = 1;
    if (lo[v] > INT64_MIN) st = add_row(nv, s, c, -lo[v]);
    c[v] = -1;
    if (st > 0) st = add_row(nv, s, c, hi[v]);
  }
  return st;
}

/* Eliminates y_v from a into b: the rows without it stay, and each pair of a lower and an upper
 * bound on it (p.c[v] > 0 > q.c[v]) becomes their combination without it. That is the rational
 * projection, which contains the integer points' projection. A combination that overflows is
 * dropped. Returns as add_row; -1 also when the budget is spent. */
static int eliminate(int nv, int v, const cn_tile_rows *a, cn_tile_rows *b, int *budget) {
  b->n = 0;
  int st = 1;
  for (int i = 0; i < a->n && st > 0; i++)
    if (!a->r[i].c[v]) st = add_row(nv, b, a->r[i].c, a->r[i].k);
  for (int i = 0; i < a->n && st > 0; i++) {
    const cn_tile_row *p = &a->r[i];
    for (int j = 0; j < a->n && st > 0 && p->c[v] > 0; j++) {
      const cn_tile_row *q = &a->r[j];
      if (q->c[v] >= 0) continue;
      if (--*budget < 0) return -1;
      uint64_t g = cn_u64_gcd((uint64_t)p->c[v], cn_i64_magnitude(q->c[v]));
      uint64_t up = cn_i64_magnitude(q->c[v]) / g; /* p's factor */
      int64_t uq = p->c[v] / (int64_t)g, c[CN_TILE_MAX_VARS] = {0}, k, s, t;
      bool ok = up <= INT64_MAX;
      for (int w = 0; w <= nv && ok; w++) {
        int64_t x = w < nv ? p->c[w] : p->k, y = w < nv ? q->c[w] : q->k;
        ok = !__builtin_mul_overflow(x, (int64_t)up, &s) && !__builtin_mul_overflow(y, uq, &t) &&
             !__builtin_add_overflow(s, t, w < nv ? &c[w] : &k);
      }
      if (ok) st = add_row(nv, b, c, k);
    }
  }
  return st;
}

/* The range of y_t over the rows of the conditions and the known ranges, every other variable
 * eliminated, the one making the fewest pairs first: *known when bounded both ways (hi < lo when
 * no integer point is valid). False when a cap stopped it. */
static bool bound_one(int nv, int t, const condition *cs, int n, int64_t *lo, int64_t *hi,
                      bool *known, joint_bounds *j) {
  cn_tile_rows *a = &j->fm[0], *b = &j->fm[1];
  int st = condition_rows(nv, cs, n, lo, hi, known, a);
  for (bool left = true; st > 0 && left;) {
    int best = -1;
    int64_t fewest = 0;
    for (int v = 0; v < nv; v++) {
      if (v == t) continue;
      int64_t up = 0, down = 0;
      for (int i = 0; i < a->n; i++) up += a->r[i].c[v] > 0, down += a->r[i].c[v] < 0;
      if ((up || down) && (best < 0 || up * down < fewest)) best = v, fewest = up * down;
    }
    left = best >= 0;
    if (!left) break;
    st = eliminate(nv, best, a, b, &j->budget);
    cn_tile_rows *swap = a;
    a = b, b = swap;
  }
  if (st < 0) return false;
  if (st == 0) { /* no integer point is valid */
    lo[t] = 0, hi[t] = -1, known[t] = true;
    return true;
  }
  bool below = false, above = false;
  for (int i = 0; i < a->n; i++) { /* c[t] is 1 (y_t >= -k) or -1 (y_t <= k) */
    const cn_tile_row *r = &a->r[i];
    CN_ASSERT(r->c[t] == 1 || r->c[t] == -1);
    if (r->c[t] < 0 && (!above || r->k < hi[t])) hi[t] = r->k, above = true;
    if (r->c[t] > 0 && r->k > INT64_MIN && (!below || -r->k > lo[t])) lo[t] = -r->k, below = true;
  }
  known[t] = below && above;
  return true;
}

/* Marks the box as needing joint bounds and, when they are allowed, bounds each variable left
 * unbounded from the whole system, then narrows every range again by propagation. */
static void bound_jointly(int nv, const condition *cs, int n, int64_t *lo, int64_t *hi, bool *known,
                          joint_bounds *j) {
  j->used = true;
  if (!j->allow) return;
  for (int t = 0; t < nv; t++)
    if (!known[t]) j->capped[t] = !bound_one(nv, t, cs, n, lo, hi, known, j);
  propagate(nv, cs, n, lo, hi, known);
}

/* The range [lo, hi] of each of the nv variables under the conditions of s (integer polynomials),
 * every unsized output axis first sized from the operands and constraints (the largest value its
 * index reaches, plus one). Propagation first; joint bounds (j) only for what it leaves
 * unbounded, so that a box propagation bounds is the same with or without them. Returns -1, or
 * the first axis whose size cannot be derived. */
static int box(int nv, cn_tile_poly_set *s, int64_t *lo, int64_t *hi, bool *known,
               joint_bounds *j) {
  condition cs[CN_TILE_MAX_POLYS];
  int n = 0;
  for (int k = s->n_out; k < s->n; k++) cs[n++] = (condition){&s->p[k], s->bound[k]};
  memset(known, 0, sizeof *known * CN_TILE_MAX_VARS);
  propagate(nv, cs, n, lo, hi, known);
  int64_t size;
  for (int x = 0; x < s->n_out; x++)
    if (s->bound[x] < 0 && !reach(nv, &s->p[x], lo, hi, known, &size)) {
      bound_jointly(nv, cs, n, lo, hi, known, j);
      break;
    }
  for (int x = 0; x < s->n_out; x++)
    if (s->bound[x] < 0 && !reach(nv, &s->p[x], lo, hi, known, &s->bound[x])) return x;
  for (int x = 0; x < s->n_out; x++) cs[n++] = (condition){&s->p[x], s->bound[x]};
  memset(known, 0, sizeof *known * CN_TILE_MAX_VARS);
  propagate(nv, cs, n, lo, hi, known);
  for (int v = 0; v < nv; v++)
    if (!known[v]) {
      bound_jointly(nv, cs, n, lo, hi, known, j);
      break;
    }
  return -1;
}

/* How many points the box holds, to rank boxes (HUGE_VAL when a variable is unbounded). */
static double volume(int nv, const int64_t *lo, const int64_t *hi, const bool *known) {
  double points = 1;
  for (int v = 0; v < nv; v++) {
    if (!known[v]) return HUGE_VAL;
    points *= hi[v] < lo[v] ? 0 : (double)hi[v] - (double)lo[v] + 1;
  }
  return points;
}

/* ---- Exact division: a change of variables ---- */

static void identity_change(int nv, cn_tile_change *ch) {
  memset(ch, 0, sizeof *ch);
  ch->n = nv;
  for (int v = 0; v < nv; v++) ch->src[v] = v, ch->b[v][v] = 1;
}

/* p over y: an integer polynomial, since the lattice makes p's numerator a multiple of its den
 * for every y, hence each of its coefficients in y too. False on overflow. */
static bool substitute(const cn_tile_change *ch, const cn_tile_poly *p, cn_tile_poly *out) {
  memset(out, 0, sizeof *out);
  out->den = 1;
  int64_t off = p->off, t;
  for (int v = 0; v < ch->n; v++) {
    if (!p->c[v]) continue;
    if (__builtin_mul_overflow(p->c[v], ch->x0[v], &t) || __builtin_add_overflow(off, t, &off))
      return false;
    for (int j = 0; j < ch->n; j++)
      if (__builtin_mul_overflow(p->c[v], ch->b[v][j], &t) ||
          __builtin_add_overflow(out->c[j], t, &out->c[j]))
        return false;
  }
  CN_ASSERT(off % p->den == 0);
  out->off = off / p->den;
  for (int j = 0; j < ch->n; j++) {
    CN_ASSERT(out->c[j] % p->den == 0);
    out->c[j] /= p->den;
  }
  return true;
}

static bool substitute_all(const cn_tile_change *ch, const cn_tile_poly_set *xs,
                           cn_tile_poly_set *ys) {
  ys->n = xs->n;
  ys->n_out = xs->n_out;
  memcpy(ys->bound, xs->bound, sizeof xs->bound);
  memcpy(ys->at, xs->at, sizeof xs->at);
  for (int k = 0; k < xs->n; k++)
    if (!substitute(ch, &xs->p[k], &ys->p[k])) return false;
  return true;
}

/* The lattice of the conditions with the variables in the order perm (lattice row q is variable
 * perm[q]): 1 and *ch, 0 when no integer point satisfies them, -1 on overflow. */
static int solve_order(int nv, const int *perm, int nc, const cn_tile_lattice_cond *cs,
                       cn_tile_lattice_cond *permuted, cn_tile_change *ch) {
  for (int k = 0; k < nc; k++) {
    permuted[k] = (cn_tile_lattice_cond){.off = cs[k].off, .den = cs[k].den};
    for (int q = 0; q < nv; q++) permuted[k].c[q] = cs[k].c[perm[q]];
  }
  cn_tile_lattice l;
  int st = cn_tile_lattice_solve(nv, nc, permuted, &l);
  if (st != 1) return st;
  memset(ch, 0, sizeof *ch);
  ch->n = nv;
  for (int q = 0; q < nv; q++) {
    ch->src[q] = perm[q];
    ch->x0[perm[q]] = l.x0[q];
    for (int j = 0; j < nv; j++) ch->b[perm[q]][j] = l.basis[q][j];
  }
  return 1;
}

/* The next permutation of a[0..n-1] in lexicographic order; false after the last. */
static bool next_permutation(int *a, int n) {
  int i = n - 2;
  while (i >= 0 && a[i] >= a[i + 1]) i--;
  if (i < 0) return false;
  int j = n - 1;
  while (a[j] <= a[i]) j--;
  int t = a[i];
  a[i] = a[j];
  a[j] = t;
  for (int l = i + 1, r = n - 1; l < r; l++, r--) t = a[l], a[l] = a[r], a[r] = t;
  return true;
}

/* Orders of up to this many variables that divisibility conditions involve are all tried. */
#define MAX_PERMUTED 5

/* The change of variables for w->xs, where every polynomial with den > 1 asks its numerator to be
 * a multiple of den (all conditions solved together), then w->ys (the polynomials over it, unsized
 * output axes derived) and their box (*bad_axis: -1, or an axis whose size cannot be derived).
 * The canonical lattice depends on the order of the variables, which decides the loop variables
 * (the transposed convolution's x = k + S*n iterates k and n, the input's own index, where the
 * order (x, k) would iterate x and a band of k): of all orders of the variables the conditions
 * involve (at most MAX_PERMUTED of them, else the order of appearance alone), the one whose box
 * holds the fewest points wins, the first in lexicographic order on ties (the order of
 * appearance first). An order whose box propagation bounds beats any that needs joint bounds
 * (those are not even computed once one is found), so a contraction propagation bounds keeps
 * the loops it had without them. Returns 1; 0 when no integer point is valid (the identity,
 * w->ys hold the numerators and no box); -1 after an error. */
int cn_tile_choose_change(cn_tile_src *src, cn_tile_work *w, cn_tile_change *ch, int64_t *lo,
                          int64_t *hi, bool *known, int *bad_axis) {
  const cn_tile_poly_set *xs = &w->xs;
  int nv = w->vars.n, nc = 0, m = 0;
  size_t at = 0;
  bool involved[CN_TILE_MAX_VARS] = {0};
  for (int k = 0; k < xs->n; k++) {
    const cn_tile_poly *p = &xs->p[k];
    if (p->den == 1) continue;
    if (!nc) at = xs->at[k];
    cn_tile_lattice_cond *cd = &w->conds[nc++];
    *cd = (cn_tile_lattice_cond){.off = p->off, .den = p->den};
    for (int v = 0; v < nv; v++) {
      cd->c[v] = p->c[v];
      if (p->c[v] % p->den) involved[v] = true;
    }
  }
  int perm[CN_TILE_MAX_VARS], slot[CN_TILE_MAX_VARS], order[CN_TILE_MAX_VARS];
  for (int v = 0; v < nv; v++) {
    perm[v] = v;
    if (involved[v]) slot[m++] = v;
  }
  if (m > MAX_PERMUTED) m = 0;
  for (int i = 0; i < m; i++) order[i] = i;
  double best = HUGE_VAL;
  bool found = false, best_joint = false;
  do {
    for (int i = 0; i < m; i++) perm[slot[i]] = slot[order[i]];
    cn_tile_change cand;
    int st = 1;
    if (nc)
      st = solve_order(nv, perm, nc, w->conds, w->permuted, &cand);
    else
      identity_change(nv, &cand);
    if (st == 0) {
      identity_change(nv, ch);
      w->ys = *xs;
      for (int k = 0; k < xs->n; k++) w->ys.p[k].den = 1;
      return 0;
    }
    if (st < 0 || !substitute_all(&cand, xs, &w->cand)) continue;
    int64_t l[CN_TILE_MAX_VARS], h[CN_TILE_MAX_VARS];
    bool kn[CN_TILE_MAX_VARS];
    joint_bounds j = {.fm = w->fm, .allow = !found || best_joint, .budget = CN_TILE_MAX_COMBINED};
    int axis = box(nv, &w->cand, l, h, kn, &j);
    double points = axis < 0 ? volume(nv, l, h, kn) : HUGE_VAL;
    if (found && (j.used > best_joint || (j.used == best_joint && points >= best))) continue;
    found = true;
    best = points;
    best_joint = j.used;
    memcpy(w->capped, j.capped, sizeof j.capped);
    *ch = cand;
    *bad_axis = axis;
    w->ys = w->cand;
    memcpy(lo, l, sizeof l);
    memcpy(hi, h, sizeof h);
    memcpy(known, kn, sizeof kn);
  } while (next_permutation(order, m));
  if (found) return 1;
  cn_tile_fail_at(src, at,
                  "the change of variables that keeps the integer points of the divisions "
                  "overflows 64-bit integers");
  return -1;
}

/* y_j's name: x_{src[j]}'s own when x_{src[j]} = y_j, else that name, '_' and the diagonal entry
 * (i = 2*i_2 + ...), with '_' appended while another variable has it. */
void cn_tile_name_variable(const cn_tile_vars *vt, const cn_tile_change *ch, int j,
                           char (*names)[CN_TILE_NAME_CAP]) {
  int v = ch->src[j];
  int len = vt->len[v] < 64 ? (int)vt->len[v] : 64;
  if (ch->b[v][j] == 1) {
    snprintf(names[j], CN_TILE_NAME_CAP, "%.*s", len, vt->name[v]);
    return;
  }
  snprintf(names[j], CN_TILE_NAME_CAP, "%.*s_%lld", len, vt->name[v], (long long)ch->b[v][j]);
  for (;;) {
    size_t n = strlen(names[j]);
    bool taken = false;
    for (int u = 0; u < vt->n && !taken; u++)
      taken = vt->len[u] == n && strncmp(vt->name[u], names[j], n) == 0;
    for (int k = 0; k < j && !taken; k++) taken = strcmp(names[k], names[j]) == 0;
    if (!taken || n + 1 >= CN_TILE_NAME_CAP) return;
    names[j][n] = '_';
    names[j][n + 1] = '\0';
  }
}
