/* Device-resident nodes (issue 32): a node's copy on a device lives with the node, shared by every
 * routine run there, uploaded only when stale, brought back only when the host reads. On
 * "counting" (counting_backend.h: the interpreter on a device whose memory starts as garbage) a
 * small model trains N steps next to the same model on generated C:
 *   - the first step uploads exactly the step's nodes that have a host buffer (the parameters and
 *     the data; the rest is cleared on the device), each once; the later steps upload nothing,
 *     and no step downloads anything (the counting device's counters and the context's stats
 *     agree);
 *   - reading the loss and the parameters downloads each once, and they are the C backend's bits;
 *   - a host write between runs is seen by the next run (one upload, results the C model's);
 *   - a second routine sharing the nodes (the forward of the loss) transfers nothing;
 *   - a routine on the interpreter between device steps reads what the device wrote (brought
 *     back) and its writes reach the device (uploaded at the next step), and a raw host write
 *     (cn_node_buffer) reads back first and is uploaded once;
 *   - a checkpoint saves the device's values and loading one replaces newer device values;
 *   - cn_tensor_to_host, cn_node_current; the C context copies nothing.
 * A routine's scratch on the device: cleared there before each run, never on the host.
 * Runs are queued: the host waits for the device only when it reads or writes a node (test_async),
 * where a queued run's failure surfaces.
 * Also: the option "backend" (CN_BACKEND_DEFAULT, $CANNL_BACKEND, refusals with suggestions) and
 * the tuner going through the backend given: a non-tunable backend is never tuned, a tunable
 * wrapper of generated C ("ctuned") has its own compile_many and run called for the
 * candidates. */
#include "counting_backend.h"
#include "runtime/routine.h"

#include <stdio.h>

enum { BATCH = 6, IN = 3, HIDDEN = 4, STEPS = 5 };

static const double xs[BATCH * IN] = {0.5, -1,  2,    1.5, 0.25, -0.5, -2, 1,  0.75,
                                      1,   0.5, -1.5, 0,   2,    1,    -1, -1, 0.5};
static const double ys[BATCH] = {1, -0.5, 2, 0.25, -1, 1.5};
static const double w1_init[HIDDEN * IN] = {0.1, -0.2, 0.3,  0.4, 0.5, -0.6,
                                            0.7, 0.8,  -0.9, 0.2, 0.1, 0.05};
static const double b1_init[HIDDEN] = {0.01, -0.02, 0.03, 0.0};
static const double w2_init[HIDDEN] = {0.5, -0.25, 0.125, 0.75};

typedef struct {
  cn_ctx *ctx;
  cn_graph *g;
  cn_tensor *params[3]; /* w1, b1, w2 */
  cn_tensor *loss;
  cn_routine *step, *eval;
} model;

/* loss = sum over the batch of (w2 relu(w1 x + b1) - y)^2 / BATCH; SGD with learning rate 0.05.
 * The parameters are initialized on the interpreter (host values), the step (forward, backprop,
 * update) and the forward of the loss compiled for `backend`. */
