/* The hash map of core.h: open addressing with linear probing over a power-of-two table in the
 * context's arena, grown by doubling when three quarters full (the abandoned table stays in the
 * arena, as with cn_arena_grow, so the memory held is at most twice the last table).
 *
 * Invariants: cap is 0 or a power of two and count < 3 * cap / 4, so every probe sequence ends
 * at a free slot; there are no deletions, so a probe may stop at the first free slot; a slot's
 * key is NULL exactly when the slot is free. */
#include "core/core.h"

#include <string.h>

/* FNV-1a over the bytes of a string, or a multiplicative mix of a pointer's address. */
static uint64_t hash_key(const cn_map *map, const void *key) {
  if (map->strings) {
    uint64_t h = 14695981039346656037ull;
    for (const unsigned char *s = key; *s; s++) {
      h ^= *s;
      h *= 1099511628211ull;
    }
    return h;
  }
  uint64_t x = (uint64_t)(uintptr_t)key;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static bool same_key(const cn_map *map, const void *a, const void *b) {
  return map->strings ? strcmp(a, b) == 0 : a == b;
}

/* The slot holding key, or the free slot where it would go. */
static cn_map_slot *probe(const cn_map *map, const void *key) {
  size_t mask = (size_t)map->cap - 1;
  for (size_t i = (size_t)hash_key(map, key) & mask;; i = (i + 1) & mask) {
    cn_map_slot *slot = &map->slots[i];
    if (!slot->key || same_key(map, slot->key, key)) return slot;
  }
}

void *cn_map_get(const cn_map *map, const void *key) {
  if (map->count == 0) return NULL;
  cn_map_slot *slot = probe(map, key);
  return slot->key ? slot->value : NULL;
}

static bool grow(cn_ctx *ctx, cn_map *map) {
  if (map->cap > INT32_MAX / 2) return cn_fail(ctx, CN_ERR_NOMEM, "too many map entries"), false;
  cn_map bigger = {NULL, map->cap ? 2 * map->cap : 16, 0, map->strings};
  if (!(bigger.slots = cn_alloc(ctx, (size_t)bigger.cap * sizeof *bigger.slots))) return false;
  for (int i = 0; i < map->cap; i++)
    if (map->slots[i].key) *probe(&bigger, map->slots[i].key) = map->slots[i];
  bigger.count = map->count;
  *map = bigger;
  return true;
}

bool cn_map_put(cn_ctx *ctx, cn_map *map, const void *key, void *value) {
  CN_ASSERT(key != NULL);
  if (4 * ((int64_t)map->count + 1) > 3 * (int64_t)map->cap && !grow(ctx, map)) return false;
  cn_map_slot *slot = probe(map, key);
  if (!slot->key) {
    slot->key = key;
    map->count++;
  }
  slot->value = value;
  return true;
}
