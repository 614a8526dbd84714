/* The floors of the notation's evaluator (docs/ARCHITECTURE.md, "The evaluator's floors"): the
 * table below is the one statement of which floor each src/notation/eval* file sits on. Checked:
 *   - every eval*.c / eval*.h file of src/notation is in the table, and every entry exists;
 *   - a file includes no eval header above its floor, and a .c file includes its floor's header;
 *   - a function with external linkage defined in a floor's .c file is declared in that floor's
 *     header and in no other eval header (so that no floor calls up through a declaration put in
 *     a lower header).
 * Since a floor's header includes only the one below, a file can call only its floor and those
 * below; inside the core the files call each other (the recursion), the one circle.
 * The checker runs on the sources (must pass) and on copies with an upward include, a
 * declaration moved down and an unlisted file (each must fail), so that it cannot pass vacuously.
 *
 * Invariants: reads the sources only (CANNL_SOURCE_DIR, set by ctest; without it the test exits
 * 77 after saying so); the checker itself allocates nothing it does not free. */
#include "check.h"

#include <dirent.h>
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>

enum { BASE, SERVICES, CORE, STATEMENTS, N_FLOORS };
static const char *const floor_name[N_FLOORS] = {"base", "services", "core", "statements"};
static const char *const floor_header[N_FLOORS] = {"eval_base.h", "eval_services.h", "eval_core.h",
                                                   "eval_stmt.h"};

/* The table of floors. */
static const struct {
  const char *file;
  int floor;
} floors[] = {
    {"eval.h", BASE},
    {"eval_base.h", BASE},
    {"eval_base.c", BASE},
    {"eval_services.h", SERVICES},
    {"eval_out.c", SERVICES},
    {"eval_data.c", SERVICES},
    {"eval_core.h", CORE},
    {"eval.c", CORE},
    {"eval_apply.c", CORE},
    {"eval_builtin.c", CORE},
    {"eval_operation.c", CORE},
    {"eval_cd.c", CORE},
    {"eval_stmt.h", STATEMENTS},
    {"eval_elab.c", STATEMENTS},
    {"eval_plot.c", STATEMENTS},
    {"eval_stmt.c", STATEMENTS},
};
#define N_TABLE ((int)(sizeof floors / sizeof floors[0]))

typedef struct {
  char name[64];
  char *text;
} source;

static int floor_of(const char *name) {
  for (int i = 0; i < N_TABLE; i++)
    if (strcmp(floors[i].file, name) == 0) return floors[i].floor;
  return -1;
}

static bool is_eval_file(const char *name) {
  size_t n = strlen(name);
  return strncmp(name, "eval", 4) == 0 && n > 2 && name[n - 2] == '.' &&
         (name[n - 1] == 'c' || name[n - 1] == 'h');
}

static bool is_header(const char *name) {
  return name[strlen(name) - 1] == 'h';
}

static const source *find(const source *s, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(s[i].name, name) == 0) return &s[i];
  return NULL;
}

/* Whether text declares or defines `name(` as a whole word. */
static bool mentions_call(const char *text, const char *name) {
  size_t n = strlen(name);
  for (const char *p = text; (p = strstr(p, name)) != NULL; p += n)
    if ((p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) && p[n] == '(') return true;
  return false;
}

/* The violations of the floors among the files s[0..n), each said on stderr when `say`. */
static int check_floors(const source *s, int n, bool say) {
  int bad = 0;
#define VIOLATION(...)                                                                             \
  do {                                                                                             \
    bad++;                                                                                         \
    if (say) fprintf(stderr, "floors: " __VA_ARGS__);                                              \
  } while (0)
  for (int i = 0; i < N_TABLE; i++)
    if (!find(s, n, floors[i].file))
      VIOLATION("%s is in the table of floors but not in src/notation\n", floors[i].file);
  for (int i = 0; i < n; i++) {
    int fl = floor_of(s[i].name);
    if (fl < 0) {
      VIOLATION("%s has no floor: add it to the table of tests/test_layers.c\n", s[i].name);
      continue;
    }
    bool own = is_header(s[i].name);
    /* includes: "notation/eval..." at the start of a line */
    for (const char *p = s[i].text; (p = strstr(p, "#include \"notation/")) != NULL; p++) {
      if (p != s[i].text && p[-1] != '\n') continue;
      const char *name = p + strlen("#include \"notation/"), *end = strchr(name, '"');
      if (!end || end - name >= 64) continue;
      char inc[64];
      snprintf(inc, sizeof inc, "%.*s", (int)(end - name), name);
      if (!is_eval_file(inc)) continue;
      int to = floor_of(inc);
      if (to < 0)
        VIOLATION("%s includes %s, which has no floor\n", s[i].name, inc);
      else if (to > fl)
        VIOLATION("%s (floor %s) includes %s (floor %s): a floor never includes a higher one\n",
                  s[i].name, floor_name[fl], inc, floor_name[to]);
      if (strcmp(inc, floor_header[fl]) == 0) own = true;
    }
    if (!own)
      VIOLATION("%s (floor %s) does not include %s\n", s[i].name, floor_name[fl], floor_header[fl]);
    if (is_header(s[i].name)) continue;
    /* definitions with external linkage: a line starting with a type, not static, whose first
     * `nt_` identifier is followed by '(' */
    for (const char *line = s[i].text; line && *line; line = strchr(line, '\n'), line += !!line) {
      if (!isalpha((unsigned char)*line) || strncmp(line, "static", 6) == 0 ||
          strncmp(line, "typedef", 7) == 0 || strncmp(line, "extern", 6) == 0)
        continue;
      const char *eol = strchr(line, '\n'), *paren = strchr(line, '(');
      if (!paren || (eol && paren > eol)) continue;
      const char *id = paren;
      while (id > line && (isalnum((unsigned char)id[-1]) || id[-1] == '_')) id--;
      if (strncmp(id, "nt_", 3) != 0 || paren - id >= 96) continue;
      char fn[96];
      snprintf(fn, sizeof fn, "%.*s", (int)(paren - id), id);
      int declared = 0;
      for (int h = 0; h < n; h++) {
        if (!is_header(s[h].name) || !mentions_call(s[h].text, fn)) continue;
        declared++;
        int hf = floor_of(s[h].name);
        if (hf != fl)
          VIOLATION("%s (floor %s) is defined in %s but declared in %s (floor %s)\n", fn,
                    floor_name[fl], s[i].name, s[h].name, hf < 0 ? "none" : floor_name[hf]);
      }
      if (declared != 1)
        VIOLATION("%s, defined in %s, is declared in %d eval headers (one: %s)\n", fn, s[i].name,
                  declared, floor_header[fl]);
    }
  }
#undef VIOLATION
  return bad;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0, got;
  char chunk[4096];
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (len + got + 1 > cap) {
      cap = 2 * (len + got + 1);
      char *grown = realloc(buf, cap);
      if (!grown) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = grown;
    }
    memcpy(buf + len, chunk, got);
    len += got;
  }
  fclose(f);
  if (!buf && (buf = malloc(1)) == NULL) return NULL;
  buf[len] = '\0';
  return buf;
}

