/* cannl builtins: the scalar helpers that define cannl's numeric semantics, shared verbatim by
 * the library and by generated C.
 *
 * This file is compiled into the library (src/numeric/numeric.h includes it) and its whole text
 * is prepended to every generated C file after `#include <stdint.h>` (its `#include <math.h>`
 * becomes `<tgmath.h>` where the routine calls type-generic math: src/backend/cgen_prelude.c).
 * Invariants that follow from that double life:
 *   - self-contained C11: only <stdint.h>, <string.h> and <math.h>; no cannl header;
 *   - every function is `static inline` and every name starts with `cn_`;
 *   - math calls are explicitly typed (powf for float, pow on doubles, ...), so they mean the same
 *     with or without <tgmath.h>;
 *   - no undefined behaviour for any input: integer arithmetic wraps through uint64_t, division
 *     and remainder by zero give 0, float-to-integer conversions saturate (NaN gives 0), and
 *     unsigned-to-signed conversions go through cn_u64_as_i64 (no implementation-defined
 *     narrowing either, so the library and any C compiler agree bit for bit).
 *
 * Contents: half / bfloat16 / fp8 (E5M2) storage conversions; the per-precision families named
 * by the `lc` column of include/cannl/precisions.def (cn_load_<lc>, cn_store_<lc>,
 * cn_<lc>_to_u4x32, cn_u4x32_to_<lc>_uniform, cn_u4x32_to_<lc>_uniform_vec); integer helpers
 * (cn_iadd ..., cn_ceil_div_i64); cn_pow, cn_exp, cn_tanh, cn_gelu, cn_max, cn_min; the two
 * threefry4x32 variants (ocannl-notes §7). */
#ifndef CN_BUILTINS_H
#define CN_BUILTINS_H

#include <stdint.h>
#include <string.h>
#include <math.h>

/* Generated C uses only some of these helpers: no unused-function warnings for them (clang warns
 * about unused static inline functions of the main file, which the prelude is). */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

#ifndef CN_U4X32_DEFINED /* also defined by include/cannl.h */
#define CN_U4X32_DEFINED
typedef struct {
  uint32_t v[4];
} cn_u4x32; /* a 128-bit cell of precision uint4x32 */
#endif

/* ---- Bit patterns ---- */

static inline uint32_t cn_f32_bits(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}
static inline float cn_f32_of_bits(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}
static inline uint64_t cn_f64_bits(double x) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}
/* The two's-complement reading of a 64-bit pattern, without implementation-defined conversion
 * (compilers reduce it to nothing). */
static inline int64_t cn_u64_as_i64(uint64_t u) {
  return u <= (uint64_t)INT64_MAX ? (int64_t)u : -(int64_t)~u - 1;
}
static inline uint32_t cn_rotl32(uint32_t x, unsigned r) {
  r &= 31u;
  return r ? (x << r) | (x >> (32u - r)) : x;
}

/* ---- half (IEEE binary16), bfloat16 and fp8 (E5M2: 1 sign, 5 exponent, 2 mantissa bits, bias 15)
 * Stores round to nearest even, overflow to infinity, keep subnormals, and keep a NaN a quiet NaN
 * with the sign and the top payload bits. fp8 E5M2 is the top byte of a half, so loading an fp8
 * loads the half with that byte on top; storing rounds from float directly (no double rounding). */

static inline float cn_load_half(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu,
           mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu) return cn_f32_of_bits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    float magnitude = (float)mantissa * 0x1p-24f; /* exact */
    return sign ? -magnitude : magnitude;
  }
  return cn_f32_of_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

/* Rounds the magnitude bits `abs_bits` of a finite float to a format with `mantissa_bits` bits of
 * mantissa and the half's 5-bit exponent (bias 15): the result is the format's bits without the
 * sign; a result of 0x1F << mantissa_bits is infinity. */
static inline uint32_t cn_round_to_e5(uint32_t abs_bits, unsigned mantissa_bits) {
  unsigned drop = 23u - mantissa_bits; /* mantissa bits dropped from a float */
  if (abs_bits >= 0x47800000u) return 0x1Fu << mantissa_bits; /* >= 2^16: infinity */
  if (abs_bits >= 0x38800000u) {                              /* >= 2^-14: normal */
    uint32_t rebased = (abs_bits - 0x38000000u) >> drop;      /* exponent bias 127 -> 15 */
    uint32_t rest = abs_bits & ((1u << drop) - 1u), tie = 1u << (drop - 1u);
    if (rest > tie || (rest == tie && (rebased & 1u))) rebased++; /* may carry into infinity */
    return rebased;
  }
  /* Subnormal: the multiple of 2^(-14 - mantissa_bits) nearest to the value. */
  uint32_t exponent = abs_bits >> 23;
  /* value = significand * 2^(e - 150) (a float subnormal: e = 1 without the implicit bit), so the
   * count of quanta 2^(-14 - m) is significand >> (136 - m - e). */
  unsigned shift = 136u - mantissa_bits - (exponent ? exponent : 1u);
  if (shift > 24u) return 0; /* less than half a quantum */
  uint32_t significand = (abs_bits & 0x7FFFFFu) | (exponent ? 0x800000u : 0u);
  uint32_t q = significand >> shift, rest = significand & ((1u << shift) - 1u),
           tie = 1u << (shift - 1u);
  if (rest > tie || (rest == tie && (q & 1u))) q++; /* may become the smallest normal: correct */
  return q;
}

