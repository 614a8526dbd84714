/* Autodiff against finite differences, the gradient bookkeeping, and bad input (issue 5 "Tests").
 *
 * The finite-difference check runs in double precision: the loss is the einsum sum of the output
 * times fixed random coefficients (so every output cell matters), each parameter cell is moved
 * by +-h and the central difference gn is compared with the backprop gradient ga; the mean of
 * |(gn - ga) / (gn + ga)| over the cells where the two are not both ~0 must stay <= 1e-4 (a cell
 * where only one of them is ~0 counts 1), and a parameter in an operand the op is constant in
 * must keep a zero gradient. Covered: every op of ops.def that the derivative table (derivs.def)
 * differentiates, found by iterating the op table, so a new op with a derivative is checked
 * automatically, each on small random shapes with inputs in its domain (positive for
 * log/sqrt/recip/pow's base; away from relu, sat01, max/min kinks; where's condition exactly
 * 0/1) and with a scalar operand and a size-1 axis broadcast against the others; einsum with
 * shared and named row variables, reductions, matmul by compose, ternary contractions, outer
 * sum, fixed indices and diagonals on either side, one tensor in both slots, tropical max-plus
 * and einmax1/einmin1 with distinct values, a transpose, a batch slice by a static symbol, and a
 * small MLP end to end. The output's inferred shape is checked on the way.
 *
 * By hand: a tensor used twice accumulates both contributions (also through an intermediate);
 * running the update twice does not double them; numbers, data, fetches and stop_gradient have
 * no gradient node and contribute nothing; a two-layer MLP's forward values match plain C loops.
 * Bad input: shape conflicts name the tensors, rows, axes and sizes; NULL and malformed
 * arguments fail with a message; an undetermined parameter dimension fails every request; the
 * graph stays usable after construction errors. Every case runs on the interpreter and on
 * generated C. */
#include "check.h"

#include "cannl.h"
#include "tensor/tensor.h"

#include <stdarg.h>
#include <stdlib.h>

static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};
static const char *const backend_names[2] = {"interp", "c"};

/* ---- Deterministic random numbers (xorshift64*) ------------------------------------------- */

typedef struct {
  uint64_t s;
} rng;

static double urand(rng *r) { /* [0, 1) */
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return (double)((r->s * 0x2545F4914F6CDD1Dull) >> 11) * 0x1p-53;
}
static double uniform_in(rng *r, double lo, double hi) {
  return lo + (hi - lo) * urand(r);
}
static int irand(rng *r, int lo, int hi) {
  return lo + (int)(urand(r) * (hi - lo + 1));
}
/* lo <= |x| <= hi with a random sign */
static double signed_in(rng *r, double lo, double hi) {
  double x = uniform_in(r, lo, hi);
  return urand(r) < 0.5 ? -x : x;
}

/* ---- Shapes: three rows (batch, input, output) of at most 4 axes --------------------------- */

typedef struct {
  int n[3];
  int64_t d[3][4];
} shp;

static cn_dims dims_of(const shp *s) {
  return (cn_dims){{s->n[0], s->d[0], NULL}, {s->n[1], s->d[1], NULL}, {s->n[2], s->d[2], NULL}};
}
static int64_t numel(const shp *s) {
  int64_t n = 1;
  for (int k = 0; k < 3; k++)
    for (int a = 0; a < s->n[k]; a++) n *= s->d[k][a];
  return n;
}
static shp mkshp(int nb, const int64_t *b, int ni, const int64_t *i, int no, const int64_t *o) {
  shp s = {{nb, ni, no}, {{0}}};
  for (int a = 0; a < nb; a++) s.d[0][a] = b[a];
  for (int a = 0; a < ni; a++) s.d[1][a] = i[a];
  for (int a = 0; a < no; a++) s.d[2][a] = o[a];
  return s;
}
#define D(...) ((const int64_t[]){__VA_ARGS__})
static const shp scalar_shp = {{0, 0, 0}, {{0}}};

/* A random shape of 4..24 cells with at least one axis of size > 1. */
static shp random_shp(rng *r) {
  for (;;) {
    shp s = {{0}, {{0}}};
    for (int k = 0; k < 3; k++) {
      s.n[k] = irand(r, 0, 2);
      for (int a = 0; a < s.n[k]; a++) s.d[k][a] = irand(r, 1, 3);
    }
    int64_t n = numel(&s);
    if (n >= 4 && n <= 24) return s;
  }
}

/* The shape with one of its axes of size > 1 (chosen at random) made 1. */
static shp with_unit_axis(const shp *s, rng *r) {
  shp u = *s;
  int cand[12][2], nc = 0;
  for (int k = 0; k < 3; k++)
    for (int a = 0; a < s->n[k]; a++)
      if (s->d[k][a] > 1) cand[nc][0] = k, cand[nc++][1] = a;
  int c = irand(r, 0, nc - 1);
  u.d[cand[c][0]][cand[c][1]] = 1;
  return u;
}

/* ---- The finite-difference harness --------------------------------------------------------- */

#define MAX_PARAMS 6
typedef struct {
  char name[160];
  cn_backend_kind backend;
  cn_ctx *ctx;
  cn_graph *g;
  rng r;
  int np;
  cn_tensor *p[MAX_PARAMS];
  bool fd[MAX_PARAMS]; /* checked by finite differences; otherwise its gradient must stay 0 */
  bool has_sym;
  cn_symbol sym;
  int64_t sym_value;
} fd_case;

static void fd_begin(fd_case *c, cn_backend_kind backend, uint64_t seed, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fd_begin(fd_case *c, cn_backend_kind backend, uint64_t seed, const char *fmt, ...) {
  memset(c, 0, sizeof *c);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->name, sizeof c->name, fmt, ap);
  va_end(ap);
  size_t len = strlen(c->name);
  snprintf(c->name + len, sizeof c->name - len, " [%s]", backend_names[backend]);
  c->backend = backend;
  c->r.s = 0x9E3779B97F4A7C15ull ^ (seed * 0xD1B54A32D192ED03ull + 1);
  c->ctx = cn_ctx_create();
  c->g = cn_graph_create(c->ctx);
  cn_graph_set_prec(c->g, CN_PREC_DOUBLE);
}

/* A parameter of shape s initialized with explicit values. */
static cn_tensor *fd_param(fd_case *c, const char *label, const shp *s, const double *values,
                           bool fd) {
  cn_dims d = dims_of(s);
  cn_tensor *init = cn_tensor_data(c->g, label, &d, values, (size_t)numel(s));
  cn_tensor *p = init ? cn_tensor_param(c->g, label, &d, init) : NULL;
  CHECK_MSG(p != NULL, "%s: param %s: %s", c->name, label, cn_ctx_error(c->ctx));
  if (p && c->np < MAX_PARAMS) {
    c->p[c->np] = p;
    c->fd[c->np++] = fd;
  }
  return p;
}

/* A parameter with values uniform in [lo, hi). */
static cn_tensor *fd_param_in(fd_case *c, const char *label, const shp *s, double lo, double hi) {
  double v[256];
  for (int64_t i = 0; i < numel(s); i++) v[i] = uniform_in(&c->r, lo, hi);
  return fd_param(c, label, s, v, true);
}

static cn_routine *compile(fd_case *c, const cn_asgn *a, const char *what) {
  CHECK_MSG(a != NULL, "%s: %s code: %s", c->name, what, cn_ctx_error(c->ctx));
  if (!a) return NULL;
  cn_routine *r = cn_routine_compile(c->ctx, a, c->backend, what);
  CHECK_MSG(r != NULL, "%s: compiling %s: %s", c->name, what, cn_ctx_error(c->ctx));
  if (r && c->has_sym) CHECK(cn_routine_bind(r, c->sym, c->sym_value) == CN_OK);
  return r;
}

static bool run(fd_case *c, cn_routine *r) {
  cn_status st = cn_routine_run(r);
  CHECK_MSG(st == CN_OK, "%s: run: %s", c->name, cn_ctx_error(c->ctx));
  return st == CN_OK;
}

static double scalar_value(cn_node *n) {
  double v = NAN;
  cn_node_get_values(n, false, &v, 1);
  return v;
}

