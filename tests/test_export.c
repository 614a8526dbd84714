/* AOT export (cn_graph_export_c): models exported as C files, compiled alone with
 * `cc -std=c11 -Wall -Werror` into a driver that prints each output cell's bits, which must equal
 * the cells cannl computes from the same inputs:
 *   - an MLP 256 -> 128 -> 10 with relu on batches of 8 (its first product is a GEMM plan: the
 *     generated driver is exported, under CN_STANDALONE, not the call of cannl's GEMM library)
 *     on 5 inputs, called one after another (static buffers reused);
 *   - a padded 3x3 convolution with bias, relu and max pooling, whose input buffer has padding
 *     margins (the copy into the padded layout);
 *   - the header declares NAME_forward, and two exported models link into one program;
 *   - errors: a name that is not a C identifier or too long, a computed input, a double-precision
 *     output, a forward reading a static index, an output the input does not reach, a missing
 *     directory;
 *   - outside text is data (issue 27): the comment escaper and the name check on their own, and a
 *     model whose labels hold the injection payload, splices, line breaks, trigraphs, nested
 *     comments and non-ASCII bytes exports C that compiles under -Wall -Wextra -Werror, defines
 *     exactly the expected symbols (nm), computes cannl's outputs and never runs the payload. */
#include "check.h"

#include "cannl.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_INPUTS  5
#define MLP_BATCH 8 /* rows of the MLP's input: its products are GEMMs */

static char dir[64];

static double input_value(int k, int64_t i) {
  return ((double)((k * 131 + i * 71) % 97) - 48.0) / 37.0;
}

/* The driver: NAME_forward on N_INPUTS inputs, each output cell's bits as 8 hex digits. */
static bool write_driver(const char *names[], int n_models, const int64_t *in_cells,
                         const int64_t *out_cells) {
  char path[128];
  snprintf(path, sizeof path, "%s/driver.c", dir);
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fprintf(f, "#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n");
  for (int m = 0; m < n_models; m++) fprintf(f, "#include \"%s.h\"\n", names[m]);
  fprintf(f, "int main(void) {\n  static float in[4096], out[4096];\n  uint32_t bits;\n");
  for (int m = 0; m < n_models; m++) {
    fprintf(f, "  for (int k = 0; k < %d; k++) {\n", N_INPUTS);
    fprintf(f, "    for (int i = 0; i < %lld; i++)\n", (long long)in_cells[m]);
    fprintf(f, "      in[i] = (float)(((double)((k * 131 + i * 71) %% 97) - 48.0) / 37.0);\n");
    fprintf(f, "    %s_forward(in, out);\n", names[m]);
    fprintf(f, "    for (int i = 0; i < %lld; i++) {\n", (long long)out_cells[m]);
    fprintf(f, "      memcpy(&bits, &out[i], 4);\n      printf(\"%%08x\\n\", bits);\n    }\n");
    fprintf(f, "  }\n");
  }
  fprintf(f, "  return 0;\n}\n");
  return fclose(f) == 0;
}

