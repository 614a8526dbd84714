/* Tests of the numeric core (src/numeric): the storage formats half / bfloat16 / fp8 against
 * bit patterns worked out by hand and against a brute-force nearest-value search; the integer
 * helpers' wrapping and total division; pow / max / min; threefry4x32 known answers and the uniform
 * conversions (ocannl-notes §7); every primitive op's reference semantics on hand-picked values
 * (syntax-extensions-cd-op's interpret_*), including NaN, infinities, zeros and negatives; the
 * conversion rules between precisions; the public precision / op API and its errors; the C
 * spellings; and, when a C compiler is available, that builtins.h compiles as the generated-C
 * prelude and that C code spelled by cn_conv_c / cn_op_c / cn_load_c / cn_store_c / cn_const_c
 * computes the same cells as the interpreter's cn_value_* / cn_eval_op. */
#include "check.h"

#include "numeric/numeric.h"

#include <float.h>
#include <locale.h>
#include <stdlib.h>

static cn_value fv(double x) {
  return (cn_value){.f = x};
}
static cn_value iv(int64_t x) {
  return (cn_value){.i = x};
}
static cn_value uv(uint64_t x) {
  return (cn_value){.u = x};
}
static cn_value wv(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return (cn_value){.w = {{a, b, c, d}}};
}

static double evf(cn_op op, double a, double b, double c) {
  cn_value args[3] = {fv(a), fv(b), fv(c)};
  return cn_eval_op(op, CN_PREC_DOUBLE, args).f;
}
static int64_t evi(cn_op op, int64_t a, int64_t b, int64_t c) {
  cn_value args[3] = {iv(a), iv(b), iv(c)};
  return cn_eval_op(op, CN_PREC_INT64, args).i;
}
static uint64_t evu(cn_op op, uint64_t a, uint64_t b) {
  cn_value args[3] = {uv(a), uv(b), uv(0)};
  return cn_eval_op(op, CN_PREC_UINT64, args).u;
}
static bool same_word(cn_u4x32 w, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return w.v[0] == a && w.v[1] == b && w.v[2] == c && w.v[3] == d;
}

/* ---- Storage formats ---- */

/* Nearest value of a format to x, from the sorted list of its positive finite values (bits
 * ascending with them), ties to the even bit pattern, overflow at the midpoint between the
 * largest value and 2^16 (both formats have the half's exponent range). Returns the bits. */
static unsigned nearest_bits(double x, const double *values, const unsigned *bits, int n,
                             unsigned sign_bit, unsigned inf_bits) {
  unsigned sign = signbit(x) ? sign_bit : 0;
  double m = fabs(x);
  if (m >= (values[n - 1] + 65536.0) / 2) return sign | inf_bits;
  int lo = 0, hi = n - 1; /* values[lo] <= m < values[hi] after the search, or an end */
  if (m <= values[0]) {
    if (m * 2 > values[0]) return sign | bits[0];
    return sign; /* the midpoint to zero rounds to the even zero */
  }
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (values[mid] <= m)
      lo = mid;
    else
      hi = mid;
  }
  double below = m - values[lo], above = values[hi] - m;
  if (below < above) return sign | bits[lo];
  if (above < below) return sign | bits[hi];
  return sign | ((bits[lo] & 1) ? bits[hi] : bits[lo]);
}

