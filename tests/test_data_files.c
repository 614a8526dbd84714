/* Data files (src/data): IDX and NumPy .npy. IDX round trips for every type, plain, gzip and
 * multi-member gzip, written by a writer of this test; the Fashion-MNIST files when installed
 * (dims, label range and histogram, the pixel sum of the first image, computed with Python's
 * gzip module when this test was written); .npy save -> load for every savable precision, files
 * written by NumPy (every dtype, both byte orders, versions 1.0, 2.0 and 3.0, 0-d and empty) and
 * NumPy reading what cannl saved (skipped with a message when /usr/bin/python3 lacks numpy);
 * malformed files of both formats, each with its status and a message naming the file, the byte
 * offset and what was expected; the allocation-failure paths. Files live in a mkdtemp directory
 * removed at the end. */
#include "check.h"
#include "limit_check.h"

#include "core/core.h"
#include "data/data.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char dir[64];

static const char *path_of(const char *name) {
  static char buf[4][sizeof dir + 1 + 256]; /* a directory entry's name has at most 255 bytes */
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

static void write_bytes(const char *path, const void *bytes, size_t len) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(bytes, 1, len, f) == len);
  CHECK(fclose(f) == 0);
}

/* One gzip member per call; mode "ab" appends another member. */
static void write_gzip(const char *path, const char *mode, const void *bytes, size_t len) {
  gzFile f = gzopen(path, mode);
  CHECK(f != NULL);
  if (!f) return;
  CHECK(gzwrite(f, bytes, (unsigned)len) == (int)len);
  CHECK(gzclose(f) == Z_OK);
}

/* ---- IDX ---- */

/* An IDX file image: magic, big-endian dims, then n cells of width bytes given in host order,
 * stored big-endian. */
static size_t idx_image(unsigned char *out, int type, int rank, const uint32_t *dims,
                        const void *cells, size_t n, size_t width) {
  size_t len = 0;
  out[len++] = 0;
  out[len++] = 0;
  out[len++] = (unsigned char)type;
  out[len++] = (unsigned char)rank;
  for (int k = 0; k < rank; k++)
    for (int b = 3; b >= 0; b--) out[len++] = (unsigned char)(dims[k] >> (8 * b));
  for (size_t i = 0; i < n; i++) {
    uint64_t v = 0;
    if (width == 1) v = ((const uint8_t *)cells)[i];
    if (width == 2) v = ((const uint16_t *)cells)[i];
    if (width == 4) v = ((const uint32_t *)cells)[i];
    if (width == 8) v = ((const uint64_t *)cells)[i];
    for (size_t b = width; b-- > 0;) out[len++] = (unsigned char)(v >> (8 * b));
  }
  return len;
}

static void check_idx_loads(cn_ctx *ctx, const char *path, cn_prec prec, int rank,
                            const uint32_t *dims, const void *expected, size_t n) {
  cn_array a;
  cn_status s = cn_data_load_idx(ctx, path, &a);
  CHECK_MSG(s == CN_OK, "%s: %s", path, cn_ctx_error(ctx));
  if (s != CN_OK) return;
  CHECK_INT(a.prec, prec);
  CHECK_INT(a.rank, rank);
  for (int k = 0; k < rank; k++) CHECK_INT(a.dims[k], dims[k]);
  CHECK_INT(cn_array_numel(&a), n);
  CHECK_MSG(memcmp(a.cells, expected, n * cn_prec_bytes(prec)) == 0, "%s: cells differ", path);
  cn_array_free(&a);
  CHECK(a.cells == NULL);
}

static void test_idx_round_trips(void) {
  cn_ctx *ctx = cn_ctx_create();
  const uint32_t dims[3] = {2, 1, 3};
  const uint8_t u8[6] = {0, 1, 127, 128, 254, 255};
  const int8_t i8[6] = {-128, -1, 0, 1, 100, 127};
  const int16_t i16[6] = {-32768, -1, 0, 1, 258, 32767};
  const int32_t i32[6] = {INT32_MIN, -1, 0, 1, 0x01020304, INT32_MAX};
  const float f32[6] = {0.0f, -1.5f, 3.25e-3f, INFINITY, 1e30f, -0.0f};
  const double f64[6] = {0.0, -1.5, 1e-300, -INFINITY, 1e300, 0.1};
  int32_t i8_wide[6], i16_wide[6];
  for (int i = 0; i < 6; i++) i8_wide[i] = i8[i], i16_wide[i] = i16[i];
  const struct {
    int type;
    const void *cells, *expected;
    size_t width;
    cn_prec prec;
  } cases[] = {
      {0x08, u8, u8, 1, CN_PREC_BYTE},         {0x09, i8, i8_wide, 1, CN_PREC_INT32},
      {0x0B, i16, i16_wide, 2, CN_PREC_INT32}, {0x0C, i32, i32, 4, CN_PREC_INT32},
      {0x0D, f32, f32, 4, CN_PREC_SINGLE},     {0x0E, f64, f64, 8, CN_PREC_DOUBLE},
  };
  unsigned char image[256];
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    for (int rank = 1; rank <= 3; rank += 2) {
      uint32_t flat[1] = {6};
      const uint32_t *d = rank == 1 ? flat : dims;
      size_t len = idx_image(image, cases[c].type, rank, d, cases[c].cells, 6, cases[c].width);
      const char *plain = path_of("plain.idx"), *gz = path_of("data.idx.gz"),
                 *odd = path_of("gzip-without-gz-suffix");
      write_bytes(plain, image, len);
      write_gzip(gz, "wb", image, len);
      write_gzip(odd, "wb", image, len);
      check_idx_loads(ctx, plain, cases[c].prec, rank, d, cases[c].expected, 6);
      check_idx_loads(ctx, gz, cases[c].prec, rank, d, cases[c].expected, 6);
      check_idx_loads(ctx, odd, cases[c].prec, rank, d, cases[c].expected, 6);
      /* Two members (the header, then the cells), as a concatenation of gzip files. */
      size_t split = 4 + 4 * (size_t)rank;
      write_gzip(gz, "wb", image, split);
      write_gzip(gz, "ab", image + split, len - split);
      check_idx_loads(ctx, gz, cases[c].prec, rank, d, cases[c].expected, 6);
    }
  }
  /* An empty array (a zero dim) loads with no cells. */
  const uint32_t empty_dims[2] = {0, 28};
  size_t len = idx_image(image, 0x08, 2, empty_dims, NULL, 0, 1);
  write_bytes(path_of("empty.idx"), image, len);
  cn_array a;
  CHECK(cn_data_load_idx(ctx, path_of("empty.idx"), &a) == CN_OK);
  CHECK(a.cells == NULL && a.rank == 2 && a.dims[0] == 0 && a.dims[1] == 28);
  CHECK_INT(cn_array_numel(&a), 0);
  cn_array_free(&a);
  cn_ctx_destroy(ctx);
}

