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
/* Whether the routine's body writes the buffer of params[param]. */
bool cn_routine_writes(const cn_routine *routine, int param);

#endif