#define FD_H       1e-5
#define FD_TINY    1e-7
#define FD_MAX_TOL 1e-4

/* "2,3|4->5" */
static const char *shp_str(const shp *s, char *buf, size_t size) {
  size_t len = 0;
  static const char *const seps[3] = {"|", "->", ""};
  buf[0] = '\0';
  for (int k = 0; k < 3; k++) {
    for (int a = 0; a < s->n[k]; a++)
      len += (size_t)snprintf(buf + len, size - len, "%s%lld", a ? "," : "", (long long)s->d[k][a]);
    len += (size_t)snprintf(buf + len, size - len, "%s", seps[k]);
  }
  return buf;
}

/* Checks out's shape (inferred) against expect, then every parameter's gradient of out against
 * finite differences, and destroys the case. */
static void fd_finish(fd_case *c, cn_tensor *out, shp expect) {
  cn_ctx *ctx = c->ctx;
  cn_routine *setup = NULL, *fwd = NULL;
  CHECK_MSG(out != NULL, "%s: building: %s", c->name, cn_ctx_error(ctx));
  cn_node *out_node = out ? cn_tensor_value(out) : NULL;
  CHECK_MSG(!out || out_node, "%s: materializing: %s", c->name, cn_ctx_error(ctx));
  if (!out_node) goto done;
  CHECK_MSG(cn_tensor_is_diff(out), "%s: the output is not differentiable", c->name);
  char want[64];
  CHECK_MSG(strcmp(cn_tensor_shape(out), shp_str(&expect, want, sizeof want)) == 0,
            "%s: output shape %s, expected %s", c->name, cn_tensor_shape(out), want);
  /* loss = sum over every cell of out * coef (built after out's materialization: the next
   * request materializes it) */
  size_t n_out = (size_t)numel(&expect);
  double coef[256];
  for (size_t i = 0; i < n_out; i++) coef[i] = signed_in(&c->r, 0.5, 1.5);
  cn_dims kd = dims_of(&expect);
  cn_tensor *k = cn_tensor_data(c->g, "coef", &kd, coef, n_out);
  cn_tensor *loss = k ? cn_tensor_einsum(c->g, "...|...->... ; ...|...->... => 0", CN_OP_ADD,
                                         CN_OP_MUL, 2, (cn_tensor *[]){out, k})
                      : NULL;
  CHECK_MSG(loss != NULL, "%s: loss: %s", c->name, cn_ctx_error(ctx));
  if (!loss) goto done;
  cn_asgn *init = cn_graph_init_params(c->g, loss);
  cn_asgn *update = init ? cn_graph_grad_update(c->g, loss) : NULL;
  setup = compile(c, update ? cn_asgn_seq(ctx, 2, (cn_asgn *[]){init, update}) : NULL, "setup");
  fwd = setup ? compile(c, cn_graph_forward(c->g, loss), "forward") : NULL;
  if (!fwd || !run(c, setup)) goto done;
  cn_node *loss_node = cn_tensor_value(loss);
  CHECK_MSG(cn_node_numel(loss_node) == 1, "%s: loss has %lld cells", c->name,
            (long long)cn_node_numel(loss_node));
  double sum_asym = 0, max_asym = 0;
  int n_cells = 0, n_zero_bad = 0;
  for (int i = 0; i < c->np; i++) {
    cn_node *v = cn_tensor_value(c->p[i]), *gr = cn_tensor_grad(c->p[i]);
    size_t n = (size_t)cn_node_numel(v);
    double *x = malloc(n * sizeof *x), *ga = malloc(n * sizeof *ga);
    CHECK(cn_node_get_values(v, false, x, n) == CN_OK);
    CHECK(cn_node_get_values(gr, false, ga, n) == CN_OK);
    for (size_t j = 0; j < n; j++) {
      if (!c->fd[i]) { /* an operand the op is constant in: nothing may flow into it */
        if (ga[j] != 0) n_zero_bad++;
        continue;
      }
      double saved = x[j], lp, lm;
      x[j] = saved + FD_H;
      cn_node_set_values(v, false, x, n);
      if (!run(c, fwd)) break;
      lp = scalar_value(loss_node);
      x[j] = saved - FD_H;
      cn_node_set_values(v, false, x, n);
      if (!run(c, fwd)) break;
      lm = scalar_value(loss_node);
      x[j] = saved;
      cn_node_set_values(v, false, x, n);
      double gn = (lp - lm) / (2 * FD_H);
      if (fabs(gn) < FD_TINY && fabs(ga[j]) < FD_TINY) continue;
      double asym = fabs((gn - ga[j]) / (gn + ga[j]));
      if (!(asym <= 1)) asym = 1; /* opposite signs, or NaN */
      if (asym > 1e-3)
        fprintf(stderr, "%s: %s cell %zu: numeric %.10g, backprop %.10g\n", c->name,
                cn_tensor_label(c->p[i]), j, gn, ga[j]);
      sum_asym += asym;
      if (asym > max_asym) max_asym = asym;
      n_cells++;
    }
    free(x);
    free(ga);
  }
  CHECK_MSG(n_cells > 0, "%s: no gradient cell to compare", c->name);
  double mean = n_cells ? sum_asym / n_cells : 1;
  CHECK_MSG(mean <= FD_MAX_TOL, "%s: mean asymmetry %.3g over %d cells (max %.3g)", c->name, mean,
            n_cells, max_asym);
  CHECK_MSG(n_zero_bad == 0, "%s: %d cells of non-differentiable operands got gradient", c->name,
            n_zero_bad);
done:
  if (setup) cn_routine_free(setup);
  if (fwd) cn_routine_free(fwd);
  cn_ctx_destroy(ctx);
}

/* ---- Every differentiable primitive op, pointwise with broadcasting ------------------------- */

/* The derivative table's rows: every one of them must be exercised by test_ops_fd. */
enum {
  N_DERIV_ROWS = 0
#define CN_DERIV(ID, da, db, dc) +1
#include "tensor/derivs.def"
};

/* Input `cell` of operand k of op: in the op's domain, away from kinks and discontinuities by
 * much more than the finite-difference step, and with cell 0 on the side where the op passes a
 * gradient (so a broadcast scalar does too). Unlisted ops get positive values away from 0, which
 * suits the usual singular points (log, sqrt, recip, pow's base). */
static double domain_value(cn_op op, int k, int64_t cell, rng *r) {
  switch (op) {
  case CN_OP_RELU:
  case CN_OP_RELU_GATE:
    if (k == 0 && cell == 0) return uniform_in(r, 0.1, 1.5);
    return signed_in(r, 0.1, 1.5);
  case CN_OP_SAT01:
  case CN_OP_SAT01_GATE:
    if (k == 1) return signed_in(r, 0.5, 1.5);
    switch (cell == 0 ? 2 : irand(r, 0, 3)) {
    case 0: return uniform_in(r, -1, -0.1);
    case 1: return uniform_in(r, 1.1, 2);
    default: return uniform_in(r, 0.1, 0.9);
    }
  case CN_OP_MAX: /* |a - b| >= 0.1 whichever cells broadcast against each other */
  case CN_OP_MIN: return k == 0 ? signed_in(r, 0.2, 1.5) : uniform_in(r, -0.1, 0.1);
  case CN_OP_WHERE: return k == 0 ? (double)irand(r, 0, 1) : signed_in(r, 0.5, 1.5);
  case CN_OP_COND: /* a and b small integers, equal at cell 0: c passes a gradient there */
    if (k == 2) return signed_in(r, 0.5, 1.5);
    return cell == 0 ? 1 : (double)irand(r, 0, 1);
  case CN_OP_POW: return k == 0 ? uniform_in(r, 0.5, 1.5) : uniform_in(r, -1.5, 2.5);
  case CN_OP_DIV: return k == 0 ? signed_in(r, 0.5, 1.5) : uniform_in(r, 0.5, 1.5);
  case CN_OP_ID:
  case CN_OP_EXP:
  case CN_OP_EXP2:
  case CN_OP_SIN:
  case CN_OP_COS:
  case CN_OP_NEG:
  case CN_OP_TANH:
  case CN_OP_GELU:
  case CN_OP_ARG1:
  case CN_OP_ARG2:
  case CN_OP_ADD:
  case CN_OP_SUB:
  case CN_OP_MUL:
  case CN_OP_FMA:
  case CN_OP_MUL3: return uniform_in(r, -1.5, 1.5);
  default: return uniform_in(r, 0.5, 1.5);
  }
}