/* Fashion-MNIST (Debian's dataset-fashion-mnist), when installed. */
static void test_fashion_mnist(void) {
  static const char *root = "/usr/share/datasets/fashion-mnist";
  static const struct {
    const char *set;
    int64_t count, first_image_sum; /* sums from Python's gzip module over bytes 16 .. 16+783 */
  } sets[] = {{"train", 60000, 76247}, {"t10k", 10000, 33456}};
  char images[256], labels[256];
  snprintf(images, sizeof images, "%s/train-images-idx3-ubyte.gz", root);
  if (access(images, R_OK) != 0) {
    printf("skipped: Fashion-MNIST is not installed in %s (dataset-fashion-mnist)\n", root);
    return;
  }
  cn_ctx *ctx = cn_ctx_create();
  for (int s = 0; s < 2; s++) {
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", root, sets[s].set);
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", root, sets[s].set);
    cn_array x, y;
    cn_status sx = cn_data_load_idx(ctx, images, &x);
    CHECK_MSG(sx == CN_OK, "%s", cn_ctx_error(ctx));
    cn_status sy = cn_data_load_idx(ctx, labels, &y);
    CHECK_MSG(sy == CN_OK, "%s", cn_ctx_error(ctx));
    if (sx == CN_OK) {
      CHECK_INT(x.prec, CN_PREC_BYTE);
      CHECK_INT(x.rank, 3);
      CHECK_INT(x.dims[0], sets[s].count);
      CHECK_INT(x.dims[1], 28);
      CHECK_INT(x.dims[2], 28);
      int64_t sum = 0;
      for (int i = 0; i < 784; i++) sum += ((const uint8_t *)x.cells)[i];
      CHECK_INT(sum, sets[s].first_image_sum);
    }
    if (sy == CN_OK) {
      CHECK_INT(y.prec, CN_PREC_BYTE);
      CHECK_INT(y.rank, 1);
      CHECK_INT(y.dims[0], sets[s].count);
      int64_t hist[256] = {0};
      for (int64_t i = 0; i < y.dims[0]; i++) hist[((const uint8_t *)y.cells)[i]]++;
      for (int c = 0; c < 10; c++) CHECK_INT(hist[c], sets[s].count / 10);
      int64_t beyond = 0;
      for (int c = 10; c < 256; c++) beyond += hist[c];
      CHECK_INT(beyond, 0);
    }
    cn_array_free(&x);
    cn_array_free(&y);
  }
  cn_ctx_destroy(ctx);
}

/* Loads path expecting the failure status and the message fragments (NULL-terminated). */
static void expect_failure(cn_ctx *ctx, bool npy, const char *path, cn_status status, ...) {
  cn_array a;
  memset(&a, 0xab, sizeof a);
  cn_status s = npy ? cn_data_load_npy(ctx, path, &a) : cn_data_load_idx(ctx, path, &a);
  CHECK_MSG(s == status, "%s: status %d, expected %d (%s)", path, (int)s, (int)status,
            cn_ctx_error(ctx));
  CHECK_HAS(cn_ctx_error(ctx), path);
  va_list ap;
  va_start(ap, status);
  for (const char *frag; (frag = va_arg(ap, const char *));) CHECK_HAS(cn_ctx_error(ctx), frag);
  va_end(ap);
  CHECK(a.cells == NULL && a.rank == 0); /* nothing left in *out */
  if (s == CN_OK) cn_array_free(&a);
}

