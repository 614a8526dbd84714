/* The vectorizable exp and tanh of float precisions (builtins.h cn_exp_f32, cn_tanh_f32) and the
 * softmax built on exp.
 *
 * - Accuracy: cn_exp_f32 against exp in double rounded to float, at most 1 ulp (the bound
 *   docs/ARCHITECTURE.md states), over every one of the 2^32 inputs in an optimized build
 *   (__OPTIMIZE__; 25 s of CPU on the loaded 2-core machine) and, in an unoptimized one
 *   (Debug, sanitizers: a few microseconds a call), over every 4099th bit pattern, every 7th
 *   input whose result is subnormal and the neighbourhoods of 0, the overflow and the underflow
 *   thresholds in full. Exact where
 *   the answer is: NaN in gives the quieted NaN (sign and payload kept), -inf gives +0, +inf and
 *   everything above 0x1.62e42ep+6 give +inf, everything below -0x1.9fe368p+6 gives +0 (that
 *   one gives 2^-149), |x| < 2^-25 gives 1.
 * - One definition: the reference evaluation (the interpreter's) of exp on single and half is
 *   cn_exp_f32; the interpreter and generated C give the same bits for exp and for softmax over
 *   rows of random, huge, tiny, subnormal, signed-zero, infinite and NaN values (before the
 *   polynomial the interpreter's exp was libm's in double, generated C's libm's expf: they
 *   differed by an ulp on 71 of these 160 000 cells), and so does a max reduction (run
 *   without order by generated C, cgen_reduce.c) on rows with NaNs of different payloads and
 *   signed zeros, whose values are checked against the first NaN in row order.
 * - tanh: at most 1 ulp against tanh in double rounded to float (the bound ARCHITECTURE
 *   states) over every input in an optimized build (the inputs with a known answer in a
 *   vectorized loop, the 2 x 127 million others against libm), in an unoptimized one over every
 *   4099th bit pattern and the neighbourhoods of the thresholds; exact where the answer is: a
 *   magnitude below 0x1.713746p-12 gives x (±0 and subnormals too), from 0x1.205968p+3 on and
 *   at ±inf ±1, NaN the quieted NaN; those thresholds are checked against libm's tanh on both
 *   sides. The reference evaluation is cn_tanh_f32, the interpreter and generated C agree bit for
 *   bit on tanh over the same rows as exp (before cn_tanh_f32 they differed: libm's tanh in
 *   double rounded, against tanhf).
 * - Threads: softmax over 8 rows of 20 000 (parallel loops) gives the same bits on 1, 2 and 3
 *   threads.
 * - Sums in lanes (option reduce = lanes): the softmax's sums in lanes give the same bits on the
 *   interpreter, on generated C on 2 threads and unscheduled, and other bits than in order. */
#include "check.h"
#include "graph_check.h"
#include "numeric/numeric.h"

#include <stdlib.h>

/* ---- Accuracy over the float range ---- */

/* Float bit patterns in the order of their values (-0 and +0 adjacent), so that the distance of
 * two finite floats is their distance in ulps, subnormals included. */
static int64_t ordinal(float x) {
  uint32_t bits = cn_f32_bits(x);
  return bits >> 31 ? -(int64_t)(bits & 0x7FFFFFFFu) - 1 : (int64_t)bits;
}

#define LAST_FINITE  0x42B17217u /* 0x1.62e42ep+6: exp is FLT_MAX's neighbourhood; the next, inf */
#define LAST_NONZERO 0xC2CFF1B4u /* -0x1.9fe368p+6: exp is 2^-149; the next (more negative), 0 */
#define TINY         0x33000000u /* 2^-25: below it exp(x) rounds to 1, for either sign */

typedef struct {
  int64_t max_ulp, inputs;
  uint32_t worst, wrong;
} sweep_stats;

