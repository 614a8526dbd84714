/* Tests of the exact lattice solver (src/tile/lattice.h): hand-computed canonical forms for the
 * Tile division shapes (`(i)/2`, `(i + 1)/2`, `(2*i + j)/3`, several conditions, untouched
 * variables, 16 variables), empty systems, int64 edge cases, and a brute-force property check on
 * random small systems: membership in x0 + basis * Z^n must coincide with satisfying every
 * condition on a box, the form must be canonical, det(basis) must equal the lattice index counted
 * over a period box, and the result must not depend on the order or redundancy of conditions. */
#include "check.h"
#include "tile/lattice.h"

#include <stdlib.h>

/* The solution equals the expected x0 and row-major basis, and is zero outside nv. */
static int same(const cn_tile_lattice *l, int nv, const int64_t *x0, const int64_t *basis) {
  int ok = l->n == nv;
  for (int k = 0; k < CN_TILE_MAX_VARS; k++) {
    ok &= l->x0[k] == (k < nv ? x0[k] : 0);
    for (int j = 0; j < CN_TILE_MAX_VARS; j++)
      ok &= l->basis[k][j] == (k < nv && j < nv ? basis[k * nv + j] : 0);
  }
  if (!ok) {
    fprintf(stderr, "got n=%d x0 =", l->n);
    for (int k = 0; k < nv; k++) fprintf(stderr, " %" PRId64, l->x0[k]);
    fprintf(stderr, ", basis =");
    for (int k = 0; k < nv; k++) {
      fprintf(stderr, " [");
      for (int j = 0; j < nv; j++) fprintf(stderr, " %" PRId64, l->basis[k][j]);
      fprintf(stderr, " ]");
    }
    fputc('\n', stderr);
  }
  return ok;
}

static void test_by_hand(void) {
  cn_tile_lattice l;

  /* No conditions: identity. */
  CHECK_INT(cn_tile_lattice_solve(3, 0, NULL, &l), 1);
  CHECK(same(&l, 3, (int64_t[]){0, 0, 0}, (int64_t[]){1, 0, 0, 0, 1, 0, 0, 0, 1}));

  /* (i)/2: i = 2*y0. */
  cn_tile_lattice_cond half = {.c = {1}, .off = 0, .den = 2};
  CHECK_INT(cn_tile_lattice_solve(1, 1, &half, &l), 1);
  CHECK(same(&l, 1, (int64_t[]){0}, (int64_t[]){2}));

  /* (i + 1)/2: i = 1 + 2*y0. */
  cn_tile_lattice_cond half1 = {.c = {1}, .off = 1, .den = 2};
  CHECK_INT(cn_tile_lattice_solve(1, 1, &half1, &l), 1);
  CHECK(same(&l, 1, (int64_t[]){1}, (int64_t[]){2}));

  /* (-i - 3)/2: i odd, the same set as (i + 1)/2. */
  cn_tile_lattice_cond neg = {.c = {-1}, .off = -3, .den = 2};
  CHECK_INT(cn_tile_lattice_solve(1, 1, &neg, &l), 1);
  CHECK(same(&l, 1, (int64_t[]){1}, (int64_t[]){2}));

  /* (2*i + j)/3 over (i, j): j ≡ -2i ≡ i (mod 3), so i = y0, j = y0 + 3*y1. */
  cn_tile_lattice_cond third = {.c = {2, 1}, .off = 0, .den = 3};
  CHECK_INT(cn_tile_lattice_solve(2, 1, &third, &l), 1);
  CHECK(same(&l, 2, (int64_t[]){0, 0}, (int64_t[]){1, 0, 1, 3}));

  /* (2*i + j + 1)/3: j ≡ i + 2 (mod 3): x0 = (0, 2), same basis (2*0 + 2 + 1 = 3). */
  cn_tile_lattice_cond third1 = {.c = {2, 1}, .off = 1, .den = 3};
  CHECK_INT(cn_tile_lattice_solve(2, 1, &third1, &l), 1);
  CHECK(same(&l, 2, (int64_t[]){0, 2}, (int64_t[]){1, 0, 1, 3}));

  /* (i + 2*j)/3 over (i, j): i ≡ j (mod 3) as well, but now i is the constrained coordinate of
   * no lower one: i = y0, j = y0 + 3*y1 (i + 2j = 3*y0 + 6*y1). */
  cn_tile_lattice_cond third2 = {.c = {1, 2}, .off = 0, .den = 3};
  CHECK_INT(cn_tile_lattice_solve(2, 1, &third2, &l), 1);
  CHECK(same(&l, 2, (int64_t[]){0, 0}, (int64_t[]){1, 0, 1, 3}));

  /* (j)/2 over (i, j, k): only j changes. */
  cn_tile_lattice_cond mid = {.c = {0, 1, 0}, .off = 0, .den = 2};
  CHECK_INT(cn_tile_lattice_solve(3, 1, &mid, &l), 1);
  CHECK(same(&l, 3, (int64_t[]){0, 0, 0}, (int64_t[]){1, 0, 0, 0, 2, 0, 0, 0, 1}));

  /* (i + k)/2 over (i, j, k): k ≡ i (mod 2); j (never mentioned) keeps a unit row and column. */
  cn_tile_lattice_cond ik = {.c = {1, 0, 1}, .off = 0, .den = 2};
  CHECK_INT(cn_tile_lattice_solve(3, 1, &ik, &l), 1);
  CHECK(same(&l, 3, (int64_t[]){0, 0, 0}, (int64_t[]){1, 0, 0, 0, 1, 0, 1, 0, 2}));

  /* Coefficients that are multiples of den mean nothing: (7*i + 14)/7, (4*j)/2. */
  cn_tile_lattice_cond trivial[2] = {{.c = {7, 0}, .off = 14, .den = 7}, {.c = {0, 4}, .den = 2}};
  CHECK_INT(cn_tile_lattice_solve(2, 2, trivial, &l), 1);
  CHECK(same(&l, 2, (int64_t[]){0, 0}, (int64_t[]){1, 0, 0, 1}));

  /* (6*i)/4 is 3i/2: i even. den = 1 is always satisfied. */
  cn_tile_lattice_cond six[2] = {{.c = {6}, .den = 4}, {.c = {5}, .off = 3, .den = 1}};
  CHECK_INT(cn_tile_lattice_solve(1, 2, six, &l), 1);
  CHECK(same(&l, 1, (int64_t[]){0}, (int64_t[]){2}));

  /* No variables: only the constant decides. */
  cn_tile_lattice_cond k4 = {.off = 8, .den = 4}, k5 = {.off = 8, .den = 5};
  CHECK_INT(cn_tile_lattice_solve(0, 1, &k4, &l), 1);
  CHECK_INT(l.n, 0);
  CHECK_INT(cn_tile_lattice_solve(0, 1, &k5, &l), 0);
}