/* Compiles the driver with the exported files and reads its output into text (malloc'd). */
static char *build_and_run(const char *names[], int n_models) {
  char cmd[1024];
  int at =
      snprintf(cmd, sizeof cmd, "cd %s && cc -std=c11 -Wall -Werror -O2 -o driver driver.c", dir);
  for (int m = 0; m < n_models; m++)
    at += snprintf(cmd + at, sizeof cmd - (size_t)at, " %s.c", names[m]);
  snprintf(cmd + at, sizeof cmd - (size_t)at, " -lm 2>&1 && ./driver");
  FILE *p = popen(cmd, "r");
  if (!p) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *text = malloc(cap);
  size_t got;
  while (text && (got = fread(text + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (len + 1 == cap) {
      char *bigger = realloc(text, cap *= 2);
      if (!bigger) free(text);
      text = bigger;
    }
  }
  int rc = pclose(p);
  if (!text) return NULL;
  text[len] = '\0';
  if (rc != 0) {
    fprintf(stderr, "driver build or run failed:\n%s\n", text);
    free(text);
    return NULL;
  }
  return text;
}

/* What cannl computes: the forward routine on each input, the output cells' bits appended to
 * expected in the driver's format. */
static bool cannl_outputs(cn_ctx *ctx, cn_graph *g, cn_tensor *x, cn_tensor *y, char *expected,
                          size_t cap) {
  cn_routine *init = cn_routine_compile(ctx, cn_graph_init_params(g, y), CN_BACKEND_C, "init");
  cn_routine *fwd = cn_routine_compile(ctx, cn_graph_forward(g, y), CN_BACKEND_C, "fwd");
  bool ok = init && fwd && cn_routine_run(init) == CN_OK;
  int64_t n_in = cn_node_numel(cn_tensor_value(x)), n_out = cn_node_numel(cn_tensor_value(y));
  float *in = malloc(sizeof(float) * (size_t)n_in), *out = malloc(sizeof(float) * (size_t)n_out);
  size_t at = 0;
  for (int k = 0; k < N_INPUTS && ok && in && out; k++) {
    for (int64_t i = 0; i < n_in; i++) in[i] = (float)input_value(k, i);
    ok = cn_node_set_cells(cn_tensor_value(x), false, in, (size_t)n_in) == CN_OK &&
         cn_routine_run(fwd) == CN_OK &&
         cn_node_get_cells(cn_tensor_value(y), false, out, (size_t)n_out) == CN_OK;
    for (int64_t i = 0; i < n_out && ok; i++) {
      uint32_t bits;
      memcpy(&bits, &out[i], 4);
      at += (size_t)snprintf(expected + at, cap - at, "%08x\n", bits);
    }
  }
  free(in);
  free(out);
  cn_routine_free(init);
  cn_routine_free(fwd);
  return ok && in && out;
}

static const cn_dims *out_dims(cn_dims *d, int n, const int64_t *dims) {
  *d = (cn_dims){CN_AXES_NONE, CN_AXES_NONE, {n, dims, NULL}};
  return d;
}

/* w2 * relu(w1 * x + b1) + b2 with x a placeholder of MLP_BATCH rows of 256 cells. */
static cn_tensor *mlp(cn_graph *g, cn_tensor *x) {
  int64_t hidden = 128, classes = 10;
  cn_dims d1, d2;
  cn_tensor *w1 = cn_tensor_param(g, "w1", NULL, cn_tensor_kaiming_uniform(g, 256));
  cn_tensor *b1 = cn_tensor_param(g, "b1", out_dims(&d1, 1, &hidden), cn_tensor_number(g, 0.01));
  cn_tensor *h =
      cn_tensor_apply(g, CN_OP_RELU, 1,
                      (cn_tensor *[]){cn_tensor_apply(
                          g, CN_OP_ADD, 2, (cn_tensor *[]){cn_tensor_matmul(g, w1, x), b1})});
  cn_tensor *w2 = cn_tensor_param(g, "w2", NULL, cn_tensor_kaiming_uniform(g, 128));
  cn_tensor *b2 = cn_tensor_param(g, "b2", out_dims(&d2, 1, &classes), cn_tensor_number(g, -0.02));
  return cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){cn_tensor_matmul(g, w2, h), b2});
}

/* maxpool2(relu(conv3x3(x) + bias)) with x a 8x8x3 placeholder, 4 output channels. */
static cn_tensor *convnet(cn_graph *g, cn_tensor *x) {
  int64_t kdims[3] = {3, 3, 3}, oc = 4;
  cn_dims kd = {CN_AXES_NONE, {3, kdims, NULL}, {1, &oc, NULL}}, bd;
  cn_tensor *k = cn_tensor_param(g, "k", &kd, cn_tensor_kaiming_uniform(g, 27));
  cn_tensor *bias = cn_tensor_param(g, "bias", out_dims(&bd, 1, &oc), cn_tensor_number(g, 0.05));
  cn_tensor *c = cn_tensor_conv2d(g, x, k, bias, NULL);
  return cn_tensor_max_pool2d(g, cn_tensor_apply(g, CN_OP_RELU, 1, &c), 2, 0);
}

typedef cn_tensor *model_fn(cn_graph *g, cn_tensor *x);

/* Builds a model on a placeholder of the given dims (labeled input_label, its axes axis_labels
 * unless NULL; MLP_BATCH rows for the MLP), exports it as `name`, and appends what cannl computes
 * to expected. */
