/* nanoGPT's character model (see gpt.h): the corpus through cn_data_load_text, the windows of a
 * step through cn_text_draw_windows into two buffers, one routine for forward + backward +
 * clipping + AdamW, one for the loss alone (evaluation), checkpoints through
 * cn_data_save/load_safetensors of cn_graph_state, and sampling through cn_text_sample on a graph
 * of one window. Only the public API (cannl.h) is used. */
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_MAX 512 /* 68 parameters of the 4-layer model and 3 Adam states each: 272 */

gpt_config gpt_defaults(void) {
  return (gpt_config){.n_layer = 4,
                      .n_head = 4,
                      .n_embd = 128,
                      .context = 64,
                      .batch = 12,
                      .steps = 2000,
                      .warmup = 100,
                      .lr = 1e-3,
                      .min_lr = 1e-4,
                      .beta1 = 0.9,
                      .beta2 = 0.99,
                      .weight_decay = 0.1,
                      .clip = 1.0,
                      .seed = 0,
                      .data = NULL,
                      .checkpoint = NULL,
                      .backend = CN_BACKEND_C};
}

const char *gpt_error(const gpt *m) {
  if (m->message[0]) return m->message;
  return m->ctx && *cn_ctx_error(m->ctx) ? cn_ctx_error(m->ctx) : "out of memory";
}

static cn_status fail(cn_ctx *ctx) {
  return cn_ctx_status(ctx) != CN_OK ? cn_ctx_status(ctx) : CN_ERR_NOMEM;
}

double gpt_learning_rate(const gpt_config *cfg, int64_t step) {
  if (step < cfg->warmup) return cfg->lr * (double)(step + 1) / (double)cfg->warmup;
  int64_t span = cfg->steps - cfg->warmup > 1 ? cfg->steps - cfg->warmup : 1;
  double ratio = (double)(step - cfg->warmup) / (double)span;
  return cfg->min_lr + 0.5 * (1 + cos(3.14159265358979323846 * ratio)) * (cfg->lr - cfg->min_lr);
}

/* ---- The model ------------------------------------------------------------------------------ */

static cn_tensor *op2(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b) {
  return a && b ? cn_tensor_apply(g, op, 2, (cn_tensor *[]){a, b}) : NULL;
}

/* A parameter of the given output axes, normal with standard deviation 0.02 (nanoGPT's
 * embeddings). */
static cn_tensor *embedding(cn_graph *g, const char *label, int64_t rows, int64_t cols) {
  const int64_t dims[2] = {rows, cols};
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {2, dims, NULL}};
  cn_tensor *init = op2(g, CN_OP_MUL, cn_tensor_number(g, 0.02), cn_tensor_normal(g));
  return init ? cn_tensor_param(g, label, &d, init) : NULL;
}

/* The logits [B, T | -> V] of token ids [B; T] (a buffer): wte[ids] + wpe, the blocks, ln_f, and
 * the head tied to wte. The parameters are new tensors of g, labeled as nanoGPT names them.
 * last: the last block (and so ln_f and the head) for the last position only, [B, 1 | -> V]: the
 * next token's logits, what sampling reads. */
static cn_tensor *model(cn_graph *g, const gpt_config *cfg, int vocab, cn_tensor *ids, bool last) {
  cn_tensor *wte = embedding(g, "wte", vocab, cfg->n_embd);
  cn_tensor *wpe = embedding(g, "wpe", cfg->context, cfg->n_embd);
  cn_tensor *x = wte && ids ? cn_tensor_gather(g, wte, ids) : NULL;
  /* the position embedding's rows are the window's positions 0 .. T - 1 in order: wpe itself */
  x = x && wpe ? cn_tensor_outer_sum(g, "b,t|->d; t,d => b,t|->d", x, wpe) : NULL;
  for (int l = 0; l < cfg->n_layer && x; l++) {
    const cn_attention att = {cfg->n_head, cfg->n_layer, NULL, NULL, last && l == cfg->n_layer - 1};
    char prefix[16];
    snprintf(prefix, sizeof prefix, "h%d", l);
    x = cn_tensor_transformer_block(g, x, prefix, &att);
  }
  cn_tensor *scale = cn_tensor_param(g, "ln_f.weight", NULL, cn_tensor_number(g, 1));
  cn_tensor *shift = cn_tensor_param(g, "ln_f.bias", NULL, cn_tensor_number(g, 0));
  x = x && scale && shift ? cn_tensor_layer_norm(g, x, scale, shift, 1e-5) : NULL;
  return x ? cn_tensor_einsum2(g, "b,t|->d; v,d => b,t|->v", x, wte) : NULL;
}