static void test_multi(void) {
  cn_tile_lattice l;

  /* i ≡ 0 (mod 2) and i ≡ 1 (mod 3): i ≡ 4 (mod 6). */
  cn_tile_lattice_cond crt[2] = {{.c = {1}, .den = 2}, {.c = {1}, .off = -1, .den = 3}};
  CHECK_INT(cn_tile_lattice_solve(1, 2, crt, &l), 1);
  CHECK(same(&l, 1, (int64_t[]){4}, (int64_t[]){6}));

  /* (i)/2 and (i + j)/4: i = 2*y0, j ≡ -2*y0 ≡ 2*y0 (mod 4): j = 2*y0 + 4*y1. */
  cn_tile_lattice_cond two[2] = {{.c = {1, 0}, .den = 2}, {.c = {1, 1}, .den = 4}};
  CHECK_INT(cn_tile_lattice_solve(2, 2, two, &l), 1);
  CHECK(same(&l, 2, (int64_t[]){0, 0}, (int64_t[]){2, 0, 2, 4}));

  /* (i - 1)/2 and (i + j)/4: i = 1 + 2*y0, j ≡ -1 - 2*y0 ≡ 3 + 2*y0 (mod 4): x0 = (1, 3). The
   * other order gives the same canonical result. */
  cn_tile_lattice_cond odd[2] = {{.c = {1, 0}, .off = -1, .den = 2}, {.c = {1, 1}, .den = 4}};
  CHECK_INT(cn_tile_lattice_solve(2, 2, odd, &l), 1);
  CHECK(same(&l, 2, (int64_t[]){1, 3}, (int64_t[]){2, 0, 2, 4}));
  cn_tile_lattice_cond odd_rev[2] = {odd[1], odd[0]};
  CHECK_INT(cn_tile_lattice_solve(2, 2, odd_rev, &l), 1);
  CHECK(same(&l, 2, (int64_t[]){1, 3}, (int64_t[]){2, 0, 2, 4}));

  /* A strided, dilated index (2*x + k)/2 with a second (x + k)/3 over (x, k): k = 2*m, then
   * x + 2m ≡ 0 (mod 3) gives x ≡ m (mod 3): x = y0, k ≡ 2*y0 (mod 6): k = 2*y0 + 6*y1. */
  cn_tile_lattice_cond sd[2] = {{.c = {2, 1}, .den = 2}, {.c = {1, 1}, .den = 3}};
  CHECK_INT(cn_tile_lattice_solve(2, 2, sd, &l), 1);
  CHECK(same(&l, 2, (int64_t[]){0, 0}, (int64_t[]){1, 0, 2, 6}));

  /* 16 variables chained by (x_k + x_{k+1})/2: all share x_0's parity. */
  cn_tile_lattice_cond chain[CN_TILE_MAX_VARS - 1];
  for (int k = 0; k + 1 < CN_TILE_MAX_VARS; k++) {
    chain[k] = (cn_tile_lattice_cond){.den = 2};
    chain[k].c[k] = chain[k].c[k + 1] = 1;
  }
  int64_t x0[CN_TILE_MAX_VARS] = {0}, basis[CN_TILE_MAX_VARS * CN_TILE_MAX_VARS] = {0};
  for (int k = 0; k < CN_TILE_MAX_VARS; k++) {
    basis[k * CN_TILE_MAX_VARS] = 1;
    if (k > 0) basis[k * CN_TILE_MAX_VARS + k] = 2;
  }
  CHECK_INT(cn_tile_lattice_solve(CN_TILE_MAX_VARS, CN_TILE_MAX_VARS - 1, chain, &l), 1);
  CHECK(same(&l, CN_TILE_MAX_VARS, x0, basis));
}

