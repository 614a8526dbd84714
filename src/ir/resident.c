/* Device-resident nodes: a node's buffers (value, merge) as kept on the devices of the backends
 * with memory of their own (cn_device, ir.h), and the one host accessor, cn_node_host.
 *
 * A node has at most one copy per (device, buffer), made by the first routine run on that device
 * that touches it and shared by every routine linked to the device; the copy belongs to the node
 * and is released with the context (a cleanup per copy, registered after the device's own, so the
 * context frees it first). Each copy records whether it holds the node's newest value (`current`),
 * the node whether its host buffer does not (host_stale). Invariant: for each buffer of a node,
 * the host buffer or at least one copy is current; a write, by a run or by the host, leaves only
 * the writer's current.
 *
 * Transfers happen only when a reader is stale: a run on a device uploads the params whose copy
 * there is stale (cn_node_device) and downloads nothing; the host buffer is brought back when the
 * host reads it (cn_node_host), from a current copy, and waited for. Runs and uploads are queued
 * on a device and not waited for (asynchronous): the host waits for the device when it reads a
 * node a run wrote (the download, then a synchronize, which also reports a failed run's error),
 * and before it writes a host buffer an upload may still be reading (`uploading`). Data moves
 * between two devices through the host, except by an explicit transfer (cn_node_transfer_between: a
 * memcpy between devices of host memory). Counters: CN_STAT_UPLOADS, CN_STAT_DOWNLOADS,
 * CN_STAT_TRANSFERS and their bytes.
 *
 * A replicated node (data parallelism: each device's gradient) keeps a value per device and one
 * on the host: a device write leaves every other copy current, each its own value, and the host
 * buffer current (its own value: host_stale stays false), so a device's stale or new copy is
 * always made from the host's value, never from another device's. A host write makes every copy
 * stale (the next run on each device uploads it: a broadcast); the host reads its own value, and
 * a device's through cn_node_device_host or a transfer to the host. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

struct cn_node_copy {
  cn_node_copy *next;
  const cn_device *device;
  void *buffer; /* the device's */
  size_t bytes;
  bool merge;   /* the copy of the merge buffer, else of the value */
  bool current; /* holds the node's newest value */
  /* an upload from the host buffer may still be in flight (a device's transfers and runs are
   * queued, not waited for): the host waits for the device before writing that buffer */
  bool uploading;
};

static size_t buffer_bytes(const cn_node *node) {
  return cn_node_buffer_cells(node) * cn_prec_bytes(node->prec);
}

static cn_node_copy *copy_on(const cn_node *node, bool merge, const cn_device *dev) {
  for (cn_node_copy *c = node->copies; c; c = c->next)
    if (c->device == dev && c->merge == merge) return c;
  return NULL;
}

/* The context's cleanup of a copy: the device memory, then the record. */
static void copy_release(void *arg) {
  cn_node_copy *c = arg;
  c->device->free(c->device, c->buffer);
  free(c);
}

/* Brings a stale host buffer up to date from a current copy: the download, waited for. */
static cn_status fetch(cn_node *node, bool merge, void *host) {
  cn_ctx *ctx = node->ctx;
  cn_node_copy *c = node->copies;
  while (c && !(c->merge == merge && c->current)) c = c->next;
  CN_ASSERT(c != NULL); /* a stale host buffer has a current copy */
  cn_status status = c->device->download(ctx, c->device, host, c->buffer, c->bytes);
  cn_status synced = c->device->synchronize(ctx, c->device);
  if (status == CN_OK) status = synced;
  if (status != CN_OK) return status;
  for (cn_node_copy *d = node->copies; d; d = d->next)
    if (d->device == c->device) d->uploading = false;
  ctx->stats[CN_STAT_DOWNLOADS]++;
  ctx->stats[CN_STAT_DOWNLOAD_BYTES] += c->bytes;
  node->host_stale[merge] = false;
  return CN_OK;
}

/* Waits for the devices whose uploads from the host buffer may be in flight. */
static cn_status settle(cn_node *node, bool merge) {
  for (cn_node_copy *c = node->copies; c; c = c->next) {
    if (!c->uploading || c->merge != merge) continue;
    cn_status status = c->device->synchronize(node->ctx, c->device);
    if (status != CN_OK) return status;
    for (cn_node_copy *d = c; d; d = d->next)
      if (d->device == c->device && d->merge == merge) d->uploading = false;
  }
  return CN_OK;
}

void *cn_node_host(cn_node *node, bool merge, cn_host_access access) {
  void *host = cn_node_raw_buffer(node, merge);
  if (!host || !node->copies) return host;
  if (access != CN_HOST_OVERWRITE && node->host_stale[merge] && fetch(node, merge, host) != CN_OK)
    return NULL;
  if (access == CN_HOST_READ) return host;
  if (settle(node, merge) != CN_OK) return NULL;
  for (cn_node_copy *c = node->copies; c; c = c->next)
    if (c->merge == merge) c->current = false;
  node->host_stale[merge] = false;
  return host;
}

void *cn_node_buffer(cn_node *node, bool merge) {
  return cn_node_host(node, merge, CN_HOST_WRITE);
}

/* A new copy on dev, not current, registered with the context; NULL with the error. */
static cn_node_copy *copy_make(cn_node *node, bool merge, const cn_device *dev) {
  cn_ctx *ctx = node->ctx;
  cn_node_copy *c = cn_calloc(ctx, 1, sizeof *c);
  if (!c) return NULL;
  c->device = dev;
  c->merge = merge;
  c->bytes = buffer_bytes(node);
  if (dev->allocate(ctx, dev, c->bytes, &c->buffer) != CN_OK) {
    free(c);
    return NULL;
  }
  if (!cn_ctx_add_cleanup(ctx, copy_release, c)) {
    copy_release(c);
    return NULL;
  }
  c->next = node->copies;
  node->copies = c;
  node->buffers_used = true; /* the copy has the padded extent: padding is frozen */
  return c;
}