static void test_half(void) {
  CHECK_INT(cn_store_half(1.0f), 0x3c00);
  CHECK_INT(cn_store_half(65504.0f), 0x7bff);
  CHECK_INT(cn_store_half(-2.0f), 0xc000);
  CHECK_INT(cn_store_half(0.0f), 0x0000);
  CHECK_INT(cn_store_half(-0.0f), 0x8000);
  CHECK_INT(cn_store_half(INFINITY), 0x7c00);
  CHECK_INT(cn_store_half(-INFINITY), 0xfc00);
  CHECK_INT(cn_store_half(1e10f), 0x7c00);
  CHECK_INT(cn_store_half(65519.0f), 0x7bff); /* below the midpoint 65520 */
  CHECK_INT(cn_store_half(65520.0f), 0x7c00); /* the midpoint: to the even pattern, infinity */
  CHECK_INT(cn_store_half(1.0f / 3), 0x3555);
  CHECK_INT(cn_store_half(1.0f + 0x1p-11f), 0x3c00);     /* tie, 0x3c00 is even */
  CHECK_INT(cn_store_half(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie between 0x3c01 and 0x3c02 */
  CHECK_INT(cn_store_half(0x1p-14f), 0x0400);            /* smallest normal */
  CHECK_INT(cn_store_half(0x1p-24f), 0x0001);            /* smallest subnormal */
  CHECK_INT(cn_store_half(1023 * 0x1p-24f), 0x03ff);     /* largest subnormal */
  CHECK_INT(cn_store_half(0x1p-25f), 0x0000);            /* half a quantum: ties to 0 */
  CHECK_INT(cn_store_half(1.5f * 0x1p-25f), 0x0001);
  CHECK_INT(cn_store_half(3 * 0x1p-25f), 0x0002);       /* 1.5 quanta: tie to even 2 */
  CHECK_INT(cn_store_half(-5 * 0x1p-25f), 0x8002);      /* 2.5 quanta: tie to even 2 */
  CHECK_INT(cn_store_half(2047.5f * 0x1p-25f), 0x0400); /* rounds up into the normals */
  CHECK_INT(cn_store_half(FLT_TRUE_MIN), 0x0000);
  uint16_t nan = cn_store_half(NAN);
  CHECK((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff) != 0);
  CHECK((cn_store_half(-NAN) & 0x8000) != 0);
  CHECK_NEAR(cn_load_half(0x7bff), 65504, 0);
  CHECK_NEAR(cn_load_half(0x3555), 0.333251953125, 0);
  CHECK_NEAR(cn_load_half(0x0001), 0x1p-24, 0);
  CHECK_NEAR(cn_load_half(0x83ff), -1023 * 0x1p-24, 0);
  CHECK(cn_load_half(0x8000) == 0 && signbit(cn_load_half(0x8000)));
  CHECK(isinf(cn_load_half(0xfc00)) && cn_load_half(0xfc00) < 0);
  CHECK(isnan(cn_load_half(0x7e00)) && isnan(cn_load_half(0x7c01)));
  CHECK_INT(cn_prec_single_to_half(-2.0f), 0xc000);
  CHECK_NEAR(cn_prec_half_to_single(0x3c00), 1.0, 0);

  /* Every pattern round-trips (NaN stays NaN), and stores match the nearest-value search. */
  double values[0x7c00];
  unsigned bits[0x7c00];
  int n = 0, round_trip_errors = 0, nearest_errors = 0;
  for (unsigned h = 0; h <= 0xffff; h++) {
    float x = cn_load_half((uint16_t)h);
    uint16_t back = cn_store_half(x);
    bool nan_pattern = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (nan_pattern ? !(isnan(x) && (back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h)
      round_trip_errors++;
    if (h >= 1 && h < 0x7c00) values[n] = x, bits[n++] = h;
  }
  CHECK_INT(round_trip_errors, 0);
  CHECK_INT(n, 0x7bff);
  for (int k = 0; k < 200000; k++) {
    /* Values spread over every binade from 2^-26 to 2^17, with midpoints hit exactly. */
    double x = ldexp(1.0 + (k % 4096) / 4096.0, k / 4096 % 44 - 26) * (k & 1 ? -1 : 1);
    if (cn_store_half((float)x) != nearest_bits((float)x, values, bits, n, 0x8000, 0x7c00))
      nearest_errors++;
  }
  CHECK_INT(nearest_errors, 0);
}

static void test_bfloat16(void) {
  CHECK_INT(cn_store_bfloat16(1.0f), 0x3f80);
  CHECK_INT(cn_store_bfloat16(3.14159f), 0x4049);
  CHECK_NEAR(cn_load_bfloat16(0x4049), 3.140625, 0);
  CHECK_INT(cn_store_bfloat16(1000.0f), 0x447a);
  CHECK_INT(cn_store_bfloat16(-0.0f), 0x8000);
  CHECK_INT(cn_store_bfloat16(1.0f + 0x1p-8f), 0x3f80);     /* tie: even */
  CHECK_INT(cn_store_bfloat16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie: even 0x3f82 */
  CHECK_INT(cn_store_bfloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  CHECK_INT(cn_store_bfloat16(FLT_MAX), 0x7f80); /* rounds past the largest value */
  CHECK_INT(cn_store_bfloat16(-INFINITY), 0xff80);
  CHECK_INT(cn_store_bfloat16(FLT_TRUE_MIN), 0x0000);
  CHECK_INT(cn_store_bfloat16(0x1p-133f), 0x0001); /* a subnormal kept */
  uint16_t nan = cn_store_bfloat16(NAN);
  CHECK((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);
  /* A NaN whose payload is all in the low half stays a NaN. */
  CHECK((cn_store_bfloat16(cn_f32_of_bits(0x7f800001u)) & 0x7f) != 0);
  CHECK_INT(cn_prec_single_to_bfloat16(1000.0f), 0x447a);
  CHECK_NEAR(cn_prec_bfloat16_to_single(0x3f80), 1.0, 0);
  int errors = 0;
  for (unsigned b = 0; b <= 0xffff; b++) {
    float x = cn_load_bfloat16((uint16_t)b);
    uint16_t back = cn_store_bfloat16(x);
    if (isnan(x) ? !isnan(cn_load_bfloat16(back)) : back != b) errors++;
  }
  CHECK_INT(errors, 0);
}

static void test_fp8(void) {
  CHECK_INT(cn_store_fp8(1.0f), 0x3c);
  CHECK_INT(cn_store_fp8(0.5f), 0x38);
  CHECK_INT(cn_store_fp8(2.0f), 0x40);
  CHECK_INT(cn_store_fp8(0.125f), 0x30);
  CHECK_INT(cn_store_fp8(16.0f), 0x4c);
  CHECK_INT(cn_store_fp8(-0.25f), 0xb4);
  CHECK_INT(cn_store_fp8(57344.0f), 0x7b); /* largest: 1.75 * 2^15 */
  CHECK_INT(cn_store_fp8(61439.0f), 0x7b);
  CHECK_INT(cn_store_fp8(61440.0f), 0x7c); /* midpoint to 2^16: to the even pattern, infinity */
  CHECK_INT(cn_store_fp8(-INFINITY), 0xfc);
  CHECK_INT(cn_store_fp8(1.125f), 0x3c); /* tie between 1 (0x3c) and 1.25 (0x3d) */
  CHECK_INT(cn_store_fp8(1.375f), 0x3e); /* tie between 1.25 (0x3d) and 1.5 (0x3e) */
  CHECK_INT(cn_store_fp8(1.2f), 0x3d);
  CHECK_INT(cn_store_fp8(0x1p-14f), 0x04); /* smallest normal */
  CHECK_INT(cn_store_fp8(0x1p-16f), 0x01); /* smallest subnormal */
  CHECK_INT(cn_store_fp8(3 * 0x1p-16f), 0x03);
  CHECK_INT(cn_store_fp8(0x1p-17f), 0x00);     /* half a quantum: tie to 0 */
  CHECK_INT(cn_store_fp8(3 * 0x1p-17f), 0x02); /* 1.5 quanta: tie to 2 */
  CHECK_INT(cn_store_fp8(-0.0f), 0x80);
  CHECK_INT(cn_store_fp8(0.1f), 0x2e); /* 0.1 = 1.6 * 2^-4: between 1.5 and 1.75, nearer 1.5 */
  uint8_t nan = cn_store_fp8(NAN);
  CHECK((nan & 0x7c) == 0x7c && (nan & 0x03) != 0);
  CHECK_NEAR(cn_load_fp8(0x7b), 57344, 0);
  CHECK_NEAR(cn_load_fp8(0x01), 0x1p-16, 0);
  CHECK_NEAR(cn_load_fp8(0xb4), -0.25, 0);
  CHECK(isinf(cn_load_fp8(0x7c)) && isnan(cn_load_fp8(0x7d)) && isnan(cn_load_fp8(0xff)));
  CHECK_INT(cn_prec_single_to_fp8(16.0f), 0x4c);
  CHECK_NEAR(cn_prec_fp8_to_single(0x30), 0.125, 0);

  double values[0x7b];
  unsigned bits[0x7b];
  int n = 0, round_trip_errors = 0, nearest_errors = 0;
  for (unsigned f = 0; f <= 0xff; f++) {
    float x = cn_load_fp8((uint8_t)f);
    uint8_t back = cn_store_fp8(x);
    bool nan_pattern = (f & 0x7c) == 0x7c && (f & 3);
    if (nan_pattern ? !(isnan(x) && (back & 0x7c) == 0x7c && (back & 3)) : back != f)
      round_trip_errors++;
    if (f >= 1 && f < 0x7c) values[n] = x, bits[n++] = f;
  }
  CHECK_INT(round_trip_errors, 0);
  for (int k = 0; k < 100000; k++) {
    double x = ldexp(1.0 + (k % 1024) / 1024.0, k / 1024 % 36 - 19) * (k & 1 ? -1 : 1);
    if (cn_store_fp8((float)x) != nearest_bits((float)x, values, bits, n, 0x80, 0x7c))
      nearest_errors++;
  }
  CHECK_INT(nearest_errors, 0);
}

/* ---- Integer helpers, pow, max, min ---- */

static void test_integer_helpers(void) {
  int64_t i64_max = INT64_MAX, i64_min = INT64_MIN, minus1 = -1, zero = 0, two = 2;
  CHECK(cn_iadd(i64_max, (int64_t)1) == INT64_MIN);
  CHECK(cn_isub(i64_min, (int64_t)1) == INT64_MAX);
  CHECK(cn_imul(i64_max, two) == -2);
  CHECK(cn_imul((int64_t)-3, (int64_t)7) == -21);
  CHECK(cn_ineg(i64_min) == INT64_MIN);
  CHECK(cn_ineg((int64_t)5) == -5);
  CHECK(cn_idiv((int64_t)7, zero) == 0);
  CHECK(cn_idiv(i64_min, minus1) == INT64_MIN);
  CHECK(cn_idiv((int64_t)-7, two) == -3); /* truncated */
  CHECK(cn_imod((int64_t)-7, two) == -1);
  CHECK(cn_imod((int64_t)7, (int64_t)-2) == 1);
  CHECK(cn_imod((int64_t)7, zero) == 0);
  CHECK(cn_imod(i64_min, minus1) == 0);
  CHECK(cn_ipow(two, (int64_t)10) == 1024);
  CHECK(cn_ipow(two, (int64_t)63) == INT64_MIN); /* wraps */
  CHECK(cn_ipow(two, (int64_t)64) == 0);
  CHECK(cn_ipow((int64_t)-3, (int64_t)3) == -27);
  CHECK(cn_ipow(zero, zero) == 1);
  CHECK(cn_ipow(minus1, (int64_t)-3) == -1);
  CHECK(cn_ipow(minus1, (int64_t)-4) == 1);
  CHECK(cn_ipow(minus1, i64_min) == 1);
  CHECK(cn_ipow((int64_t)1, (int64_t)-5) == 1);
  CHECK(cn_ipow(two, (int64_t)-1) == 0);
  CHECK(cn_ipow(zero, (int64_t)-1) == 0);
  /* 3^40 mod 2^64 by plain repeated multiplication. */
  uint64_t p = 1;
  for (int k = 0; k < 40; k++) p *= 3;
  CHECK(cn_ipow((uint64_t)3, (uint64_t)40) == p);
  CHECK(cn_ipow((int64_t)3, (int64_t)40) == cn_u64_as_i64(p));
  uint64_t u_max = UINT64_MAX, u_one = 1, u_zero = 0;
  CHECK(cn_iadd(u_max, u_one) == 0);
  CHECK(cn_isub(u_zero, u_one) == UINT64_MAX);
  CHECK(cn_ineg(u_one) == UINT64_MAX);
  CHECK(cn_idiv(u_max, u_zero) == 0);
  CHECK(cn_imod(u_max, (uint64_t)10) == 5);
  CHECK(cn_imod(u_max, u_zero) == 0);
  CHECK(cn_u64_as_i64(UINT64_MAX) == -1);
  CHECK(cn_u64_as_i64((uint64_t)1 << 63) == INT64_MIN);
  CHECK(cn_u64_as_i64(12345) == 12345);
}

static void test_pow_max_min(void) {
  CHECK_NEAR(cn_pow(2.0, -2.0), 0.25, 0);
  CHECK_NEAR(cn_pow(-2.0, 3.0), -8, 0);
  CHECK_NEAR(cn_pow(-8.0, 1 / 3.), NAN, 0);
  CHECK_NEAR(cn_pow(2.0, 0.5), sqrt(2.0), 0);
  CHECK_NEAR(cn_pow(0.0, -1.0), INFINITY, 0);
  CHECK_NEAR(cn_pow(NAN, 0.0), 1, 0);
  CHECK_NEAR(cn_pow(2.0, 2147483648.0), INFINITY, 0); /* beyond int_pow: pow */
  CHECK_NEAR(cn_pow(-1.0, 2147483647.0), -1, 0);
  CHECK_NEAR(cn_pow(10.0, 22.0), 1e22, 0);
  CHECK_NEAR(cn_pow(2.0f, -2.0f), 0.25, 0);
  CHECK_NEAR(cn_pow(-8.0f, 1 / 3.f), NAN, 0);
  CHECK_NEAR(cn_pow(-1.5f, 2.0f), 2.25, 0);

  CHECK_NEAR(cn_max(NAN, 1.0), NAN, 0);
  CHECK_NEAR(cn_max(1.0, NAN), NAN, 0);
  CHECK_NEAR(cn_min(NAN, 1.0), NAN, 0);
  CHECK_NEAR(cn_min(-INFINITY, NAN), NAN, 0);
  CHECK_NEAR(cn_max(1.0f, NAN), NAN, 0);
  CHECK_NEAR(cn_max(-3.0, 2.0), 2, 0);
  CHECK_NEAR(cn_min(-3.0f, 2.0f), -3, 0);
  CHECK(!signbit(cn_max(-0.0, 0.0)) && !signbit(cn_max(0.0, -0.0)));
  CHECK(signbit(cn_min(-0.0, 0.0)) && signbit(cn_min(0.0f, -0.0f)));
  CHECK(cn_max((int64_t)-5, (int64_t)3) == 3);
  CHECK(cn_min((uint64_t)5, UINT64_MAX) == 5);
}

/* ---- threefry and the uint4x32 conversions (ocannl-notes §7) ---- */

static void test_threefry(void) {
  cn_u4x32 key = {{42, 0, 0, 0}};
  cn_u4x32 ctr = cn_uint32_to_u4x32(0);
  CHECK(same_word(ctr, 0, 0x9E3779B9u, 0x6C078965u, 0));
  cn_u4x32 light = cn_threefry4x32_light(key, ctr);
  CHECK_MSG(same_word(light, 0x76bb7178u, 0xbb82ac4fu, 0x8f90552bu, 0x81b2da10u),
            "%08x %08x %08x %08x", light.v[0], light.v[1], light.v[2], light.v[3]);
  cn_u4x32 zero = {{0, 0, 0, 0}};
  cn_u4x32 crypto = cn_threefry4x32_crypto(zero, zero);
  CHECK_MSG(same_word(crypto, 0xaed7ff00u, 0xdea3e3f9u, 0x9c760045u, 0xcd7c88b6u),
            "%08x %08x %08x %08x", crypto.v[0], crypto.v[1], crypto.v[2], crypto.v[3]);
  /* Light is not crypto, and the key is the first argument. */
  CHECK(!same_word(cn_threefry4x32_light(ctr, key), 0x76bb7178u, 0xbb82ac4fu, 0x8f90552bu,
                   0x81b2da10u));

  /* The half uniform stream of that word: 16-bit fractions lo, hi of each word. */
  float lanes[8];
  cn_u4x32_to_half_uniform_vec(light, lanes);
  const double approx[8] = {0.443, 0.464, 0.673, 0.732, 0.333, 0.561, 0.852, 0.507};
  const unsigned halves[8] = {0x7178, 0x76bb, 0xac4f, 0xbb82, 0x552b, 0x8f90, 0xda10, 0x81b2};
  for (int j = 0; j < 8; j++) {
    CHECK_NEAR(lanes[j], approx[j], 6e-4);
    CHECK_NEAR(lanes[j], halves[j] / 65536.0, 0);
  }
  /* Through the op table: the vectorized op on half cells stores those fractions rounded. */
  cn_value out[16];
  CHECK_INT(cn_eval_vec_op(CN_OP_UNIFORM, CN_PREC_HALF, light, out), 8);
  CHECK_NEAR(out[3].f, 0xbb82 / 65536.0, 0);
  uint16_t cells[8];
  cn_ctx *ctx = cn_ctx_create();
  const void *args[1] = {&light};
  CHECK_INT(cn_op_eval(ctx, CN_OP_UNIFORM, CN_PREC_HALF, args, cells), CN_OK);
  for (int j = 0; j < 8; j++) CHECK_INT(cells[j], cn_store_half((float)(halves[j] / 65536.0)));
  CHECK_NEAR(cn_prec_cell_to_double(CN_PREC_HALF, &cells[0]), 0.443359375, 0); /* 0x3718 */
  cn_ctx_destroy(ctx);
}

static void test_uniform_conversions(void) {
  cn_u4x32 w = {{0x80000102u, 0xfedcba98u, 0x01234567u, 0x89abcdefu}};
  CHECK(cn_u4x32_to_byte_uniform(w) == 0x02);
  CHECK(cn_u4x32_to_uint16_uniform(w) == 0x0102);
  CHECK(cn_u4x32_to_int32_uniform(w) == (int64_t)0x80000102u - 0x100000000);
  CHECK(cn_u4x32_to_uint32_uniform(w) == 0x80000102u);
  CHECK(cn_u4x32_to_uint64_uniform(w) == 0xfedcba9880000102u);
  CHECK(cn_u4x32_to_int64_uniform(w) == -(int64_t)(0x0123456780000000u - 0x102u));
  CHECK_NEAR(cn_u4x32_to_single_uniform(w), 0x800001 * 0x1p-24, 0);
  CHECK_NEAR(cn_u4x32_to_bfloat16_uniform(w), 0x800001 * 0x1p-24, 0);
  CHECK_NEAR(cn_u4x32_to_half_uniform(w), 0x0102 * 0x1p-16, 0);
  CHECK_NEAR(cn_u4x32_to_double_uniform(w), (double)0xfedcba9880000102u * 0x1p-64, 0);
  CHECK_NEAR(cn_u4x32_to_fp8_uniform(w), cn_load_fp8(0x02), 0); /* raw bits: 2 * 2^-16 */
  CHECK(same_word(cn_u4x32_to_uint4x32_uniform(w), w.v[0], w.v[1], w.v[2], w.v[3]));
  cn_u4x32 top = {{0xffffffffu, 0xffffffffu, 0, 0}};
  CHECK_NEAR(cn_u4x32_to_single_uniform(top), 1 - 0x1p-24, 0); /* below 1 */

  int64_t bytes[16], shorts[8], ints[4], longs[2];
  cn_u4x32_to_byte_uniform_vec(w, bytes);
  CHECK(bytes[0] == 0x02 && bytes[1] == 0x01 && bytes[3] == 0x80 && bytes[4] == 0x98 &&
        bytes[15] == 0x89);
  cn_u4x32_to_uint16_uniform_vec(w, shorts);
  CHECK(shorts[0] == 0x0102 && shorts[1] == 0x8000 && shorts[6] == 0xcdef && shorts[7] == 0x89ab);
  cn_u4x32_to_int32_uniform_vec(w, ints);
  CHECK(ints[0] == -2147483390 && ints[1] == (int64_t)0xfedcba98u - 0x100000000 &&
        ints[2] == 0x01234567);
  cn_u4x32_to_int64_uniform_vec(w, longs);
  CHECK(longs[1] == cn_u64_as_i64(0x89abcdef01234567u));
  float fp8s[16], singles[4];
  cn_u4x32_to_fp8_uniform_vec(w, fp8s);
  CHECK_NEAR(fp8s[1], cn_load_fp8(0x01), 0);
  CHECK_NEAR(fp8s[2], 0, 0);
  CHECK_NEAR(fp8s[3], -0.0, 0);
  CHECK(signbit(fp8s[3]));
  cn_u4x32_to_single_uniform_vec(w, singles);
  CHECK_NEAR(singles[3], 0x89abcd * 0x1p-24, 0);
  double doubles[2];
  cn_u4x32_to_double_uniform_vec(w, doubles);
  CHECK_NEAR(doubles[1], (double)0x89abcdef01234567u * 0x1p-64, 0);
  CHECK_INT(cn_vec_length(CN_PREC_FP8), 16);
  CHECK_INT(cn_vec_length(CN_PREC_DOUBLE), 2);
  CHECK_INT(cn_vec_length(CN_PREC_UINT4X32), 1);

  /* Into uint4x32, by the source precision. */
  CHECK(same_word(cn_int32_to_u4x32(-1), 0xffffffffu, 0xffffffffu ^ 0x9E3779B9u,
                  0xffffffffu ^ 0x6C078965u, 0));
  CHECK(same_word(cn_uint32_to_u4x32(0x00010002), 0x00010002u, 0x00010002u ^ 0x9E3779B9u,
                  0x00010002u ^ 0x6C078965u, 0x00010002u ^ 0x00020001u));
  CHECK(same_word(cn_int64_to_u4x32(-2), 0xfffffffeu, 0xffffffffu, 0, 0));
  CHECK(same_word(cn_uint64_to_u4x32(0x123456789u), 0x23456789u, 1, 0, 0));
  CHECK(same_word(cn_single_to_u4x32(1.0f), 0x3f800000u, 0, 0, 0));
  CHECK(same_word(cn_double_to_u4x32(-2.0), 0, 0xc0000000u, 0, 0));
  CHECK(same_word(cn_byte_to_u4x32(200), 200, 0, 0, 0));
  CHECK(same_word(cn_half_to_u4x32(3.75f), 3, 0, 0, 0));
  CHECK(same_word(cn_half_to_u4x32(-2.0f), 0, 0, 0, 0));
  CHECK(same_word(cn_bfloat16_to_u4x32(1e10f), 0xffffffffu, 0, 0, 0));
  CHECK(same_word(cn_fp8_to_u4x32(NAN), 0, 0, 0, 0));
}

/* ---- Op semantics ---- */

static void test_unary_ops(void) {
  CHECK_NEAR(evf(CN_OP_ID, -2.5, 0, 0), -2.5, 0);
  CHECK_NEAR(evf(CN_OP_RELU, -2, 0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_RELU, 3, 0, 0), 3, 0);
  CHECK_NEAR(evf(CN_OP_RELU, NAN, 0, 0), 0, 0); /* NaN >= 0 is false */
  CHECK_NEAR(evf(CN_OP_SAT01, -1, 0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_SAT01, 0.25, 0, 0), 0.25, 0);
  CHECK_NEAR(evf(CN_OP_SAT01, 7, 0, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_SAT01, NAN, 0, 0), NAN, 0);
  CHECK_NEAR(evf(CN_OP_EXP, 0, 0, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_EXP, -INFINITY, 0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_LOG, 1, 0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_LOG, 0, 0, 0), -INFINITY, 0);
  CHECK_NEAR(evf(CN_OP_LOG, -1, 0, 0), NAN, 0);
  CHECK_NEAR(evf(CN_OP_EXP2, 3, 0, 0), 8, 0);
  CHECK_NEAR(evf(CN_OP_LOG2, 8, 0, 0), 3, 0);
  CHECK_NEAR(evf(CN_OP_SIN, 0, 0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_COS, 0, 0, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_SQRT, 4, 0, 0), 2, 0);
  CHECK_NEAR(evf(CN_OP_SQRT, -4, 0, 0), NAN, 0);
  CHECK_NEAR(evf(CN_OP_RECIP, 4, 0, 0), 0.25, 0);
  CHECK_NEAR(evf(CN_OP_RECIP, -0.0, 0, 0), -INFINITY, 0);
  CHECK_NEAR(evf(CN_OP_RECIP_SQRT, 4, 0, 0), 0.5, 0);
  CHECK_NEAR(evf(CN_OP_NEG, 2, 0, 0), -2, 0);
  CHECK(signbit(evf(CN_OP_NEG, 0, 0, 0)));
  CHECK_NEAR(evf(CN_OP_TRUNC, -2.7, 0, 0), -2, 0);
  CHECK_NEAR(evf(CN_OP_TRUNC, 2.7, 0, 0), 2, 0);
  CHECK_NEAR(evf(CN_OP_TANH, 0, 0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_TANH, INFINITY, 0, 0), 1, 0);
  /* PyTorch's gelu(approximate="tanh"): 0.8411919906082768 at 1, -0.15880800939172324 at -1 */
  CHECK_NEAR(evf(CN_OP_GELU, 0, 0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_GELU, 1, 0, 0), 0.8411919906082768, 1e-15);
  CHECK_NEAR(evf(CN_OP_GELU, -1, 0, 0), -0.15880800939172324, 1e-15);
  CHECK_NEAR(evf(CN_OP_GELU, -30, 0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_GELU, INFINITY, 0, 0), INFINITY, 0);
  CHECK_NEAR(evf(CN_OP_NOT, 0, 0, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_NOT, -0.0, 0, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_NOT, 2, 0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_NOT, NAN, 0, 0), 0, 0);
  CHECK(evi(CN_OP_RELU, -5, 0, 0) == 0 && evi(CN_OP_RELU, 5, 0, 0) == 5);
  CHECK(evi(CN_OP_SAT01, 5, 0, 0) == 1 && evi(CN_OP_SAT01, -5, 0, 0) == 0);
  CHECK(evi(CN_OP_NEG, INT64_MIN, 0, 0) == INT64_MIN);
  CHECK(evi(CN_OP_TRUNC, -7, 0, 0) == -7);
  CHECK(evi(CN_OP_NOT, 0, 0, 0) == 1 && evi(CN_OP_NOT, -3, 0, 0) == 0);
  CHECK(evu(CN_OP_NEG, 1, 0) == UINT64_MAX);
  CHECK(evu(CN_OP_RELU, UINT64_MAX, 0) == UINT64_MAX); /* unsigned: never below zero */

  /* uniform1: the operand is uint4x32, the result of the op's precision. */
  cn_value w[1] = {wv(0x12345678u, 0x9abcdef0u, 0, 0)};
  CHECK(cn_eval_op(CN_OP_UNIFORM1, CN_PREC_BYTE, w).i == 0x78);
  CHECK(cn_eval_op(CN_OP_UNIFORM1, CN_PREC_UINT64, w).u == 0x9abcdef012345678u);
  CHECK_NEAR(cn_eval_op(CN_OP_UNIFORM1, CN_PREC_SINGLE, w).f, 0x123456 * 0x1p-24, 0);
  CHECK_NEAR(cn_eval_op(CN_OP_UNIFORM1, CN_PREC_HALF, w).f, 0x5678 * 0x1p-16, 0);
  CHECK(
      same_word(cn_eval_op(CN_OP_UNIFORM1, CN_PREC_UINT4X32, w).w, 0x12345678u, 0x9abcdef0u, 0, 0));
}

static void test_binary_ops(void) {
  CHECK_NEAR(evf(CN_OP_ARG1, 1, 2, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_ARG2, 1, 2, 0), 2, 0);
  CHECK_NEAR(evf(CN_OP_ADD, 1.5, -4, 0), -2.5, 0);
  CHECK_NEAR(evf(CN_OP_ADD, INFINITY, -INFINITY, 0), NAN, 0);
  CHECK_NEAR(evf(CN_OP_SUB, 1.5, -4, 0), 5.5, 0);
  CHECK_NEAR(evf(CN_OP_MUL, -3, 0.5, 0), -1.5, 0);
  CHECK_NEAR(evf(CN_OP_DIV, 1, 0, 0), INFINITY, 0);
  CHECK_NEAR(evf(CN_OP_DIV, -1, 0, 0), -INFINITY, 0);
  CHECK_NEAR(evf(CN_OP_DIV, 0, 0, 0), NAN, 0);
  CHECK_NEAR(evf(CN_OP_POW, 2, -2, 0), 0.25, 0);
  CHECK_NEAR(evf(CN_OP_POW, -8, 1 / 3., 0), NAN, 0);
  CHECK_NEAR(evf(CN_OP_POW, -2, 3, 0), -8, 0);
  CHECK_NEAR(evf(CN_OP_POW, 9, 0.5, 0), 3, 0);
  CHECK_NEAR(evf(CN_OP_RELU_GATE, 1, 5, 0), 5, 0);
  CHECK_NEAR(evf(CN_OP_RELU_GATE, 0, 5, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_RELU_GATE, -1, 5, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_RELU_GATE, NAN, 5, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_SAT01_GATE, 0.5, 7, 0), 7, 0);
  CHECK_NEAR(evf(CN_OP_SAT01_GATE, 0, 7, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_SAT01_GATE, 1, 7, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_SAT01_GATE, NAN, 7, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_LT, 1, 2, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_LT, 2, 1, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_LT, NAN, 1, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_EQ, -0.0, 0, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_EQ, NAN, NAN, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_NE, NAN, NAN, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_NE, 3, 3, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_OR, 0, NAN, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_OR, 0, -0.0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_AND, 2, 0, 0), 0, 0);
  CHECK_NEAR(evf(CN_OP_AND, 2, -3, 0), 1, 0);
  /* the seed's float %: floored, the sign of the divisor ([0, b) for b > 0), not C's fmod */
  CHECK_NEAR(evf(CN_OP_MOD, -7, 2, 0), 1, 0);
  CHECK_NEAR(evf(CN_OP_MOD, 7, -2, 0), -1, 0);
  CHECK_NEAR(evf(CN_OP_MOD, -7, -2, 0), -1, 0);
  CHECK_NEAR(evf(CN_OP_MOD, -6, 2, 0), 0, 0);
  const double mod_x[5] = {-7, 7, -7.5, 5.5, -0.5}, mod_y[5] = {3, 3, 2, 2, 4};
  const double mod_want[5] = {2, 1, 0.5, 1.5, 3.5};
  for (int i = 0; i < 5; i++) CHECK_NEAR(evf(CN_OP_MOD, mod_x[i], mod_y[i], 0), mod_want[i], 0);
  CHECK_NEAR(evf(CN_OP_MOD, 5.5, 2, 0), 1.5, 0);
  CHECK_NEAR(evf(CN_OP_MOD, 1, 0, 0), NAN, 0);
  CHECK_NEAR(evf(CN_OP_MAX, NAN, 1, 0), NAN, 0);
  CHECK_NEAR(evf(CN_OP_MAX, 1, NAN, 0), NAN, 0);
  CHECK_NEAR(evf(CN_OP_MAX, -1, -INFINITY, 0), -1, 0);
  CHECK_NEAR(evf(CN_OP_MIN, 1, NAN, 0), NAN, 0);
  CHECK_NEAR(evf(CN_OP_MIN, -1, 3, 0), -1, 0);

  CHECK(evi(CN_OP_ADD, INT64_MAX, 1, 0) == INT64_MIN);
  CHECK(evi(CN_OP_SUB, 3, 10, 0) == -7);
  CHECK(evi(CN_OP_MUL, -4, 6, 0) == -24);
  CHECK(evi(CN_OP_DIV, 7, 0, 0) == 0); /* no crash */
  CHECK(evi(CN_OP_DIV, -7, 2, 0) == -3);
  CHECK(evi(CN_OP_DIV, INT64_MIN, -1, 0) == INT64_MIN);
  CHECK(evi(CN_OP_MOD, -7, 2, 0) == -1);
  CHECK(evi(CN_OP_MOD, 7, 0, 0) == 0);
  CHECK(evi(CN_OP_POW, 3, 4, 0) == 81);
  CHECK(evi(CN_OP_POW, 2, -1, 0) == 0);
  CHECK(evi(CN_OP_RELU_GATE, 2, 9, 0) == 9 && evi(CN_OP_RELU_GATE, 0, 9, 0) == 0);
  CHECK(evi(CN_OP_SAT01_GATE, 1, 9, 0) == 0); /* no integer lies strictly inside (0, 1) */
  CHECK(evi(CN_OP_LT, -1, 0, 0) == 1 && evi(CN_OP_EQ, 4, 4, 0) == 1 && evi(CN_OP_NE, 4, 4, 0) == 0);
  CHECK(evi(CN_OP_OR, 0, 0, 0) == 0 && evi(CN_OP_AND, 3, -1, 0) == 1);
  CHECK(evi(CN_OP_MAX, -5, -9, 0) == -5 && evi(CN_OP_MIN, -5, -9, 0) == -9);
  CHECK(evu(CN_OP_SUB, 3, 10) == UINT64_MAX - 6);
  CHECK(evu(CN_OP_DIV, 7, 0) == 0);
  CHECK(evu(CN_OP_LT, 1, UINT64_MAX) == 1);
  CHECK(evu(CN_OP_MAX, 1, UINT64_MAX) == UINT64_MAX);

  cn_value key_ctr[2] = {wv(42, 0, 0, 0), {.w = cn_uint32_to_u4x32(0)}};
  cn_value r = cn_eval_op(CN_OP_THREEFRY_LIGHT, CN_PREC_UINT4X32, key_ctr);
  CHECK(same_word(r.w, 0x76bb7178u, 0xbb82ac4fu, 0x8f90552bu, 0x81b2da10u));
  cn_value zeros[2] = {wv(0, 0, 0, 0), wv(0, 0, 0, 0)};
  r = cn_eval_op(CN_OP_THREEFRY_CRYPTO, CN_PREC_UINT4X32, zeros);
  CHECK(same_word(r.w, 0xaed7ff00u, 0xdea3e3f9u, 0x9c760045u, 0xcd7c88b6u));
  r = cn_eval_op(CN_OP_ARG2, CN_PREC_UINT4X32, key_ctr);
  CHECK(same_word(r.w, 0, 0x9E3779B9u, 0x6C078965u, 0));
}

static void test_ternary_ops(void) {
  CHECK_NEAR(evf(CN_OP_WHERE, 1, 2, 3), 2, 0);
  CHECK_NEAR(evf(CN_OP_WHERE, 0, 2, 3), 3, 0);
  CHECK_NEAR(evf(CN_OP_FMA, 2, 3, 4), 10, 0);
  /* fma rounds once: (1 + 2^-30)^2 - 1 keeps the 2^-60 term a separate multiply would lose. */
  double e = 1 + 0x1p-30;
  CHECK_NEAR(evf(CN_OP_FMA, e, e, -1), 0x1p-29 + 0x1p-60, 0);
  CHECK_NEAR(evf(CN_OP_MUL3, 2, -3, 0.5), -3, 0);
  CHECK(evi(CN_OP_WHERE, 0, 2, 3) == 3);
  CHECK(evi(CN_OP_FMA, INT64_MAX, 2, 5) == 3);
  CHECK(evi(CN_OP_MUL3, 2, 3, -4) == -24);

  /* Through the public API the condition keeps its truth: NaN is true. */
  cn_ctx *ctx = cn_ctx_create();
  double cond = NAN, yes = 2, no = 3, out = 0;
  const void *args[3] = {&cond, &yes, &no};
  CHECK_INT(cn_op_eval(ctx, CN_OP_WHERE, CN_PREC_DOUBLE, args, &out), CN_OK);
  CHECK_NEAR(out, 2, 0);
  int32_t c32 = -7, y32 = 11, n32 = 13, o32 = 0;
  const void *args32[3] = {&c32, &y32, &n32};
  CHECK_INT(cn_op_eval(ctx, CN_OP_WHERE, CN_PREC_INT32, args32, &o32), CN_OK);
  CHECK_INT(o32, 11);
  cn_ctx_destroy(ctx);
}

static void test_op_eval_api(void) {
  cn_ctx *ctx = cn_ctx_create();
  uint8_t b200 = 200, b100 = 100, bout = 0;
  const void *bargs[2] = {&b200, &b100};
  CHECK_INT(cn_op_eval(ctx, CN_OP_ADD, CN_PREC_BYTE, bargs, &bout), CN_OK);
  CHECK_INT(bout, 44); /* 300 wraps to the byte */
  CHECK_INT(cn_op_eval(ctx, CN_OP_SUB, CN_PREC_BYTE, (const void *[]){&b100, &b200}, &bout), CN_OK);
  CHECK_INT(bout, 156);
  float fa = 2.0f, fb = 0.5f, fout = 0;
  CHECK_INT(cn_op_eval(ctx, CN_OP_POW, CN_PREC_SINGLE, (const void *[]){&fa, &fb}, &fout), CN_OK);
  CHECK_NEAR(fout, (float)sqrt(2.0), 0);
  uint16_t h1 = 0x3c00, h2 = 0x3c00, hout = 0; /* 1 + 1 in half */
  CHECK_INT(cn_op_eval(ctx, CN_OP_ADD, CN_PREC_HALF, (const void *[]){&h1, &h2}, &hout), CN_OK);
  CHECK_INT(hout, 0x4000);
  int32_t i32 = 5, i32out = 0;
  CHECK_INT(cn_op_eval(ctx, CN_OP_EXP, CN_PREC_INT32, (const void *[]){&i32}, &i32out),
            CN_ERR_UNSUPPORTED);
  CHECK_STR(cn_ctx_error(ctx), "op exp is not defined for precision int32");
  CHECK_INT(cn_op_eval(ctx, CN_OP_ADD, CN_PREC_UINT4X32, (const void *[]){&i32, &i32}, &i32out),
            CN_ERR_UNSUPPORTED);
  CHECK_HAS(cn_ctx_error(ctx), "op add is not defined for precision uint4x32");
  CHECK_INT(cn_op_eval(ctx, (cn_op)CN_OP_COUNT, CN_PREC_INT32, (const void *[]){&i32}, &i32out),
            CN_ERR_INVALID);
  CHECK_INT(cn_op_eval(ctx, CN_OP_NEG, (cn_prec)-1, (const void *[]){&i32}, &i32out),
            CN_ERR_INVALID);
  CHECK_INT(cn_op_eval(ctx, CN_OP_NEG, CN_PREC_INT32, NULL, &i32out), CN_ERR_INVALID);
  CHECK_INT(cn_op_eval(ctx, CN_OP_ADD, CN_PREC_INT32, (const void *[]){&i32, NULL}, &i32out),
            CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "argument 1 is NULL");
  CHECK_INT(cn_op_eval(ctx, CN_OP_NEG, CN_PREC_INT32, (const void *[]){&i32}, NULL),
            CN_ERR_INVALID);
  CHECK_INT(cn_op_eval(ctx, CN_OP_NEG, CN_PREC_INT32, (const void *[]){&i32}, &i32out), CN_OK);
  CHECK_INT(i32out, -5);
  int32_t i32min = INT32_MIN;
  CHECK_INT(cn_op_eval(ctx, CN_OP_NEG, CN_PREC_INT32, (const void *[]){&i32min}, &i32out), CN_OK);
  CHECK_INT(i32out, INT32_MIN); /* 2^31 wraps back on store */
  cn_u4x32 w = {{0xdeadbeefu, 1, 2, 3}};
  uint8_t bytes[16];
  CHECK_INT(cn_op_eval(ctx, CN_OP_UNIFORM, CN_PREC_BYTE, (const void *[]){&w}, bytes), CN_OK);
  CHECK(bytes[0] == 0xef && bytes[3] == 0xde && bytes[4] == 1 && bytes[12] == 3);
  CHECK_INT(cn_op_eval(ctx, CN_OP_UNIFORM1, CN_PREC_UINT16, (const void *[]){&w}, &h1), CN_OK);
  CHECK_INT(h1, 0xbeef);
  cn_ctx_destroy(ctx);
}

/* ---- Tables and the public API ---- */

static void test_tables(void) {
  CHECK_STR(cn_op_table[CN_OP_ADD].fexpr, "(a + b)");
  CHECK_STR(cn_op_table[CN_OP_ADD].iexpr, "cn_iadd(a, b)");
  CHECK_STR(cn_op_table[CN_OP_ADD].bexpr, "CN_NA");
  CHECK_STR(cn_op_table[CN_OP_SAT01].fexpr, "(a <= 0 ? 0 : a >= 1 ? 1 : a)");
  CHECK_INT(cn_op_table[CN_OP_ARG2].accum, CN_ACCUM_ACC_INIT);
  CHECK_INT(cn_op_table[CN_OP_MUL].logic, CN_LOGIC_NONE);
  CHECK_INT(cn_op_table[CN_OP_UNIFORM].flags, CN_OPF_TO_PREC | CN_OPF_VEC);
  CHECK_STR(cn_prec_table[CN_PREC_HALF].store_c, "uint16_t");
  CHECK_STR(cn_prec_table[CN_PREC_HALF].compute_c, "float");
  CHECK_INT(cn_prec_kind_bit(CN_PREC_UINT64), CN_KI);
  CHECK_INT(cn_prec_kind_bit(CN_PREC_FP8), CN_KF);
  CHECK_INT(cn_prec_kind_bit(CN_PREC_UINT4X32), CN_KB);

  CHECK_STR(cn_prec_name(CN_PREC_BFLOAT16), "bfloat16");
  CHECK_STR(cn_prec_name((cn_prec)CN_PREC_COUNT), "(invalid precision)");
  const size_t sizes[] = {1, 2, 4, 4, 8, 8, 16, 2, 2, 1, 4, 8}; /* ocannl-notes §2.1 order */
  const cn_prec order[] = {CN_PREC_BYTE,     CN_PREC_UINT16, CN_PREC_INT32,    CN_PREC_UINT32,
                           CN_PREC_INT64,    CN_PREC_UINT64, CN_PREC_UINT4X32, CN_PREC_HALF,
                           CN_PREC_BFLOAT16, CN_PREC_FP8,    CN_PREC_SINGLE,   CN_PREC_DOUBLE};
  for (int k = 0; k < 12; k++) CHECK_INT(cn_prec_bytes(order[k]), sizes[k]);
  CHECK_INT(cn_prec_bytes((cn_prec)CN_PREC_COUNT), 0);
  CHECK_INT(cn_prec_kind_of(CN_PREC_UINT64), CN_PKIND_UINT);
  CHECK_INT(cn_prec_kind_of(CN_PREC_BYTE), CN_PKIND_INT);
  CHECK_INT(cn_prec_kind_of(CN_PREC_HALF), CN_PKIND_FLOAT);
  /* Promotion, weakest first (ocannl-notes §2.1): every later one dominates every earlier one. */
  const cn_prec ranked[] = {CN_PREC_BYTE,     CN_PREC_UINT16, CN_PREC_INT32,  CN_PREC_UINT32,
                            CN_PREC_INT64,    CN_PREC_UINT64, CN_PREC_FP8,    CN_PREC_HALF,
                            CN_PREC_BFLOAT16, CN_PREC_SINGLE, CN_PREC_DOUBLE, CN_PREC_UINT4X32};
  int promote_errors = 0;
  for (int i = 0; i < 12; i++)
    for (int j = 0; j < 12; j++) {
      cn_prec expected = ranked[i > j ? i : j];
      if (cn_prec_promote(ranked[i], ranked[j]) != expected) promote_errors++;
    }
  CHECK_INT(promote_errors, 0);
  cn_prec p = CN_PREC_BYTE;
  CHECK(cn_prec_from_name("fp8", &p) && p == CN_PREC_FP8);
  CHECK(cn_prec_from_name("uint4x32", &p) && p == CN_PREC_UINT4X32);
  CHECK(!cn_prec_from_name("float", &p) && p == CN_PREC_UINT4X32);
  CHECK(!cn_prec_from_name(NULL, &p));

  CHECK_STR(cn_op_name(CN_OP_RELU_GATE), "relu_gate");
  CHECK_STR(cn_op_infix(CN_OP_RELU_GATE), "-?/");
  CHECK(cn_op_infix(CN_OP_EXP) == NULL);
  CHECK_INT(cn_op_arity(CN_OP_FMA), 3);
  CHECK_INT(cn_op_arity(CN_OP_NOT), 1);
  CHECK(cn_op_can_accumulate(CN_OP_ADD) && cn_op_can_accumulate(CN_OP_ARG2));
  CHECK(!cn_op_can_accumulate(CN_OP_ARG1) && !cn_op_can_accumulate(CN_OP_LT));
  cn_op op = CN_OP_ID;
  CHECK(cn_op_from_name("sat01_gate", &op) && op == CN_OP_SAT01_GATE);
  CHECK(cn_op_from_name("threefry4x32_light", &op) && op == CN_OP_THREEFRY_LIGHT);
  CHECK(!cn_op_from_name("+", &op) && !cn_op_from_name(NULL, &op));

  CHECK(cn_op_supports(CN_OP_EXP, CN_PREC_FP8) && !cn_op_supports(CN_OP_EXP, CN_PREC_INT32));
  CHECK(cn_op_supports(CN_OP_ADD, CN_PREC_UINT64) && !cn_op_supports(CN_OP_ADD, CN_PREC_UINT4X32));
  CHECK(cn_op_supports(CN_OP_THREEFRY_CRYPTO, CN_PREC_UINT4X32));
  CHECK(!cn_op_supports(CN_OP_THREEFRY_CRYPTO, CN_PREC_DOUBLE));
  CHECK(cn_op_supports(CN_OP_ID, CN_PREC_UINT4X32));
  for (int q = 0; q < CN_PREC_COUNT; q++) {
    CHECK(cn_op_supports(CN_OP_UNIFORM1, (cn_prec)q));
    CHECK(cn_op_supports(CN_OP_UNIFORM, (cn_prec)q));
  }
  CHECK(!cn_op_supports((cn_op)CN_OP_COUNT, CN_PREC_DOUBLE));

  CHECK_NEAR(cn_op_neutral(CN_OP_MAX, CN_PREC_INT32), INT32_MIN, 0);
  CHECK_NEAR(cn_op_neutral(CN_OP_MAX, CN_PREC_BYTE), 0, 0);
  CHECK_NEAR(cn_op_neutral(CN_OP_MIN, CN_PREC_BYTE), 255, 0);
  CHECK_NEAR(cn_op_neutral(CN_OP_MIN, CN_PREC_UINT16), 65535, 0);
  CHECK_NEAR(cn_op_neutral(CN_OP_MAX, CN_PREC_DOUBLE), -INFINITY, 0);
  CHECK_NEAR(cn_op_neutral(CN_OP_MIN, CN_PREC_HALF), INFINITY, 0);
  CHECK_NEAR(cn_op_neutral(CN_OP_MUL, CN_PREC_SINGLE), 1, 0);
  CHECK_NEAR(cn_op_neutral(CN_OP_SAT01_GATE, CN_PREC_SINGLE), 0.5, 0);
  CHECK_NEAR(cn_op_neutral(CN_OP_SAT01_GATE, CN_PREC_INT64), 0, 0);
  CHECK_NEAR(cn_op_neutral(CN_OP_MIN, CN_PREC_UINT64), 18446744073709551615.0, 0);
  CHECK_NEAR(cn_op_neutral(CN_OP_ADD, CN_PREC_UINT4X32), 0, 0);
}

/* ---- Values and conversions ---- */

/* Valgrind emulates a few floating-point instructions inexactly (int64 -> float rounds twice, fma
 * may lose the sign of a zero): the checks that depend on them are relaxed when it runs us. */
static bool under_valgrind(void) {
  const char *preload = getenv("LD_PRELOAD");
  return preload && strstr(preload, "vgpreload") != NULL;
}

static cn_value conv(cn_prec from, cn_prec to, cn_value v) {
  return cn_value_convert(from, to, v);
}

static void test_conversions(void) {
  /* FLOAT -> integer: truncate, saturate to the target's stored range, NaN -> 0. */
  CHECK(conv(CN_PREC_DOUBLE, CN_PREC_BYTE, fv(300.7)).i == 255);
  CHECK(conv(CN_PREC_DOUBLE, CN_PREC_BYTE, fv(-5)).i == 0);
  CHECK(conv(CN_PREC_DOUBLE, CN_PREC_BYTE, fv(NAN)).i == 0);
  CHECK(conv(CN_PREC_DOUBLE, CN_PREC_BYTE, fv(254.99)).i == 254);
  CHECK(conv(CN_PREC_SINGLE, CN_PREC_INT32, fv(1e20)).i == INT32_MAX);
  CHECK(conv(CN_PREC_SINGLE, CN_PREC_INT32, fv(-1e20)).i == INT32_MIN);
  CHECK(conv(CN_PREC_SINGLE, CN_PREC_INT32, fv(-2.9)).i == -2);
  CHECK(conv(CN_PREC_HALF, CN_PREC_UINT16, fv(INFINITY)).i == 65535);
  CHECK(conv(CN_PREC_DOUBLE, CN_PREC_UINT32, fv(-INFINITY)).i == 0);
  CHECK(conv(CN_PREC_DOUBLE, CN_PREC_INT64, fv(1e19)).i == INT64_MAX);
  CHECK(conv(CN_PREC_DOUBLE, CN_PREC_INT64, fv(-9223372036854775808.0)).i == INT64_MIN);
  CHECK(conv(CN_PREC_DOUBLE, CN_PREC_UINT64, fv(1e30)).u == UINT64_MAX);
  CHECK(conv(CN_PREC_DOUBLE, CN_PREC_UINT64, fv(-1)).u == 0);
  CHECK(conv(CN_PREC_DOUBLE, CN_PREC_UINT64, fv(1e19)).u == 10000000000000000000u);
  /* integer -> integer: wrap to the target's stored width. */
  CHECK(conv(CN_PREC_INT64, CN_PREC_BYTE, iv(300)).i == 44);
  CHECK(conv(CN_PREC_INT64, CN_PREC_UINT32, iv(-1)).i == 4294967295);
  CHECK(conv(CN_PREC_INT64, CN_PREC_UINT64, iv(-1)).u == UINT64_MAX);
  CHECK(conv(CN_PREC_UINT64, CN_PREC_INT64, uv(UINT64_MAX)).i == -1);
  CHECK(conv(CN_PREC_UINT64, CN_PREC_INT32, uv(((uint64_t)1 << 40) + 5)).i == 5);
  CHECK(conv(CN_PREC_INT64, CN_PREC_INT32, iv(0x80000000)).i == INT32_MIN);
  CHECK(conv(CN_PREC_BYTE, CN_PREC_UINT16, iv(-1)).i == 65535); /* an unwrapped byte value */
  CHECK(conv(CN_PREC_INT32, CN_PREC_INT64, iv(-7)).i == -7);
  /* integer -> FLOAT: one rounding, straight to the compute type. */
  int64_t big = ((int64_t)1 << 53) + ((int64_t)1 << 29) + 1; /* just above a float midpoint */
  if (under_valgrind())
    printf("note: under valgrind, whose int64 -> float conversion rounds twice: check skipped\n");
  else
    CHECK_NEAR(conv(CN_PREC_INT64, CN_PREC_SINGLE, iv(big)).f, 0x1p53 + 0x1p30, 0);
  CHECK_NEAR(conv(CN_PREC_INT64, CN_PREC_DOUBLE, iv(big)).f, 0x1p53 + 0x1p29, 0);
  CHECK_NEAR(conv(CN_PREC_UINT64, CN_PREC_DOUBLE, uv(UINT64_MAX)).f, 0x1p64, 0);
  /* FLOAT -> FLOAT: the compute type's cast. */
  CHECK_NEAR(conv(CN_PREC_DOUBLE, CN_PREC_SINGLE, fv(0.1)).f, (double)0.1f, 0);
  CHECK_NEAR(conv(CN_PREC_DOUBLE, CN_PREC_HALF, fv(0.1)).f, (double)0.1f, 0); /* rounds on store */
  CHECK_NEAR(conv(CN_PREC_SINGLE, CN_PREC_DOUBLE, fv(0.1)).f, 0.1, 0);
  CHECK_NEAR(conv(CN_PREC_DOUBLE, CN_PREC_SINGLE, fv(1e300)).f, INFINITY, 0);
  /* into uint4x32 by the source precision; out of it by word 0. */
  CHECK(same_word(conv(CN_PREC_INT32, CN_PREC_UINT4X32, iv(5)).w, 5, 5 ^ 0x9E3779B9u,
                  5 ^ 0x6C078965u, 5u ^ (5u << 16)));
  CHECK(same_word(conv(CN_PREC_INT64, CN_PREC_UINT4X32, iv(-1)).w, 0xffffffffu, 0xffffffffu, 0, 0));
  CHECK(same_word(conv(CN_PREC_SINGLE, CN_PREC_UINT4X32, fv(1)).w, 0x3f800000u, 0, 0, 0));
  CHECK(same_word(conv(CN_PREC_DOUBLE, CN_PREC_UINT4X32, fv(1)).w, 0, 0x3ff00000u, 0, 0));
  CHECK(same_word(conv(CN_PREC_BYTE, CN_PREC_UINT4X32, iv(7)).w, 7, 0, 0, 0));
  CHECK(same_word(conv(CN_PREC_HALF, CN_PREC_UINT4X32, fv(3.7)).w, 3, 0, 0, 0));
  CHECK(same_word(conv(CN_PREC_FP8, CN_PREC_UINT4X32, fv(-2)).w, 0, 0, 0, 0));
  cn_value w = wv(0x80000102u, 0x00000001u, 7, 7);
  CHECK(conv(CN_PREC_UINT4X32, CN_PREC_BYTE, w).i == 2);
  CHECK(conv(CN_PREC_UINT4X32, CN_PREC_INT32, w).i == -2147483390);
  CHECK(conv(CN_PREC_UINT4X32, CN_PREC_INT64, w).i == 0x180000102);
  CHECK(conv(CN_PREC_UINT4X32, CN_PREC_UINT64, w).u == 0x180000102u);
  CHECK_NEAR(conv(CN_PREC_UINT4X32, CN_PREC_DOUBLE, w).f, 2147483906.0, 0);
  CHECK_NEAR(conv(CN_PREC_UINT4X32, CN_PREC_SINGLE, w).f, 2147483904.0, 0); /* float rounding */

  /* Values of doubles and bit patterns. */
  CHECK(cn_value_of_double(CN_PREC_INT32, -INFINITY).i == INT32_MIN);
  CHECK(cn_value_of_double(CN_PREC_BYTE, 1e9).i == 255);
  CHECK(cn_value_of_double(CN_PREC_UINT64, INFINITY).u == UINT64_MAX);
  CHECK(cn_value_of_double(CN_PREC_INT64, NAN).i == 0);
  CHECK_NEAR(cn_value_of_double(CN_PREC_SINGLE, 0.1).f, 0.1, 0); /* rounded on store */
  CHECK_NEAR(cn_value_of_double(CN_PREC_DOUBLE, 0.1).f, 0.1, 0);
  CHECK(same_word(cn_value_of_double(CN_PREC_UINT4X32, -2).w, 0xfffffffeu, 0xffffffffu, 0, 0));
  CHECK_NEAR(cn_value_to_double(CN_PREC_UINT4X32, wv(0xfffffffeu, 0xffffffffu, 9, 9)), -2, 0);
  CHECK_NEAR(cn_value_to_double(CN_PREC_UINT64, uv(UINT64_MAX)), 0x1p64, 0);
  CHECK(cn_value_of_bits(CN_PREC_INT64, UINT64_MAX).i == -1);
  CHECK(cn_value_of_bits(CN_PREC_UINT64, UINT64_MAX).u == UINT64_MAX);
  CHECK(same_word(cn_value_of_bits(CN_PREC_UINT4X32, 0x123456789u).w, 0x23456789u, 1, 0, 0));
  CHECK_NEAR(cn_value_of_bits(CN_PREC_DOUBLE, UINT64_MAX).f, -1, 0);
  CHECK_NEAR(cn_value_of_bits(CN_PREC_DOUBLE, (uint64_t)big).f, 0x1p53 + 0x1p29, 0);
  CHECK(cn_value_truth(CN_PREC_DOUBLE, fv(NAN)) && !cn_value_truth(CN_PREC_DOUBLE, fv(-0.0)));
  CHECK(cn_value_truth(CN_PREC_UINT4X32, wv(0, 0, 0, 1)));
  CHECK(!cn_value_truth(CN_PREC_UINT4X32, wv(0, 0, 0, 0)));
  CHECK(!cn_value_truth(CN_PREC_INT32, iv(0)) && cn_value_truth(CN_PREC_UINT64, uv(3)));

  /* Cells: stores wrap / round, loads are exact. */
  unsigned char cell[16];
  cn_value_store(CN_PREC_BYTE, iv(-1), cell);
  CHECK_INT(cell[0], 255);
  cn_value_store(CN_PREC_INT32, iv(0x100000005), cell);
  CHECK(cn_value_load(CN_PREC_INT32, cell).i == 5);
  cn_value_store(CN_PREC_SINGLE, fv(0.1), cell);
  CHECK_NEAR(cn_value_load(CN_PREC_SINGLE, cell).f, (double)0.1f, 0);
  cn_value_store(CN_PREC_BFLOAT16, fv(3.14159), cell);
  CHECK_NEAR(cn_value_load(CN_PREC_BFLOAT16, cell).f, 3.140625, 0);
  cn_prec_cell_from_double(CN_PREC_FP8, -0.25, cell);
  CHECK_INT(cell[0], 0xb4);
  CHECK_NEAR(cn_prec_cell_to_double(CN_PREC_FP8, cell), -0.25, 0);
  cn_prec_cell_from_double(CN_PREC_INT32, -1e12, cell);
  CHECK_NEAR(cn_prec_cell_to_double(CN_PREC_INT32, cell), INT32_MIN, 0);
  cn_prec_cell_from_double(CN_PREC_UINT4X32, 42, cell);
  cn_u4x32 seed;
  memcpy(&seed, cell, sizeof seed);
  CHECK(same_word(seed, 42, 0, 0, 0));
  CHECK_NEAR(cn_prec_cell_to_double(CN_PREC_UINT4X32, cell), 42, 0);
  CHECK_NEAR(cn_prec_cell_to_double((cn_prec)CN_PREC_COUNT, cell), NAN, 0);
  CHECK(cn_op_operand_prec(CN_OP_UNIFORM1, CN_PREC_HALF, 0, CN_PREC_INT32) == CN_PREC_UINT4X32);
  CHECK(cn_op_operand_prec(CN_OP_WHERE, CN_PREC_HALF, 0, CN_PREC_INT32) == CN_PREC_INT32);
  CHECK(cn_op_operand_prec(CN_OP_WHERE, CN_PREC_HALF, 1, CN_PREC_INT32) == CN_PREC_HALF);
  CHECK(cn_op_operand_prec(CN_OP_ADD, CN_PREC_HALF, 1, CN_PREC_DOUBLE) == CN_PREC_HALF);
}

/* ---- C spellings ---- */

static char spelled[512];
static const char *spell_op(cn_op op, cn_prec prec, const char *a, const char *b, const char *c) {
  cn_sbuf sb = {0};
  const char *args[3] = {a, b, c};
  cn_op_c(&sb, op, prec, args);
  snprintf(spelled, sizeof spelled, "%s", sb.data ? sb.data : "");
  cn_sbuf_free(&sb);
  return spelled;
}
static const char *spell_conv(cn_prec from, cn_prec to, const char *expr) {
  cn_sbuf sb = {0};
  cn_conv_c(&sb, from, to, expr);
  snprintf(spelled, sizeof spelled, "%s", sb.data ? sb.data : "");
  cn_sbuf_free(&sb);
  return spelled;
}
static const char *spell_const(cn_prec prec, cn_value v) {
  cn_sbuf sb = {0};
  cn_const_c(&sb, prec, v);
  snprintf(spelled, sizeof spelled, "%s", sb.data ? sb.data : "");
  cn_sbuf_free(&sb);
  return spelled;
}

static void test_spellings(void) {
  CHECK_STR(spell_op(CN_OP_ADD, CN_PREC_SINGLE, "x", "y", ""), "(x + y)");
  CHECK_STR(spell_op(CN_OP_ADD, CN_PREC_HALF, "x[i]", "cn_load_half(h[j])", ""),
            "(x[i] + cn_load_half(h[j]))");
  CHECK_STR(spell_op(CN_OP_ADD, CN_PREC_INT64, "x", "y", ""), "cn_iadd(x, y)");
  CHECK_STR(spell_op(CN_OP_MUL, CN_PREC_DOUBLE, "a + b", "(c)", ""), "((a + b) * (c))");
  CHECK_STR(spell_op(CN_OP_NEG, CN_PREC_SINGLE, "-0.5f", "", ""), "(-(-0.5f))");
  CHECK_STR(spell_op(CN_OP_NEG, CN_PREC_DOUBLE, "1e-05", "", ""), "(-1e-05)");
  CHECK_STR(spell_op(CN_OP_LT, CN_PREC_SINGLE, "x", "y", ""), "((float)(x < y))");
  CHECK_STR(spell_op(CN_OP_NOT, CN_PREC_INT64, "x", "", ""), "((int64_t)(x == 0 ? 1 : 0))");
  CHECK_STR(spell_op(CN_OP_RELU, CN_PREC_INT64, "x", "", ""), "(x >= 0 ? x : 0)");
  CHECK_STR(spell_op(CN_OP_EXP, CN_PREC_SINGLE, "x", "", ""), "cn_exp(x)");
  CHECK_STR(spell_op(CN_OP_FMA, CN_PREC_INT64, "x", "y", "z"), "cn_iadd(cn_imul(x, y), z)");
  CHECK_STR(spell_op(CN_OP_FMA, CN_PREC_DOUBLE, "a", "b", "c"), "fma(a, b, c)");
  CHECK_STR(spell_op(CN_OP_WHERE, CN_PREC_SINGLE, "c", "b", "a"), "cn_select(c != 0, b, a)");
  CHECK_STR(spell_op(CN_OP_THREEFRY_LIGHT, CN_PREC_UINT4X32, "key", "ctr", ""),
            "cn_threefry4x32_light(key, ctr)");
  CHECK_STR(spell_op(CN_OP_UNIFORM1, CN_PREC_HALF, "w[i]", "", ""),
            "cn_u4x32_to_half_uniform(w[i])");
  CHECK_STR(spell_op(CN_OP_ARG2, CN_PREC_UINT4X32, "p", "q", ""), "q");
  CHECK_STR(spell_op(CN_OP_POW, CN_PREC_SINGLE, "(float)(x)", "p->e", ""),
            "cn_pow((float)(x), p->e)");
  CHECK_STR(spell_op(CN_OP_SUB, CN_PREC_SINGLE, "(float)x", "f(a)[1]", ""),
            "(((float)x) - f(a)[1])");

  CHECK_STR(spell_conv(CN_PREC_SINGLE, CN_PREC_SINGLE, "x"), "x");
  CHECK_STR(spell_conv(CN_PREC_SINGLE, CN_PREC_HALF, "x"), "x");
  CHECK_STR(spell_conv(CN_PREC_SINGLE, CN_PREC_DOUBLE, "x"), "(double)x");
  CHECK_STR(spell_conv(CN_PREC_DOUBLE, CN_PREC_BFLOAT16, "a + b"), "(float)(a + b)");
  CHECK_STR(spell_conv(CN_PREC_BYTE, CN_PREC_SINGLE, "x"), "(float)x");
  CHECK_STR(spell_conv(CN_PREC_DOUBLE, CN_PREC_INT32, "x"), "cn_ftoi(x, -2147483648, 2147483647)");
  CHECK_STR(spell_conv(CN_PREC_SINGLE, CN_PREC_BYTE, "x"), "cn_ftoi(x, 0, 255)");
  CHECK_STR(spell_conv(CN_PREC_SINGLE, CN_PREC_INT64, "x"), "cn_ftoi(x, INT64_MIN, INT64_MAX)");
  CHECK_STR(spell_conv(CN_PREC_HALF, CN_PREC_UINT64, "x"), "cn_ftou(x, UINT64_MAX)");
  CHECK_STR(spell_conv(CN_PREC_INT64, CN_PREC_BYTE, "x"), "cn_load_byte(cn_store_byte(x))");
  CHECK_STR(spell_conv(CN_PREC_UINT64, CN_PREC_INT32, "x"),
            "cn_load_int32(cn_store_int32(cn_u64_as_i64(x)))");
  CHECK_STR(spell_conv(CN_PREC_INT32, CN_PREC_INT64, "x"), "x");
  CHECK_STR(spell_conv(CN_PREC_INT32, CN_PREC_UINT64, "x - 1"), "(uint64_t)(x - 1)");
  CHECK_STR(spell_conv(CN_PREC_UINT64, CN_PREC_INT64, "x"), "cn_u64_as_i64(x)");
  CHECK_STR(spell_conv(CN_PREC_INT32, CN_PREC_UINT4X32, "x"), "cn_int32_to_u4x32(x)");
  CHECK_STR(spell_conv(CN_PREC_HALF, CN_PREC_UINT4X32, "x"), "cn_half_to_u4x32(x)");
  CHECK_STR(spell_conv(CN_PREC_UINT4X32, CN_PREC_BYTE, "w"), "cn_u4x32_to_byte_uniform(w)");
  CHECK_STR(spell_conv(CN_PREC_UINT4X32, CN_PREC_SINGLE, "w"), "(float)w.v[0]");
  CHECK_STR(spell_conv(CN_PREC_UINT4X32, CN_PREC_DOUBLE, "f(w)"), "(double)f(w).v[0]");

  CHECK_STR(spell_const(CN_PREC_SINGLE, fv(0.5)), "0.5f");
  CHECK_STR(spell_const(CN_PREC_HALF, fv(2)), "2.0f");
  CHECK_STR(spell_const(CN_PREC_SINGLE, fv(-0.0)), "-0.0f");
  CHECK_STR(spell_const(CN_PREC_SINGLE, fv(0.1)), "0.100000001f");
  CHECK_STR(spell_const(CN_PREC_SINGLE, fv(1e-5)), "9.99999975e-06f");
  CHECK_STR(spell_const(CN_PREC_SINGLE, fv(1e300)), "INFINITY");
  CHECK_STR(spell_const(CN_PREC_FP8, fv(-INFINITY)), "-INFINITY");
  CHECK_STR(spell_const(CN_PREC_SINGLE, fv(NAN)), "NAN");
  CHECK_STR(spell_const(CN_PREC_DOUBLE, fv(0.1)), "0.10000000000000001");
  CHECK_STR(spell_const(CN_PREC_DOUBLE, fv(3)), "3.0");
  CHECK_STR(spell_const(CN_PREC_DOUBLE, fv(1e300)), "1.0000000000000001e+300");
  CHECK_STR(spell_const(CN_PREC_DOUBLE, fv(-INFINITY)), "-(double)INFINITY");
  CHECK_STR(spell_const(CN_PREC_DOUBLE, fv(NAN)), "(double)NAN");
  CHECK_STR(spell_const(CN_PREC_INT32, iv(7)), "INT64_C(7)");
  CHECK_STR(spell_const(CN_PREC_BYTE, iv(-5)), "-INT64_C(5)");
  CHECK_STR(spell_const(CN_PREC_INT64, iv(INT64_MIN)), "INT64_MIN");
  CHECK_STR(spell_const(CN_PREC_UINT64, uv(UINT64_MAX)), "UINT64_C(18446744073709551615)");
  CHECK_STR(spell_const(CN_PREC_UINT4X32, wv(1, 0xabcdef, 0, 0xffffffffu)),
            "((cn_u4x32){{0x1u, 0xabcdefu, 0x0u, 0xffffffffu}})");

  cn_sbuf sb = {0};
  cn_load_c(&sb, CN_PREC_HALF, "h[i]");
  cn_sbuf_puts(&sb, "; ");
  cn_load_c(&sb, CN_PREC_SINGLE, "s[i]");
  cn_sbuf_puts(&sb, "; ");
  cn_load_c(&sb, CN_PREC_INT32, "n[i]");
  cn_sbuf_puts(&sb, "; ");
  cn_store_c(&sb, CN_PREC_SINGLE, "s[i]", "v");
  cn_sbuf_puts(&sb, "; ");
  cn_store_c(&sb, CN_PREC_FP8, "f[i]", "v");
  cn_sbuf_puts(&sb, "; ");
  cn_store_c(&sb, CN_PREC_UINT4X32, "w[i]", "v");
  CHECK_STR(sb.data, "cn_load_half(h[i]); s[i]; cn_load_int32(n[i]); s[i] = v; "
                     "f[i] = cn_store_fp8(v); w[i] = v");
  cn_sbuf_free(&sb);

  /* Literals stay C under a locale whose decimal point is a comma. */
  if (setlocale(LC_NUMERIC, "de_DE.UTF-8") || setlocale(LC_NUMERIC, "fr_FR.UTF-8")) {
    CHECK_STR(spell_const(CN_PREC_SINGLE, fv(0.5)), "0.5f");
    CHECK_STR(spell_const(CN_PREC_DOUBLE, fv(-1.25e-7)), "-1.2500000000000001e-07");
    setlocale(LC_NUMERIC, "C");
  } else {
    printf("note: no comma-decimal locale installed: literal locale check skipped\n");
  }
}

/* ---- Generated C: the prelude compiles, and spelled code agrees with the interpreter ---- */

#define MAX_SAMPLES 14
/* Sample cells of each precision: edge values converted by the precision's own rule. */
static int samples_of(cn_prec prec, unsigned char cells[MAX_SAMPLES][16]) {
  static const double float_samples[MAX_SAMPLES] = {
      0, -0.0, 1, -1, 0.5, -2.5, 3, 7.25, 1e-3, 65504, -1e10, NAN, INFINITY, -INFINITY};
  static const double int_samples[MAX_SAMPLES] = {0,   1,   -1,  2,    -3,   5,  100,
                                                  255, 256, 1e9, -1e9, 3e18, -7, 40000};
  static const uint32_t words[MAX_SAMPLES][4] = {
      {0, 0, 0, 0},
      {42, 0, 0, 0},
      {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
      {0x80000102u, 0xfedcba98u, 0x01234567u, 0x89abcdefu},
      {0x3f800000u, 0, 0, 0},
      {0x7f7f7f7fu, 0x7d7e7c7bu, 0x00ff00ffu, 0x12345678u},
      {0, 0x9E3779B9u, 0x6C078965u, 0},
      {0xdeadbeefu, 1, 2, 3}};
  cn_prec_kind kind = cn_prec_kind_of(prec);
  if (kind == CN_PKIND_BITS) {
    for (int k = 0; k < 8; k++) memcpy(cells[k], words[k], 16);
    return 8;
  }
  const double *values = kind == CN_PKIND_FLOAT ? float_samples : int_samples;
  for (int k = 0; k < MAX_SAMPLES; k++) cn_prec_cell_from_double(prec, values[k], cells[k]);
  return MAX_SAMPLES;
}

static void put_cells(cn_sbuf *sb, const char *name, cn_prec prec, int n,
                      unsigned char cells[MAX_SAMPLES][16]) {
  cn_sbuf_printf(sb, "static const unsigned char %s[%d][16] = {\n", name, n);
  for (int k = 0; k < n; k++) {
    cn_sbuf_puts(sb, "  {");
    for (size_t b = 0; b < cn_prec_bytes(prec); b++)
      cn_sbuf_printf(sb, "%s%u", b ? "," : "", cells[k][b]);
    cn_sbuf_puts(sb, "},\n");
  }
  cn_sbuf_puts(sb, "};\n");
}

/* How many operand tuples an op of the given arity is tried on. */
static int tuple_count(int arity, int n) {
  return arity == 1 ? n : arity == 2 ? n * n : 6 * 6 * 6;
}
static int tuple_index(int arity, int n, int t, int a) {
  if (arity == 1) return t;
  if (arity == 2) return a == 0 ? t / n : t % n;
  return a == 0 ? t / 36 : a == 1 ? t / 6 % 6 : t % 6;
}
/* The same index as a C expression over the loop variable t. */
static void put_tuple_index(cn_sbuf *sb, int arity, int n, int a) {
  if (arity == 1)
    cn_sbuf_puts(sb, "t");
  else if (arity == 2)
    cn_sbuf_printf(sb, a == 0 ? "t / %d" : "t %% %d", n);
  else
    cn_sbuf_puts(sb, a == 0 ? "t / 36" : a == 1 ? "t / 6 % 6" : "t % 6");
}

/* Emits the program: for every conversion pair and every (op, precision) it prints the result
 * cells, one line of hex per cell; `expected` gets the same lines from the interpreter path. */
static void emit_program(cn_sbuf *src, cn_sbuf *expected) {
  unsigned char cells[CN_PREC_COUNT][MAX_SAMPLES][16];
  int counts[CN_PREC_COUNT];
  cn_sbuf_puts(src, "#include <stdint.h>\n#include <tgmath.h>\n");
  cn_sbuf_puts(src, cn_builtins_source);
  cn_sbuf_puts(src, "\n#include <stdio.h>\n"
                    "static void dump(const void *p, size_t n) {\n"
                    "  const unsigned char *b = p;\n"
                    "  for (size_t i = 0; i < n; i++) printf(\"%02x\", b[i]);\n"
                    "  printf(\"\\n\");\n}\n");
  for (int p = 0; p < CN_PREC_COUNT; p++) {
    counts[p] = samples_of((cn_prec)p, cells[p]);
    char name[32];
    snprintf(name, sizeof name, "samples_%s", cn_prec_name((cn_prec)p));
    put_cells(src, name, (cn_prec)p, counts[p], cells[p]);
  }
  cn_sbuf_puts(src, "int main(void) {\n");
  /* Conversions: out = store(to, conv(from, to, load(from, in))). */
  for (int from = 0; from < CN_PREC_COUNT; from++)
    for (int to = 0; to < CN_PREC_COUNT; to++) {
      const cn_prec_info *fi = &cn_prec_table[from], *ti = &cn_prec_table[to];
      cn_sbuf body = {0}, loaded = {0}, converted = {0};
      cn_load_c(&loaded, (cn_prec)from, "in");
      cn_conv_c(&converted, (cn_prec)from, (cn_prec)to, loaded.data);
      cn_store_c(&body, (cn_prec)to, "out", converted.data);
      cn_sbuf_printf(src,
                     "  for (int k = 0; k < %d; k++) {\n    %s in;\n    %s out;\n"
                     "    memcpy(&in, samples_%s[k], sizeof in);\n    %s;\n"
                     "    dump(&out, sizeof out);\n  }\n",
                     counts[from], fi->store_c, ti->store_c, fi->name, body.data);
      cn_sbuf_free(&body), cn_sbuf_free(&loaded), cn_sbuf_free(&converted);
      for (int k = 0; k < counts[from]; k++) {
        unsigned char out[16];
        cn_value v = cn_value_convert((cn_prec)from, (cn_prec)to,
                                      cn_value_load((cn_prec)from, cells[from][k]));
        cn_value_store((cn_prec)to, v, out);
        for (size_t b = 0; b < ti->bytes; b++) cn_sbuf_printf(expected, "%02x", out[b]);
        cn_sbuf_putc(expected, '\n');
      }
    }
  /* Ops: out = store(prec, op(load(prec, operands))); the vectorized op stores its lanes. */
  for (int op = 0; op < CN_OP_COUNT; op++)
    for (int p = 0; p < CN_PREC_COUNT; p++) {
      if (!cn_op_supports((cn_op)op, (cn_prec)p)) continue;
      const cn_op_info *info = &cn_op_table[op];
      const cn_prec_info *pi = &cn_prec_table[p];
      cn_prec operand = (info->flags & CN_OPF_TO_PREC) ? CN_PREC_UINT4X32 : (cn_prec)p;
      int n = counts[operand];
      int tuples = tuple_count(info->arity, n);
      const char *names[3] = {"x0", "x1", "x2"};
      cn_sbuf_printf(src, "  for (int t = 0; t < %d; t++) {\n", tuples);
      cn_sbuf loads[3] = {{0}};
      const char *texts[3] = {"", "", ""};
      for (int a = 0; a < info->arity; a++) {
        cn_sbuf_printf(src, "    %s %s;\n    memcpy(&%s, samples_%s[",
                       cn_prec_table[operand].store_c, names[a], names[a],
                       cn_prec_table[operand].name);
        put_tuple_index(src, info->arity, n, a);
        cn_sbuf_printf(src, "], sizeof %s);\n", names[a]);
        cn_load_c(&loads[a], operand, names[a]);
        texts[a] = loads[a].data;
      }
      if (info->flags & CN_OPF_VEC) {
        int length = cn_vec_length((cn_prec)p);
        cn_sbuf store = {0};
        cn_store_c(&store, (cn_prec)p, "out", "lanes[j]");
        cn_sbuf_printf(src,
                       "    %s lanes[%d];\n    cn_u4x32_to_%s_uniform_vec(%s, lanes);\n"
                       "    for (int j = 0; j < %d; j++) {\n      %s out;\n      %s;\n"
                       "      dump(&out, sizeof out);\n    }\n",
                       pi->compute_c, length, pi->name, texts[0], length, pi->store_c, store.data);
        cn_sbuf_free(&store);
      } else {
        cn_sbuf applied = {0}, store = {0};
        cn_op_c(&applied, (cn_op)op, (cn_prec)p, texts);
        cn_store_c(&store, (cn_prec)p, "out", applied.data);
        cn_sbuf_printf(src, "    %s out;\n    %s;\n    dump(&out, sizeof out);\n", pi->store_c,
                       store.data);
        cn_sbuf_free(&applied), cn_sbuf_free(&store);
      }
      cn_sbuf_puts(src, "  }\n");
      for (int a = 0; a < info->arity; a++) cn_sbuf_free(&loads[a]);
      for (int t = 0; t < tuples; t++) {
        cn_value args[3];
        for (int a = 0; a < info->arity; a++)
          args[a] = cn_value_load(operand, cells[operand][tuple_index(info->arity, n, t, a)]);
        cn_value results[16];
        int count = 1;
        if (info->flags & CN_OPF_VEC) {
          count = cn_eval_vec_op((cn_op)op, (cn_prec)p, args[0].w, results);
        } else {
          if (info->flags & CN_OPF_COND)
            args[0] = cn_value_of_double((cn_prec)p, cn_value_truth((cn_prec)p, args[0]) ? 1 : 0);
          results[0] = cn_eval_op((cn_op)op, (cn_prec)p, args);
        }
        for (int j = 0; j < count; j++) {
          unsigned char out[16];
          cn_value_store((cn_prec)p, results[j], out);
          for (size_t b = 0; b < pi->bytes; b++) cn_sbuf_printf(expected, "%02x", out[b]);
          cn_sbuf_putc(expected, '\n');
        }
      }
    }
  cn_sbuf_puts(src, "  return 0;\n}\n");
}

/* Reads a hex line back into a cell. */
static void parse_cell(const char *line, size_t bytes, unsigned char *cell) {
  for (size_t b = 0; b < bytes; b++) {
    unsigned v = 0;
    sscanf(line + 2 * b, "%2x", &v);
    cell[b] = (unsigned char)v;
  }
}

/* What each expected line is, in emission order: its cell's precision, and the conversion's
 * source precision or the op, for the comparison and its messages. */
typedef struct {
  cn_prec prec, from;
  int op; /* -1 for a conversion */
} line_info;

static int describe_lines(line_info *lines, int cap) {
  int n = 0;
  unsigned char cells[MAX_SAMPLES][16];
  for (int from = 0; from < CN_PREC_COUNT; from++)
    for (int to = 0; to < CN_PREC_COUNT; to++)
      for (int k = samples_of((cn_prec)from, cells); k > 0; k--)
        if (n < cap) lines[n++] = (line_info){(cn_prec)to, (cn_prec)from, -1};
  for (int op = 0; op < CN_OP_COUNT; op++)
    for (int p = 0; p < CN_PREC_COUNT; p++) {
      if (!cn_op_supports((cn_op)op, (cn_prec)p)) continue;
      const cn_op_info *info = &cn_op_table[op];
      cn_prec operand = (info->flags & CN_OPF_TO_PREC) ? CN_PREC_UINT4X32 : (cn_prec)p;
      int per = (info->flags & CN_OPF_VEC) ? cn_vec_length((cn_prec)p) : 1;
      int count = tuple_count(info->arity, samples_of(operand, cells)) * per;
      for (int k = 0; k < count; k++)
        if (n < cap) lines[n++] = (line_info){(cn_prec)p, operand, op};
    }
  return n;
}

/* Float precisions computed in float by C and in double by the interpreter may differ by the
 * rounding of an intermediate value: allowed within a few units of the stored format. */
static bool cells_agree(cn_prec prec, const unsigned char *c_cell, const unsigned char *i_cell) {
  size_t bytes = cn_prec_bytes(prec);
  if (memcmp(c_cell, i_cell, bytes) == 0) return true;
  if (cn_prec_kind_of(prec) != CN_PKIND_FLOAT) return false;
  double c = cn_prec_cell_to_double(prec, c_cell), i = cn_prec_cell_to_double(prec, i_cell);
  if (isnan(c) && isnan(i)) return true;
  if (c == 0 && i == 0 && under_valgrind()) return true;
  if (prec == CN_PREC_DOUBLE) return false;
  double relative = prec == CN_PREC_SINGLE ? 1e-6 : prec == CN_PREC_FP8 ? 0.26 : 1.6e-2;
  return fabs(c - i) <= relative * fabs(i) + 1e-30;
}

static bool have_compiler(const char *cc) {
  char command[512];
  snprintf(command, sizeof command, "%s --version > /dev/null 2>&1", cc);
  return system(command) == 0;
}

static void test_generated_c(void) {
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  CHECK_INT(cn_builtins_source_len, strlen(cn_builtins_source));
  CHECK_HAS(cn_builtins_source, "CN_U4X32_DEFINED");
  if (!have_compiler(cc)) {
    printf("note: no C compiler '%s' found: generated-C checks skipped\n", cc);
    return;
  }
  char dir[] = "/tmp/cannl-test-numeric-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char prelude[128], program[128], binary[128], output[128], command[1024];
  snprintf(prelude, sizeof prelude, "%s/prelude.c", dir);
  snprintf(program, sizeof program, "%s/agree.c", dir);
  snprintf(binary, sizeof binary, "%s/agree", dir);
  snprintf(output, sizeof output, "%s/agree.txt", dir);

  /* The prelude alone, as generated C starts. */
  FILE *f = fopen(prelude, "w");
  CHECK(f != NULL);
  if (f) {
    fprintf(f, "#include <stdint.h>\n#include <tgmath.h>\n%s", cn_builtins_source);
    fclose(f);
  }
  snprintf(command, sizeof command, "%s -std=c11 -Wall -Wextra -Werror -c %s -o %s/prelude.o", cc,
           prelude, dir);
  CHECK_MSG(system(command) == 0, "%s", command);

  /* Spelled code against the interpreter. The shared op templates compare uint64_t operands with
   * 0 and test an integer for 0 < a < 1, which is their intended meaning: -Wno-type-limits and
   * clang's -Wno-tautological-overlap-compare (gcc ignores an unknown -Wno- option). -O0 keeps
   * libm calls at run time, like the library's. */
  cn_sbuf src = {0}, expected = {0};
  emit_program(&src, &expected);
  CHECK(!src.failed && !expected.failed);
  f = fopen(program, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(src.data, f);
    fclose(f);
  }
  snprintf(
      command, sizeof command,
      "%s -std=c11 -O0 -Wall -Wextra -Werror -Wno-type-limits -Wno-tautological-overlap-compare "
      "%s -o %s -lm && %s > %s",
      cc, program, binary, binary, output);
  int status = system(command);
  CHECK_MSG(status == 0, "%s", command);
  FILE *in = status == 0 ? fopen(output, "r") : NULL;
  if (in) {
    static line_info lines[200000];
    int n_lines = describe_lines(lines, 200000), line_no = 0, mismatches = 0;
    const char *want = expected.data;
    char got[64];
    while (fgets(got, sizeof got, in) && *want) {
      const char *end = strchr(want, '\n');
      line_info info = line_no < n_lines ? lines[line_no] : (line_info){CN_PREC_UINT4X32, 0, -1};
      int digits = (int)(2 * cn_prec_bytes(info.prec));
      unsigned char c_cell[16], i_cell[16];
      parse_cell(got, cn_prec_bytes(info.prec), c_cell);
      parse_cell(want, cn_prec_bytes(info.prec), i_cell);
      if (!cells_agree(info.prec, c_cell, i_cell) && mismatches++ < 10)
        fprintf(stderr, "line %d: %s %s -> %s: C %.*s, interpreter %.*s\n", line_no + 1,
                info.op < 0 ? "conversion" : cn_op_name((cn_op)info.op), cn_prec_name(info.from),
                cn_prec_name(info.prec), digits, got, digits, want);
      want = end + 1;
      line_no++;
    }
    fclose(in);
    CHECK_INT(mismatches, 0);
    CHECK_INT(line_no, n_lines);
    CHECK(*want == '\0');
    CHECK(n_lines > 10000);
  }
  cn_sbuf_free(&src);
  cn_sbuf_free(&expected);
  snprintf(command, sizeof command, "rm -rf %s", dir);
  CHECK(system(command) == 0);
}

int main(void) {
  test_half();
  test_bfloat16();
  test_fp8();
  test_integer_helpers();
  test_pow_max_min();
  test_threefry();
  test_uniform_conversions();
  test_unary_ops();
  test_binary_ops();
  test_ternary_ops();
  test_op_eval_api();
  test_tables();
  test_conversions();
  test_spellings();
  test_generated_c();
  CHECK_DONE();
}
