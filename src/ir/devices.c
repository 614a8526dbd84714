/* CPU devices: several devices of host memory in one process (issue 33), numbered 0 .. count-1
 * per context (cn_ctx_open_devices). Each holds its own copy of every node a routine run there
 * uses (resident.c), so that N of them hold N values of a replicated node (a gradient per device)
 * while a routine compiled once for a host backend (the interpreter, generated C) runs on any of
 * them (cn_routine_run_on: the copies' buffers passed in place of the host's).
 *
 * A device is a cn_device whose buffers are malloc'd: upload, download and clear are memcpy and
 * memset done before they return, synchronize has nothing to wait for, and host_memory lets a
 * transfer between two of them be one memcpy. Runs on a device happen on the caller's thread,
 * their parallel loops on the context's one worker pool (option "threads"): the devices divide the
 * data, not the cores, and two devices run one after the other (include/cannl.h).
 *
 * Invariants: the table is made by the first cn_ctx_open_devices in the context's arena
 * (ctx->cpu_devices), released after every cleanup, so the copies and routine scratch freed by
 * cleanups find their device; devices are only added, never removed or moved. */
#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int count;
  cn_device devices[CN_MAX_DEVICES];
  char names[CN_MAX_DEVICES][16];
} cpu_devices;

static cn_status cpu_allocate(cn_ctx *ctx, const cn_device *dev, size_t bytes, void **buffer) {
  (void)dev;
  *buffer = cn_calloc_cells(ctx, bytes);
  return *buffer ? CN_OK : ctx->status;
}

static cn_status cpu_upload(cn_ctx *ctx, const cn_device *dev, void *buffer, const void *host,
                            size_t bytes) {
  (void)ctx, (void)dev;
  memcpy(buffer, host, bytes);
  return CN_OK;
}

static cn_status cpu_download(cn_ctx *ctx, const cn_device *dev, void *host, const void *buffer,
                              size_t bytes) {
  (void)ctx, (void)dev;
  memcpy(host, buffer, bytes);
  return CN_OK;
}

static cn_status cpu_synchronize(cn_ctx *ctx, const cn_device *dev) {
  (void)ctx, (void)dev;
  return CN_OK;
}

static cn_status cpu_clear(cn_ctx *ctx, const cn_device *dev, void *buffer, size_t bytes) {
  (void)ctx, (void)dev;
  memset(buffer, 0, bytes);
  return CN_OK;
}

static void cpu_free(const cn_device *dev, void *buffer) {
  (void)dev;
  free(buffer);
}

cn_status cn_ctx_open_devices(cn_ctx *ctx, int count) {
  if (!ctx) return CN_ERR_INVALID;
  if (count < 1 || count > CN_MAX_DEVICES)
    return cn_fail(ctx, CN_ERR_INVALID, "cn_ctx_open_devices: %d devices, not a count in [1, %d]",
                   count, CN_MAX_DEVICES);
  cpu_devices *table = ctx->cpu_devices;
  if (!table) {
    if (!(table = cn_alloc(ctx, sizeof *table))) return ctx->status;
    memset(table, 0, sizeof *table);
    ctx->cpu_devices = table;
  }
  for (; table->count < count; table->count++) {
    int k = table->count;
    snprintf(table->names[k], sizeof table->names[k], "cpu%d", k);
    table->devices[k] = (cn_device){.name = table->names[k],
                                    .state = table,
                                    .allocate = cpu_allocate,
                                    .upload = cpu_upload,
                                    .download = cpu_download,
                                    .synchronize = cpu_synchronize,
                                    .free = cpu_free,
                                    .clear = cpu_clear,
                                    .host_memory = true};
  }
  return CN_OK;
}

int cn_ctx_device_count(const cn_ctx *ctx) {
  const cpu_devices *table = ctx ? ctx->cpu_devices : NULL;
  return table ? table->count : 0;
}

const cn_device *cn_cpu_device(cn_ctx *ctx, int k, const char *what) {
  int count = cn_ctx_device_count(ctx);
  if (k >= 0 && k < count) return &((cpu_devices *)ctx->cpu_devices)->devices[k];
  cn_fail(ctx, CN_ERR_INVALID, "%s: no device %d (the context has %d: cn_ctx_open_devices)", what,
          k, count);
  return NULL;
}