static bool model_build(model *m, cn_backend_kind backend) {
  m->ctx = cn_ctx_create();
  m->g = cn_graph_create(m->ctx);
  cn_graph *g = m->g;
  cn_graph_set_prec(g, CN_PREC_SINGLE);
  const int64_t batch = BATCH, in = IN, hidden = HIDDEN;
  const cn_dims x_dims = {{1, &batch, NULL}, CN_AXES_NONE, {1, &in, NULL}};
  const cn_dims y_dims = {{1, &batch, NULL}, CN_AXES_NONE, CN_AXES_NONE};
  const cn_dims w1_dims = {CN_AXES_NONE, {1, &in, NULL}, {1, &hidden, NULL}};
  const cn_dims b1_dims = {CN_AXES_NONE, CN_AXES_NONE, {1, &hidden, NULL}};
  const cn_dims w2_dims = {CN_AXES_NONE, {1, &hidden, NULL}, CN_AXES_NONE};
  cn_tensor *x = cn_tensor_data(g, "x", &x_dims, xs, BATCH * IN);
  cn_tensor *y = cn_tensor_data(g, "y", &y_dims, ys, BATCH);
  m->params[0] = cn_tensor_param(g, "w1", &w1_dims,
                                 cn_tensor_data(g, "w1_init", &w1_dims, w1_init, HIDDEN * IN));
  m->params[1] =
      cn_tensor_param(g, "b1", &b1_dims, cn_tensor_data(g, "b1_init", &b1_dims, b1_init, HIDDEN));
  m->params[2] =
      cn_tensor_param(g, "w2", &w2_dims, cn_tensor_data(g, "w2_init", &w2_dims, w2_init, HIDDEN));
  CHECK_MSG(x && y && m->params[0] && m->params[1] && m->params[2], "%s", cn_ctx_error(m->ctx));
  if (!x || !y || !m->params[0] || !m->params[1] || !m->params[2]) return false;
  cn_tensor *h = cn_tensor_apply(
      g, CN_OP_ADD, 2,
      (cn_tensor *[]){cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, m->params[0], x), m->params[1]});
  cn_tensor *a = h ? cn_tensor_apply(g, CN_OP_RELU, 1, &h) : NULL;
  cn_tensor *f = a ? cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, m->params[2], a) : NULL;
  cn_tensor *r = f ? cn_tensor_apply(g, CN_OP_SUB, 2, (cn_tensor *[]){f, y}) : NULL;
  cn_tensor *sq = r ? cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){r, r}) : NULL;
  cn_tensor *sum = sq ? cn_tensor_einsum(g, "...|... => 0", CN_OP_ADD, CN_OP_ID, 1, &sq) : NULL;
  m->loss = sum ? cn_tensor_apply(g, CN_OP_DIV, 2, (cn_tensor *[]){sum, cn_tensor_number(g, BATCH)})
                : NULL;
  CHECK_MSG(m->loss != NULL, "%s", cn_ctx_error(m->ctx));
  if (!m->loss) return false;
  cn_routine *init =
      cn_routine_compile(m->ctx, cn_graph_init_params(g, m->loss), CN_BACKEND_INTERP, "init");
  CHECK_MSG(init && cn_routine_run(init) == CN_OK, "%s", cn_ctx_error(m->ctx));
  cn_routine_free(init);
  const cn_sgd sgd = {cn_tensor_number(g, 0.05), 0, 0, false};
  cn_asgn *parts[2] = {cn_graph_grad_update(g, m->loss), NULL};
  parts[1] = parts[0] ? cn_graph_sgd_update(g, m->loss, &sgd) : NULL;
  cn_asgn *step = parts[1] ? cn_asgn_seq(m->ctx, 2, parts) : NULL;
  m->step = step ? cn_routine_compile(m->ctx, step, backend, "step") : NULL;
  cn_asgn *forward = m->step ? cn_graph_forward(g, m->loss) : NULL;
  m->eval = forward ? cn_routine_compile(m->ctx, forward, backend, "eval") : NULL;
  CHECK_MSG(m->eval != NULL, "%s", cn_ctx_error(m->ctx));
  return m->eval != NULL;
}

static void run(model *m, cn_routine *r) {
  CHECK_MSG(cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(m->ctx));
}

/* The cells of a node of two models are the same bits. */
static void check_same(cn_node *a, cn_node *b, const char *what) {
  float va[HIDDEN * IN] = {0}, vb[HIDDEN * IN] = {0};
  size_t n = (size_t)cn_node_numel(a);
  CHECK(n <= HIDDEN * IN && n == (size_t)cn_node_numel(b));
  CHECK_INT(cn_node_get_cells(a, false, va, n), CN_OK);
  CHECK_INT(cn_node_get_cells(b, false, vb, n), CN_OK);
  CHECK_MSG(memcmp(va, vb, sizeof va) == 0, "%s differs from the C backend's (%g vs %g)", what,
            (double)va[0], (double)vb[0]);
}

/* What the first run of r on a device must upload: its materialized params with a host buffer
 * (count and bytes); the others are all zeros, cleared there. */
static int host_params(const cn_routine *r, uint64_t *bytes) {
  const cn_ll_proc *proc = cn_routine_proc(r);
  int n = 0;
  *bytes = 0;
  for (int i = 0; i < proc->n_params; i++) {
    const cn_node *node = proc->params[i].node;
    if (node->mode == CN_MEM_MATERIALIZED && (proc->params[i].merge ? node->merge : node->value)) {
      n++;
      *bytes += cn_node_buffer_cells(node) * cn_prec_bytes(node->prec);
    }
  }
  return n;
}