static void test_idx_malformed(void) {
  cn_ctx *ctx = cn_ctx_create();
  unsigned char image[256];
  const uint8_t cells[6] = {1, 2, 3, 4, 5, 6};
  const uint32_t dims[2] = {2, 3};
  size_t len = idx_image(image, 0x08, 2, dims, cells, 6, 1); /* 12 bytes of header + 6 */
  const char *p = path_of("bad.idx");

  write_bytes(p, image, 3);
  expect_failure(ctx, false, p, CN_ERR_INVALID,
                 "at byte 0:", "expected 4 bytes of the IDX magic number", "found 3", NULL);
  write_bytes(p, image, 8);
  expect_failure(ctx, false, p, CN_ERR_INVALID, "at byte 4:", "expected 8 bytes of dimensions",
                 "found 4", NULL);
  write_bytes(p, image, len - 2);
  expect_failure(ctx, false, p, CN_ERR_INVALID, "at byte 12:", "expected 6 bytes of payload",
                 "found 4 (the file ends at byte 16)", NULL);
  image[len] = 7;
  write_bytes(p, image, len + 1);
  expect_failure(ctx, false, p, CN_ERR_INVALID, "at byte 18:", "expected the end of the file",
                 "found trailing bytes (0x07", NULL);

  unsigned char bad[64 + 4096];
  memcpy(bad, image, len);
  bad[0] = 1;
  write_bytes(p, bad, len);
  expect_failure(ctx, false, p, CN_ERR_INVALID, "at byte 0:", "expected the IDX magic number",
                 "found 01 00 08 02", NULL);
  memcpy(bad, image, len);
  bad[2] = 0x0A;
  write_bytes(p, bad, len);
  expect_failure(ctx, false, p, CN_ERR_INVALID, "at byte 2:", "expected an IDX type code",
                 "found 0a", NULL);
  bad[2] = 0x08;
  bad[3] = 0;
  write_bytes(p, bad, len);
  expect_failure(ctx, false, p, CN_ERR_INVALID, "at byte 3:", "expected a rank from 1 to 16",
                 "found 0", NULL);
  bad[3] = 17;
  write_bytes(p, bad, len);
  expect_failure(ctx, false, p, CN_ERR_UNSUPPORTED, "at byte 3:", "found 17", NULL);

  /* 16 dims of 2^32 - 1: the product overflows. */
  uint32_t huge[16];
  for (int k = 0; k < 16; k++) huge[k] = UINT32_MAX;
  len = idx_image(bad, 0x08, 16, huge, NULL, 0, 1);
  write_bytes(p, bad, len);
  expect_failure(ctx, false, p, CN_ERR_INVALID, "at byte 4:", "product overflows", NULL);
  /* 10^12 cells: beyond the limit, refused before anything is allocated. */
  const uint32_t tera[2] = {1000000, 1000000};
  len = idx_image(bad, 0x0D, 2, tera, NULL, 0, 4);
  write_bytes(p, bad, len);
  expect_failure(ctx, false, p, CN_ERR_UNSUPPORTED, "at byte 4:",
                 "expected at most 2^31 cells, found dimensions claiming 1000000000000", NULL);
  /* 2^31 doubles (16 GiB) claimed by a 12-byte file, plain and gzip: checked against the file. */
  const uint32_t big[2] = {1u << 16, 1u << 15};
  len = idx_image(bad, 0x0E, 2, big, NULL, 0, 8);
  write_bytes(p, bad, len);
  expect_failure(ctx, false, p, CN_ERR_INVALID, "at byte 12:",
                 "expected 17179869184 bytes of payload (2147483648 f64 cells), found 0", NULL);
  /* In gzip, the claim is checked against what the compressed bytes left can hold at most
   * (here 4 KiB of zeros follow the header), or against the data when its end was seen. */
  const char *gz = path_of("bad.idx.gz");
  memset(bad + len, 0, 4096);
  write_gzip(gz, "wb", bad, len + 4096);
  expect_failure(ctx, false, gz, CN_ERR_INVALID,
                 "at byte 12 of the decompressed data:", "expected 17179869184 bytes of payload",
                 "found compressed data for at most", NULL);
  write_gzip(gz, "wb", bad, len);
  expect_failure(ctx, false, gz, CN_ERR_INVALID, "at byte 12 of the decompressed data:",
                 "found 0 (the decompressed data ends at byte 12)", NULL);

  /* gzip layer: a magic and junk; a stream cut short; garbage after the stream. */
  const unsigned char junk[] = {0x1f, 0x8b, 'n', 'o', 't', ' ', 'g', 'z', 'i', 'p', '!', '!'};
  write_bytes(gz, junk, sizeof junk);
  expect_failure(ctx, false, gz, CN_ERR_INVALID, "of the compressed file",
                 "expected gzip-compressed data, found corrupt data", NULL);
  len = idx_image(image, 0x08, 2, dims, cells, 6, 1);
  write_gzip(gz, "wb", image, len);
  FILE *f = fopen(gz, "rb");
  unsigned char zbytes[256];
  size_t zlen = f ? fread(zbytes, 1, sizeof zbytes, f) : 0;
  if (f) fclose(f);
  CHECK(zlen > 20 && zlen < sizeof zbytes - 4);
  write_bytes(gz, zbytes, zlen - 6);
  expect_failure(ctx, false, gz, CN_ERR_INVALID, "expected more gzip data",
                 "(truncated gzip stream)", NULL);
  memcpy(zbytes + zlen, "junk", 4);
  write_bytes(gz, zbytes, zlen + 4);
  char where[64];
  snprintf(where, sizeof where, "at byte %zu of the compressed file", zlen);
  expect_failure(ctx, false, gz, CN_ERR_INVALID, where,
                 "expected another gzip member or the end of the file, found 4 trailing bytes",
                 NULL);
  /* A corrupted payload byte: the gzip CRC catches it. */
  zbytes[zlen - 9] ^= 0x55;
  write_bytes(gz, zbytes, zlen);
  cn_array a;
  CHECK(cn_data_load_idx(ctx, gz, &a) != CN_OK);
  CHECK(a.cells == NULL);

  expect_failure(ctx, false, path_of("missing.idx"), CN_ERR_IO, "cannot open", NULL);
  expect_failure(ctx, false, dir, CN_ERR_IO, "not a regular file", NULL);
  cn_ctx_destroy(ctx);
}

/* ---- .npy ---- */

static bool have_numpy(void) {
  static int have = -1;
  if (have < 0) have = system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return have;
}

/* Runs a Python program with the temporary directory as argv[1]; true when it exits 0. */
static bool python(const char *program) {
  const char *script = path_of("script.py");
  FILE *f = fopen(script, "w");
  if (!f) return false;
  fputs(program, f);
  fclose(f);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s", script, dir);
  return system(cmd) == 0;
}

/* Six values of each kind, all exact in every precision of that kind. */
static const double signed_values[6] = {0, 1, -2, 3, 100, -128};
static const double unsigned_values[6] = {0, 1, 2, 3, 100, 255};
static const double float_values[6] = {0, 1, -2, 3.5, 100, -0.125};
static const double bool_values[6] = {0, 1, 1, 0, 1, 0};

