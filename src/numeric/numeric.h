/* Numeric core: the precision and op tables as data, scalar values, conversions between
 * precisions and the reference evaluation of primitive ops.
 *
 * The semantics here and in generated C are one: the expressions of include/cannl/ops.def and the
 * helpers of builtins.h are compiled into this module and emitted into generated code, and
 * cn_value_convert and cn_conv_c implement the same conversion rules (documented in
 * docs/ARCHITECTURE.md, "Precisions"). */
#ifndef CN_NUMERIC_H
#define CN_NUMERIC_H

#include "core/core.h"
#include "numeric/builtins.h"

typedef enum { CN_ACCUM_NO, CN_ACCUM_ACC, CN_ACCUM_ACC_INIT } cn_accum_kind;
typedef enum {
  CN_LOGIC_POINTWISE,
  CN_LOGIC_NONE,
  CN_LOGIC_COMPOSE_ACC,
  CN_LOGIC_DEDICATED
} cn_logic;

/* Precision kinds an op supports (ops.def "kinds"). */
#define CN_KF 1u
#define CN_KI 2u
#define CN_KB 4u
/* Op flags (ops.def "flags"). */
#define CN_OPF_TO_PREC 1u
#define CN_OPF_VEC     2u
#define CN_OPF_COND    4u

typedef struct {
  const char *name;
  const char *infix;
  int arity;
  cn_accum_kind accum;
  cn_logic logic;
  double neutral;
  unsigned kinds, flags;
  const char *fexpr, *iexpr, *bexpr; /* stringized templates over a, b, c; "CN_NA" if none */
} cn_op_info;
extern const cn_op_info cn_op_table[CN_OP_COUNT];

typedef struct {
  const char *name;
  size_t bytes;
  const char *store_c, *compute_c;
  cn_prec_kind kind;
  int rank;
  bool exact; /* a stored cell is its compute value (precisions.def) */
} cn_prec_info;
extern const cn_prec_info cn_prec_table[CN_PREC_COUNT];

/* The %cd assignment operator that accumulates with `accum` (syntax-extensions-cd-op's table): "="
 * then ":" when the LHS is cleared first, then the op's infix without a leading '-' (relu_gate's
 * "-?/" gives "=?/"); a clear-only accumulator (Arg2) is the plain "=:". False when accum has no
 * such form. Writes at most cap bytes (NUL included). */
bool cn_op_assign_spelling(cn_op accum, bool clear, char *out, size_t cap);
/* The binary primitive whose infix operator is `infix` (ops.def); false when none. */
bool cn_op_binary_from_infix(const char *infix, cn_op *out);

/* True if a stored cell of prec is its compute value (the `exact` column of precisions.def):
 * loads and stores are plain accesses, with no wrap or rounding on store. */
bool cn_prec_stores_as_computed(cn_prec prec);
/* True if generated C computes the precision in float (single, half, bfloat16, fp8): the
 * interpreter evaluates its ops on float too (cn_eval_op_float), holding the results in doubles. */
bool cn_prec_computes_in_float(cn_prec prec);

/* The kind bit (CN_KF/CN_KI/CN_KB) of a precision. */
unsigned cn_prec_kind_bit(cn_prec prec);

/* A scalar in the reference semantics: f for FLOAT kinds (always double), i for INT, u for UINT,
 * w for BITS. */
typedef union {
  double f;
  int64_t i;
  uint64_t u;
  cn_u4x32 w;
} cn_value;

cn_value cn_value_load(cn_prec prec, const void *cell);
void cn_value_store(cn_prec prec, cn_value v, void *cell);
/* Converts a compute value of precision `from` to one of precision `to`, exactly as generated
 * code does (cn_conv_c). */
cn_value cn_value_convert(cn_prec from, cn_prec to, cn_value v);
/* A double constant as a value of prec: float kinds keep it; integer kinds truncate and saturate
 * to the stored range (so -inf is the smallest value), NaN gives 0; BITS gives {lo, hi, 0, 0} of
 * the saturated int64. */
cn_value cn_value_of_double(cn_prec prec, double x);
double cn_value_to_double(cn_prec prec, cn_value v);
/* A 64-bit pattern as a value of prec (Constant_bits): integer kinds take it (truncated to the
 * stored width on store), BITS gives {lo, hi, 0, 0}, float kinds convert the signed integer. */
cn_value cn_value_of_bits(cn_prec prec, uint64_t bits);
/* Truth of a value (a condition): != 0, NaN is true; for BITS any nonzero word. */
bool cn_value_truth(cn_prec prec, cn_value v);

/* The precision argument `arg` of op is computed in, given the op's result precision and the
 * argument's own precision: uint4x32 for CN_OPF_TO_PREC ops, the argument's own for the condition
 * of CN_OPF_COND ops, the result precision otherwise. Both backends convert by this rule. */
cn_prec cn_op_operand_prec(cn_op op, cn_prec result, int arg, cn_prec arg_prec);

/* Evaluates op on arguments already converted to prec (for CN_OPF_TO_PREC ops args[0] is the
 * uint4x32 operand and the result has precision prec; for CN_OPF_COND ops args[0] is the condition
 * converted to prec as 1 or 0). The op must support prec (CN_ASSERT). Not for CN_OPF_VEC ops. */
cn_value cn_eval_op(cn_op op, cn_prec prec, const cn_value *args);
/* Op on float operands as generated C evaluates it (eval_float.c): cn_eval_op's rule for the
 * precisions that compute in float. */
float cn_eval_op_float(cn_op op, float a, float b, float c);
/* The vectorized uint4x32_to_prec_uniform: writes 16/bytes(prec) values of precision prec. */
int cn_eval_vec_op(cn_op op, cn_prec prec, cn_u4x32 arg, cn_value *out);
int cn_vec_length(cn_prec prec); /* 16 / bytes(prec) */

/* ---- C spellings for generated code (all write into sb) ---- */
/* Converts the C expression `expr`, of the compute type of `from`, to the compute type of `to`. */
void cn_conv_c(cn_sbuf *sb, cn_prec from, cn_prec to, const char *expr);
/* A stored cell lvalue `cell` read as a compute value / a compute value written into it. */
void cn_load_c(cn_sbuf *sb, cn_prec prec, const char *cell);
void cn_store_c(cn_sbuf *sb, cn_prec prec, const char *cell, const char *value);
/* A literal of the compute type of prec (for BITS: a compound literal). */
void cn_const_c(cn_sbuf *sb, cn_prec prec, cn_value v);
/* The op applied to operand expressions (already of the right compute types): the table's
 * template with a, b, c substituted (parenthesized), or the cn_u4x32_to_<prec>_uniform call for
 * CN_OPF_TO_PREC ops. */
void cn_op_c(cn_sbuf *sb, cn_op op, cn_prec prec, const char *const *args);
/* cn_op_c with every call of a generic helper of builtins.h (cn_iadd, cn_max, cn_select, ...:
 * its _Generic macros) spelled as the function the macro selects for prec's compute type
 * (cn_iadd_i64, cn_max_f32, ...): for languages without _Generic (OpenCL C, CUDA C++). The
 * operands must be spelled so already. */
void cn_op_c_typed(cn_sbuf *sb, cn_op op, cn_prec prec, const char *const *args);
/* Whether cn_op_c's text for op on prec contains operand arg (fst and snd drop one): a generator
 * that lists what a statement reads (a kernel's parameters) skips the operands it does not. */
bool cn_op_c_reads(cn_op op, cn_prec prec, int arg);

/* The text of builtins.h, prepended to every generated C file. */
extern const char cn_builtins_source[];
extern const size_t cn_builtins_source_len;

#endif
