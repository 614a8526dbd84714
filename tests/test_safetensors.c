/* safetensors files (src/data/safetensors.c) and their JSON reader (src/data/json.c): round trips
 * of every precision (padded nodes, rank 0, empty tensors, metadata), files checked by Python's
 * json and struct (and numpy when it is installed) and files written by Python loaded back, the
 * refusals of bad files and requests (each message naming the file, the position or the tensor,
 * and no node written after a failure), the CRC catching a corrupted byte, saves interrupted by
 * failing writes leaving the previous file whole and no temporary file, what a save replaces (a
 * link written through; a FIFO, a device node, a directory, a dangling link and another user's
 * link in a sticky directory refused and left as they were), a killed save's temporary file
 * removed by the next save (and a live writer's kept), and every allocation
 * failure of a save and a load reported as CN_ERR_NOMEM. Files live in a mkdtemp directory under
 * /tmp, removed at the end. */
#define _XOPEN_SOURCE 700 /* mknod, S_IFCHR, lchown */
#include "check.h"

#include "cannl.h"
#include "core/core.h"
#include "data/data.h"
#include "data/io_hook.h"
#include "data/json.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static const char *path_in(const char *name) {
  static char buf[4][sizeof dir + 1 + 1024];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

/* The number of directory entries (besides . and ..) whose name contains `part`. */
static int count_files(const char *part) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, part)) n++;
  if (d) closedir(d);
  return n;
}

static void remove_dir(void) {
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(path_in(e->d_name));
  if (d) closedir(d);
  rmdir(dir);
}

/* Deterministic pseudo-random bytes (any bit pattern is a valid cell: the round trip is raw). */
static void fill_bytes(unsigned char *b, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = (unsigned char)x;
  }
}

static size_t node_bytes(cn_node *n) {
  return (size_t)cn_node_numel(n) * cn_prec_bytes(cn_node_prec(n));
}

/* A node whose cells are the bytes of `seed`. */
static cn_node *make_node(cn_ctx *ctx, const char *label, cn_prec prec, int rank,
                          const int64_t *dims, uint64_t seed) {
  cn_node *n = cn_node_create(ctx, label, prec, rank, dims);
  CHECK_MSG(n != NULL, "%s", cn_ctx_error(ctx));
  unsigned char *b = malloc(node_bytes(n) + 1);
  fill_bytes(b, node_bytes(n), seed);
  CHECK(cn_node_set_cells(n, false, b, (size_t)cn_node_numel(n)) == CN_OK);
  free(b);
  return n;
}

/* The node's cells are the bytes of `seed`. */
static bool holds(cn_node *n, uint64_t seed) {
  size_t len = node_bytes(n);
  unsigned char *want = malloc(len + 1), *got = malloc(len + 1);
  fill_bytes(want, len, seed);
  bool same = cn_node_get_cells(n, false, got, (size_t)cn_node_numel(n)) == CN_OK &&
              memcmp(want, got, len) == 0;
  free(want);
  free(got);
  return same;
}

/* Writes a file of the given header text (length prefix added) and data bytes. */
static void write_raw(const char *path, const char *header, size_t header_len, const void *data,
                      size_t data_len) {
  FILE *f = fopen(path, "wb");
  unsigned char len8[8];
  for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)header_len >> (8 * b));
  CHECK(f && fwrite(len8, 1, 8, f) == 8 && fwrite(header, 1, header_len, f) == header_len &&
        (data_len == 0 || fwrite(data, 1, data_len, f) == data_len));
  if (f) fclose(f);
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* ---- Round trips ---- */

static void test_every_precision(void) {
  cn_ctx *ctx = cn_ctx_create();
  const int64_t dims[2] = {2, 3};
  cn_named_node saved[CN_PREC_COUNT], loaded[CN_PREC_COUNT];
  for (int p = 0; p < CN_PREC_COUNT; p++) {
    const char *name = cn_prec_name((cn_prec)p);
    saved[p] = (cn_named_node){name, make_node(ctx, name, (cn_prec)p, 2, dims, 100 + p)};
    loaded[p] = (cn_named_node){name, cn_node_create(ctx, name, (cn_prec)p, 2, dims)};
  }
  const cn_metadata_entry meta[3] = {
      {"epoch", "3"}, {"note", "h\xc3\xa9llo \"quoted\"\n\ttab \\"}, {"empty", ""}};
  const char *path = path_in("all.safetensors");
  cn_status st = cn_data_save_safetensors(ctx, path, CN_PREC_COUNT, saved, 3, meta);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  int n_meta = -1;
  cn_metadata_entry *got = NULL;
  st = cn_data_load_safetensors(ctx, path, CN_PREC_COUNT, loaded, &n_meta, &got);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  for (int p = 0; p < CN_PREC_COUNT; p++)
    CHECK_MSG(holds(loaded[p].node, 100 + p), "precision %s", loaded[p].name);
  CHECK_INT(n_meta, 3);
  if (n_meta == 3) {
    for (int i = 0; i < 3; i++) {
      CHECK_STR(got[i].key, meta[i].key);
      CHECK_STR(got[i].value, meta[i].value);
    }
  }
  /* metadata out is optional; a load of no node still validates the file */
  CHECK(cn_data_load_safetensors(ctx, path, 0, NULL, NULL, NULL) == CN_OK);
  /* the header was 8-aligned and the payload exactly the cells */
  size_t payload = 0;
  for (int p = 0; p < CN_PREC_COUNT; p++) payload += node_bytes(saved[p].node);
  FILE *f = fopen(path, "rb");
  unsigned char len8[8] = {0};
  CHECK(f && fread(len8, 1, 8, f) == 8);
  if (f) fclose(f);
  uint64_t n = 0;
  for (int b = 7; b >= 0; b--) n = n << 8 | len8[b];
  CHECK_INT(n % 8, 0);
  CHECK_INT(file_size(path), (long)(8 + n + payload));
  cn_ctx_destroy(ctx);
}

