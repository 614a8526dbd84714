/* The half-moons classifier of `make demo` (examples/moons.c): the data, the MLP
 * 2 -> 16 -> 16 -> 1 with relu, the hinge loss, SGD with weight decay and a decaying learning rate,
 * one routine for forward, backward and update (see moons.h). Shared by examples/moons.c,
 * bench/bench_moons.c and the tests of the model (tests/test_moons.c, test_notation_moons.c), so
 * the model and the training loop exist once. Only the public API (cannl.h) is used. */
#include "moons.h"

#include <string.h>

/* ---- The data ------------------------------------------------------------------------------ */

/* The library's half-moons generator (cn_dataset_half_moons): even points on the upper moon,
 * label +1, odd points on the lower one, label -1, so every batch of 10 holds five of each. */
void moons_generate(uint64_t seed, double noise, double *xy, double *labels) {
  cn_dataset_half_moons(seed, noise, MOONS_POINTS, xy, labels);
}

/* ---- The model ----------------------------------------------------------------------------- */

/* Helpers that propagate a NULL without building anything, so the first failure's message is
 * the one left in the context. */
static cn_tensor *moons_op2(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b) {
  return a && b ? cn_tensor_apply(g, op, 2, (cn_tensor *[]){a, b}) : NULL;
}
static cn_tensor *moons_relu(cn_graph *g, cn_tensor *a) {
  return a ? cn_tensor_apply(g, CN_OP_RELU, 1, &a) : NULL;
}
static cn_tensor *moons_matmul(cn_graph *g, cn_tensor *w, cn_tensor *x) {
  return w && x ? cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, w, x) : NULL;
}

/* f(x) = w3 * relu(b2 + w2 * relu(b1 + w1 * x)): one output per example (x's batch axes). */
static cn_tensor *moons_mlp(moons *m, cn_tensor *x) {
  cn_graph *g = m->g;
  cn_tensor *h1 = moons_relu(g, moons_op2(g, CN_OP_ADD, m->b1, moons_matmul(g, m->w1, x)));
  cn_tensor *h2 = moons_relu(g, moons_op2(g, CN_OP_ADD, m->b2, moons_matmul(g, m->w2, h1)));
  return moons_matmul(g, m->w3, h2);
}

static cn_status moons_fail(cn_ctx *ctx) {
  return cn_ctx_status(ctx) != CN_OK ? cn_ctx_status(ctx) : CN_ERR_INVALID;
}

/* Builds the graph, compiles the init and step routines and initializes the parameters. On
 * failure the context holds the message; moons_destroy releases everything either way. */
