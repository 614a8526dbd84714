/* End-to-end tests of the foundation on the interpreter and on generated C: the cases of
 * tests/e2e_cases.h, each result compared with values worked out independently and the two
 * backends' bits with each other, every case also run on generated C split across 1, 2 and 3
 * threads. */
#include "e2e_cases.h"

int main(void) {
  e2e_run_all();
  /* Most cases have an independent loop (the others are reductions to one cell, or loops whose
   * iterations touch one another's cells): the threaded runs did split work. */
  CHECK_MSG(parallel_routines >= 8, "only %d routines ran in parallel", parallel_routines);
  CHECK_DONE();
}