/* One input: exact where the answer is known, else within 1 ulp of the rounded double exp. */
static void sweep_one(sweep_stats *s, uint32_t bits) {
  float x = cn_f32_of_bits(bits), y = cn_exp_f32(x);
  uint32_t magnitude = bits & 0x7FFFFFFFu, got = cn_f32_bits(y);
  s->inputs++;
  if (magnitude > 0x7F800000u) { /* NaN: x + x, quiet, sign and payload kept */
    if (got != (bits | 0x00400000u) && s->wrong++ < 4)
      fprintf(stderr, "  exp(NaN 0x%08x) = 0x%08x\n", (unsigned)bits, (unsigned)got);
    return;
  }
  uint32_t want_bits;
  bool exact = true;
  if (!(bits >> 31) && bits > LAST_FINITE)
    want_bits = 0x7F800000u; /* +inf, including exp(+inf) */
  else if (bits >> 31 && bits > LAST_NONZERO)
    want_bits = 0; /* +0, including exp(-inf) */
  else if (magnitude < TINY)
    want_bits = 0x3F800000u; /* 1 */
  else
    want_bits = cn_f32_bits((float)exp((double)x)), exact = false;
  int64_t ulps = llabs(ordinal(y) - ordinal(cn_f32_of_bits(want_bits)));
  bool ok = exact ? got == want_bits : ulps <= 1 && (want_bits != 0x7F800000u || got == want_bits);
  if (!ok && s->wrong++ < 4)
    fprintf(stderr, "  exp(%a) = %a, expected %a\n", (double)x, (double)y,
            (double)cn_f32_of_bits(want_bits));
  if (ulps > s->max_ulp) s->max_ulp = ulps, s->worst = bits;
}

static void sweep_range_of(void (*one)(sweep_stats *, uint32_t), sweep_stats *s, uint32_t from,
                           uint32_t to, uint32_t step) {
  for (uint64_t b = from; b <= to; b += step) one(s, (uint32_t)b);
}
static void sweep_range(sweep_stats *s, uint32_t from, uint32_t to, uint32_t step) {
  sweep_range_of(sweep_one, s, from, to, step);
}

#if defined(__OPTIMIZE__)
/* The inputs of [from, to] whose exp does not have the bits `want` (want_nan: the input's bits
 * quieted), in a loop the compiler vectorizes: the ranges with a known answer, which are seven
 * eighths of the inputs, take seconds instead of minutes (gcc at -O2 vectorizes only the
 * cheapest loops, hence O3 here). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
static uint64_t
count_other(uint32_t from, uint32_t to, uint32_t want, bool want_nan) {
  uint64_t other = 0;
  uint32_t nan_mask = want_nan ? 0xFFFFFFFFu : 0;
  for (uint64_t i = 0; i <= (uint64_t)(to - from); i++) {
    uint32_t b = from + (uint32_t)i, expected = ((b | 0x00400000u) & nan_mask) | (want & ~nan_mask);
    other += cn_f32_bits(cn_exp_f32(cn_f32_of_bits(b))) != expected;
  }
  return other;
}
#endif

static void test_exp_accuracy(void) {
  sweep_stats s = {0, 0, 0, 0};
#if defined(__OPTIMIZE__)
  /* every input: the known answers by count_other, the rest against the rounded double exp */
  const struct {
    uint32_t from, to, want;
    bool nan;
  } known[] = {{0, TINY - 1, 0x3F800000u, false},
               {LAST_FINITE + 1, 0x7F800000u, 0x7F800000u, false},
               {0x7F800001u, 0x7FFFFFFFu, 0, true},
               {0x80000000u, 0x80000000u + TINY - 1, 0x3F800000u, false},
               {LAST_NONZERO + 1, 0xFF800000u, 0, false},
               {0xFF800001u, 0xFFFFFFFFu, 0, true}};
  for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
    uint64_t other = count_other(known[k].from, known[k].to, known[k].want, known[k].nan);
    CHECK_MSG(other == 0, "%llu inputs of [0x%08x, 0x%08x] not exact", (unsigned long long)other,
              (unsigned)known[k].from, (unsigned)known[k].to);
    s.inputs += (int64_t)known[k].to - known[k].from + 1;
  }
  sweep_range(&s, TINY, LAST_FINITE, 1);
  sweep_range(&s, 0x80000000u + TINY, LAST_NONZERO, 1);
  CHECK_MSG(s.inputs == INT64_C(1) << 32, "%lld inputs swept", (long long)s.inputs);
