/* libFuzzer target: the safetensors loader (cn_data_load_safetensors) and its JSON reader
 * (cn_json_parse). The input is a whole file. Beyond ASan and UBSan, the harness aborts (a crash
 * libFuzzer reports) when a documented property fails:
 *   - the input up to its first NUL byte, read as a JSON text, is a tree, or a CN_ERR_INVALID
 *     message "input: at byte N: " with N at most the text's length;
 *   - loading the file (no node, then each of a few nodes: "a" single [2, 3], "b" byte [4],
 *     "c" uint4x32 [1], "d" double []) succeeds or fails with CN_ERR_INVALID and a message that
 *     names the file; a failed load leaves its node's cells as they were; returned metadata
 *     never holds cannl_crc32;
 *   - what loaded (the file's metadata and the nodes it fills) saves, and that file loads back
 *     to the same cells and metadata.
 * The input is written to a per-process file under $TMPDIR (or /tmp), removed at exit. One
 * context per input, destroyed after it. */
#include "data/json.h"

#include <unistd.h>

#define FUZZ_NAME "fuzz_safetensors"
#include "fuzz_common.h"

static char input_path[256], copy_path[256];

static void remove_files(void) {
  unlink(input_path);
  unlink(copy_path);
}

/* Creates the two per-process file names once. */
static void make_paths(void) {
  if (input_path[0]) return;
  const char *tmp = getenv("TMPDIR");
  snprintf(input_path, sizeof input_path, "%s/fuzz_safetensors-%ld.in", tmp ? tmp : "/tmp",
           (long)getpid());
  snprintf(copy_path, sizeof copy_path, "%s/fuzz_safetensors-%ld.out", tmp ? tmp : "/tmp",
           (long)getpid());
  atexit(remove_files);
}

static void write_input(const uint8_t *data, size_t size) {
  FILE *f = fopen(input_path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
}

static void check_json(cn_ctx *ctx, const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return;
  size_t len = strlen(text);
  bool ok = cn_json_parse(ctx, text, len, "input", 0) != NULL;
  free(text);
  if (ok) return;
  const char *msg = cn_ctx_error(ctx);
  unsigned long long at;
  if (cn_ctx_status(ctx) != CN_ERR_INVALID || sscanf(msg, "input: at byte %llu: ", &at) != 1 ||
      at > len)
    fail("a JSON refusal that is not a positioned CN_ERR_INVALID within the text:", msg);
}

typedef struct {
  const char *name;
  cn_prec prec;
  int rank;
  int64_t dims[2];
} request;

static const request requests[] = {
    {"a", CN_PREC_SINGLE, 2, {2, 3}},
    {"b", CN_PREC_BYTE, 1, {4}},
    {"c", CN_PREC_UINT4X32, 1, {1}},
    {"d", CN_PREC_DOUBLE, 0, {0}},
};
#define N_REQUESTS ((int)(sizeof requests / sizeof requests[0]))

/* Cells of up to 6 * 16 bytes: every request's. */
typedef struct {
  unsigned char b[96];
} cells;

static cells read_cells(cn_node *n) {
  cells c = {{0}};
  if (cn_node_get_cells(n, false, c.b, (size_t)cn_node_numel(n)) != CN_OK) abort();
  return c;
}

static void check_metadata(int n, const cn_metadata_entry *meta) {
  for (int i = 0; i < n; i++)
    if (!meta[i].key || !meta[i].value || strcmp(meta[i].key, "cannl_crc32") == 0)
      fail("returned metadata holds a NULL or the CRC entry", meta[i].key ? meta[i].key : "NULL");
}

/* The load of no node or of one request; returns whether it succeeded. */
static bool try_load(cn_ctx *ctx, const cn_named_node *node, int *n_meta,
                     cn_metadata_entry **meta) {
  cells before = {{0}};
  if (node) before = read_cells(node->node);
  cn_status st = cn_data_load_safetensors(ctx, input_path, node ? 1 : 0, node, n_meta, meta);
  if (st == CN_OK) {
    check_metadata(*n_meta, *meta);
    return true;
  }
  if (st != CN_ERR_INVALID || !strstr(cn_ctx_error(ctx), input_path))
    fail("a refusal that is not CN_ERR_INVALID naming the file:", cn_ctx_error(ctx));
  cells after = node ? read_cells(node->node) : before;
  if (memcmp(&before, &after, sizeof before) != 0)
    fail("a failed load changed its node:", cn_ctx_error(ctx));
  return false;
}

/* Saves what loaded and loads it back: the same cells and metadata. */
static void check_round_trip(cn_ctx *ctx, int n, const cn_named_node *nodes, int n_meta,
                             const cn_metadata_entry *meta) {
  if (cn_data_save_safetensors(ctx, copy_path, n, nodes, n_meta, meta) != CN_OK)
    fail("what loaded does not save:", cn_ctx_error(ctx));
  cn_named_node back[N_REQUESTS];
  for (int i = 0; i < n; i++) {
    cn_node *src = nodes[i].node;
    int64_t dims[2] = {0, 0};
    for (int a = 0; a < cn_node_rank(src); a++) dims[a] = cn_node_dim(src, a);
    back[i] = (cn_named_node){
        nodes[i].name, cn_node_create(ctx, "back", cn_node_prec(src), cn_node_rank(src), dims)};
    if (!back[i].node) abort();
  }
  int n_back = -1;
  cn_metadata_entry *meta_back = NULL;
  if (cn_data_load_safetensors(ctx, copy_path, n, back, &n_back, &meta_back) != CN_OK)
    fail("a file saved from a loaded one does not load:", cn_ctx_error(ctx));
  for (int i = 0; i < n; i++) {
    cells x = read_cells(nodes[i].node), y = read_cells(back[i].node);
    if (memcmp(&x, &y, sizeof x) != 0) fail("cells changed in a save and load:", nodes[i].name);
  }
  if (n_back != n_meta) fail("the metadata count changed in a save and load", "");
  for (int i = 0; i < n_meta; i++)
    if (strcmp(meta[i].key, meta_back[i].key) != 0 || strcmp(meta[i].value, meta_back[i].value))
      fail("metadata changed in a save and load:", meta[i].key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  make_paths();
  cn_ctx *ctx = cn_ctx_create();
  if (!ctx) abort();
  check_json(ctx, data, size);
  write_input(data, size);
  int n_meta = -1;
  cn_metadata_entry *meta = NULL;
  if (try_load(ctx, NULL, &n_meta, &meta)) {
    cn_named_node loaded[N_REQUESTS];
    int n = 0;
    for (int r = 0; r < N_REQUESTS; r++) {
      const request *q = &requests[r];
      cn_named_node node = {q->name, cn_node_create(ctx, q->name, q->prec, q->rank, q->dims)};
      if (!node.node) abort();
      /* cells the file is unlikely to hold, to see a failed load change them */
      unsigned char fill[96];
      memset(fill, 0xa5, sizeof fill);
      if (cn_node_set_cells(node.node, false, fill, (size_t)cn_node_numel(node.node)) != CN_OK)
        abort();
      int n_node_meta = -1;
      cn_metadata_entry *node_meta = NULL;
      if (try_load(ctx, &node, &n_node_meta, &node_meta)) loaded[n++] = node;
    }
    check_round_trip(ctx, n, loaded, n_meta, meta);
  }
  cn_ctx_destroy(ctx);
  return 0;
}