/* A buffer of token ids [rows; cols] (batch axes), which the host fills. */
static cn_tensor *ids_buffer(cn_graph *g, const char *label, int64_t rows, int64_t cols) {
  const int64_t dims[2] = {rows, cols};
  const cn_dims d = {{2, dims, NULL}, CN_AXES_NONE, CN_AXES_NONE};
  return cn_tensor_buffer(g, label, &d);
}

static cn_status build_graph(gpt *m) {
  cn_graph *g = m->g;
  const gpt_config *c = &m->cfg;
  const int64_t one = 1;
  m->x = ids_buffer(g, "x", c->batch, c->context);
  m->y = ids_buffer(g, "y", c->batch, c->context);
  m->lr = cn_tensor_buffer(g, "lr", &(cn_dims){CN_AXES_NONE, CN_AXES_NONE, {1, &one, NULL}});
  m->logits = m->x && m->y && m->lr ? model(g, c, m->text.vocab, m->x, false) : NULL;
  m->loss = m->logits ? cn_tensor_cross_entropy(g, m->logits, m->y) : NULL;
  if (!m->loss) return fail(m->ctx);
  cn_tensor *params[STATE_MAX];
  int n = cn_graph_params(g, m->loss, params, STATE_MAX);
  if (n < 0 || n > STATE_MAX) {
    snprintf(m->message, sizeof m->message, "the model has %d parameters, at most %d", n,
             STATE_MAX);
    return n < 0 ? fail(m->ctx) : CN_ERR_INVALID;
  }
  for (int i = 0; i < n; i++)
    if (strcmp(cn_tensor_label(params[i]), "wpe") != 0)
      m->params += cn_node_numel(cn_tensor_value(params[i]));
  return CN_OK;
}

static cn_status compile(gpt *m) {
  cn_ctx *ctx = m->ctx;
  cn_graph *g = m->g;
  cn_adam adam = cn_adam_defaults(m->lr);
  adam.beta1 = m->cfg.beta1;
  adam.beta2 = m->cfg.beta2;
  adam.weight_decay = m->cfg.weight_decay;
  adam.decoupled = adam.decay_matrices_only = true;
  cn_asgn *init = cn_graph_init_params(g, m->loss);
  cn_asgn *parts[3] = {init ? cn_graph_grad_update(g, m->loss) : NULL, NULL, NULL};
  parts[1] = parts[0] ? cn_graph_clip_grad_norm(g, m->loss, m->cfg.clip) : NULL;
  parts[2] = parts[1] ? cn_graph_adam_update(g, m->loss, &adam) : NULL;
  cn_asgn *step = parts[2] ? cn_asgn_seq(ctx, 3, parts) : NULL;
  cn_asgn *eval = step ? cn_graph_forward(g, m->loss) : NULL;
  if (!eval) return fail(ctx);
  cn_routine *routines[3];
  cn_status st = cn_routine_compile_many(ctx, 3, (const cn_asgn *[]){init, step, eval},
                                         (const char *[]){"gpt_init", "gpt_step", "gpt_eval"},
                                         m->cfg.backend, routines);
  if (st != CN_OK) return st;
  m->step = routines[1];
  m->eval = routines[2];
  st = cn_routine_run(routines[0]);
  cn_routine_free(routines[0]);
  return st;
}

cn_status gpt_build(gpt *m, const gpt_config *cfg) {
  memset(m, 0, sizeof *m);
  m->cfg = *cfg;
  if (!(m->ctx = cn_ctx_create())) return CN_ERR_NOMEM;
  if (cfg->n_layer < 1 || cfg->n_head < 1 || cfg->n_embd < 1 || cfg->context < 1 ||
      cfg->batch < 1 || cfg->steps < 1 || cfg->warmup < 0 || !(cfg->lr > 0) ||
      !(cfg->min_lr >= 0) || !(cfg->clip > 0)) {
    snprintf(m->message, sizeof m->message,
             "a configuration needs positive sizes, steps and rates (a warm-up >= 0)");
    return CN_ERR_INVALID;
  }
  const char *path = cfg->data ? cfg->data : GPT_DATA_DIR;
  cn_status st = cn_data_load_text(m->ctx, 1, &path, &m->text);
  if (st != CN_OK) return st;
  if (!(m->g = cn_graph_create(m->ctx))) return fail(m->ctx);
  if ((st = build_graph(m)) != CN_OK) return st;
  return compile(m);
}

/* ---- Training and evaluation ---------------------------------------------------------------- */

/* The windows of (seed, step) of a split into x and y. */
static cn_status load_windows(gpt *m, cn_text_split split, uint64_t seed, uint64_t step) {
  size_t n = (size_t)(m->cfg.batch * m->cfg.context);
  int32_t *ids = malloc(2 * n * sizeof *ids);
  double *v = malloc(n * sizeof *v);
  cn_status st = ids && v ? cn_text_draw_windows(m->ctx, &m->text, split, seed, step, m->cfg.batch,
                                                 m->cfg.context, ids, ids + n)
                          : CN_ERR_NOMEM;
  for (int k = 0; k < 2 && st == CN_OK; k++) {
    for (size_t i = 0; i < n; i++) v[i] = ids[k * n + i];
    st = cn_node_set_values(cn_tensor_value(k ? m->y : m->x), false, v, n);
  }
  free(ids);
  free(v);
  return st;
}

