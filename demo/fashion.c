/* Fashion-MNIST classifiers (see fashion.h): the data through cn_data_load_idx and cn_dataset,
 * the two models, one routine for forward + backward + Adam over a training mini-batch (static
 * index `batch`), one for the test mini-batch's confusion matrix (static index `test_batch`),
 * checkpoints through cn_data_save/load_safetensors of cn_graph_state, and export through
 * cn_graph_export_c. Only the public API (cannl.h) is used. */
#include "fashion.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const fashion_class_names[FASHION_CLASSES] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

static const char *const data_files[4] = {"train-images-idx3-ubyte.gz",
                                          "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                                          "t10k-labels-idx1-ubyte.gz"};

#define TEST_BATCH_MAX 500
#define FASHION_MEAN   0.2860
#define FASHION_STD    0.3530
#define HIDDEN         128

static const char *data_dir(const char *dir) {
  return dir ? dir : FASHION_DATA_DIR;
}

bool fashion_data_available(const char *dir) {
  for (int k = 0; k < 4; k++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", data_dir(dir), data_files[k]);
    if (access(path, R_OK) != 0) return false;
  }
  return true;
}

static cn_status fail(cn_ctx *ctx) {
  return cn_ctx_status(ctx) != CN_OK ? cn_ctx_status(ctx) : CN_ERR_INVALID;
}

/* ---- The data ------------------------------------------------------------------------------ */

/* Images [N, 28, 28] (with a channel axis of 1 for the convnet) and labels [N], both bytes, the
 * first `limit` examples (0: all). */
static cn_status load_split(fashion *f, int first_file, int64_t limit, cn_array *out) {
  cn_ctx *ctx = f->ctx;
  for (int k = 0; k < 2; k++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", data_dir(f->cfg.data_dir), data_files[first_file + k]);
    cn_status st = cn_data_load_idx(ctx, path, &out[k]);
    if (st != CN_OK) return st;
  }
  cn_array *images = &out[0], *labels = &out[1];
  if (images->prec != CN_PREC_BYTE || images->rank != 3 || images->dims[1] != FASHION_SIDE ||
      images->dims[2] != FASHION_SIDE || labels->prec != CN_PREC_BYTE || labels->rank != 1 ||
      labels->dims[0] != images->dims[0]) {
    snprintf(f->message, sizeof f->message,
             "%s: expected byte images [N, 28, 28] and byte labels [N] in %s and %s",
             data_dir(f->cfg.data_dir), data_files[first_file], data_files[first_file + 1]);
    return CN_ERR_INVALID;
  }
  if (limit < 0 || limit > images->dims[0]) {
    snprintf(f->message, sizeof f->message, "%s has %lld examples, %lld asked for",
             data_files[first_file], (long long)images->dims[0], (long long)limit);
    return CN_ERR_INVALID;
  }
  if (limit > 0) images->dims[0] = labels->dims[0] = limit; /* row-major: a prefix */
  if (f->cfg.model == FASHION_CONVNET) images->dims[images->rank++] = 1;
  return CN_OK;
}

/* The largest divisor of n not above TEST_BATCH_MAX: every test example is evaluated. */
static int64_t test_batch_size(int64_t n) {
  for (int64_t b = n < TEST_BATCH_MAX ? n : TEST_BATCH_MAX; b > 1; b--)
    if (n % b == 0) return b;
  return 1;
}

/* ---- The models ---------------------------------------------------------------------------- */

/* Helpers that propagate a NULL without building anything, so the first failure's message is
 * the one left in the context. */
static cn_tensor *op2(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b) {
  return a && b ? cn_tensor_apply(g, op, 2, (cn_tensor *[]){a, b}) : NULL;
}
static cn_tensor *relu(cn_graph *g, cn_tensor *a) {
  return a ? cn_tensor_apply(g, CN_OP_RELU, 1, &a) : NULL;
}
static cn_tensor *dense(cn_graph *g, cn_tensor *w, cn_tensor *b, cn_tensor *x) {
  return w && x ? op2(g, CN_OP_ADD, cn_tensor_matmul(g, w, x), b) : NULL;
}
static cn_tensor *conv_stage(cn_graph *g, cn_tensor *k, cn_tensor *b, cn_tensor *x) {
  cn_tensor *c = x ? cn_tensor_conv2d(g, x, k, b, NULL) : NULL;
  cn_tensor *r = relu(g, c);
  return r ? cn_tensor_max_pool2d(g, r, 2, 0) : NULL;
}

static cn_tensor *param(fashion *f, const char *label, const cn_dims *dims, cn_tensor *init) {
  cn_tensor *p = init ? cn_tensor_param(f->g, label, dims, init) : NULL;
  if (p) f->params[f->n_params++] = p;
  return p;
}

/* The parameters, PyTorch's default scale: uniform in +-1/sqrt(fan_in) for weights and biases
 * (kaiming_uniform's bound sqrt(6 / fan_in) would be sqrt(6) times larger; xavier-like sizes
 * keep the first epochs stable with Adam). */
static cn_tensor *uniform_init(cn_graph *g, double fan_in) {
  cn_tensor *u = cn_tensor_uniform1(g);
  /* (2u - 1) / sqrt(fan_in) */
  return op2(
      g, CN_OP_MUL,
      op2(g, CN_OP_SUB, op2(g, CN_OP_MUL, cn_tensor_number(g, 2), u), cn_tensor_number(g, 1)),
      cn_tensor_number(g, 1 / sqrt(fan_in)));
}

static bool make_params(fashion *f) {
  cn_graph *g = f->g;
  const int64_t hidden = HIDDEN, classes = FASHION_CLASSES;
  const cn_dims hidden_dims = {CN_AXES_NONE, CN_AXES_NONE, {1, &hidden, NULL}};
  const cn_dims class_dims = {CN_AXES_NONE, CN_AXES_NONE, {1, &classes, NULL}};
  if (f->cfg.model == FASHION_MLP) {
    double fan = FASHION_SIDE * FASHION_SIDE;
    return param(f, "w1", NULL, uniform_init(g, fan)) &&
           param(f, "b1", &hidden_dims, uniform_init(g, fan)) &&
           param(f, "w2", NULL, uniform_init(g, HIDDEN)) &&
           param(f, "b2", &class_dims, uniform_init(g, HIDDEN));
  }
  const int64_t k1_in[3] = {3, 3, 1}, c1 = 16, k2_in[3] = {3, 3, 16}, c2 = 32;
  const cn_dims k1 = {CN_AXES_NONE, {3, k1_in, NULL}, {1, &c1, NULL}};
  const cn_dims b1 = {CN_AXES_NONE, CN_AXES_NONE, {1, &c1, NULL}};
  const cn_dims k2 = {CN_AXES_NONE, {3, k2_in, NULL}, {1, &c2, NULL}};
  const cn_dims b2 = {CN_AXES_NONE, CN_AXES_NONE, {1, &c2, NULL}};
  double fan3 = 7 * 7 * 32;
  return param(f, "k1", &k1, uniform_init(g, 9)) && param(f, "c1", &b1, uniform_init(g, 9)) &&
         param(f, "k2", &k2, uniform_init(g, 9 * 16)) &&
         param(f, "c2", &b2, uniform_init(g, 9 * 16)) &&
         param(f, "w3", NULL, uniform_init(g, fan3)) &&
         param(f, "b3", &hidden_dims, uniform_init(g, fan3)) &&
         param(f, "w4", NULL, uniform_init(g, HIDDEN)) &&
         param(f, "b4", &class_dims, uniform_init(g, HIDDEN));
}

/* The logits of images x (pixels / 255, any batch axes), standardized first by the training
 * set's pixel mean and standard deviation (0.2860, 0.3530: what torchvision's examples use). */
static cn_tensor *model(fashion *f, cn_tensor *x) {
  cn_graph *g = f->g;
  cn_tensor *const *p = f->params;
  x = op2(g, CN_OP_MUL, op2(g, CN_OP_SUB, x, cn_tensor_number(g, FASHION_MEAN)),
          cn_tensor_number(g, 1 / FASHION_STD));
  if (f->cfg.model == FASHION_MLP) return dense(g, p[2], p[3], relu(g, dense(g, p[0], p[1], x)));
  cn_tensor *h = conv_stage(g, p[2], p[3], conv_stage(g, p[0], p[1], x));
  return dense(g, p[6], p[7], relu(g, dense(g, p[4], p[5], h)));
}

/* A mini-batch of a data set's images as floats in [0, 1], and its labels. */
static cn_tensor *pixels(cn_graph *g, cn_tensor *images, cn_symbol index) {
  cn_tensor *slice = cn_tensor_batch_slice(g, images, index);
  return op2(g, CN_OP_MUL, slice, cn_tensor_number(g, 1.0 / 255));
}

static cn_status build_graph(fashion *f) {
  cn_ctx *ctx = f->ctx;
  cn_graph *g = f->g;
  if (!make_params(f)) return fail(ctx);
  cn_tensor *images = cn_dataset_tensor(f->train, 0), *labels = cn_dataset_tensor(f->train, 1);
  /* data parallel across the devices and, under MPI (cn_dist_init before), the ranks */
  const int shards = (f->cfg.devices > 1 ? f->cfg.devices : 1) * cn_dist_size();
  if (shards > 1) { /* the model reads one shard of the data set's batches (fashion_train_epoch) */
    const int64_t side = FASHION_SIDE;
    const int64_t batch[2] = {cn_dataset_batches(f->train), f->cfg.batch_size / shards};
    const int64_t dims[3] = {side, side, 1};
    const cn_dims image_dims = {
        {2, batch, NULL}, CN_AXES_NONE, {f->cfg.model == FASHION_MLP ? 2 : 3, dims, NULL}};
    const cn_dims label_dims = {{2, batch, NULL}, CN_AXES_NONE, CN_AXES_NONE};
    images = f->shard_images = cn_tensor_buffer(g, "train_shard_images", &image_dims);
    labels = f->shard_labels = cn_tensor_buffer(g, "train_shard_labels", &label_dims);
  }
  cn_tensor *logits = model(f, pixels(g, images, f->batch));
  cn_tensor *y = cn_tensor_batch_slice(g, labels, f->batch);
  /* data parallel: the shard's mean over the shards, its sum over the global batch size, so that
   * the all-reduced sum of the shards' gradients is the whole batch's (cn_dp_create) */
  f->loss = logits && y ? cn_tensor_cross_entropy(g, logits, y) : NULL;
  if (f->loss && shards > 1) f->loss = op2(g, CN_OP_DIV, f->loss, cn_tensor_number(g, shards));
  if (!f->loss) return fail(ctx);

  cn_tensor *test_images = cn_dataset_tensor(f->test, 0);
  cn_tensor *test_labels = cn_dataset_tensor(f->test, 1);
  cn_tensor *test_logits = model(f, pixels(g, test_images, f->test_batch));
  cn_tensor *test_y = cn_tensor_batch_slice(g, test_labels, f->test_batch);
  if (!test_logits || !test_y || !(f->confusion = cn_tensor_confusion(g, test_logits, test_y)))
    return fail(ctx);

  const int64_t side = FASHION_SIDE, image_dims[3] = {side, side, 1};
  const cn_dims image = {
      CN_AXES_NONE, CN_AXES_NONE, {f->cfg.model == FASHION_MLP ? 2 : 3, image_dims, NULL}};
  if (!(f->image = cn_tensor_buffer(g, "image", &image)) || !(f->image_logits = model(f, f->image)))
    return fail(ctx);
  return CN_OK;
}

static cn_status compile(fashion *f) {
  cn_ctx *ctx = f->ctx;
  cn_graph *g = f->g;
  /* lr = first + (last - first) * step_n / steps */
  double first = f->cfg.learning_rate, last = f->cfg.final_learning_rate;
  double steps = (double)f->cfg.epochs * (double)cn_dataset_batches(f->train);
  cn_tensor *progress = op2(g, CN_OP_MUL, cn_tensor_embed_symbol(g, f->step_n),
                            cn_tensor_number(g, (last - first) / steps));
  cn_adam adam = cn_adam_defaults(op2(g, CN_OP_ADD, cn_tensor_number(g, first), progress));
  cn_asgn *init = cn_graph_init_params(g, f->loss);
  cn_asgn *grad = init ? cn_graph_grad_update(g, f->loss) : NULL;
  cn_asgn *update = grad && adam.learning_rate ? cn_graph_adam_update(g, f->loss, &adam) : NULL;
  /* data parallel: the gradient and the update apart, the all-reduce between them */
  const bool dp = f->cfg.devices > 1 || cn_dist_size() > 1;
  cn_asgn *step = update && !dp ? cn_asgn_seq(ctx, 2, (cn_asgn *[]){grad, update}) : grad;
  cn_asgn *eval = step && update ? cn_graph_forward(g, f->confusion) : NULL;
  if (!eval) return fail(ctx);
  cn_routine *routines[4];
  cn_status st =
      cn_routine_compile_many(ctx, dp ? 4 : 3, (const cn_asgn *[]){init, step, eval, update},
                              (const char *[]){"fashion_init", dp ? "fashion_grad" : "fashion_step",
                                               "fashion_eval", "fashion_update"},
                              f->cfg.backend, routines);
  if (st != CN_OK) return st;
  f->eval = routines[2];
  st = cn_routine_run(routines[0]);
  cn_routine_free(routines[0]);
  if (st != CN_OK || !dp) {
    f->step = routines[1];
    return st;
  }
  f->dp = cn_dp_create(g, f->loss, routines[1], routines[3],
                       f->cfg.devices > 1 ? f->cfg.devices : 1, f->cfg.backend);
  return f->dp ? CN_OK : fail(ctx);
}

/* Data parallel: the data set's batches of this epoch, shard by shard onto the devices. */
static cn_status shard_epoch(fashion *f) {
  cn_tensor *sets[2] = {cn_dataset_tensor(f->train, 0), cn_dataset_tensor(f->train, 1)};
  cn_tensor *shards[2] = {f->shard_images, f->shard_labels};
  cn_status st = CN_OK;
  for (int k = 0; k < 2 && st == CN_OK; k++) {
    cn_node *node = cn_tensor_value(sets[k]);
    size_t count = node ? (size_t)cn_node_numel(node) : 0;
    double *values = node ? malloc(sizeof *values * count) : NULL;
    if (!values) return node ? CN_ERR_NOMEM : fail(f->ctx);
    st = cn_node_get_values(node, false, values, count);
    if (st == CN_OK) st = cn_dp_shard(f->dp, shards[k], 1, f->cfg.batch_size, values, count);
    free(values);
  }
  return st;
}

cn_status fashion_build(fashion *f, const fashion_config *cfg) {
  memset(f, 0, sizeof *f);
  f->cfg = *cfg;
  if (f->cfg.batch_size == 0) f->cfg.batch_size = 100;
  if (f->cfg.learning_rate == 0) f->cfg.learning_rate = 2e-3;
  if (f->cfg.final_learning_rate == 0) f->cfg.final_learning_rate = f->cfg.learning_rate / 20;
  if (f->cfg.epochs < 1) f->cfg.epochs = 1;
  if (!(f->ctx = cn_ctx_create())) return CN_ERR_NOMEM;
  if (f->cfg.epochs > FASHION_MAX_EPOCHS) { /* the curves' arrays hold that many */
    snprintf(f->message, sizeof f->message, "%d epochs: at most %d", f->cfg.epochs,
             FASHION_MAX_EPOCHS);
    return CN_ERR_INVALID;
  }
  cn_ctx *ctx = f->ctx;
  if (!(f->g = cn_graph_create(ctx))) return fail(ctx);
  cn_array train[2] = {0}, test[2] = {0};
  cn_status st = load_split(f, 0, cfg->train_examples, train);
  if (st == CN_OK) st = load_split(f, 2, cfg->test_examples, test);
  if (st == CN_OK &&
      !(f->train = cn_dataset_create(f->g, "train", 2, train, f->cfg.batch_size, true, cfg->seed)))
    st = fail(ctx);
  if (st == CN_OK && !(f->test = cn_dataset_create(f->g, "test", 2, test,
                                                   test_batch_size(test[0].dims[0]), false, 0)))
    st = fail(ctx);
  for (int k = 0; k < 2; k++) {
    cn_array_free(&train[k]);
    cn_array_free(&test[k]);
  }
  if (st != CN_OK) return st;
  f->batch = cn_symbol_create(ctx, "batch", cn_dataset_batches(f->train));
  f->test_batch = cn_symbol_create(ctx, "test_batch", cn_dataset_batches(f->test));
  f->step_n = cn_symbol_create(ctx, "step_n", f->cfg.epochs * cn_dataset_batches(f->train));
  if (f->batch < 0 || f->test_batch < 0 || f->step_n < 0) return fail(ctx);
  if ((st = build_graph(f)) != CN_OK) return st;
  return compile(f);
}

/* ---- Checkpoints ----------------------------------------------------------------------------
 * The training state (cn_graph_state: parameters and Adam's moments and step) under the tensors'
 * labels, and in the metadata what must agree for a resume to continue the same run (model,
 * batch size, examples, seed) and the curves so far. */

#define STATE_MAX 64

static const char *model_name(fashion_model m) {
  return m == FASHION_MLP ? "mlp" : "convnet";
}

/* The run's identity, compared on resume. */
static void identity(const fashion *f, char *out, size_t cap) {
  snprintf(out, cap, "%s epochs %d batch %lld train %lld test %lld seed %llu lr %.17g to %.17g",
           model_name(f->cfg.model), f->cfg.epochs, (long long)f->cfg.batch_size,
           (long long)cn_dataset_examples(f->train), (long long)cn_dataset_examples(f->test),
           (unsigned long long)f->cfg.seed, f->cfg.learning_rate, f->cfg.final_learning_rate);
}

/* The training state into state[STATE_MAX]: its count, or -1 (a message set) when it does not
 * fit, since a checkpoint without Adam's state (the last entries) would not resume the run. */
static int training_state(fashion *f, cn_named_node *state) {
  int n = cn_graph_state(f->g, f->loss, state, STATE_MAX);
  if (n > STATE_MAX)
    snprintf(f->message, sizeof f->message, "the training state has %d tensors, at most %d", n,
             STATE_MAX);
  return n > STATE_MAX ? -1 : n;
}

static cn_status save_checkpoint(fashion *f) {
  cn_named_node state[STATE_MAX];
  int n = training_state(f, state);
  if (n < 0) return f->message[0] ? CN_ERR_INVALID : fail(f->ctx);
  char run[256], done[32];
  identity(f, run, sizeof run);
  snprintf(done, sizeof done, "%d", f->epochs_done);
  size_t cap = (size_t)f->epochs_done * 64 + 1;
  char *curves = malloc(cap);
  if (!curves) return CN_ERR_NOMEM;
  size_t at = 0;
  curves[0] = '\0';
  for (int e = 0; e < f->epochs_done; e++)
    at += (size_t)snprintf(curves + at, cap - at, "%s%.17g %.17g", e ? ";" : "", f->epoch_loss[e],
                           f->test_accuracy[e]);
  const cn_metadata_entry meta[3] = {{"run", run}, {"epochs_done", done}, {"curves", curves}};
  cn_status st = cn_data_save_safetensors(f->ctx, f->cfg.checkpoint, n, state, 3, meta);
  free(curves);
  return st;
}

static const char *meta_value(int n, const cn_metadata_entry *meta, const char *key) {
  for (int i = 0; i < n; i++)
    if (strcmp(meta[i].key, key) == 0) return meta[i].value;
  return NULL;
}

cn_status fashion_resume(fashion *f) {
  if (!f->cfg.checkpoint) {
    snprintf(f->message, sizeof f->message, "resume: no checkpoint file given");
    return CN_ERR_INVALID;
  }
  cn_named_node state[STATE_MAX];
  int n = training_state(f, state);
  if (n < 0) return f->message[0] ? CN_ERR_INVALID : fail(f->ctx);
  int n_meta = 0;
  cn_metadata_entry *meta = NULL;
  cn_status st = cn_data_load_safetensors(f->ctx, f->cfg.checkpoint, n, state, &n_meta, &meta);
  if (st != CN_OK) return st;
  char run[256];
  identity(f, run, sizeof run);
  const char *saved = meta_value(n_meta, meta, "run"),
             *done = meta_value(n_meta, meta, "epochs_done");
  const char *curves = meta_value(n_meta, meta, "curves");
  int epochs = done ? atoi(done) : -1;
  if (!saved || strcmp(saved, run) != 0 || epochs < 0 || epochs > FASHION_MAX_EPOCHS || !curves) {
    snprintf(f->message, sizeof f->message,
             "%s: the checkpoint is of another run (\"%s\"; this run is \"%s\")", f->cfg.checkpoint,
             saved ? saved : "no run recorded", run);
    return CN_ERR_INVALID;
  }
  for (int e = 0; e < epochs; e++) {
    char *end;
    f->epoch_loss[e] = strtod(curves, &end);
    f->test_accuracy[e] = strtod(end, &end);
    if (end == curves || (*end != ';' && *end != '\0')) {
      snprintf(f->message, sizeof f->message, "%s: unreadable curves in the metadata",
               f->cfg.checkpoint);
      return CN_ERR_INVALID;
    }
    curves = *end ? end + 1 : end;
  }
  f->epochs_done = epochs;
  return CN_OK;
}

/* ---- Training and evaluation --------------------------------------------------------------- */

cn_status fashion_evaluate(fashion *f, double *accuracy) {
  cn_status st = cn_dataset_begin_epoch(f->test, 0);
  double counts[FASHION_CLASSES * FASHION_CLASSES];
  memset(f->confusion_counts, 0, sizeof f->confusion_counts);
  for (int64_t b = 0; b < cn_dataset_batches(f->test) && st == CN_OK; b++) {
    if ((st = cn_routine_bind(f->eval, f->test_batch, b)) == CN_OK &&
        (st = cn_routine_run(f->eval)) == CN_OK)
      st = cn_node_get_values(cn_tensor_value(f->confusion), false, counts,
                              FASHION_CLASSES * FASHION_CLASSES);
    for (int c = 0; c < FASHION_CLASSES * FASHION_CLASSES && st == CN_OK; c++)
      f->confusion_counts[c] += (int64_t)counts[c];
  }
  if (st != CN_OK) return st;
  int64_t correct = 0, total = 0;
  for (int c = 0; c < FASHION_CLASSES * FASHION_CLASSES; c++) {
    total += f->confusion_counts[c];
    if (c / FASHION_CLASSES == c % FASHION_CLASSES) correct += f->confusion_counts[c];
  }
  *accuracy = total ? (double)correct / (double)total : 0;
  return CN_OK;
}

cn_status fashion_train_epoch(fashion *f, fashion_progress_fn progress, void *user) {
  int e = f->epochs_done;
  if (e >= f->cfg.epochs) {
    snprintf(f->message, sizeof f->message, "the run's %d epochs are done", f->cfg.epochs);
    return CN_ERR_INVALID;
  }
  cn_status st = cn_dataset_begin_epoch(f->train, (uint64_t)e);
  if (st == CN_OK && f->dp) st = shard_epoch(f);
  int64_t steps = cn_dataset_batches(f->train);
  double sum = 0;
  cn_node *loss = cn_tensor_value(f->loss);
  for (int64_t b = 0; b < steps && st == CN_OK; b++) {
    double value;
    if (f->dp) {
      if ((st = cn_dp_bind(f->dp, f->batch, b)) == CN_OK &&
          (st = cn_dp_bind(f->dp, f->step_n, e * steps + b)) == CN_OK)
        st = cn_dp_step(f->dp);
    } else if ((st = cn_routine_bind(f->step, f->batch, b)) == CN_OK &&
               (st = cn_routine_bind(f->step, f->step_n, e * steps + b)) == CN_OK)
      st = cn_routine_run(f->step);
    if (st == CN_OK && (st = cn_node_get_values(loss, false, &value, 1)) == CN_OK) {
      sum += value;
      if (progress) progress(user, e, b + 1, steps, sum / (double)(b + 1));
    }
  }
  if (st == CN_OK) st = fashion_evaluate(f, &f->test_accuracy[e]);
  if (st != CN_OK) return st;
  f->epoch_loss[e] = sum / (double)steps;
  f->epochs_done = e + 1;
  return f->cfg.checkpoint ? save_checkpoint(f) : CN_OK;
}

/* ---- Export and prediction ----------------------------------------------------------------- */

cn_status fashion_export(fashion *f, const char *name, const char *dir) {
  return cn_graph_export_c(f->g, f->image, f->image_logits, name, dir);
}

cn_status fashion_predict(fashion *f, const float *pixels_in, int *klass) {
  if (!f->predict) {
    cn_asgn *code = cn_graph_forward(f->g, f->image_logits);
    if (!code ||
        !(f->predict = cn_routine_compile(f->ctx, code, f->cfg.backend, "fashion_predict")))
      return fail(f->ctx);
  }
  float logits[FASHION_CLASSES];
  cn_status st =
      cn_node_set_cells(cn_tensor_value(f->image), false, pixels_in, FASHION_SIDE * FASHION_SIDE);
  if (st == CN_OK) st = cn_routine_run(f->predict);
  if (st == CN_OK)
    st = cn_node_get_cells(cn_tensor_value(f->image_logits), false, logits, FASHION_CLASSES);
  if (st != CN_OK) return st;
  *klass = 0;
  for (int c = 1; c < FASHION_CLASSES; c++)
    if (logits[c] > logits[*klass]) *klass = c;
  return CN_OK;
}

const char *fashion_error(const fashion *f) {
  return f->message[0] ? f->message : f->ctx ? cn_ctx_error(f->ctx) : "out of memory";
}

void fashion_destroy(fashion *f) {
  cn_ctx_destroy(f->ctx); /* routines and data sets go with their context */
  f->ctx = NULL;
}
