/* The cases of the all-ops tests, shared by tests/test_ops.c (the interpreter against generated
 * C), tests/test_opencl.c (generated C against OpenCL) and tests/test_cuda.c (every kernel to PTX,
 * the CUDA programs on the host, and on a GPU against generated C): every primitive op on edge
 * values (0, -0, negatives, NaN, infinities, extremes) as one pointwise assignment out =:
 * op(in...), the operands the Cartesian product of the values, all of a precision's ops as one
 * sequence, one conversion per source precision into a target, and the bitwise comparison of
 * stored cells. */
#ifndef CN_TEST_OPS_CASES_H
#define CN_TEST_OPS_CASES_H

#include "check.h"

#include "cannl.h"
#include "numeric/numeric.h"

#include <stdlib.h>

static const double float_vals[] = {0, -0.0, 1,    -1,  0.5,      -2.5,
                                    3, 7.25, 1e-3, NAN, INFINITY, -INFINITY};
static const double int_vals[] = {0, 1, -1, 2, -3, 5, 100, 255, 1e9, -1e9, 3e18, -7};
#define NVALS 12
#define NTERN 6 /* ternary ops take the first 6 values of each list */

/* One op's pointwise assignment out =: op(in...) over n cells within a shared context. */
typedef struct {
  cn_op op;
  cn_node *out;
  cn_asgn *asgn;
} op_case;

static op_case build_op(cn_ctx *ctx, cn_op op, cn_prec prec) {
  op_case oc = {op, NULL, NULL};
  int arity = cn_op_arity(op);
  cn_prec in_prec = (cn_op_table[op].flags & CN_OPF_TO_PREC) ? CN_PREC_UINT4X32 : prec;
  cn_prec_kind kind = cn_prec_kind_of(in_prec);
  const double *vals = kind == CN_PKIND_FLOAT ? float_vals : int_vals;
  int per = arity == 3 ? NTERN : NVALS;
  int64_t n = per;
  for (int k = 1; k < arity; k++) n *= per;
  oc.out = cn_node_create(ctx, cn_op_name(op), prec, 1, &n);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index map = cn_index_iter(i);
  cn_proj_tensor rhs[3];
  cn_buffer bufs[3];
  double *values = malloc(sizeof(double) * (size_t)n);
  cn_u4x32 *words = malloc(sizeof(cn_u4x32) * (size_t)n);
  for (int k = 0; k < arity; k++) {
    cn_node *in = cn_node_create(ctx, "in", in_prec, 1, &n);
    CHECK(in != NULL);
    if (kind == CN_PKIND_BITS) {
      /* Distinct words from a simple generator: the hash and the conversions are checked
       * bit-exactly, so any mixing of lanes shows. */
      for (int64_t c = 0; c < n; c++)
        for (int l = 0; l < 4; l++)
          words[c].v[l] = (uint32_t)(0x9E3779B9u * (uint32_t)(c * 4 + l + 1) + (uint32_t)k);
      CHECK(cn_node_set_cells(in, false, words, (size_t)n) == CN_OK);
    } else {
      /* Cartesian enumeration: operand k varies with stride per^(arity-1-k). */
      int64_t stride = 1;
      for (int s = k + 1; s < arity; s++) stride *= per;
      for (int64_t c = 0; c < n; c++) values[c] = vals[(c / stride) % per];
      CHECK(cn_node_set_values(in, false, values, (size_t)n) == CN_OK);
    }
    rhs[k] = (cn_proj_tensor){1, &n, &map};
    bufs[k] = (cn_buffer){in, false};
  }
  free(values);
  free(words);
  cn_proj *p = cn_proj_create(ctx, 1, &i, &n, (cn_proj_tensor){1, &n, &map}, arity, rhs);
  oc.asgn = cn_asgn_accum(ctx, true, CN_OP_ARG2, oc.out, op, bufs, p);
  CHECK_MSG(oc.asgn != NULL, "%s on %s: %s", cn_op_name(op), cn_prec_name(prec), cn_ctx_error(ctx));
  return oc;
}

/* Compares two stored cells bit for bit, a NaN equal to any NaN (the payload is not specified). */
static inline bool same_cell(cn_prec prec, const void *ci, const void *cc) {
  if (memcmp(ci, cc, cn_prec_bytes(prec)) == 0) return true;
  if (cn_prec_kind_of(prec) != CN_PKIND_FLOAT) return false;
  return isnan(cn_prec_cell_to_double(prec, ci)) && isnan(cn_prec_cell_to_double(prec, cc));
}

/* Every op supporting prec but the vectorized ones (only in Set_vec_unop: see test_e2e), as one
 * sequence: cases[k] and outs[k] for k < *count. */
static inline cn_asgn *build_all_ops(cn_ctx *ctx, cn_prec prec, op_case *cases, cn_node **outs,
                                     int *count) {
  cn_asgn *asgns[CN_OP_COUNT];
  *count = 0;
  for (int op = 0; op < CN_OP_COUNT; op++) {
    if (cn_op_table[op].flags & CN_OPF_VEC) continue;
    if (!cn_op_supports((cn_op)op, prec)) continue;
    cases[*count] = build_op(ctx, (cn_op)op, prec);
    if (!cases[*count].asgn) continue;
    asgns[*count] = cases[*count].asgn;
    outs[*count] = cases[*count].out;
    (*count)++;
  }
  return cn_asgn_seq(ctx, *count, asgns);
}

/* out_from =: id in_from for every source precision into `to` (outs[from]), as one sequence. */
static inline cn_asgn *build_conversions(cn_ctx *ctx, cn_prec to, cn_node **outs) {
  int64_t n = NVALS;
  cn_asgn *asgns[CN_PREC_COUNT];
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index map = cn_index_iter(i);
  cn_proj *p = cn_proj_create(ctx, 1, &i, &n, (cn_proj_tensor){1, &n, &map}, 1,
                              (cn_proj_tensor[]){{1, &n, &map}});
  for (int from = 0; from < CN_PREC_COUNT; from++) {
    cn_node *in = cn_node_create(ctx, cn_prec_name((cn_prec)from), (cn_prec)from, 1, &n);
    outs[from] = cn_node_create(ctx, "out", to, 1, &n);
    const double *vals = cn_prec_kind_of((cn_prec)from) == CN_PKIND_FLOAT ? float_vals : int_vals;
    CHECK(cn_node_set_values(in, false, vals, NVALS) == CN_OK);
    asgns[from] =
        cn_asgn_accum(ctx, true, CN_OP_ARG2, outs[from], CN_OP_ID, (cn_buffer[]){{in, false}}, p);
    CHECK_MSG(asgns[from] != NULL, "%s", cn_ctx_error(ctx));
  }
  return cn_asgn_seq(ctx, CN_PREC_COUNT, asgns);
}

#endif
