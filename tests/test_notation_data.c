/* The notation's data files (docs/notation.md, "Training on data files"): the builtins dataset
 * (IDX and .npy files written here into a fresh directory: shapes, the values of each batch,
 * shuffling by epoch in the order of cn_dataset_permute, ~limit, ~channels), load and placeholder,
 * the statements shuffle, save_npy (read back with cn_data_load_npy) and checkpoint with restore
 * over two runs of a script (the second resumes: the parameters and Adam's state of the first, and
 * the same values as one uninterrupted run, bit for bit), the export of cn_notation_options, the
 * positioned messages of the failures, and a short Fashion-MNIST run when the data set is
 * installed (else the test says SKIP and exits 77 once everything else passed). */
#include "check.h"

#include "cannl.h"
#include "notation/notation.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

/* dir/name, in a static buffer of its own per slot (a few paths live at once). */
static const char *path_of(int slot, const char *name) {
  static char paths[4][512];
  snprintf(paths[slot], sizeof paths[slot], "%s/%s", dir, name);
  return paths[slot];
}

static void write_file(const char *path, const void *bytes, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK_MSG(f && fwrite(bytes, 1, n, f) == n, "cannot write %s", path);
  if (f) fclose(f);
}

/* An IDX file of bytes: dims big-endian, cells i = first + i. */
static void write_idx(const char *path, int rank, const uint32_t *dims, int first) {
  unsigned char buf[512] = {0, 0, 8, (unsigned char)rank};
  size_t n = 4, cells = 1;
  for (int k = 0; k < rank; k++) {
    for (int b = 3; b >= 0; b--) buf[n++] = (unsigned char)(dims[k] >> (8 * b));
    cells *= dims[k];
  }
  for (size_t i = 0; i < cells; i++) buf[n++] = (unsigned char)(first + (int)i);
  write_file(path, buf, n);
}

