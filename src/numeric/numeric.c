/* Numeric core: the precision and op tables, scalar values in the reference semantics, the
 * conversions between precisions, the reference evaluation of primitive ops, and the public
 * "Precisions" / "Primitive ops" API of include/cannl.h.
 *
 * Invariants: every per-precision or per-op switch is generated from the X-macro tables; the op
 * semantics are the table's expression columns compiled here as code (and emitted as text into
 * generated C by conv_c.c), with the helpers of builtins.h, so both backends share one
 * definition. The interpreter keeps FLOAT values in double, INT values in int64_t, UINT values in
 * uint64_t and BITS values as cn_u4x32.
 *
 * Conversion rules (cn_value_convert here and cn_conv_c in conv_c.c implement exactly these):
 *   - Same precision: unchanged.
 *   - FLOAT -> FLOAT: a C cast to the target's compute type (float for single, half, bfloat16 and
 *     fp8, double for double); rounding to half / bfloat16 / fp8 happens only on store. The
 *     interpreter rounds to float when the target computes in float.
 *   - INT / UINT -> FLOAT: a C cast from the 64-bit compute value to the target's compute type
 *     (one rounding, int64 -> float directly).
 *   - FLOAT -> INT / UINT: truncate toward zero and saturate to the TARGET's stored range (byte
 *     0..255, int32 INT32_MIN..INT32_MAX, uint64 0..UINT64_MAX, ...); NaN gives 0 (cn_ftoi,
 *     cn_ftou).
 *   - INT / UINT -> INT / UINT: wrap to the target's stored width, i.e. the value goes through a
 *     target cell: cn_load_<to>(cn_store_<to>(x)) (int64 300 -> byte 44, int64 -1 -> uint32
 *     4294967295). A change of signedness of the 64-bit compute type reinterprets the two's
 *     complement pattern (cn_u64_as_i64 / a cast to uint64_t).
 *   - X -> BITS (uint4x32): ocannl-notes §7.2 by the SOURCE precision, cn_<from>_to_u4x32:
 *     int32/uint32 spread {u, u^0x9E3779B9, u^0x6C078965, u^rotl(u,16)}; int64/uint64 {lo, hi,
 *     0, 0}; single / double their raw IEEE bits {bits, 0, 0, 0} / {lo, hi, 0, 0}; byte/uint16
 *     {(uint32)x, 0, 0, 0}; half/bfloat16/fp8 {x truncated and saturated to uint32, 0, 0, 0}.
 *   - BITS -> INT / UINT: word 0 (64-bit targets: v1 << 32 | v0) wrapped to the target width,
 *     which is cn_u4x32_to_<to>_uniform.
 *   - BITS -> FLOAT: the C cast of word 0, (compute type)v[0].
 *   - Store (compute value -> stored cell): cn_store_<prec>; half / bfloat16 / fp8 round to
 *     nearest even, integers wrap to their width. The interpreter first casts its double to the
 *     compute type (float for single/half/bfloat16/fp8), as a value of generated C would be.
 *   - Load (stored cell -> compute value): cn_load_<prec>, exact.
 * Computation: the interpreter holds every FLOAT value in a double, but evaluates the ops of the
 * precisions that compute in float (single / half / bfloat16 / fp8) on float (cn_eval_op_float,
 * with <tgmath.h> as generated C), rounding after each op as generated C does, and double in
 * double; so the two backends give the same bits for every expression, not only for every
 * conversion. */
#include "numeric/numeric.h"

#include <math.h>
#include <string.h>

/* ---- Tables ---- */