static bool export_model(const char *name, model_fn *model, const char *input_label,
                         const char *const *axis_labels, int rank, const int64_t *dims,
                         char *expected, size_t cap, int64_t *in_cells, int64_t *out_cells) {
  cn_ctx *ctx = cn_ctx_create();
  /* the suite also runs with CANNL_SCHEDULE=none: the MLP's GEMM plan is what is checked */
  if (model == mlp) CHECK_INT(cn_ctx_set_option(ctx, "schedule", "all"), CN_OK);
  cn_graph *g = cn_graph_create(ctx);
  cn_dims xd;
  out_dims(&xd, rank, dims);
  xd.output.labels = axis_labels;
  const int64_t batch = MLP_BATCH;
  if (model == mlp) xd.batch = (cn_axes){1, &batch, NULL};
  cn_tensor *x = cn_tensor_buffer(g, input_label, &xd);
  cn_tensor *y = model(g, x);
  bool ok = y && cannl_outputs(ctx, g, x, y, expected + strlen(expected), cap - strlen(expected));
  CHECK_MSG(ok, "%s: %s", name, cn_ctx_error(ctx));
  if (ok) {
    cn_status st = cn_graph_export_c(g, x, y, name, dir);
    CHECK_MSG(st == CN_OK, "%s: %s", name, cn_ctx_error(ctx));
    ok = st == CN_OK;
    *in_cells = cn_node_numel(cn_tensor_value(x));
    *out_cells = cn_node_numel(cn_tensor_value(y));
  }
  cn_ctx_destroy(ctx);
  return ok;
}

static void test_models(void) {
  static char expected[1 << 16];
  expected[0] = '\0';
  const char *names[2] = {"mlp_model", "conv_model"};
  int64_t in_cells[2] = {0}, out_cells[2] = {0}, x_dims[3] = {8, 8, 3}, mlp_dims = 256;
  bool ok = export_model(names[0], mlp, "image", NULL, 1, &mlp_dims, expected, sizeof expected,
                         &in_cells[0], &out_cells[0]) &&
            export_model(names[1], convnet, "image", NULL, 3, x_dims, expected, sizeof expected,
                         &in_cells[1], &out_cells[1]);
  CHECK_INT(out_cells[0], MLP_BATCH * 10);
  CHECK_INT(out_cells[1], 4 * 4 * 4);
  if (!ok || !write_driver(names, 2, in_cells, out_cells)) {
    CHECK(0);
    return;
  }
  char *got = build_and_run(names, 2);
  CHECK(got != NULL);
  if (got) {
    CHECK_INT(strlen(got), strlen(expected));
    CHECK_MSG(strcmp(got, expected) == 0, "exported outputs differ from cannl's");
    free(got);
  }
  /* the header declares the one function */
  char path[128], line[256];
  snprintf(path, sizeof path, "%s/mlp_model.h", dir);
  FILE *h = fopen(path, "r");
  bool declared = false;
  while (h && fgets(line, sizeof line, h))
    declared =
        declared || strcmp(line, "void mlp_model_forward(const float *in, float *out);\n") == 0;
  if (h) fclose(h);
  CHECK(declared);
  /* the MLP's GEMM is the generated driver (compiled: the exported outputs above are cannl's) */
  snprintf(path, sizeof path, "%s/mlp_model.c", dir);
  bool standalone = false, driver = false;
  h = fopen(path, "r");
  while (h && fgets(line, sizeof line, h)) {
    standalone = standalone || strncmp(line, "#define CN_STANDALONE 1", 23) == 0;
    driver = driver || strncmp(line, "static inline void cn_ukr_", 26) == 0;
  }
  if (h) fclose(h);
  CHECK(standalone && driver);
}

/* The escaper and the name check (src/core) on their own: each byte class, NUL included, and a
 * pair split across the call's start. */
static void test_comment_text(void) {
  static const char text[] = "a*/b\0c?\?/\\\n?\x7f\x80\xff ~";
  cn_sbuf sb = {0};
  cn_sbuf_c_comment_text(&sb, text, sizeof text - 1);
  CHECK_STR(sb.data, "a*\\x2fb\\x00c?\\x3f/\\x5c\\x0a?\\x7f\\x80\\xff ~");
  cn_sbuf_free(&sb);
  const char *before[4] = {"x*", "/", "?", "*"}, *after[4] = {"/y", "*", "?", "*"};
  const char *joined[4] = {"x*\\x2fy", "/\\x2a", "?\\x3f", "*\\x2a"};
  for (int k = 0; k < 4; k++) {
    cn_sbuf_puts(&sb, before[k]);
    cn_sbuf_c_comment_text(&sb, after[k], strlen(after[k]));
    CHECK_STR(sb.data, joined[k]);
    cn_sbuf_free(&sb);
  }
  cn_sbuf_c_comment_text(&sb, "", 0);
  CHECK(sb.len == 0);
  const char *good[6] = {"a", "A1_", "x_cn", "cnx", "Cn_x", "cN"};
  const char *bad[10] = {"", "_a", "1a", "a-b", "cn", "CN", "cn_x", "CN_X", "\xc3\xa9", "a b"};
  for (int k = 0; k < 6; k++) CHECK_MSG(cn_is_c_name(good[k]), "'%s' refused", good[k]);
  for (int k = 0; k < 10; k++) CHECK_MSG(!cn_is_c_name(bad[k]), "'%s' accepted", bad[k]);
  CHECK(!cn_is_c_name(NULL));
}

