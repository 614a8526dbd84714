/* The notation's data-parallel loops (`for b = A to B ~devices:N do backprop L  sgd L ... done`,
 * src/notation/eval_stmt.c on cn_dp): the half-moons script of examples/moons.cnl (two epochs,
 * a constant learning rate, 840 points in minibatches of 10) trained on 2 and 3 CPU devices
 *   - holds the same parameter bits on every device and on the host (device 0's copy) after the
 *     run, and the same bits when run again;
 *   - equals within float tolerance the ordinary script whose minibatch is the data-parallel
 *     step's global batch (20 or 30 points, the loss divided by it): device d takes minibatch
 *     i + d, the gradients are averaged, so both take the same steps up to the grouping of sums;
 *   - leaves in the loss, after each step, the sum of the devices' losses: the epoch's
 *     accumulated loss is `devices` times the one-device script's, and progress shows it divided
 *     by the devices;
 * the same with Adam (each device's state); `~devices:1` is the plain loop, bit for bit; the
 * option prints back as written; the forms that cannot work are refused with their position in
 * the script; cn_dp_bind_device (the per-device index under the notation's form) refuses a device
 * out of range, a symbol the gradient does not read, and a step with a device's value missing. */
#include "../demo/moons.h"

#include "check.h"
#include "notation_check.h"

#include "cannl.h"
#include "notation/notation.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { POINTS = 840, PARAMS = 5, MAX_CELLS = 256, EPOCHS = 2 };

static const char *const param_label[PARAMS] = {"w1", "b1", "w2", "b2", "w3"};

static const char *const sgd_line = "sgd loss ~learning_rate:0.1 ~weight_decay:0.0001",
                         *adam_line = "adam loss ~learning_rate:0.01 ~weight_decay:0.0001";

/* The script: minibatches of `batch` points, the loss their mean (divided by `batch`), updated by
 * `update`; with `devices` > 0 its inner loop carries `~devices:devices`, with `progress` it shows
 * the loss. */
static void moons_script_with(char *out, size_t cap, int batch, int devices, const char *update,
                              bool progress) {
  char option[80] = "";
  if (devices > 0) snprintf(option, sizeof option, " ~devices:%d", devices);
  if (progress) strcat(option, " progress ~loss:loss");
  snprintf(out, cap,
           "let (moons, moons_classes) = half_moons ~n:%d ~noise:0.1 ~seed:1 ~batch_size:%d\n"
           "let batch_n = static_index %d\n"
           "let x = moons @| batch_n\n"
           "let y = moons_classes @| batch_n\n"
           "let%%op mlp x =\n"
           "  let h1 = relu ({w1} * x + {b1; o = [16]}) in\n"
           "  let h2 = relu ({w2} * h1 + {b2; o = [16]}) in\n"
           "  {w3} * h2\n"
           "let loss = (relu (1 - y *. mlp x) ++ \"...|... => 0\") /. %d\n"
           "let%%cd accumulate = {epoch_loss} =+ loss\n"
           "let%%cd restart = epoch_loss =: 0\n"
           "for epoch = 0 to %d do\n"
           "  run restart\n"
           "  for batch_n = 0 to %d%s do\n"
           "    backprop loss\n"
           "    %s\n"
           "    run accumulate\n"
           "  done\n"
           "done\n",
           POINTS, batch, POINTS / batch, batch, EPOCHS - 1, POINTS / batch - 1, option, update);
}

static void moons_script(char *out, size_t cap, int batch, int devices) {
  moons_script_with(out, cap, batch, devices, sgd_line, false);
}

typedef struct {
  double v[PARAMS][MAX_CELLS];
  unsigned char bits[PARAMS][MAX_CELLS * 8];
  int64_t n[PARAMS];
  size_t bytes[PARAMS];
  double epoch_loss;
} trained;

static cn_tensor *find(cn_graph *g, const char *label) {
  for (int i = 0; i < g->n_tensors; i++)
    if (strcmp(cn_tensor_label(g->tensors[i]), label) == 0) return g->tensors[i];
  return NULL;
}

/* Runs the script; the host's parameters and epoch loss. With devices > 1, every device's copy
 * of every parameter must be the host's bits. */