static inline uint16_t cn_store_half(float x) {
  uint32_t bits = cn_f32_bits(x), sign = (bits >> 16) & 0x8000u, abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((abs_bits >> 13) & 0x1FFu));
  return (uint16_t)(sign | cn_round_to_e5(abs_bits, 10));
}

static inline float cn_load_bfloat16(uint16_t b) {
  return cn_f32_of_bits((uint32_t)b << 16);
}
static inline uint16_t cn_store_bfloat16(float x) {
  uint32_t bits = cn_f32_bits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((bits >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

static inline float cn_load_fp8(uint8_t f) {
  return cn_load_half((uint16_t)((unsigned)f << 8));
}
static inline uint8_t cn_store_fp8(float x) {
  uint32_t bits = cn_f32_bits(x), sign = (bits >> 24) & 0x80u, abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return (uint8_t)(sign | 0x7Eu | ((abs_bits >> 21) & 1u));
  return (uint8_t)(sign | cn_round_to_e5(abs_bits, 2));
}

/* ---- Float to integer: truncate toward zero, saturate to [lo, hi], NaN gives 0 ---- */

static inline int64_t cn_ftoi(double x, int64_t lo, int64_t hi) {
  if (isnan(x)) return 0;
  if (x <= (double)lo) return lo;
  if (x >= (double)hi) return hi; /* (double)INT64_MAX is 2^63: below it the cast is defined */
  return (int64_t)x;
}
static inline uint64_t cn_ftou(double x, uint64_t hi) {
  if (!(x > 0.0)) return 0; /* also NaN */
  if (x >= (double)hi) return hi;
  return (uint64_t)x;
}

/* ---- Loads and stores of each precision: stored cell <-> compute value. Integer stores wrap to
 * the stored width; single, int64, uint64, double and uint4x32 are stored as computed. ---- */

static inline int64_t cn_load_byte(uint8_t x) {
  return x;
}
static inline uint8_t cn_store_byte(int64_t x) {
  return (uint8_t)x;
}
static inline int64_t cn_load_uint16(uint16_t x) {
  return x;
}
static inline uint16_t cn_store_uint16(int64_t x) {
  return (uint16_t)x;
}
static inline int64_t cn_load_int32(int32_t x) {
  return x;
}
static inline int32_t cn_store_int32(int64_t x) {
  uint32_t u = (uint32_t)x;
  return u <= (uint32_t)INT32_MAX ? (int32_t)u : (int32_t)(u - 0x80000000u) + INT32_MIN;
}
static inline int64_t cn_load_uint32(uint32_t x) {
  return x;
}
static inline uint32_t cn_store_uint32(int64_t x) {
  return (uint32_t)x;
}
static inline int64_t cn_load_int64(int64_t x) {
  return x;
}
static inline int64_t cn_store_int64(int64_t x) {
  return x;
}
static inline uint64_t cn_load_uint64(uint64_t x) {
  return x;
}
static inline uint64_t cn_store_uint64(uint64_t x) {
  return x;
}
static inline cn_u4x32 cn_load_uint4x32(cn_u4x32 x) {
  return x;
}
static inline cn_u4x32 cn_store_uint4x32(cn_u4x32 x) {
  return x;
}
static inline float cn_load_single(float x) {
  return x;
}
static inline float cn_store_single(float x) {
  return x;
}
static inline double cn_load_double(double x) {
  return x;
}
static inline double cn_store_double(double x) {
  return x;
}

/* ---- Integer arithmetic on int64_t and uint64_t: wrapping, total (no trap, no UB) ---- */

static inline int64_t cn_iadd_i64(int64_t a, int64_t b) {
  return cn_u64_as_i64((uint64_t)a + (uint64_t)b);
}
static inline uint64_t cn_iadd_u64(uint64_t a, uint64_t b) {
  return a + b;
}
static inline int64_t cn_isub_i64(int64_t a, int64_t b) {
  return cn_u64_as_i64((uint64_t)a - (uint64_t)b);
}
static inline uint64_t cn_isub_u64(uint64_t a, uint64_t b) {
  return a - b;
}
static inline int64_t cn_imul_i64(int64_t a, int64_t b) {
  return cn_u64_as_i64((uint64_t)a * (uint64_t)b);
}
static inline uint64_t cn_imul_u64(uint64_t a, uint64_t b) {
  return a * b;
}
static inline int64_t cn_ineg_i64(int64_t a) {
  return cn_u64_as_i64(0u - (uint64_t)a);
}
static inline uint64_t cn_ineg_u64(uint64_t a) {
  return 0u - a;
}
/* Division by zero gives 0; INT64_MIN / -1 wraps to INT64_MIN. */
static inline int64_t cn_idiv_i64(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return cn_ineg_i64(a);
  return a / b;
}
static inline uint64_t cn_idiv_u64(uint64_t a, uint64_t b) {
  return b == 0 ? 0 : a / b;
}
/* C's truncated remainder (sign of the dividend); by zero gives 0; x % -1 is 0. */
static inline int64_t cn_imod_i64(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  return a % b;
}
static inline uint64_t cn_imod_u64(uint64_t a, uint64_t b) {
  return b == 0 ? 0 : a % b;
}
/* ceil(a / b), exact for either sign (loop bounds, src/loops/loops.h): the truncated quotient,
 * plus one when the remainder is nonzero and the exact quotient positive (remainder and divisor
 * of the same sign); by zero gives 0, INT64_MIN / -1 wraps as cn_idiv_i64. */
static inline int64_t cn_ceil_div_i64(int64_t a, int64_t b) {
  int64_t q = cn_idiv_i64(a, b), r = cn_imod_i64(a, b);
  return r != 0 && (r > 0) == (b > 0) ? q + 1 : q;
}
/* floor(a / b), the same way: minus one when the exact quotient is negative and not whole. */
static inline int64_t cn_floor_div_i64(int64_t a, int64_t b) {
  int64_t q = cn_idiv_i64(a, b), r = cn_imod_i64(a, b);
  return r != 0 && (r > 0) != (b > 0) ? q - 1 : q;
}
/* Exponentiation by squaring, wrapping. */
static inline uint64_t cn_ipow_u64(uint64_t a, uint64_t b) {
  uint64_t result = 1;
  while (b) {
    if (b & 1u) result *= a;
    b >>= 1;
    a *= a;
  }
  return result;
}
/* A negative exponent gives the integer part of 1 / a^-b: 1 for a = 1, +-1 for a = -1 by the
 * parity of b, otherwise 0 (also for a = 0). */
static inline int64_t cn_ipow_i64(int64_t a, int64_t b) {
  if (b < 0) {
    if (a == 1) return 1;
    if (a == -1) return (b & 1) ? -1 : 1;
    return 0;
  }
  return cn_u64_as_i64(cn_ipow_u64((uint64_t)a, (uint64_t)b));
}

/* clang-format off */
#define cn_iadd(a, b) _Generic((a), int64_t: cn_iadd_i64, uint64_t: cn_iadd_u64)((a), (b))
#define cn_isub(a, b) _Generic((a), int64_t: cn_isub_i64, uint64_t: cn_isub_u64)((a), (b))
#define cn_imul(a, b) _Generic((a), int64_t: cn_imul_i64, uint64_t: cn_imul_u64)((a), (b))
#define cn_ineg(a)    _Generic((a), int64_t: cn_ineg_i64, uint64_t: cn_ineg_u64)((a))
#define cn_idiv(a, b) _Generic((a), int64_t: cn_idiv_i64, uint64_t: cn_idiv_u64)((a), (b))
#define cn_imod(a, b) _Generic((a), int64_t: cn_imod_i64, uint64_t: cn_imod_u64)((a), (b))
#define cn_ipow(a, b) _Generic((a), int64_t: cn_ipow_i64, uint64_t: cn_ipow_u64)((a), (b))
/* clang-format on */

/* ---- pow: an integer exponent (finite, |b| < 2^31) is OCaml's int_pow, by repeated squaring
 * with 1 / int_pow(a, -b) for a negative one (so pow(-8, 3) = -512 and pow(2, -2) = 0.25);
 * any other exponent goes to pow / powf (so pow(-8, 1/3.) is NaN). ---- */

static inline float cn_int_pow_f32(float a, int32_t n) {
  uint32_t k = n < 0 ? 0u - (uint32_t)n : (uint32_t)n;
  float result = 1.0f;
  while (k) {
    if (k & 1u) result *= a;
    k >>= 1;
    a *= a;
  }
  return n < 0 ? 1.0f / result : result;
}
static inline double cn_int_pow_f64(double a, int32_t n) {
  uint32_t k = n < 0 ? 0u - (uint32_t)n : (uint32_t)n;
  double result = 1.0;
  while (k) {
    if (k & 1u) result *= a;
    k >>= 1;
    a *= a;
  }
  return n < 0 ? 1.0 / result : result;
}
static inline float cn_pow_f32(float a, float b) {
  if (fabsf(b) < 2147483648.0f && truncf(b) == b) return cn_int_pow_f32(a, (int32_t)b);
  return powf(a, b);
}
static inline double cn_pow_f64(double a, double b) {
  if (fabs(b) < 2147483648.0 && trunc(b) == b) return cn_int_pow_f64(a, (int32_t)b);
  return pow(a, b);
}
/* clang-format off */
#define cn_pow(a, b) _Generic((a), float: cn_pow_f32, double: cn_pow_f64)((a), (b))
/* clang-format on */

/* ---- exp: on float a branch-free polynomial, the op `exp` of every precision computed in float
 * on both backends (the interpreter evaluates every op of those in float: eval_float.c), so it
 * is the same bits on every backend, run and thread count, and gcc / clang vectorize a loop of it
 * (no call of expf). exp(x) = 2^n exp(r), n = rint(x / ln2), r = x - n ln2 by Cody-Waite with
 * two constants (ln2 = C1 + C2, C1 with 16 significant bits, so n * C1 is exact for |n| < 256),
 * exp(r) on [-ln2/2, ln2/2] by Cephes expf's minimax polynomial (S. L. Moshier), and 2^n as two
 * factors built from exponent bits (n split in halves, each a normal float): the last
 * multiplication is the one rounding into a subnormal result. Beyond the thresholds the result
 * is +inf or +0 by a mask (-inf gives +0, +inf gives +inf); a NaN comes back quieted, with its
 * sign and payload. Each step is a statement of its
 * own, so no compiler contracts a multiplication and an addition (clang's -ffp-contract=on works
 * inside one expression): the library and generated C round each operation alike. Error against the
 * correctly rounded exp: at most 1 ulp over all 2^32 inputs, subnormal results included
 * (tests/test_vexp.c checks every input in optimized builds). Double keeps libm's exp. ---- */

static inline float cn_exp_f32(float x) {
  /* The inputs whose result is known, by their bits: NaN, above 0x1.62e42ep+6 (+inf: the first
   * whose exp rounds to infinity), below -0x1.9fe368p+6 (+0: the first whose exp rounds to 0).
   * They go through the polynomial as 0 and get their result by masks: no product over- or
   * underflows (an underflow costs a microcode assist per lane on x86, and exp(-inf) is every
   * masked cell of attention), and no conditional gcc could turn into paths of their own (a
   * conditional float operation may trap, which stops vectorization without AVX-512's masks). */
  uint32_t bits = cn_f32_bits(x), magnitude = bits & 0x7FFFFFFFu;
  uint32_t nan_mask = 0u - (uint32_t)(magnitude > 0x7F800000u);
  uint32_t inf_mask = ~nan_mask & (0u - (uint32_t)(bits > 0x42B17217u && bits <= 0x7F800000u));
  uint32_t zero_mask = ~nan_mask & (0u - (uint32_t)(bits > 0xC2CFF1B4u));
  uint32_t known_mask = nan_mask | inf_mask | zero_mask;
  float xc = cn_f32_of_bits(bits & ~known_mask);
  float t = xc * 0x1.715476p+0f; /* x / ln2 */
  float shifted = t + 0x1.8p23f; /* rounds t to an integer (nearest even): |t| < 2^22 */
  float n = shifted - 0x1.8p23f;
  float n_c1 = n * 0x1.62e4p-1f; /* exact */
  float r = xc - n_c1;           /* exact (Sterbenz) */
  float n_c2 = n * 0x1.7f7d1cp-20f;
  r = r - n_c2;
  float p = 1.9875691500e-4f * r;
  p = p + 1.3981999507e-3f;
  p = p * r;
  p = p + 8.3334519073e-3f;
  p = p * r;
  p = p + 4.1665795894e-2f;
  p = p * r;
  p = p + 1.6666665459e-1f;
  p = p * r;
  p = p + 5.0000001201e-1f;
  float r2 = r * r;
  p = p * r2;
  p = p + r;
  p = p + 1.0f;
  int32_t ni = (int32_t)n;           /* -150 .. 128 */
  int32_t n1 = ni / 2, n2 = ni - n1; /* -75 .. 64 each */
  float scale1 = cn_f32_of_bits((uint32_t)(n1 + 127) << 23);
  float scale2 = cn_f32_of_bits((uint32_t)(n2 + 127) << 23);
  float y = p * scale1; /* exact: a normal float */
  y = y * scale2;
  /* a NaN gives itself quieted (what x + x gives on x86-64 and aarch64) */
  return cn_f32_of_bits((cn_f32_bits(y) & ~known_mask) | (0x7F800000u & inf_mask) |
                        ((bits | 0x00400000u) & nan_mask));
}
static inline double cn_exp_f64(double x) {
  return exp(x);
}
/* clang-format off */
#define cn_exp(a) _Generic((a), float: cn_exp_f32, double: cn_exp_f64)((a))
/* clang-format on */

/* ---- tanh: on float a branch-free function built on cn_exp_f32, the op `tanh` of every
 * precision computed in float on both backends (as exp), vectorized by gcc and
 * clang (no call of tanhf). For |x| < 0x1.193ea8p-1 (where tanh reaches 0.5) Cephes tanhf's odd
 * minimax polynomial x + x^3 P(x^2) (S. L. Moshier); above it 1 - 2 / (exp(2|x|) + 1), whose
 * subtraction loses nothing (the quotient is at most 0.5 and the result at least 0.5), with the
 * sign put back. Both are computed for every input and one is chosen by a mask. By masks on the
 * input's bits, too: below 0x1.713746p-12 in magnitude (where tanh(x) first rounds to other than
 * x) x itself, so ±0 and subnormals give themselves and nothing underflows; from 0x1.205968p+3
 * on (where tanh first rounds to 1) and at ±inf, ±1; a NaN gives itself quieted, as exp. Each
 * step a statement of its own (no contraction, see exp). Error against tanh in double rounded
 * to float: at most 1 ulp over all 2^32 inputs (tests/test_vexp.c). Double keeps libm's tanh. */

static inline float cn_tanh_f32(float x) {
  uint32_t bits = cn_f32_bits(x), magnitude = bits & 0x7FFFFFFFu, sign = bits & 0x80000000u;
  uint32_t nan_mask = 0u - (uint32_t)(magnitude > 0x7F800000u);
  uint32_t self_mask = 0u - (uint32_t)(magnitude < 0x39B89BA3u);
  uint32_t one_mask = ~nan_mask & (0u - (uint32_t)(magnitude >= 0x41102CB4u));
  uint32_t known_mask = nan_mask | self_mask | one_mask;
  uint32_t small_mask = 0u - (uint32_t)(magnitude < 0x3F0C9F54u);
  float a = cn_f32_of_bits(magnitude & ~known_mask); /* |x|, or 0 where the result is known */
  float z = a * a;
  float p = -5.70498872745e-3f * z;
  p = p + 2.06390887954e-2f;
  p = p * z;
  p = p - 5.37397155531e-2f;
  p = p * z;
  p = p + 1.33314422036e-1f;
  p = p * z;
  p = p - 3.33332819422e-1f;
  p = p * z;
  p = p * a;
  float small = a + p;
  float twice = a + a;
  float e = cn_exp_f32(twice);
  float e1 = e + 1.0f;
  float q = 2.0f / e1;
  float large = 1.0f - q;
  uint32_t abs_result = (cn_f32_bits(small) & small_mask) | (cn_f32_bits(large) & ~small_mask);
  return cn_f32_of_bits(((abs_result | sign) & ~known_mask) | (0x3F800000u & one_mask) |
                        (sign & one_mask) | (bits & self_mask) | ((bits | 0x00400000u) & nan_mask));
}
static inline double cn_tanh_f64(double x) {
  return tanh(x);
}
/* clang-format off */
#define cn_tanh(a) _Generic((a), float: cn_tanh_f32, double: cn_tanh_f64)((a))
/* clang-format on */

/* ---- gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh form (Hendrycks &
 * Gimpel; PyTorch's approximate="tanh"). One primitive, so the forward is one pass over memory
 * and its derivative (src/tensor/derivs.def) one more, instead of nine intermediates each way.
 * Computed as x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3), which equals the tanh form
 * (0.5 (1 + tanh u) is the logistic function of 2u) and is both cheaper (one exp and a
 * division: 1.7x faster than the tanh form vectorized) and more accurate: 1 + tanh(u) cancels
 * for x below about -3 (all digits lost from -5 on, where the result is below 1e-6), the
 * quotient does not. Float: at most 15 ulp from the exact value for |x| <= 3, 186 ulp below
 * (where |gelu| < 1e-20), over every 97th float (tests/test_nn.c asserts it on 4096 values).
 * gelu(+inf) = +inf; gelu(-inf) is NaN (-inf / inf). Each step a statement of its own. ---- */

static inline float cn_gelu_f32(float x) {
  float square = x * x;
  float cube = square * x;
  float scaled = (float)0.044715 * cube;
  float inner = x + scaled;
  float z = (float)-1.5957691216057308 * inner; /* -2 sqrt(2/pi) */
  float e = cn_exp_f32(z);
  float denominator = 1.0f + e;
  return x / denominator;
}
static inline double cn_gelu_f64(double x) {
  double square = x * x;
  double cube = square * x;
  double scaled = 0.044715 * cube;
  double inner = x + scaled;
  double z = -1.5957691216057308 * inner;
  double e = exp(z);
  double denominator = 1.0 + e;
  return x / denominator;
}
/* clang-format off */
#define cn_gelu(a) _Generic((a), float: cn_gelu_f32, double: cn_gelu_f64)((a))
/* clang-format on */

/* ---- max / min: NaN if either operand is NaN (OCaml's Float.max / Float.min); on floats
 * max(-0, +0) = +0 and min(-0, +0) = -0. ---- */

static inline float cn_max_f32(float a, float b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
static inline double cn_max_f64(double a, double b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
static inline float cn_min_f32(float a, float b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
static inline double cn_min_f64(double a, double b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
static inline int64_t cn_max_i64(int64_t a, int64_t b) {
  return a > b ? a : b;
}
static inline uint64_t cn_max_u64(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}
static inline int64_t cn_min_i64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
static inline uint64_t cn_min_u64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}
/* The float modulo of the seed (syntax-extensions-cd-op, interpret_binop's `v1 % v2`: Base's
 * float %, in [0, b) for b > 0): floored, the sign of the divisor, as Python's % and numpy's mod.
 * fmod is exact, so adding b to a remainder of the other sign is the only rounding (a tiny
 * negative remainder can round up to b itself, as in the seed). By zero it is NaN, as fmod. */
static inline float cn_mod_f32(float a, float b) {
  float r = fmodf(a, b);
  return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}
static inline double cn_mod_f64(double a, double b) {
  double r = fmod(a, b);
  return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}
/* clang-format off */
#define cn_mod(a, b) _Generic((a), float: cn_mod_f32, double: cn_mod_f64)((a), (b))
/* clang-format on */

/* clang-format off */
#define cn_max(a, b)                                                                               \
  _Generic((a), float: cn_max_f32, double: cn_max_f64, int64_t: cn_max_i64, uint64_t: cn_max_u64)  \
      ((a), (b))
#define cn_min(a, b)                                                                               \
  _Generic((a), float: cn_min_f32, double: cn_min_f64, int64_t: cn_min_i64, uint64_t: cn_min_u64)  \
      ((a), (b))
/* clang-format on */

/* ---- max as a reduction without order (generated C, cgen_reduce.c): without NaN, cn_max is
 * the maximum of a total order in which -0 < +0, so the maximum over a loop does not depend on the
 * order of its operands. The order is that of unsigned keys of the bits (a positive float's bits
 * with the sign bit set, a negative one's complemented), and a maximum of integers vectorizes. A
 * NaN makes the first NaN in loop order the result: the generated code then runs the loop as
 * written. ---- */

static inline uint32_t cn_max_key_f32(float x) {
  uint32_t bits = cn_f32_bits(x);
  return bits ^ ((0u - (bits >> 31)) | 0x80000000u);
}
static inline float cn_of_max_key_f32(uint32_t key) {
  return cn_f32_of_bits(key >= 0x80000000u ? key ^ 0x80000000u : ~key);
}
static inline uint32_t cn_nan_bit_f32(float x) {
  return (cn_f32_bits(x) & 0x7FFFFFFFu) > 0x7F800000u;
}
static inline uint64_t cn_max_key_f64(double x) {
  uint64_t bits = cn_f64_bits(x);
  return bits ^ ((0u - (bits >> 63)) | 0x8000000000000000u);
}
static inline double cn_of_max_key_f64(uint64_t key) {
  uint64_t bits = key >= 0x8000000000000000u ? key ^ 0x8000000000000000u : ~key;
  double x;
  memcpy(&x, &bits, sizeof x);
  return x;
}
static inline uint64_t cn_nan_bit_f64(double x) {
  return (cn_f64_bits(x) & 0x7FFFFFFFFFFFFFFFu) > 0x7FF0000000000000u;
}

/* ---- select: `cond ? a : b` with both a and b evaluated, for the templates of where and the
 * gates. As a plain conditional over loads, GCC 12 at -O3 with AVX2 if-converts it into masked
 * loads and can pair a load with the mask of other lanes (wrong where / relu_gate results in
 * generated C); operands evaluated up front vectorize as blends instead. ---- */

static inline float cn_select_f32(int cond, float a, float b) {
  return cond ? a : b;
}
static inline double cn_select_f64(int cond, double a, double b) {
  return cond ? a : b;
}
static inline int64_t cn_select_i64(int cond, int64_t a, int64_t b) {
  return cond ? a : b;
}
static inline uint64_t cn_select_u64(int cond, uint64_t a, uint64_t b) {
  return cond ? a : b;
}
/* clang-format off */
#define cn_select(cond, a, b)                                                                      \
  _Generic((a), float: cn_select_f32, double: cn_select_f64, int64_t: cn_select_i64,               \
           uint64_t: cn_select_u64)((cond), (a), (b))
/* clang-format on */

/* ---- threefry4x32 as OCANNL defines it (ocannl-notes §7.1; not Random123's): the first
 * argument is the key. Rotations are the Threefry-2x32 constants; each round does two mix steps,
 * each followed by swapping x1 and x3. ---- */

static inline void cn_threefry_round(uint32_t x[4], unsigned r0, unsigned r1, unsigned r2,
                                     unsigned r3) {
  uint32_t t;
  x[0] += x[1];
  x[1] = cn_rotl32(x[1], r0) ^ x[0];
  x[2] += x[3];
  x[3] = cn_rotl32(x[3], r1) ^ x[2];
  t = x[1], x[1] = x[3], x[3] = t;
  x[0] += x[1];
  x[1] = cn_rotl32(x[1], r2) ^ x[0];
  x[2] += x[3];
  x[3] = cn_rotl32(x[3], r3) ^ x[2];
  t = x[1], x[1] = x[3], x[3] = t;
}
static inline void cn_threefry_init(cn_u4x32 key, cn_u4x32 ctr, uint32_t ks[5], uint32_t x[4]) {
  ks[4] = 0x1BD11BDAu;
  for (int i = 0; i < 4; i++) {
    ks[i] = key.v[i];
    ks[4] ^= key.v[i];
    x[i] = ctr.v[i] + ks[i];
  }
}
/* Two rounds and one key injection (the default variant). */
static inline cn_u4x32 cn_threefry4x32_light(cn_u4x32 key, cn_u4x32 ctr) {
  uint32_t ks[5];
  cn_u4x32 out;
  cn_threefry_init(key, ctr, ks, out.v);
  cn_threefry_round(out.v, 13, 15, 26, 6);
  cn_threefry_round(out.v, 17, 29, 16, 24);
  out.v[0] += ks[1];
  out.v[1] += ks[2];
  out.v[2] += ks[3];
  out.v[3] += ks[4] + 1u;
  return out;
}
/* Five blocks of four rounds, each followed by a key injection (20 rounds). */
static inline cn_u4x32 cn_threefry4x32_crypto(cn_u4x32 key, cn_u4x32 ctr) {
  uint32_t ks[5];
  cn_u4x32 out;
  cn_threefry_init(key, ctr, ks, out.v);
  for (uint32_t s = 1; s <= 5; s++) {
    cn_threefry_round(out.v, 13, 15, 26, 6);
    cn_threefry_round(out.v, 17, 29, 16, 24);
    cn_threefry_round(out.v, 13, 15, 26, 6);
    cn_threefry_round(out.v, 17, 29, 16, 24);
    for (uint32_t i = 0; i < 4; i++) out.v[i] += ks[(s + i) % 5u];
    out.v[3] += s;
  }
  return out;
}

/* ---- Into uint4x32, by the source precision (ocannl-notes §7.2), from its compute value.
 * int32/uint32 spread the word (2-round threefry shows periodicity on plain counters);
 * int64/uint64 give {lo, hi, 0, 0}; single/double give their raw IEEE bits; byte/uint16 give
 * {(uint32)x, 0, 0, 0}; half/bfloat16/fp8 give {x truncated and saturated to uint32, 0, 0, 0}
 * (the value, as OCANNL's (uint32)x cast, made total). ---- */

static inline cn_u4x32 cn_u4x32_spread(uint32_t u) {
  cn_u4x32 w = {{u, u ^ 0x9E3779B9u, u ^ 0x6C078965u, u ^ cn_rotl32(u, 16)}};
  return w;
}
static inline cn_u4x32 cn_u4x32_of_u64(uint64_t x) {
  cn_u4x32 w = {{(uint32_t)x, (uint32_t)(x >> 32), 0, 0}};
  return w;
}
static inline cn_u4x32 cn_byte_to_u4x32(int64_t x) {
  return cn_u4x32_of_u64((uint32_t)x);
}
static inline cn_u4x32 cn_uint16_to_u4x32(int64_t x) {
  return cn_u4x32_of_u64((uint32_t)x);
}
static inline cn_u4x32 cn_int32_to_u4x32(int64_t x) {
  return cn_u4x32_spread((uint32_t)x);
}
static inline cn_u4x32 cn_uint32_to_u4x32(int64_t x) {
  return cn_u4x32_spread((uint32_t)x);
}
static inline cn_u4x32 cn_int64_to_u4x32(int64_t x) {
  return cn_u4x32_of_u64((uint64_t)x);
}
static inline cn_u4x32 cn_uint64_to_u4x32(uint64_t x) {
  return cn_u4x32_of_u64(x);
}
static inline cn_u4x32 cn_uint4x32_to_u4x32(cn_u4x32 x) {
  return x;
}
static inline cn_u4x32 cn_half_to_u4x32(float x) {
  return cn_u4x32_of_u64((uint64_t)cn_ftoi(x, 0, UINT32_MAX));
}
static inline cn_u4x32 cn_bfloat16_to_u4x32(float x) {
  return cn_u4x32_of_u64((uint64_t)cn_ftoi(x, 0, UINT32_MAX));
}
static inline cn_u4x32 cn_fp8_to_u4x32(float x) {
  return cn_u4x32_of_u64((uint64_t)cn_ftoi(x, 0, UINT32_MAX));
}
static inline cn_u4x32 cn_single_to_u4x32(float x) {
  return cn_u4x32_of_u64(cn_f32_bits(x));
}
static inline cn_u4x32 cn_double_to_u4x32(double x) {
  return cn_u4x32_of_u64(cn_f64_bits(x));
}

/* ---- Out of uint4x32 (ocannl-notes §7.3), into the compute type of the target. Scalar
 * (uniform1): one value from the first word(s). Floats are uniform in [0, 1): single and
 * bfloat16 from the upper 24 bits of v0, half from the low 16 bits of v0, double from v1:v0
 * (rounding to the stored format happens on store and may give 1.0, as in OCANNL). fp8 takes the
 * low byte of v0 as raw fp8 bits (OCANNL's choice; not a value in [0, 1)). Integers take v0
 * (64-bit ones v1:v0) wrapped to their width. ---- */

static inline uint64_t cn_u4x32_lo64(cn_u4x32 w) {
  return (uint64_t)w.v[1] << 32 | w.v[0];
}
static inline float cn_u4x32_unit24(uint32_t word) {
  return (float)(word >> 8) * 0x1p-24f;
}
static inline float cn_u4x32_unit16(uint32_t bits16) {
  return (float)bits16 * 0x1p-16f;
}
static inline double cn_u4x32_unit64(uint64_t bits) {
  return (double)bits * 0x1p-64;
}

static inline int64_t cn_u4x32_to_byte_uniform(cn_u4x32 w) {
  return w.v[0] & 0xFFu;
}
static inline int64_t cn_u4x32_to_uint16_uniform(cn_u4x32 w) {
  return w.v[0] & 0xFFFFu;
}
static inline int64_t cn_u4x32_to_int32_uniform(cn_u4x32 w) {
  return cn_load_int32(cn_store_int32(w.v[0]));
}
static inline int64_t cn_u4x32_to_uint32_uniform(cn_u4x32 w) {
  return w.v[0];
}
static inline int64_t cn_u4x32_to_int64_uniform(cn_u4x32 w) {
  return cn_u64_as_i64(cn_u4x32_lo64(w));
}
static inline uint64_t cn_u4x32_to_uint64_uniform(cn_u4x32 w) {
  return cn_u4x32_lo64(w);
}
static inline cn_u4x32 cn_u4x32_to_uint4x32_uniform(cn_u4x32 w) {
  return w;
}
static inline float cn_u4x32_to_half_uniform(cn_u4x32 w) {
  return cn_u4x32_unit16(w.v[0] & 0xFFFFu);
}
static inline float cn_u4x32_to_bfloat16_uniform(cn_u4x32 w) {
  return cn_u4x32_unit24(w.v[0]);
}
static inline float cn_u4x32_to_fp8_uniform(cn_u4x32 w) {
  return cn_load_fp8((uint8_t)(w.v[0] & 0xFFu));
}
static inline float cn_u4x32_to_single_uniform(cn_u4x32 w) {
  return cn_u4x32_unit24(w.v[0]);
}
static inline double cn_u4x32_to_double_uniform(cn_u4x32 w) {
  return cn_u4x32_unit64(cn_u4x32_lo64(w));
}

/* Vectorized (uniform): 16 / bytes(target) lanes from one word, lane order as OCANNL's
 * uint4x32_to_<prec>_uniform_vec: little-endian bytes / 16-bit halves of v0..v3, then words,
 * then the 64-bit pairs v1:v0, v3:v2. */
static inline void cn_u4x32_to_byte_uniform_vec(cn_u4x32 w, int64_t *out) {
  for (int i = 0; i < 16; i++) out[i] = (w.v[i / 4] >> (8 * (i % 4))) & 0xFFu;
}
static inline void cn_u4x32_to_uint16_uniform_vec(cn_u4x32 w, int64_t *out) {
  for (int i = 0; i < 8; i++) out[i] = (w.v[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
}
static inline void cn_u4x32_to_int32_uniform_vec(cn_u4x32 w, int64_t *out) {
  for (int i = 0; i < 4; i++) out[i] = cn_load_int32(cn_store_int32(w.v[i]));
}
static inline void cn_u4x32_to_uint32_uniform_vec(cn_u4x32 w, int64_t *out) {
  for (int i = 0; i < 4; i++) out[i] = w.v[i];
}
static inline void cn_u4x32_to_int64_uniform_vec(cn_u4x32 w, int64_t *out) {
  out[0] = cn_u64_as_i64((uint64_t)w.v[1] << 32 | w.v[0]);
  out[1] = cn_u64_as_i64((uint64_t)w.v[3] << 32 | w.v[2]);
}
static inline void cn_u4x32_to_uint64_uniform_vec(cn_u4x32 w, uint64_t *out) {
  out[0] = (uint64_t)w.v[1] << 32 | w.v[0];
  out[1] = (uint64_t)w.v[3] << 32 | w.v[2];
}
static inline void cn_u4x32_to_uint4x32_uniform_vec(cn_u4x32 w, cn_u4x32 *out) {
  out[0] = w;
}
static inline void cn_u4x32_to_half_uniform_vec(cn_u4x32 w, float *out) {
  for (int i = 0; i < 8; i++) out[i] = cn_u4x32_unit16((w.v[i / 2] >> (16 * (i % 2))) & 0xFFFFu);
}
static inline void cn_u4x32_to_bfloat16_uniform_vec(cn_u4x32 w, float *out) {
  for (int i = 0; i < 8; i++) out[i] = cn_u4x32_unit16((w.v[i / 2] >> (16 * (i % 2))) & 0xFFFFu);
}
static inline void cn_u4x32_to_fp8_uniform_vec(cn_u4x32 w, float *out) {
  for (int i = 0; i < 16; i++) out[i] = cn_load_fp8((uint8_t)(w.v[i / 4] >> (8 * (i % 4))));
}
static inline void cn_u4x32_to_single_uniform_vec(cn_u4x32 w, float *out) {
  for (int i = 0; i < 4; i++) out[i] = cn_u4x32_unit24(w.v[i]);
}
static inline void cn_u4x32_to_double_uniform_vec(cn_u4x32 w, double *out) {
  out[0] = cn_u4x32_unit64((uint64_t)w.v[1] << 32 | w.v[0]);
  out[1] = cn_u4x32_unit64((uint64_t)w.v[3] << 32 | w.v[2]);
}

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#endif /* CN_BUILTINS_H */
