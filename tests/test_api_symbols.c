/* The shared library exports its API and nothing else: the functions include/cannl.h marks CN_API
 * are exactly the dynamic symbols `nm -D --defined-only` lists in libcannl.so (the library is
 * built with -fvisibility=hidden). A declaration missing its CN_API is absent from the library, and
 * an internal function (nt_*, cn_sched_*, ...) that leaks is a symbol the header does not have.
 * Exits 77 (skipped) where nm is not installed. */
#include "check.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>

#define MAX_NAMES 1024
#define NAME_LEN  96

typedef struct {
  char names[MAX_NAMES][NAME_LEN];
  int n;
} name_set;

static void add_name(name_set *set, const char *name, size_t len) {
  if (set->n >= MAX_NAMES || len >= NAME_LEN) {
    CHECK_MSG(false, "too many or too long names (%.*s)", (int)len, name);
    return;
  }
  memcpy(set->names[set->n], name, len);
  set->names[set->n][len] = '\0';
  set->n++;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(a, b);
}

static bool has_name(const name_set *set, const char *name) {
  return bsearch(name, set->names, (size_t)set->n, NAME_LEN, compare_names) != NULL;
}

/* The name of each declaration: a line that starts with "CN_API " (clang-format keeps the marker
 * at the start of the declaration), the first identifier followed by '(' after it. */
static bool header_names(const char *path, name_set *set) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  static char text[1 << 20];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = '\0';
  for (const char *at = strstr(text, "\nCN_API "); at; at = strstr(at + 1, "\nCN_API ")) {
    const char *open = strchr(at, '(');
    if (!open) break;
    const char *end = open;
    while (end > at && isspace((unsigned char)end[-1])) end--;
    const char *start = end;
    while (start > at && (isalnum((unsigned char)start[-1]) || start[-1] == '_')) start--;
    add_name(set, start, (size_t)(end - start));
  }
  qsort(set->names, (size_t)set->n, NAME_LEN, compare_names);
  return true;
}

/* The defined dynamic symbols of the shared library, of any kind (functions and data). */
static bool library_names(const char *so, name_set *set) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s' 2>/dev/null", so);
  FILE *p = popen(cmd, "r");
  if (!p) return false;
  char line[512];
  while (fgets(line, sizeof line, p)) {
    char value[64], kind[8], name[256];
    if (sscanf(line, "%63s %7s %255s", value, kind, name) != 3) continue;
    add_name(set, name, strlen(name));
  }
  int rc = pclose(p);
  qsort(set->names, (size_t)set->n, NAME_LEN, compare_names);
  return rc == 0 && set->n > 0;
}

int main(void) {
  const char *source = getenv("CANNL_SOURCE_DIR"), *so = getenv("CANNL_SHARED");
  if (!source || !so) {
    printf("CANNL_SOURCE_DIR or CANNL_SHARED is not set (run by ctest): skipped\n");
    return 77;
  }
  if (system("nm --version >/dev/null 2>&1") != 0) {
    printf("nm (binutils) is not installed: skipped\n");
    return 77;
  }
  static name_set api, exported;
  char header[4096];
  snprintf(header, sizeof header, "%s/include/cannl.h", source);
  CHECK_MSG(header_names(header, &api), "cannot read %s", header);
  CHECK_MSG(library_names(so, &exported), "nm -D cannot read %s", so);
  /* the API today has over 200 functions: a parse that finds few is broken, not a small API */
  CHECK_MSG(api.n > 200, "%d CN_API declarations in cannl.h", api.n);
  CHECK(has_name(&api, "cn_ctx_create") && has_name(&api, "cn_notation_run"));
  for (int k = 0; k < api.n; k++)
    CHECK_MSG(has_name(&exported, api.names[k]), "%s is in the API but not exported", api.names[k]);
  for (int k = 0; k < exported.n; k++)
    CHECK_MSG(has_name(&api, exported.names[k]), "%s is exported but not in the API",
              exported.names[k]);
  CHECK_INT(exported.n, api.n);
  CHECK_DONE();
}