/* A version 1.0 .npy file of little-endian float32 cells i / 2 of shape [rows, cols]. */
static void write_npy(const char *path, int rows, int cols) {
  char header[128];
  int len = snprintf(header, sizeof header,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
  while ((10 + len + 1) % 64 != 0) header[len++] = ' ';
  header[len++] = '\n';
  unsigned char buf[1024];
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (unsigned char)(len & 0xff);
  buf[9] = (unsigned char)(len >> 8);
  memcpy(buf + 10, header, (size_t)len);
  size_t n = 10 + (size_t)len;
  for (int i = 0; i < cols * rows; i++) {
    float x = (float)i / 2;
    memcpy(buf + n, &x, 4); /* the test machines are little-endian, as the format asks here */
    n += 4;
  }
  write_file(path, buf, n);
}

/* Runs a script (backend 0 interp, 1 C; optional export options), its output (malloc'd) in *out,
 * the message on failure in error. */
static cn_status run_script(int backend, const char *script, const cn_notation_options *extra,
                            char **out, char *error, size_t cap) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  size_t len = 0;
  FILE *f = open_memstream(out, &len);
  cn_notation_options opts = extra ? *extra : (cn_notation_options){0};
  opts.backend = backend ? CN_BACKEND_C : CN_BACKEND_INTERP;
  opts.json = true;
  opts.out = f;
  cn_status st = cn_notation_run(g, "t.cnl", script, &opts);
  fclose(f);
  snprintf(error, cap, "%s", st == CN_OK ? "" : cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  return st;
}

/* A script expected to run: its output (malloc'd; "" after a failure, reported). */
static char *run_ok(int backend, const char *script) {
  char *out = NULL, error[4096];
  cn_status st = run_script(backend, script, NULL, &out, error, sizeof error);
  CHECK_MSG(st == CN_OK, "script\n%s\nfailed: %s", script, error);
  return out;
}

/* A script expected to fail with a message holding `needle`. */
static void run_fails(const char *script, const char *needle) {
  char *out = NULL, error[4096];
  cn_status st = run_script(0, script, NULL, &out, error, sizeof error);
  CHECK_MSG(st != CN_OK, "script\n%s\nran", script);
  CHECK_HAS(error, needle);
  free(out);
}

static void test_dataset(void) {
  write_idx(path_of(0, "images.idx"), 3, (const uint32_t[]){6, 2, 3}, 0);
  write_idx(path_of(1, "labels.idx"), 1, (const uint32_t[]){6}, 100);
  char script[2048];
  snprintf(script, sizeof script,
           "let (x, y) = dataset ~batch_size:2 \"%s\" \"%s\"\n"
           "let b = static_index 3\n"
           "for b = 0 to 2 do print (y @| b) done\n"
           "print (x @| 1)\n",
           path_of(0, "images.idx"), path_of(1, "labels.idx"));
  char *out = run_ok(0, script);
  CHECK_HAS(out, "\"batch\": [2], \"input\": [], \"output\": [], \"values\": [100, 101]}");
  CHECK_HAS(out, "\"values\": [102, 103]}\n");
  CHECK_HAS(out, "\"values\": [104, 105]}\n");
  CHECK_HAS(out, "\"batch\": [2], \"input\": [], \"output\": [2, 3], \"values\": [12, 13, 14, "
                 "15, 16, 17, 18, 19, 20, 21, 22, 23]}");
  free(out);

  /* ~limit keeps the first examples, ~channels:1 adds an axis to the images only */
  snprintf(script, sizeof script,
           "let (x, y) = dataset ~batch_size:2 ~limit:4 ~channels:1 \"%s\" \"%s\"\n"
           "print y\nprint x\n",
           path_of(0, "images.idx"), path_of(1, "labels.idx"));
  out = run_ok(1, script);
  CHECK_HAS(out, "{\"label\": \"y\", \"batch\": [2, 2], \"input\": [], \"output\": [], "
                 "\"values\": [100, 101, 102, 103]}");
  CHECK_HAS(out, "{\"label\": \"x\", \"batch\": [2, 2], \"input\": [], \"output\": [2, 3, 1]");
  free(out);

  /* .npy; shuffled: epoch 0 before any shuffle, then each epoch's permutation */
  write_npy(path_of(0, "points.npy"), 7, 2);
  snprintf(script, sizeof script,
           "let z = dataset ~batch_size:3 ~shuffle:true ~seed:5 \"%s\"\n"
           "print z\nfor epoch = 1 to 2 do\n  shuffle z ~epoch:epoch\n  print z\ndone\n",
           path_of(0, "points.npy"));
  out = run_ok(0, script);
  const char *line = out;
  for (int epoch = 0; epoch < 3; epoch++) {
    char expected[512] = "\"batch\": [2, 3], \"input\": [], \"output\": [2], \"values\": [";
    for (int j = 0; j < 6; j++) {
      int64_t i = cn_dataset_permute(5, (uint64_t)epoch, 7, j);
      snprintf(expected + strlen(expected), sizeof expected - strlen(expected), "%s%g, %g",
               j ? ", " : "", (double)i, i + 0.5);
    }
    strcat(expected, "]}");
    line = line ? strstr(line, expected) : NULL;
    CHECK_MSG(line != NULL, "epoch %d: expected %s in\n%s", epoch, expected, out);
  }
  free(out);
}

static void test_load_placeholder_save(void) {
  char script[2048];
  snprintf(script, sizeof script,
           "let w = load \"%s\"\nprint w\nlet l = load \"%s\"\nprint (l *. 1)\n"
           "let p = placeholder ~batch_dims:[2] ~output_dims:[3]\nprint p\n"
           "save_npy \"%s\" (w *. 3)\n",
           path_of(0, "points.npy"), path_of(1, "labels.idx"), path_of(2, "saved.npy"));
  char *out = run_ok(1, script);
  CHECK_HAS(out, "{\"label\": \"w\", \"batch\": [], \"input\": [], \"output\": [7, 2], \"values\": "
                 "[0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5]}");
  CHECK_HAS(out, "\"output\": [6], \"values\": [100, 101, 102, 103, 104, 105]}");
  CHECK_HAS(out, "{\"label\": \"p\", \"batch\": [2], \"input\": [], \"output\": [3], \"values\": "
                 "[0, 0, 0, 0, 0, 0]}");
  free(out);
  cn_ctx *ctx = cn_ctx_create();
  cn_array a = {0};
  CHECK_INT(cn_data_load_npy(ctx, path_of(2, "saved.npy"), &a), CN_OK);
  CHECK_INT(a.prec, CN_PREC_SINGLE);
  CHECK_INT(a.rank, 2);
  CHECK_INT(a.dims[0], 7);
  CHECK_INT(a.dims[1], 2);
  for (int i = 0; a.cells && i < 14; i++) CHECK_NEAR(((float *)a.cells)[i], 1.5 * i, 0);
  cn_array_free(&a);
  cn_ctx_destroy(ctx);
}

/* The training script of the resume test: `last` its last epoch, `file` its checkpoint. */
static void resume_script(char *out, size_t cap, const char *file, int last) {
  snprintf(out, cap,
           "let p = {p = [1.0; -2.0; 0.5]}\n"
           "let loss = sum (p *. p *. [1.0; 2.0; 3.0])\n"
           "let start = restore \"%s\" loss ~optimizer:\"adam\"\n"
           "printf \"start %%d\\n\" start\n"
           "print p\n"
           "for epoch = start to %d do\n"
           "  for step = 0 to 2 do\n"
           "    backprop loss\n"
           "    adam loss ~learning_rate:(0.1 /. (1 + !@epoch))\n"
           "  done\n"
           "  checkpoint \"%s\" loss ~epoch:(epoch + 1)\n"
           "done\n"
           "print p\n",
           file, last, file);
}

/* The JSON line of the k-th print of p (0-based), malloc'd. */
static char *print_of_p(const char *out, int k) {
  const char *at = out;
  for (int i = 0; at && i <= k; i++) at = strstr(i ? at + 1 : at, "{\"label\": \"p\"");
  if (!at) return strdup("");
  const char *end = strchr(at, '\n');
  return strndup(at, end ? (size_t)(end - at) : strlen(at));
}

static void test_checkpoint_restore(void) {
  for (int backend = 0; backend < 2; backend++) {
    char script[2048];
    unlink(path_of(0, "resumed.safetensors"));
    unlink(path_of(1, "whole.safetensors"));
    resume_script(script, sizeof script, path_of(0, "resumed.safetensors"), 1);
    char *first = run_ok(backend, script);
    resume_script(script, sizeof script, path_of(0, "resumed.safetensors"), 3);
    char *second = run_ok(backend, script);
    resume_script(script, sizeof script, path_of(1, "whole.safetensors"), 3);
    char *whole = run_ok(backend, script);
    CHECK_HAS(first, "start 0\\n");
    CHECK_HAS(second, "start 2\\n");
    CHECK_HAS(whole, "start 0\\n");
    char *end_first = print_of_p(first, 1), *restored = print_of_p(second, 0);
    char *end_second = print_of_p(second, 1), *end_whole = print_of_p(whole, 1);
    CHECK_STR(restored, end_first);           /* the parameters read back */
    CHECK_STR(end_second, end_whole);         /* Adam's state too: the same run, bit for bit */
    CHECK(strcmp(end_first, end_whole) != 0); /* and the later epochs did move p */
    free(end_first);
    free(restored);
    free(end_second);
    free(end_whole);
    free(first);
    free(second);
    free(whole);
  }
  /* a run past its last epoch trains nothing */
  char script[2048];
  resume_script(script, sizeof script, path_of(0, "resumed.safetensors"), 3);
  char *again = run_ok(0, script);
  CHECK_HAS(again, "start 4\\n");
  free(again);
}

/* Rewrites the checkpoint at path with its metadata "epoch":"OLD" replaced by "epoch":"value"
 * (the header grows or shrinks; its length is rewritten, the data and its CRC are kept). */
static void set_saved_epoch(const char *path, const char *old, const char *value) {
  FILE *f = fopen(path, "rb");
  static unsigned char file[1 << 16], out[1 << 16];
  size_t n = f ? fread(file, 1, sizeof file, f) : 0;
  if (f) fclose(f);
  CHECK(n > 8 && n < sizeof file - 256);
  uint64_t hlen = 0;
  for (int b = 7; b >= 0; b--) hlen = hlen << 8 | file[b];
  char from[64], to[128];
  snprintf(from, sizeof from, "\"epoch\":\"%s\"", old);
  snprintf(to, sizeof to, "\"epoch\":\"%s\"", value);
  char *at = NULL;
  for (size_t i = 8; !at && i + strlen(from) <= 8 + hlen; i++)
    if (memcmp(file + i, from, strlen(from)) == 0) at = (char *)file + i;
  CHECK_MSG(at != NULL, "no %s in %s", from, path);
  if (!at) return;
  size_t before = (size_t)(at - (char *)file) - 8,
         new_len = (size_t)hlen - strlen(from) + strlen(to);
  for (int b = 0; b < 8; b++) out[b] = (unsigned char)((uint64_t)new_len >> (8 * b));
  memcpy(out + 8, file + 8, before);
  memcpy(out + 8 + before, to, strlen(to));
  memcpy(out + 8 + before + strlen(to), at + strlen(from), n - 8 - before - strlen(from));
  write_file(path, out, n - strlen(from) + strlen(to));
}

/* Issue 27: the epoch restore reads from a checkpoint's metadata is decimal digits below 2^53
 * ("99999999999999999999" was saturated to 2^63 - 1 by strtoll); checkpoint writes no other (a
 * host integer is below 9e15). */
static void test_restore_epoch(void) {
  char script[2048];
  const char *file = path_of(2, "epoch.safetensors");
  unlink(file);
  resume_script(script, sizeof script, file, 0); /* one epoch: "epoch" is "1" */
  free(run_ok(0, script));
  set_saved_epoch(file, "1", "7");
  char *out = run_ok(0, script);
  CHECK_HAS(out, "start 7\\n");
  free(out);
  static const char *const bad[] = {
      "99999999999999999999", "9007199254740992", "-1", "+7", " 7", "7 ", "7x", "0x7", ""};
  const char *previous = "7";
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    set_saved_epoch(file, previous, bad[k]);
    previous = bad[k];
    char needle[256];
    snprintf(needle, sizeof needle,
             "epoch.safetensors: the metadata \"epoch\" is \"%s\", expected a non-negative integer "
             "below 2^53 (decimal digits only)",
             bad[k]);
    run_fails(script, "t.cnl:3:21: restore: ");
    run_fails(script, needle);
  }
}