#else
  sweep_range(&s, 0, 0xFFFFFFFFu - 4098, 4099);
  sweep_range(&s, 0xC2AEAC50u, LAST_NONZERO - 4096, 7);         /* subnormal results */
  sweep_range(&s, LAST_NONZERO - 4096, LAST_NONZERO + 4096, 1); /* the last ones, then 0 */
  sweep_range(&s, LAST_FINITE - 65536, LAST_FINITE + 4096, 1);
  sweep_range(&s, 0, 4096, 1); /* +0 and the smallest subnormals */
  sweep_range(&s, TINY - 4096, TINY + 4096, 1);
  sweep_range(&s, 0x80000000u, 0x80000000u + 4096, 1);
  sweep_range(&s, 0x80000000u + TINY - 4096, 0x80000000u + TINY + 4096, 1);
  sweep_range(&s, 0x7F800000u - 16, 0x7F800000u + 4096, 1); /* up to +inf, NaNs */
  sweep_range(&s, 0xFF800000u - 16, 0xFF800000u + 4096, 1); /* up to -inf, NaNs */
#endif
  printf("exp: %lld inputs, max %lld ulp (at %a)\n", (long long)s.inputs, (long long)s.max_ulp,
         (double)cn_f32_of_bits(s.worst));
  CHECK_MSG(s.wrong == 0, "%u inputs wrong", (unsigned)s.wrong);
  CHECK_MSG(s.max_ulp <= 1, "max error %lld ulp", (long long)s.max_ulp);
  /* the thresholds, spelled out */
  CHECK(isfinite(cn_exp_f32(cn_f32_of_bits(LAST_FINITE))));
  CHECK(isinf(cn_exp_f32(cn_f32_of_bits(LAST_FINITE + 1))));
  CHECK(cn_exp_f32(cn_f32_of_bits(LAST_NONZERO)) == 0x1p-149f);
  CHECK(cn_f32_bits(cn_exp_f32(cn_f32_of_bits(LAST_NONZERO + 1))) == 0);
  CHECK(cn_exp_f32(-INFINITY) == 0 && !signbit(cn_exp_f32(-INFINITY)));
  CHECK(cn_exp_f32(INFINITY) == INFINITY);
  CHECK(cn_exp_f32(0.0f) == 1 && cn_exp_f32(-0.0f) == 1 && cn_exp_f32(0x1p-149f) == 1);
  CHECK(cn_exp_f32(1.0f) == 0x1.5bf0a8p+1f); /* e rounded */
}

/* ---- tanh ---- */

#define TANH_SELF 0x39B89BA3u /* 0x1.713746p-12: the first magnitude whose tanh is not itself */
#define TANH_ONE  0x41102CB4u /* 0x1.205968p+3: the first whose tanh rounds to 1 */

/* One input against tanh in double rounded (inf: +-1; NaN: quieted), exact in the known ranges. */
static void tanh_sweep_one(sweep_stats *s, uint32_t bits) {
  float x = cn_f32_of_bits(bits), y = cn_tanh_f32(x);
  uint32_t magnitude = bits & 0x7FFFFFFFu, got = cn_f32_bits(y);
  s->inputs++;
  if (magnitude > 0x7F800000u) {
    if (got != (bits | 0x00400000u) && s->wrong++ < 4)
      fprintf(stderr, "  tanh(NaN 0x%08x) = 0x%08x\n", (unsigned)bits, (unsigned)got);
    return;
  }
  float want = (float)tanh((double)x);
  int64_t ulps = llabs(ordinal(y) - ordinal(want));
  bool exact = magnitude < TANH_SELF || magnitude >= TANH_ONE;
  bool ok = exact ? got == cn_f32_bits(want) : ulps <= 1;
  if (!ok && s->wrong++ < 4)
    fprintf(stderr, "  tanh(%a) = %a, expected %a\n", (double)x, (double)y, (double)want);
  if (ulps > s->max_ulp) s->max_ulp = ulps, s->worst = bits;
}

