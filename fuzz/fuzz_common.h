/* What the libFuzzer targets share: the input as a NUL-terminated string, and the way a broken
 * property is reported (a line on stderr, libFuzzer's log, then a crash libFuzzer records).
 * Each target defines FUZZ_NAME before including this header. */
#ifndef CANNL_FUZZ_COMMON_H
#define CANNL_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *why, const char *detail) {
  fprintf(stderr, "%s: %s\n%s\n", FUZZ_NAME, why, detail);
  abort();
}

/* The input up to its first NUL byte, as a malloc'd string; NULL when memory runs out (the
 * harness then skips the input). */
static char *fuzz_text(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return NULL;
  memcpy(text, data, size);
  text[size] = '\0';
  return text;
}

#endif
