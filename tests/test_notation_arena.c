/* A notation loop runs in constant arena memory: a script whose `for` loop prints a tensor (and
 * runs a forward routine) every step leaves the context's arena as large after 1000 steps as
 * after 10, so a training loop that prints cannot exhaust memory (src/notation/eval_stmt.c). */
#include "check.h"

#include "cannl.h"
#include "core/core.h"

#include <stdlib.h>

/* Where the context's arena stands after a loop of `steps` iterations: the bytes of its blocks
 * plus the offset in the current one, so that growth within a block counts too (0 on a
 * failure). */
static size_t arena_after(int steps, const char *backend_name, cn_backend_kind backend) {
  char script[512];
  snprintf(script, sizeof script,
           "let x = [1.0; 2.0; 3.0]\n"
           "for i = 0 to %4d do\n" /* as long for every count */
           "  print (x *. !@i)\n"
           "  for j = 0 to 1 do\n" /* an inner loop: run again at each step */
           "    print x\n"
           "  done\n"
           "done\n",
           steps - 1);
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  cn_notation_options opts = {.backend = backend, .out = out};
  cn_status st = cn_notation_run(g, "arena.cnl", script, &opts);
  fclose(out);
  CHECK_MSG(st == CN_OK, "%s, %d steps: %s", backend_name, steps, cn_ctx_error(ctx));
  CHECK_MSG(len > 0 && strstr(text, "(#") != NULL, "%s: the loop printed nothing", backend_name);
  size_t bytes = st == CN_OK ? cn_arena_bytes(&ctx->arena) + cn_arena_mark(&ctx->arena).used : 0;
  free(text);
  cn_ctx_destroy(ctx);
  return bytes;
}

int main(void) {
  static const struct {
    const char *name;
    cn_backend_kind kind;
  } backends[] = {{"interp", CN_BACKEND_INTERP}, {"c", CN_BACKEND_C}};
  for (size_t b = 0; b < sizeof backends / sizeof *backends; b++) {
    size_t few = arena_after(10, backends[b].name, backends[b].kind);
    size_t many = arena_after(1000, backends[b].name, backends[b].kind);
    CHECK(few > 0);
    CHECK_MSG(many == few, "%s: the arena stands at %zu bytes after 1000 steps, %zu after 10",
              backends[b].name, many, few);
  }
  CHECK_DONE();
}