#if defined(__OPTIMIZE__)
/* The inputs of [from, to], all with a known answer, whose tanh is not it (vectorized: see
 * count_other). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
static uint64_t
count_tanh_other(uint32_t from, uint32_t to) {
  uint64_t other = 0;
  for (uint64_t i = 0; i <= (uint64_t)(to - from); i++) {
    uint32_t b = from + (uint32_t)i, magnitude = b & 0x7FFFFFFFu;
    uint32_t expected = magnitude > 0x7F800000u ? b | 0x00400000u
                        : magnitude < TANH_SELF ? b
                                                : (b & 0x80000000u) | 0x3F800000u;
    other += cn_f32_bits(cn_tanh_f32(cn_f32_of_bits(b))) != expected;
  }
  return other;
}
#endif

static void test_tanh_accuracy(void) {
  sweep_stats s = {0, 0, 0, 0};
#if defined(__OPTIMIZE__)
  const uint32_t known[][2] = {{0, TANH_SELF - 1},
                               {TANH_ONE, 0x7FFFFFFFu},
                               {0x80000000u, 0x80000000u + TANH_SELF - 1},
                               {0x80000000u + TANH_ONE, 0xFFFFFFFFu}};
  for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) {
    uint64_t other = count_tanh_other(known[k][0], known[k][1]);
    CHECK_MSG(other == 0, "%llu inputs of [0x%08x, 0x%08x] not exact", (unsigned long long)other,
              (unsigned)known[k][0], (unsigned)known[k][1]);
    s.inputs += (int64_t)known[k][1] - known[k][0] + 1;
  }
  sweep_range_of(tanh_sweep_one, &s, TANH_SELF, TANH_ONE - 1, 1);
  sweep_range_of(tanh_sweep_one, &s, 0x80000000u + TANH_SELF, 0x80000000u + TANH_ONE - 1, 1);
  CHECK_MSG(s.inputs == INT64_C(1) << 32, "%lld inputs swept", (long long)s.inputs);
#else
  sweep_range_of(tanh_sweep_one, &s, 0, 0xFFFFFFFFu - 4098, 4099);
  sweep_range_of(tanh_sweep_one, &s, 0x3F0C9F54u - 4096, 0x3F0C9F54u + 4096, 1); /* 0.5 */
