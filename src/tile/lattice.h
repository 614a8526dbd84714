/* Exact integer lattices for Tile index division (issue 7): the integer points x in Z^nv that
 * satisfy a system of linear congruences (c . x + off) ≡ 0 (mod den), returned as one
 * parametrization x = x0 + basis * y over all integer y, in a canonical form suited to loop
 * generation (each y_k becomes a loop variable whose bounds come from x_k's bounds).
 *
 * Canonical form (the column Hermite normal form of the solution lattice, with x0 its reduced
 * coset representative). With B = basis and n = nv:
 *   - B is lower triangular: B[k][j] = 0 for j > k, so x_k = x0_k + sum_{j <= k} B[k][j] * y_j
 *     depends on y_0..y_k only;
 *   - the diagonal is positive: B[k][k] >= 1;
 *   - every off-diagonal entry is reduced against its row's diagonal: 0 <= B[k][j] < B[k][k] for
 *     j < k (so a row with B[k][k] = 1 is the unit row e_k);
 *   - x0 is reduced the same way: 0 <= x0_k < B[k][k].
 * This form is unique for a given solution set and variable order (it does not depend on the order
 * or the redundancy of the conditions), and it is minimal: det B = prod_k B[k][k] is the index of
 * the solution lattice in Z^nv. Consequences: no condition gives the identity with x0 = 0; a
 * variable no condition mentions (coefficient ≡ 0 mod den everywhere) has a unit column and row,
 * x_v = y_v; `(i)/2` gives i = 2*y0; `(i + 1)/2` gives i = 1 + 2*y0; `(2*i + j)/3` over (i, j)
 * gives i = y0, j = y0 + 3*y1.
 *
 * All arithmetic is exact int64 with overflow checks; coefficients and offsets are reduced modulo
 * their den first and residues are computed without overflow, so huge coefficients are fine.
 * Overflow (-1) means an entry of the result, or an intermediate of one elimination step (bounded
 * by about den times the entries of the lattices before and after it), does not fit int64: only
 * dens or periods within a factor den of 2^63 can trigger it. */
#ifndef CN_TILE_LATTICE_H
#define CN_TILE_LATTICE_H

#include <stdint.h>

#include "tile/tile.h"

/* (c . x + off) ≡ 0 (mod den), den >= 1 */
typedef struct {
  int64_t c[CN_TILE_MAX_VARS];
  int64_t off;
  int64_t den;
} cn_tile_lattice_cond;

/* The integer points satisfying every condition: x = x0 + basis * y for all integer y (n = number
 * of y variables, always = nv); basis[row][column], in the canonical form above. */
typedef struct {
  int n;
  int64_t x0[CN_TILE_MAX_VARS];
  int64_t basis[CN_TILE_MAX_VARS][CN_TILE_MAX_VARS];
} cn_tile_lattice;

/* Solves the nc conditions cs over nv variables (0 <= nv <= CN_TILE_MAX_VARS, nc >= 0; only
 * c[0..nv-1] are read). Returns 1 and fills *out when some integer point satisfies them all, 0
 * when none does, -1 when an intermediate or result value does not fit int64; *out is written
 * only when 1 is returned. */
int cn_tile_lattice_solve(int nv, int nc, const cn_tile_lattice_cond *cs, cn_tile_lattice *out);

#endif