static void test_padded_rank0_empty(void) {
  cn_ctx *ctx = cn_ctx_create();
  const int64_t d34[2] = {3, 4}, d05[2] = {0, 5}, d30[2] = {3, 0};
  cn_node *padded = cn_node_create(ctx, "padded", CN_PREC_SINGLE, 2, d34);
  CHECK(cn_node_set_padding(padded, 0, 1, 2) == CN_OK);
  CHECK(cn_node_set_padding(padded, 1, 0, 1) == CN_OK);
  unsigned char cells[48];
  fill_bytes(cells, sizeof cells, 7);
  CHECK(cn_node_set_cells(padded, false, cells, 12) == CN_OK);
  cn_named_node saved[4] = {
      {"padded", padded},
      {"scalar", make_node(ctx, "scalar", CN_PREC_DOUBLE, 0, NULL, 8)},
      {"empty", make_node(ctx, "empty", CN_PREC_SINGLE, 2, d05, 9)},
      {"empty_words", make_node(ctx, "empty_words", CN_PREC_UINT4X32, 2, d30, 10)},
  };
  const char *path = path_in("shapes.safetensors");
  cn_status st = cn_data_save_safetensors(ctx, path, 4, saved, 0, NULL);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  /* the file holds the 48 unpadded bytes, the scalar's 8 and nothing for the empty ones */
  cn_node *plain = cn_node_create(ctx, "plain", CN_PREC_SINGLE, 2, d34);
  cn_node *repadded = cn_node_create(ctx, "repadded", CN_PREC_SINGLE, 2, d34);
  CHECK(cn_node_set_padding(repadded, 1, 2, 2) == CN_OK);
  cn_named_node loaded[5] = {
      {"padded", plain},
      {"padded", repadded},
      {"scalar", cn_node_create(ctx, "s", CN_PREC_DOUBLE, 0, NULL)},
      {"empty", cn_node_create(ctx, "e", CN_PREC_SINGLE, 2, d05)},
      {"empty_words", cn_node_create(ctx, "w", CN_PREC_UINT4X32, 2, d30)},
  };
  int n_meta = -1;
  cn_metadata_entry *meta = NULL;
  st = cn_data_load_safetensors(ctx, path, 5, loaded, &n_meta, &meta);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK(holds(plain, 7) && holds(repadded, 7) && holds(loaded[2].node, 8));
  CHECK_INT(n_meta, 0);
  /* a rank-0 node does not match a tensor of shape [1] */
  const int64_t d1[1] = {1};
  cn_named_node one = {"scalar", cn_node_create(ctx, "one", CN_PREC_DOUBLE, 1, d1)};
  CHECK(cn_data_load_safetensors(ctx, path, 1, &one, NULL, NULL) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "tensor \"scalar\" is F64 [] in the file");
  CHECK_HAS(cn_ctx_error(ctx), "F64 [1]");
  cn_ctx_destroy(ctx);
}

/* ---- Python as the oracle ---- */

static bool have_python(void) {
  return access("/usr/bin/python3", X_OK) == 0;
}

static int run_python(const char *script, const char *arg) {
  const char *py = path_in("check.py");
  FILE *f = fopen(py, "w");
  CHECK(f && fputs(script, f) >= 0);
  if (f) fclose(f);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", py, arg);
  int rc = system(cmd);
  unlink(py);
  return rc;
}

static const char check_script[] =
    "import json, struct, sys, zlib\n"
    "b = open(sys.argv[1], 'rb').read()\n"
    "(n,) = struct.unpack('<Q', b[:8])\n"
    "assert n % 8 == 0, n\n"
    "h = json.loads(b[8:8 + n].decode('utf-8'))\n"
    "data = b[8 + n:]\n"
    "meta = h.pop('__metadata__')\n"
    "assert meta == {'cannl_crc32': '%08x' % zlib.crc32(data), 'step': '42', 'who': 'caf\\u00e9'}, "
    "meta\n"
    "assert list(h) == ['w', 'ids', 'words', 'bf'], list(h)\n"
    "want = {'w': ('F32', [2, 3]), 'ids': ('I64', [4]), 'words': ('U32', [2, 4]),\n"
    "        'bf': ('BF16', [2])}\n"
    "end = 0\n"
    "for k, (dt, shape) in want.items():\n"
    "    assert h[k]['dtype'] == dt and h[k]['shape'] == shape, (k, h[k])\n"
    "    b0, b1 = h[k]['data_offsets']\n"
    "    assert b0 == end, (k, b0, end)\n"
    "    end = b1\n"
    "assert end == len(data), (end, len(data))\n"
    "def vals(k, fmt):\n"
    "    b0, b1 = h[k]['data_offsets']\n"
    "    return list(struct.unpack('<%d' % ((b1 - b0) // struct.calcsize(fmt)) + fmt, "
    "data[b0:b1]))\n"
    "assert vals('w', 'f') == [0.5, -1.0, 2.0, 3.25, -0.0, 1e9], vals('w', 'f')\n"
    "assert vals('ids', 'q') == [1, -2, 2**40, -2**62], vals('ids', 'q')\n"
    "assert vals('words', 'I') == [1, 2, 3, 4, 0xfffffffe, 0, 7, 8], vals('words', 'I')\n"
    "assert vals('bf', 'H') == [0x3f80, 0xc000], vals('bf', 'H')\n"
    "try:\n"
    "    import numpy as np\n"
    "except ImportError:\n"
    "    np = None\n"
    "if np is not None:\n"
    "    b0, b1 = h['w']['data_offsets']\n"
    "    a = np.frombuffer(data[b0:b1], dtype='<f4').reshape(2, 3)\n"
    "    assert a[1, 0] == 3.25 and a[1, 2] == 1e9, a\n"
    "    b0, b1 = h['words']['data_offsets']\n"
    "    assert np.frombuffer(data[b0:b1], dtype='<u4').reshape(2, 4)[1, 0] == 0xfffffffe\n";

