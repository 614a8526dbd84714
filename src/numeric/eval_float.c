/* The op table's float expressions evaluated on float, for the precisions that compute in float
 * (single, half, bfloat16, fp8): the reference interpreter's semantics for them.
 *
 * Invariant: each op gives the bits generated C gives for the same float operands. Generated C
 * evaluates an op of such a precision on float operands with <tgmath.h> in scope (cn_op_c, the
 * prelude of cgen_prelude.c), and this file includes <tgmath.h> first for the same reason as
 * conv_c.c: log(a) of a float is logf, fma(a, b, c) is fmaf, (1 / a) divides in float. A
 * template whose C type is not float (a comparison yields int) is converted to float, as cn_op_c
 * casts it. So the interpreter rounds after every op exactly where generated C does, and the two
 * backends agree bit for bit on every op (src/runtime/routine.c relies on it to interpret a
 * routine in place of its compiled code). */
#include <tgmath.h>

#include "numeric/numeric.h"

/* Marks a kind an op is not defined on; unreachable, since cn_eval_op asserts support first. */
#define CN_NA (cn_assert_fail(__FILE__, __LINE__, "op evaluated on an unsupported kind"), a)

float cn_eval_op_float(cn_op op, float a, float b, float c) {
  (void)b, (void)c;
  switch (op) {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  case CN_OP_##ID: {                                                                               \
    return (float)(fexpr);                                                                         \
  }
#include "cannl/ops.def"
  default: break;
  }
  CN_ASSERT(!"invalid op");
  return a;
}
