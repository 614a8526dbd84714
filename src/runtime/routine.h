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
/* cn_routine_compile for the statements of a script (src/notation): with the C backend, a
 * routine of less work (cell updates, over all its loops) than the option "interpret_below" runs
 * on the interpreter instead, unless it holds a matrix product with fused multiply-adds (whose
 * bits the interpreter, computing the nest, would not give): its compilation would cost more
 * than it will ever run, and the interpreter's results are the generated code's, bit for bit. */
cn_routine *cn_routine_compile_tiered(cn_ctx *ctx, const cn_asgn *asgn, cn_backend_kind backend,
                                      const char *name);
/* Whether the routine's body writes the buffer of params[param]. */
bool cn_routine_writes(const cn_routine *routine, int param);

#endif