static const struct {
  cn_prec prec;
  const char *descr; /* NumPy's, little-endian */
  const double *values;
} savable[] = {
    {CN_PREC_BYTE, "|u1", unsigned_values}, {CN_PREC_UINT16, "<u2", unsigned_values},
    {CN_PREC_INT32, "<i4", signed_values},  {CN_PREC_UINT32, "<u4", unsigned_values},
    {CN_PREC_INT64, "<i8", signed_values},  {CN_PREC_UINT64, "<u8", unsigned_values},
    {CN_PREC_HALF, "<f2", float_values},    {CN_PREC_SINGLE, "<f4", float_values},
    {CN_PREC_DOUBLE, "<f8", float_values},
};
#define N_SAVABLE (sizeof savable / sizeof *savable)

static void fill(cn_array *a, cn_prec prec, const double *values) {
  memset(a, 0, sizeof *a);
  a->prec = prec;
  a->rank = 2;
  a->dims[0] = 2;
  a->dims[1] = 3;
  a->cells = malloc(6 * cn_prec_bytes(prec));
  for (int i = 0; i < 6 && a->cells; i++)
    cn_prec_cell_from_double(prec, values[i], (char *)a->cells + i * cn_prec_bytes(prec));
}

static void check_values(const char *what, const cn_array *a, cn_prec prec, const double *values) {
  CHECK_MSG(a->prec == prec, "%s: precision %s, expected %s", what, cn_prec_name(a->prec),
            cn_prec_name(prec));
  CHECK_MSG(a->rank == 2 && a->dims[0] == 2 && a->dims[1] == 3, "%s: shape", what);
  for (int i = 0; i < 6 && a->prec == prec && a->cells; i++) {
    double v = cn_prec_cell_to_double(prec, (const char *)a->cells + i * cn_prec_bytes(prec));
    CHECK_MSG(v == values[i], "%s: cell %d = %g, expected %g", what, i, v, values[i]);
  }
}

static void test_npy_round_trips(void) {
  cn_ctx *ctx = cn_ctx_create();
  for (size_t k = 0; k < N_SAVABLE; k++) {
    cn_array a, b;
    fill(&a, savable[k].prec, savable[k].values);
    char name[64];
    snprintf(name, sizeof name, "c_%s.npy", cn_prec_name(savable[k].prec));
    const char *p = path_of(name);
    CHECK_MSG(cn_data_save_npy(ctx, p, &a) == CN_OK, "%s", cn_ctx_error(ctx));
    CHECK_MSG(cn_data_load_npy(ctx, p, &b) == CN_OK, "%s", cn_ctx_error(ctx));
    check_values(name, &b, savable[k].prec, savable[k].values);
    CHECK(b.cells && memcmp(a.cells, b.cells, 6 * cn_prec_bytes(a.prec)) == 0);
    /* The cells start 64-byte aligned, as NumPy writes them. */
    struct stat st;
    CHECK(stat(p, &st) == 0 && (size_t)st.st_size == 128 + 6 * cn_prec_bytes(a.prec));
    cn_array_free(&a);
    cn_array_free(&b);
  }
  /* 0-d: one cell; empty: none. */
  double two_and_a_half = 2.5;
  cn_array scalar = {CN_PREC_DOUBLE, 0, {0}, &two_and_a_half}, back;
  CHECK_INT(cn_array_numel(&scalar), 1);
  CHECK(cn_data_save_npy(ctx, path_of("c_scalar.npy"), &scalar) == CN_OK);
  CHECK(cn_data_load_npy(ctx, path_of("c_scalar.npy"), &back) == CN_OK);
  CHECK(back.rank == 0 && back.prec == CN_PREC_DOUBLE && back.cells &&
        *(double *)back.cells == 2.5);
  cn_array_free(&back);
  cn_array empty = {CN_PREC_SINGLE, 2, {0, 3}, NULL};
  CHECK_INT(cn_array_numel(&empty), 0);
  CHECK(cn_data_save_npy(ctx, path_of("c_empty.npy"), &empty) == CN_OK);
  CHECK(cn_data_load_npy(ctx, path_of("c_empty.npy"), &back) == CN_OK);
  CHECK(back.rank == 2 && back.dims[0] == 0 && back.dims[1] == 3 && back.cells == NULL);
  cn_array_free(&back);
  cn_array line = {CN_PREC_INT64, 1, {1}, &(int64_t){-7}};
  CHECK(cn_data_save_npy(ctx, path_of("c_line.npy"), &line) == CN_OK);
  CHECK(cn_data_load_npy(ctx, path_of("c_line.npy"), &back) == CN_OK);
  CHECK(back.rank == 1 && back.dims[0] == 1 && *(int64_t *)back.cells == -7);
  cn_array_free(&back);

  /* Refusals: no NumPy dtype, a bad shape, cells missing, a directory that does not exist. */
  const cn_prec no_dtype[3] = {CN_PREC_BFLOAT16, CN_PREC_FP8, CN_PREC_UINT4X32};
  for (int k = 0; k < 3; k++) {
    cn_array x = {no_dtype[k], 1, {1}, &two_and_a_half};
    CHECK(cn_data_save_npy(ctx, path_of("refused.npy"), &x) == CN_ERR_UNSUPPORTED);
    CHECK_HAS(cn_ctx_error(ctx), cn_prec_name(no_dtype[k]));
    CHECK(access(path_of("refused.npy"), F_OK) != 0);
  }
  cn_array neg = {CN_PREC_SINGLE, 1, {-1}, NULL};
  CHECK(cn_data_save_npy(ctx, path_of("refused.npy"), &neg) == CN_ERR_INVALID);
  CHECK_INT(cn_array_numel(&neg), -1);
  cn_array deep = {CN_PREC_SINGLE, CN_MAX_RANK + 1, {0}, NULL};
  CHECK(cn_data_save_npy(ctx, path_of("refused.npy"), &deep) == CN_ERR_INVALID);
  cn_array hollow = {CN_PREC_SINGLE, 1, {4}, NULL};
  CHECK(cn_data_save_npy(ctx, path_of("refused.npy"), &hollow) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "no storage");
  CHECK(cn_data_save_npy(ctx, path_of("no/such/dir.npy"), &scalar) == CN_ERR_IO);
  CHECK_HAS(cn_ctx_error(ctx), "no/such/dir.npy: cannot create");
  cn_ctx_destroy(ctx);
}