#endif
  /* both sides of the thresholds, of both signs, against libm */
  for (int negative = 0; negative <= 1; negative++) {
    uint32_t sign = negative ? 0x80000000u : 0;
    sweep_range_of(tanh_sweep_one, &s, sign, sign + 4096, 1); /* ±0, subnormals */
    sweep_range_of(tanh_sweep_one, &s, sign + TANH_SELF - 4096, sign + TANH_SELF + 4096, 1);
    sweep_range_of(tanh_sweep_one, &s, sign + TANH_ONE - 4096, sign + TANH_ONE + 4096, 1);
    sweep_range_of(tanh_sweep_one, &s, sign + 0x7F800000u - 16, sign + 0x7F800000u + 4096, 1);
  }
  printf("tanh: %lld inputs, max %lld ulp (at %a)\n", (long long)s.inputs, (long long)s.max_ulp,
         (double)cn_f32_of_bits(s.worst));
  CHECK_MSG(s.wrong == 0, "%u inputs wrong", (unsigned)s.wrong);
  CHECK_MSG(s.max_ulp <= 1, "max error %lld ulp", (long long)s.max_ulp);
  /* special values, spelled out */
  CHECK(cn_f32_bits(cn_tanh_f32(0.0f)) == 0 && cn_f32_bits(cn_tanh_f32(-0.0f)) == 0x80000000u);
  CHECK(cn_tanh_f32(0x1p-149f) == 0x1p-149f && cn_tanh_f32(-0x1.8p-130f) == -0x1.8p-130f);
  CHECK(cn_tanh_f32(INFINITY) == 1 && cn_tanh_f32(-INFINITY) == -1);
  CHECK(cn_tanh_f32(cn_f32_of_bits(TANH_ONE)) == 1 && cn_tanh_f32(-100.0f) == -1);
  CHECK(cn_tanh_f32(cn_f32_of_bits(TANH_ONE - 1)) == 0x1.fffffep-1f);
  CHECK(cn_f32_bits(cn_tanh_f32(cn_f32_of_bits(0xFF812345u))) == 0xFFC12345u); /* NaN quieted */
  CHECK(cn_f32_bits(cn_tanh_f32(cn_f32_of_bits(0x7FC00042u))) == 0x7FC00042u);
  CHECK(cn_tanh_f32(1.0f) == (float)tanh(1.0) && cn_tanh_f32(-0.25f) == (float)tanh(-0.25));
}

/* The reference evaluation is the same function on every precision computed in float. */
static void test_reference_eval(void) {
  const float xs[] = {0.5f, -3.25f, 0x1.002ad2p-1f, -0x1.0115dp-1f, 88.0f, -100.0f, NAN};
  for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
    cn_value a = {.f = xs[k]};
    cn_value single = cn_eval_op(CN_OP_EXP, CN_PREC_SINGLE, &a);
    CHECK_MSG(cn_f32_bits((float)single.f) == cn_f32_bits(cn_exp_f32(xs[k])), "single exp(%a)",
              (double)xs[k]);
    cn_value half = cn_eval_op(CN_OP_EXP, CN_PREC_HALF, &a);
    CHECK_MSG(cn_f32_bits((float)half.f) == cn_f32_bits(cn_exp_f32(xs[k])), "half exp(%a)",
              (double)xs[k]);
    cn_value dbl = cn_eval_op(CN_OP_EXP, CN_PREC_DOUBLE, &a);
    CHECK(isnan(xs[k]) ? isnan(dbl.f) : dbl.f == exp((double)xs[k])); /* double: libm */
    single = cn_eval_op(CN_OP_TANH, CN_PREC_SINGLE, &a);
    CHECK_MSG(cn_f32_bits((float)single.f) == cn_f32_bits(cn_tanh_f32(xs[k])), "single tanh(%a)",
              (double)xs[k]);
    cn_value bf = cn_eval_op(CN_OP_TANH, CN_PREC_BFLOAT16, &a);
    CHECK_MSG(cn_f32_bits((float)bf.f) == cn_f32_bits(cn_tanh_f32(xs[k])), "bfloat16 tanh(%a)",
              (double)xs[k]);
    dbl = cn_eval_op(CN_OP_TANH, CN_PREC_DOUBLE, &a);
    CHECK(isnan(xs[k]) ? isnan(dbl.f) : dbl.f == tanh((double)xs[k])); /* double: libm */
  }
}

/* ---- Interpreter against generated C, threads ---- */

#define ROWS 8
#define COLS 20000

static double uniform(unsigned *state, double lo, double hi) {
  *state = *state * 1103515245u + 12345u;
  return lo + (hi - lo) * (double)(*state >> 8) / 16777216.0;
}

