/* libFuzzer target: the AOT export's handling of outside text (issue 27). The input is split at
 * its NUL bytes into up to five labels (each cut at 200 bytes): the input's, two parameters', the
 * output's of the model out = in * p + q on 2 cells, and the name of the input's axis (shapes are
 * written into the files' comments too). The model is exported as fz.c / fz.h
 * into a private temporary directory, fz.c is compiled alone with
 * `cc -std=c11 -Wall -Wextra -Werror -c`, and the object's symbols (`nm -P`: names and types,
 * defined and undefined) must equal those of the same model with plain labels, exported once at
 * start-up: fz_forward, fz_model_entry, fz_model_body, fz_b0..fz_b4 and the C library functions
 * the code calls. A label that escaped its comment would add a symbol (a function, a constructor,
 * a call to system()) or break the -Werror compilation; either aborts, which libFuzzer reports.
 * Every input's files are removed after it, the directory at exit. Compiling is slow (two
 * compilations per input: cannl's own of the forward routine, at -O0 and without the shared
 * cache, and the check's), so the model is tiny; expect one or two inputs per second. */
#include "cannl.h"

#define FUZZ_NAME "fuzz_export"
#include "fuzz_common.h"

#include <dirent.h>
#include <errno.h>
#include <unistd.h>

#define LABEL_MAX 200

static char dir[64];

/* Removes every file of the directory (the export's, the object, any left by the compiler). */
static void clear_dir(void) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[512];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  closedir(d);
}

static void remove_dir(void) {
  clear_dir();
  rmdir(dir);
}

/* Exports the model with these labels; false when cannl refuses a label (the status must then be
 * CN_ERR_INVALID: no other failure is acceptable for a valid model). */
static bool export_model(const char *const labels[5]) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  if (!g || cn_ctx_set_option(ctx, "cache_dir", "off") != CN_OK ||
      cn_ctx_set_option(ctx, "cflags", "-O0 -shared -fPIC -std=c11") != CN_OK)
    abort();
  int64_t n = 2;
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n, &labels[4]}};
  cn_tensor *x = cn_tensor_buffer(g, labels[0], &d);
  cn_tensor *p = cn_tensor_param(g, labels[1], NULL, cn_tensor_number(g, 0.5));
  cn_tensor *q = cn_tensor_param(g, labels[2], NULL, cn_tensor_number(g, -1.25));
  cn_tensor *xp = x && p ? cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){x, p}) : NULL;
  cn_tensor *y = xp && q ? cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){xp, q}) : NULL;
  bool built = y && cn_tensor_set_label(y, labels[3]) == CN_OK;
  if (!built && cn_ctx_status(ctx) != CN_ERR_INVALID)
    fail("building the model failed with a status other than CN_ERR_INVALID:", cn_ctx_error(ctx));
  if (built) {
    cn_asgn *init = cn_graph_init_params(g, y);
    cn_routine *r = init ? cn_routine_compile(ctx, init, CN_BACKEND_INTERP, "init") : NULL;
    if (!r || cn_routine_run(r) != CN_OK || cn_graph_export_c(g, x, y, "fz", dir) != CN_OK)
      fail("a valid model failed to export:", cn_ctx_error(ctx));
    cn_routine_free(r);
  }
  cn_ctx_destroy(ctx);
  return built;
}

/* Runs cmd through the shell, its output into out (NUL-terminated); whether it exited with 0.
 * Reads retry on EINTR: libFuzzer's -timeout alarm interrupts them. */
static bool run_command(const char *cmd, char *out, size_t cap) {
  FILE *p = popen(cmd, "r");
  if (!p) return false;
  size_t n = 0;
  for (;;) {
    ssize_t got = read(fileno(p), out + n, cap - 1 - n);
    if (got > 0 && (n += (size_t)got) < cap - 1) continue;
    if (got < 0 && errno == EINTR) continue;
    break;
  }
  out[n] = '\0';
  return pclose(p) == 0;
}

/* fz.c compiled under -Werror, then the object's symbols ("NAME TYPE" lines) into out. */
static void compile_and_list(char *out, size_t cap) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "cc -std=c11 -Wall -Wextra -Werror -c %s/fz.c -o %s/fz.o 2>&1", dir,
           dir);
  if (!run_command(cmd, out, cap)) fail("the exported C does not compile under -Werror:", out);
  snprintf(cmd, sizeof cmd, "nm -P %s/fz.o | cut -d' ' -f1,2 | LC_ALL=C sort", dir);
  if (!run_command(cmd, out, cap) || !out[0]) fail("nm failed on the object:", out);
}

static char expected[4096];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  snprintf(dir, sizeof dir, "/tmp/cannl-fuzz-export-XXXXXX");
  if (!mkdtemp(dir)) abort();
  atexit(remove_dir);
  const char *plain[5] = {"in", "p", "q", "out", "i"};
  if (!export_model(plain)) fail("the plain model does not build", "");
  compile_and_list(expected, sizeof expected);
  clear_dir();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size); /* NUL-terminated, the input's NULs kept */
  if (!text) return 0;
  const char *labels[5] = {"in", "p", "q", "out", "i"};
  size_t at = 0;
  for (int k = 0; k < 5 && at < size; k++) {
    size_t n = strlen(text + at);
    labels[k] = text + at;
    if (n > LABEL_MAX) text[at + LABEL_MAX] = '\0';
    at += n + 1;
  }
  if (export_model(labels)) {
    static char got[4096];
    compile_and_list(got, sizeof got);
    if (strcmp(got, expected) != 0) {
      fprintf(stderr, "expected symbols:\n%s", expected);
      fail("the object's symbols differ from the plain model's:", got);
    }
  }
  clear_dir();
  free(text);
  return 0;
}
