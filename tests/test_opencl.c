#include "e2e_cases.h"

#include "backend/backend.h"

int main(void) {
  cn_ctx *probe = cn_ctx_create();
  char device[1400];
  int opencl = cn_backend_find("opencl");
  if (cn_backend_device(probe, (cn_backend_kind)opencl, device, sizeof device) != CN_OK) {
    printf("skipped: no OpenCL device: %s\n", cn_ctx_error(probe));
    cn_ctx_destroy(probe);
    return 77;
  }
  cn_ctx_destroy(probe);
  backends[0] = CN_BACKEND_C;
  backends[1] = (cn_backend_kind)opencl;
  n_backends = 2;
  e2e_threads = false;
  e2e_run_all();
  CHECK_DONE();
}
