/* What the layers above the runtime may know of a routine beyond the public API: its procedure
 * (the scheduled loop IR with its buffers in param order), read by the AOT export
 * (src/data/export.c) to bind each buffer of the generated entry point.
 *
 * Invariant: the procedure is the one the routine's generated source was produced from, so the
 * entry point's buffers[i] is the node of params[i]. */
#ifndef CN_ROUTINE_H
#define CN_ROUTINE_H

#include "loops/loops.h"

const cn_ll_proc *cn_routine_proc(const cn_routine *routine);
/* cn_routine_compile for the statements of a script (src/notation): with a backend of
 * CN_BACKEND_COMPILED (generated C), a routine whose compilation would cost more than it will ever
 * run runs on the interpreter instead, whose results are the generated code's, bit for bit
 * (numeric.c): one of less work (cell updates, over all its loops) than the option
 * "interpret_below", until its runs have taken about what a compile costs, and, when the caller
 * runs it `once` (a statement outside loops, freed after its run), one of less work than 512 times
 * that option. */
cn_routine *cn_routine_compile_tiered(cn_ctx *ctx, const cn_asgn *asgn, cn_backend_kind backend,
                                      const char *name, bool once);
/* cn_routine_compile_many for statements of a script, routine k expected to run runs[k] times (0:
 * not known): a routine is interpreted where its work over those runs is below 512 times the option
 * "interpret_below" (with runs unknown, where cn_routine_compile_tiered would interpret it), and
 * compiled once its runs have taken about what a compile costs; the others are compiled together
 * (their compilers at the same time) behind the caller: this returns once the compilers run (the
 * earlier routines first), and each routine's first run waits for its own, returning its compile
 * failure if it failed. */
cn_status cn_routine_compile_tiered_many(cn_ctx *ctx, int n, const cn_asgn *const *asgns,
                                         const char *const *names, cn_backend_kind backend,
                                         const int64_t *runs, cn_routine **out);

/* The backend the context's option "backend" names (what CN_BACKEND_DEFAULT stands for):
 * CN_ERR_INVALID with the closest names suggested for a name no backend has. */
cn_status cn_routine_default_backend(cn_ctx *ctx, cn_backend_kind *kind);

/* Whether the routine's body writes the buffer of params[param]. */
bool cn_routine_writes(const cn_routine *routine, int param);

#endif