/* The materialized params of r whose newest value is only where `where` says. */
static int params_where(const cn_routine *r, unsigned where) {
  const cn_ll_proc *proc = cn_routine_proc(r);
  int n = 0;
  for (int i = 0; i < proc->n_params; i++) {
    const cn_ll_param *p = &proc->params[i];
    n += p->node->mode == CN_MEM_MATERIALIZED && cn_node_current(p->node, p->merge) == where;
  }
  return n;
}

static void test_training(cn_backend_kind kind) {
  model c, d;
  memset(&count, 0, sizeof count);
  if (!model_build(&c, CN_BACKEND_C) || !model_build(&d, kind)) return;
  CHECK_INT(count.compiles, 2);
  CHECK_INT(count.uploads + count.downloads, 0); /* compiling moves nothing */

  /* the first step: the parameters and the data, each once; nothing comes back */
  uint64_t bytes;
  int expected = host_params(d.step, &bytes);
  CHECK(expected >= 5); /* w1, b1, w2, x, y at least */
  run(&c, c.step);
  run(&d, d.step);
  CHECK_INT(count.uploads, expected);
  CHECK_INT(cn_ctx_stat(d.ctx, CN_STAT_UPLOADS), (uint64_t)expected);
  CHECK_INT(cn_ctx_stat(d.ctx, CN_STAT_UPLOAD_BYTES), bytes);
  CHECK_INT(count.downloads, 0);
  CHECK(cn_node_current(cn_tensor_value(d.params[0]), false) == CN_CURRENT_DEVICE);

  /* the other steps move nothing */
  for (int s = 1; s < STEPS; s++) {
    run(&c, c.step);
    run(&d, d.step);
  }
  CHECK_INT(count.runs, STEPS);
  CHECK_INT(count.uploads, expected);
  CHECK_INT(count.downloads, 0);
  CHECK_INT(cn_ctx_stat(d.ctx, CN_STAT_DOWNLOADS), 0);

  /* the host reads: one download per node read, the C backend's bits */
  check_same(cn_tensor_value(d.loss), cn_tensor_value(c.loss), "loss");
  CHECK_INT(count.downloads, 1);
  const char *names[3] = {"w1", "b1", "w2"};
  for (int p = 0; p < 3; p++)
    check_same(cn_tensor_value(d.params[p]), cn_tensor_value(c.params[p]), names[p]);
  CHECK_INT(count.downloads, 4);
  check_same(cn_tensor_value(d.params[0]), cn_tensor_value(c.params[0]), "w1, read again");
  CHECK_INT(count.downloads, 4); /* current on the host now */
  CHECK_INT(cn_node_current(cn_tensor_value(d.params[0]), false),
            CN_CURRENT_HOST | CN_CURRENT_DEVICE);
  CHECK_INT(cn_ctx_stat(d.ctx, CN_STAT_DOWNLOADS), 4);
  CHECK_INT(cn_ctx_stat(d.ctx, CN_STAT_DOWNLOAD_BYTES), 4 + 4 * (HIDDEN * IN + HIDDEN + HIDDEN));

  /* cn_tensor_to_host: the gradient a device wrote comes back too; a second call moves nothing */
  CHECK_INT(cn_node_current(cn_tensor_grad(d.params[2]), false), CN_CURRENT_DEVICE);
  CHECK_INT(cn_tensor_to_host(d.params[2]), CN_OK);
  CHECK_INT(count.downloads, 5); /* w2 was already current on the host: its gradient only */
  CHECK_INT(cn_node_current(cn_tensor_grad(d.params[2]), false),
            CN_CURRENT_HOST | CN_CURRENT_DEVICE);
  CHECK_INT(cn_tensor_to_host(d.params[2]), CN_OK);
  CHECK_INT(count.downloads, 5);

  /* a host write between runs: the device copy is stale, the next run uploads it (only it) */
  const double w2_new[HIDDEN] = {-0.5, 0.25, 1, -0.125};
  CHECK_INT(cn_node_set_values(cn_tensor_value(c.params[2]), false, w2_new, HIDDEN), CN_OK);
  CHECK_INT(cn_node_set_values(cn_tensor_value(d.params[2]), false, w2_new, HIDDEN), CN_OK);
  CHECK_INT(cn_node_current(cn_tensor_value(d.params[2]), false), CN_CURRENT_HOST);
  CHECK_INT(count.downloads, 5); /* a whole write of an unpadded node reads nothing back */
  int uploads = count.uploads;
  run(&c, c.step);
  run(&d, d.step);
  CHECK_INT(count.uploads - uploads, 1);
  for (int p = 0; p < 3; p++)
    check_same(cn_tensor_value(d.params[p]), cn_tensor_value(c.params[p]), names[p]);
  check_same(cn_tensor_value(d.loss), cn_tensor_value(c.loss), "loss after the host write");

  /* a second routine on the same device shares the copies: no transfer either way */
  uploads = count.uploads;
  int downloads = count.downloads;
  run(&c, c.eval);
  run(&d, d.eval);
  run(&c, c.step);
  run(&d, d.step);
  run(&c, c.eval);
  run(&d, d.eval);
  CHECK_INT(count.uploads - uploads, 0);
  CHECK_INT(count.downloads - downloads, 0);
  check_same(cn_tensor_value(d.loss), cn_tensor_value(c.loss), "loss of the second routine");
  for (int p = 0; p < 3; p++)
    check_same(cn_tensor_value(d.params[p]), cn_tensor_value(c.params[p]), names[p]);

  /* a routine on a host backend (the interpreter's forward) between two device steps: what the
   * device wrote is brought back before it runs, what it writes goes up before the next step */
  cn_asgn *forward = cn_graph_forward(d.g, d.loss);
  cn_routine *host_eval =
      forward ? cn_routine_compile(d.ctx, forward, CN_BACKEND_INTERP, "host_eval") : NULL;
  CHECK_MSG(host_eval != NULL, "%s", cn_ctx_error(d.ctx));
  if (!host_eval) return;
  int stale = params_where(host_eval, CN_CURRENT_DEVICE);
  CHECK(stale > 0); /* the intermediates of the loss: never read by the host so far */
  downloads = count.downloads;
  run(&c, c.eval);
  run(&d, host_eval);
  CHECK_INT(count.downloads - downloads, stale);
  check_same(cn_tensor_value(d.loss), cn_tensor_value(c.loss), "loss of the interpreter");
  stale = params_where(d.step, CN_CURRENT_HOST);
  CHECK(stale > 0); /* what the interpreter wrote */
  uploads = count.uploads;
  run(&c, c.step);
  run(&d, d.step);
  CHECK_INT(count.uploads - uploads, stale);
  for (int p = 0; p < 3; p++)
    check_same(cn_tensor_value(d.params[p]), cn_tensor_value(c.params[p]), names[p]);

  /* a raw host write (cn_node_buffer: read-modify-write) brings the cells back first and makes
   * the device copy stale */
  run(&c, c.step);
  run(&d, d.step);
  downloads = count.downloads;
  float *wc = cn_node_buffer(cn_tensor_value(c.params[0]), false);
  float *wd = cn_node_buffer(cn_tensor_value(d.params[0]), false);
  CHECK_INT(count.downloads - downloads, 1);
  CHECK(wc && wd && wc[1] == wd[1] && wc[1] != (float)w1_init[1]); /* trained, brought back */
  if (wc && wd) wc[1] = wd[1] = 0.625f;
  CHECK_INT(cn_node_current(cn_tensor_value(d.params[0]), false), CN_CURRENT_HOST);
  uploads = count.uploads;
  run(&c, c.step);
  run(&d, d.step);
  CHECK_INT(count.uploads - uploads, 1);
  for (int p = 0; p < 3; p++)
    check_same(cn_tensor_value(d.params[p]), cn_tensor_value(c.params[p]), names[p]);

  /* a checkpoint saved from the device's values (brought back), loaded over newer ones there (a
   * host write: the next run uploads it): d is back at c's state */
  run(&c, c.step);
  run(&d, d.step);
  char dir[64] = "/tmp/cannl-test-resident-XXXXXX", file[96];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(file, sizeof file, "%s/state.safetensors", dir);
  cn_named_node state[3];
  for (int p = 0; p < 3; p++) state[p] = (cn_named_node){names[p], cn_tensor_value(d.params[p])};
  CHECK_MSG(cn_data_save_safetensors(d.ctx, file, 3, state, 0, NULL) == CN_OK, "%s",
            cn_ctx_error(d.ctx));
  run(&d, d.step);
  CHECK_MSG(cn_data_load_safetensors(d.ctx, file, 3, state, NULL, NULL) == CN_OK, "%s",
            cn_ctx_error(d.ctx));
  remove(file);
  remove(dir);
  run(&c, c.step);
  run(&d, d.step);
  for (int p = 0; p < 3; p++)
    check_same(cn_tensor_value(d.params[p]), cn_tensor_value(c.params[p]), names[p]);

  /* the host backends copy nothing */
  CHECK_INT(cn_ctx_stat(c.ctx, CN_STAT_UPLOADS) + cn_ctx_stat(c.ctx, CN_STAT_DOWNLOADS), 0);
  CHECK_INT(cn_node_current(cn_tensor_value(c.params[0]), false), CN_CURRENT_HOST);
  CHECK_INT(count.uploads, (int)cn_ctx_stat(d.ctx, CN_STAT_UPLOADS));
  CHECK_INT(count.downloads, (int)cn_ctx_stat(d.ctx, CN_STAT_DOWNLOADS));
  cn_ctx_destroy(c.ctx);
  cn_ctx_destroy(d.ctx);
  CHECK_INT(count.frees, count.allocations); /* the copies went with the context */
}

