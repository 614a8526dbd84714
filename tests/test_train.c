/* Training utilities (issue 5 item 4) on a tiny model, loss = sum_i (w . x_i + b - y_i)^2 with
 * w |2-> and b scalar parameters, in double precision, checked step by step against the same
 * model and optimizer written in plain C (and the first step against values computed by hand):
 *   - sgd_update: plain SGD, weight decay, momentum, Nesterov with weight decay, forward +
 *     backward + update compiled as ONE routine (cn_asgn_seq of grad_update and sgd_update);
 *   - a learning-rate schedule written as a tensor expression over a static step symbol,
 *     bound with cn_routine_bind (values, unbound and out-of-range errors);
 *   - a batch loop: data with batch axes [4, 3] sliced by a static index symbol with range 4.
 * Every case runs on the interpreter and on generated C. */
#include "check.h"

#include "cannl.h"

static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};
static const char *const backend_names[2] = {"interp", "c"};

/* ---- The model in plain C ---------------------------------------------------------------- */

typedef struct {
  double momentum, weight_decay;
  bool nesterov;
} sgd_case;

/* The loss over n examples and its gradients. */
static double ref_loss(const double *x, const double *y, int n, const double *w, double b,
                       double *gw, double *gb) {
  double loss = 0;
  gw[0] = gw[1] = *gb = 0;
  for (int i = 0; i < n; i++) {
    double r = w[0] * x[2 * i] + w[1] * x[2 * i + 1] + b - y[i];
    loss += r * r;
    gw[0] += 2 * r * x[2 * i];
    gw[1] += 2 * r * x[2 * i + 1];
    *gb += 2 * r;
  }
  return loss;
}

/* One parameter cell: delta = g + wd p; m = mu m + delta; delta = nesterov ? delta + mu m : m;
 * p -= lr delta (without momentum, delta itself). */
static void ref_sgd(double *p, double *m, double g, double lr, const sgd_case *c) {
  double delta = g + c->weight_decay * *p;
  if (c->momentum != 0) {
    *m = c->momentum * *m + delta;
    delta = c->nesterov ? delta + c->momentum * *m : *m;
  }
  *p -= lr * delta;
}

typedef struct {
  double w[2], b, mw[2], mb;
} ref_state;

/* One training step of the plain-C model; returns the loss before the update. */
static double ref_step(ref_state *s, const double *x, const double *y, int n, double lr,
                       const sgd_case *c) {
  double gw[2], gb;
  double loss = ref_loss(x, y, n, s->w, s->b, gw, &gb);
  for (int j = 0; j < 2; j++) ref_sgd(&s->w[j], &s->mw[j], gw[j], lr, c);
  ref_sgd(&s->b, &s->mb, gb, lr, c);
  return loss;
}

/* ---- The model in cannl ------------------------------------------------------------------- */

static const double x3[6] = {1, 2, 3, -1, 0, 1}, y3[3] = {1, -1, 2};
static const double w_init[2] = {0.5, -0.25}, b_init = 0.1;

typedef struct {
  cn_ctx *ctx;
  cn_graph *g;
  cn_tensor *w, *b, *loss;
} tiny;

static const cn_dims scalar_dims = {{0, NULL, NULL}, {0, NULL, NULL}, {0, NULL, NULL}};

/* loss = einsum "...|... => 0" ((w * x + b - y)^2): the sum over x's batch axes. */
static bool tiny_build(tiny *t, cn_tensor *x, cn_tensor *y) {
  cn_graph *g = t->g;
  const int64_t two = 2;
  const cn_dims w_dims = {CN_AXES_NONE, {1, &two, NULL}, CN_AXES_NONE};
  t->w = cn_tensor_param(g, "w", &w_dims, cn_tensor_data(g, "w_init", &w_dims, w_init, 2));
  t->b =
      cn_tensor_param(g, "b", &scalar_dims, cn_tensor_data(g, "b_init", &scalar_dims, &b_init, 1));
  CHECK_MSG(t->w && t->b, "%s", cn_ctx_error(t->ctx));
  if (!t->w || !t->b) return false;
  cn_tensor *f = cn_tensor_apply(
      g, CN_OP_ADD, 2, (cn_tensor *[]){cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, t->w, x), t->b});
  cn_tensor *r = f ? cn_tensor_apply(g, CN_OP_SUB, 2, (cn_tensor *[]){f, y}) : NULL;
  cn_tensor *sq = r ? cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){r, r}) : NULL;
  t->loss = sq ? cn_tensor_einsum(g, "...|... => 0", CN_OP_ADD, CN_OP_ID, 1, &sq) : NULL;
  CHECK_MSG(t->loss != NULL, "%s", cn_ctx_error(t->ctx));
  return t->loss != NULL;
}