/* The tables, one initializer per row of the X-macro files. */
/* clang-format off */
const cn_prec_info cn_prec_table[CN_PREC_COUNT] = {
#define CN_PREC_ALL(ID, lc, bytes, store_t, compute_t, kind, rank, exact)                          \
  [CN_PREC_##ID] = {#lc, bytes, #store_t, #compute_t, CN_PKIND_##kind, rank, exact},
#include "cannl/precisions.def"
};

const cn_op_info cn_op_table[CN_OP_COUNT] = {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  [CN_OP_##ID] = {name, infix, arity, CN_ACCUM_##accum, CN_LOGIC_##logic, neutral, kinds, flags,   \
                  #fexpr, #iexpr, #bexpr},
#include "cannl/ops.def"
};
/* clang-format on */

static bool valid_prec(cn_prec prec) {
  return (unsigned)prec < (unsigned)CN_PREC_COUNT;
}
static bool valid_op(cn_op op) {
  return (unsigned)op < (unsigned)CN_OP_COUNT;
}

unsigned cn_prec_kind_bit(cn_prec prec) {
  CN_ASSERT(valid_prec(prec));
  switch (cn_prec_table[prec].kind) {
  case CN_PKIND_FLOAT: return CN_KF;
  case CN_PKIND_INT:
  case CN_PKIND_UINT: return CN_KI;
  case CN_PKIND_BITS: return CN_KB;
  }
  CN_ASSERT(!"invalid precision kind");
  return 0;
}

/* ---- Facts derived from the precision table's C types ---- */

/* True if generated C computes the precision in float (single, half, bfloat16, fp8): the
 * interpreter rounds values converted into it to float, as the C cast does. */
bool cn_prec_computes_in_float(cn_prec prec) {
  switch (prec) {
#define CN_PREC(ID, lc, bytes, store_t, compute_t, kind, rank)                                     \
  case CN_PREC_##ID: {                                                                             \
    return _Generic((compute_t){0}, float : true, default : false);                                \
  }
#include "cannl/precisions.def"
  default: break;
  }
  CN_ASSERT(!"invalid precision");
  return false;
}

/* The table's `exact` column states what its two C types imply; a row that says otherwise does
 * not compile. */
#define CN_PREC_ALL(ID, lc, bytes, store_t, compute_t, kind, rank, exact)                          \
  _Static_assert(_Generic((store_t){0}, compute_t : 1, default : 0) == (exact),                    \
                 "precisions.def: the exact column of " #lc " contradicts its store and compute "  \
                 "types");
#include "cannl/precisions.def"

bool cn_prec_stores_as_computed(cn_prec prec) {
  CN_ASSERT(valid_prec(prec));
  return cn_prec_table[prec].exact;
}

/* The stored range of an integer precision (INT or UINT kind); 0 for the others. */
/* clang-format off */
#define STORED_MIN(T)                                                                              \
  _Generic((T){0}, int8_t: INT8_MIN, int16_t: INT16_MIN, int32_t: INT32_MIN, int64_t: INT64_MIN,   \
                   default: 0)
#define STORED_MAX(T)                                                                              \
  _Generic((T){0}, int8_t: INT8_MAX, int16_t: INT16_MAX, int32_t: INT32_MAX, int64_t: INT64_MAX,   \
                   uint8_t: UINT8_MAX, uint16_t: UINT16_MAX, uint32_t: UINT32_MAX,                 \
                   uint64_t: UINT64_MAX, default: 0)
/* clang-format on */
static int64_t stored_min(cn_prec prec) {
  switch (prec) {
#define CN_PREC(ID, lc, bytes, store_t, compute_t, kind, rank)                                     \
  case CN_PREC_##ID: {                                                                             \
    return (int64_t)STORED_MIN(store_t);                                                           \
  }
#include "cannl/precisions.def"
  default: break;
  }
  CN_ASSERT(!"invalid precision");
  return 0;
}
static uint64_t stored_max(cn_prec prec) {
  switch (prec) {
#define CN_PREC(ID, lc, bytes, store_t, compute_t, kind, rank)                                     \
  case CN_PREC_##ID: {                                                                             \
    return (uint64_t)STORED_MAX(store_t);                                                          \
  }
#include "cannl/precisions.def"
  default: break;
  }
  CN_ASSERT(!"invalid precision");
  return 0;
}

