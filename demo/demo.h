/* The demo models (demo/demo.c): a matrix multiplication and a padded 2-D convolution built by
 * hand through the C API and run on both backends; shared by examples/demo.c and `cannl demo`.
 * Only the public API (cannl.h) is used. */
#ifndef CANNL_DEMO_DEMO_H
#define CANNL_DEMO_DEMO_H

#include "cannl.h"

#include <stdio.h>

/* What `cannl demo --emit=...` prints: everything (the default), or only one text. */
typedef enum { DEMO_EMIT_ALL, DEMO_EMIT_ASGN, DEMO_EMIT_LOOPS, DEMO_EMIT_C } demo_emit;

typedef struct {
  int backend; /* the backend to compile and run on (its registry id), or -1: the interpreter
                  and generated C, compared */
  demo_emit emit;
} demo_options;

/* Builds both models in a fresh context and shows or emits them. Returns the exit status: 0 on
 * success, 1 on any failure or disagreement (with a message on stderr). */
int demo_run(const demo_options *opts, FILE *out);

#endif
