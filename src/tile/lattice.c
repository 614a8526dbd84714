/* The exact lattice solver of lattice.h: conditions are imposed one at a time on the current
 * parametrization x = x0 + B y, B kept in canonical (column Hermite) form between conditions.
 *
 * One condition (c . x + off) ≡ 0 (mod den) becomes r . y + den * t = -tau over integer (y, t),
 * with r_j = c . B[:, j] and tau = c . x0 + off, both reduced mod den. It is solved on an augmented
 * matrix whose columns are (residue ; lattice vector): the n basis columns (r_j ; B[:, j]), the
 * column (den ; 0), and the offset column (tau ; x0). Unimodular column operations (extended
 * Euclid) on the first n + 1 columns leave row 0 as (g, 0, ..., 0) with g = gcd(r, den); the n
 * columns with residue 0 are then a basis of the new lattice, and subtracting (tau / g) times the
 * pivot column from the offset column zeroes its residue (impossible when g does not divide tau: no
 * integer point). A Hermite pass restores the canonical form and reduces x0.
 *
 * Invariants: every column (rho ; v) of the augmented matrix has rho ≡ c . v (mod den), plus off
 * for the offset column; no matrix entry is ever INT64_MIN (checked ops treat it as overflow), so
 * negation and truncating division of entries cannot overflow; residues use overflow-free modular
 * arithmetic, so only lattice entries (the elimination's column operations and the offset update,
 * which multiplies a pivot column by tau / g < den) can overflow. */
#include "tile/lattice.h"

#include <string.h>

#include "core/core.h"

/* Rows: residue row + nv variables; columns: nv basis columns + (den ; 0) + offset column. */
#define LAT_DIM (CN_TILE_MAX_VARS + 2)

typedef int64_t lat_mat[LAT_DIM][LAT_DIM];

/* a mod m in [0, m), m >= 1. */
static int64_t mod_nonneg(int64_t a, int64_t m) {
  int64_t r = a % m;
  return r < 0 ? r + m : r;
}

/* (a + b) mod m for a, b in [0, m): the sum fits uint64 because m <= INT64_MAX. */
static int64_t add_mod(int64_t a, int64_t b, int64_t m) {
  uint64_t s = (uint64_t)a + (uint64_t)b;
  return (int64_t)(s >= (uint64_t)m ? s - (uint64_t)m : s);
}

/* (a * b) mod m for a, b in [0, m), by doubling, so no product ever overflows. */
static int64_t mul_mod(int64_t a, int64_t b, int64_t m) {
  int64_t r = 0;
  for (; b > 0; b >>= 1) {
    if (b & 1) r = add_mod(r, a, m);
    a = add_mod(a, a, m);
  }
  return r;
}

/* Column dst -= q * column src over rows [0, rows). 0 on overflow. */
static int col_sub(int rows, lat_mat m, int dst, int src, int64_t q) {
  if (q == 0) return 1;
  for (int i = 0; i < rows; i++) {
    int64_t p, d;
    if (__builtin_mul_overflow(q, m[i][src], &p) || __builtin_sub_overflow(m[i][dst], p, &d) ||
        d == INT64_MIN)
      return 0;
    m[i][dst] = d;
  }
  return 1;
}

/* Unimodular operations on columns [from, cols) (all rows [0, rows)) leaving row `row` with a
 * single nonzero entry there, positive, in column `from`. Returns 1, 0 when the row is zero on
 * those columns, -1 on overflow. */