static const char write_script[] =
    "import json, struct, sys\n"
    "x = struct.pack('<4f', 1.5, -2.0, 3.0, 4.0)\n"
    "y = struct.pack('<3q', 1, -2, 3)\n"
    "z = struct.pack('<H', 65535)\n"
    "# keys not in offset order, no padding, no cannl_crc32: as other tools write\n"
    "h = {'y': {'dtype': 'I64', 'shape': [3], 'data_offsets': [16, 40]},\n"
    "     '__metadata__': {'format': 'pt'},\n"
    "     'x': {'dtype': 'F32', 'shape': [2, 2], 'data_offsets': [0, 16]},\n"
    "     'z': {'dtype': 'U16', 'shape': [], 'data_offsets': [40, 42]},\n"
    "     'unused': {'dtype': 'I8', 'shape': [2], 'data_offsets': [42, 44]}}\n"
    "t = json.dumps(h).encode()\n"
    "open(sys.argv[1], 'wb').write(struct.pack('<Q', len(t)) + t + x + y + z + b'\\x01\\x02')\n";

static void test_python(void) {
  if (!have_python()) {
    printf("no /usr/bin/python3: the Python checks are skipped\n");
    return;
  }
  cn_ctx *ctx = cn_ctx_create();
  const int64_t d23[2] = {2, 3}, d4[1] = {4}, d2[1] = {2};
  cn_node *w = cn_node_create(ctx, "w", CN_PREC_SINGLE, 2, d23);
  CHECK(cn_node_set_values(w, false, (const double[]){0.5, -1, 2, 3.25, -0.0, 1e9}, 6) == CN_OK);
  cn_node *ids = cn_node_create(ctx, "ids", CN_PREC_INT64, 1, d4);
  CHECK(cn_node_set_cells(ids, false,
                          (const int64_t[]){1, -2, (int64_t)1 << 40, -((int64_t)1 << 62)},
                          4) == CN_OK);
  cn_node *words = cn_node_create(ctx, "words", CN_PREC_UINT4X32, 1, d2);
  CHECK(cn_node_set_cells(words, false, (const uint32_t[]){1, 2, 3, 4, 0xfffffffeu, 0, 7, 8}, 2) ==
        CN_OK);
  cn_node *bf = cn_node_create(ctx, "bf", CN_PREC_BFLOAT16, 1, d2);
  CHECK(cn_node_set_values(bf, false, (const double[]){1, -2}, 2) == CN_OK);
  cn_named_node nodes[4] = {{"w", w}, {"ids", ids}, {"words", words}, {"bf", bf}};
  const cn_metadata_entry meta[2] = {{"step", "42"}, {"who", "caf\xc3\xa9"}};
  const char *path = path_in("for_python.safetensors");
  CHECK_MSG(cn_data_save_safetensors(ctx, path, 4, nodes, 2, meta) == CN_OK, "%s",
            cn_ctx_error(ctx));
  CHECK_INT(run_python(check_script, path), 0);

  const char *theirs = path_in("from_python.safetensors");
  CHECK_INT(run_python(write_script, theirs), 0);
  const int64_t d22[2] = {2, 2}, d3[1] = {3};
  cn_named_node want[3] = {
      {"x", cn_node_create(ctx, "x", CN_PREC_SINGLE, 2, d22)},
      {"y", cn_node_create(ctx, "y", CN_PREC_INT64, 1, d3)},
      {"z", cn_node_create(ctx, "z", CN_PREC_UINT16, 0, NULL)},
  };
  int n_meta = -1;
  cn_metadata_entry *got = NULL;
  cn_status st = cn_data_load_safetensors(ctx, theirs, 3, want, &n_meta, &got);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  double x[4] = {0}, y[3] = {0}, z = 0;
  CHECK(cn_node_get_values(want[0].node, false, x, 4) == CN_OK);
  CHECK(cn_node_get_values(want[1].node, false, y, 3) == CN_OK);
  CHECK(cn_node_get_values(want[2].node, false, &z, 1) == CN_OK);
  CHECK(x[0] == 1.5 && x[1] == -2 && x[2] == 3 && x[3] == 4);
  CHECK(y[0] == 1 && y[1] == -2 && y[2] == 3);
  CHECK(z == 65535);
  CHECK_INT(n_meta, 1);
  if (n_meta == 1) CHECK(strcmp(got[0].key, "format") == 0 && strcmp(got[0].value, "pt") == 0);
  /* I8 has no cannl precision: the file is valid, a request for it fails */
  cn_named_node unused = {"unused", cn_node_create(ctx, "u", CN_PREC_BYTE, 1, d2)};
  CHECK(cn_data_load_safetensors(ctx, theirs, 1, &unused, NULL, NULL) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "tensor \"unused\" is I8 [2] in the file");
  cn_ctx_destroy(ctx);
}

/* ---- Refusals ---- */

