/* Every ```cnl example of docs/notation.md runs (interpreter backend, the default single
 * precision) and prints exactly the ```output block that follows it, and the reference's table of
 * builtins lists exactly the builtins of src/notation/builtins.def with their numbers of
 * positional arguments, so the reference cannot drift from the implementation. */
#include "check.h"

#include "cannl.h"

#include <stdlib.h>
#include <string.h>

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

/* builtins.def, expanded to what the reference states: names and positional arguments. */
static struct {
  const char *name;
  int min, max;
  int documented;
} builtins[] = {
#define NT_BUILTIN(name, min, max, specs, form, tile, fn) {#name, min, max, 0},
#include "notation/builtins.def"
};
enum { N_BUILTINS = sizeof builtins / sizeof *builtins };

/* One `name arg ...` of the table: positional arguments are the words after the name, except
 * labeled ones (~x) and "..."; an optional group [...] ends them. */
static void check_usage(const char *usage, size_t len) {
  char text[256];
  snprintf(text, sizeof text, "%.*s", (int)len, usage);
  int positional = -1, found = -1;
  bool optional = false;
  for (char *w = strtok(text, " "); w; w = strtok(NULL, " ")) {
    if (positional < 0) {
      for (int i = 0; i < N_BUILTINS; i++)
        if (strcmp(builtins[i].name, w) == 0) found = i;
      CHECK_MSG(found >= 0, "docs/notation.md lists '%s', which is not a builtin", w);
      if (found < 0) return;
      builtins[found].documented++;
      positional = 0;
    } else if (w[0] == '[') {
      optional = true;
    } else if (!optional && w[0] != '~' && strcmp(w, "...") != 0) {
      positional++;
    }
  }
  CHECK_MSG(positional >= builtins[found].min && positional <= builtins[found].max,
            "docs/notation.md shows %s with %d positional arguments, builtins.def says %d..%d",
            builtins[found].name, positional, builtins[found].min, builtins[found].max);
}

/* The table after "| builtin | result |": every `usage` of its rows' first cells. */
static void check_builtin_table(const char *doc) {
  const char *row = strstr(doc, "| builtin | result |\n|---|---|\n");
  CHECK_MSG(row != NULL, "%s", "docs/notation.md has no table of builtins");
  if (!row) return;
  row = strchr(strchr(row, '\n') + 1, '\n') + 1;
  for (; row[0] == '|'; row = strchr(row, '\n') + 1) {
    const char *end = strchr(row + 1, '|');
    for (const char *p = row; p && p < end;) {
      const char *open = strchr(p, '`'), *close = open ? strchr(open + 1, '`') : NULL;
      if (!close || close > end) break;
      check_usage(open + 1, (size_t)(close - open - 1));
      p = close + 1;
    }
  }
  for (int i = 0; i < N_BUILTINS; i++)
    CHECK_MSG(builtins[i].documented == 1, "docs/notation.md lists builtin %s %d times",
              builtins[i].name, builtins[i].documented);
}

int main(void) {
  const char *root = getenv("CANNL_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/docs/notation.md", root ? root : ".");
  char *doc = slurp(path);
  CHECK_MSG(doc != NULL, "cannot read %s", path);
  if (!doc) CHECK_DONE();
  check_builtin_table(doc);
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