/* ---- Hostile labels ----
 * Labels that would turn a comment of the exported C into code, or break the file, if written as
 * they are: the payload (a comment terminator, a constructor calling system(), a comment
 * opener), a backslash-newline splice, line breaks, trigraphs (??/ is a backslash under -std=c11),
 * a nested comment opener, a trailing '*' and '/', control and non-ASCII bytes (a bidi override,
 * which gcc reports under -Werror). The input, the output and the parameters carry them, and the
 * input's axis (its name is in the files' shapes). */
#define N_HOSTILE 8
static char payload[256];
static const char *hostile[N_HOSTILE] = {
    payload,
    "back\\slash\\",
    "splice\\\nint injected_splice;",
    "line\nint injected_line;\r\n",
    "tri?\?/\nint injected_trigraph; ?\?=define X ?\?( ?\?) ?\?" /* trigraphs, spelled so that this
                                                                    file has none */
    ,
    "/* nested /* *",
    "\x01\x7f\xe2\x80\xae\xff rlo /",
    "end*",
};

/* in + p0 + p1 + ... , each parameter a constant, scaled by a last parameter, labeled by hostile */
static cn_tensor *hostile_model(cn_graph *g, cn_tensor *x) {
  cn_tensor *y = x;
  for (int k = 0; k < N_HOSTILE && y; k++) {
    cn_tensor *p = cn_tensor_param(g, hostile[k], NULL, cn_tensor_number(g, 0.25 * (k + 1)));
    y = cn_tensor_apply(g, k % 2 ? CN_OP_MUL : CN_OP_ADD, 2, (cn_tensor *[]){y, p});
  }
  if (y && cn_tensor_set_label(y, payload) != CN_OK) return NULL;
  return y;
}

/* The object's symbols as `nm` prints them, one "TYPE NAME" per line, sorted (malloc'd). */
static char *symbols(const char *object) {
  char cmd[640];
  snprintf(cmd, sizeof cmd, "nm -P '%s' | awk '{print $2, $1}' | LC_ALL=C sort", object);
  FILE *p = popen(cmd, "r");
  if (!p) return NULL;
  static char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, p);
  text[n] = '\0';
  return pclose(p) == 0 ? strdup(text) : NULL;
}