static bool train(const char *text, int devices, trained *out) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  FILE *sink = fopen("/dev/null", "w");
  cn_notation_options opts = {.backend = CN_BACKEND_C, .out = sink};
  cn_status st = cn_notation_run(g, "dp.cnl", text, &opts);
  fclose(sink);
  CHECK_MSG(st == CN_OK, "%d devices: %s", devices, cn_ctx_error(ctx));
  bool ok = st == CN_OK;
  for (int p = 0; ok && p < PARAMS; p++) {
    cn_tensor *t = find(g, param_label[p]);
    CHECK_MSG(t != NULL, "no tensor '%s'", param_label[p]);
    if (!(ok = t != NULL)) break;
    cn_node *node = cn_tensor_value(t);
    out->n[p] = cn_node_numel(node);
    out->bytes[p] = (size_t)out->n[p] * cn_prec_bytes(node->prec);
    CHECK(out->n[p] <= MAX_CELLS && out->bytes[p] <= sizeof out->bits[p]);
    ok = cn_node_get_values(node, false, out->v[p], (size_t)out->n[p]) == CN_OK &&
         cn_node_get_cells(node, false, out->bits[p], (size_t)out->n[p]) == CN_OK;
    CHECK_INT(cn_node_replicated(node), devices > 1);
    for (int d = 0; ok && devices > 1 && d < devices; d++) {
      unsigned char bits[MAX_CELLS * 8];
      ok = cn_node_get_device_cells(node, false, d, bits, (size_t)out->n[p]) == CN_OK;
      CHECK_MSG(ok && memcmp(bits, out->bits[p], out->bytes[p]) == 0,
                "%d devices: '%s' on device %d differs from the host's", devices, param_label[p],
                d);
    }
  }
  cn_tensor *loss = ok ? find(g, "epoch_loss_loss") : NULL; /* `{epoch_loss} =+ loss` names it */
  ok = loss && cn_node_get_values(cn_tensor_value(loss), false, &out->epoch_loss, 1) == CN_OK;
  CHECK_MSG(ok, "%d devices: the parameters or the epoch loss unread", devices);
  cn_ctx_destroy(ctx);
  return ok;
}

/* The largest difference between two runs' parameters, relative to the largest magnitude. */
static double max_rel_diff(const trained *a, const trained *b) {
  double diff = 0, scale = 0;
  for (int p = 0; p < PARAMS; p++)
    for (int64_t i = 0; i < a->n[p]; i++) {
      diff = fmax(diff, fabs(a->v[p][i] - b->v[p][i]));
      scale = fmax(scale, fabs(b->v[p][i]));
    }
  return diff / scale;
}

static bool same_bits(const trained *a, const trained *b) {
  for (int p = 0; p < PARAMS; p++)
    if (a->bytes[p] != b->bytes[p] || memcmp(a->bits[p], b->bits[p], a->bytes[p]) != 0)
      return false;
  return true;
}

static trained runs[4];

static void test_against_one_device(int devices) {
  static char text[4096];
  trained *dp = &runs[0], *again = &runs[1], *one = &runs[2], *plain = &runs[3];
  moons_script(text, sizeof text, 10, devices);
  if (!train(text, devices, dp) || !train(text, devices, again)) return;
  CHECK_MSG(same_bits(dp, again), "%d devices: two runs differ", devices);
  moons_script(text, sizeof text, 10 * devices, 0);
  if (!train(text, 1, one)) return;
  double rel = max_rel_diff(dp, one);
  printf("%d devices against one device with the global batch %d: largest relative difference "
         "%.3g\n",
         devices, 10 * devices, rel);
  CHECK_MSG(rel < 1e-4, "%d devices: relative difference %g from one device", devices, rel);
  /* the loss after a step is the sum of the devices' minibatch means */
  CHECK_NEAR(dp->epoch_loss / devices, one->epoch_loss, 1e-4 * fabs(one->epoch_loss));
  /* the comparison can fail: minibatches of 10 on one device train differently */
  moons_script(text, sizeof text, 10, 0);
  if (!train(text, 1, plain)) return;
  CHECK_MSG(max_rel_diff(plain, one) > 1e-2, "%s",
            "batches of 10 and of the global batch train alike: the comparison proves nothing");
}

/* Adam's state (moments, step counts) is each device's, updated alike from the averaged
 * gradients: as one device with the global batch. */
