/* Every ```cnl example of docs/notation.md runs (interpreter backend, the default single
 * precision) and prints exactly the ```output block that follows it, so the reference cannot
 * drift from the implementation. */
#include "check.h"

#include "cannl.h"

#include <stdlib.h>

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (text && fread(text, 1, (size_t)n, f) == (size_t)n)
    text[n] = '\0';
  else if (text) {
    free(text);
    text = NULL;
  }
  fclose(f);
  return text;
}

/* The next fenced block of the given kind after *p: its body (malloc'd), advancing *p. */
static char *block(const char **p, const char *kind) {
  char fence[32];
  snprintf(fence, sizeof fence, "```%s\n", kind);
  const char *start = strstr(*p, fence);
  if (!start) return NULL;
  start += strlen(fence);
  const char *end = strstr(start, "```\n");
  if (!end) return NULL;
  char *body = malloc((size_t)(end - start) + 1);
  memcpy(body, start, (size_t)(end - start));
  body[end - start] = '\0';
  *p = end + 4;
  return body;
}

int main(void) {
  const char *root = getenv("CANNL_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/docs/notation.md", root ? root : ".");
  char *doc = slurp(path);
  CHECK_MSG(doc != NULL, "cannot read %s", path);
  if (!doc) CHECK_DONE();
  const char *p = doc;
  int examples = 0;
  for (char *script; (script = block(&p, "cnl")) != NULL; examples++) {
    char *expected = block(&p, "output");
    CHECK_MSG(expected != NULL, "example %d has no output block", examples + 1);
    cn_ctx *ctx = cn_ctx_create();
    cn_graph *g = cn_graph_create(ctx);
    char *got = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&got, &len);
    cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .out = out};
    cn_status st = cn_notation_run(g, "notation.md", script, &opts);
    fclose(out);
    CHECK_MSG(st == CN_OK, "example %d: %s", examples + 1, cn_ctx_error(ctx));
    if (expected) CHECK_STR(got, expected);
    free(got);
    free(expected);
    free(script);
    cn_ctx_destroy(ctx);
  }
  CHECK(examples >= 4);
  free(doc);
  CHECK_DONE();
}