/* A value of each kind from a compute value, and the compute value (of C type T) of a value. */
#define VALUE_OF_FLOAT(x)      ((cn_value){.f = (double)(x)})
#define VALUE_OF_INT(x)        ((cn_value){.i = (x)})
#define VALUE_OF_UINT(x)       ((cn_value){.u = (x)})
#define VALUE_OF_BITS(x)       ((cn_value){.w = (x)})
#define COMPUTE_OF_FLOAT(T, v) ((T)(v).f)
#define COMPUTE_OF_INT(T, v)   ((v).i)
#define COMPUTE_OF_UINT(T, v)  ((v).u)
#define COMPUTE_OF_BITS(T, v)  ((v).w)

/* ---- Values ---- */

cn_value cn_value_load(cn_prec prec, const void *cell) {
  switch (prec) {
#define CN_PREC(ID, lc, bytes, store_t, compute_t, kind, rank)                                     \
  case CN_PREC_##ID: {                                                                             \
    store_t stored;                                                                                \
    memcpy(&stored, cell, sizeof stored);                                                          \
    return VALUE_OF_##kind(cn_load_##lc(stored));                                                  \
  }
#include "cannl/precisions.def"
  default: break;
  }
  CN_ASSERT(!"invalid precision");
  return (cn_value){.u = 0};
}

void cn_value_store(cn_prec prec, cn_value v, void *cell) {
  switch (prec) {
#define CN_PREC(ID, lc, bytes, store_t, compute_t, kind, rank)                                     \
  case CN_PREC_##ID: {                                                                             \
    store_t stored = cn_store_##lc(COMPUTE_OF_##kind(compute_t, v));                               \
    memcpy(cell, &stored, sizeof stored);                                                          \
    return;                                                                                        \
  }
#include "cannl/precisions.def"
  default: break;
  }
  CN_ASSERT(!"invalid precision");
}

/* A double as the compute value of a FLOAT precision: rounded to float if it computes in float. */
static double round_to_compute(cn_prec prec, double x) {
  return cn_prec_computes_in_float(prec) ? (double)(float)x : x;
}

cn_value cn_value_of_double(cn_prec prec, double x) {
  CN_ASSERT(valid_prec(prec));
  cn_value v;
  switch (cn_prec_table[prec].kind) {
  case CN_PKIND_FLOAT: v.f = x; return v;
  case CN_PKIND_INT: v.i = cn_ftoi(x, stored_min(prec), (int64_t)stored_max(prec)); return v;
  case CN_PKIND_UINT: v.u = cn_ftou(x, stored_max(prec)); return v;
  case CN_PKIND_BITS: v.w = cn_u4x32_of_u64((uint64_t)cn_ftoi(x, INT64_MIN, INT64_MAX)); return v;
  }
  CN_ASSERT(!"invalid precision kind");
  return v;
}

/* BITS read as the signed 64-bit integer of its first two words: the inverse of of_double. */
double cn_value_to_double(cn_prec prec, cn_value v) {
  CN_ASSERT(valid_prec(prec));
  switch (cn_prec_table[prec].kind) {
  case CN_PKIND_FLOAT: return v.f;
  case CN_PKIND_INT: return (double)v.i;
  case CN_PKIND_UINT: return (double)v.u;
  case CN_PKIND_BITS: return (double)cn_u64_as_i64(cn_u4x32_lo64(v.w));
  }
  CN_ASSERT(!"invalid precision kind");
  return 0;
}

cn_value cn_value_of_bits(cn_prec prec, uint64_t bits) {
  CN_ASSERT(valid_prec(prec));
  cn_value v;
  int64_t signed_bits = cn_u64_as_i64(bits);
  switch (cn_prec_table[prec].kind) {
  case CN_PKIND_FLOAT: v.f = (double)signed_bits; return v;
  case CN_PKIND_INT: v.i = signed_bits; return v;
  case CN_PKIND_UINT: v.u = bits; return v;
  case CN_PKIND_BITS: v.w = cn_u4x32_of_u64(bits); return v;
  }
  CN_ASSERT(!"invalid precision kind");
  return v;
}