static bool tiny_new(tiny *t) {
  t->ctx = cn_ctx_create();
  t->g = cn_graph_create(t->ctx);
  cn_graph_set_prec(t->g, CN_PREC_DOUBLE);
  return t->g != NULL;
}

static double read1(cn_tensor *t) {
  double v = NAN;
  cn_node *n = cn_tensor_value(t);
  CHECK(n && cn_node_get_values(n, false, &v, 1) == CN_OK);
  return v;
}

static void read_params(const tiny *t, double *w, double *b) {
  w[0] = w[1] = NAN;
  cn_node *n = cn_tensor_value(t->w);
  CHECK(n && cn_node_get_values(n, false, w, 2) == CN_OK);
  *b = read1(t->b);
}

static cn_routine *compile(cn_ctx *ctx, const cn_asgn *a, cn_backend_kind backend,
                           const char *name) {
  cn_routine *r = a ? cn_routine_compile(ctx, a, backend, name) : NULL;
  CHECK_MSG(r != NULL, "%s: %s", name, cn_ctx_error(ctx));
  return r;
}

/* Runs the parameters' init code and compiles grad_update + sgd_update as one routine. */
static cn_routine *tiny_step_routine(tiny *t, cn_backend_kind backend, const cn_sgd *sgd) {
  cn_routine *init = compile(t->ctx, cn_graph_init_params(t->g, t->loss), backend, "tiny_init");
  if (!init) return NULL;
  CHECK_MSG(cn_routine_run(init) == CN_OK, "%s", cn_ctx_error(t->ctx));
  cn_routine_free(init);
  cn_asgn *parts[2] = {cn_graph_grad_update(t->g, t->loss), NULL};
  parts[1] = parts[0] ? cn_graph_sgd_update(t->g, t->loss, sgd) : NULL;
  return compile(t->ctx, parts[1] ? cn_asgn_seq(t->ctx, 2, parts) : NULL, backend, "tiny_step");
}

/* ---- SGD variants -------------------------------------------------------------------------- */

static void test_sgd(cn_backend_kind backend, const sgd_case *c, bool hand_check) {
  tiny t;
  if (!tiny_new(&t)) return;
  const int64_t three = 3, two = 2;
  const cn_dims x_dims = {{1, &three, NULL}, CN_AXES_NONE, {1, &two, NULL}};
  const cn_dims y_dims = {{1, &three, NULL}, CN_AXES_NONE, CN_AXES_NONE};
  cn_tensor *x = cn_tensor_data(t.g, "x", &x_dims, x3, 6);
  cn_tensor *y = cn_tensor_data(t.g, "y", &y_dims, y3, 3);
  if (tiny_build(&t, x, y)) {
    const double lr = 0.1;
    const cn_sgd sgd = {cn_tensor_number(t.g, lr), c->momentum, c->weight_decay, c->nesterov};
    uint64_t compiles =
        cn_ctx_stat(t.ctx, CN_STAT_COMPILER_RUNS) + cn_ctx_stat(t.ctx, CN_STAT_CACHE_HITS);
    cn_routine *step = tiny_step_routine(&t, backend, &sgd);
    if (step && backend == CN_BACKEND_C) /* init + the one step routine */
      CHECK_INT(cn_ctx_stat(t.ctx, CN_STAT_COMPILER_RUNS) + cn_ctx_stat(t.ctx, CN_STAT_CACHE_HITS) -
                    compiles,
                2);
    ref_state ref = {{w_init[0], w_init[1]}, b_init, {0, 0}, 0};
    for (int s = 0; step && s < 4; s++) {
      uint64_t runs = cn_ctx_stat(t.ctx, CN_STAT_ROUTINE_RUNS);
      CHECK_MSG(cn_routine_run(step) == CN_OK, "%s", cn_ctx_error(t.ctx));
      CHECK_INT(cn_ctx_stat(t.ctx, CN_STAT_ROUTINE_RUNS) - runs, 1);
      double expected_loss = ref_step(&ref, x3, y3, 3, lr, c);
      double w[2], b;
      read_params(&t, w, &b);
      CHECK_NEAR(read1(t.loss), expected_loss, 1e-9 * fabs(expected_loss));
      CHECK_NEAR(w[0], ref.w[0], 1e-9);
      CHECK_NEAR(w[1], ref.w[1], 1e-9);
      CHECK_NEAR(b, ref.b, 1e-9);
      if (hand_check && s == 0) {
        /* f = (0.1, 1.85, -0.15), r = (-0.9, 2.85, -2.15), loss = 13.555; gradients
         * w: (15.3, -13.6), b: -0.4; lr 0.1: w = (-1.03, 1.11), b = 0.14 */
        CHECK_NEAR(read1(t.loss), 13.555, 1e-12);
        CHECK_NEAR(w[0], -1.03, 1e-12);
        CHECK_NEAR(w[1], 1.11, 1e-12);
        CHECK_NEAR(b, 0.14, 1e-12);
      }
    }
  }
  cn_ctx_destroy(t.ctx);
}