static const char numpy_writes[] =
    "import sys, numpy as np\n"
    "d = sys.argv[1]\n"
    "vals = {'i': [0, 1, -2, 3, 100, -128], 'u': [0, 1, 2, 3, 100, 255],\n"
    "        'f': [0, 1, -2, 3.5, 100, -0.125], 'b': [False, True, True, False, True, False]}\n"
    "for code in ['u1', 'u2', 'i4', 'u4', 'i8', 'u8', 'f2', 'f4', 'f8', 'i1', 'i2', 'b1']:\n"
    "    for o in '<>':\n"
    "        a = np.array(vals[code[0]], dtype=o + code).reshape(2, 3)\n"
    "        for v in (1, 2, 3):\n"
    "            with open('%s/np_%s_%s_v%d.npy' % (d, 'le' if o == '<' else 'be', code, v),\n"
    "                      'wb') as f:\n"
    "                np.lib.format.write_array(f, a, version=(v, 0))\n"
    "np.save(d + '/np_scalar.npy', np.float64(2.5))\n"
    "np.save(d + '/np_empty.npy', np.zeros((0, 3), dtype='>i2'))\n"
    "np.save(d + '/np_fortran.npy', np.asfortranarray(np.arange(6.0).reshape(2, 3)))\n"
    "np.save(d + '/np_complex.npy', np.zeros(2, dtype=np.complex64))\n"
    "np.save(d + '/np_struct.npy', np.zeros(2, dtype=[('a', '<i4'), ('b', '<f4')]))\n";

static const char numpy_reads[] =
    "import sys, numpy as np\n"
    "d = sys.argv[1]\n"
    "vals = {'i': [0, 1, -2, 3, 100, -128], 'u': [0, 1, 2, 3, 100, 255],\n"
    "        'f': [0, 1, -2, 3.5, 100, -0.125]}\n"
    "for name, descr in [('byte', '|u1'), ('uint16', '<u2'), ('int32', '<i4'), ('uint32', "
    "'<u4'),\n"
    "                    ('int64', '<i8'), ('uint64', '<u8'), ('half', '<f2'), ('single', "
    "'<f4'),\n"
    "                    ('double', '<f8')]:\n"
    "    a = np.load('%s/c_%s.npy' % (d, name))\n"
    "    assert a.dtype == np.dtype(descr), (name, a.dtype)\n"
    "    assert a.shape == (2, 3) and a.flags.c_contiguous, (name, a.shape)\n"
    "    assert a.ravel().tolist() == vals[descr[1]], (name, a)\n"
    "s = np.load(d + '/c_scalar.npy')\n"
    "assert s.shape == () and s.dtype == np.float64 and s == 2.5, s\n"
    "e = np.load(d + '/c_empty.npy')\n"
    "assert e.shape == (0, 3) and e.dtype == np.float32, e\n"
    "l = np.load(d + '/c_line.npy')\n"
    "assert l.shape == (1,) and l.tolist() == [-7], l\n";