static const char *const config_names[3] = {"same shapes", "scalar operand", "size-1 axis operand"};

static void fd_op(cn_op op, int config, int which, cn_backend_kind backend) {
  fd_case c;
  fd_begin(&c, backend, (uint64_t)op * 100 + (uint64_t)config * 10 + (uint64_t)which, "%s, %s %d",
           cn_op_name(op), config_names[config], which + 1);
  int arity = cn_op_arity(op);
  shp s = random_shp(&c.r);
  cn_tensor *args[3];
  for (int k = 0; k < arity; k++) {
    shp sk = s;
    if (config == 1 && k == which) sk = scalar_shp;
    if (config == 2 && k == which) sk = with_unit_axis(&s, &c.r);
    double v[64];
    for (int64_t i = 0; i < numel(&sk); i++) v[i] = domain_value(op, k, i, &c.r);
    char label[16];
    snprintf(label, sizeof label, "x%d", k + 1);
    args[k] = fd_param(&c, label, &sk, v, cn_op_differentiable(op, k));
  }
  cn_tensor *out = cn_tensor_apply(c.g, op, arity, args);
  fd_finish(&c, out, arity == 1 && config == 1 ? scalar_shp : s);
}

static void test_ops_fd(cn_backend_kind backend) {
  int n_ops = 0;
  for (int o = 0; o < CN_OP_COUNT; o++) {
    cn_op op = (cn_op)o;
    int arity = cn_op_arity(op);
    bool any = false;
    for (int k = 0; k < arity; k++) any |= cn_op_differentiable(op, k);
    if (!any) continue;
    CHECK_MSG(cn_op_supports(op, CN_PREC_DOUBLE), "%s has a derivative but no double",
              cn_op_name(op));
    n_ops++;
    fd_op(op, 0, 0, backend);
    for (int k = 0; k < arity; k++) {
      fd_op(op, 1, k, backend);
      if (arity > 1) fd_op(op, 2, k, backend);
    }
  }
  CHECK_INT(n_ops, N_DERIV_ROWS);
}

/* ---- Einsum, compose, transpose, slices, tropical ------------------------------------------ */

/* Values whose pairwise gaps are at least `gap` (a shuffled ladder plus jitter), so that max
 * reductions have a unique argmax far from ties. */