cn_status moons_build(moons *m, const moons_config *cfg) {
  memset(m, 0, sizeof *m); /* every field a defined start (m->dp NULL on one device) */
  m->cfg = *cfg;
  moons_generate(cfg->seed, MOONS_NOISE, m->xy, m->labels);
  if (!(m->ctx = cn_ctx_create())) return CN_ERR_NOMEM;
  cn_ctx *ctx = m->ctx;
  cn_graph *g = m->g = cn_graph_create(ctx);
  if (!g) return moons_fail(ctx);
  const int devices = cfg->devices > 1 ? cfg->devices : 1;
  /* data parallel across the devices and, under MPI (cn_dist_init before), the ranks */
  const int shards = devices * cn_dist_size();
  m->batch = cfg->batch > 0 ? cfg->batch : MOONS_BATCH;
  m->batches = MOONS_POINTS / m->batch;
  int64_t total_steps = (int64_t)cfg->epochs * m->batches;
  m->batch_n = cn_symbol_create(ctx, "batch_n", m->batches);
  m->step_n = cn_symbol_create(ctx, "step_n", total_steps);
  if (m->batch_n < 0 || m->step_n < 0) return moons_fail(ctx);

  /* the data: batch axes [steps per epoch, batch], the points' coordinates as one output axis;
   * data parallel, each device's node holds its shard of every batch (cn_dp_shard below) */
  const int64_t batch_dims[2] = {m->batches, m->batch / shards}, coords = 2;
  const size_t points_n = (size_t)(batch_dims[0] * batch_dims[1]);
  const cn_dims points_dims = {{2, batch_dims, NULL}, CN_AXES_NONE, {1, &coords, NULL}};
  const cn_dims labels_dims = {{2, batch_dims, NULL}, CN_AXES_NONE, CN_AXES_NONE};
  cn_tensor *points = cn_tensor_data(g, "moons", &points_dims, m->xy, 2 * points_n);
  cn_tensor *classes =
      points ? cn_tensor_data(g, "moons_classes", &labels_dims, m->labels, points_n) : NULL;
  if (!classes) return moons_fail(ctx);
  cn_tensor *x = cn_tensor_batch_slice(g, points, m->batch_n);
  cn_tensor *y = x ? cn_tensor_batch_slice(g, classes, m->batch_n) : NULL;
  if (!y) return moons_fail(ctx);

  /* parameters: only the biases' output size is given; the default init is 0.5 (uniform1 - 0.5) */
  const int64_t hidden = MOONS_HIDDEN;
  const cn_dims bias_dims = {CN_AXES_NONE, CN_AXES_NONE, {1, &hidden, NULL}};
  if (!(m->w1 = cn_tensor_param(g, "w1", NULL, NULL)) ||
      !(m->b1 = cn_tensor_param(g, "b1", &bias_dims, NULL)) ||
      !(m->w2 = cn_tensor_param(g, "w2", NULL, NULL)) ||
      !(m->b2 = cn_tensor_param(g, "b2", &bias_dims, NULL)) ||
      !(m->w3 = cn_tensor_param(g, "w3", NULL, NULL)))
    return moons_fail(ctx);

  /* hinge loss, summed over the batch (a device's shard) by an einsum and divided by the
   * (global) batch size: cn_dp_create's scaling rule */
  cn_tensor *margin = moons_relu(g, moons_op2(g, CN_OP_SUB, cn_tensor_number(g, 1),
                                              moons_op2(g, CN_OP_MUL, y, moons_mlp(m, x))));
  cn_tensor *sum =
      margin ? cn_tensor_einsum(g, "...|... => 0", CN_OP_ADD, CN_OP_ID, 1, &margin) : NULL;
  m->loss = moons_op2(g, CN_OP_DIV, sum, cn_tensor_number(g, m->batch));
  /* learning_rate = start - (start - end) * step_n / total_steps */
  cn_tensor *progress = moons_op2(g, CN_OP_DIV, cn_tensor_embed_symbol(g, m->step_n),
                                  cn_tensor_number(g, (double)total_steps));
  m->learning_rate = moons_op2(
      g, CN_OP_SUB, cn_tensor_number(g, MOONS_LR_START),
      moons_op2(g, CN_OP_MUL, cn_tensor_number(g, MOONS_LR_START - MOONS_LR_END), progress));
  if (!m->loss || !m->learning_rate || cn_tensor_set_label(m->loss, "loss") != CN_OK ||
      cn_tensor_set_label(m->learning_rate, "learning_rate") != CN_OK)
    return moons_fail(ctx);

  cn_asgn *init = cn_graph_init_params(g, m->loss);
  const cn_sgd sgd = {m->learning_rate, 0.0, MOONS_WEIGHT_DECAY, false};
  cn_asgn *parts[2] = {init ? cn_graph_grad_update(g, m->loss) : NULL, NULL};
  parts[1] = parts[0] ? cn_graph_sgd_update(g, m->loss, &sgd) : NULL;
  /* one device: forward, backward and update in one routine; data parallel, the gradient and
   * the update apart, the all-reduce between them */
  cn_asgn *step = parts[1] && shards == 1 ? cn_asgn_seq(ctx, 2, parts) : NULL;
  /* The routines compile at once (their C compilers run side by side on a cold cache). */
  const cn_asgn *code[3] = {init, step, NULL};
  const char *names[3] = {"moons_init", "moons_step", "moons_update"};
  if (shards > 1) code[1] = parts[0], code[2] = parts[1], names[1] = "moons_grad";
  cn_routine *routines[3];
  if (!parts[1] || !code[1] ||
      cn_routine_compile_many(ctx, shards > 1 ? 3 : 2, code, names, cfg->backend, routines) !=
          CN_OK)
    return moons_fail(ctx);
  cn_status st = cn_routine_run(routines[0]);
  cn_routine_free(routines[0]);
  if (st != CN_OK) return moons_fail(ctx);
  if (shards == 1) {
    m->step = routines[1];
    return CN_OK;
  }
  const size_t all = (size_t)(m->batches * m->batch);
  if (!(m->dp = cn_dp_create(g, m->loss, routines[1], routines[2], devices, cfg->backend)) ||
      cn_dp_shard(m->dp, points, 1, m->batch, m->xy, 2 * all) != CN_OK ||
      cn_dp_shard(m->dp, classes, 1, m->batch, m->labels, all) != CN_OK)
    return moons_fail(ctx);
  return CN_OK;
}