/* ---- A learning-rate schedule over a step symbol -------------------------------------------- */

static void test_schedule(cn_backend_kind backend) {
  tiny t;
  if (!tiny_new(&t)) return;
  enum { T = 4 };
  cn_symbol step_n = cn_symbol_create(t.ctx, "step_n", T);
  /* OCANNL's schedule: 0.1 * (2 T - step) / T, from 0.2 down to 0.1 */
  cn_graph *g = t.g;
  cn_tensor *two_t = cn_tensor_apply(
      g, CN_OP_MUL, 2, (cn_tensor *[]){cn_tensor_number(g, 2), cn_tensor_number(g, T)});
  cn_tensor *left =
      cn_tensor_apply(g, CN_OP_SUB, 2, (cn_tensor *[]){two_t, cn_tensor_embed_symbol(g, step_n)});
  cn_tensor *frac = cn_tensor_apply(g, CN_OP_DIV, 2, (cn_tensor *[]){left, cn_tensor_number(g, T)});
  cn_tensor *lr = cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){cn_tensor_number(g, 0.1), frac});
  CHECK_MSG(lr != NULL, "%s", cn_ctx_error(t.ctx));
  if (!lr) {
    cn_ctx_destroy(t.ctx);
    return;
  }
  cn_routine *fwd = compile(t.ctx, cn_graph_forward(g, lr), backend, "lr_forward");
  if (fwd) {
    CHECK_INT(cn_routine_run(fwd), CN_ERR_RUNTIME);
    CHECK_HAS(cn_ctx_error(t.ctx), "symbol 'step_n' is not bound");
    CHECK_INT(cn_routine_bind(fwd, step_n, T), CN_ERR_INVALID);
    CHECK_HAS(cn_ctx_error(t.ctx), "value 4 of symbol 'step_n' is outside its range [0, 4)");
    const double expected[T] = {0.2, 0.175, 0.15, 0.125};
    for (int s = 0; s < T; s++) {
      CHECK(cn_routine_bind(fwd, step_n, s) == CN_OK);
      CHECK(cn_routine_run(fwd) == CN_OK);
      CHECK_NEAR(read1(lr), expected[s], 1e-15);
    }
  }

  /* the schedule drives an update: plain SGD with lr(step) */
  const int64_t three = 3, two = 2;
  const cn_dims x_dims = {{1, &three, NULL}, CN_AXES_NONE, {1, &two, NULL}};
  const cn_dims y_dims = {{1, &three, NULL}, CN_AXES_NONE, CN_AXES_NONE};
  cn_tensor *x = cn_tensor_data(g, "x", &x_dims, x3, 6);
  cn_tensor *y = cn_tensor_data(g, "y", &y_dims, y3, 3);
  if (tiny_build(&t, x, y)) {
    const cn_sgd sgd = {lr, 0, 0, false};
    const sgd_case plain = {0, 0, false};
    cn_routine *step = tiny_step_routine(&t, backend, &sgd);
    ref_state ref = {{w_init[0], w_init[1]}, b_init, {0, 0}, 0};
    for (int s = 0; step && s < T; s++) {
      CHECK(cn_routine_bind(step, step_n, s) == CN_OK);
      CHECK_MSG(cn_routine_run(step) == CN_OK, "%s", cn_ctx_error(t.ctx));
      double expected_loss = ref_step(&ref, x3, y3, 3, 0.1 * (2.0 * T - s) / T, &plain);
      double w[2], b;
      read_params(&t, w, &b);
      CHECK_NEAR(read1(t.loss), expected_loss, 1e-9 * fabs(expected_loss));
      CHECK_NEAR(w[0], ref.w[0], 1e-9 * fmax(1, fabs(ref.w[0])));
      CHECK_NEAR(w[1], ref.w[1], 1e-9 * fmax(1, fabs(ref.w[1])));
      CHECK_NEAR(b, ref.b, 1e-9 * fmax(1, fabs(ref.b)));
      /* the first step ran with lr 0.2: w = 0.5 - 0.2 * 15.3 = -2.56 */
      if (s == 0) CHECK_NEAR(w[0], -2.56, 1e-12);
    }
  }
  cn_ctx_destroy(t.ctx);
}

