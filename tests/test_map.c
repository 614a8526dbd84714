/* Tests of the core hash map (src/core/map.c): string keys compared by content (a key spelled in
 * another buffer finds the entry), pointer keys compared by address, replacement of a value, an
 * empty map, growth through many doublings with every entry still found, and an allocation
 * failure while growing (CN_ERR_NOMEM, the entries stored before it kept). */
#include "check.h"
#include "core/core.h"

#include <stdio.h>

static void test_strings(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_map map = {.strings = true};
  int one = 1, two = 2, three = 3;
  CHECK(cn_map_get(&map, "w") == NULL);
  CHECK(cn_map_put(ctx, &map, "w", &one));
  CHECK(cn_map_put(ctx, &map, "b", &two));
  char spelled[8];
  snprintf(spelled, sizeof spelled, "%c", 'w');
  CHECK(cn_map_get(&map, spelled) == &one);
  CHECK(cn_map_get(&map, "b") == &two);
  CHECK(cn_map_get(&map, "x") == NULL);
  CHECK(cn_map_get(&map, "") == NULL);
  CHECK(cn_map_put(ctx, &map, spelled, &three)); /* the latest value wins */
  CHECK(cn_map_get(&map, "w") == &three);
  CHECK_INT(map.count, 2);
  cn_ctx_destroy(ctx);
}

static void test_pointers_and_growth(void) {
  cn_ctx *ctx = cn_ctx_create();
  enum { N = 5000 };
  static int objects[N];
  static char names[N][8];
  cn_map by_address = {0}, by_name = {.strings = true};
  int stored = 0;
  for (int i = 0; i < N; i++) {
    snprintf(names[i], sizeof names[i], "k%d", i);
    stored += cn_map_put(ctx, &by_address, &objects[i], names[i]);
    stored += cn_map_put(ctx, &by_name, names[i], &objects[i]);
  }
  CHECK_INT(stored, 2 * N);
  CHECK_INT(by_address.count, N);
  CHECK_INT(by_name.count, N);
  CHECK(by_address.cap >= N && (by_address.cap & (by_address.cap - 1)) == 0);
  int found = 0;
  for (int i = 0; i < N; i++) {
    char key[8];
    snprintf(key, sizeof key, "k%d", i);
    found += cn_map_get(&by_address, &objects[i]) == names[i];
    found += cn_map_get(&by_name, key) == &objects[i];
  }
  CHECK_INT(found, 2 * N);
  int outside = 0;
  CHECK(cn_map_get(&by_address, &outside) == NULL);
  CHECK(cn_map_get(&by_name, "k5000") == NULL);
  cn_ctx_destroy(ctx);
}

static void test_allocation_failure(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_map map = {.strings = true};
  static char names[13][8];
  for (int i = 0; i < 12; i++) { /* 12 entries fill a table of 16 to three quarters */
    snprintf(names[i], sizeof names[i], "n%d", i);
    CHECK(cn_map_put(ctx, &map, names[i], names[i]));
  }
  CHECK_INT(map.cap, 16);
  snprintf(names[12], sizeof names[12], "n12");
  ctx->fail_alloc_countdown = 1;
  CHECK(!cn_map_put(ctx, &map, names[12], names[12]));
  CHECK_INT(cn_ctx_status(ctx), CN_ERR_NOMEM);
  CHECK_INT(map.count, 12);
  CHECK(cn_map_get(&map, "n11") == names[11]);
  CHECK(cn_map_get(&map, "n12") == NULL);
  CHECK(cn_map_put(ctx, &map, names[12], names[12])); /* the hook is spent: it grows now */
  CHECK_INT(map.cap, 32);
  CHECK(cn_map_get(&map, "n12") == names[12]);
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_strings();
  test_pointers_and_growth();
  test_allocation_failure();
  CHECK_DONE();
}