/* One training step (global step number `step`, batch step % batches); *loss is the batch's loss
 * before the update. */
cn_status moons_train_step(moons *m, int64_t step, double *loss) {
  if (m->dp ? cn_dp_bind(m->dp, m->batch_n, step % m->batches) != CN_OK ||
                  cn_dp_bind(m->dp, m->step_n, step) != CN_OK || cn_dp_step(m->dp) != CN_OK
            : cn_routine_bind(m->step, m->batch_n, step % m->batches) != CN_OK ||
                  cn_routine_bind(m->step, m->step_n, step) != CN_OK ||
                  cn_routine_run(m->step) != CN_OK)
    return moons_fail(m->ctx);
  cn_node *value = cn_tensor_value(m->loss);
  return value ? cn_node_get_values(value, false, loss, 1) : moons_fail(m->ctx);
}

/* All epochs; epoch_loss[e] is the mean batch loss of epoch e. */
cn_status moons_train(moons *m, double *epoch_loss, moons_progress_fn progress, void *user) {
  int64_t step = 0;
  for (int e = 0; e < m->cfg.epochs; e++) {
    double sum = 0;
    for (int b = 0; b < m->batches; b++, step++) {
      double loss;
      cn_status st = moons_train_step(m, step, &loss);
      if (st != CN_OK) return st;
      sum += loss;
      if (progress) progress(user, e, b + 1, sum / (b + 1));
    }
    epoch_loss[e] = sum / m->batches;
  }
  return CN_OK;
}

/* f at n points (xy as moons_generate lays them out), by a forward routine over all of them. */
cn_status moons_eval(moons *m, size_t n, const double *xy, double *f) {
  const int64_t batch = (int64_t)n, coords = 2;
  const cn_dims dims = {{1, &batch, NULL}, CN_AXES_NONE, {1, &coords, NULL}};
  cn_tensor *x = cn_tensor_data(m->g, "eval_points", &dims, xy, 2 * n);
  cn_tensor *out = x ? moons_mlp(m, x) : NULL;
  cn_asgn *forward = out ? cn_graph_forward(m->g, out) : NULL;
  cn_routine *r =
      forward ? cn_routine_compile(m->ctx, forward, m->cfg.backend, "moons_eval") : NULL;
  if (!r || cn_routine_run(r) != CN_OK) return moons_fail(m->ctx);
  cn_routine_free(r);
  cn_node *value = cn_tensor_value(out);
  return value ? cn_node_get_values(value, false, f, n) : moons_fail(m->ctx);
}

/* The fraction of the training points on the right side of the boundary, given f at them. */
double moons_accuracy(const moons *m, const double *f) {
  int correct = 0;
  for (int i = 0; i < MOONS_POINTS; i++) correct += (f[i] > 0) == (m->labels[i] > 0);
  return (double)correct / MOONS_POINTS;
}

void moons_destroy(moons *m) {
  cn_ctx_destroy(m->ctx); /* also frees the step routine */
  m->ctx = NULL;
}
