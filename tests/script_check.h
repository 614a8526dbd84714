/* Helpers of the tests that run an example script as a user does and then its exported C
 * (test_names, test_gpt_names): a whole file read with room to append statements, and the
 * output of a shell command. Header-only, static inline. */
#ifndef CANNL_SCRIPT_CHECK_H
#define CANNL_SCRIPT_CHECK_H

#include <stdio.h>
#include <stdlib.h>

/* The bytes of path, NUL-terminated, with 512 spare bytes after them (the tests strcat a few
 * statements to a script); *len (if not NULL) their count. NULL when the file cannot be read. */
static inline char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = n >= 0 ? malloc((size_t)n + 512) : NULL;
  if (text && fread(text, 1, (size_t)n, f) == (size_t)n) {
    text[n] = '\0';
    if (len) *len = (size_t)n;
  } else {
    free(text);
    text = NULL;
  }
  fclose(f);
  return text;
}

/* The output of `cmd` (at most cap - 1 bytes), NUL-terminated; its length, -1 on failure. */
static inline long run_command(const char *cmd, char *out, size_t cap) {
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = '\0';
  return pclose(p) == 0 ? (long)n : -1;
}

#endif