static void test_adam(void) {
  static char text[4096];
  moons_script_with(text, sizeof text, 10, 2, adam_line, false);
  if (!train(text, 2, &runs[0])) return;
  moons_script_with(text, sizeof text, 20, 0, adam_line, false);
  if (!train(text, 1, &runs[1])) return;
  double rel = max_rel_diff(&runs[0], &runs[1]);
  printf("adam, 2 devices against one device: largest relative difference %.3g\n", rel);
  CHECK_MSG(rel < 1e-4, "adam: relative difference %g from one device", rel);
}

/* The last JSON progress line's loss of the script's run. */
static double last_progress_loss(const char *text) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = CN_BACKEND_C, .json = true, .out = out};
  cn_status st = cn_notation_run(g, "dp.cnl", text, &opts);
  fclose(out);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  double loss = NAN;
  for (const char *p = buf; p && (p = strstr(p, "\"loss\": ")); p++)
    loss = strtod(p + strlen("\"loss\": "), NULL);
  free(buf);
  cn_ctx_destroy(ctx);
  return loss;
}

/* progress shows a data-parallel step's loss as the mean of its slots' (the loss holds their
 * sum): the one-device loss of the same global batch. */
static void test_progress(void) {
  static char text[4096];
  moons_script_with(text, sizeof text, 10, 2, sgd_line, true);
  double dp = last_progress_loss(text);
  moons_script_with(text, sizeof text, 20, 0, sgd_line, true);
  double one = last_progress_loss(text);
  CHECK_MSG(isfinite(one) && fabs(dp - one) <= 1e-4 * fabs(one), "progress shows %.9g, not %.9g",
            dp, one);
}

/* ~devices prints back as written; `to f x ~devices:2` applies f to x alone. */
static void test_round_trip(void) {
  const char *script = "for b = 0 to f x ~devices:(n + 1) progress ~loss:l do\n"
                       "  backprop l\n"
                       "  sgd l ~learning_rate:0.1\n"
                       "done\n";
  cn_ctx *ctx = cn_ctx_create();
  cn_nt_program *prog = cn_nt_parse_program(ctx, "t.cnl", script);
  CHECK_MSG(prog != NULL, "%s", cn_ctx_error(ctx));
  cn_sbuf printed = {0};
  if (prog) cn_nt_print_program(&printed, prog);
  CHECK_STR(printed.data ? printed.data : "", script);
  CHECK(prog && prog->items[0].u.for_.to->kind == CN_NT_APPLY);
  cn_sbuf_free(&printed);
  cn_ctx_destroy(ctx);
}

/* ~devices:1 is the ordinary loop: the same bits as the script without the option. */
static void test_one_device(void) {
  static char text[4096];
  moons_script(text, sizeof text, 10, 1);
  if (!train(text, 1, &runs[0])) return;
  moons_script(text, sizeof text, 10, 0);
  if (!train(text, 1, &runs[1])) return;
  CHECK(same_bits(&runs[0], &runs[1]));
}

/* The script of moons_script(10, 2) with `from` replaced by `to`: its run (run_error, the
 * interpreter, named seed.cnl) stops with `message`. */
static void refused(const char *from, const char *to, const char *message) {
  static char text[4096], edited[4096];
  moons_script(text, sizeof text, 10, 2);
  const char *at = strstr(text, from);
  CHECK_MSG(at != NULL, "the script has no '%s'", from);
  if (!at) return;
  snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  CHECK_HAS(run_error(edited), message);
}

/* A backend with its own memory is refused at the option, before it compiles anything (so
 * without its device too). */
static void test_device_backends(void) {
  static char text[4096], edited[4096];
  moons_script(text, sizeof text, 10, 2);
  const char *restart = strstr(text, "  run restart\n");
  CHECK(restart != NULL);
  if (!restart) return;
  snprintf(edited, sizeof edited, "%.*s%s", (int)(restart - text), text,
           restart + strlen("  run restart\n"));
  static const char *const names[] = {"opencl", "cuda"};
  for (int k = 0; k < 2; k++) {
    int backend = cn_backend_find(names[k]);
    CHECK_MSG(backend >= 0, "no backend '%s' registered", names[k]);
    if (backend < 0) continue;
    cn_ctx *ctx = cn_ctx_create();
    cn_graph *g = cn_graph_create(ctx);
    cn_notation_options opts = {.backend = (cn_backend_kind)backend};
    CHECK(cn_notation_run(g, "dp.cnl", edited, &opts) != CN_OK);
    char message[200];
    snprintf(message, sizeof message,
             "dp.cnl:13:34: ~devices: a data-parallel loop runs on CPU devices with a host "
             "backend (interp or c), not '%s'",
             names[k]);
    CHECK_HAS(cn_ctx_error(ctx), message);
    cn_ctx_destroy(ctx);
  }
}