bool cn_value_truth(cn_prec prec, cn_value v) {
  CN_ASSERT(valid_prec(prec));
  switch (cn_prec_table[prec].kind) {
  case CN_PKIND_FLOAT: return v.f != 0; /* NaN is true */
  case CN_PKIND_INT: return v.i != 0;
  case CN_PKIND_UINT: return v.u != 0;
  case CN_PKIND_BITS: return (v.w.v[0] | v.w.v[1] | v.w.v[2] | v.w.v[3]) != 0;
  }
  CN_ASSERT(!"invalid precision kind");
  return false;
}

/* The scalar uint4x32 -> prec conversion (uniform1, and BITS -> integer conversions). */
static cn_value uniform1(cn_prec prec, cn_u4x32 w) {
  switch (prec) {
#define CN_PREC(ID, lc, bytes, store_t, compute_t, kind, rank)                                     \
  case CN_PREC_##ID: {                                                                             \
    return VALUE_OF_##kind(cn_u4x32_to_##lc##_uniform(w));                                         \
  }
#include "cannl/precisions.def"
  default: break;
  }
  CN_ASSERT(!"invalid precision");
  return (cn_value){.u = 0};
}

/* The §7.2 conversion into uint4x32, by the source precision. */
static cn_u4x32 into_bits(cn_prec from, cn_value v) {
  switch (from) {
#define CN_PREC(ID, lc, bytes, store_t, compute_t, kind, rank)                                     \
  case CN_PREC_##ID: {                                                                             \
    return cn_##lc##_to_u4x32(COMPUTE_OF_##kind(compute_t, v));                                    \
  }
#include "cannl/precisions.def"
  default: break;
  }
  CN_ASSERT(!"invalid precision");
  return v.w;
}

cn_value cn_value_convert(cn_prec from, cn_prec to, cn_value v) {
  CN_ASSERT(valid_prec(from) && valid_prec(to));
  if (from == to) return v;
  cn_prec_kind fk = cn_prec_table[from].kind, tk = cn_prec_table[to].kind;
  cn_value r;
  if (tk == CN_PKIND_BITS) {
    r.w = into_bits(from, v);
    return r;
  }
  if (fk == CN_PKIND_BITS) {
    if (tk != CN_PKIND_FLOAT) return uniform1(to, v.w);
    r.f = round_to_compute(to, (double)v.w.v[0]); /* uint32 -> double is exact: one rounding */
    return r;
  }
  if (tk == CN_PKIND_FLOAT) {
    bool to_float = cn_prec_computes_in_float(to);
    if (fk == CN_PKIND_FLOAT)
      r.f = round_to_compute(to, v.f);
    else if (fk == CN_PKIND_INT)
      r.f = to_float ? (double)(float)v.i : (double)v.i;
    else
      r.f = to_float ? (double)(float)v.u : (double)v.u;
    return r;
  }
  if (fk == CN_PKIND_FLOAT) {
    if (tk == CN_PKIND_INT)
      r.i = cn_ftoi(v.f, stored_min(to), (int64_t)stored_max(to));
    else
      r.u = cn_ftou(v.f, stored_max(to));
    return r;
  }
  /* Integer to integer: the compute type's signedness, then a round trip through a target cell. */
  r = v;
  if (fk == CN_PKIND_INT && tk == CN_PKIND_UINT) r.u = (uint64_t)v.i;
  if (fk == CN_PKIND_UINT && tk == CN_PKIND_INT) r.i = cn_u64_as_i64(v.u);
  if (cn_prec_stores_as_computed(to)) return r;
  unsigned char cell[sizeof(cn_value)];
  cn_value_store(to, r, cell);
  return cn_value_load(to, cell);
}