static void test_npy_numpy(void) {
  if (!have_numpy()) {
    printf("skipped: /usr/bin/python3 lacks numpy (python3-numpy): NumPy interop not tested\n");
    return;
  }
  CHECK_MSG(python(numpy_reads), "NumPy did not read cannl's files as expected");
  CHECK_MSG(python(numpy_writes), "NumPy could not write the test files");
  cn_ctx *ctx = cn_ctx_create();
  static const struct {
    const char *code;
    cn_prec prec;
    const double *values;
  } dtypes[] = {
      {"u1", CN_PREC_BYTE, unsigned_values}, {"u2", CN_PREC_UINT16, unsigned_values},
      {"i4", CN_PREC_INT32, signed_values},  {"u4", CN_PREC_UINT32, unsigned_values},
      {"i8", CN_PREC_INT64, signed_values},  {"u8", CN_PREC_UINT64, unsigned_values},
      {"f2", CN_PREC_HALF, float_values},    {"f4", CN_PREC_SINGLE, float_values},
      {"f8", CN_PREC_DOUBLE, float_values},  {"i1", CN_PREC_INT32, signed_values},
      {"i2", CN_PREC_INT32, signed_values},  {"b1", CN_PREC_BYTE, bool_values},
  };
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++)
    for (int be = 0; be < 2; be++)
      for (int v = 1; v <= 3; v++) {
        char name[64];
        snprintf(name, sizeof name, "np_%s_%s_v%d.npy", be ? "be" : "le", dtypes[k].code, v);
        cn_array a;
        cn_status s = cn_data_load_npy(ctx, path_of(name), &a);
        CHECK_MSG(s == CN_OK, "%s: %s", name, cn_ctx_error(ctx));
        if (s == CN_OK) check_values(name, &a, dtypes[k].prec, dtypes[k].values);
        cn_array_free(&a);
      }
  cn_array a;
  CHECK_MSG(cn_data_load_npy(ctx, path_of("np_scalar.npy"), &a) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK(a.rank == 0 && a.prec == CN_PREC_DOUBLE && a.cells && *(double *)a.cells == 2.5);
  cn_array_free(&a);
  CHECK_MSG(cn_data_load_npy(ctx, path_of("np_empty.npy"), &a) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK(a.rank == 2 && a.dims[0] == 0 && a.dims[1] == 3 && a.prec == CN_PREC_INT32 && !a.cells);
  cn_array_free(&a);
  expect_failure(ctx, true, path_of("np_fortran.npy"), CN_ERR_UNSUPPORTED,
                 "expected fortran_order False", "found \"True", NULL);
  expect_failure(ctx, true, path_of("np_complex.npy"), CN_ERR_UNSUPPORTED,
                 "at byte 20:", "expected a dtype among", "found \"'<c8',\"", NULL);
  expect_failure(ctx, true, path_of("np_struct.npy"), CN_ERR_UNSUPPORTED, "expected a simple dtype",
                 NULL);
  cn_ctx_destroy(ctx);
}

/* A .npy file by hand: magic, version, header length, header text as given, payload. */
static void write_npy(const char *path, int major, const char *header, const void *payload,
                      size_t payload_len) {
  unsigned char buf[1024];
  size_t hlen = strlen(header), len = 0;
  memcpy(buf, "\x93NUMPY", 6);
  len = 6;
  buf[len++] = (unsigned char)major;
  buf[len++] = 0;
  buf[len++] = (unsigned char)(hlen & 0xff);
  buf[len++] = (unsigned char)(hlen >> 8);
  if (major > 1) buf[len++] = 0, buf[len++] = 0;
  memcpy(buf + len, header, hlen);
  len += hlen;
  memcpy(buf + len, payload, payload_len);
  write_bytes(path, buf, len + payload_len);
}

static void test_npy_malformed(void) {
  cn_ctx *ctx = cn_ctx_create();
  const char *p = path_of("bad.npy");
  const float cells[6] = {1, 2, 3, 4, 5, 6};
  const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";
  write_npy(p, 1, good, cells, sizeof cells);
  cn_array a;
  CHECK_MSG(cn_data_load_npy(ctx, p, &a) == CN_OK, "%s", cn_ctx_error(ctx));
  cn_array_free(&a);
  /* Double quotes, no blanks, no trailing comma, keys in another order, version 2.0. */
  write_npy(p, 2, "{\"shape\":(2,3),\"fortran_order\":False,\"descr\":\"<f4\"}", cells,
            sizeof cells);
  CHECK_MSG(cn_data_load_npy(ctx, p, &a) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK(a.rank == 2 && memcmp(a.cells, cells, sizeof cells) == 0);
  cn_array_free(&a);

  write_bytes(p, "\x93NUMPY\x01", 7);
  expect_failure(ctx, true, p, CN_ERR_INVALID,
                 "at byte 0:", "expected 8 bytes of the magic string and version, found 7", NULL);
  write_bytes(p, "\x93NUMPY\x01\x00\x40", 9);
  expect_failure(ctx, true, p, CN_ERR_INVALID,
                 "at byte 8:", "expected 2 bytes of the header length, found 1", NULL);
  write_bytes(p, "\x93NUMPY\x01\x00\x40\x00{'descr'", 17);
  expect_failure(ctx, true, p, CN_ERR_INVALID,
                 "at byte 10:", "expected 64 bytes of header, found 7 (the file ends at byte 17)",
                 NULL);
  write_npy(p, 1, good, cells, sizeof cells - 1);
  expect_failure(ctx, true, p, CN_ERR_INVALID,
                 "at byte 70:", "expected 24 bytes of data (6 cells of 4 bytes), found 23", NULL);
  write_npy(p, 1, good, cells, sizeof cells);
  FILE *f = fopen(p, "ab");
  if (f) fputc('!', f), fclose(f);
  expect_failure(ctx, true, p, CN_ERR_INVALID, "at byte 94:", "expected the end of the file", NULL);
  write_bytes(p, "PK\x03\x04 not npy", 13);
  expect_failure(ctx, true, p, CN_ERR_INVALID,
                 "at byte 0:", "expected the magic string \\x93NUMPY, found 50 4b 03 04", NULL);
  write_npy(p, 4, good, cells, sizeof cells);
  expect_failure(ctx, true, p, CN_ERR_UNSUPPORTED,
                 "at byte 6:", "expected format version 1.0, 2.0 or 3.0, found 4.0", NULL);

  /* The header dict; offsets are 10 + the column in the header text. */
  static const struct {
    const char *header;
    cn_status status;
    const char *at, *what;
  } dicts[] = {
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", CN_ERR_UNSUPPORTED,
       "at byte 44:",
       "expected fortran_order False (cannl reads C-order arrays only), found \"True,\""},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", CN_ERR_INVALID,
       "at byte 66:", "expected ',' or '}' after a value, found the end of the header"},
      {"['descr', '<f4']", CN_ERR_INVALID, "at byte 10:", "expected '{' (a Python dict literal)"},
      {"{'descr': <f4, 'fortran_order': False, 'shape': (2, 3), }", CN_ERR_INVALID,
       "at byte 20:", "expected a dtype string such as '<f4', found \"<f4,\""},
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }", CN_ERR_UNSUPPORTED,
       "at byte 20:", "expected a dtype among u1 u2 i4 u4 i8 u8 f2 f4 f8 i1 i2 b1"},
      {"{'descr': '|f4', 'fortran_order': False, 'shape': (2, 3), }", CN_ERR_UNSUPPORTED,
       "at byte 20:", "found \"'|f4',\""},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}", CN_ERR_INVALID,
       "at byte 68:",
       "expected one of the keys 'descr', 'fortran_order', 'shape', found \"'extra':\""},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", CN_ERR_INVALID,
       "at byte 27:", "expected each key once"},
      {"{'descr': '<f4', 'shape': (2, 3)}", CN_ERR_INVALID,
       "at byte 42:", "expected the key 'fortran_order' in the dict, found \"}\""},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3)}", CN_ERR_INVALID,
       "at byte 44:", "expected True or False, found \"Maybe,\""},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3]}", CN_ERR_INVALID,
       "at byte 60:", "expected a shape tuple such as (2, 3)"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", CN_ERR_INVALID,
       "at byte 64:", "expected a dimension (a non-negative integer) or ')', found \"-3)}\""},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", CN_ERR_INVALID,
       "at byte 63:", "expected ',' or ')' in the shape tuple, found \"3)}\""},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", CN_ERR_INVALID,
       "at byte 61:", "expected a dimension below 2^63"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1)}",
       CN_ERR_UNSUPPORTED, "at byte 93:", "expected at most 16 dimensions"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x", CN_ERR_INVALID,
       "at byte 68:", "expected only blanks after the dict, found \"x\""},
      {"{'descr': '<f4\n', 'fortran_order': False, 'shape': (2, 3)}", CN_ERR_INVALID,
       "at byte 24:", "expected a closing quote, found byte 0x0a"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}",
       CN_ERR_INVALID, "at byte 97:", "product overflows"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000)}", CN_ERR_INVALID,
       "at byte 79:", "expected 4000000000000 bytes of data (1000000000000 cells of 4 bytes)"},
  };
  for (size_t k = 0; k < sizeof dicts / sizeof *dicts; k++) {
    write_npy(p, 1, dicts[k].header, cells, sizeof cells);
    expect_failure(ctx, true, p, dicts[k].status, dicts[k].at, dicts[k].what, NULL);
  }
  expect_failure(ctx, true, path_of("missing.npy"), CN_ERR_IO, "cannot open", NULL);
  cn_ctx_destroy(ctx);
}