/* Issue 27: an empty array in a file (IDX dims [3, 0], .npy shape (3, 0), 0 examples) is refused
 * at the argument naming the file and the axis, by dataset and load (before, dataset passed its
 * NULL cells to memcpy and failed later at a print with a misleading cell count). */
static void test_empty_arrays(void) {
  write_idx(path_of(0, "empty.idx"), 2, (const uint32_t[]){3, 0}, 0);
  write_npy(path_of(1, "empty.npy"), 3, 0);
  write_idx(path_of(2, "none.idx"), 2, (const uint32_t[]){0, 3}, 0);
  static const struct {
    int slot;
    const char *name, *axis;
  } files[3] = {{0, "empty.idx", "axis 1 of its 2"},
                {1, "empty.npy", "axis 1 of its 2"},
                {2, "none.idx", "axis 0 of its 2"}};
  for (int k = 0; k < 3; k++) {
    const char *path = path_of(files[k].slot, files[k].name);
    char script[1024], needle[1024];
    snprintf(script, sizeof script, "let x = dataset ~batch_size:1 \"%s\"\nprint x\n", path);
    snprintf(
        needle, sizeof needle,
        "t.cnl:1:31: %s holds an empty array: %s has size 0, and a data set needs at least one "
        "example of at least one cell",
        path, files[k].axis);
    run_fails(script, needle);
    snprintf(script, sizeof script, "let x = load \"%s\"\nprint x\n", path);
    snprintf(needle, sizeof needle,
             "t.cnl:1:14: %s holds an empty array: %s has size 0, and a tensor has at least one "
             "cell",
             path, files[k].axis);
    run_fails(script, needle);
  }
}

