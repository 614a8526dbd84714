/* Operations that move cells without computing them (issue 31): concat along one axis and
 * reshape. Each is built from tensors recorded with their projections over the operands' known
 * dims (cn_tensor_new_recorded_rows), so the gradient is the core's slot-swapped read of the same
 * record (deriv.c) and nothing here derives one:
 *
 *   concat a b axis   A[.. i ..] = a[.. i ..] and B[.. i + n_a ..] = b[.. i ..] over a result of
 *                     n_a + n_b cells along the axis, each leaving the cells it does not reach 0
 *                     (`=:+` clears first), then A + B: a.grad reads A.grad where A placed a, b's
 *                     gradient is split back the same way;
 *   reshape t dims    F[flat(x)] = t[x], flat the row-major offset of x over t's memory order,
 *                     then R[y] = F[flat'(y)] over the new dims' memory order: every cell keeps
 *                     its offset.
 *
 * Axes are counted in memory order: the batch axes, then the output axes, then the input axes
 * (as cn_tensor_embed_dim counts them). Invariants: the operands' dims are solved when the
 * operation is built (else a message naming the operand and its shape so far); a failed piece
 * returns NULL keeping its constructor's message. */
#include "tensor/tensor.h"

#include <stdio.h>
#include <string.h>

/* t's rows (memory order lengths n[0] batch, n[1] output, n[2] input) and dims in memory order;
 * false with a message when they are not solved yet. */
static bool known(cn_graph *g, const char *what, cn_tensor *t, int n[3], int64_t *dims) {
  static const cn_row_kind order[3] = {CN_ROW_BATCH, CN_ROW_OUTPUT, CN_ROW_INPUT};
  int at = 0;
  for (int k = 0; k < 3; k++) {
    n[k] = cn_shape_row_dims(g->shapes, t->shape, order[k], dims + at, CN_MAX_RANK - at);
    if (n[k] < 0) {
      if (cn_ctx_status(g->ctx) == CN_ERR_NOMEM) return false;
      cn_ctx_clear_error(g->ctx);
      cn_fail(g->ctx, CN_ERR_INVALID,
              "%s: the shape of \"%s\" (#%d) is not known yet (%s): give its dims, or apply %s "
              "once the graph is materialized",
              what, t->label, t->id, cn_tensor_shape(t), what);
      return false;
    }
    at += n[k];
  }
  return true;
}

/* The rows of a cn_dims from memory-order row lengths and dims (pointing into dims). */
static cn_dims rows_of(const int n[3], const int64_t *dims) {
  return (cn_dims){{n[0], dims, NULL}, {n[2], dims + n[0] + n[1], NULL}, {n[1], dims + n[0], NULL}};
}

/* A tensor with the given rows whose cell lhs(x) is t's cell rhs(x) for every x of t's cells
 * (t_rank iterators over t_dims); lhs_coef/rhs_coef: per map axis, the coefficient of each
 * iterator (row-major, map rank x t_rank), offsets per map axis. */
typedef struct {
  int rank;
  const int64_t *dims;
  const int64_t *coef; /* rank x n_iters */
  const int64_t *offset;
} map_spec;

static cn_tensor *moved(cn_graph *g, const char *label, cn_tensor *t, const cn_dims *rows,
                        int n_iters, const int64_t *sizes, map_spec lhs, map_spec rhs) {
  cn_ctx *ctx = g->ctx;
  cn_symbol iters[CN_MAX_RANK];
  for (int i = 0; i < n_iters; i++) {
    char name[16];
    snprintf(name, sizeof name, "m%d", i);
    if ((iters[i] = cn_symbol_create(ctx, name, sizes[i])) < 0) return NULL;
  }
  cn_index maps[2][CN_MAX_RANK];
  const map_spec *spec[2] = {&lhs, &rhs};
  for (int s = 0; s < 2; s++)
    for (int a = 0; a < spec[s]->rank; a++)
      maps[s][a] = cn_index_affine(n_iters, iters, spec[s]->coef + (size_t)a * (size_t)n_iters,
                                   spec[s]->offset ? spec[s]->offset[a] : 0);
  cn_proj *p =
      cn_proj_create(ctx, n_iters, iters, sizes, (cn_proj_tensor){lhs.rank, lhs.dims, maps[0]}, 1,
                     &(cn_proj_tensor){rhs.rank, rhs.dims, maps[1]});
  return p ? cn_tensor_new_recorded_rows(g, label, t->prec, rows, CN_OP_ADD, CN_OP_ID, 1, &t, p)
           : NULL;
}

/* The identity coefficients of a rank-r map over r iterators. */
static void identity(int r, int64_t *coef) {
  memset(coef, 0, sizeof *coef * (size_t)r * (size_t)r);
  for (int a = 0; a < r; a++) coef[a * r + a] = 1;
}