/* A routine's scratch lives on the device only: t =+ a (t CN_MEM_LOCAL, read before written, so
 * cleared before every run); c =:+ t * a. On the garbage-filled device, each run gives c = a * a
 * only if t starts from zeros every time (a kept scratch gives 2 a * a the second time). t never
 * gets a host buffer. With the device's clear, one clear of t per run and no transfer of it;
 * without (a device whose clear is NULL), zeros uploaded from the host each run instead. */
static const cn_device counting_device_noclear = {
    .name = "noclear0",
    .allocate = device_allocate,
    .upload = device_upload,
    .download = device_download,
    .synchronize = device_synchronize,
    .free = device_free,
};
static cn_status noclear_open(cn_ctx *ctx, const cn_device **device) {
  (void)ctx;
  *device = &counting_device_noclear;
  return CN_OK;
}

/* Asynchronous runs: c =+ a five times queues five runs and waits for none; reading c waits once
 * (one synchronize, one download) and sees the last run's sum; a host write of a, whose upload may
 * still be in flight, waits first; cn_routine_synchronize waits; a failure of the queued work
 * surfaces, with its message, at the next wait or read. */
static void test_async(cn_backend_kind kind) {
  memset(&count, 0, sizeof count);
  cn_ctx *ctx = cn_ctx_create();
  const int64_t three = 3;
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 1, &three);
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 1, &three);
  CHECK_INT(cn_node_set_values(a, false, (const double[]){1, 2, 3}, 3), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  const cn_index map[1] = {cn_index_iter(i)};
  const cn_proj_tensor one = {1, &three, map};
  const cn_buffer a_buf = {a, false};
  cn_asgn *add = cn_asgn_accum(ctx, false, CN_OP_ADD, c, CN_OP_ID, &a_buf,
                               cn_proj_create(ctx, 1, &i, &three, one, 1, &one));
  cn_routine *r = add ? cn_routine_compile(ctx, add, kind, "accumulate") : NULL;
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  for (int k = 0; r && k < 5; k++) CHECK_INT(cn_routine_run(r), CN_OK);
  CHECK_INT(count.runs, 5);
  CHECK_INT(count.synchronizations, 0);
  double got[3];
  CHECK_INT(cn_node_get_values(c, false, got, 3), CN_OK);
  CHECK(got[0] == 5 && got[1] == 10 && got[2] == 15);
  CHECK_INT(count.synchronizations, 1);
  CHECK_INT(count.downloads, 1);
  /* a's upload (the first run's) may still read its host buffer: the write waits */
  CHECK_INT(cn_node_set_values(a, false, (const double[]){100, 200, 300}, 3), CN_OK);
  CHECK_INT(count.synchronizations, 2);
  if (r) CHECK_INT(cn_routine_run(r), CN_OK);
  CHECK_INT(cn_routine_synchronize(r), CN_OK); /* waits, reports nothing */
  CHECK_INT(count.synchronizations, 3);
  count.fail_next_sync = true;
  CHECK_INT(cn_routine_synchronize(r), CN_ERR_IO);
  CHECK_HAS(cn_ctx_error(ctx), "counting: a queued run failed on the device");
  count.fail_next_sync = true;
  CHECK_INT(cn_node_get_values(c, false, got, 3), CN_ERR_IO);
  CHECK_HAS(cn_ctx_error(ctx), "counting: a queued run failed on the device");
  CHECK_INT(cn_node_get_values(c, false, got, 3), CN_OK);
  CHECK(got[0] == 105 && got[1] == 210 && got[2] == 315);
  cn_routine_free(r);
  cn_ctx_destroy(ctx);
}