/* A NaN with a payload of its own (kept by the conversion to single: the top bits). */
static double nan_with(uint32_t payload, bool negative) {
  uint64_t bits = UINT64_C(0x7FF8000000000000) | (uint64_t)payload << 29;
  if (negative) bits |= UINT64_C(1) << 63;
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

/* Rows: [-10, 10]; +-1e30; signed zeros and negative subnormals; with +inf cells; with -inf
 * cells; with two NaNs of different payloads; all -inf; [-100, 100] (subnormal exps). */
static void fill_rows(double *x) {
  unsigned state = 12345;
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) {
      double *v = &x[r * COLS + c];
      switch (r) {
      case 0: *v = uniform(&state, -10, 10); break;
      case 1: *v = uniform(&state, -1e30, 1e30); break;
      case 2: *v = c % 3 == 0 ? 0.0 : c % 3 == 1 ? -0.0 : -uniform(&state, 0, 0x1p-127); break;
      case 3: *v = c % 997 == 5 ? INFINITY : uniform(&state, -5, 5); break;
      case 4: *v = c % 3 == 0 ? -INFINITY : uniform(&state, -50, 50); break;
      case 5:
        *v = c == 7000  ? nan_with(0x1234, false)
             : c == 300 ? nan_with(0x42, true)
                        : uniform(&state, -1, 1);
        break;
      case 6: *v = -INFINITY; break;
      default: *v = uniform(&state, -100, 100); break;
      }
    }
}

typedef enum { EXP_OF_X, TANH_OF_X, SOFTMAX_OF_X, MAX_OF_X } what;

/* The options "reduce" and "schedule" of run_rows (NULL: the defaults). */
static const char *reduce_option, *schedule_option;

/* Runs `w` of the rows on backend b with `threads` threads; the result's cells as doubles. */
static bool run_rows(what w, cn_backend_kind b, int threads, const double *x, double *out,
                     int64_t n) {
  cn_graph *g = new_graph(CN_PREC_SINGLE);
  char count[16];
  snprintf(count, sizeof count, "%d", threads);
  CHECK_INT(cn_ctx_set_option(cn_graph_ctx(g), "threads", count), CN_OK);
  CHECK_INT(cn_ctx_set_option(cn_graph_ctx(g), "reduce", reduce_option), CN_OK);
  CHECK_INT(cn_ctx_set_option(cn_graph_ctx(g), "schedule", schedule_option), CN_OK);
  cn_tensor *tx = data(g, "x", (cn_dims){AXES(ROWS), NONE, AXES(COLS)}, x);
  cn_tensor *y = w == EXP_OF_X    ? cn_tensor_apply(g, CN_OP_EXP, 1, &tx)
                 : w == TANH_OF_X ? cn_tensor_apply(g, CN_OP_TANH, 1, &tx)
                 : w == SOFTMAX_OF_X
                     ? cn_tensor_softmax(g, tx)
                     : cn_tensor_einmax1(g, "... | ..i.. -> ..o.. => ... | ..i.. ->", tx);
  bool ok = y && run(g, cn_graph_forward(g, y), b, "rows") && read_node(cn_tensor_value(y), out, n);
  free_graph(g);
  return ok;
}

static void compare_bits(const char *what_text, const double *a, const double *b, int64_t n) {
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof(double)) != 0 && differ++ == 0) first = i;
  CHECK_MSG(differ == 0, "%s: %lld cells differ, the first [%lld]: %a and %a", what_text,
            (long long)differ, (long long)first, first < 0 ? 0 : a[first],
            first < 0 ? 0 : b[first]);
}