/* Issue 27: an empty array (a zero-size axis) is a valid file of either format: it loads with its
 * dims and no cells (NULL), plain and gzip, whatever the position of the zero axis; what needs
 * cells (a data set, the notation's load) refuses it. */
static void test_empty_arrays(void) {
  cn_ctx *ctx = cn_ctx_create();
  static const uint32_t shapes[3][2] = {{3, 0}, {0, 3}, {0, 0}};
  for (int k = 0; k < 3; k++) {
    unsigned char image[64];
    size_t len = idx_image(image, 0x0D, 2, shapes[k], NULL, 0, 4);
    CHECK_INT((int)len, 12);
    write_bytes(path_of("empty.idx"), image, len);
    write_gzip(path_of("empty.idx.gz"), "wb", image, len);
    char header[128];
    snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%u, %u), }",
             shapes[k][0], shapes[k][1]);
    write_npy(path_of("empty.npy"), 1, header, "", 0);
    const char *files[3] = {path_of("empty.idx"), path_of("empty.idx.gz"), path_of("empty.npy")};
    for (int f = 0; f < 3; f++) {
      cn_array a;
      memset(&a, 0xab, sizeof a);
      CHECK_MSG(cn_data_load(ctx, files[f], &a) == CN_OK, "%s: %s", files[f], cn_ctx_error(ctx));
      CHECK(a.prec == CN_PREC_SINGLE && a.rank == 2 && a.cells == NULL);
      CHECK(a.dims[0] == shapes[k][0] && a.dims[1] == shapes[k][1]);
      CHECK_INT(cn_array_numel(&a), 0);
      cn_array_free(&a);
    }
  }
  cn_ctx_destroy(ctx);
}

/* Issue 27: a gzip file's cells grow as its decompressed bytes arrive. A header claiming 8 GiB
 * (2^30 f64 cells) over 8.4 MB of incompressible data passes the deflate bound (1032 bytes per
 * compressed byte) and, allocated up front, failed for memory under a 4 GiB address-space limit
 * (CN_ERR_NOMEM) or took 8 GiB of address space; now the stream's end is the precise error,
 * whatever the limit. A whole payload of 3 MB (past the first 1 MiB buffer, not a power of two)
 * of i16 cells, widened to int32, reads back exactly. */
static void test_gzip_claims(void) {
  cn_ctx *ctx = cn_ctx_create();
  enum { DATA = 8400000 };
  unsigned char *image = malloc(16 + DATA);
  CHECK(image != NULL);
  if (!image) return;
  const uint32_t dims[2] = {1u << 15, 1u << 15};
  size_t len = idx_image(image, 0x0E, 2, dims, NULL, 0, 8);
  uint64_t x = 88172645463325252ull; /* xorshift64: bytes deflate cannot shrink */
  for (size_t i = 0; i < DATA; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    image[len + i] = (unsigned char)(x >> 32);
  }
  const char *gz = path_of("claims.idx.gz");
  gzFile f = gzopen(gz, "wb1");
  CHECK(f && gzwrite(f, image, (unsigned)(len + DATA)) == (int)(len + DATA));
  CHECK(f && gzclose(f) == Z_OK);
  struct rlimit saved;
#ifndef LIMIT_CHECK_ASAN /* ASan's shadow memory exceeds any such limit */
  CHECK(limit_address_space(&saved));
#endif
  expect_failure(ctx, false, gz, CN_ERR_INVALID,
                 "at byte 12 of the decompressed data: expected 8589934592 bytes of payload, "
                 "found 8400000 (the decompressed data ends at byte 8400012)",
                 NULL);
#ifndef LIMIT_CHECK_ASAN
  CHECK(restore_address_space(&saved));
#endif
  (void)saved;

  enum { CELLS = 1500001 };
  int16_t *cells = (int16_t *)image;
  for (int i = 0; i < CELLS; i++) cells[i] = (int16_t)(i * 7919);
  unsigned char *file = malloc(16 + 2 * (size_t)CELLS);
  int32_t *expected = malloc(sizeof *expected * CELLS);
  CHECK(file && expected);
  if (file && expected) {
    const uint32_t one[1] = {CELLS};
    len = idx_image(file, 0x0B, 1, one, cells, CELLS, 2);
    for (int i = 0; i < CELLS; i++) expected[i] = cells[i];
    write_gzip(gz, "wb", file, len);
    check_idx_loads(ctx, gz, CN_PREC_INT32, 1, one, expected, CELLS);
    /* each allocation of the growing buffer failing in turn: CN_ERR_NOMEM, nothing leaked */
    bool loaded = false;
    int failures = 0;
    for (long n = 1; n < 20 && !loaded; n++) {
      cn_array a;
      ctx->fail_alloc_countdown = n;
      cn_status st = cn_data_load_idx(ctx, gz, &a);
      CHECK_MSG(st == CN_OK || st == CN_ERR_NOMEM, "n %ld: %s", n, cn_ctx_error(ctx));
      CHECK(st == CN_OK || a.cells == NULL);
      failures += st == CN_ERR_NOMEM;
      loaded = st == CN_OK;
      cn_array_free(&a);
    }
    ctx->fail_alloc_countdown = 0;
    CHECK(loaded);
    CHECK_MSG(failures >= 5, "%d failures: the file, 1 MiB, 2 MiB, 3 MB, then 6 MB widened",
              failures);
  }
  free(file);
  free(expected);
  free(image);
  cn_ctx_destroy(ctx);
}

