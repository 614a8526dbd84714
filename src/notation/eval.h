/* The notation's evaluator (eval.c): runs scripts and evaluates %op / %cd text against a graph,
 * behind the public cn_notation_run, cn_notation_op and cn_notation_cd (include/cannl.h). */
#ifndef CN_NT_EVAL_H
#define CN_NT_EVAL_H

#include "cannl.h"
#include "notation/notation.h"

#endif