static int pivot_row(int rows, int cols, lat_mat m, int row, int from) {
  for (;;) {
    int p = -1;
    for (int j = from; j < cols; j++)
      if (m[row][j] != 0 && (p < 0 || cn_i64_magnitude(m[row][j]) < cn_i64_magnitude(m[row][p])))
        p = j;
    if (p < 0) return 0;
    int others = 0;
    for (int j = from; j < cols; j++) {
      if (j == p || m[row][j] == 0) continue;
      if (!col_sub(rows, m, j, p, m[row][j] / m[row][p])) return -1;
      others |= m[row][j] != 0;
    }
    if (others) continue; /* every remainder is smaller than the pivot: Euclid terminates */
    int neg = m[row][p] < 0;
    for (int i = 0; i < rows; i++) {
      int64_t v = m[i][p];
      m[i][p] = m[i][from];
      m[i][from] = neg ? -v : v;
    }
    return 1;
  }
}

/* Canonical form of the nv x nv basis in columns [0, nv) of s, and reduction of x0 (column nv)
 * against it. Row k's diagonal is final once pivoted; reducing earlier columns and x0 by column k
 * only touches rows >= k, and later steps only subtract columns that are zero on rows < k, so
 * every reduced row stays reduced. 1, or -1 on overflow. */
static int hermite(int nv, lat_mat s) {
  for (int k = 0; k < nv; k++) {
    int st = pivot_row(nv, nv, s, k, k);
    if (st < 0) return -1;
    CN_ASSERT(st == 1); /* the lattice has full rank: it contains lcm(den) * Z^nv */
    for (int j = 0; j < k; j++)
      if (!col_sub(nv, s, j, k, cn_floor_div_i64(s[k][j], s[k][k]))) return -1;
    if (!col_sub(nv, s, nv, k, cn_floor_div_i64(s[k][nv], s[k][k]))) return -1;
  }
  return 1;
}

/* Imposes one condition on the parametrization s (basis columns [0, nv), x0 column nv).
 * 1, 0 when no integer point remains, -1 on overflow. */
static int impose(int nv, lat_mat s, const cn_tile_lattice_cond *cond) {
  int64_t den = cond->den;
  CN_ASSERT(den >= 1);
  int64_t c[CN_TILE_MAX_VARS];
  for (int v = 0; v < nv; v++) c[v] = mod_nonneg(cond->c[v], den);
  lat_mat a;
  memset(a, 0, sizeof a);
  for (int j = 0; j <= nv; j++) {
    int64_t rho = j == nv ? mod_nonneg(cond->off, den) : 0;
    for (int v = 0; v < nv; v++) {
      rho = add_mod(rho, mul_mod(c[v], mod_nonneg(s[v][j], den), den), den);
      a[v + 1][j == nv ? nv + 1 : j] = s[v][j];
    }
    a[0][j == nv ? nv + 1 : j] = rho;
  }
  a[0][nv] = den;
  int st = pivot_row(nv + 1, nv + 1, a, 0, 0);
  if (st < 0) return -1;
  CN_ASSERT(st == 1); /* den >= 1 keeps row 0 nonzero */
  int64_t g = a[0][0], tau = a[0][nv + 1];
  if (tau % g != 0) return 0;
  if (!col_sub(nv + 1, a, nv + 1, 0, tau / g)) return -1;
  for (int v = 0; v < nv; v++)
    for (int j = 0; j <= nv; j++) s[v][j] = a[v + 1][j + 1];
  return hermite(nv, s);
}

int cn_tile_lattice_solve(int nv, int nc, const cn_tile_lattice_cond *cs, cn_tile_lattice *out) {
  CN_ASSERT(nv >= 0 && nv <= CN_TILE_MAX_VARS && nc >= 0 && (nc == 0 || cs) && out);
  lat_mat s;
  memset(s, 0, sizeof s);
  for (int k = 0; k < nv; k++) s[k][k] = 1;
  for (int i = 0; i < nc; i++) {
    int st = impose(nv, s, &cs[i]);
    if (st != 1) return st;
  }
  memset(out, 0, sizeof *out);
  out->n = nv;
  for (int k = 0; k < nv; k++) {
    out->x0[k] = s[k][nv];
    for (int j = 0; j < nv; j++) out->basis[k][j] = s[k][j];
  }
  return 1;
}