static void distinct_values(rng *r, double *v, int n, double gap) {
  for (int i = 0; i < n; i++) v[i] = i * 2 * gap + uniform_in(r, 0, gap);
  for (int i = n - 1; i > 0; i--) {
    int j = irand(r, 0, i);
    double t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

static cn_tensor *ein(fd_case *c, const char *spec, cn_op accum, cn_op prim, int n,
                      cn_tensor *const *args) {
  return cn_tensor_einsum(c->g, spec, accum, prim, n, args);
}

static void test_einsum_fd(cn_backend_kind be) {
  fd_case c;

  /* pointwise product through shared row variables */
  fd_begin(&c, be, 1, "einsum ...|...->... ; ...|...->... => ...|...->...");
  shp s = mkshp(1, D(2), 1, D(3), 2, D(2, 2));
  cn_tensor *a = fd_param_in(&c, "a", &s, -1, 1), *b = fd_param_in(&c, "b", &s, -1, 1);
  fd_finish(&c,
            ein(&c, "...|...->... ; ...|...->... => ...|...->...", CN_OP_ADD, CN_OP_MUL, 2,
                (cn_tensor *[]){a, b}),
            s);

  /* a named row variable: reverse the output axes, reduce the input axes, batch -> output */
  fd_begin(&c, be, 2, "einsum ..v..|ijk => ..v..kji");
  s = mkshp(1, D(2), 1, D(2), 3, D(2, 3, 2));
  a = fd_param_in(&c, "a", &s, -1, 1);
  fd_finish(&c, ein(&c, "..v..|ijk => ..v..kji", CN_OP_ADD, CN_OP_ID, 1, &a),
            mkshp(0, NULL, 0, NULL, 4, D(2, 2, 3, 2)));

  /* batched matmul over a named batch row variable */
  fd_begin(&c, be, 3, "einsum ..b..|ij ; ..b..|jk => ..b..|ik");
  shp sa = mkshp(2, D(2, 1), 0, NULL, 2, D(2, 3)), sb = mkshp(2, D(2, 1), 0, NULL, 2, D(3, 2));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  b = fd_param_in(&c, "b", &sb, -1, 1);
  fd_finish(
      &c,
      ein(&c, "..b..|ij ; ..b..|jk => ..b..|ik", CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){a, b}),
      mkshp(2, D(2, 1), 0, NULL, 2, D(2, 2)));

  /* weights shared across a batch row variable: their gradient sums over it */
  fd_begin(&c, be, 4, "einsum ..b..|ij ; jk => ..b..|ik");
  sa = mkshp(1, D(3), 0, NULL, 2, D(2, 3));
  sb = mkshp(0, NULL, 0, NULL, 2, D(3, 2));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  b = fd_param_in(&c, "b", &sb, -1, 1);
  fd_finish(&c,
            ein(&c, "..b..|ij ; jk => ..b..|ik", CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){a, b}),
            mkshp(1, D(3), 0, NULL, 2, D(2, 2)));

  /* matrix product by spec, and a row sum */
  fd_begin(&c, be, 5, "einsum ij;jk=>ik");
  sa = mkshp(0, NULL, 0, NULL, 2, D(2, 3));
  sb = mkshp(0, NULL, 0, NULL, 2, D(3, 4));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  b = fd_param_in(&c, "b", &sb, -1, 1);
  fd_finish(&c, ein(&c, "ij;jk=>ik", CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){a, b}),
            mkshp(0, NULL, 0, NULL, 2, D(2, 4)));

  fd_begin(&c, be, 6, "einsum ij=>i");
  sa = mkshp(0, NULL, 0, NULL, 2, D(3, 4));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  fd_finish(&c, ein(&c, "ij=>i", CN_OP_ADD, CN_OP_ID, 1, &a), mkshp(0, NULL, 0, NULL, 1, D(3)));

  /* a non-linear primitive under a reduction: sum_j a_ij / b_j */
  fd_begin(&c, be, 7, "einsum ij;j=>i with div");
  sa = mkshp(0, NULL, 0, NULL, 2, D(3, 4));
  sb = mkshp(0, NULL, 0, NULL, 1, D(4));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  b = fd_param_in(&c, "b", &sb, 0.5, 1.5);
  fd_finish(&c, ein(&c, "ij;j=>i", CN_OP_ADD, CN_OP_DIV, 2, (cn_tensor *[]){a, b}),
            mkshp(0, NULL, 0, NULL, 1, D(3)));

  /* ternary contractions: mul3 (einsum3) and fma under a reduction */
  fd_begin(&c, be, 8, "einsum ij;jk;k=>i with mul3");
  sa = mkshp(0, NULL, 0, NULL, 2, D(2, 3));
  sb = mkshp(0, NULL, 0, NULL, 2, D(3, 2));
  shp sc = mkshp(0, NULL, 0, NULL, 1, D(2));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  b = fd_param_in(&c, "b", &sb, -1, 1);
  cn_tensor *cc = fd_param_in(&c, "c", &sc, -1, 1);
  fd_finish(&c, ein(&c, "ij;jk;k=>i", CN_OP_ADD, CN_OP_MUL3, 3, (cn_tensor *[]){a, b, cc}),
            mkshp(0, NULL, 0, NULL, 1, D(2)));

  fd_begin(&c, be, 9, "einsum ij;jk;ik=>ik with fma");
  sc = mkshp(0, NULL, 0, NULL, 2, D(2, 2));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  b = fd_param_in(&c, "b", &sb, -1, 1);
  cc = fd_param_in(&c, "c", &sc, -1, 1);
  fd_finish(&c, ein(&c, "ij;jk;ik=>ik", CN_OP_ADD, CN_OP_FMA, 3, (cn_tensor *[]){a, b, cc}),
            mkshp(0, NULL, 0, NULL, 2, D(2, 2)));

  /* outer sum */
  fd_begin(&c, be, 10, "outer sum i;j=>ij");
  sa = mkshp(0, NULL, 0, NULL, 1, D(3));
  sb = mkshp(0, NULL, 0, NULL, 1, D(2));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  b = fd_param_in(&c, "b", &sb, -1, 1);
  fd_finish(&c, ein(&c, "i;j=>ij", CN_OP_ADD, CN_OP_ADD, 2, (cn_tensor *[]){a, b}),
            mkshp(0, NULL, 0, NULL, 2, D(3, 2)));

  /* matmul by compose (b's outputs feed w's inputs), with a bias broadcast over the batch */
  fd_begin(&c, be, 11, "compose w * x + bias");
  shp sw = mkshp(0, NULL, 1, D(3), 1, D(2)), sx = mkshp(1, D(4), 0, NULL, 1, D(3));
  shp sbias = mkshp(0, NULL, 0, NULL, 1, D(2));
  cn_tensor *w = fd_param_in(&c, "w", &sw, -1, 1), *x = fd_param_in(&c, "x", &sx, -1, 1);
  cn_tensor *bias = fd_param_in(&c, "bias", &sbias, -1, 1);
  cn_tensor *wx = cn_tensor_compose(c.g, CN_OP_ADD, CN_OP_MUL, w, x);
  fd_finish(&c, wx ? cn_tensor_apply(c.g, CN_OP_ADD, 2, (cn_tensor *[]){wx, bias}) : NULL,
            mkshp(1, D(4), 0, NULL, 1, D(2)));

  /* transpose: input and output rows swapped; times a matrix so the layout matters */
  fd_begin(&c, be, 12, "transpose");
  sa = mkshp(1, D(2), 1, D(3), 1, D(2));
  sb = mkshp(1, D(2), 1, D(2), 1, D(3));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  b = fd_param_in(&c, "b", &sb, -1, 1);
  cn_tensor *t = cn_tensor_transpose(c.g, a);
  fd_finish(&c, t ? cn_tensor_apply(c.g, CN_OP_MUL, 2, (cn_tensor *[]){t, b}) : NULL, sb);

  /* batch slice by a static symbol: only the selected row gets a gradient */
  fd_begin(&c, be, 13, "batch slice by symbol");
  sa = mkshp(2, D(3, 2), 0, NULL, 1, D(2));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  c.has_sym = true;
  c.sym = cn_symbol_create(c.ctx, "step", 3);
  c.sym_value = 1;
  cn_tensor *sl = cn_tensor_batch_slice(c.g, a, c.sym);
  fd_finish(&c, sl ? cn_tensor_apply(c.g, CN_OP_SIN, 1, &sl) : NULL,
            mkshp(1, D(2), 0, NULL, 1, D(2)));

  /* tropical (max-plus) with a unique argmax per output cell */
  fd_begin(&c, be, 14, "tropical ij;jk=>ik");
  sa = mkshp(0, NULL, 0, NULL, 2, D(2, 3));
  sb = mkshp(0, NULL, 0, NULL, 2, D(3, 2));
  {
    /* a's entries are spread by 1, b's by 0.05 (< 0.5): sums a_ij + b_jk have distinct j-maxima
     * with gaps of at least 0.4 */
    double va[6], vb[6];
    distinct_values(&c.r, va, 6, 0.5);
    distinct_values(&c.r, vb, 6, 0.01);
    a = fd_param(&c, "a", &sa, va, true);
    b = fd_param(&c, "b", &sb, vb, true);
  }
  fd_finish(&c, ein(&c, "ij;jk=>ik", CN_OP_MAX, CN_OP_ADD, 2, (cn_tensor *[]){a, b}),
            mkshp(0, NULL, 0, NULL, 2, D(2, 2)));

  /* einmax1 and einmin1: the gradient goes to the argmax / argmin only */
  fd_begin(&c, be, 15, "einmax1 ij=>i");
  sa = mkshp(0, NULL, 0, NULL, 2, D(3, 4));
  {
    double va[12];
    distinct_values(&c.r, va, 12, 0.1);
    a = fd_param(&c, "a", &sa, va, true);
  }
  fd_finish(&c, ein(&c, "ij=>i", CN_OP_MAX, CN_OP_ID, 1, &a), mkshp(0, NULL, 0, NULL, 1, D(3)));

  fd_begin(&c, be, 16, "einmin1 ij=>j");
  {
    double va[12];
    distinct_values(&c.r, va, 12, 0.1);
    a = fd_param(&c, "a", &sa, va, true);
  }
  fd_finish(&c, ein(&c, "ij=>j", CN_OP_MIN, CN_OP_ID, 1, &a), mkshp(0, NULL, 0, NULL, 1, D(4)));

  /* fixed indices and diagonals: a column read, a slot written (the rest stays at the neutral
   * element), a diagonal read and a diagonal write */
  fd_begin(&c, be, 18, "einsum i3=>i");
  sa = mkshp(0, NULL, 0, NULL, 2, D(2, 4));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  fd_finish(&c, ein(&c, "i3=>i", CN_OP_ADD, CN_OP_ID, 1, &a), mkshp(0, NULL, 0, NULL, 1, D(2)));

  fd_begin(&c, be, 19, "einsum i=>i1");
  sa = mkshp(0, NULL, 0, NULL, 1, D(3));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  fd_finish(&c, ein(&c, "i=>i1", CN_OP_ADD, CN_OP_ID, 1, &a), mkshp(0, NULL, 0, NULL, 2, D(3, 2)));

  fd_begin(&c, be, 20, "einsum ii=>i");
  sa = mkshp(0, NULL, 0, NULL, 2, D(3, 3));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  fd_finish(&c, ein(&c, "ii=>i", CN_OP_ADD, CN_OP_ID, 1, &a), mkshp(0, NULL, 0, NULL, 1, D(3)));

  fd_begin(&c, be, 21, "einsum i=>ii");
  sa = mkshp(0, NULL, 0, NULL, 1, D(3));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  fd_finish(&c, ein(&c, "i=>ii", CN_OP_ADD, CN_OP_ID, 1, &a), mkshp(0, NULL, 0, NULL, 2, D(3, 3)));

  /* one tensor in both slots of a contraction: a @ a */
  fd_begin(&c, be, 22, "einsum ij;jk=>ik with a twice");
  sa = mkshp(0, NULL, 0, NULL, 2, D(3, 3));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  fd_finish(&c, ein(&c, "ij;jk=>ik", CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){a, a}), sa);

  /* a derivative reading the result (exp: g * v) through a permuted, still bijective map */
  fd_begin(&c, be, 23, "einsum ij=>ji with exp");
  sa = mkshp(0, NULL, 0, NULL, 2, D(2, 3));
  a = fd_param_in(&c, "a", &sa, -1, 1);
  fd_finish(&c, ein(&c, "ij=>ji", CN_OP_ADD, CN_OP_EXP, 1, &a),
            mkshp(0, NULL, 0, NULL, 2, D(3, 2)));

  /* a two-layer MLP with tanh and relu: every parameter through several ops */
  fd_begin(&c, be, 17, "mlp");
  sx = mkshp(1, D(3), 0, NULL, 1, D(2));
  shp sw1 = mkshp(0, NULL, 1, D(2), 1, D(4)), sb1 = mkshp(0, NULL, 0, NULL, 1, D(4));
  shp sw2 = mkshp(0, NULL, 1, D(4), 1, D(2));
  x = fd_param_in(&c, "x", &sx, -1, 1);
  cn_tensor *w1 = fd_param_in(&c, "w1", &sw1, -1, 1), *b1 = fd_param_in(&c, "b1", &sb1, -1, 1);
  cn_tensor *w2 = fd_param_in(&c, "w2", &sw2, -1, 1);
  cn_tensor *h = cn_tensor_compose(c.g, CN_OP_ADD, CN_OP_MUL, w1, x);
  h = h ? cn_tensor_apply(c.g, CN_OP_ADD, 2, (cn_tensor *[]){h, b1}) : NULL;
  h = h ? cn_tensor_apply(c.g, CN_OP_TANH, 1, &h) : NULL;
  cn_tensor *y = h ? cn_tensor_compose(c.g, CN_OP_ADD, CN_OP_MUL, w2, h) : NULL;
  fd_finish(&c, y, mkshp(1, D(3), 0, NULL, 1, D(2)));
}

