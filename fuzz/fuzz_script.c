/* libFuzzer target: the notation's parser (cn_nt_parse_program, cn_nt_parse_expr,
 * cn_nt_parse_cd), which also parses the bodies of let%tile functions (src/tile). The input (up
 * to its first NUL byte) is a script. Beyond ASan and UBSan, the harness aborts (a crash libFuzzer
 * reports) when a documented property fails:
 *   - a refused text is CN_ERR_INVALID with a "fuzz.cnl:LINE:COL: " message;
 *   - an accepted program, expression or %cd sequence prints as canonical text that parses again
 *     and prints the same (notation.h).
 * Scripts are parsed, not run: the evaluator has no budget, and a valid script may allocate
 * gigabytes or loop for hours, which libFuzzer would report as failures that are not bugs.
 * One context per input, destroyed after it. */
#include "notation/notation.h"

#define FUZZ_NAME "fuzz_script"
#include "fuzz_common.h"

typedef enum { PROGRAM, EXPR, CD } form;

static void *parse(cn_ctx *ctx, form f, const char *text) {
  switch (f) {
  case PROGRAM: return cn_nt_parse_program(ctx, "fuzz.cnl", text);
  case EXPR: return cn_nt_parse_expr(ctx, "fuzz.cnl", text);
  case CD: return cn_nt_parse_cd(ctx, "fuzz.cnl", text);
  }
  abort();
}

/* The canonical text of a tree (malloc'd). */
static char *print(form f, const void *tree) {
  cn_sbuf sb = {0};
  switch (f) {
  case PROGRAM: cn_nt_print_program(&sb, tree); break;
  case EXPR: cn_nt_print_expr(&sb, tree); break;
  case CD: cn_nt_print_cd(&sb, tree); break;
  }
  if (sb.failed) abort(); /* no allocation limit here: memory does not run out */
  char *s = strdup(sb.data ? sb.data : "");
  cn_sbuf_free(&sb);
  if (!s) abort();
  return s;
}

static void check(form f, const char *text) {
  cn_ctx *ctx = cn_ctx_create();
  if (!ctx) abort();
  void *tree = parse(ctx, f, text);
  if (!tree) {
    if (cn_ctx_status(ctx) != CN_ERR_INVALID || strncmp(cn_ctx_error(ctx), "fuzz.cnl:", 9) != 0)
      fail("a refusal that is not a positioned CN_ERR_INVALID:", cn_ctx_error(ctx));
  } else {
    char *first = print(f, tree);
    void *again = parse(ctx, f, first);
    if (!again) fail("the canonical text does not parse:", cn_ctx_error(ctx));
    char *second = print(f, again);
    if (strcmp(first, second) != 0) fail("the canonical text prints differently:", first);
    free(first);
    free(second);
  }
  cn_ctx_destroy(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  check(PROGRAM, text);
  check(EXPR, text);
  check(CD, text);
  free(text);
  return 0;
}