static cn_status read_loss(gpt *m, double *loss) {
  return cn_node_get_values(cn_tensor_value(m->loss), false, loss, 1);
}

cn_status gpt_train_step(gpt *m) {
  double lr = gpt_learning_rate(&m->cfg, m->steps_done);
  cn_status st = load_windows(m, CN_TEXT_TRAIN, m->cfg.seed, (uint64_t)m->steps_done);
  if (st == CN_OK) st = cn_node_set_values(cn_tensor_value(m->lr), false, &lr, 1);
  if (st == CN_OK) st = cn_routine_run(m->step);
  if (st == CN_OK) st = read_loss(m, &m->last_loss);
  if (st == CN_OK) m->steps_done++;
  return st;
}

cn_status gpt_evaluate(gpt *m, cn_text_split split, int batches, double *loss) {
  uint64_t seed = m->cfg.seed + (split == CN_TEXT_TRAIN);
  double sum = 0, one;
  cn_status st = CN_OK;
  for (int k = 0; k < batches && st == CN_OK; k++) {
    st = load_windows(m, split, seed, (uint64_t)k);
    if (st == CN_OK) st = cn_routine_run(m->eval);
    if (st == CN_OK) st = read_loss(m, &one);
    sum += one;
  }
  *loss = sum / batches;
  return st;
}

cn_status gpt_record_eval(gpt *m, int batches) {
  if (m->n_evals == GPT_MAX_EVALS) {
    snprintf(m->message, sizeof m->message, "more than %d evaluations", GPT_MAX_EVALS);
    return CN_ERR_INVALID;
  }
  int i = m->n_evals;
  cn_status st = gpt_evaluate(m, CN_TEXT_TRAIN, batches, &m->evals_train[i]);
  if (st == CN_OK) st = gpt_evaluate(m, CN_TEXT_VALID, batches, &m->evals_valid[i]);
  if (st == CN_OK) m->evals_step[m->n_evals++] = m->steps_done;
  return st;
}

/* ---- Checkpoints ----------------------------------------------------------------------------
 * The training state (cn_graph_state: parameters and Adam's moments and steps) under the tensors'
 * labels, and in the metadata what must agree for a resume to continue the same run and the
 * evaluations so far. */

static void identity(const gpt *m, char *out, size_t cap) {
  const gpt_config *c = &m->cfg;
  snprintf(out, cap,
           "gpt layers %d heads %d embd %lld context %lld batch %lld steps %lld warmup %lld "
           "lr %.17g to %.17g betas %.17g %.17g decay %.17g clip %.17g seed %llu vocab %d "
           "tokens %lld",
           c->n_layer, c->n_head, (long long)c->n_embd, (long long)c->context, (long long)c->batch,
           (long long)c->steps, (long long)c->warmup, c->lr, c->min_lr, c->beta1, c->beta2,
           c->weight_decay, c->clip, (unsigned long long)c->seed, m->text.vocab,
           (long long)m->text.count);
}

static int training_state(gpt *m, cn_named_node *state) {
  int n = cn_graph_state(m->g, m->loss, state, STATE_MAX);
  if (n > STATE_MAX)
    snprintf(m->message, sizeof m->message, "the training state has %d tensors, at most %d", n,
             STATE_MAX);
  return n > STATE_MAX ? -1 : n;
}

cn_status gpt_save(gpt *m) {
  if (!m->cfg.checkpoint) return CN_OK;
  static cn_named_node state[STATE_MAX];
  int n = training_state(m, state);
  if (n < 0) return m->message[0] ? CN_ERR_INVALID : fail(m->ctx);
  char run[512], done[32], evals[GPT_MAX_EVALS * 64 + 1];
  identity(m, run, sizeof run);
  snprintf(done, sizeof done, "%lld", (long long)m->steps_done);
  size_t at = 0;
  evals[0] = '\0';
  for (int i = 0; i < m->n_evals; i++)
    at += (size_t)snprintf(evals + at, sizeof evals - at, "%s%lld %.17g %.17g", i ? ";" : "",
                           (long long)m->evals_step[i], m->evals_train[i], m->evals_valid[i]);
  const cn_metadata_entry meta[3] = {{"run", run}, {"steps_done", done}, {"evals", evals}};
  return cn_data_save_safetensors(m->ctx, m->cfg.checkpoint, n, state, 3, meta);
}

