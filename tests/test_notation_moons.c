/* examples/moons.cnl, the half-moons training in the notation, against the C API model of
 * demo/moons.c (which examples/moons.c runs), on the full schedule and on shortened ones (the
 * script's `let epochs = 80` line rewritten), on both backends: the script's printed final epoch
 * loss, training accuracy and trained parameters are bit-identical to the C API run of the same
 * schedule (same data, same parameter init, same steps), and the runs of 20 epochs or more converge
 * (a loss bound and an accuracy bound, as tests/test_moons.c asks of the C run). */
#include "../demo/moons.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { SHORT_EPOCHS = 20, MAX_VALUES = MOONS_HIDDEN * MOONS_HIDDEN };

static char *read_script(void) {
  const char *root = getenv("CANNL_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/moons.cnl", root ? root : ".");
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "cannot read %s", path);
  if (!f) return NULL;
  static char text[16384];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  return text;
}

/* The script with `let epochs = 80` replaced by `epochs` and the parameters printed at the end;
 * malloc'd. */
static char *shortened(const char *script, int epochs) {
  if (!script) return NULL;
  const char *line = strstr(script, "let epochs = 80\n");
  CHECK_MSG(line != NULL, "moons.cnl has no 'let epochs = 80' line");
  if (!line) return NULL;
  size_t head = (size_t)(line - script), cap = strlen(script) + 256;
  char *text = malloc(cap);
  snprintf(text, cap, "%.*slet epochs = %d\n%sprint w1\nprint b1\nprint w2\nprint b2\nprint w3\n",
           (int)head, script, epochs, line + strlen("let epochs = 80\n"));
  return text;
}

/* The n-th JSON line's values (at most cap); the count, or -1. */
static int values_of(const char *json, int n, double *v, int cap) {
  const char *line = json;
  for (int i = 0; line && i < n; i++)
    if ((line = strchr(line, '\n'))) line++;
  const char *p = line ? strstr(line, "\"values\": [") : NULL;
  if (!p) return -1;
  p += strlen("\"values\": [");
  int count = 0;
  while (*p && *p != ']' && count < cap) {
    char *end;
    v[count++] = strtod(p, &end);
    p = end;
    while (*p == ',' || *p == ' ') p++;
  }
  return count;
}

static char *run_script(const char *text, cn_backend_kind backend) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = backend, .json = true, .out = out};
  cn_status st = cn_notation_run(g, "moons.cnl", text, &opts);
  fclose(out);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  if (st != CN_OK) {
    free(buf);
    buf = NULL;
  }
  cn_ctx_destroy(ctx);
  return buf;
}

/* Counts the cells where the script's parameter equals the C run's, exactly. */
static int same_values(const char *json, int line, cn_tensor *param, int n) {
  double script[MAX_VALUES], c[MAX_VALUES];
  if (values_of(json, line, script, MAX_VALUES) != n ||
      cn_node_get_values(cn_tensor_value(param), false, c, (size_t)n) != CN_OK)
    return -1;
  int same = 0;
  for (int i = 0; i < n; i++) same += script[i] == c[i];
  return same;
}

/* The C run's losses: through moons_train (the demo's epoch means, in double) or step by step
 * with the script's bookkeeping (the last epoch's losses summed in single precision, the script's
 * buffer, then divided by 80), which the script must match exactly. */
static cn_status c_run(moons *m, int epochs, bool stepwise, double *final_loss) {
  if (!stepwise) {
    double epoch_loss[MOONS_EPOCHS];
    cn_status st = moons_train(m, epoch_loss, NULL, NULL);
    *final_loss = epoch_loss[epochs - 1];
    return st;
  }
  float epoch_sum = 0;
  cn_status st = CN_OK;
  for (int64_t step = 0; step < (int64_t)epochs * MOONS_BATCHES && st == CN_OK; step++) {
    double loss;
    st = moons_train_step(m, step, &loss);
    if (step % MOONS_BATCHES == 0) epoch_sum = 0;
    epoch_sum += (float)loss;
  }
  *final_loss = epoch_sum / (float)MOONS_BATCHES;
  return st;
}

static void test_agreement(cn_backend_kind backend, int epochs, bool stepwise) {
  char *text = shortened(read_script(), epochs);
  char *json = text ? run_script(text, backend) : NULL;
  free(text);
  static moons m;
  const moons_config cfg = {epochs, MOONS_SEED, backend, 1, MOONS_BATCH};
  double final_loss = 0;
  cn_status st = moons_build(&m, &cfg);
  if (st == CN_OK) st = c_run(&m, epochs, stepwise, &final_loss);
  static double f[MOONS_POINTS];
  if (st == CN_OK) st = moons_eval(&m, MOONS_POINTS, m.xy, f);
  CHECK_MSG(st == CN_OK, "%s", m.ctx ? cn_ctx_error(m.ctx) : "no context");
  if (json && st == CN_OK) {
    double script_loss, script_accuracy;
    int correct = (int)lround(moons_accuracy(&m, f) * MOONS_POINTS);
    float accuracy = (float)(100 * correct) / (float)MOONS_POINTS;
    CHECK(values_of(json, 0, &script_loss, 1) == 1);
    if (stepwise)
      CHECK(script_loss == final_loss);
    else /* the C demo's epoch mean is taken in double */
      CHECK_NEAR(script_loss, final_loss, 1e-6);
    CHECK(values_of(json, 1, &script_accuracy, 1) == 1 && script_accuracy == accuracy);
    CHECK_INT(same_values(json, 2, m.w1, 2 * MOONS_HIDDEN), 2 * MOONS_HIDDEN);
    CHECK_INT(same_values(json, 3, m.b1, MOONS_HIDDEN), MOONS_HIDDEN);
    CHECK_INT(same_values(json, 4, m.w2, MOONS_HIDDEN * MOONS_HIDDEN), MOONS_HIDDEN * MOONS_HIDDEN);
    CHECK_INT(same_values(json, 5, m.b2, MOONS_HIDDEN), MOONS_HIDDEN);
    CHECK_INT(same_values(json, 6, m.w3, MOONS_HIDDEN), MOONS_HIDDEN);
    if (epochs >= SHORT_EPOCHS) { /* as tests/test_moons.c asks of the C run */
      CHECK_MSG(script_loss < 0.1, "final epoch loss %g", script_loss);
      CHECK_MSG(script_accuracy >= 98, "training accuracy %g%%", script_accuracy);
    }
  }
  free(json);
  moons_destroy(&m);
}

int main(void) {
  test_agreement(CN_BACKEND_C, MOONS_EPOCHS, false); /* the script as it is */
  test_agreement(CN_BACKEND_C, SHORT_EPOCHS, false);
  test_agreement(CN_BACKEND_C, 2, true);
  test_agreement(CN_BACKEND_INTERP, 1, true);
  CHECK_DONE();
}