/* ---- A batch loop over a static index symbol with a range ---------------------------------- */

static void test_batch_loop(cn_backend_kind backend) {
  enum { BATCHES = 4, B = 3, EPOCHS = 2 };
  const double xs[BATCHES * B * 2] = {1,   2,    3,  -1,  0,   1,    0.5, 0.5, -1, 2,  1, 1,
                                      0.2, -0.3, -2, 0.5, 1.5, -1.5, 0,   -1,  2,  -2, 1, 0.5};
  const double ys[BATCHES * B] = {1, -1, 2, 0.5, 1, -0.5, 0.2, -1, 1.5, 0, 1, -1};
  tiny t;
  if (!tiny_new(&t)) return;
  cn_graph *g = t.g;
  cn_symbol batch_n = cn_symbol_create(t.ctx, "batch_n", BATCHES);
  const int64_t batch_dims[2] = {BATCHES, B}, two = 2;
  const cn_dims x_dims = {{2, batch_dims, NULL}, CN_AXES_NONE, {1, &two, NULL}};
  const cn_dims y_dims = {{2, batch_dims, NULL}, CN_AXES_NONE, CN_AXES_NONE};
  cn_tensor *x = cn_tensor_batch_slice(g, cn_tensor_data(g, "x", &x_dims, xs, 24), batch_n);
  cn_tensor *y = cn_tensor_batch_slice(g, cn_tensor_data(g, "y", &y_dims, ys, 12), batch_n);
  CHECK_MSG(x && y, "%s", cn_ctx_error(t.ctx));
  if (x && y && tiny_build(&t, x, y)) {
    CHECK_STR(cn_tensor_shape(x), "3|->2");
    const sgd_case c = {0.5, 0.01, false};
    const double lr = 0.05;
    const cn_sgd sgd = {cn_tensor_number(g, lr), c.momentum, c.weight_decay, c.nesterov};
    cn_routine *step = tiny_step_routine(&t, backend, &sgd);
    if (step) {
      CHECK_INT(cn_routine_run(step), CN_ERR_RUNTIME);
      CHECK_HAS(cn_ctx_error(t.ctx), "symbol 'batch_n' is not bound");
      CHECK_INT(cn_routine_bind(step, batch_n, -1), CN_ERR_INVALID);
      CHECK_HAS(cn_ctx_error(t.ctx), "outside its range [0, 4)");
    }
    ref_state ref = {{w_init[0], w_init[1]}, b_init, {0, 0}, 0};
    for (int e = 0; step && e < EPOCHS; e++)
      for (int s = 0; s < BATCHES; s++) {
        CHECK(cn_routine_bind(step, batch_n, s) == CN_OK);
        CHECK_MSG(cn_routine_run(step) == CN_OK, "%s", cn_ctx_error(t.ctx));
        double expected_loss = ref_step(&ref, xs + 2 * B * s, ys + B * s, B, lr, &c);
        double w[2], b;
        read_params(&t, w, &b);
        CHECK_NEAR(read1(t.loss), expected_loss, 1e-9 * fmax(1, fabs(expected_loss)));
        CHECK_NEAR(w[0], ref.w[0], 1e-9);
        CHECK_NEAR(w[1], ref.w[1], 1e-9);
        CHECK_NEAR(b, ref.b, 1e-9);
        /* batch 1 on the initial parameters: f = (0.1, 1.85, -0.15) as in test_sgd */
        if (e == 0 && s == 0) CHECK_NEAR(read1(t.loss), 13.555, 1e-12);
      }
  }
  cn_ctx_destroy(t.ctx);
}

int main(void) {
  static const sgd_case cases[4] = {{0, 0, false},      /* plain */
                                    {0, 0.01, false},   /* weight decay */
                                    {0.9, 0, false},    /* momentum */
                                    {0.9, 0.01, true}}; /* Nesterov with weight decay */
  for (int b = 0; b < 2; b++) {
    int failed = check_failed_;
    for (int c = 0; c < 4; c++) test_sgd(backends[b], &cases[c], c == 0);
    test_schedule(backends[b]);
    test_batch_loop(backends[b]);
    if (check_failed_ != failed) fprintf(stderr, "(backend %s)\n", backend_names[b]);
  }
  CHECK_DONE();
}