/* A load of the file fails with status and a message holding each of the needles. */
static void refuses(cn_ctx *ctx, const char *path, int n, const cn_named_node *nodes,
                    cn_status status, const char *needle1, const char *needle2) {
  cn_status st = cn_data_load_safetensors(ctx, path, n, nodes, NULL, NULL);
  CHECK_MSG(st == status, "%s: status %d, expected %d: %s", needle1, (int)st, (int)status,
            cn_ctx_error(ctx));
  CHECK_HAS(cn_ctx_error(ctx), path);
  CHECK_HAS(cn_ctx_error(ctx), needle1);
  if (needle2) CHECK_HAS(cn_ctx_error(ctx), needle2);
}

static void refuses_header(cn_ctx *ctx, const char *header, size_t data_len, const char *needle1,
                           const char *needle2) {
  static unsigned char zeros[64];
  const char *path = path_in("bad.safetensors");
  write_raw(path, header, strlen(header), zeros, data_len);
  refuses(ctx, path, 0, NULL, CN_ERR_INVALID, needle1, needle2);
}

static void test_bad_files(void) {
  cn_ctx *ctx = cn_ctx_create();
  const char *missing = path_in("missing.safetensors");
  refuses(ctx, missing, 0, NULL, CN_ERR_IO, "cannot open", "No such file");
  refuses(ctx, dir, 0, NULL, CN_ERR_IO, "not a regular file", NULL);
  const char *path = path_in("bad.safetensors");
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite("\x10\0\0\0\0", 1, 5, f) == 5);
  if (f) fclose(f);
  refuses(ctx, path, 0, NULL, CN_ERR_INVALID, "byte 0: expected an 8-byte", "has 5 bytes");
  write_raw(path, "{}", 2, NULL, 0);
  f = fopen(path, "r+b");
  CHECK(f && fwrite("\xe8\x03", 1, 2, f) == 2); /* claims 1000 header bytes */
  if (f) fclose(f);
  refuses(ctx, path, 0, NULL, CN_ERR_INVALID, "header length of 1000 bytes", "only 2 bytes");
  write_raw(path, "{}", 2, NULL, 0);
  f = fopen(path, "r+b");
  CHECK(f && fwrite("\0\0\0\0\0\0\0\x80", 1, 8, f) == 8); /* 2^63: beyond any file */
  if (f) fclose(f);
  refuses(ctx, path, 0, NULL, CN_ERR_INVALID, "header length of 9223372036854775808", NULL);

  /* JSON syntax: the position is the file's byte (8 + the header's) */
  refuses_header(ctx, "{\"a\" 1}", 0, "byte 13: expected ':' after a key, found '1'", NULL);
  refuses_header(ctx, "{\"a\":", 0, "byte 13: expected a value, found the end", NULL);
  refuses_header(ctx, "{\"a\":{},}", 0, "byte 16: expected a string key, found '}'", NULL);
  refuses_header(ctx, "{\"a\":1.5}", 0, "byte 14: expected an integer, found a fraction", NULL);
  refuses_header(ctx, "{\"a\":01}", 0, "leading zero", NULL);
  refuses_header(ctx, "{\"a\":99999999999999999999}", 0, "out of the range", NULL);
  /* issue 27: offsets and dims one past int64 (2^63), caught by the JSON reader at the number */
  refuses_header(
      ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,9223372036854775808]}}", 4,
      "byte 58: integer out of the range of int64", NULL);
  refuses_header(
      ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,4]}}", 4,
      "byte 37: integer out of the range of int64", NULL);
  refuses_header(ctx, "{\"a\":true}", 0, "byte 13: expected a value (an object", NULL);
  refuses_header(ctx, "{\"a\":\"x\x01\"}", 0, "control character 0x01", NULL);
  refuses_header(ctx, "{\"\xff\":{}}", 0, "byte 10: invalid UTF-8 byte 0xff", NULL);
  refuses_header(ctx, "{\"\\ud800x\":{}}", 0, "low surrogate", NULL);
  refuses_header(ctx, "{\"\\u0000\":{}}", 0, "\\u0000", NULL);
  refuses_header(ctx, "{\"\\q\":{}}", 0, "unknown escape", NULL);
  refuses_header(ctx, "{\"a\":\"x", 0, "unterminated string", NULL);
  refuses_header(ctx, "{} x", 0, "byte 11: expected the end of the JSON text", NULL);
  refuses_header(ctx, "[1, 2]", 0, "byte 8: expected the header to be an object, found an array",
                 NULL);
  refuses_header(ctx, "{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0,
                 "byte 33: duplicate key \"a\"", NULL);
  char deep[300] = "{\"a\":";
  for (int i = 0; i < 100; i++) strcat(deep, "[");
  refuses_header(ctx, deep, 0, "nesting deeper than 64", NULL);

  /* entries */
  refuses_header(ctx, "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                 "unknown dtype \"F33\" of tensor \"a\"", "byte 22");
  refuses_header(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 20,
                 "tensor \"a\" of dtype F32 and shape [2, 3] needs 24 bytes",
                 "data_offsets [0, 20] span 20");
  refuses_header(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
                 "the tensors cover 4 bytes of data, but the file holds 8", NULL);
  refuses_header(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4,
                 "data_offsets [0, 8] of tensor \"a\" are not a range within the 4 bytes", NULL);
  refuses_header(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                 "non-negative integer in the shape of tensor \"a\", found a negative one", NULL);
  refuses_header(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4,
                 "unknown field \"x\" in the entry of tensor \"a\"", NULL);
  refuses_header(ctx, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
                 "the entry of tensor \"a\" lacks \"shape\"", NULL);
  refuses_header(ctx, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                 "the data_offsets of tensor \"a\" has 1 elements, expected 2", NULL);
  refuses_header(ctx,
                 "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
                 12, "the data of tensor \"b\" [4, 12] overlaps that of tensor \"a\" [0, 8]", NULL);
  refuses_header(ctx,
                 "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
                 12, "bytes 4 to 8 of the data belong to no tensor", NULL);
  refuses_header(ctx,
                 "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],"
                 "\"data_offsets\":[0,4]}}",
                 4, "holds 2^64 bytes or more", NULL);
  refuses_header(ctx, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":1}", 1,
                 "duplicate key \"a\"", NULL);
  refuses_header(ctx, "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                 "a tensor name of 0 bytes", NULL);
  refuses_header(ctx, "{\"__metadata__\":{\"k\":1}}", 0,
                 "expected the metadata value of \"k\" to be a string, found an integer", NULL);
  refuses_header(ctx, "{\"__metadata__\":{\"cannl_crc32\":\"ABCDEF01\"}}", 0,
                 "expected 8 lowercase hex digits", NULL);
  cn_ctx_destroy(ctx);
}