/* ---- Gradients by hand: accumulation, prohibited gradients ------------------------------------
 */

typedef struct {
  cn_ctx *ctx;
  cn_graph *g;
  cn_backend_kind backend;
  const char *name;
} hand;

static hand hand_begin(cn_backend_kind backend, const char *name) {
  hand h = {cn_ctx_create(), NULL, backend, name};
  h.g = cn_graph_create(h.ctx);
  cn_graph_set_prec(h.g, CN_PREC_DOUBLE);
  return h;
}

static cn_tensor *vec_data(hand *h, const char *label, const double *v, int n, bool param) {
  cn_dims d = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (const int64_t[]){n}, NULL}};
  cn_tensor *t = cn_tensor_data(h->g, label, &d, v, (size_t)n);
  if (t && param) t = cn_tensor_param(h->g, label, &d, t);
  CHECK_MSG(t != NULL, "%s: %s: %s", h->name, label, cn_ctx_error(h->ctx));
  return t;
}

/* sum_i y_i * coef_i */
static cn_tensor *weighted_sum(hand *h, cn_tensor *y, cn_tensor *coef) {
  if (!y || !coef) return NULL;
  return cn_tensor_einsum(h->g, "...|...->... ; ...|...->... => 0", CN_OP_ADD, CN_OP_MUL, 2,
                          (cn_tensor *[]){y, coef});
}

/* Runs init then grad_update of loss; false (with a failed check) if anything fails. */
static bool hand_run(hand *h, cn_tensor *loss) {
  CHECK_MSG(loss != NULL, "%s: %s", h->name, cn_ctx_error(h->ctx));
  if (!loss) return false;
  cn_asgn *init = cn_graph_init_params(h->g, loss);
  cn_asgn *update = init ? cn_graph_grad_update(h->g, loss) : NULL;
  CHECK_MSG(update != NULL, "%s: %s", h->name, cn_ctx_error(h->ctx));
  if (!update) return false;
  cn_routine *ri = cn_routine_compile(h->ctx, init, h->backend, "hand_init");
  cn_routine *ru = ri ? cn_routine_compile(h->ctx, update, h->backend, "hand_update") : NULL;
  CHECK_MSG(ru != NULL, "%s: %s", h->name, cn_ctx_error(h->ctx));
  /* the update twice: backprop zeroes the gradients first, so nothing doubles */
  cn_status st = ru ? cn_routine_run(ri) : CN_ERR_INVALID;
  for (int i = 0; i < 2 && st == CN_OK; i++) st = cn_routine_run(ru);
  CHECK_MSG(st == CN_OK, "%s: %s", h->name, cn_ctx_error(h->ctx));
  if (ri) cn_routine_free(ri);
  if (ru) cn_routine_free(ru);
  return st == CN_OK;
}

static void check_grad(hand *h, cn_tensor *t, const double *expected, int n) {
  cn_node *gr = t ? cn_tensor_grad(t) : NULL;
  CHECK_MSG(gr != NULL, "%s: no gradient for %s", h->name, t ? cn_tensor_label(t) : "NULL");
  if (!gr) return;
  double v[16] = {0};
  CHECK_INT(cn_node_numel(gr), n);
  CHECK(cn_node_get_values(gr, false, v, (size_t)n) == CN_OK);
  for (int i = 0; i < n; i++)
    CHECK_MSG(fabs(v[i] - expected[i]) <= 1e-12 * (1 + fabs(expected[i])),
              "%s [%s]: %s.grad[%d] = %.17g, expected %.17g", h->name, backend_names[h->backend],
              cn_tensor_label(t), i, v[i], expected[i]);
}

static const double xs[3] = {1, 2, 3}, coefs[3] = {0.5, -1, 2}, as[3] = {2, 3, 4};

static void test_used_twice(cn_backend_kind be) {
  /* x * x: both operand slots are x, so x.grad = coef * (x + x) */
  hand h = hand_begin(be, "x * x");
  cn_tensor *x = vec_data(&h, "x", xs, 3, true), *k = vec_data(&h, "coef", coefs, 3, false);
  cn_tensor *loss =
      weighted_sum(&h, x ? cn_tensor_apply(h.g, CN_OP_MUL, 2, (cn_tensor *[]){x, x}) : NULL, k);
  if (hand_run(&h, loss)) check_grad(&h, x, (const double[]){1, -4, 12}, 3);
  cn_ctx_destroy(h.ctx);

  /* x + x */
  h = hand_begin(be, "x + x");
  x = vec_data(&h, "x", xs, 3, true);
  k = vec_data(&h, "coef", coefs, 3, false);
  loss = weighted_sum(&h, x ? cn_tensor_apply(h.g, CN_OP_ADD, 2, (cn_tensor *[]){x, x}) : NULL, k);
  if (hand_run(&h, loss)) check_grad(&h, x, (const double[]){1, -2, 4}, 3);
  cn_ctx_destroy(h.ctx);

  /* two consumers: x * a + sin(x): x.grad = coef * (a + cos x) */
  h = hand_begin(be, "x * a + sin x");
  x = vec_data(&h, "x", xs, 3, true);
  k = vec_data(&h, "coef", coefs, 3, false);
  cn_tensor *a = vec_data(&h, "a", as, 3, false);
  cn_tensor *xa = x && a ? cn_tensor_apply(h.g, CN_OP_MUL, 2, (cn_tensor *[]){x, a}) : NULL;
  cn_tensor *sx = x ? cn_tensor_apply(h.g, CN_OP_SIN, 1, &x) : NULL;
  loss = weighted_sum(
      &h, xa && sx ? cn_tensor_apply(h.g, CN_OP_ADD, 2, (cn_tensor *[]){xa, sx}) : NULL, k);
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = coefs[i] * (as[i] + cos(xs[i]));
  if (hand_run(&h, loss)) check_grad(&h, x, want, 3);
  cn_ctx_destroy(h.ctx);

  /* an intermediate used twice: s = sin x; s * s + s: x.grad = coef * (2 s + 1) * cos x, and
   * s.grad (an intermediate's gradient node) = coef * (2 s + 1) */
  h = hand_begin(be, "s * s + s");
  x = vec_data(&h, "x", xs, 3, true);
  k = vec_data(&h, "coef", coefs, 3, false);
  cn_tensor *s = x ? cn_tensor_apply(h.g, CN_OP_SIN, 1, &x) : NULL;
  cn_tensor *ss = s ? cn_tensor_apply(h.g, CN_OP_MUL, 2, (cn_tensor *[]){s, s}) : NULL;
  loss =
      weighted_sum(&h, ss ? cn_tensor_apply(h.g, CN_OP_ADD, 2, (cn_tensor *[]){ss, s}) : NULL, k);
  double want_s[3];
  for (int i = 0; i < 3; i++) {
    want_s[i] = coefs[i] * (2 * sin(xs[i]) + 1);
    want[i] = want_s[i] * cos(xs[i]);
  }
  if (hand_run(&h, loss)) {
    check_grad(&h, x, want, 3);
    check_grad(&h, s, want_s, 3);
    /* s is computed once by the forward code */
    const char *code = cn_asgn_to_string(h.ctx, cn_graph_forward(h.g, loss));
    const char *first = strstr(code, "sin =:");
    CHECK_MSG(first && !strstr(first + 1, "sin =:"), "%s: forward code:\n%s", h.name, code);
  }
  cn_ctx_destroy(h.ctx);
}

static void expect_no_grad(hand *h, cn_tensor *t) {
  if (!t) return;
  CHECK_MSG(!cn_tensor_is_diff(t), "%s: %s is differentiable", h->name, cn_tensor_label(t));
  cn_ctx_clear_error(h->ctx);
  CHECK(cn_tensor_grad(t) == NULL);
  CHECK_HAS(cn_ctx_error(h->ctx), "has no gradient");
  CHECK_HAS(cn_ctx_error(h->ctx), cn_tensor_label(t));
  cn_ctx_clear_error(h->ctx);
}

