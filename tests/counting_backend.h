/* "counting": a test backend, a wrapper of the interpreter whose device has memory of its own
 * (buffers malloc'd apart from the nodes' and filled with garbage, so a value the runtime forgot
 * to upload or download shows), counting every call: compiles, runs, the device's allocations,
 * transfers, clears, synchronizations and frees. Shared by test_backend_registry and
 * test_resident, each registering it in its own process. */
#ifndef COUNTING_BACKEND_H
#define COUNTING_BACKEND_H

#include "check.h"

#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>

static struct {
  int compiles, releases, runs, allocations, frees, uploads, downloads, synchronizations, clears;
  /* the next synchronize fails, as a queued run that failed on a real device reports itself */
  bool fail_next_sync;
} count;

static cn_status counting_compile(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled,
                                  const char **source) {
  count.compiles++;
  return cn_backend_interp.compile(ctx, proc, compiled, source);
}

static cn_status counting_run(cn_ctx *ctx, void *compiled, void *const *buffers,
                              const int64_t *syms) {
  count.runs++;
  return cn_backend_interp.run(ctx, compiled, buffers, syms);
}

static void counting_release(void *compiled) {
  count.releases++;
  cn_backend_interp.release(compiled);
}

static cn_status device_allocate(cn_ctx *ctx, const cn_device *dev, size_t bytes, void **buffer) {
  (void)dev;
  *buffer = malloc(bytes ? bytes : 1);
  if (!*buffer) return cn_fail(ctx, CN_ERR_NOMEM, "counting: out of memory");
  memset(*buffer, 0xA5, bytes); /* not zeros: a missing upload must show */
  count.allocations++;
  return CN_OK;
}

static cn_status device_upload(cn_ctx *ctx, const cn_device *dev, void *buffer, const void *host,
                               size_t bytes) {
  (void)ctx, (void)dev;
  memcpy(buffer, host, bytes);
  count.uploads++;
  return CN_OK;
}

static cn_status device_download(cn_ctx *ctx, const cn_device *dev, void *host, const void *buffer,
                                 size_t bytes) {
  (void)ctx, (void)dev;
  memcpy(host, buffer, bytes);
  count.downloads++;
  return CN_OK;
}

static cn_status device_synchronize(cn_ctx *ctx, const cn_device *dev) {
  (void)dev;
  count.synchronizations++;
  if (count.fail_next_sync) {
    count.fail_next_sync = false;
    return cn_fail(ctx, CN_ERR_IO, "counting: a queued run failed on the device");
  }
  return CN_OK;
}

static cn_status device_clear(cn_ctx *ctx, const cn_device *dev, void *buffer, size_t bytes) {
  (void)ctx, (void)dev;
  memset(buffer, 0, bytes);
  count.clears++;
  return CN_OK;
}

static void device_free(const cn_device *dev, void *buffer) {
  (void)dev;
  count.frees++;
  free(buffer);
}

static const cn_device counting_device = {
    .name = "counting0",
    .allocate = device_allocate,
    .upload = device_upload,
    .download = device_download,
    .synchronize = device_synchronize,
    .free = device_free,
    .clear = device_clear,
};

static cn_status counting_open(cn_ctx *ctx, const cn_device **device) {
  (void)ctx;
  *device = &counting_device;
  return CN_OK;
}

static const cn_backend counting = {
    .name = "counting",
    .caps = CN_BACKEND_DEVICE_MEMORY,
    .open_device = counting_open,
    .compile = counting_compile,
    .run = counting_run,
    .release = counting_release,
};

#endif