static void test_bad_requests(void) {
  cn_ctx *ctx = cn_ctx_create();
  const int64_t d23[2] = {2, 3}, d32[2] = {3, 2};
  cn_named_node saved[2] = {{"w", make_node(ctx, "w", CN_PREC_SINGLE, 2, d23, 1)},
                            {"b", make_node(ctx, "b", CN_PREC_INT32, 1, d23, 2)}};
  const char *path = path_in("model.safetensors");
  CHECK(cn_data_save_safetensors(ctx, path, 2, saved, 0, NULL) == CN_OK);
  /* every request names a node that holds seed 50: a failed load leaves it so */
  cn_node *good = make_node(ctx, "good", CN_PREC_SINGLE, 2, d23, 50);
  cn_node *other_shape = make_node(ctx, "other_shape", CN_PREC_SINGLE, 2, d32, 51);
  cn_node *other_prec = make_node(ctx, "other_prec", CN_PREC_DOUBLE, 2, d23, 52);
  cn_named_node missing[2] = {{"w", good}, {"nope", other_shape}};
  refuses(ctx, path, 2, missing, CN_ERR_INVALID, "no tensor \"nope\" in the file", NULL);
  cn_named_node shape[2] = {{"w", good}, {"w", other_shape}};
  refuses(ctx, path, 2, shape, CN_ERR_INVALID,
          "tensor \"w\" is F32 [2, 3] in the file, but its node 'other_shape' is F32 [3, 2]", NULL);
  cn_named_node prec[2] = {{"w", good}, {"w", other_prec}};
  refuses(ctx, path, 2, prec, CN_ERR_INVALID,
          "tensor \"w\" is F32 [2, 3] in the file, but its node 'other_prec' is F64 [2, 3] "
          "(precision double)",
          NULL);
  CHECK(holds(good, 50) && holds(other_shape, 51) && holds(other_prec, 52));

  /* one data byte flipped: the CRC catches it, and nothing is written */
  long size = file_size(path);
  FILE *f = fopen(path, "r+b");
  int byte = f && fseek(f, size - 3, SEEK_SET) == 0 ? fgetc(f) : EOF;
  CHECK(byte != EOF && fseek(f, size - 3, SEEK_SET) == 0 && fputc(byte ^ 0x10, f) != EOF);
  if (f) fclose(f);
  cn_named_node one = {"w", good};
  refuses(ctx, path, 1, &one, CN_ERR_INVALID, "the file is corrupted: the CRC-32 of its 32 bytes",
          "cannl_crc32");
  CHECK(holds(good, 50));

  /* saves refused before any file is created */
  const char *fresh = path_in("never.safetensors");
  cn_named_node twice[2] = {{"w", good}, {"w", other_shape}};
  CHECK(cn_data_save_safetensors(ctx, fresh, 2, twice, 0, NULL) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "tensor name \"w\" appears twice (entries 0 and 1)");
  const cn_metadata_entry crc = {"cannl_crc32", "00000000"};
  CHECK(cn_data_save_safetensors(ctx, fresh, 1, &one, 1, &crc) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "\"cannl_crc32\" is reserved");
  const cn_metadata_entry dup[2] = {{"k", "1"}, {"k", "2"}};
  CHECK(cn_data_save_safetensors(ctx, fresh, 1, &one, 2, dup) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "metadata key \"k\" appears twice");
  cn_named_node reserved = {"__metadata__", good};
  CHECK(cn_data_save_safetensors(ctx, fresh, 1, &reserved, 0, NULL) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "the format's metadata key");
  cn_named_node invalid_utf8 = {"w\xc3", good};
  CHECK(cn_data_save_safetensors(ctx, fresh, 1, &invalid_utf8, 0, NULL) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "not valid UTF-8");
  cn_named_node no_node = {"w", NULL};
  CHECK(cn_data_save_safetensors(ctx, fresh, 1, &no_node, 0, NULL) == CN_ERR_INVALID);
  CHECK(cn_data_load_safetensors(ctx, path, 1, &no_node, NULL, NULL) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "request 0 has no node");
  CHECK_INT(file_size(fresh), -1);
  /* a directory in the way: refused before any temporary file is made */
  CHECK(mkdir(path_in("a_dir"), 0700) == 0);
  CHECK(cn_data_save_safetensors(ctx, path_in("a_dir"), 1, &one, 0, NULL) == CN_ERR_IO);
  CHECK_HAS(cn_ctx_error(ctx), "a_dir: is a directory, not a regular file: a save never replaces");
  CHECK_INT(count_files(".tmp"), 0);
  CHECK(rmdir(path_in("a_dir")) == 0);
  cn_ctx_destroy(ctx);
}

/* ---- Interrupted saves ---- */

