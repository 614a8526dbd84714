/* The example programs' output directory (demo/output.c): `--out DIR`, by default runs/ in the
 * current directory (ignored by git), where their checkpoints and SVG files go unless a path is
 * given for them. Only the C library and POSIX are used. */
#ifndef CANNL_DEMO_OUTPUT_H
#define CANNL_DEMO_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>

#define DEMO_OUT_DEFAULT "runs"

/* DIR/NAME into out (cap bytes), DIR created when missing (its parent must exist). False, with the
 * reason on stderr, when the path does not fit or DIR cannot be made. */
bool demo_output_path(const char *dir, const char *name, char *out, size_t cap);

#endif