static void test_empty(void) {
  cn_tile_lattice l = {.n = 7};
  /* (2*i + 1)/2: 2i + 1 is odd. */
  cn_tile_lattice_cond odd = {.c = {2}, .off = 1, .den = 2};
  CHECK_INT(cn_tile_lattice_solve(1, 1, &odd, &l), 0);
  CHECK_INT(l.n, 7); /* untouched */
  /* i ≡ 0 (mod 2) and i ≡ 1 (mod 4). */
  cn_tile_lattice_cond clash[2] = {{.c = {1}, .den = 2}, {.c = {1}, .off = -1, .den = 4}};
  CHECK_INT(cn_tile_lattice_solve(1, 2, clash, &l), 0);
  /* (2*i + 4*j + 1)/6 over (i, j): the left side is odd. */
  cn_tile_lattice_cond par = {.c = {2, 4}, .off = 1, .den = 6};
  CHECK_INT(cn_tile_lattice_solve(2, 1, &par, &l), 0);
  /* (i + j)/2 and (i + j + 1)/2: contradictory only together. */
  cn_tile_lattice_cond both[2] = {{.c = {1, 1}, .den = 2}, {.c = {1, 1}, .off = 1, .den = 2}};
  CHECK_INT(cn_tile_lattice_solve(2, 1, both, &l), 1);
  CHECK_INT(cn_tile_lattice_solve(2, 2, both, &l), 0);
}