/* Every allocation of a load and a save fails in turn: a CN_ERR_NOMEM, nothing leaked (ASan,
 * valgrind), then success once the countdown passes them all. */
static void test_allocation_failures(void) {
  cn_ctx *ctx = cn_ctx_create();
  unsigned char image[64];
  const uint8_t cells[6] = {1, 2, 3, 4, 5, 6};
  const uint32_t dims[1] = {6};
  size_t len = idx_image(image, 0x08, 1, dims, cells, 6, 1);
  write_gzip(path_of("alloc.idx.gz"), "wb", image, len);
  cn_array a, x;
  fill(&x, CN_PREC_SINGLE, float_values);
  for (int kind = 0; kind < 3; kind++) {
    bool succeeded = false;
    for (long n = 1; n < 20 && !succeeded; n++) {
      ctx->fail_alloc_countdown = n;
      cn_status s = kind == 0   ? cn_data_load_idx(ctx, path_of("alloc.idx.gz"), &a)
                    : kind == 1 ? cn_data_save_npy(ctx, path_of("alloc.npy"), &x)
                                : cn_data_load_npy(ctx, path_of("alloc.npy"), &a);
      CHECK_MSG(s == CN_OK || s == CN_ERR_NOMEM, "kind %d, n %ld: %s", kind, n, cn_ctx_error(ctx));
      succeeded = s == CN_OK;
      if (kind != 1) CHECK(succeeded == (a.cells != NULL));
      if (kind != 1) cn_array_free(&a);
    }
    CHECK_MSG(succeeded, "kind %d never succeeded", kind);
  }
  ctx->fail_alloc_countdown = 0;
  cn_array_free(&x);
  cn_ctx_destroy(ctx);
}

/* The in-memory entry points of the fuzz target: the same checks over bytes. */
static void test_bytes_reader(void) {
  cn_ctx *ctx = cn_ctx_create();
  unsigned char image[64];
  const uint8_t cells[6] = {1, 2, 3, 4, 5, 6};
  const uint32_t dims[1] = {6};
  size_t len = idx_image(image, 0x08, 1, dims, cells, 6, 1);
  cn_data_reader r;
  cn_array a;
  CHECK(cn_data_reader_open_bytes(ctx, "mem.idx", image, len, true, &r) == CN_OK);
  CHECK(cn_data_idx_read(ctx, &r, &a) == CN_OK && a.dims[0] == 6);
  CHECK(a.cells && memcmp(a.cells, cells, 6) == 0);
  cn_data_reader_close(&r);
  cn_array_free(&a);
  CHECK(cn_data_reader_open_bytes(ctx, "mem.idx", image, len - 1, true, &r) == CN_OK);
  CHECK(cn_data_idx_read(ctx, &r, &a) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "mem.idx: at byte 8: expected 6 bytes of payload");
  cn_data_reader_close(&r);
  cn_ctx_destroy(ctx);
}

static void remove_dir(void) {
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) unlink(path_of(e->d_name));
  closedir(d);
  CHECK(rmdir(dir) == 0);
}

/* cn_data_load tells the formats apart by the first bytes, whatever the name, and refuses a FIFO
 * without blocking on it (no writer will ever come). */
static void test_load_either(void) {
  cn_ctx *ctx = cn_ctx_create();
  int32_t cells[3] = {7, -8, 9};
  cn_array a = {CN_PREC_INT32, 1, {3}, cells}, back;
  CHECK(cn_data_save_npy(ctx, path_of("either.idx"), &a) == CN_OK); /* an .npy, named .idx */
  CHECK(cn_data_load(ctx, path_of("either.idx"), &back) == CN_OK);
  CHECK(back.prec == CN_PREC_INT32 && back.rank == 1 && back.dims[0] == 3 &&
        memcmp(back.cells, cells, sizeof cells) == 0);
  cn_array_free(&back);
  const unsigned char idx[] = {0, 0, 0x08, 1, 0, 0, 0, 2, 5, 6}; /* two bytes 5, 6 */
  write_bytes(path_of("either.npy"), idx, sizeof idx);           /* an IDX, named .npy */
  CHECK(cn_data_load(ctx, path_of("either.npy"), &back) == CN_OK);
  CHECK(back.prec == CN_PREC_BYTE && back.dims[0] == 2 && ((uint8_t *)back.cells)[1] == 6);
  cn_array_free(&back);
  CHECK(mkfifo(path_of("fifo"), 0600) == 0);
  CHECK(cn_data_load(ctx, path_of("fifo"), &back) == CN_ERR_IO);
  CHECK(strstr(cn_ctx_error(ctx), "fifo: cannot read: not a regular file") != NULL);
  CHECK(back.cells == NULL);
  unlink(path_of("fifo"));
  cn_ctx_destroy(ctx);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cannl_data_files_XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_idx_round_trips();
  test_fashion_mnist();
  test_idx_malformed();
  test_npy_round_trips();
  test_npy_numpy();
  test_npy_malformed();
  test_empty_arrays();
  test_gzip_claims();
  test_allocation_failures();
  test_bytes_reader();
  test_load_either();
  remove_dir();
  CHECK_DONE();
}