static void test_refusals(void) {
  refused("~devices:2", "~devices:5",
          "seed.cnl:14:34: ~devices: the loop's 84 values of 'batch_n' do not divide among 5 slots "
          "(5 devices x 1 process), which take 5 consecutive values at each step");
  refused("~devices:2", "~devices:0",
          "seed.cnl:14:34: ~devices is a count of CPU devices in [1, "
          "64], not 0");
  refused("~devices:2", "~device:2", "seed.cnl:14:25: unknown for argument '~device'");
  refused("    backprop loss\n", "",
          "seed.cnl:15:5: in a data-parallel loop (~devices) sgd directly follows the backprop of "
          "its loss");
  refused("    backprop loss\n    sgd loss ~learning_rate:0.1 ~weight_decay:0.0001\n", "",
          "seed.cnl:14:34: a data-parallel loop (~devices) needs a backprop statement followed by "
          "sgd or adam in its body");
  refused("    sgd loss", "    run accumulate\n    sgd loss",
          "seed.cnl:15:5: in a data-parallel loop (~devices) backprop is directly followed by the "
          "sgd or adam statement of the same loss");
  refused(
      "    run accumulate\n", "    if true then backprop loss end\n",
      "seed.cnl:17:18: a data-parallel loop (~devices) trains in its own body, not in a loop or "
      "an if inside it");
  refused("    sgd loss ~learning_rate", "    sgd epoch_loss ~learning_rate",
          "the update is of the loss backprop computes ('loss'), not of 'epoch_loss_loss'");
  /* a loop over another index: every device would read the same minibatch */
  refused("  for batch_n = 0 to 83 ~devices:2 do\n",
          "  for k = 0 to 83 ~devices:2 do\n  for batch_n = 0 to 0 do run restart done\n",
          "seed.cnl:14:28: ~devices: the loss 'loss' does not read the loop's index 'k', so every "
          "device would train on the same data");
}

/* cn_dp_bind_device's refusals, on the C API moons model on 2 devices: a device not among dp's, a
 * symbol the gradient routine does not read, and a step before every device has its value. */
static void test_bind_device(void) {
  const moons_config cfg = {1, MOONS_SEED, CN_BACKEND_C, 2, 10};
  moons m;
  cn_status st = moons_build(&m, &cfg);
  CHECK_MSG(st == CN_OK && m.dp, "%s", cn_ctx_error(m.ctx));
  if (st == CN_OK && m.dp) {
    CHECK_INT(cn_dp_bind_device(m.dp, m.batch_n, 2, 0), CN_ERR_INVALID);
    CHECK_STR(cn_ctx_error(m.ctx), "cn_dp_bind_device: device 2, not in [0, 2)");
    cn_symbol other = cn_symbol_create(m.ctx, "other", 4);
    CHECK_INT(cn_dp_bind_device(m.dp, other, 0, 0), CN_ERR_INVALID);
    CHECK_HAS(cn_ctx_error(m.ctx), "does not read symbol 'other'");
    CHECK_INT(cn_dp_bind(m.dp, m.step_n, 0), CN_OK);
    CHECK_INT(cn_dp_bind_device(m.dp, m.batch_n, 0, 1), CN_OK);
    CHECK_INT(cn_dp_step(m.dp), CN_ERR_INVALID);
    CHECK_STR(cn_ctx_error(m.ctx),
              "cn_dp_step: symbol 'batch_n' is bound per device but not on device 1");
    CHECK_INT(cn_dp_bind_device(m.dp, m.batch_n, 1, 2), CN_OK);
    CHECK_INT(cn_dp_step(m.dp), CN_OK);
  }
  moons_destroy(&m);
}

int main(void) {
  test_against_one_device(2);
  test_against_one_device(3);
  test_one_device();
  test_adam();
  test_progress();
  test_round_trip();
  test_bind_device();
  test_refusals();
  test_device_backends();
  CHECK_DONE();
}