static void test_scratch(cn_backend_kind kind, cn_backend_kind noclear) {
  for (int b = 0; b < 2; b++) {
    cn_ctx *ctx = cn_ctx_create();
    const int64_t three = 3;
    cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 1, &three);
    cn_node *t = cn_node_create(ctx, "t", CN_PREC_SINGLE, 1, &three);
    cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 1, &three);
    const double a_values[3] = {1, 2, 3};
    CHECK_INT(cn_node_set_values(a, false, a_values, 3), CN_OK);
    CHECK_INT(cn_node_set_memory(t, CN_MEM_LOCAL), CN_OK);
    cn_symbol i = cn_symbol_create(ctx, "i", 0);
    const cn_index map[1] = {cn_index_iter(i)};
    const cn_proj_tensor one = {1, &three, map}, two[2] = {one, one};
    const cn_buffer a_buf = {a, false}, t_and_a[2] = {{t, false}, {a, false}};
    cn_asgn *steps[2] = {cn_asgn_accum(ctx, false, CN_OP_ADD, t, CN_OP_ID, &a_buf,
                                       cn_proj_create(ctx, 1, &i, &three, one, 1, &one)),
                         cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, t_and_a,
                                       cn_proj_create(ctx, 1, &i, &three, one, 2, two))};
    cn_routine *r = steps[0] && steps[1] ? cn_routine_compile(ctx, cn_asgn_seq(ctx, 2, steps),
                                                              b ? noclear : kind, "local_square")
                                         : NULL;
    CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
    memset(&count, 0, sizeof count);
    for (int rep = 0; r && rep < 2; rep++) {
      CHECK_MSG(cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
      double got[3] = {0, 0, 0};
      CHECK_INT(cn_node_get_values(c, false, got, 3), CN_OK);
      CHECK(got[0] == 1 && got[1] == 4 && got[2] == 9);
    }
    CHECK(t->value == NULL); /* no host copy of scratch */
    /* a uploaded once; c (no host buffer yet) cleared on the device, or zeros uploaded */
    CHECK_INT(count.clears, b ? 0 : 1 + 2);
    CHECK_INT(count.uploads, b ? 1 + 1 + 2 : 1);
    CHECK_INT(count.downloads, 2);
    cn_ctx_destroy(ctx);
  }
}