cn_prec cn_op_operand_prec(cn_op op, cn_prec result, int arg, cn_prec arg_prec) {
  CN_ASSERT(valid_op(op) && arg >= 0 && arg < cn_op_table[op].arity);
  if (cn_op_table[op].flags & CN_OPF_TO_PREC) return CN_PREC_UINT4X32;
  if ((cn_op_table[op].flags & CN_OPF_COND) && arg == 0) return arg_prec;
  return result;
}

/* ---- Evaluation: the table's expression columns, compiled as code ---- */

/* Marks a kind an op is not defined on; unreachable, since cn_eval_op asserts support first. */
#define CN_NA (cn_assert_fail(__FILE__, __LINE__, "op evaluated on an unsupported kind"), a)

static double eval_float(cn_op op, double a, double b, double c) {
  (void)b, (void)c;
  switch (op) {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  case CN_OP_##ID: {                                                                               \
    return (fexpr);                                                                                \
  }
#include "cannl/ops.def"
  default: break;
  }
  CN_ASSERT(!"invalid op");
  return a;
}

static int64_t eval_int(cn_op op, int64_t a, int64_t b, int64_t c) {
  (void)b, (void)c;
  switch (op) {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  case CN_OP_##ID: {                                                                               \
    return (iexpr);                                                                                \
  }
#include "cannl/ops.def"
  default: break;
  }
  CN_ASSERT(!"invalid op");
  return a;
}

/* The same templates on uint64_t: `a >= 0` is always true there, which is the intended meaning. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#endif
static uint64_t eval_uint(cn_op op, uint64_t a, uint64_t b, uint64_t c) {
  (void)b, (void)c;
  switch (op) {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  case CN_OP_##ID: {                                                                               \
    return (iexpr);                                                                                \
  }
#include "cannl/ops.def"
  default: break;
  }
  CN_ASSERT(!"invalid op");
  return a;
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

static cn_u4x32 eval_bits(cn_op op, cn_u4x32 a, cn_u4x32 b, cn_u4x32 c) {
  (void)b, (void)c;
  switch (op) {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  case CN_OP_##ID: {                                                                               \
    return (bexpr);                                                                                \
  }
#include "cannl/ops.def"
  default: break;
  }
  CN_ASSERT(!"invalid op");
  return a;
}

cn_value cn_eval_op(cn_op op, cn_prec prec, const cn_value *args) {
  CN_ASSERT(valid_op(op) && valid_prec(prec));
  const cn_op_info *info = &cn_op_table[op];
  CN_ASSERT(!(info->flags & CN_OPF_VEC));
  CN_ASSERT(cn_op_supports(op, prec));
  if (info->flags & CN_OPF_TO_PREC) return uniform1(prec, args[0].w);
  cn_value zero = {.w = {{0, 0, 0, 0}}}, r;
  cn_value a = args[0], b = info->arity > 1 ? args[1] : zero, c = info->arity > 2 ? args[2] : zero;
  switch (cn_prec_table[prec].kind) {
  case CN_PKIND_FLOAT:
    if (cn_prec_computes_in_float(prec))
      r.f = cn_eval_op_float(op, (float)a.f, (float)b.f, (float)c.f);
    else
      r.f = eval_float(op, a.f, b.f, c.f);
    return r;
  case CN_PKIND_INT: r.i = eval_int(op, a.i, b.i, c.i); return r;
  case CN_PKIND_UINT: r.u = eval_uint(op, a.u, b.u, c.u); return r;
  case CN_PKIND_BITS: r.w = eval_bits(op, a.w, b.w, c.w); return r;
  }
  CN_ASSERT(!"invalid precision kind");
  return zero;
}

int cn_vec_length(cn_prec prec) {
  CN_ASSERT(valid_prec(prec));
  return (int)(16 / cn_prec_table[prec].bytes);
}

int cn_eval_vec_op(cn_op op, cn_prec prec, cn_u4x32 arg, cn_value *out) {
  CN_ASSERT(valid_op(op) && (cn_op_table[op].flags & CN_OPF_VEC) && valid_prec(prec));
  switch (prec) {
#define CN_PREC(ID, lc, bytes, store_t, compute_t, kind, rank)                                     \
  case CN_PREC_##ID: {                                                                             \
    compute_t lanes[16 / bytes];                                                                   \
    cn_u4x32_to_##lc##_uniform_vec(arg, lanes);                                                    \
    for (int j = 0; j < 16 / bytes; j++) out[j] = VALUE_OF_##kind(lanes[j]);                       \
    return 16 / bytes;                                                                             \
  }
#include "cannl/precisions.def"
  default: break;
  }
  CN_ASSERT(!"invalid precision");
  return 0;
}

/* ---- Public API: precisions ---- */

