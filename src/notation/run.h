/* The notation's script entry point with the phase of a failure, for tools/cannl.c (which sees
 * only cannl.h and this header): `cannl run` exits 2 on a syntax error and 1 on a runtime error,
 * and parses the script once.
 *
 * Invariant: cn_notation_run(g, file, text, opts) is cn_nt_run(g, file, text, opts, NULL). */
#ifndef CN_NT_RUN_H
#define CN_NT_RUN_H

#include "cannl.h"

/* cn_notation_run; on a failure, *parse_failed (when not NULL) tells whether it failed while
 * parsing (a syntax error, or memory exhausted by the parser: nothing ran) rather than while
 * running. */
cn_status cn_nt_run(cn_graph *g, const char *file, const char *text,
                    const cn_notation_options *opts, bool *parse_failed);

#endif
