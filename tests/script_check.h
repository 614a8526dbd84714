/* Helpers of the tests that run an example script as a user does and then its exported C
 * (test_names, test_gpt_names): a whole file read with room to append statements, the output of
 * a shell command, the samples a script printed, a script run with its export, and the exported
 * sampler built and run.
 * Header-only, static inline; include check.h first. */
#ifndef CANNL_SCRIPT_CHECK_H
#define CANNL_SCRIPT_CHECK_H

#include "cannl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* examples/FILE of the source tree ($CANNL_SOURCE_DIR, else the current directory) as slurp
 * reads it, checked to be readable (NULL when not). */
static inline char *read_example(const char *file) {
  const char *root = getenv("CANNL_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/%s", root ? root : ".", file);
  char *script = slurp(path, NULL);
  CHECK_MSG(script != NULL, "cannot read %s", path);
  return script;
}

/* The output of `cmd` (at most cap - 1 bytes), NUL-terminated; its length, -1 on failure. */
static inline long run_command(const char *cmd, char *out, size_t cap) {
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = '\0';
  return pclose(p) == 0 ? (long)n : -1;
}

/* The n samples of `count` characters a script printed one per line from `printed` on, into
 * out[k * (count + 1) ...] NUL-terminated (echoed to stdout): each line must end after count
 * characters, and each character must be a byte of the corpus words[0, words_len). */
static inline void read_samples(const char *printed, int n, int count, const char *words,
                                size_t words_len, char *out) {
  for (int k = 0; k < n; k++) {
    char *s = out + k * (count + 1);
    memcpy(s, printed + k * (count + 1), (size_t)count);
    s[count] = '\0';
    CHECK(printed[k * (count + 1) + count] == '\n');
    for (int i = 0; i < count; i++)
      CHECK_MSG(words && memchr(words, s[i], words_len), "sample %d: byte 0x%02x", k,
                (unsigned)(unsigned char)s[i]);
    printf("sample %d: \"%s\"\n", k, s);
  }
}

/* Runs a script (named file in messages) on the C backend with the --set values sets[0..n_sets)
 * and the export of its "window" to "logits" with a sampler, as NAME into dir: what it printed
 * into *got (malloc'd, *len bytes; the caller frees it) and the run's status, checked to be
 * CN_OK. */
static inline cn_status run_exporting(const char *file, const char *script, const char *const *sets,
                                      int n_sets, const char *name, const char *dir, char **got,
                                      size_t *len) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  *got = NULL;
  *len = 0;
  FILE *out = open_memstream(got, len);
  cn_notation_options opts = {.backend = CN_BACKEND_C, .out = out};
  opts.n_sets = n_sets;
  opts.sets = sets;
  opts.export_input = "window";
  opts.export_output = "logits";
  opts.export_name = name;
  opts.export_dir = dir;
  opts.export_sampler = true;
  cn_status st = cn_notation_run(g, file, script, &opts);
  fclose(out);
  CHECK_MSG(st == CN_OK, "%s: %s", file, cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  return st;
}

/* Builds the exported DIR/NAME.c and DIR/NAME_sample.c as the program DIR/NAME_sample (cc
 * -std=c11 opt -Wall -Wextra -Werror, its main enabled by -DNAME_SAMPLE_MAIN): it must build. */
static inline void build_sampler(const char *dir, const char *name, const char *opt) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "cd %s && cc -std=c11 %s -Wall -Wextra -Werror -D%s_SAMPLE_MAIN %s.c %s_sample.c -lm -o "
           "%s_sample",
           dir, opt, name, name, name, name);
  CHECK_INT(system(cmd), 0);
}

/* DIR/NAME_sample run with args (count, temperature, seed) prints exactly want, count bytes. */
static inline void sampler_prints(const char *dir, const char *name, const char *args, int count,
                                  const char *want) {
  char cmd[1024], text[4096];
  snprintf(cmd, sizeof cmd, "%s/%s_sample %s", dir, name, args);
  CHECK_INT(run_command(cmd, text, sizeof text), count);
  CHECK_STR(text, want);
}

#endif