/* c = a b of N x N cells: a GEMM nest of N^3 = 2^24 points, the least the tuner tunes. */
enum { N = 256 };
static cn_routine *compile_product(cn_ctx *ctx, cn_backend_kind backend) {
  cn_graph *g = cn_graph_create(ctx);
  const int64_t dims[2] = {N, N};
  const cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {2, dims, NULL}};
  static double values[N * N];
  for (int i = 0; i < N * N; i++) values[i] = (double)(i % 7) / 8;
  cn_tensor *a = cn_tensor_data(g, "a", &d, values, N * N);
  cn_tensor *b = a ? cn_tensor_data(g, "b", &d, values, N * N) : NULL;
  cn_tensor *c = b ? cn_tensor_einsum2(g, "ij;jk=>ik", a, b) : NULL;
  const cn_asgn *code = c ? cn_graph_forward(g, c) : NULL;
  cn_routine *r = code ? cn_routine_compile(ctx, code, backend, "product") : NULL;
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  return r;
}

/* "ctuned": generated C under another name, counting the calls of its compile_many and run. */
static int tuned_batches, tuned_candidates, tuned_runs;
static cn_status tuned_compile_many(cn_ctx *ctx, int n, const cn_ll_proc *const *procs,
                                    void **compiled, const char **sources) {
  tuned_batches++;
  tuned_candidates += n;
  return cn_backend_c.compile_many(ctx, n, procs, compiled, sources);
}
static cn_status tuned_run(cn_ctx *ctx, void *compiled, void *const *buffers, const int64_t *syms) {
  tuned_runs++;
  return cn_backend_c.run(ctx, compiled, buffers, syms);
}

