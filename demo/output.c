/* The example programs' output directory: a file name joined to it, and the directory created
 * when missing (its parent must exist), so that `example_fashion_mnist` run from a repository's
 * root writes runs/... rather than filling the root (issue 31). Invariant: nothing is created when
 * the path does not fit. */
#include "output.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* dir as a directory, made when missing (its parent must exist). */
static bool make_directory(const char *dir) {
  struct stat st;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "cannot create output directory '%s': %s\n", dir, strerror(errno));
    return false;
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "output directory '%s' is not a directory\n", dir);
    return false;
  }
  return true;
}

bool demo_output_path(const char *dir, const char *name, char *out, size_t cap) {
  size_t len = strlen(dir);
  int n = snprintf(out, cap, "%s%s%s", dir, len && dir[len - 1] == '/' ? "" : "/", name);
  if (n < 0 || (size_t)n >= cap) {
    fprintf(stderr, "output path '%s/%s' is too long\n", dir, name);
    return false;
  }
  return make_directory(dir);
}