const char *cn_prec_name(cn_prec prec) {
  return valid_prec(prec) ? cn_prec_table[prec].name : "(invalid precision)";
}

size_t cn_prec_bytes(cn_prec prec) {
  return valid_prec(prec) ? cn_prec_table[prec].bytes : 0;
}

/* An invalid precision reads as INT, the kind no op-table row depends on alone. */
cn_prec_kind cn_prec_kind_of(cn_prec prec) {
  return valid_prec(prec) ? cn_prec_table[prec].kind : CN_PKIND_INT;
}

cn_prec cn_prec_promote(cn_prec a, cn_prec b) {
  if (!valid_prec(a)) return b;
  if (!valid_prec(b)) return a;
  return cn_prec_table[b].rank > cn_prec_table[a].rank ? b : a;
}

bool cn_prec_from_name(const char *name, cn_prec *out) {
  if (!name) return false;
  for (int p = 0; p < CN_PREC_COUNT; p++)
    if (strcmp(cn_prec_table[p].name, name) == 0) {
      if (out) *out = (cn_prec)p;
      return true;
    }
  return false;
}

double cn_prec_cell_to_double(cn_prec prec, const void *cell) {
  if (!valid_prec(prec) || !cell) return NAN;
  return cn_value_to_double(prec, cn_value_load(prec, cell));
}

void cn_prec_cell_from_double(cn_prec prec, double value, void *cell) {
  if (!valid_prec(prec) || !cell) return;
  cn_value_store(prec, cn_value_of_double(prec, value), cell);
}

uint16_t cn_prec_single_to_bfloat16(float x) {
  return cn_store_bfloat16(x);
}
float cn_prec_bfloat16_to_single(uint16_t bits) {
  return cn_load_bfloat16(bits);
}
uint16_t cn_prec_single_to_half(float x) {
  return cn_store_half(x);
}
float cn_prec_half_to_single(uint16_t bits) {
  return cn_load_half(bits);
}
uint8_t cn_prec_single_to_fp8(float x) {
  return cn_store_fp8(x);
}
float cn_prec_fp8_to_single(uint8_t bits) {
  return cn_load_fp8(bits);
}

/* ---- Public API: primitive ops ---- */

const char *cn_op_name(cn_op op) {
  return valid_op(op) ? cn_op_table[op].name : "(invalid op)";
}
const char *cn_op_infix(cn_op op) {
  return valid_op(op) ? cn_op_table[op].infix : NULL;
}
int cn_op_arity(cn_op op) {
  return valid_op(op) ? cn_op_table[op].arity : 0;
}

bool cn_op_can_accumulate(cn_op op) {
  return valid_op(op) && cn_op_table[op].accum != CN_ACCUM_NO;
}