/* The tuner goes through the backend a routine is compiled for: never for one without
 * CN_BACKEND_TUNABLE (counting: no candidate compiled, nothing tuned, whatever the mode), and
 * with a tunable one its own compile_many and run time the candidates ("quick": 4 candidates in
 * one batch, each run once to warm up and 3 times timed). */
static void test_tuner(cn_backend_kind counting_kind) {
  char dir[64] = "/tmp/cannl-test-resident-XXXXXX", cmd[128];
  CHECK(mkdtemp(dir) != NULL);
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", dir), CN_OK);
  CHECK_INT(cn_ctx_set_option(ctx, "tune", "quick"), CN_OK);
  CHECK_INT(cn_ctx_set_option(ctx, "schedule", "all"), CN_OK);
  memset(&count, 0, sizeof count);
  compile_product(ctx, counting_kind);
  CHECK_INT(count.compiles, 1);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_TUNE_RUNS) + cn_ctx_stat(ctx, CN_STAT_TUNE_HITS), 0);

  static cn_backend tuned;
  tuned = cn_backend_c;
  tuned.name = "ctuned";
  tuned.compile_many = tuned_compile_many;
  tuned.run = tuned_run;
  cn_backend_kind kind;
  CHECK_MSG(cn_backend_register(ctx, &tuned, &kind) == CN_OK, "%s", cn_ctx_error(ctx));
  cn_routine *r = compile_product(ctx, kind);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_TUNE_RUNS), 1);
  CHECK_INT(tuned_batches, 1);
  CHECK_INT(tuned_candidates, 4);
  CHECK_INT(tuned_runs, 4 * 4);
  CHECK(r && strstr(cn_routine_loops(r), "gemm") != NULL);
  cn_ctx_destroy(ctx);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

/* The output of `script` run by the notation on `kind` with the option interpret_below at 100. */
static char *tiered_output(cn_backend_kind kind, const char *script) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  CHECK(g != NULL);
  if (!g) return cn_ctx_destroy(ctx), NULL;
  CHECK_INT(cn_ctx_set_option(ctx, "interpret_below", "100"), CN_OK);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = kind, .json = true, .out = out};
  CHECK_MSG(cn_notation_run(g, "tiers.cnl", script, &opts) == CN_OK, "%s", cn_ctx_error(ctx));
  fclose(out);
  cn_ctx_destroy(ctx);
  return buf;
}

/* Tiering on a compiled backend with its own memory: an interpreted run reads and writes the
 * host's copies, so a small routine of a loop interpreted beside a device routine would drain
 * the queue and move its nodes at every step. Such a backend interprets only what runs once: here
 * `big` (32 cells of 1000 steps each) and `fold` (32 cells, well below interpret_below's budget
 * for 100 runs) both compile, and the 100 steps download nothing until the print (one node);
 * the print's computation, run once, is still interpreted. The same text as the interpreter:
 * half of total[1] = 0.5 x 499.5 x (1 + ... + 100) = 1261237.5, in single precision. */
static void test_tiers(cn_backend_kind compiled_kind) {
  static const char *const script = "let%op u = range 1000\n"
                                    "let%op k = range 32\n"
                                    "let%cd big = {m} =+ (u +* \"i; j => j\" k) *. 0.001\n"
                                    "let%cd fold = {total} =+ m\n"
                                    "for step = 0 to 99 do\n"
                                    "  run big\n"
                                    "  run fold\n"
                                    "done\n"
                                    "print (total *. 0.5)\n";
  char *want = tiered_output(CN_BACKEND_INTERP, script);
  memset(&count, 0, sizeof count);
  char *got = tiered_output(compiled_kind, script);
  CHECK_MSG(want && got && strstr(want, "\"values\": [0, 1261237.6") && strcmp(want, got) == 0,
            "%s\nagainst\n%s", want, got);
  CHECK_INT(count.compiles, 2);
  CHECK_INT(count.runs, 200);
  CHECK_MSG(count.downloads <= 2, "%d downloads", count.downloads);
  free(want);
  free(got);
}

/* The option "backend": the backend of CN_BACKEND_DEFAULT, from $CANNL_BACKEND else "c"; a name
 * no backend has refused with the closest suggested, when set and when the environment's is
 * used. */