cn_tensor *cn_tensor_concat(cn_graph *g, cn_tensor *a, cn_tensor *b, int axis) {
  if (!cn_tensor_operands(g, "concat", 2, (cn_tensor *[]){a, b})) return NULL;
  int na[3], nb[3];
  int64_t da[CN_MAX_RANK], db[CN_MAX_RANK], dr[CN_MAX_RANK];
  if (!known(g, "concat", a, na, da) || !known(g, "concat", b, nb, db)) return NULL;
  int rank = na[0] + na[1] + na[2];
  if (na[0] != nb[0] || na[1] != nb[1] || na[2] != nb[2]) {
    cn_fail(g->ctx, CN_ERR_INVALID,
            "concat: \"%s\" (#%d) is %s and \"%s\" (#%d) is %s: the operands need the same batch, "
            "output and input axes",
            a->label, a->id, cn_tensor_shape(a), b->label, b->id, cn_tensor_shape(b));
    return NULL;
  }
  if (axis < 0 || axis >= rank) {
    cn_fail(g->ctx, CN_ERR_INVALID,
            "concat: axis %d of \"%s\" (#%d), which has %d axes (%s; counted in memory order: "
            "batch, output, input)",
            axis, a->label, a->id, rank, cn_tensor_shape(a));
    return NULL;
  }
  for (int x = 0; x < rank; x++)
    if (x != axis && da[x] != db[x]) {
      cn_fail(g->ctx, CN_ERR_INVALID,
              "concat along axis %d: axis %d is %lld in \"%s\" (#%d) and %lld in \"%s\" (#%d) (%s "
              "and %s)",
              axis, x, (long long)da[x], a->label, a->id, (long long)db[x], b->label, b->id,
              cn_tensor_shape(a), cn_tensor_shape(b));
      return NULL;
    }
  memcpy(dr, da, sizeof *dr * (size_t)rank);
  dr[axis] = da[axis] + db[axis];
  cn_dims rows = rows_of(na, dr);
  int64_t coef[CN_MAX_RANK * CN_MAX_RANK], offset[CN_MAX_RANK] = {0};
  identity(rank, coef);
  map_spec result = {rank, dr, coef, offset};
  cn_tensor *pa = moved(g, "concat", a, &rows, rank, da, result, (map_spec){rank, da, coef, NULL});
  offset[axis] = da[axis];
  cn_tensor *pb =
      pa ? moved(g, "concat", b, &rows, rank, db, result, (map_spec){rank, db, coef, NULL}) : NULL;
  return cn_tensor_labeled(cn_tensor_apply2(g, CN_OP_ADD, pa, pb), "concat");
}

/* The row-major strides of dims (rank r) as the coefficients of a rank-1 map. */
static void flat_coef(int r, const int64_t *dims, int64_t *coef) {
  int64_t stride = 1;
  for (int a = r - 1; a >= 0; a--) {
    coef[a] = stride;
    stride *= dims[a];
  }
}

cn_tensor *cn_tensor_reshape(cn_graph *g, cn_tensor *t, const cn_dims *dims) {
  if (!cn_tensor_operands(g, "reshape", 1, &t)) return NULL;
  int n[3];
  int64_t dt[CN_MAX_RANK];
  if (!known(g, "reshape", t, n, dt)) return NULL;
  int rt = n[0] + n[1] + n[2];
  const cn_axes *rows[3] = {&dims->batch, &dims->output, &dims->input};
  int nr[3], rr = 0;
  int64_t dr[CN_MAX_RANK];
  int64_t cells_t = 1, cells_r = 1;
  for (int x = 0; x < rt; x++) cells_t *= dt[x];
  for (int k = 0; k < 3; k++) {
    nr[k] = rows[k]->n;
    if (nr[k] < 0 || rr + nr[k] > CN_MAX_RANK || (nr[k] && !rows[k]->dims)) {
      cn_fail(g->ctx, CN_ERR_INVALID, "reshape: the new dims have more than %d axes or none given",
              CN_MAX_RANK);
      return NULL;
    }
    for (int i = 0; i < nr[k]; i++) {
      if (rows[k]->dims[i] < 1) {
        cn_fail(g->ctx, CN_ERR_INVALID, "reshape: a dim of %lld (every dim is at least 1)",
                (long long)rows[k]->dims[i]);
        return NULL;
      }
      dr[rr++] = rows[k]->dims[i];
      if (__builtin_mul_overflow(cells_r, rows[k]->dims[i], &cells_r)) cells_r = -1;
    }
  }
  if (cells_r != cells_t) {
    cn_fail(g->ctx, CN_ERR_INVALID,
            "reshape: \"%s\" (#%d) is %s, %lld cells; the new dims hold %lld", t->label, t->id,
            cn_tensor_shape(t), (long long)cells_t, (long long)cells_r);
    return NULL;
  }
  /* t's cells laid flat (F, one output axis), then read back in the new dims */
  int64_t coef_t[CN_MAX_RANK * CN_MAX_RANK], coef_r[CN_MAX_RANK * CN_MAX_RANK];
  int64_t flat_t[CN_MAX_RANK], flat_r[CN_MAX_RANK], cells[1] = {cells_t};
  identity(rt, coef_t);
  identity(rr, coef_r);
  flat_coef(rt, dt, flat_t);
  flat_coef(rr, dr, flat_r);
  const int flat_rows[3] = {0, 1, 0};
  cn_dims flat = rows_of(flat_rows, cells);
  cn_tensor *f = moved(g, "reshape", t, &flat, rt, dt, (map_spec){1, cells, flat_t, NULL},
                       (map_spec){rt, dt, coef_t, NULL});
  cn_dims shaped = rows_of(nr, dr);
  return f ? moved(g, "reshape", f, &shaped, rr, dr, (map_spec){rr, dr, coef_r, NULL},
                   (map_spec){1, cells, flat_r, NULL})
           : NULL;
}