static void test_interrupted_save(void) {
  cn_ctx *ctx = cn_ctx_create();
  const int64_t dims[1] = {1000};
  cn_named_node a = {"t", make_node(ctx, "a", CN_PREC_DOUBLE, 1, dims, 60)};
  cn_named_node b = {"t", make_node(ctx, "b", CN_PREC_DOUBLE, 1, dims, 61)};
  const char *path = path_in("ckpt.safetensors");
  CHECK(cn_data_save_safetensors(ctx, path, 1, &a, 0, NULL) == CN_OK);
  cn_named_node back = {"t", cn_node_create(ctx, "back", CN_PREC_DOUBLE, 1, dims)};
  /* fail in the length, the header, the data, and at or in the CRC written last (B's file has
   * A's size: every byte is written once, then the CRC's 8 again) */
  long size = file_size(path);
  const long budgets[] = {0, 5, 8, 40, 200, 4000, size - 1, size, size + 4};
  for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
    cn_data_fail_writes_after(budgets[i]);
    cn_status st = cn_data_save_safetensors(ctx, path, 1, &b, 0, NULL);
    cn_data_fail_writes_after(-1);
    CHECK_MSG(st == CN_ERR_IO, "budget %ld: status %d", budgets[i], (int)st);
    CHECK_HAS(cn_ctx_error(ctx), "cannot write");
    CHECK_HAS(cn_ctx_error(ctx), "Input/output error");
    CHECK_INT(count_files(".tmp"), 0);
    CHECK(cn_data_load_safetensors(ctx, path, 1, &back, NULL, NULL) == CN_OK);
    CHECK_MSG(holds(back.node, 60), "budget %ld", budgets[i]);
  }
  /* with enough budget left the save succeeds */
  cn_data_fail_writes_after(size + 8);
  CHECK(cn_data_save_safetensors(ctx, path, 1, &b, 0, NULL) == CN_OK);
  cn_data_fail_writes_after(-1);
  CHECK(cn_data_load_safetensors(ctx, path, 1, &back, NULL, NULL) == CN_OK);
  CHECK(holds(back.node, 61));
  /* a directory that does not exist */
  CHECK(cn_data_save_safetensors(ctx, path_in("no/such/dir.safetensors"), 1, &b, 0, NULL) ==
        CN_ERR_IO);
  CHECK_HAS(cn_ctx_error(ctx), "cannot create");
  CHECK_HAS(cn_ctx_error(ctx), "No such file or directory");
  CHECK_INT(count_files("ckpt"), 1);
  cn_ctx_destroy(ctx);
}

/* ---- What a save replaces ---- */

/* A save of node to path refused with CN_ERR_IO, naming path and saying why; no temporary file. */
static void refuses_target(cn_ctx *ctx, const char *path, const cn_named_node *node,
                           const char *why) {
  CHECK(cn_data_save_safetensors(ctx, path, 1, node, 0, NULL) == CN_ERR_IO);
  CHECK_HAS(cn_ctx_error(ctx), path);
  CHECK_HAS(cn_ctx_error(ctx), why);
  CHECK_INT(count_files(".tmp"), 0);
}

/* A symbolic link is written through: the file it resolves to gets the new data and the link
 * stays. A FIFO, a device node, a link to a FIFO, a dangling link and a link the kernel would not
 * follow (another user's, in a sticky world-writable directory) are refused without blocking
 * (an alarm ends the test otherwise) and stay as they were. */
static void test_special_targets(void) {
  cn_ctx *ctx = cn_ctx_create();
  const int64_t dims[1] = {10};
  cn_named_node a = {"t", make_node(ctx, "a", CN_PREC_SINGLE, 1, dims, 70)};
  cn_named_node b = {"t", make_node(ctx, "b", CN_PREC_SINGLE, 1, dims, 71)};
  cn_named_node back = {"t", cn_node_create(ctx, "back", CN_PREC_SINGLE, 1, dims)};
  char real[256], link[256], fifo[256], dev[256], shared[256], planted[256];
  snprintf(real, sizeof real, "%s", path_in("real.safetensors"));
  snprintf(link, sizeof link, "%s", path_in("link.safetensors"));
  snprintf(fifo, sizeof fifo, "%s", path_in("fifo.safetensors"));
  snprintf(dev, sizeof dev, "%s", path_in("null"));
  snprintf(shared, sizeof shared, "%s", path_in("shared"));
  snprintf(planted, sizeof planted, "%s", path_in("shared/planted.safetensors"));
  CHECK(cn_data_save_safetensors(ctx, real, 1, &a, 0, NULL) == CN_OK);
  CHECK(symlink("real.safetensors", link) == 0);
  CHECK(cn_data_save_safetensors(ctx, link, 1, &b, 0, NULL) == CN_OK);
  struct stat st;
  char text[64] = "";
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK(readlink(link, text, sizeof text - 1) == 16);
  CHECK_STR(text, "real.safetensors");
  CHECK(cn_data_load_safetensors(ctx, real, 1, &back, NULL, NULL) == CN_OK);
  CHECK(holds(back.node, 71));
  CHECK_INT(count_files(".tmp"), 0);
  CHECK(unlink(link) == 0);

  alarm(60);
  CHECK(mkfifo(fifo, 0600) == 0);
  refuses_target(ctx, fifo, &b, ": is a FIFO, not a regular file: a save never replaces it");
  CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  CHECK(symlink("fifo.safetensors", link) == 0);
  refuses_target(ctx, link, &b, "fifo.safetensors', which is a FIFO, not a regular file");
  CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  CHECK(unlink(link) == 0 && unlink(fifo) == 0);
  alarm(0);

  /* A device node (the null device's numbers, made here: a failing check must not cost the
   * machine its /dev/null), through save_npy too. */
  if (mknod(dev, S_IFCHR | 0600, makedev(1, 3)) == 0) {
    refuses_target(ctx, dev, &b, "null: is a character device, not a regular file");
    cn_array cells = {.prec = CN_PREC_INT32, .rank = 1, .dims = {1}, .cells = (int32_t[]){7}};
    CHECK(cn_data_save_npy(ctx, dev, &cells) == CN_ERR_IO);
    CHECK_HAS(cn_ctx_error(ctx), "is a character device");
    CHECK(lstat(dev, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3));
    CHECK(unlink(dev) == 0);
  } else {
    fprintf(stderr, "test_safetensors: mknod: %s: no device-node check\n", strerror(errno));
  }

  CHECK(symlink("missing.safetensors", link) == 0);
  refuses_target(ctx, link, &b,
                 "is a symbolic link that cannot be resolved: it points to a missing file");
  CHECK(access(path_in("missing.safetensors"), F_OK) != 0);
  CHECK(unlink(link) == 0);

  /* Another user's link in a sticky world-writable directory (a /tmp of our own). */
  CHECK(mkdir(shared, 0700) == 0 && chmod(shared, 01777) == 0);
  CHECK(symlink(real, planted) == 0);
  if (lchown(planted, 65534, 65534) == 0) {
    refuses_target(ctx, planted, &a,
                   "is a symbolic link in a sticky world-writable directory, owned by another "
                   "user: not followed");
    CHECK(cn_data_load_safetensors(ctx, real, 1, &back, NULL, NULL) == CN_OK);
    CHECK(holds(back.node, 71));
  } else {
    fprintf(stderr, "test_safetensors: lchown: %s: no protected-link check\n", strerror(errno));
  }
  CHECK(unlink(planted) == 0 && rmdir(shared) == 0 && unlink(real) == 0);
  cn_ctx_destroy(ctx);
}