static void test_option(cn_backend_kind kind) {
  unsetenv("CANNL_BACKEND");
  cn_ctx *ctx = cn_ctx_create();
  CHECK_STR(cn_ctx_option(ctx, "backend"), "c");
  cn_node *n = cn_node_create(ctx, "n", CN_PREC_SINGLE, 1, (int64_t[]){2});
  cn_backend_kind found;
  CHECK_INT(cn_routine_default_backend(ctx, &found), CN_OK);
  CHECK_INT(found, CN_BACKEND_C);

  setenv("CANNL_BACKEND", "counting", 1);
  CHECK_STR(cn_ctx_option(ctx, "backend"), "counting");
  CHECK_INT(cn_routine_default_backend(ctx, &found), CN_OK);
  CHECK_INT(found, kind);
  memset(&count, 0, sizeof count);
  cn_routine *r =
      cn_routine_compile(ctx, cn_asgn_fetch_constant(ctx, n, 3), CN_BACKEND_DEFAULT, "on_counting");
  CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_INT(count.compiles, 1);
  CHECK_INT(count.runs, 1);
  double v[2] = {0, 0};
  CHECK_INT(cn_node_get_values(n, false, v, 2), CN_OK);
  CHECK(v[0] == 3 && v[1] == 3);

  CHECK_INT(cn_ctx_set_option(ctx, "backend", "interp"), CN_OK); /* the context's value wins */
  CHECK_STR(cn_ctx_option(ctx, "backend"), "interp");
  r = cn_routine_compile(ctx, cn_asgn_fetch_constant(ctx, n, 4), CN_BACKEND_DEFAULT, "on_interp");
  CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_INT(count.compiles, 1);
  CHECK_INT(cn_node_get_values(n, false, v, 2), CN_OK);
  CHECK(v[0] == 4 && v[1] == 4);

  CHECK_INT(cn_ctx_set_option(ctx, "backend", "countng"), CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx), "option backend: unknown value 'countng', did you mean 'counting'? "
                               "(known: interp, c, opencl, cuda, counting, noclear)");
  CHECK_STR(cn_ctx_option(ctx, "backend"), "interp"); /* the refused value is not kept */
  CHECK_INT(cn_ctx_set_option(ctx, "backend", NULL), CN_OK);
  setenv("CANNL_BACKEND", "intrp", 1);
  CHECK(cn_routine_compile(ctx, cn_asgn_fetch_constant(ctx, n, 5), CN_BACKEND_DEFAULT, "bad") ==
        NULL);
  CHECK_STR(cn_ctx_error(ctx), "CANNL_BACKEND: unknown value 'intrp', did you mean 'interp'? "
                               "(known: interp, c, opencl, cuda, counting, noclear)");

  /* a script without a backend runs on the option's */
  setenv("CANNL_BACKEND", "counting", 1);
  cn_graph *g = cn_graph_create(ctx);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = CN_BACKEND_DEFAULT, .out = out};
  int compiles = count.compiles;
  cn_status st = cn_notation_run(g, "default.cnl", "let p = {p = 3.0}\nprint (p *. p)\n", &opts);
  fclose(out);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_HAS(buf, "9");
  CHECK(count.compiles > compiles);
  free(buf);
  unsetenv("CANNL_BACKEND");
  cn_ctx_destroy(ctx);
}

int main(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_backend_kind kind = CN_BACKEND_INTERP;
  CHECK_MSG(cn_backend_register(ctx, &counting, &kind) == CN_OK, "%s", cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  static cn_backend noclear;
  noclear = counting;
  noclear.name = "noclear";
  noclear.open_device = noclear_open;
  cn_backend_kind noclear_kind = CN_BACKEND_INTERP;
  ctx = cn_ctx_create();
  CHECK_MSG(cn_backend_register(ctx, &noclear, &noclear_kind) == CN_OK, "%s", cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  test_training(kind);
  test_scratch(kind, noclear_kind);
  test_async(kind);
  test_option(kind);
  test_tuner(kind);
  /* registered last: test_option's messages list the registry */
  static cn_backend compiled;
  compiled = counting;
  compiled.name = "countingc";
  compiled.caps = CN_BACKEND_DEVICE_MEMORY | CN_BACKEND_COMPILED;
  cn_backend_kind compiled_kind = CN_BACKEND_INTERP;
  ctx = cn_ctx_create();
  CHECK_MSG(cn_backend_register(ctx, &compiled, &compiled_kind) == CN_OK, "%s", cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  test_tiers(compiled_kind);
  CHECK_DONE();
}
