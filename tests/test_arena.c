/* Tests of the core arena's marks (src/core/core.c): a reset frees every block created after its
 * mark (the held byte count returns to its value at the mark), restores the marked block's
 * offset (the next allocation gets the same address, zero-filled again), keeps what was allocated
 * before the mark intact (own blocks behind the head included), nests, and works on an empty
 * arena and on a context's arena. Also the message of a node buffer that malloc cannot give: it
 * names the node, its dims and the byte count (the address space is limited with setrlimit so
 * that the allocation fails the same way everywhere). Run under valgrind, these tests also show
 * that a reset leaks nothing and frees nothing still in use. */
#include "check.h"
#include "core/core.h"
#include "ir/ir.h"
#include "limit_check.h"

#include <stdbool.h>
#include <string.h>

enum { BLOCK = 65536 }; /* the arena's block size (CN_ARENA_BLOCK in core.c) */

static bool all_bytes(const void *p, unsigned char value, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i] != value) return false;
  return true;
}

static void *filled(cn_arena *arena, size_t bytes, unsigned char value) {
  void *p = cn_arena_alloc(arena, bytes);
  if (p) memset(p, value, bytes);
  return p;
}

/* Allocations spanning several head blocks (20 of 10000 bytes: 6 per block) and three own blocks
 * (100000 bytes each), all written; false if one failed. */
static bool allocate_much(cn_arena *arena) {
  for (int i = 0; i < 20; i++)
    if (!filled(arena, 10000, (unsigned char)(0x10 + i))) return false;
  for (int i = 0; i < 3; i++)
    if (!filled(arena, 100000, (unsigned char)(0x40 + i))) return false;
  return true;
}

static void test_empty_arena(void) {
  cn_arena arena;
  cn_arena_init(&arena);
  cn_arena_marker mark = cn_arena_mark(&arena);
  CHECK_INT(cn_arena_bytes(&arena), 0);
  CHECK(cn_arena_alloc(&arena, 100) != NULL);   /* a head block */
  CHECK(cn_arena_alloc(&arena, 70000) != NULL); /* its own block, behind the head */
  CHECK_INT(cn_arena_bytes(&arena), BLOCK + 70000);
  cn_arena_reset(&arena, mark);
  CHECK_INT(cn_arena_bytes(&arena), 0);
  CHECK(arena.head == NULL);
  unsigned char *again = cn_arena_alloc(&arena, 32);
  CHECK(again != NULL && all_bytes(again, 0, 32));
  CHECK_INT(cn_arena_bytes(&arena), BLOCK);
  cn_arena_release(&arena);
  CHECK_INT(cn_arena_bytes(&arena), 0);
}

static void test_reset_restores(void) {
  cn_arena arena;
  cn_arena_init(&arena);
  unsigned char *before = filled(&arena, 100, 0xAB);
  unsigned char *own_before = filled(&arena, 70000, 0xCD); /* own block behind the head */
  CHECK(before && own_before);
  size_t at_mark = cn_arena_bytes(&arena);
  CHECK_INT(at_mark, BLOCK + 70000);
  cn_arena_marker mark = cn_arena_mark(&arena);

  unsigned char *first = filled(&arena, 64, 0xEE);
  CHECK(first == before + 112); /* 100 rounded up to the 16-byte alignment */
  CHECK(allocate_much(&arena));
  size_t grown = cn_arena_bytes(&arena);
  CHECK_INT(grown, at_mark + 3 * BLOCK + 3 * 100000); /* 20 x 10000: 6 fit in the marked block */

  cn_arena_reset(&arena, mark);
  CHECK_INT(cn_arena_bytes(&arena), at_mark);
  unsigned char *again = cn_arena_alloc(&arena, 64);
  CHECK(again == first);
  CHECK(again && all_bytes(again, 0, 64)); /* zero-filled again, not the 0xEE of before */
  CHECK(all_bytes(before, 0xAB, 100));
  CHECK(all_bytes(own_before, 0xCD, 70000));
  /* The same allocations take the same memory again. */
  CHECK(allocate_much(&arena));
  CHECK_INT(cn_arena_bytes(&arena), grown);
  cn_arena_reset(&arena, mark); /* twice to the same mark */
  cn_arena_reset(&arena, mark);
  CHECK_INT(cn_arena_bytes(&arena), at_mark);
  CHECK(all_bytes(own_before, 0xCD, 70000));
  cn_arena_release(&arena);
  CHECK_INT(cn_arena_bytes(&arena), 0);
}

static void test_nested_marks(void) {
  cn_arena arena;
  cn_arena_init(&arena);
  CHECK(filled(&arena, 1000, 0x01) != NULL);
  cn_arena_marker outer = cn_arena_mark(&arena);
  size_t at_outer = cn_arena_bytes(&arena);
  unsigned char *kept = filled(&arena, 70000, 0x02); /* own block: kept by the inner reset */
  CHECK(kept != NULL);
  cn_arena_marker inner = cn_arena_mark(&arena);
  size_t at_inner = cn_arena_bytes(&arena);
  CHECK_INT(at_inner, at_outer + 70000);
  CHECK(allocate_much(&arena));
  cn_arena_reset(&arena, inner);
  CHECK_INT(cn_arena_bytes(&arena), at_inner);
  CHECK(all_bytes(kept, 0x02, 70000));
  CHECK(allocate_much(&arena));
  cn_arena_reset(&arena, outer);
  CHECK_INT(cn_arena_bytes(&arena), at_outer);
  CHECK_INT(at_outer, BLOCK);
  cn_arena_release(&arena);
}

/* A phase's temporaries in a context's arena, released while the context lives on. */
static void test_context_arena(void) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK(ctx != NULL);
  if (!ctx) return;
  const char *kept = cn_strdup(ctx, "kept");
  size_t at_mark = cn_arena_bytes(&ctx->arena);
  cn_arena_marker mark = cn_arena_mark(&ctx->arena);
  for (int i = 0; i < 100; i++) CHECK(cn_alloc(ctx, 5000) != NULL);
  CHECK(cn_arena_bytes(&ctx->arena) > at_mark);
  cn_arena_reset(&ctx->arena, mark);
  CHECK_INT(cn_arena_bytes(&ctx->arena), at_mark);
  CHECK_STR(kept, "kept");
  CHECK_STR(cn_strdup(ctx, "next"), "next");
  cn_ctx_destroy(ctx);
}

/* A buffer malloc cannot give (400 GB under a 4 GiB address space; the size fits in size_t, so
 * only malloc refuses): the message names the node, its dims and the bytes. The soft limit is
 * restored afterwards (an unprivileged process may raise it back to the hard limit). */
static void test_buffer_failure_names_node(void) {
  struct rlimit saved;
  cn_ctx *ctx = cn_ctx_create();
  CHECK(ctx != NULL);
  if (!ctx) return;
  const int64_t dims[1] = {100000000000};
  cn_node *x = cn_node_create(ctx, "x", CN_PREC_SINGLE, 1, dims);
  CHECK(x != NULL);
  if (x) {
    CHECK(limit_address_space(&saved));
    void *buffer = cn_node_buffer(x, false);
    CHECK(restore_address_space(&saved));
    CHECK(buffer == NULL);
    CHECK_INT(cn_ctx_status(ctx), CN_ERR_NOMEM);
    CHECK_STR(cn_ctx_error(ctx),
              "cannot allocate the buffer of 'x' (#1) [100000000000] (400000000000 bytes)");
  }
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_empty_arena();
  test_reset_restores();
  test_nested_marks();
  test_context_arena();
  test_buffer_failure_names_node();
  CHECK_DONE();
}