static void test_int64(void) {
  cn_tile_lattice l;
  const int64_t p40 = (int64_t)1 << 40;
  /* i ≡ 0 modulo 2^40 and 2^40 - 1 (coprime): the period 2^80 - 2^40 does not fit. */
  cn_tile_lattice_cond big[2] = {{.c = {1}, .den = p40}, {.c = {1}, .den = p40 - 1}};
  CHECK_INT(cn_tile_lattice_solve(1, 2, big, &l), -1);
  /* Each alone fits. */
  CHECK_INT(cn_tile_lattice_solve(1, 1, &big[1], &l), 1);
  CHECK(same(&l, 1, (int64_t[]){0}, (int64_t[]){p40 - 1}));

  /* 2^31 and 2^31 + 1 are coprime and their product 2^62 + 2^31 fits. */
  const int64_t p31 = (int64_t)1 << 31;
  cn_tile_lattice_cond fits[2] = {{.c = {1}, .den = p31}, {.c = {1}, .den = p31 + 1}};
  CHECK_INT(cn_tile_lattice_solve(1, 2, fits, &l), 1);
  CHECK(same(&l, 1, (int64_t[]){0}, (int64_t[]){p31 * (p31 + 1)}));

  /* 2^62 - 1 = (2^31 - 1)(2^31 + 1): after i ≡ 0 (mod 2^31 - 1), the residue of 2^61 * i needs a
   * product 2^61 * (2^31 - 1) far beyond int64; the answer i ≡ 0 (mod 2^62 - 1) fits. */
  const int64_t m62 = ((int64_t)1 << 62) - 1;
  cn_tile_lattice_cond wide[2] = {{.c = {1}, .den = p31 - 1},
                                  {.c = {(int64_t)1 << 61}, .den = m62}};
  CHECK_INT(cn_tile_lattice_solve(1, 2, wide, &l), 1);
  CHECK(same(&l, 1, (int64_t[]){0}, (int64_t[]){m62}));

  /* Extreme coefficients are reduced first: INT64_MAX is odd, so this is (i + 1)/2. */
  cn_tile_lattice_cond ext = {.c = {INT64_MAX}, .off = INT64_MAX, .den = 2};
  CHECK_INT(cn_tile_lattice_solve(1, 1, &ext, &l), 1);
  CHECK(same(&l, 1, (int64_t[]){1}, (int64_t[]){2}));
  /* INT64_MIN = -(2^63) ≡ -1 (mod 7) since 2^3 ≡ 1: -i + 3j - 1 ≡ 0, so i ≡ 3j - 1 (mod 7) and
   * j ≡ 5 * (i + 1) (1/3 ≡ 5): i = y0, j = 5 + 5*y0 + 7*y1. */
  cn_tile_lattice_cond ext2 = {.c = {INT64_MIN, 3}, .off = INT64_MIN, .den = 7};
  CHECK_INT(cn_tile_lattice_solve(2, 1, &ext2, &l), 1);
  CHECK(same(&l, 2, (int64_t[]){0, 5}, (int64_t[]){1, 0, 5, 7}));
}

/* --- brute-force property check --- */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static int64_t rnd(int64_t lo, int64_t hi) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return lo + (int64_t)(rng % (uint64_t)(hi - lo + 1));
}

