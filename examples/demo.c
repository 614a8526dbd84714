/* The C API demo: a matrix multiplication and a padded 2-D convolution built by hand (nodes,
 * index maps, projections, assignments, routines), each run on the reference interpreter and on
 * generated C, printed and checked. The models are demo/demo.c, shared with `cannl demo`. Exits 1
 * if the backends disagree or anything fails. */
#include "../demo/demo.h"

int main(void) {
  const demo_options opts = {.backend = -1, .emit = DEMO_EMIT_ALL};
  return demo_run(&opts, stdout);
}
