/* The all-reduce of replicated nodes across the context's CPU devices (include/cannl.h
 * cn_allreduce_create): transfers into merge buffers (cn_node_transfer) and one merge routine,
 * `p =+ p.merge` for every node, compiled once and run on the receiving device, in the fixed order
 * of a binary tree onto device 0, then device 0's sums copied to every other device.
 *
 * Invariants: the order depends only on the device count, so a sum's grouping, and its bits, are
 * the same run to run; every device ends with device 0's bits (copied, never recomputed). The
 * merge routine is the context's (its own cleanup); the all-reduce record owns the node list. */
#include "ir/ir.h"
#include "runtime/routine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cn_allreduce {
  cn_ctx *ctx;
  int n;
  cn_node **nodes;
  cn_routine *merge;
  cn_cleanup *cleanup;
};

static void allreduce_cleanup(void *arg) {
  cn_allreduce *ar = arg;
  free(ar->nodes);
  free(ar);
}

/* `node =+ node.merge` over its cells (padding margins untouched). NULL with a message. */
static cn_asgn *merge_asgn(cn_ctx *ctx, cn_node *node) {
  cn_symbol iters[CN_MAX_RANK];
  cn_index map[CN_MAX_RANK];
  for (int a = 0; a < node->rank; a++) {
    char name[16];
    snprintf(name, sizeof name, "m%d", a);
    if ((iters[a] = cn_symbol_create(ctx, name, 0)) < 0) return NULL;
    map[a] = cn_index_iter(iters[a]);
  }
  cn_proj_tensor t = {node->rank, node->dims, map};
  cn_proj *proj = cn_proj_create(ctx, node->rank, iters, node->dims, t, 1, &t);
  if (!proj) return NULL;
  cn_buffer rhs = {node, true};
  return cn_asgn_accum(ctx, false, CN_OP_ADD, node, CN_OP_ID, &rhs, proj);
}

/* Why node cannot be all-reduced among nodes[0 .. k) (NULL: it can), before compiling. */
static const char *refusal(cn_node *const *nodes, int k) {
  const cn_node *node = nodes[k];
  if (!node->replicated)
    return "is not replicated (cn_node_set_replicated): its devices hold one value, not one each";
  if (node->mode != CN_MEM_MATERIALIZED) return "is not materialized";
  for (int j = 0; j < k; j++)
    if (nodes[j] == node) return "is listed twice";
  return NULL;
}

cn_allreduce *cn_allreduce_create(cn_ctx *ctx, int n, cn_node *const *nodes,
                                  cn_backend_kind backend) {
  if (!ctx) return NULL;
  if (n < 1 || !nodes) {
    cn_fail(ctx, CN_ERR_INVALID, "cn_allreduce_create: %d nodes, at least one needed", n);
    return NULL;
  }
  for (int k = 0; k < n; k++) {
    const char *why = nodes[k] ? refusal(nodes, k) : "is NULL";
    if (why) {
      cn_fail(ctx, CN_ERR_INVALID, "cn_allreduce_create: node %d (%s) %s", k,
              nodes[k] ? cn_node_describe(nodes[k]) : "-", why);
      return NULL;
    }
  }
  if (backend == CN_BACKEND_DEFAULT && cn_routine_default_backend(ctx, &backend) != CN_OK)
    return NULL;
  if (cn_backend_caps(backend) & CN_BACKEND_DEVICE_MEMORY) {
    cn_fail(ctx, CN_ERR_INVALID,
            "cn_allreduce_create: backend %s runs on its own device, not on the CPU devices",
            cn_backend_name(backend));
    return NULL;
  }
  cn_asgn **merges = cn_alloc(ctx, sizeof *merges * (size_t)n);
  for (int k = 0; merges && k < n; k++)
    if (!(merges[k] = merge_asgn(ctx, nodes[k]))) return NULL;
  cn_asgn *seq = merges ? cn_asgn_seq(ctx, n, merges) : NULL;
  cn_routine *merge = seq ? cn_routine_compile(ctx, seq, backend, "allreduce_merge") : NULL;
  if (!merge) return NULL;
  cn_allreduce *ar = cn_calloc(ctx, 1, sizeof *ar);
  cn_node **copy = ar ? cn_malloc(ctx, sizeof *copy * (size_t)n) : NULL;
  cn_cleanup *cleanup = copy ? cn_ctx_add_cleanup(ctx, allreduce_cleanup, ar) : NULL;
  if (!cleanup) {
    free(copy);
    free(ar);
    cn_routine_free(merge);
    return NULL;
  }
  memcpy(copy, nodes, sizeof *copy * (size_t)n);
  *ar = (cn_allreduce){ctx, n, copy, merge, cleanup};
  return ar;
}

/* Every node's value on device `from` into device to's merge buffer, then the merge there. */
static cn_status merge_from(cn_allreduce *ar, int from, int to) {
  for (int k = 0; k < ar->n; k++) {
    cn_status status = cn_node_transfer(ar->nodes[k], from, to, true);
    if (status != CN_OK) return status;
  }
  return cn_routine_run_on(ar->merge, to);
}

cn_status cn_allreduce_run(cn_allreduce *ar) {
  if (!ar) return CN_ERR_INVALID;
  int devices = cn_ctx_device_count(ar->ctx);
  if (devices < 1)
    return cn_fail(ar->ctx, CN_ERR_INVALID,
                   "cn_allreduce_run: the context has no devices (cn_ctx_open_devices)");
  cn_status status = CN_OK;
  for (int stride = 1; stride < devices && status == CN_OK; stride *= 2)
    for (int d = 0; d + stride < devices && status == CN_OK; d += 2 * stride)
      status = merge_from(ar, d + stride, d);
  for (int d = 1; d < devices && status == CN_OK; d++)
    for (int k = 0; k < ar->n && status == CN_OK; k++)
      status = cn_node_transfer(ar->nodes[k], 0, d, false);
  return status;
}

void cn_allreduce_free(cn_allreduce *ar) {
  if (!ar) return;
  cn_routine_free(ar->merge);
  cn_ctx_remove_cleanup(ar->ctx, ar->cleanup);
  allreduce_cleanup(ar);
}