static int64_t gcd(int64_t a, int64_t b) {
  a = llabs(a), b = llabs(b);
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

static int satisfies(int nv, int nc, const cn_tile_lattice_cond *cs, const int64_t *x) {
  for (int i = 0; i < nc; i++) {
    int64_t s = cs[i].off;
    for (int v = 0; v < nv; v++) s += cs[i].c[v] * x[v];
    if (s % cs[i].den != 0) return 0;
  }
  return 1;
}

/* x = x0 + basis * y for an integer y, solved row by row (basis lower triangular, positive
 * diagonal). */
static int member(const cn_tile_lattice *l, const int64_t *x) {
  int64_t y[CN_TILE_MAX_VARS];
  for (int k = 0; k < l->n; k++) {
    int64_t r = x[k] - l->x0[k];
    for (int j = 0; j < k; j++) r -= l->basis[k][j] * y[j];
    if (r % l->basis[k][k] != 0) return 0;
    y[k] = r / l->basis[k][k];
  }
  return 1;
}

/* Advances x through the box [lo[k], hi[k]); 0 when done. */
static int next(int nv, int64_t *x, const int64_t *lo, const int64_t *hi) {
  for (int k = 0; k < nv; k++) {
    if (++x[k] < hi[k]) return 1;
    x[k] = lo[k];
  }
  return 0;
}

static int canonical(const cn_tile_lattice *l, int nv) {
  int ok = l->n == nv;
  for (int k = 0; k < nv; k++) {
    ok &= l->basis[k][k] >= 1 && l->x0[k] >= 0 && l->x0[k] < l->basis[k][k];
    for (int j = 0; j < nv; j++) {
      if (j < k) ok &= l->basis[k][j] >= 0 && l->basis[k][j] < l->basis[k][k];
      if (j > k) ok &= l->basis[k][j] == 0;
    }
  }
  return ok;
}

static int equal(const cn_tile_lattice *a, const cn_tile_lattice *b) {
  int ok = a->n == b->n;
  for (int k = 0; k < CN_TILE_MAX_VARS; k++) {
    ok &= a->x0[k] == b->x0[k];
    for (int j = 0; j < CN_TILE_MAX_VARS; j++) ok &= a->basis[k][j] == b->basis[k][j];
  }
  return ok;
}

static void test_random(void) {
  enum { SYSTEMS = 300 };
  int n_empty = 0, n_index = 0, n_offdiag = 0, n_free = 0;
  for (int t = 0; t < SYSTEMS; t++) {
    int nv = (int)rnd(2, 4), nc = (int)rnd(1, 3);
    cn_tile_lattice_cond cs[4] = {{{0}, 0, 0}};
    for (int i = 0; i < nc; i++) {
      for (int v = 0; v < nv; v++) cs[i].c[v] = rnd(-6, 6);
      cs[i].off = rnd(-6, 6);
      cs[i].den = rnd(1, 6);
    }
    cn_tile_lattice l, l2;
    int st = cn_tile_lattice_solve(nv, nc, cs, &l);

    /* Period box: P_k * e_k satisfies every homogeneous condition, so the solution set is periodic
     * with period P_k along each axis and the box meets every class. */
    int64_t zero[4] = {0}, per[4], x[4] = {0};
    int64_t cells = 1, count = 0;
    for (int v = 0; v < nv; v++) {
      per[v] = 1;
      for (int i = 0; i < nc; i++) {
        int64_t step = cs[i].den / gcd(cs[i].c[v], cs[i].den);
        per[v] = per[v] / gcd(per[v], step) * step;
      }
      cells *= per[v];
    }
    do count += satisfies(nv, nc, cs, x);
    while (next(nv, x, zero, per));

    if (count == 0) {
      n_empty++;
      CHECK_MSG(st == 0, "system %d: solve = %d, but no point", t, st);
      continue;
    }
    CHECK_MSG(st == 1, "system %d: solve = %d, but %" PRId64 " points", t, st, count);
    if (st != 1) continue;
    CHECK_MSG(canonical(&l, nv), "system %d: not canonical", t);
    if (!canonical(&l, nv)) continue;

    /* Minimal: det = index of the lattice = cells / count. */
    int64_t det = 1;
    for (int k = 0; k < nv; k++) det *= l.basis[k][k];
    CHECK_MSG(cells % count == 0 && det == cells / count,
              "system %d: det %" PRId64 ", index %" PRId64 "/%" PRId64, t, det, cells, count);
    n_index += det > 1;

    /* x0 and every column: x0 solves the system, x0 + column does too. */
    int ok = satisfies(nv, nc, cs, l.x0);
    for (int j = 0; j < nv; j++) {
      int64_t p[4];
      for (int k = 0; k < nv; k++) p[k] = l.x0[k] + l.basis[k][j];
      ok &= satisfies(nv, nc, cs, p);
      for (int k = 0; k < j; k++) n_offdiag += l.basis[j][k] != 0;
    }
    CHECK_MSG(ok, "system %d: x0 or a column violates a condition", t);

    /* Membership coincides with the conditions on [-12, 12]^nv. */
    int64_t lo[4], hi[4];
    int64_t bad = 0;
    for (int v = 0; v < nv; v++) lo[v] = x[v] = -12, hi[v] = 13;
    do bad += satisfies(nv, nc, cs, x) != member(&l, x);
    while (next(nv, x, lo, hi));
    CHECK_MSG(bad == 0, "system %d: %" PRId64 " points disagree", t, bad);

    /* Untouched variables map to themselves. */
    for (int v = 0; v < nv; v++) {
      int touched = 0;
      for (int i = 0; i < nc; i++) touched |= cs[i].c[v] % cs[i].den != 0;
      if (touched) continue;
      n_free++;
      int unit = l.x0[v] == 0;
      for (int k = 0; k < nv; k++) unit &= l.basis[v][k] == (k == v) && l.basis[k][v] == (k == v);
      CHECK_MSG(unit, "system %d: untouched variable %d is not a unit", t, v);
    }

    /* Canonical: reversed order plus a redundant scaled copy of the first condition. */
    cn_tile_lattice_cond rev[4];
    for (int i = 0; i < nc; i++) rev[i] = cs[nc - 1 - i];
    rev[nc] = cs[0];
    for (int v = 0; v < nv; v++) rev[nc].c[v] *= 3;
    rev[nc].off *= 3, rev[nc].den *= 3;
    CHECK_INT(cn_tile_lattice_solve(nv, nc + 1, rev, &l2), 1);
    CHECK_MSG(equal(&l, &l2), "system %d: depends on the order of conditions", t);
  }
  /* The random systems cover the interesting cases. */
  CHECK(n_empty >= 10);
  CHECK(n_index >= 100);
  CHECK(n_offdiag >= 50);
  CHECK(n_free >= 10);
}

int main(void) {
  test_by_hand();
  test_multi();
  test_empty();
  test_int64();
  test_random();
  CHECK_DONE();
}
