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
 * host reads it (cn_node_host), from a current copy, and waited for. Data moves between two
 * devices through the host. Counters: CN_STAT_UPLOADS, CN_STAT_DOWNLOADS and their bytes. */
#include "ir/ir.h"

#include <stdlib.h>

struct cn_node_copy {
  cn_node_copy *next;
  const cn_device *device;
  void *buffer; /* the device's */
  size_t bytes;
  bool merge;   /* the copy of the merge buffer, else of the value */
  bool current; /* holds the node's newest value */
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
  ctx->stats[CN_STAT_DOWNLOADS]++;
  ctx->stats[CN_STAT_DOWNLOAD_BYTES] += c->bytes;
  node->host_stale[merge] = false;
  return CN_OK;
}

void *cn_node_host(cn_node *node, bool merge, cn_host_access access) {
  void *host = cn_node_raw_buffer(node, merge);
  if (!host || !node->copies) return host;
  if (access != CN_HOST_OVERWRITE && node->host_stale[merge] && fetch(node, merge, host) != CN_OK)
    return NULL;
  if (access == CN_HOST_READ) return host;
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
    if (c->merge == merge) c->current = c->device == dev;
  node->host_stale[merge] = true;
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