/* The name of the one entry of the test directory starting with prefix, in out. */
static bool find_entry(const char *prefix, char *out, size_t size) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
      n += snprintf(out, size, "%s", e->d_name) > 0;
  if (d) closedir(d);
  CHECK_INT(n, 1);
  return n == 1;
}

/* A save killed midway (a child that exits with its writer open) leaves its temporary file; the
 * next save of the same target removes it, and leaves alone a live writer's (this process's, and
 * pid 1's), another host's, another target's and a name of another form. */
static void test_stale_temporaries(void) {
  cn_ctx *ctx = cn_ctx_create();
  const int64_t dims[1] = {100};
  cn_named_node a = {"t", make_node(ctx, "a", CN_PREC_DOUBLE, 1, dims, 80)};
  cn_named_node back = {"t", cn_node_create(ctx, "back", CN_PREC_DOUBLE, 1, dims)};
  char path[256];
  snprintf(path, sizeof path, "%s", path_in("killed.safetensors"));
  fflush(NULL);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    cn_data_writer w;
    _exit(cn_data_writer_open(ctx, path, &w) == CN_OK &&
                  cn_data_write(ctx, &w, "partial", 7) == CN_OK
              ? 0
              : 1);
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char killed[256], host[128] = "";
  if (!find_entry("killed.safetensors.tmp.", killed, sizeof killed)) return;
  /* TARGET.tmp.HOST.PID.K */
  const char *h = killed + strlen("killed.safetensors.tmp.");
  snprintf(host, sizeof host, "%.*s", (int)strcspn(h, "."), h);
  char kept[4][256];
  snprintf(kept[0], sizeof kept[0], "killed.safetensors.tmp.%s.1.0", host);
  snprintf(kept[1], sizeof kept[1], "killed.safetensors.tmp.other-host.%ld.0", (long)child);
  snprintf(kept[2], sizeof kept[2], "other.safetensors.tmp.%s.%ld.0", host, (long)child);
  snprintf(kept[3], sizeof kept[3], "killed.safetensors.tmp.%s.%ld.x", host, (long)child);
  for (int k = 0; k < 4; k++) {
    FILE *f = fopen(path_in(kept[k]), "w");
    CHECK(f != NULL);
    if (f) fclose(f);
  }
  CHECK_INT(count_files(".tmp."), 5);
  CHECK(cn_data_save_safetensors(ctx, path, 1, &a, 0, NULL) == CN_OK);
  CHECK(access(path_in(killed), F_OK) != 0);
  /* A writer of this process, open during a save of the same target, keeps its file. */
  cn_data_writer live;
  CHECK(cn_data_writer_open(ctx, path, &live) == CN_OK);
  CHECK(cn_data_save_safetensors(ctx, path, 1, &a, 0, NULL) == CN_OK);
  for (int k = 0; k < 4; k++) CHECK_MSG(access(path_in(kept[k]), F_OK) == 0, "%s", kept[k]);
  CHECK(access(live.tmp_path, F_OK) == 0);
  cn_data_writer_abort(&live);
  for (int k = 0; k < 4; k++) CHECK(unlink(path_in(kept[k])) == 0);
  CHECK_INT(count_files(".tmp"), 0);
  CHECK(cn_data_load_safetensors(ctx, path, 1, &back, NULL, NULL) == CN_OK);
  CHECK(holds(back.node, 80));
  cn_ctx_destroy(ctx);
}

/* ---- Allocation failures ---- */

