/* Fashion-MNIST end to end (demo/fashion.c), on subsets so that it runs in seconds; skipped
 * (exit 77, ctest SKIP) with a message when Debian's dataset-fashion-mnist is not installed:
 *   - the MLP trained for 300 steps (3000 examples, batch 20, two epochs) reaches a training loss
 *     below 0.75 and a test accuracy above 75% on 1000 test images (PyTorch's same model and
 *     optimizer: about 0.55 and 80%); the confusion matrix counts every test image once;
 *   - resume: two epochs in one run, and one epoch, a new process-like rebuild from the
 *     checkpoint, then the second epoch, give the same losses, accuracies and parameters, bit
 *     for bit; a checkpoint of another run is refused with a message;
 *   - export: the trained MLP as C (cc -std=c11 -Wall -Werror, nothing of cannl), run on 100 test
 *     images, predicts what cannl predicts;
 *   - the convnet builds and trains one small epoch (its loss falls below ln 10, the loss of a
 *     uniform guess). */
#include "check.h"

#include "../demo/fashion.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char dir[64];

static fashion_config small_config(fashion_model model, const char *checkpoint) {
  fashion_config c = {model, 2, 20, 3000, 1000, 0, 0, 7, NULL, checkpoint, CN_BACKEND_C, 1};
  return c;
}

static bool train(fashion *f, int epochs) {
  cn_status st = CN_OK;
  for (int e = 0; e < epochs && st == CN_OK; e++) st = fashion_train_epoch(f, NULL, NULL);
  CHECK_MSG(st == CN_OK, "%s", fashion_error(f));
  return st == CN_OK;
}

/* The cells of every parameter, concatenated (malloc'd). */
static float *param_cells(fashion *f, size_t *count) {
  size_t n = 0;
  for (int i = 0; i < f->n_params; i++) n += (size_t)cn_node_numel(cn_tensor_value(f->params[i]));
  float *cells = malloc(n * sizeof *cells);
  size_t at = 0;
  for (int i = 0; i < f->n_params && cells; i++) {
    cn_node *node = cn_tensor_value(f->params[i]);
    cn_node_get_cells(node, false, cells + at, (size_t)cn_node_numel(node));
    at += (size_t)cn_node_numel(node);
  }
  *count = n;
  return cells;
}