static int compare_lines(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* What nm must list for the hostile model, sorted as symbols() sorts: the two functions of the
 * header's contract (global), the routine's static function, and one static array per buffer of
 * the entry point, in its order: the input (zeroed), then each parameter (const, its cells) and
 * the sum or product it enters (zeroed: computed), the last being the output. */
static void expect_symbols(char *text, size_t cap) {
  static char lines[3 + 2 * N_HOSTILE + 1][32];
  const char *sorted[3 + 2 * N_HOSTILE + 1];
  int n = 0;
  snprintf(lines[n++], sizeof lines[0], "T inj_forward\n");
  snprintf(lines[n++], sizeof lines[0], "T inj_model_entry\n");
  snprintf(lines[n++], sizeof lines[0], "t inj_model_body\n");
  for (int i = 0; i <= 2 * N_HOSTILE; i++)
    snprintf(lines[n++], sizeof lines[0], "%c inj_b%d\n", i % 2 ? 'r' : 'b', i);
  for (int i = 0; i < n; i++) sorted[i] = lines[i];
  qsort(sorted, (size_t)n, sizeof *sorted, compare_lines);
  text[0] = '\0';
  for (int i = 0; i < n; i++) strncat(text, sorted[i], cap - strlen(text) - 1);
}

/* The hostile model exported as inj.c: compiles alone under -Wall -Wextra -Werror, defines exactly
 * inj_forward and inj_model_entry (global), the static arrays inj_b0..inj_b16 and the routine's
 * function inj_model_body (no constructor, nothing calling system()), computes what cannl
 * computes, and the payload's file is never created. */
static void test_hostile_labels(void) {
  char pwned[128], path[512], cmd[1024];
  snprintf(pwned, sizeof pwned, "%s/pwned", dir);
  snprintf(payload, sizeof payload,
           "*/ int system(const char *); __attribute__((constructor)) static void f(void){ "
           "system(\"touch %s\"); } /*",
           pwned);
  static char expected[1 << 12];
  expected[0] = '\0';
  const char *names[1] = {"inj"}, *const axis_label[1] = {hostile[4]};
  int64_t in_cells = 0, out_cells = 0, n = 4;
  bool ok = export_model(names[0], hostile_model, payload, axis_label, 1, &n, expected,
                         sizeof expected, &in_cells, &out_cells);
  CHECK(ok);
  snprintf(cmd, sizeof cmd, "cc -std=c11 -Wall -Wextra -Werror -c %s/inj.c -o %s/inj.o", dir, dir);
  CHECK_INT(system(cmd), 0);
  snprintf(path, sizeof path, "%s/inj.o", dir);
  char *got = symbols(path), expected_symbols[1024];
  expect_symbols(expected_symbols, sizeof expected_symbols);
  CHECK(got != NULL);
  if (got) {
    CHECK_STR(got, expected_symbols);
    free(got);
  }
  if (!ok || !write_driver(names, 1, &in_cells, &out_cells)) {
    CHECK(0);
    return;
  }
  char *outputs = build_and_run(names, 1);
  CHECK(outputs != NULL);
  if (outputs) {
    CHECK_STR(outputs, expected);
    free(outputs);
  }
  CHECK_MSG(access(pwned, F_OK) != 0, "the payload ran: %s exists", pwned);
  /* the header's comment holds the payload escaped, on one line */
  snprintf(path, sizeof path, "%s/inj.h", dir);
  FILE *h = fopen(path, "r");
  char line[512] = "", shapes[512] = "";
  CHECK(h && fgets(line, sizeof line, h) && fgets(shapes, sizeof shapes, h));
  if (h) fclose(h);
  CHECK_HAS(shapes, "(shape |->4:tri?\\x3f/\\x0aint injected_trigraph; ?\\x3f=define X ?\\x3f( "
                    "?\\x3f) ?\\x3f), out receives 4");
  CHECK_HAS(line, "\"*\\x2f int system(const char *); __attribute__((constructor)) static void");
  CHECK_HAS(line, "); } /\\x2a\", exported by cannl (inj.c).\n");
}

static void expect_error(cn_ctx *ctx, cn_status st, const char *needle) {
  CHECK_MSG(st != CN_OK && strstr(cn_ctx_error(ctx), needle), "expected \"%s\", got \"%s\"", needle,
            cn_ctx_error(ctx));
}

static void test_errors(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  int64_t n = 64;
  cn_dims xd;
  cn_tensor *x = cn_tensor_buffer(g, "x", out_dims(&xd, 1, &n));
  cn_tensor *y = mlp(g, x);
  cn_tensor *computed = cn_tensor_apply(g, CN_OP_RELU, 1, &x);
  cn_tensor *other = cn_tensor_buffer(g, "other", out_dims(&xd, 1, &n));
  cn_tensor *z = cn_tensor_apply(g, CN_OP_NEG, 1, &other);
  cn_symbol s = cn_symbol_create(ctx, "step", 4);
  cn_tensor *with_symbol =
      cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){x, cn_tensor_embed_symbol(g, s)});
  CHECK(y && computed && z && with_symbol);
  expect_error(ctx, cn_graph_export_c(g, x, y, "not-an-identifier", dir), "not a C identifier");
  expect_error(ctx, cn_graph_export_c(g, computed, y, "m", dir), "is computed");
  expect_error(ctx, cn_graph_export_c(g, x, z, "m", dir), "does not read the input");
  expect_error(ctx, cn_graph_export_c(g, x, with_symbol, "m", dir), "static index 'step'");
  expect_error(ctx, cn_graph_export_c(g, x, y, "m", "/nonexistent-cannl-dir"), "cannot create");
  char long_name[260];
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  expect_error(ctx, cn_graph_export_c(g, x, y, long_name, dir), "longer than 200 characters");
  cn_ctx_destroy(ctx);

  ctx = cn_ctx_create();
  g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  x = cn_tensor_buffer(g, "x", out_dims(&xd, 1, &n));
  y = cn_tensor_apply(g, CN_OP_RELU, 1, &x);
  expect_error(ctx, cn_graph_export_c(g, x, y, "m", dir), "is double");
  cn_ctx_destroy(ctx);
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cannl-export-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_comment_text();
  test_models();
  test_hostile_labels();
  test_errors();
  remove_dir();
  CHECK_DONE();
}