static void test_out_of_memory(void) {
  const int64_t dims[2] = {4, 5};
  const cn_metadata_entry meta[2] = {{"a", "1"}, {"b", "2"}};
  const char *path = path_in("oom.safetensors");
  bool saved = false, loaded = false;
  for (long k = 1; k < 200 && !(saved && loaded); k++) {
    cn_ctx *ctx = cn_ctx_create();
    cn_named_node nodes[2] = {{"x", make_node(ctx, "x", CN_PREC_SINGLE, 2, dims, 70)},
                              {"y", make_node(ctx, "y", CN_PREC_BYTE, 2, dims, 71)}};
    ctx->fail_alloc_countdown = k;
    cn_status st = cn_data_save_safetensors(ctx, path, 2, nodes, 2, meta);
    ctx->fail_alloc_countdown = 0;
    CHECK_MSG(st == CN_OK || st == CN_ERR_NOMEM, "save, allocation %ld: %s", k, cn_ctx_error(ctx));
    if (st == CN_OK) saved = true;
    if (saved) {
      cn_named_node into[2] = {{"x", make_node(ctx, "x2", CN_PREC_SINGLE, 2, dims, 80)},
                               {"y", make_node(ctx, "y2", CN_PREC_BYTE, 2, dims, 81)}};
      int n_meta = -1;
      cn_metadata_entry *got = NULL;
      ctx->fail_alloc_countdown = k;
      st = cn_data_load_safetensors(ctx, path, 2, into, &n_meta, &got);
      ctx->fail_alloc_countdown = 0;
      CHECK_MSG(st == CN_OK || st == CN_ERR_NOMEM, "load, allocation %ld: %s", k,
                cn_ctx_error(ctx));
      if (st == CN_OK) {
        loaded = true;
        CHECK(holds(into[0].node, 70) && holds(into[1].node, 71) && n_meta == 2);
      } else {
        CHECK(holds(into[0].node, 80) && holds(into[1].node, 81) && n_meta == -1);
      }
    }
    cn_ctx_destroy(ctx);
  }
  CHECK(saved && loaded);
}

/* ---- The JSON reader itself ---- */

static void test_json(void) {
  cn_ctx *ctx = cn_ctx_create();
  const char *text = " { \"k\\u00e9\\n\" : [ -9223372036854775808, 0, \"\\ud83d\\ude00\\/\" ],"
                     " \"o\": {} } ";
  cn_json *v = cn_json_parse(ctx, text, strlen(text), "text", 0);
  CHECK_MSG(v != NULL, "%s", cn_ctx_error(ctx));
  if (v) {
    CHECK(v->kind == CN_JSON_OBJECT && v->count == 2 && v->offset == 1);
    CHECK_STR(v->members[0].key, "k\xc3\xa9\n");
    const cn_json *a = cn_json_get(v, "k\xc3\xa9\n");
    CHECK(a && a->kind == CN_JSON_ARRAY && a->count == 3);
    if (a && a->count == 3) {
      CHECK(a->members[0].value->integer == INT64_MIN && a->members[1].value->integer == 0);
      CHECK_STR(a->members[2].value->string, "\xf0\x9f\x98\x80/");
    }
    const cn_json *o = cn_json_get(v, "o");
    CHECK(o && o->kind == CN_JSON_OBJECT && o->count == 0);
    CHECK(cn_json_get(v, "absent") == NULL);
  }
  /* a text that is not NUL-terminated is read within its length */
  CHECK(cn_json_parse(ctx, "[1]]", 3, "text", 100) != NULL);
  CHECK(cn_json_parse(ctx, "[1]]", 4, "text", 100) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "text: at byte 103: expected the end of the JSON text");
  CHECK(cn_json_parse(ctx, "", 0, "text", 0) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "expected a value, found the end of the text");
  /* nesting at the limit is accepted, one more level refused */
  char deep[2 * CN_JSON_MAX_DEPTH + 3];
  memset(deep, '[', CN_JSON_MAX_DEPTH);
  memset(deep + CN_JSON_MAX_DEPTH, ']', CN_JSON_MAX_DEPTH);
  CHECK(cn_json_parse(ctx, deep, 2 * CN_JSON_MAX_DEPTH, "text", 0) != NULL);
  memset(deep, '[', CN_JSON_MAX_DEPTH + 1);
  memset(deep + CN_JSON_MAX_DEPTH + 1, ']', CN_JSON_MAX_DEPTH + 1);
  CHECK(cn_json_parse(ctx, deep, 2 * CN_JSON_MAX_DEPTH + 2, "text", 0) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "byte 64: nesting deeper than 64");
  cn_sbuf sb = {0};
  cn_sbuf_json_string(&sb, "a\"b\\c\x01\xc3\xa9");
  CHECK(!sb.failed && sb.len == 17 && memcmp(sb.data, "\"a\\\"b\\\\c\\u0001\xc3\xa9\"", 17) == 0);
  cn_sbuf_free(&sb);
  size_t bad = 0;
  CHECK(cn_json_utf8_valid("ok\xe2\x82\xac", 5, &bad));
  CHECK(!cn_json_utf8_valid("ok\xe0\x80\x80", 5, &bad) && bad == 2);    /* overlong */
  CHECK(!cn_json_utf8_valid("\xed\xa0\x80", 3, &bad) && bad == 0);      /* a surrogate */
  CHECK(!cn_json_utf8_valid("x\xf4\x90\x80\x80", 5, &bad) && bad == 1); /* past U+10FFFF */
  CHECK(!cn_json_utf8_valid("\xe2\x82", 2, &bad) && bad == 0);          /* cut short */
  cn_ctx_destroy(ctx);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cannl-safetensors-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_every_precision();
  test_padded_rank0_empty();
  test_python();
  test_bad_files();
  test_bad_requests();
  test_interrupted_save();
  test_special_targets();
  test_stale_temporaries();
  test_out_of_memory();
  test_json();
  remove_dir();
  CHECK_DONE();
}