static void test_backends_agree(void) {
  int64_t n = (int64_t)ROWS * COLS;
  double *x = malloc(sizeof(double) * (size_t)n), *interp = malloc(sizeof(double) * (size_t)n),
         *c = malloc(sizeof(double) * (size_t)n), *c3 = malloc(sizeof(double) * (size_t)n);
  CHECK(x && interp && c && c3);
  if (!x || !interp || !c || !c3) goto done;
  fill_rows(x);
  /* exp cell by cell */
  if (run_rows(EXP_OF_X, CN_BACKEND_INTERP, 1, x, interp, n) &&
      run_rows(EXP_OF_X, CN_BACKEND_C, 1, x, c, n)) {
    compare_bits("exp, interpreter and C", interp, c, n);
    for (int64_t i = 0; i < COLS; i++) /* row 0 against the polynomial itself */
      CHECK(interp[i] == (double)cn_exp_f32((float)x[i]));
  }
  /* tanh cell by cell */
  if (run_rows(TANH_OF_X, CN_BACKEND_INTERP, 1, x, interp, n) &&
      run_rows(TANH_OF_X, CN_BACKEND_C, 1, x, c, n)) {
    compare_bits("tanh, interpreter and C", interp, c, n);
    for (int64_t i = 0; i < n; i++) /* every row against the function itself */
      CHECK(memcmp(&interp[i], &(double){cn_tanh_f32((float)x[i])}, sizeof(double)) == 0);
  }
  /* the max of each row: the first NaN in row order, +0 over signed zeros */
  if (run_rows(MAX_OF_X, CN_BACKEND_INTERP, 1, x, interp, ROWS) &&
      run_rows(MAX_OF_X, CN_BACKEND_C, 1, x, c, ROWS)) {
    compare_bits("max, interpreter and C", interp, c, ROWS);
    uint64_t bits;
    memcpy(&bits, &c[5], sizeof bits);
    CHECK_MSG(bits == (UINT64_C(0xFFF8000000000000) | (uint64_t)0x42 << 29),
              "max of row 5: %016llx, the NaN of cell 300", (unsigned long long)bits);
    CHECK(c[2] == 0 && !signbit(c[2]));
    CHECK(c[3] == INFINITY && c[6] == -INFINITY);
    CHECK(c[1] <= 1e30 && c[1] > 9e29);
  }
  /* softmax: both backends, then 2 and 3 threads */
  if (run_rows(SOFTMAX_OF_X, CN_BACKEND_INTERP, 1, x, interp, n) &&
      run_rows(SOFTMAX_OF_X, CN_BACKEND_C, 1, x, c, n)) {
    compare_bits("softmax, interpreter and C", interp, c, n);
    double sum = 0;
    for (int64_t i = 0; i < COLS; i++) sum += c[i];
    CHECK_NEAR(sum, 1, 1e-3);
    for (int threads = 2; threads <= 3; threads++)
      if (run_rows(SOFTMAX_OF_X, CN_BACKEND_C, threads, x, c3, n))
        compare_bits(threads == 2 ? "softmax, 1 and 2 threads" : "softmax, 1 and 3 threads", c, c3,
                     n);
  }
  /* softmax with its sums in lanes: the same bits on both backends, 1 and 2 threads and with
   * no scheduling pass (the passes leave a sum in lanes as it is), other bits than in order */
  reduce_option = "lanes";
  if (run_rows(SOFTMAX_OF_X, CN_BACKEND_INTERP, 1, x, interp, n) &&
      run_rows(SOFTMAX_OF_X, CN_BACKEND_C, 2, x, c3, n)) {
    compare_bits("softmax in lanes, interpreter and C", interp, c3, n);
    int64_t differ = 0;
    for (int64_t i = 0; i < COLS; i++) differ += interp[i] != c[i];
    CHECK_MSG(differ > 0, "softmax of row 0: the same bits in lanes as in order");
    double sum = 0;
    for (int64_t i = 0; i < COLS; i++) sum += c3[i];
    CHECK_NEAR(sum, 1, 1e-3);
    schedule_option = "none";
    if (run_rows(SOFTMAX_OF_X, CN_BACKEND_C, 1, x, c3, n))
      compare_bits("softmax in lanes, scheduled and not", interp, c3, n);
  }
  reduce_option = schedule_option = NULL;
done:
  free(x), free(interp), free(c), free(c3);
}

int main(void) {
  test_reference_eval();
  test_backends_agree();
  test_exp_accuracy();
  test_tanh_accuracy();
  CHECK_DONE();
}
