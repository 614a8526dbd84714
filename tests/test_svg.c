/* Every SVG cannl writes is well-formed XML: the notation's `plot` (through the `cannl` command,
 * CANNL_CLI), the half-moons example's decision boundary and the Fashion-MNIST example's curves and
 * confusion matrix (the example programs next to the command in the build directory). The oracle
 * is Python's XML parser (/usr/bin/python3, xml.etree), which refuses a document that is not
 * well-formed (the Fashion example's lacked its closing </svg>, issue 31); its root must be an
 * svg element of the SVG namespace. The Fashion case needs the data set and is skipped without it
 * (said on stdout). */
#include "check.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define SVG_ROOT "{http://www.w3.org/2000/svg}svg"

/* The root tag of the XML file at path as Python's parser reads it, or "" when it is not
 * well-formed (the parser's message then goes to stderr). */
static void root_tag(const char *path, char *tag, size_t cap) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 -c 'import sys, xml.etree.ElementTree as E; "
           "print(E.parse(sys.argv[1]).getroot().tag)' '%s'",
           path);
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(tag, 1, cap - 1, p) : 0;
  tag[n] = '\0';
  if (p) pclose(p);
  tag[strcspn(tag, "\n")] = '\0';
}

static void check_svg(const char *path) {
  char tag[256];
  root_tag(path, tag, sizeof tag);
  CHECK_MSG(strcmp(tag, SVG_ROOT) == 0, "%s: root '%s'", path, tag);
}

/* The build directory: the directory of CANNL_CLI. */
static void build_dir(char *out, size_t cap) {
  const char *cli = getenv("CANNL_CLI");
  snprintf(out, cap, "%s", cli ? cli : "./cannl");
  char *slash = strrchr(out, '/');
  if (slash)
    *slash = '\0';
  else
    snprintf(out, cap, ".");
}

static void test_plot(const char *dir) {
  char script[512], cmd[2048];
  snprintf(script, sizeof script, "%s/plot.cnl", dir);
  FILE *f = fopen(script, "w");
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f,
          "for i = 1 to 4 do\n"
          "  plot \"%s/plot.svg\" ~x:i (\"a < b & c\", 1.0 /. i) (\"second\", 0.5)\n"
          "done\n",
          dir);
  CHECK(fclose(f) == 0);
  const char *cli = getenv("CANNL_CLI");
  snprintf(cmd, sizeof cmd, "'%s' run '%s' > /dev/null", cli ? cli : "cannl", script);
  CHECK_INT(system(cmd), 0);
  snprintf(script, sizeof script, "%s/plot.svg", dir);
  check_svg(script);
}

static void test_moons(const char *dir, const char *build) {
  char cmd[2048], svg[512];
  snprintf(svg, sizeof svg, "%s/moons.svg", dir);
  snprintf(cmd, sizeof cmd, "'%s/example_moons' '%s' > /dev/null", build, svg);
  CHECK_INT(system(cmd), 0);
  check_svg(svg);
}

static void test_fashion(const char *dir, const char *build) {
  struct stat st;
  if (stat("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", &st) != 0) {
    printf("SKIP: /usr/share/datasets/fashion-mnist is not installed: the Fashion example's SVG "
           "is not checked\n");
    return;
  }
  char cmd[4096], svg[512];
  snprintf(svg, sizeof svg, "%s/fashion.svg", dir);
  snprintf(cmd, sizeof cmd,
           "'%s/example_fashion_mnist' --epochs 1 --train 256 --test 100 --batch 128 --svg '%s' "
           "--checkpoint '%s/fashion.safetensors' > /dev/null",
           build, svg, dir);
  CHECK_INT(system(cmd), 0);
  check_svg(svg);
}

int main(void) {
  char dir[] = "/tmp/cannl_svg_XXXXXX", build[1024], cmd[1100];
  CHECK(mkdtemp(dir) != NULL);
  build_dir(build, sizeof build);
  test_plot(dir);
  test_moons(dir, build);
  test_fashion(dir, build);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK_INT(system(cmd), 0);
  CHECK_DONE();
}
