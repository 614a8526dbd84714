/* Autotuning of GEMM plans (issue 17, item 4), between the scheduling stage and a backend with
 * CN_BACKEND_TUNABLE (generated C): for every GEMM-class statement large enough, candidate register
 * tiles and reduction blocks are compiled and timed once, and the fastest is kept in a tune record
 * of the backend's cache (cn_cc_tune_load / cn_cc_tune_store), keyed by the nest's geometry and the
 * machine, so later compiles, in this process or another, reuse it without timing anything. */
#ifndef CN_TUNE_H
#define CN_TUNE_H

#include "backend/backend.h"

/* The fewest points of a GEMM nest that is tuned (smaller ones keep the heuristic plan). */
#define CN_TUNE_WORK ((int64_t)1 << 24)
/* The names of the option "tune" / CANNL_TUNE. */
#define CN_TUNE_MODES "off, cached, quick, full"

/* Whether text names a mode. */
bool cn_tune_mode_valid(const char *text);
/* Tunes the plans of proc's GEMM statements in place for a backend with CN_BACKEND_TUNABLE, whose
 * compile and run time the candidates, and the mode ("off": nothing; "cached":
 * records only, nothing timed; "quick": 4 candidates; "full": 22), each plan taken from its
 * record when there is one (tune.c). Plans only change
 * how fast a statement runs, never its results (loops.h). Fails on allocation failure or when a
 * candidate does not compile (the compiler's message). */
cn_status cn_tune_proc(cn_ctx *ctx, const cn_backend *backend, cn_ll_proc *proc, const char *mode);

#endif