static const char *meta_value(int n, const cn_metadata_entry *meta, const char *key) {
  for (int i = 0; i < n; i++)
    if (strcmp(meta[i].key, key) == 0) return meta[i].value;
  return NULL;
}

/* The evaluations of the metadata ("STEP TRAIN VALID;..."); false when unreadable. */
static bool parse_evals(gpt *m, const char *text) {
  m->n_evals = 0;
  while (*text) {
    long long step;
    int used;
    if (m->n_evals == GPT_MAX_EVALS ||
        sscanf(text, "%lld %lf %lf%n", &step, &m->evals_train[m->n_evals],
               &m->evals_valid[m->n_evals], &used) != 3)
      return false;
    m->evals_step[m->n_evals++] = step;
    text += used;
    if (*text == ';') text++;
  }
  return true;
}

cn_status gpt_resume(gpt *m) {
  if (!m->cfg.checkpoint) {
    snprintf(m->message, sizeof m->message, "resume: no checkpoint file given");
    return CN_ERR_INVALID;
  }
  static cn_named_node state[STATE_MAX];
  int n = training_state(m, state);
  if (n < 0) return m->message[0] ? CN_ERR_INVALID : fail(m->ctx);
  int n_meta = 0;
  cn_metadata_entry *meta = NULL;
  cn_status st = cn_data_load_safetensors(m->ctx, m->cfg.checkpoint, n, state, &n_meta, &meta);
  if (st != CN_OK) return st;
  char run[512];
  identity(m, run, sizeof run);
  const char *saved = meta_value(n_meta, meta, "run"),
             *done = meta_value(n_meta, meta, "steps_done");
  const char *evals = meta_value(n_meta, meta, "evals");
  long long steps = done ? atoll(done) : -1;
  if (!saved || strcmp(saved, run) != 0 || steps < 0 || steps > m->cfg.steps || !evals ||
      !parse_evals(m, evals)) {
    snprintf(m->message, sizeof m->message,
             "%s: the checkpoint is of another run (\"%s\"; this run is \"%s\")", m->cfg.checkpoint,
             saved ? saved : "no run recorded", run);
    return CN_ERR_INVALID;
  }
  m->steps_done = steps;
  return CN_OK;
}

/* ---- Sampling ------------------------------------------------------------------------------- */

cn_status gpt_sampler_sync(gpt *m) {
  if (!m->sg) {
    if (!(m->sg = cn_graph_create(m->ctx))) return fail(m->ctx);
    m->window = ids_buffer(m->sg, "window", 1, m->cfg.context);
    m->window_logits = m->window ? model(m->sg, &m->cfg, m->text.vocab, m->window, true) : NULL;
    if (!m->window_logits) return fail(m->ctx);
  }
  static cn_tensor *from[STATE_MAX], *to[STATE_MAX];
  int n = cn_graph_params(m->g, m->loss, from, STATE_MAX);
  int k = cn_graph_params(m->sg, m->window_logits, to, STATE_MAX);
  if (n < 0 || k < 0) return fail(m->ctx);
  if (n != k || n > STATE_MAX) {
    snprintf(m->message, sizeof m->message, "the sampling model has %d parameters, not %d", k, n);
    return CN_ERR_INVALID;
  }
  cn_status st = CN_OK;
  for (int i = 0; i < n && st == CN_OK; i++) {
    cn_node *a = cn_tensor_value(from[i]), *b = cn_tensor_value(to[i]);
    size_t cells = a && b ? (size_t)cn_node_numel(a) : 0;
    double *v = cells ? malloc(cells * sizeof *v) : NULL;
    if (!a || !b)
      st = fail(m->ctx);
    else if (strcmp(cn_tensor_label(from[i]), cn_tensor_label(to[i])) != 0 ||
             cn_node_numel(b) != (int64_t)cells) {
      snprintf(m->message, sizeof m->message,
               "the sampling model's parameter %d is \"%s\", not \"%s\"", i, cn_tensor_label(to[i]),
               cn_tensor_label(from[i]));
      st = CN_ERR_INVALID;
    } else if (!v)
      st = CN_ERR_NOMEM;
    else if ((st = cn_node_get_values(a, false, v, cells)) == CN_OK)
      st = cn_node_set_values(b, false, v, cells);
    free(v);
  }
  return st;
}

cn_status gpt_sample(gpt *m, int64_t count, double temperature, uint64_t seed, char *out) {
  const cn_sample_options o = {count, temperature, seed, NULL, 0};
  return cn_text_sample(m->sg, &m->text, m->window, m->window_logits, m->cfg.backend, &o, out);
}

void gpt_destroy(gpt *m) {
  cn_routine_free(m->step);
  cn_routine_free(m->eval);
  cn_text_free(&m->text);
  cn_ctx_destroy(m->ctx);
  memset(m, 0, sizeof *m);
}