static void test_training_and_resume(void) {
  char whole[128], split[128];
  snprintf(whole, sizeof whole, "%s/whole.safetensors", dir);
  snprintf(split, sizeof split, "%s/split.safetensors", dir);
  fashion_config cw = small_config(FASHION_MLP, whole), cs = small_config(FASHION_MLP, split);

  fashion a;
  bool ok = fashion_build(&a, &cw) == CN_OK;
  CHECK_MSG(ok, "%s", fashion_error(&a));
  ok = ok && train(&a, 2);
  if (ok) {
    CHECK_MSG(a.epoch_loss[1] < 0.75, "loss %g", a.epoch_loss[1]);
    CHECK_MSG(a.epoch_loss[1] < a.epoch_loss[0], "%g then %g", a.epoch_loss[0], a.epoch_loss[1]);
    CHECK_MSG(a.test_accuracy[1] > 0.75, "accuracy %g", a.test_accuracy[1]);
    int64_t total = 0, diagonal = 0;
    for (int c = 0; c < FASHION_CLASSES * FASHION_CLASSES; c++) {
      total += a.confusion_counts[c];
      if (c / FASHION_CLASSES == c % FASHION_CLASSES) diagonal += a.confusion_counts[c];
    }
    CHECK_INT(total, 1000);
    CHECK(fabs((double)diagonal / 1000 - a.test_accuracy[1]) < 1e-12);
  }

  /* one epoch, then a fresh build resumed from its checkpoint for the second */
  fashion b;
  bool ok_b = fashion_build(&b, &cs) == CN_OK && train(&b, 1);
  CHECK_MSG(ok_b, "%s", fashion_error(&b));
  fashion_destroy(&b);
  fashion c;
  bool ok_c = fashion_build(&c, &cs) == CN_OK && fashion_resume(&c) == CN_OK;
  CHECK_MSG(ok_c, "%s", fashion_error(&c));
  CHECK_INT(c.epochs_done, 1);
  ok_c = ok_c && train(&c, 1);
  if (ok && ok_c) {
    for (int e = 0; e < 2; e++) {
      CHECK_MSG(memcmp(&a.epoch_loss[e], &c.epoch_loss[e], sizeof(double)) == 0,
                "epoch %d loss %.17g resumed %.17g", e, a.epoch_loss[e], c.epoch_loss[e]);
      CHECK(memcmp(&a.test_accuracy[e], &c.test_accuracy[e], sizeof(double)) == 0);
    }
    size_t na, nc;
    float *pa = param_cells(&a, &na), *pc = param_cells(&c, &nc);
    CHECK(pa && pc && na == nc && na == 784 * 128 + 128 + 128 * 10 + 10);
    CHECK(pa && pc && memcmp(pa, pc, na * sizeof *pa) == 0);
    free(pa);
    free(pc);
  }
  fashion_destroy(&c);

  /* a checkpoint of another run (another batch size) */
  fashion d;
  fashion_config other = cs;
  other.batch_size = 25;
  CHECK(fashion_build(&d, &other) == CN_OK);
  CHECK(fashion_resume(&d) != CN_OK);
  CHECK_MSG(strstr(fashion_error(&d), "is of another run") != NULL, "%s", fashion_error(&d));
  fashion_destroy(&d);

  if (ok) {
    /* export: the driver reads 100 images (pixels / 255 as floats) and prints each prediction */
    CHECK_MSG(fashion_export(&a, "fashion_mlp", dir) == CN_OK, "%s", fashion_error(&a));
    cn_array images;
    char path[256];
    snprintf(path, sizeof path, "%s/t10k-images-idx3-ubyte.gz", FASHION_DATA_DIR);
    CHECK(cn_data_load_idx(a.ctx, path, &images) == CN_OK);
    static float pixels[100 * 784];
    for (int i = 0; i < 100 * 784; i++)
      pixels[i] = (float)((const uint8_t *)images.cells)[i] * (float)(1.0 / 255);
    cn_array_free(&images);
    snprintf(path, sizeof path, "%s/images.f32", dir);
    FILE *out = fopen(path, "wb");
    CHECK(out && fwrite(pixels, sizeof pixels, 1, out) == 1 && fclose(out) == 0);
    snprintf(path, sizeof path, "%s/driver.c", dir);
    out = fopen(path, "w");
    CHECK(out != NULL);
    if (out) {
      fputs("#include <stdio.h>\n#include \"fashion_mlp.h\"\n"
            "int main(void) {\n  static float in[100 * 784], logits[10];\n"
            "  FILE *f = fopen(\"images.f32\", \"rb\");\n"
            "  if (!f || fread(in, sizeof in, 1, f) != 1) return 1;\n  fclose(f);\n"
            "  for (int i = 0; i < 100; i++) {\n    fashion_mlp_forward(in + 784 * i, logits);\n"
            "    int best = 0;\n    for (int c = 1; c < 10; c++) if (logits[c] > logits[best]) "
            "best = c;\n    printf(\"%d\", best);\n  }\n  return 0;\n}\n",
            out);
      CHECK(fclose(out) == 0);
    }
    char cmd[512], got[128] = {0}, expected[128] = {0};
    snprintf(cmd, sizeof cmd,
             "cd %s && cc -std=c11 -Wall -Werror -O2 -o driver driver.c fashion_mlp.c -lm && "
             "./driver",
             dir);
    FILE *p = popen(cmd, "r");
    CHECK(p && fgets(got, sizeof got, p) != NULL);
    if (p) CHECK(pclose(p) == 0);
    for (int i = 0; i < 100; i++) {
      int klass = -1;
      CHECK(fashion_predict(&a, pixels + 784 * i, &klass) == CN_OK);
      expected[i] = (char)('0' + klass);
    }
    CHECK_MSG(strcmp(got, expected) == 0, "exported: %s\ncannl:    %s", got, expected);
  }
  fashion_destroy(&a);
}

static void test_convnet(void) {
  fashion_config cfg = {FASHION_CONVNET, 1, 10, 500, 100, 0, 0, 3, NULL, NULL, CN_BACKEND_C, 1};
  fashion f;
  bool ok = fashion_build(&f, &cfg) == CN_OK && train(&f, 1);
  CHECK_MSG(ok, "%s", fashion_error(&f));
  if (ok) CHECK_MSG(f.epoch_loss[0] < log(10.0), "loss %g", f.epoch_loss[0]);
  fashion_destroy(&f);
}

int main(void) {
  if (!fashion_data_available(NULL)) {
    printf("SKIP: Fashion-MNIST is not installed in %s (apt-get install dataset-fashion-mnist, "
           "or make deps)\n",
           FASHION_DATA_DIR);
    return 77;
  }
  snprintf(dir, sizeof dir, "/tmp/cannl-fashion-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_training_and_resume();
  test_convnet();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  CHECK_DONE();
}