static void test_prohibited(cn_backend_kind be) {
  /* y = x * stop_gradient(x) + (3 * a) * x: the stopped factor, the number and the data
   * contribute nothing of their own: x.grad = coef * (x + 3 a) */
  hand h = hand_begin(be, "prohibited gradients");
  cn_tensor *x = vec_data(&h, "x", xs, 3, true), *k = vec_data(&h, "coef", coefs, 3, false);
  cn_tensor *a = vec_data(&h, "a", as, 3, false), *three = cn_tensor_number(h.g, 3);
  cn_tensor *sg = x ? cn_tensor_stop_gradient(h.g, x) : NULL;
  cn_tensor *xsg = sg ? cn_tensor_apply(h.g, CN_OP_MUL, 2, (cn_tensor *[]){x, sg}) : NULL;
  cn_tensor *a3 = a ? cn_tensor_apply(h.g, CN_OP_MUL, 2, (cn_tensor *[]){three, a}) : NULL;
  cn_tensor *a3x = a3 ? cn_tensor_apply(h.g, CN_OP_MUL, 2, (cn_tensor *[]){a3, x}) : NULL;
  cn_tensor *y = xsg && a3x ? cn_tensor_apply(h.g, CN_OP_ADD, 2, (cn_tensor *[]){xsg, a3x}) : NULL;
  cn_tensor *offsets = cn_tensor_range_over_offsets(h.g);
  cn_tensor *loss = weighted_sum(&h, y, k);
  CHECK(x && cn_tensor_is_diff(x) && y && cn_tensor_is_diff(y));
  if (hand_run(&h, loss)) {
    double want[3];
    for (int i = 0; i < 3; i++) want[i] = coefs[i] * (xs[i] + 3 * as[i]);
    check_grad(&h, x, want, 3);
    expect_no_grad(&h, sg);
    expect_no_grad(&h, three);
    expect_no_grad(&h, a);
    expect_no_grad(&h, a3); /* built from non-differentiable tensors only */
    expect_no_grad(&h, k);
    expect_no_grad(&h, offsets);
    /* no gradient code mentions them */
    const char *code = cn_asgn_to_string(h.ctx, cn_graph_backprop(h.g, loss));
    CHECK_MSG(code && !strstr(code, "stop_gradient.grad") && !strstr(code, "a.grad"),
              "backprop:\n%s", code ? code : "");
  }
  /* a loss that depends on nothing differentiable has no backprop */
  cn_tensor *flat = weighted_sum(&h, a3, k);
  CHECK(flat && !cn_tensor_is_diff(flat));
  CHECK(cn_graph_backprop(h.g, flat) == NULL);
  CHECK_HAS(cn_ctx_error(h.ctx), "does not depend on any differentiable tensor");
  cn_ctx_destroy(h.ctx);
}

/* ---- A two-layer MLP's forward values against plain C loops --------------------------------- */