/* Issue 27: load reads at most 2^26 cells, refused from the header before the cells are read (a
 * 0.5 MB gzip file of 2^29 bytes took 8.9 GB and minutes: each cell passes through a double and
 * the tensor holds it again). The file is sparse: a header of 2^26 + 1 bytes, then a hole. */
static void test_load_limit(void) {
  const char *path = path_of(0, "large.idx");
  const unsigned char header[8] = {0, 0, 8, 1, 4, 0, 0, 1}; /* u8, dims [2^26 + 1] */
  write_file(path, header, sizeof header);
  CHECK(truncate(path, 8 + (1 << 26) + 1) == 0);
  char script[1024], needle[1024];
  snprintf(script, sizeof script, "let x = load \"%s\"\n", path);
  snprintf(needle, sizeof needle,
           "t.cnl:1:14: %s: at byte 8: expected at most 67108864 cells (load's limit: its cells "
           "pass through doubles; dataset reads larger arrays), found 67108865",
           path);
  run_fails(script, needle);
  unlink(path);
}

static void test_errors(void) {
  char script[2048];
  snprintf(script, sizeof script, "let (x, y) =\n  dataset ~batch_size:2 \"%s\" \"%s\"\n",
           path_of(1, "labels.idx"), path_of(0, "missing.idx"));
  char needle[600];
  snprintf(needle, sizeof needle, "t.cnl:2:%d: ", 28 + (int)strlen(path_of(1, "labels.idx")));
  run_fails(script, needle);
  run_fails(script, "missing.idx");
  snprintf(script, sizeof script, "let x = dataset ~batch_size:7 \"%s\"\n",
           path_of(1, "labels.idx"));
  run_fails(script, "t.cnl:1:9: data set \"dataset\": batch size 7");
  snprintf(script, sizeof script, "let x = dataset ~batch_size:2 ~limit:9 \"%s\"\n",
           path_of(1, "labels.idx"));
  run_fails(script, "has 6 examples; ~limit asks for 9");
  run_fails("let x = [1.0; 2.0]\nshuffle x ~epoch:1\n",
            "t.cnl:2:9: shuffle: \"x\" (#1) is not a tensor of a data set (made by dataset)");
  run_fails("let x = load 3\n", "t.cnl:1:14: load expects a file name (a string), found a number");
  /* a checkpoint of a 3-vector p does not fit a 4-vector p */
  snprintf(script, sizeof script,
           "let p = {p = [1.0; 2.0; 3.0; 4.0]}\nlet loss = sum (p *. p)\n"
           "let start = restore \"%s\" loss ~optimizer:\"adam\"\n",
           path_of(0, "resumed.safetensors"));
  run_fails(script, "t.cnl:3:21: ");
  run_fails(script, "\"p\"");
  snprintf(script, sizeof script,
           "let p = {p = [1.0]}\nlet loss = sum (p *. p)\n"
           "let start = restore \"%s\" loss ~optimizer:\"rmsprop\"\n",
           path_of(2, "none.safetensors"));
  run_fails(script, "t.cnl:3:13: restore: ~optimizer is \"adam\", \"sgd\" (its momentum) or "
                    "\"none\", not \"rmsprop\"");
  run_fails("checkpoint \"x\" 1.0\n", "t.cnl:1:1: checkpoint needs ~epoch:VALUE");
  /* an option's error is at the option; ~channels:1 has no room for an axis at the highest rank */
  snprintf(script, sizeof script, "let x = dataset ~batch_size:0 \"%s\"\n",
           path_of(1, "labels.idx"));
  run_fails(script, "t.cnl:1:17: dataset: ~batch_size is 0; it is at least 1");
  snprintf(script, sizeof script, "let x = dataset ~batch_size:1 ~shuffle:1 \"%s\"\n",
           path_of(1, "labels.idx"));
  run_fails(script, "t.cnl:1:31: dataset: ~shuffle expects a boolean, found a number");
  uint32_t deep[CN_MAX_RANK];
  for (int k = 0; k < CN_MAX_RANK; k++) deep[k] = k ? 1 : 2;
  write_idx(path_of(2, "deep.idx"), CN_MAX_RANK, deep, 0);
  snprintf(script, sizeof script, "let x = dataset ~batch_size:1 ~channels:1 \"%s\"\n",
           path_of(2, "deep.idx"));
  run_fails(script, "t.cnl:1:43: ");
  run_fails(script, "has 16 axes: ~channels:1 cannot add one (an array has at most 16)");
}

