/* The iteration space of one Tile contraction (internal to src/tile): its index polynomials, the
 * change of variables that exact division makes, and the ranges of the loop variables.
 *
 * compile.c evaluates a statement's index expressions into rational polynomials over its index
 * variables x (cn_tile_poly_set); space.c solves their divisibility conditions together
 * (lattice.h) into x = x0 + B*y, rewrites every polynomial over y (an integer one there) and
 * bounds each y by interval propagation over the conditions 0 <= poly < bound, or, for a y that
 * only the conditions together bound (i + j and i - j both in range), by Fourier-Motzkin
 * elimination of the other y.
 *
 * Invariants: a cn_tile_poly is in lowest terms with den >= 1 (den == 1: an integer polynomial);
 * every polynomial over a change's y has den == 1. */
#ifndef CN_TILE_SPACE_H
#define CN_TILE_SPACE_H

#include "tile/lattice.h"
#include "tile/tile.h"

/* (c . x + off) / den over the statement's index variables x: den >= 1 and the fraction in lowest
 * terms (gcd(c, off, den) = 1), so den == 1 is an integer polynomial. Exact division makes den > 1;
 * only the value of a whole index expression has to be an integer, so `2 * (i / 2)` is `i`. */
typedef struct {
  int64_t c[CN_TILE_MAX_VARS];
  int64_t off;
  int64_t den;
} cn_tile_poly;

/* The index variables of one contraction, in order of first appearance. */
typedef struct {
  int n;
  const char *name[CN_TILE_MAX_VARS];
  size_t len[CN_TILE_MAX_VARS], first[CN_TILE_MAX_VARS];
  bool in_tensor[CN_TILE_MAX_VARS];
} cn_tile_vars;

#define CN_TILE_MAX_POLYS (4 * CN_MAX_RANK + CN_TILE_MAX_CONSTRAINTS)

/* The statement's index polynomials, each a condition 0 <= p < bound: the output's axes first
 * (bound -1 while an unsized axis is not derived), then each operand's axes, then the
 * constraints. */
typedef struct {
  int n, n_out;
  cn_tile_poly p[CN_TILE_MAX_POLYS];
  int64_t bound[CN_TILE_MAX_POLYS];
  size_t at[CN_TILE_MAX_POLYS]; /* where its expression starts (a constraint: the constraint) */
} cn_tile_poly_set;

/* x = x0 + B y over all integer y: the points where every index polynomial is an integer (the
 * identity when none divides). Variable y_j stands for x_{src[j]}: lattice row j is that
 * variable's, so x_{src[j]} = x0 + B[src[j]][j] y_j + (terms of earlier y) with B[src[j]][j] >= 1,
 * and x_{src[j]} = y_j exactly when that diagonal entry is 1 (the canonical form then leaves no
 * other term). */
typedef struct {
  int n;
  int src[CN_TILE_MAX_VARS];
  int64_t x0[CN_TILE_MAX_VARS];
  int64_t b[CN_TILE_MAX_VARS][CN_TILE_MAX_VARS]; /* b[v][j]: x_v's coefficient of y_j */
} cn_tile_change;

/* Inequalities c . y + k >= 0 one Fourier-Motzkin elimination holds at most: each elimination
 * may square their number, so a system past this is given up (its variable stays unbounded). */
#define CN_TILE_MAX_ROWS 256
/* Pairs of inequalities the joint bounds of one box combine at most, over all its variables: with
 * the rows' cap, this keeps an unlucky system from taking long. */
#define CN_TILE_MAX_COMBINED 16384

typedef struct {
  int64_t c[CN_TILE_MAX_VARS];
  int64_t k;
} cn_tile_row; /* c . y + k >= 0, c in lowest terms */

typedef struct {
  int n;
  cn_tile_row r[CN_TILE_MAX_ROWS];
} cn_tile_rows;

/* Scratch of one contraction (malloc'd: it is dropped once the record is built). */
typedef struct {
  cn_tile_vars vars;
  cn_tile_poly_set xs;       /* over the index variables: rational */
  cn_tile_poly_set ys, cand; /* over a change's variables: integer */
  cn_tile_lattice_cond conds[CN_TILE_MAX_POLYS], permuted[CN_TILE_MAX_POLYS];
  cn_tile_rows fm[2]; /* the joint bounds' systems, before and after one elimination */
  /* capped[j]: a cap (CN_TILE_MAX_ROWS or CN_TILE_MAX_COMBINED) stopped the chosen change's
   * joint bound of y_j, which may then be unbounded although the conditions bound it */
  bool capped[CN_TILE_MAX_VARS];
} cn_tile_work;

/* The change of variables for w->xs, where every polynomial with den > 1 asks its numerator to be
 * a multiple of den (all conditions solved together), then w->ys (the polynomials over it, unsized
 * output axes derived) and their box [lo, hi] (inclusive, known[v] when bounded; *bad_axis: -1,
 * or an axis whose size cannot be derived; w->capped). The box contains every valid point, and
 * may hold invalid ones (the loops test every condition). Returns 1; 0 when no integer point is
 * valid (the identity, w->ys hold the numerators and no box); -1 after an error (positioned in
 * src). */
int cn_tile_choose_change(cn_tile_src *src, cn_tile_work *w, cn_tile_change *ch, int64_t *lo,
                          int64_t *hi, bool *known, int *bad_axis);

/* Room for one loop variable's name (with its terminating NUL). */
#define CN_TILE_NAME_CAP 96
/* Writes y_j's loop-variable name into names[j] (names[0..j-1] already written): x_{src[j]}'s
 * own when x_{src[j]} = y_j, else that name, '_' and the diagonal entry (i = 2*i_2 + ...), with
 * '_' appended while an index variable or an earlier y has it. */
void cn_tile_name_variable(const cn_tile_vars *vt, const cn_tile_change *ch, int j,
                           char (*names)[CN_TILE_NAME_CAP]);

#endif