static void test_mlp_forward(cn_backend_kind be, cn_prec prec) {
  enum { B = 4, I = 3, H = 5, O = 2 };
  double x[B][I], w1[H][I], b1[H], w2[O][H], b2[O]; /* memory order: output before input */
  rng r = {12345};
  for (int b = 0; b < B; b++)
    for (int i = 0; i < I; i++) x[b][i] = uniform_in(&r, -1, 1);
  for (int h = 0; h < H; h++) {
    b1[h] = uniform_in(&r, -0.5, 0.5);
    for (int i = 0; i < I; i++) w1[h][i] = uniform_in(&r, -1, 1);
  }
  for (int o = 0; o < O; o++) {
    b2[o] = uniform_in(&r, -0.5, 0.5);
    for (int h = 0; h < H; h++) w2[o][h] = uniform_in(&r, -1, 1);
  }
  /* by hand */
  double want[B][O];
  int n_relu_cut = 0;
  for (int b = 0; b < B; b++) {
    double hid[H];
    for (int h = 0; h < H; h++) {
      double acc = b1[h];
      for (int i = 0; i < I; i++) acc += w1[h][i] * x[b][i];
      n_relu_cut += acc < 0;
      hid[h] = acc > 0 ? acc : 0;
    }
    for (int o = 0; o < O; o++) {
      double acc = b2[o];
      for (int h = 0; h < H; h++) acc += w2[o][h] * hid[h];
      want[b][o] = acc;
    }
  }
  CHECK(n_relu_cut > 0 && n_relu_cut < B * H); /* the relu matters */

  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, prec);
  const int64_t nb = B, ni = I, nh = H, no = O;
  cn_dims dx = {{1, &nb, NULL}, {0, NULL, NULL}, {1, &ni, NULL}};
  cn_dims dw1 = {{0, NULL, NULL}, {1, &ni, NULL}, {1, &nh, NULL}};
  cn_dims db1 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, &nh, NULL}};
  cn_dims dw2 = {{0, NULL, NULL}, {1, &nh, NULL}, {1, &no, NULL}};
  cn_dims db2 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, &no, NULL}};
  cn_tensor *tx = cn_tensor_data(g, "x", &dx, &x[0][0], B * I);
  cn_tensor *tw1 =
      cn_tensor_param(g, "w1", &dw1, cn_tensor_data(g, "w1_init", &dw1, &w1[0][0], H * I));
  cn_tensor *tb1 = cn_tensor_param(g, "b1", &db1, cn_tensor_data(g, "b1_init", &db1, b1, H));
  cn_tensor *tw2 =
      cn_tensor_param(g, "w2", &dw2, cn_tensor_data(g, "w2_init", &dw2, &w2[0][0], O * H));
  cn_tensor *tb2 = cn_tensor_param(g, "b2", &db2, cn_tensor_data(g, "b2_init", &db2, b2, O));
  cn_tensor *hid = cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, tw1, tx);
  hid = hid ? cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){hid, tb1}) : NULL;
  hid = hid ? cn_tensor_apply(g, CN_OP_RELU, 1, &hid) : NULL;
  cn_tensor *y = hid ? cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, tw2, hid) : NULL;
  y = y ? cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){y, tb2}) : NULL;
  CHECK_MSG(y != NULL, "mlp: %s", cn_ctx_error(ctx));
  if (y) {
    cn_asgn *code =
        cn_asgn_seq(ctx, 2, (cn_asgn *[]){cn_graph_init_params(g, y), cn_graph_forward(g, y)});
    cn_routine *rt = cn_routine_compile(ctx, code, be, "mlp");
    CHECK_MSG(rt && cn_routine_run(rt) == CN_OK, "mlp: %s", cn_ctx_error(ctx));
    CHECK_STR(cn_tensor_shape(y), "4|->2"); /* closed at materialization */
    double got[B * O];
    CHECK(cn_node_get_values(cn_tensor_value(y), false, got, B * O) == CN_OK);
    double tol = prec == CN_PREC_DOUBLE ? 1e-14 : 1e-5;
    for (int b = 0; b < B; b++)
      for (int o = 0; o < O; o++)
        CHECK_MSG(fabs(got[b * O + o] - want[b][o]) <= tol,
                  "mlp %s [%s]: y[%d][%d] = %.9g, expected %.9g", cn_prec_name(prec),
                  backend_names[be], b, o, got[b * O + o], want[b][o]);
    cn_routine_free(rt);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Bad input: errors name tensors and axes, nothing aborts, the graph stays usable ----------
 */

static cn_tensor *data_of(cn_graph *g, const char *label, cn_dims d, int n) {
  static const double v[64] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  cn_tensor *t = cn_tensor_data(g, label, &d, v, (size_t)n);
  CHECK_MSG(t != NULL, "%s: %s", label, cn_ctx_error(cn_graph_ctx(g)));
  return t;
}

#define EXPECT_FAIL(ctx, expr, ...)                                                                \
  do {                                                                                             \
    cn_ctx_clear_error(ctx);                                                                       \
    CHECK_MSG((expr) == NULL, "%s succeeded", #expr);                                              \
    CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);                                                 \
    const char *needles_[] = {__VA_ARGS__};                                                        \
    for (size_t i_ = 0; i_ < sizeof needles_ / sizeof *needles_; i_++)                             \
      CHECK_HAS(cn_ctx_error(ctx), needles_[i_]);                                                  \
  } while (0)

static void test_bad_input(cn_backend_kind be) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  const cn_axes none = CN_AXES_NONE;
  const int64_t d2 = 2, d3 = 3, d4 = 4, d5 = 5;
  cn_dims dw = {none, {1, &d3, NULL}, {1, &d2, NULL}}, dx = {{1, &d4, NULL}, none, {1, &d5, NULL}};
  cn_tensor *w = cn_tensor_param(g, "w", &dw, data_of(g, "w_init", dw, 6));
  cn_tensor *x = data_of(g, "x", dx, 20);

  /* shape conflicts while building: the tensors, rows, axes and sizes are named */
  EXPECT_FAIL(ctx, cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, w, x), "compose",
              "input row of \"w\"", "size 3", "output row of \"x\"", "size 5");
  cn_dims da = {none, none, {2, (const int64_t[]){2, 3}, NULL}};
  cn_dims db = {none, none, {2, (const int64_t[]){4, 3}, NULL}};
  cn_dims dc = {none, none, {2, (const int64_t[]){4, 2}, NULL}};
  cn_tensor *a = data_of(g, "a", da, 6), *b = data_of(g, "b", db, 12), *c = data_of(g, "c", dc, 8);
  EXPECT_FAIL(ctx, cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){a, b}), "cannot broadcast",
              "\"a\"", "\"b\"", "output row", "size 2", "4");
  EXPECT_FAIL(ctx, cn_tensor_einsum(g, "ij;jk=>ik", CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){a, c}),
              "ij;jk=>ik", "output row of \"c\"", "size 4", "spec axis 'j'", "size 3", "\"a\"");
  EXPECT_FAIL(ctx, cn_tensor_einsum(g, "ij;jk=>i%", CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){a, c}),
              "einsum spec", "column");

  /* NULL and malformed arguments */
  EXPECT_FAIL(ctx, cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){a, NULL}), "operand 2 is NULL");
  EXPECT_FAIL(ctx, cn_tensor_apply(g, CN_OP_ADD, 2, NULL), "add");
  EXPECT_FAIL(ctx, cn_tensor_apply(g, CN_OP_ADD, 1, &a), "add takes 2 operand(s), got 1");
  EXPECT_FAIL(ctx, cn_tensor_apply(g, CN_OP_SIN, 0, &a), "sin");
  EXPECT_FAIL(ctx, cn_tensor_einsum(g, "ij=>i", CN_OP_ADD, CN_OP_ID, 1, (cn_tensor *[]){NULL}),
              "operand 1 is NULL");
  EXPECT_FAIL(ctx, cn_tensor_einsum(g, NULL, CN_OP_ADD, CN_OP_ID, 1, &a), "einsum spec");
  EXPECT_FAIL(ctx, cn_tensor_einsum(g, "ij=>i", CN_OP_LT, CN_OP_ID, 1, &a),
              "not an accumulation operator");
  EXPECT_FAIL(ctx, cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, NULL, x), "NULL");
  EXPECT_FAIL(ctx, cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, w, NULL), "NULL");
  EXPECT_FAIL(ctx, cn_tensor_transpose(g, NULL), "NULL");
  EXPECT_FAIL(ctx, cn_tensor_stop_gradient(g, NULL), "NULL");
  cn_symbol sym = cn_symbol_create(ctx, "i", 4);
  EXPECT_FAIL(ctx, cn_tensor_batch_slice(g, NULL, sym), "NULL");
  EXPECT_FAIL(ctx, cn_tensor_batch_slice(g, x, sym + 100), "symbol", "does not exist");
  EXPECT_FAIL(ctx, cn_tensor_uniform_at(g, NULL), "NULL counter");
  EXPECT_FAIL(ctx, cn_tensor_data(g, "nothing", &da, NULL, 6), "\"nothing\"", "no values");
  EXPECT_FAIL(ctx, cn_tensor_data(g, "five", &da, (const double[]){1, 2, 3, 4, 5}, 5), "\"five\"",
              "5 values", "6 cells");
  cn_dims no_sizes = {none, none, {2, NULL, NULL}};
  EXPECT_FAIL(ctx, cn_tensor_data(g, "nosz", &no_sizes, (const double[]){1}, 1), "\"nosz\"",
              "output row", "no sizes");
  EXPECT_FAIL(ctx, cn_tensor_param(g, "pnosz", &no_sizes, NULL), "\"pnosz\"", "no sizes");
  cn_dims negative = {none, none, {1, (const int64_t[]){-3}, NULL}};
  EXPECT_FAIL(ctx, cn_tensor_param(g, "pneg", &negative, NULL), "\"pneg\"", "-3");
  EXPECT_FAIL(ctx, cn_graph_forward(g, NULL), "NULL tensor");
  EXPECT_FAIL(ctx, cn_graph_backprop(g, NULL), "NULL tensor");
  EXPECT_FAIL(ctx, cn_graph_init_params(g, NULL), "NULL tensor");
  EXPECT_FAIL(ctx, cn_graph_grad_update(g, NULL), "NULL tensor");
  EXPECT_FAIL(ctx, cn_graph_sgd_update(g, w, NULL), "learning rate");

  /* after all that, the graph still builds, materializes and runs a model: y = 2 * w */
  cn_tensor *y =
      w ? cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){cn_tensor_number(g, 2), w}) : NULL;
  CHECK_MSG(y != NULL, "%s", cn_ctx_error(ctx));
  cn_asgn *code = y ? cn_graph_init_params(g, y) : NULL;
  code = code ? cn_asgn_seq(ctx, 2, (cn_asgn *[]){code, cn_graph_forward(g, y)}) : NULL;
  cn_routine *r = code ? cn_routine_compile(ctx, code, be, "after_errors") : NULL;
  CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
  if (r) {
    double v[6];
    CHECK(cn_node_get_values(cn_tensor_value(y), false, v, 6) == CN_OK);
    for (int i = 0; i < 6; i++) CHECK_NEAR(v[i], 2 * (i + 1), 0);
    cn_routine_free(r);
  }
  cn_ctx_destroy(ctx);

  /* a derivative that reads the result has no rule under a reduction (sum_j exp(a_ij)): an
   * error naming the tensor, not wrong gradients */
  ctx = cn_ctx_create();
  g = cn_graph_create(ctx);
  cn_dims d23 = {none, none, {2, (const int64_t[]){2, 3}, NULL}};
  cn_tensor *e = cn_tensor_param(g, "e", &d23, data_of(g, "e_init", d23, 6));
  cn_tensor *se = e ? cn_tensor_einsum(g, "ij=>i", CN_OP_ADD, CN_OP_EXP, 1, &e) : NULL;
  CHECK(se && cn_tensor_is_diff(se));
  if (se) {
    cn_ctx_clear_error(ctx);
    CHECK(cn_graph_backprop(g, se) == NULL);
    CHECK_INT(cn_ctx_status(ctx), CN_ERR_UNSUPPORTED);
    CHECK_HAS(cn_ctx_error(ctx), "no gradient for \"ij=>i\"");
    CHECK_HAS(cn_ctx_error(ctx), "reads the result");
    CHECK(cn_graph_forward(g, se) != NULL); /* the forward code is fine */
  }
  cn_ctx_destroy(ctx);

  /* a parameter dimension nothing determines is reported at materialization, by every request */
  ctx = cn_ctx_create();
  g = cn_graph_create(ctx);
  cn_dims open = {none, none, {2, (const int64_t[]){3, 0}, NULL}};
  cn_tensor *u = cn_tensor_param(g, "u", &open, NULL);
  cn_tensor *z =
      u ? cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){u, cn_tensor_number(g, 2)}) : NULL;
  CHECK_MSG(z != NULL, "building is fine: %s", cn_ctx_error(ctx));
  if (z) {
    EXPECT_FAIL(ctx, cn_tensor_value(z), "dimension 1 of the output row of parameter \"u\"",
                "is not determined");
    EXPECT_FAIL(ctx, cn_graph_forward(g, z), "parameter \"u\"", "is not determined");
    EXPECT_FAIL(ctx, cn_graph_init_params(g, z), "parameter \"u\"");
    EXPECT_FAIL(ctx, cn_graph_backprop(g, z), "parameter \"u\"");
    EXPECT_FAIL(ctx, cn_tensor_grad(u), "parameter \"u\"");
    CHECK(cn_graph_params(g, z, NULL, 0) < 0);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Operations defined by their code (cn_tensor_operation) -------------------------------- */

static cn_tensor *operation(fd_case *c, const char *label, int arity, const char *logic,
                            cn_op accum, const char *forward, const char *ga, const char *gb,
                            const char *gc, cn_tensor *const *args) {
  const cn_op_code code = {label, arity, logic, accum, forward, {ga, gb, gc}, false};
  cn_tensor *t = cn_tensor_operation(c->g, &code, args);
  CHECK_MSG(t != NULL, "%s: %s", c->name, cn_ctx_error(c->ctx));
  return t;
}

/* The seed's pointpow (an exponent that is a number, here 3), a swish x * sigmoid(x), a bilinear
 * form x; A; y => one number, a max-accumulating product max_j a_ij * b_j (the gradient at the
 * argmax only), and a gradient reading the result (exp: g * v), each against finite
 * differences; forward values by hand; no_grad; the errors of a bad definition. */
static void test_operations_fd(cn_backend_kind be) {
  fd_case c;
  fd_begin(&c, be, 40, "operation pointpow 3");
  shp s3 = mkshp(0, NULL, 0, NULL, 2, D(2, 3));
  cn_tensor *a = fd_param_in(&c, "a", &s3, 0.5, 1.5);
  fd_finish(&c,
            operation(&c, "pointpow", 1, NULL, CN_OP_ARG2, "pow(a, 3)", "g * 3 * pow(a, 2)", NULL,
                      NULL, &a),
            s3);

  fd_begin(&c, be, 41, "operation swish");
  a = fd_param_in(&c, "a", &s3, -2, 2);
  fd_finish(&c,
            operation(&c, "swish", 1, ".", CN_OP_ARG2, "a * recip(1 + exp(-a))",
                      "g * recip(1 + exp(-a)) * (1 + a * (1 - recip(1 + exp(-a))))", NULL, NULL,
                      &a),
            s3);

  fd_begin(&c, be, 42, "operation bilinear i;ij;j=>");
  shp sx = mkshp(0, NULL, 0, NULL, 1, D(3)), sa = mkshp(0, NULL, 0, NULL, 2, D(3, 2));
  shp sy = mkshp(0, NULL, 0, NULL, 1, D(2));
  cn_tensor *x = fd_param_in(&c, "x", &sx, -1, 1), *m = fd_param_in(&c, "A", &sa, -1, 1);
  cn_tensor *y = fd_param_in(&c, "y", &sy, -1, 1);
  fd_finish(&c,
            operation(&c, "bilinear", 3, "i;ij;j=>", CN_OP_ADD, "a * b * c", "g * b * c",
                      "a * g * c", "a * b * g", (cn_tensor *[]){x, m, y}),
            mkshp(0, NULL, 0, NULL, 0, NULL));

  fd_begin(&c, be, 43, "operation max_j a_ij * b_j");
  shp sb = mkshp(0, NULL, 0, NULL, 1, D(3));
  {
    double va[6], vb[3];
    distinct_values(&c.r, va, 6, 0.5);
    for (int i = 0; i < 3; i++) vb[i] = 1 + 0.01 * i; /* positive: the products keep a's order */
    a = fd_param(&c, "a", &s3, va, true);
    cn_tensor *b = fd_param(&c, "b", &sb, vb, true);
    fd_finish(&c,
              operation(&c, "max_product", 2, "ij;j=>i", CN_OP_MAX, "a * b", "g * b", "a * g", NULL,
                        (cn_tensor *[]){a, b}),
              mkshp(0, NULL, 0, NULL, 1, D(2)));
  }

  fd_begin(&c, be, 44, "operation exp reading v");
  a = fd_param_in(&c, "a", &s3, -1, 1);
  fd_finish(&c, operation(&c, "my_exp", 1, NULL, CN_OP_ARG2, "exp(a)", "g * v", NULL, NULL, &a),
            s3);

  /* forward values by hand: a * a + 1 on [1, 2, 3] is [2, 5, 10]; no_grad has no gradient */
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_dims d3 = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){3}, NULL}};
  cn_tensor *p = cn_tensor_param(g, "p", &d3, cn_tensor_data(g, "p0", &d3, (double[]){1, 2, 3}, 3));
  cn_op_code square = {"square_plus_one", 1, NULL, CN_OP_ARG2, "a * a + 1", {"g * 2 * a"}, false};
  cn_tensor *sq = cn_tensor_operation(g, &square, &p);
  square.no_grad = true;
  cn_tensor *frozen = cn_tensor_operation(g, &square, &p);
  CHECK(sq && cn_tensor_is_diff(sq) && frozen && !cn_tensor_is_diff(frozen));
  cn_asgn *init = sq ? cn_graph_init_params(g, sq) : NULL;
  cn_asgn *fwd = init ? cn_graph_forward(g, sq) : NULL;
  cn_routine *r =
      fwd ? cn_routine_compile(ctx, cn_asgn_seq(ctx, 2, (cn_asgn *[]){init, fwd}), be, "sq") : NULL;
  double got[3] = {0, 0, 0};
  CHECK_MSG(r && cn_routine_run(r) == CN_OK &&
                cn_node_get_values(cn_tensor_value(sq), false, got, 3) == CN_OK,
            "%s", cn_ctx_error(ctx));
  CHECK(got[0] == 2 && got[1] == 5 && got[2] == 10);
  if (r) cn_routine_free(r);

  /* a bad definition names the operation, the formula and the column of its first error */
  const struct {
    cn_op_code code;
    const char *message;
  } bad[] = {
      {{"bad", 2, NULL, CN_OP_ARG2, "a * (b", {NULL}, false},
       "operation \"bad\": forward \"a * (b\": column 7: expected ')'"},
      {{"bad", 1, NULL, CN_OP_ARG2, "a * b", {NULL}, false},
       "operation \"bad\": forward \"a * b\": column 5: no such operand"},
      {{"bad", 1, NULL, CN_OP_ARG2, "a * v", {NULL}, false},
       "column 5: the forward code reads the operands only (v and g are the gradient's)"},
      {{"bad", 1, NULL, CN_OP_ARG2, "sigmoid(a)", {NULL}, false},
       "column 1: unknown op (a primitive op of `cannl ops` on numbers)"},
      {{"bad", 1, NULL, CN_OP_ARG2, "a", {"g *"}, false},
       "operation \"bad\": gradient of operand a \"g *\": column 4: expected an operand"},
      {{"bad", 1, NULL, CN_OP_ARG2, "a a", {NULL}, false},
       "column 3: unexpected text (an operator missing?)"},
      {{"bad", 1, "@", CN_OP_ARG2, "a", {NULL}, false},
       "operation \"bad\": compose (\"@\") takes 2 operands, not 1"},
      {{"bad", 1, NULL, CN_OP_MUL, "a", {NULL}, false}, "operation \"bad\": accumulation mul"},
      {{"bad", 4, NULL, CN_OP_ARG2, "a", {NULL}, false}, "operation \"bad\": 1 to 3 operands"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_MSG(cn_tensor_operation(g, &bad[i].code, (cn_tensor *[]){p, p, p}) == NULL, "case %zu",
              i);
    CHECK_HAS(cn_ctx_error(ctx), bad[i].message);
  }
  cn_ctx_destroy(ctx);
}

int main(void) {
  for (int b = 0; b < 2; b++) {
    test_operations_fd(backends[b]);
    test_ops_fd(backends[b]);
    test_einsum_fd(backends[b]);
    test_used_twice(backends[b]);
    test_prohibited(backends[b]);
    test_mlp_forward(backends[b], CN_PREC_SINGLE);
    test_mlp_forward(backends[b], CN_PREC_DOUBLE);
    test_bad_input(backends[b]);
  }
  CHECK_DONE();
}