/* A copy of s with the first `from` in file `name` replaced by `to` (the caller frees it). */
static char *edited(const source *s, int n, const char *name, const char *from, const char *to) {
  const source *f = find(s, n, name);
  const char *at = f ? strstr(f->text, from) : NULL;
  if (!at) return NULL;
  size_t len = strlen(f->text) - strlen(from) + strlen(to);
  char *text = malloc(len + 1);
  if (!text) return NULL;
  snprintf(text, len + 1, "%.*s%s%s", (int)(at - f->text), f->text, to, at + strlen(from));
  return text;
}

/* The files with one of them changed: its text replaced by `text` (owned by the caller). */
static int violations_with(const source *s, int n, const char *name, char *text) {
  source copy[64];
  memcpy(copy, s, sizeof *s * (size_t)n);
  for (int i = 0; i < n; i++)
    if (strcmp(copy[i].name, name) == 0) copy[i].text = text;
  return check_floors(copy, n, false);
}

int main(void) {
  const char *root = getenv("CANNL_SOURCE_DIR");
  if (!root) {
    printf("test_layers: CANNL_SOURCE_DIR is not set (ctest sets it): skipped\n");
    return 77;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/src/notation", root);
  DIR *d = opendir(dir);
  CHECK_MSG(d != NULL, "cannot open %s", dir);
  if (!d) CHECK_DONE();
  source s[64];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (!is_eval_file(e->d_name) || len >= sizeof s[0].name) continue;
    CHECK(n < 64);
    if (n == 64) break;
    char path[sizeof dir + sizeof e->d_name + 1]; /* holds any directory entry of dir */
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    memcpy(s[n].name, e->d_name, len + 1);
    s[n].text = slurp(path);
    CHECK_MSG(s[n].text != NULL, "cannot read %s", path);
    if (s[n].text) n++;
  }
  closedir(d);
  CHECK_INT(n, N_TABLE);

  /* the sources keep to their floors (the cases below add to what they break, if anything) */
  int base = check_floors(s, n, true);
  CHECK_INT(base, 0);

  /* an upward include is caught: a service including the core's header instead of its own (two
   * violations: the include, and its floor's header missing) */
  char *up = edited(s, n, "eval_out.c", "#include \"notation/eval_services.h\"",
                    "#include \"notation/eval_core.h\"");
  CHECK(up != NULL);
  if (up) CHECK_INT(violations_with(s, n, "eval_out.c", up), base + 2);
  free(up);
  /* ... and the base including the statements' header next to its own */
  up = edited(s, n, "eval_base.c", "#include \"notation/eval_base.h\"",
              "#include \"notation/eval_base.h\"\n#include \"notation/eval_stmt.h\"");
  CHECK(up != NULL);
  if (up) CHECK_INT(violations_with(s, n, "eval_base.c", up), base + 1);
  free(up);
  /* a core function declared in the base's header (declared twice, and on the wrong floor) */
  char *down = edited(s, n, "eval_base.h", "#endif",
                      "nt_value *nt_eval(nt_interp *I, nt_env *e, nt_decl_scope *ds, "
                      "const cn_nt_expr *x);\n#endif");
  CHECK(down != NULL);
  if (down) CHECK_INT(violations_with(s, n, "eval_base.h", down), base + 2);
  free(down);
  /* a new eval file that the table does not place */
  source more[65];
  memcpy(more, s, sizeof *s * (size_t)n);
  snprintf(more[n].name, sizeof more[n].name, "eval_new.c");
  more[n].text = "#include \"notation/eval_core.h\"\n";
  CHECK_INT(check_floors(more, n + 1, false), base + 1);

  for (int i = 0; i < n; i++) free(s[i].text);
  CHECK_DONE();
}
