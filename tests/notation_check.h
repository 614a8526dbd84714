/* Test helper shared by the notation tests that run scripts: each script runs on a backend
 * (0 the interpreter, 1 generated C) in double precision with --json output, and its printed
 * tensors are parsed back strictly into jtensor records (label, dims, values) to be compared with
 * values computed by hand. Functions are static inline so that a test uses only what it needs. */
#ifndef CN_NOTATION_CHECK_H
#define CN_NOTATION_CHECK_H

#include "check.h"

#include "cannl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Running scripts and reading their JSON lines back -------------------------------------- */

enum { MAX_PRINTS = 48, MAX_VALUES = 256 };

typedef struct {
  char label[128];
  int n[3]; /* batch, input, output */
  int64_t dims[3][8];
  int nv;
  double v[MAX_VALUES];
} jtensor;

typedef struct {
  int n;
  jtensor t[MAX_PRINTS];
  char error[2048];
} outcome;

static const char *const backend_name[2] = {"interp", "C"};

/* Parses one line {"label": "...", "batch": [..], "input": [..], "output": [..], "values": [..]}
 * strictly (keys in this order, numbers with strtod); false if the line is malformed. */
static inline bool parse_line(const char *p, jtensor *t) {
  memset(t, 0, sizeof *t);
  static const char *const keys[5] = {"label", "batch", "input", "output", "values"};
  if (*p++ != '{') return false;
  for (int k = 0; k < 5; k++) {
    char key[32];
    snprintf(key, sizeof key, "%s\"%s\": ", k ? ", " : "", keys[k]);
    if (strncmp(p, key, strlen(key)) != 0) return false;
    p += strlen(key);
    if (k == 0) { /* a JSON string: escapes \" \\ \n \uXXXX (ASCII) */
      if (*p++ != '"') return false;
      size_t n = 0;
      while (*p && *p != '"') {
        char c = *p++;
        if (c == '\\') {
          c = *p++;
          if (c == 'n')
            c = '\n';
          else if (c == 'u') {
            c = (char)strtol((char[]){p[0], p[1], p[2], p[3], 0}, NULL, 16);
            p += 4;
          } else if (c != '"' && c != '\\' && c != '/')
            return false;
        }
        if (n + 1 < sizeof t->label) t->label[n++] = c;
      }
      if (*p++ != '"') return false;
      continue;
    }
    if (*p++ != '[') return false;
    int count = 0;
    while (*p != ']') {
      char *end;
      double x = strtod(p, &end);
      if (end == p) return false;
      p = end;
      if (k < 4) {
        if (count == 8) return false;
        t->dims[k - 1][count] = (int64_t)x;
      } else {
        if (count == MAX_VALUES) return false;
        t->v[count] = x;
      }
      count++;
      if (*p == ',')
        p += *(p + 1) == ' ' ? 2 : 1;
      else if (*p != ']')
        return false;
    }
    p++;
    if (k < 4)
      t->n[k - 1] = count;
    else
      t->nv = count;
  }
  return p[0] == '}' && (p[1] == '\n' || p[1] == '\0');
}

/* Runs a script on backend b (0 interp, 1 C) in double precision; its printed tensors parsed back
 * into *o. False (message in o->error) on a failure or a malformed line. */
static inline bool run(outcome *o, int b, const char *script) {
  memset(o, 0, sizeof *o);
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {
      .backend = b ? CN_BACKEND_C : CN_BACKEND_INTERP, .json = true, .out = out};
  cn_status st = cn_notation_run(g, "seed.cnl", script, &opts);
  fclose(out);
  if (st != CN_OK) snprintf(o->error, sizeof o->error, "%s", cn_ctx_error(ctx));
  for (const char *line = buf; st == CN_OK && line && *line; o->n++) {
    if (o->n == MAX_PRINTS || !parse_line(line, &o->t[o->n])) {
      snprintf(o->error, sizeof o->error, "malformed or too many JSON lines at: %.200s", line);
      st = CN_ERR_INVALID;
      break;
    }
    line = strchr(line, '\n');
    if (line) line++;
  }
  free(buf);
  cn_ctx_destroy(ctx);
  CHECK_MSG(st == CN_OK, "%s: %s", backend_name[b], o->error);
  return st == CN_OK;
}

/* Runs a script expected to fail and returns its message (static buffer). */
static inline const char *run_error(const char *script) {
  static char msg[2048];
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  FILE *out = fopen("/dev/null", "w");
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .out = out};
  cn_status st = cn_notation_run(g, "seed.cnl", script, &opts);
  fclose(out);
  snprintf(msg, sizeof msg, "%s", st == CN_OK ? "(ran)" : cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  return msg;
}

/* The readable printout of a script (interpreter), with the loops of each routine it compiles
 * when emit_loops (--emit=loops), or its error message (static buffer). */
static inline const char *script_text(const char *script, bool emit_loops) {
  static char text[16384];
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .out = out, .emit_loops = emit_loops};
  cn_status st = cn_notation_run(g, "seed.cnl", script, &opts);
  fclose(out);
  snprintf(text, sizeof text, "%s", st == CN_OK ? buf : cn_ctx_error(ctx));
  free(buf);
  cn_ctx_destroy(ctx);
  return text;
}

/* The readable printout of a script (interpreter), or its error message (static buffer). */
static inline const char *run_text(const char *script) {
  return script_text(script, false);
}

/* "batch|input->output" of a parsed tensor, as "2|3->4,5". */
static inline const char *dims_of(const jtensor *t) {
  static char s[128];
  size_t n = 0;
  for (int r = 0; r < 3; r++) {
    static const int row[3] = {0, 1, 2};
    for (int i = 0; i < t->n[row[r]]; i++)
      n += (size_t)snprintf(s + n, sizeof s - n, "%s%lld", i ? "," : "",
                            (long long)t->dims[row[r]][i]);
    if (r < 2) n += (size_t)snprintf(s + n, sizeof s - n, "%s", r == 0 ? "|" : "->");
  }
  return s;
}

/* The i-th printed tensor has the label (unless NULL), the dims and the values (within tol). */
static inline void expect(const outcome *o, int b, int i, const char *label, const char *dims,
                          int nv, const double *want, double tol) {
  if (i >= o->n) {
    CHECK_MSG(false, "%s: print %d missing (%d printed)", backend_name[b], i, o->n);
    return;
  }
  const jtensor *t = &o->t[i];
  if (label)
    CHECK_MSG(strcmp(t->label, label) == 0, "%s: print %d label %s, want %s", backend_name[b], i,
              t->label, label);
  CHECK_MSG(strcmp(dims_of(t), dims) == 0, "%s: print %d (%s) dims %s, want %s", backend_name[b], i,
            t->label, dims_of(t), dims);
  CHECK_MSG(t->nv == nv, "%s: print %d (%s) has %d values, want %d", backend_name[b], i, t->label,
            t->nv, nv);
  for (int k = 0; k < nv && k < t->nv; k++)
    CHECK_MSG(fabs(t->v[k] - want[k]) <= tol, "%s: print %d (%s) value %d: %.17g, want %.17g",
              backend_name[b], i, t->label, k, t->v[k], want[k]);
}

#define VALUES(...)                                                                                \
  (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), (double[]) {                            \
    __VA_ARGS__                                                                                    \
  }
#define BOTH for (int b = 0; b < 2; b++)

#endif