/* The statements print back as canonical text that parses again to the same text; an
 * application as the tensor stops at ~epoch. */
static void test_print_round_trip(void) {
  const char *script = "shuffle (f x) ~epoch:(e + 1)\ncheckpoint \"a.st\" loss ~epoch:e\n"
                       "save_npy name (x *. 2)\n";
  const char *expected = "shuffle f x ~epoch:(e + 1)\ncheckpoint \"a.st\" loss ~epoch:e\n"
                         "save_npy name x *. 2\n";
  cn_ctx *ctx = cn_ctx_create();
  cn_nt_program *prog = cn_nt_parse_program(ctx, "t.cnl", script);
  CHECK_MSG(prog != NULL, "%s", cn_ctx_error(ctx));
  cn_sbuf first = {0}, second = {0};
  if (prog) cn_nt_print_program(&first, prog);
  CHECK_STR(first.data ? first.data : "", expected);
  cn_nt_program *again = cn_nt_parse_program(ctx, "t.cnl", first.data ? first.data : "");
  if (again) cn_nt_print_program(&second, again);
  CHECK_STR(second.data ? second.data : "", expected);
  CHECK(again && again->items[0].kind == CN_NT_ITEM_SHUFFLE);
  cn_sbuf_free(&first);
  cn_sbuf_free(&second);
  CHECK(cn_nt_parse_program(ctx, "t.cnl", "shuffle x\n") == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "t.cnl:1:1: shuffle needs ~epoch:VALUE");
  cn_ctx_destroy(ctx);
}