cn_status cn_node_device(cn_node *node, bool merge, const cn_device *dev, void **buffer) {
  cn_ctx *ctx = node->ctx;
  cn_node_copy *c = copy_on(node, merge, dev);
  if (!c && !(c = copy_make(node, merge, dev))) return ctx->status;
  *buffer = c->buffer;
  if (c->current) return CN_OK;
  void *host = merge ? node->merge : node->value;
  /* no host buffer and no other copy: the node is all zeros, which the device can write itself */
  bool zeros = !host && !node->host_stale[merge];
  cn_status status;
  if (zeros && dev->clear) {
    status = dev->clear(ctx, dev, c->buffer, c->bytes);
  } else {
    if (!(host = cn_node_host(node, merge, CN_HOST_READ))) return ctx->status;
    status = dev->upload(ctx, dev, c->buffer, host, c->bytes);
    c->uploading = !dev->host_memory;
    if (status == CN_OK) {
      ctx->stats[CN_STAT_UPLOADS]++;
      ctx->stats[CN_STAT_UPLOAD_BYTES] += c->bytes;
    }
  }
  if (status == CN_OK) c->current = true;
  return status;
}

void cn_node_device_wrote(cn_node *node, bool merge, const cn_device *dev) {
  for (cn_node_copy *c = node->copies; c; c = c->next)
    if (c->merge == merge && (c->device == dev || !node->replicated)) c->current = c->device == dev;
  node->host_stale[merge] = !node->replicated;
}

void *cn_node_device_host(cn_node *node, bool merge, const cn_device *dev, cn_host_access access) {
  CN_ASSERT(dev->host_memory);
  void *cells;
  if (cn_node_device(node, merge, dev, &cells) != CN_OK) return NULL;
  if (access != CN_HOST_READ) cn_node_device_wrote(node, merge, dev);
  return cells;
}

/* Copies bytes from src on `from` to dst on `to` (NULL: host memory), each step waited for: a
 * memcpy between host memories, else a download and/or an upload, through a host buffer of its
 * own between two devices of their own memory. */
static cn_status copy_bytes(cn_ctx *ctx, const cn_device *from, const void *src,
                            const cn_device *to, void *dst, size_t bytes) {
  bool host_src = !from || from->host_memory, host_dst = !to || to->host_memory;
  if (host_src && host_dst) {
    memcpy(dst, src, bytes);
    return CN_OK;
  }
  void *staging = host_dst ? dst : host_src ? (void *)src : cn_malloc(ctx, bytes ? bytes : 1);
  if (!staging) return ctx->status;
  cn_status status = CN_OK;
  if (!host_src && (status = from->download(ctx, from, staging, src, bytes)) == CN_OK)
    status = from->synchronize(ctx, from);
  if (status == CN_OK && !host_dst && (status = to->upload(ctx, to, dst, staging, bytes)) == CN_OK)
    status = to->synchronize(ctx, to);
  if (!host_src && !host_dst) free(staging);
  return status;
}

cn_status cn_node_transfer_between(cn_node *node, const cn_device *from, const cn_device *to,
                                   bool into_merge) {
  cn_ctx *ctx = node->ctx;
  void *src = from ? NULL : cn_node_host(node, false, CN_HOST_READ), *dst;
  if (from ? cn_node_device(node, false, from, &src) != CN_OK : !src) return ctx->status;
  if (from == to && !into_merge) return CN_OK;
  cn_node_copy *c = NULL;
  if (to) {
    if (!(c = copy_on(node, into_merge, to)) && !(c = copy_make(node, into_merge, to)))
      return ctx->status;
    dst = c->buffer;
  } else if (!(dst = cn_node_host(node, into_merge, into_merge ? CN_HOST_OVERWRITE : CN_HOST_READ)))
    return ctx->status;
  size_t bytes = buffer_bytes(node);
  cn_status status = copy_bytes(ctx, from, src, to, dst, bytes);
  if (status != CN_OK) return status;
  ctx->stats[CN_STAT_TRANSFERS]++;
  ctx->stats[CN_STAT_TRANSFER_BYTES] += bytes;
  if (to && (into_merge || node->replicated))
    cn_node_device_wrote(node, into_merge, to);
  else if (to)
    c->current = true;
  return CN_OK;
}

unsigned cn_node_current(const cn_node *node, bool merge) {
  unsigned where = node->host_stale[merge] ? 0u : (unsigned)CN_CURRENT_HOST;
  for (const cn_node_copy *c = node->copies; c; c = c->next)
    if (c->merge == merge && c->current) where |= CN_CURRENT_DEVICE;
  return where;
}

cn_status cn_node_to_host(cn_node *node, bool merge) {
  if (!node) return CN_ERR_INVALID;
  if (!node->host_stale[merge]) return CN_OK;
  return cn_node_host(node, merge, CN_HOST_READ) ? CN_OK : node->ctx->status;
}

cn_status cn_node_set_replicated(cn_node *node, bool replicated) {
  if (!node) return CN_ERR_INVALID;
  if (node->replicated == replicated) return CN_OK;
  if (node->copies)
    return cn_fail(node->ctx, CN_ERR_INVALID,
                   "cn_node_set_replicated: %s already has copies on devices (set it before its "
                   "first run on a device)",
                   cn_node_describe(node));
  node->replicated = replicated;
  return CN_OK;
}

bool cn_node_replicated(const cn_node *node) {
  return node && node->replicated;
}