bool cn_op_assign_spelling(cn_op accum, bool clear, char *out, size_t cap) {
  if (!cn_op_can_accumulate(accum) || cap == 0) return false;
  if (cn_op_table[accum].accum == CN_ACCUM_ACC_INIT) {
    if (!clear) return false;
    return snprintf(out, cap, "=:") < (int)cap;
  }
  const char *infix = cn_op_table[accum].infix ? cn_op_table[accum].infix : cn_op_table[accum].name;
  if (infix[0] == '-' && infix[1]) infix++;
  return snprintf(out, cap, "=%s%s", clear ? ":" : "", infix) < (int)cap;
}

double cn_op_neutral(cn_op op, cn_prec prec) {
  if (!valid_op(op) || !valid_prec(prec)) return NAN;
  return cn_value_to_double(prec, cn_value_of_double(prec, cn_op_table[op].neutral));
}

/* CN_OPF_TO_PREC ops take a uint4x32 operand and produce any precision. */
bool cn_op_supports(cn_op op, cn_prec prec) {
  if (!valid_op(op) || !valid_prec(prec)) return false;
  if (cn_op_table[op].flags & CN_OPF_TO_PREC) return true;
  return (cn_op_table[op].kinds & cn_prec_kind_bit(prec)) != 0;
}

bool cn_op_binary_from_infix(const char *infix, cn_op *out) {
  for (int op = 0; op < CN_OP_COUNT; op++)
    if (cn_op_table[op].arity == 2 && cn_op_table[op].infix &&
        strcmp(cn_op_table[op].infix, infix) == 0) {
      *out = (cn_op)op;
      return true;
    }
  return false;
}

bool cn_op_from_name(const char *name, cn_op *out) {
  if (!name) return false;
  for (int op = 0; op < CN_OP_COUNT; op++)
    if (strcmp(cn_op_table[op].name, name) == 0) {
      if (out) *out = (cn_op)op;
      return true;
    }
  return false;
}

cn_status cn_op_eval(cn_ctx *ctx, cn_op op, cn_prec prec, const void *const *args, void *result) {
  if (!ctx) return CN_ERR_INVALID;
  if (!valid_op(op)) return cn_fail(ctx, CN_ERR_INVALID, "cn_op_eval: invalid op %d", (int)op);
  if (!valid_prec(prec))
    return cn_fail(ctx, CN_ERR_INVALID, "cn_op_eval: invalid precision %d", (int)prec);
  const cn_op_info *info = &cn_op_table[op];
  if (!cn_op_supports(op, prec))
    return cn_fail(ctx, CN_ERR_UNSUPPORTED, "op %s is not defined for precision %s", info->name,
                   cn_prec_table[prec].name);
  if (!args || !result)
    return cn_fail(ctx, CN_ERR_INVALID, "cn_op_eval: op %s: NULL %s", info->name,
                   args ? "result cell" : "argument array");
  for (int a = 0; a < info->arity; a++)
    if (!args[a])
      return cn_fail(ctx, CN_ERR_INVALID, "cn_op_eval: op %s: argument %d is NULL", info->name, a);
  cn_prec operand_prec = (info->flags & CN_OPF_TO_PREC) ? CN_PREC_UINT4X32 : prec;
  cn_value values[3];
  for (int a = 0; a < info->arity; a++) values[a] = cn_value_load(operand_prec, args[a]);
  if (info->flags & CN_OPF_VEC) {
    cn_value lanes[16];
    int length = cn_eval_vec_op(op, prec, values[0].w, lanes);
    for (int j = 0; j < length; j++)
      cn_value_store(prec, lanes[j],
                     (unsigned char *)result + (size_t)j * cn_prec_table[prec].bytes);
    return CN_OK;
  }
  /* The condition of a CN_OPF_COND op reaches cn_eval_op as 1 or 0 of the op's precision. */
  if (info->flags & CN_OPF_COND)
    values[0] = cn_value_of_double(prec, cn_value_truth(prec, values[0]) ? 1.0 : 0.0);
  cn_value_store(prec, cn_eval_op(op, prec, values), result);
  return CN_OK;
}