static void test_export(void) {
  const char *script = "let image = placeholder ~output_dims:[3]\n"
                       "let%op model x = {w = [(1, 2, 3); (4, 5, 6)]} * x + {b = [1; -1]}\n"
                       "let logits = model image\nlet n = 2\n";
  cn_notation_options opts = {
      .export_input = "image", .export_output = "logits", .export_name = "tiny", .export_dir = dir};
  char *out = NULL, error[4096];
  CHECK_INT(run_script(1, script, &opts, &out, error, sizeof error), CN_OK);
  free(out);
  CHECK(access(path_of(0, "tiny.c"), R_OK) == 0);
  CHECK(access(path_of(1, "tiny.h"), R_OK) == 0);
  opts.export_output = "nothing";
  CHECK(run_script(1, script, &opts, &out, error, sizeof error) != CN_OK);
  free(out);
  CHECK_HAS(error, "t.cnl:4:1: export: the output 'nothing' is not a name the script binds at its "
                   "top level");
  opts.export_output = "n";
  CHECK(run_script(1, script, &opts, &out, error, sizeof error) != CN_OK);
  free(out);
  CHECK_HAS(error, "export: the output 'n' is bound to a number, not a tensor");
}

/* 200 Adam steps on the first 2,000 training images (a few seconds): the loss of the last epoch
 * falls well below log(10) = 2.3 of a uniform guess. */
static bool test_fashion(void) {
  const char *data = "/usr/share/datasets/fashion-mnist";
  if (access(data, R_OK) != 0) return false;
  char script[2048];
  snprintf(script, sizeof script,
           "let (images, labels) = dataset ~batch_size:100 ~shuffle:true ~limit:2000\n"
           "  \"%s/train-images-idx3-ubyte.gz\" \"%s/train-labels-idx1-ubyte.gz\"\n"
           "let batch = static_index 20\n"
           "let%%op mlp x = {w2} * relu ({w1} * ((x *. (1.0 /. 255.0) - 0.286) *. (1.0 /. 0.353))"
           " + {b1; o = [64]}) + {b2; o = [10]}\n"
           "let loss = cross_entropy (mlp (images @| batch)) (labels @| batch)\n"
           "let%%cd sum_loss = {epoch_loss} =+ loss\nlet%%cd restart = epoch_loss =: 0\n"
           "for epoch = 0 to 9 do\n  shuffle images ~epoch:epoch\n  run restart\n"
           "  for batch = 0 to 19 do\n    backprop loss\n    adam loss ~learning_rate:0.002\n"
           "    run sum_loss\n  done\ndone\nprintf \"%%.17g\\n\" (epoch_loss /. 20)\n",
           data, data);
  char *out = run_ok(1, script);
  const char *text = strstr(out, "{\"text\": \"");
  double loss = text ? strtod(text + strlen("{\"text\": \""), NULL) : 99;
  printf("fashion: last epoch's loss %.4f\n", loss);
  CHECK(loss < 0.6);
  free(out);
  return true;
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cannl_data_XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  test_dataset();
  test_load_placeholder_save();
  test_checkpoint_restore();
  test_restore_epoch();
  test_empty_arrays();
  test_load_limit();
  test_errors();
  test_print_round_trip();
  test_export();
  bool fashion = test_fashion();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
  if (!fashion && check_failed_ == 0) {
    printf("%d passed\nSKIP: /usr/share/datasets/fashion-mnist is not installed: the short "
           "Fashion-MNIST run did not run\n",
           check_passed_);
    return 77;
  }
  CHECK_DONE();
}
