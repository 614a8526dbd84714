/* `--backend NAME` of the example programs (backend.h): a name looked up in the backend registry,
 * an unknown one refused with the registry's names and the closest of them suggested
 * (cn_backend_suggest), as `cannl run --backend` refuses it; `--devices N`, a count in range. */
#include "backend.h"

#include <stdio.h>
#include <stdlib.h>

bool demo_backend_parse(const char *name, cn_backend_kind *kind) {
  int found = cn_backend_find(name);
  if (found >= 0) {
    *kind = (cn_backend_kind)found;
    return true;
  }
  char hint[256];
  fprintf(stderr, "unknown backend '%s'%s (known: %s)\n", name,
          cn_backend_suggest(name, hint, sizeof hint), cn_backend_list());
  return false;
}

const char *demo_backend_label(cn_backend_kind kind) {
  if (kind == CN_BACKEND_DEFAULT) { /* the option's value on a fresh context: its default */
    static char chosen[64];
    cn_ctx *ctx = cn_ctx_create();
    const char *name = ctx ? cn_ctx_option(ctx, "backend") : NULL;
    snprintf(chosen, sizeof chosen, "%s", name ? name : "c");
    cn_ctx_destroy(ctx);
    int found = cn_backend_find(chosen);
    if (found < 0) return chosen;
    kind = (cn_backend_kind)found;
  }
  if (kind == CN_BACKEND_C) return "generated C";
  if (kind == CN_BACKEND_INTERP) return "the interpreter";
  const char *name = cn_backend_name(kind);
  return name ? name : "an unknown backend";
}

bool demo_devices_parse(const char *text, int *devices) {
  char *end;
  long n = text ? strtol(text, &end, 10) : 0;
  if (text && end != text && !*end && n >= 1 && n <= CN_MAX_DEVICES) {
    *devices = (int)n;
    return true;
  }
  fprintf(stderr, "--devices takes a count of CPU devices in [1, %d], not '%s'\n", CN_MAX_DEVICES,
          text ? text : "");
  return false;
}
