/* One precision of the GEMM library's kernels (included by gemm_isa.c for float and double, with
 * T the type, SUF(name) the precision's names, V and VU its aligned and unaligned vectors, VFMA
 * the vector fused multiply-add when the instruction set has one, FMA_SCALAR the scalar one).
 *
 * The work of cgen_gemm.c's generated driver, with the GEMM's sizes and strides as values: the
 * cells are tasks of mc rows by nc columns (of one batch point) for the pool; a task packs y's
 * block of kc steps into panels of nr columns and x's into panels of mr rows (or reads x's rows in
 * place when its steps are adjacent and the product is narrow), and runs the micro-kernel of the
 * tile on every mr x nr tile, in c or, at an edge or for columns apart in c, in a tile of its own
 * (gathered, computed, scattered). Every cell gets its steps in order: the blocks of kc in order,
 * the steps inside one in order, each cell in one task. Without scratch memory a task computes its
 * cells one by one, in the same order. */

typedef T V __attribute__((vector_size(VBYTES), __may_alias__));
typedef T VU __attribute__((vector_size(VBYTES), aligned(sizeof(T)), __may_alias__));
enum { SUF(lanes) = VBYTES / (int)sizeof(T) };
#define VL SUF(lanes)

#if !defined(VFMA)
static inline V SUF(vfma)(V a, V b, V c) {
  for (int l = 0; l < VL; l++) c[l] = FMA_SCALAR(a[l], b[l], c[l]);
  return c;
}
#define VFMA SUF(vfma)
#endif

/* ---- Micro-kernels ----
 * Rows[r] is row r of the tile (nr adjacent cells), b a panel of kc steps by nr columns; a is a
 * panel of kc steps by mr rows (packed: a[k * mr + r]) or mr row pointers of x (a[r][k]). fresh:
 * the accumulators start from +0 instead of the tile. The update is the nest's: bv * s + acc in
 * one rounding (fma; the broadcast is s - 0, exactly s, where s + 0 would turn -0 into +0) or
 * acc + bv * s in two. */
#define UKR_STEPS(AREAD, UPDATE)                                                                   \
  for (int64_t k = 0; k < kc; k++) {                                                               \
    V bv[nv];                                                                                      \
    _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) bv[v] =                                   \
        *(const V *)(b + (k * nv + v) * VL);                                                       \
    _Pragma("GCC unroll 16") for (int r = 0; r < mr; r++) {                                        \
      const T s = AREAD;                                                                           \
      _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) acc[r][v] = UPDATE;                     \
    }                                                                                              \
  }
#define AREAD_PACKED ((const T *)a)[k * mr + r]
#define AREAD_ROWS   ((const T *const *)a)[r][k]
#define UPDATE_EXACT acc[r][v] + bv[v] * s
#define UPDATE_FMA   VFMA(bv[v], s - (V){0}, acc[r][v])

#define DEFINE_UKR(name, MR, NV, AREAD)                                                            \
  static void name(int64_t kc, const void *a, const T *restrict b, T *const *rows, int fresh,      \
                   int fma) {                                                                      \
    enum { mr = MR, nv = NV };                                                                     \
    V acc[mr][nv];                                                                                 \
    _Pragma("GCC unroll 16") for (int r = 0; r < mr; r++)                                          \
        _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) acc[r][v] =                           \
            fresh ? (V){0} : (V) * (const VU *)(rows[r] + v * VL);                                 \
    if (fma) {                                                                                     \
      UKR_STEPS(AREAD, UPDATE_FMA)                                                                 \
    } else {                                                                                       \
      UKR_STEPS(AREAD, UPDATE_EXACT)                                                               \
    }                                                                                              \
    _Pragma("GCC unroll 16") for (int r = 0; r < mr; r++)                                          \
            _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) *                                 \
        (VU *)(rows[r] + v * VL) = acc[r][v];                                                      \
  }

#define DEFINE_TILE(MR, NV)                                                                        \
  DEFINE_UKR(SUF(ukr_p_##MR##_##NV), MR, NV, AREAD_PACKED)                                         \
  DEFINE_UKR(SUF(ukr_r_##MR##_##NV), MR, NV, AREAD_ROWS)
CN_GEMM_TILES(DEFINE_TILE)

typedef void SUF(ukr_fn)(int64_t kc, const void *a, const T *restrict b, T *const *rows, int fresh,
                         int fma);
typedef struct {
  int mr, nv;
  SUF(ukr_fn) * packed, *in_place;
} SUF(tile_kernels);
#define TILE_ENTRY(MR, NV) {MR, NV, SUF(ukr_p_##MR##_##NV), SUF(ukr_r_##MR##_##NV)},
static const SUF(tile_kernels) SUF(tiles)[] = {CN_GEMM_TILES(TILE_ENTRY)};

/* ---- Packing ---- */

/* A panel of y: kc steps by nr columns (cols of them from y, zeros past), step k of column q at
 * y[k * ks + q * ns]. Along the steps (ks 1) column by column, in single precision on AVX by
 * blocks of 8 columns by 8 steps transposed in registers (a weight stored [out][in]); else step
 * by step. The values are copied: the bits are the same either way. */
static void SUF(fill_b)(T *restrict panel, int nr, int cols, int64_t kc, const T *restrict y,
                        int64_t ks, int64_t ns) {
  if (ks != 1) {
    for (int64_t k = 0; k < kc; k++) {
      for (int q = 0; q < cols; q++) panel[k * nr + q] = y[k * ks + q * ns];
      for (int q = cols; q < nr; q++) panel[k * nr + q] = 0;
    }
    return;
  }
  for (int q0 = 0; q0 < nr; q0 += 8) {
    int64_t k = 0;
#if TRANSPOSE_8X8
    typedef float v8 __attribute__((vector_size(32), aligned(4), __may_alias__));
#if defined(__clang__)
#define SHUFFLE8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
    typedef int v8i __attribute__((vector_size(32)));
#define SHUFFLE8(a, b, ...) __builtin_shuffle(a, b, (v8i){__VA_ARGS__})
#endif
    for (; q0 + 8 <= cols && k + 8 <= kc; k += 8) {
      v8 r[8], t[8], u[8];
      for (int i = 0; i < 8; i++) r[i] = *(const v8 *)&y[k + (q0 + i) * ns];
      for (int i = 0; i < 8; i += 2) {
        t[i] = SHUFFLE8(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = SHUFFLE8(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
      }
      for (int i = 0; i < 8; i += 4) {
        u[i] = SHUFFLE8(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 1] = SHUFFLE8(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        u[i + 2] = SHUFFLE8(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
        u[i + 3] = SHUFFLE8(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
      }
      for (int i = 0; i < 4; i++) {
        *(v8 *)(panel + (k + i) * nr + q0) = SHUFFLE8(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        *(v8 *)(panel + (k + i + 4) * nr + q0) =
            SHUFFLE8(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
      }
    }
#undef SHUFFLE8
#endif
    for (int q = q0; q < q0 + 8 && q < nr; q++)
      for (int64_t kr = k; kr < kc; kr++) panel[kr * nr + q] = q < cols ? y[kr + q * ns] : 0;
  }
}

/* A panel of x: kc steps by mr rows (rows of them from x, zeros past), step k of row q at
 * x[q * ms + k * ks]; row by row when the steps are adjacent. */
static void SUF(pack_a)(T *restrict panel, int mr, int rows, int64_t kc, const T *restrict x,
                        int64_t ms, int64_t ks) {
  if (ks == 1) {
    for (int q = 0; q < mr; q++)
      if (q < rows)
        for (int64_t k = 0; k < kc; k++) panel[k * mr + q] = x[q * ms + k];
      else
        for (int64_t k = 0; k < kc; k++) panel[k * mr + q] = 0;
    return;
  }
  for (int64_t k = 0; k < kc; k++) {
    for (int q = 0; q < rows; q++) panel[k * mr + q] = x[q * ms + k * ks];
    for (int q = rows; q < mr; q++) panel[k * mr + q] = 0;
  }
}

/* ---- Tasks ---- */

typedef struct {
  const int64_t *args;
  T *c;
  const T *x, *y;
  const cn_parallel *par;
  const SUF(tile_kernels) * tile;
  int mr, nr;
  int64_t mc, kc, nc, nic, njc;
  bool fma, fresh, in_place, direct, no_scratch;
} SUF(job);

/* Rows [i0, i1) and columns [n0, n0 + ncur) of one batch point, steps [p0, p0 + kc), one cell
 * after the other (no scratch memory). */
static void SUF(cells)(const SUF(job) * j, T *cb, const T *xb, const T *yb, int64_t i0, int64_t i1,
                       int64_t n0, int64_t ncur, int64_t p0, int64_t kc) {
  const int64_t *a = j->args;
  for (int64_t i = i0; i < i1; i++)
    for (int64_t n = n0; n < n0 + ncur; n++) {
      T *cell = cb + i * a[CN_GEMM_ARG_C_M] + n * a[CN_GEMM_ARG_C_N];
      const T *xr = xb + i * a[CN_GEMM_ARG_X_M] + p0 * a[CN_GEMM_ARG_X_K];
      const T *yc = yb + n * a[CN_GEMM_ARG_Y_N] + p0 * a[CN_GEMM_ARG_Y_K];
      T sum = j->fresh && p0 == 0 ? 0 : *cell;
      for (int64_t k = 0; k < kc; k++) {
        T xv = xr[k * a[CN_GEMM_ARG_X_K]], yv = yc[k * a[CN_GEMM_ARG_Y_K]];
        sum = j->fma ? FMA_SCALAR(xv, yv, sum) : sum + xv * yv;
      }
      *cell = sum;
    }
}

/* Task t is batch point t / (njc * nic), column block t / nic % njc, row block t % nic;
 * consecutive tasks of one batch point and column block share the packing of y. */
static void SUF(range)(void *envp, int64_t lo, int64_t hi) {
  const SUF(job) *j = envp;
  const int64_t *a = j->args;
  const int64_t m = a[CN_GEMM_ARG_M], n = a[CN_GEMM_ARG_N], kk = a[CN_GEMM_ARG_K];
  const int64_t cm = a[CN_GEMM_ARG_C_M], cn = a[CN_GEMM_ARG_C_N];
  const int64_t xm = a[CN_GEMM_ARG_X_M], xk = a[CN_GEMM_ARG_X_K];
  const int64_t yk = a[CN_GEMM_ARG_Y_K], yn = a[CN_GEMM_ARG_Y_N];
  const int mr = j->mr, nr = j->nr;
  const int64_t unit = sizeof(T) < 64 ? 64 / (int64_t)sizeof(T) : 1;
  const int64_t asize = (j->mc * j->kc + unit - 1) / unit * unit;
  const int64_t bsize = j->kc * ((j->nc + nr - 1) / nr * nr);
  const size_t bytes = ((size_t)(asize + bsize) * sizeof(T) + 63) / 64 * 64;
  T *const pack = j->no_scratch ? NULL
                  : j->par      ? j->par->scratch(j->par->pool, bytes)
                                : aligned_alloc(64, bytes);
  T *const ap = pack, *const bp = pack ? pack + asize : NULL;
  for (int64_t t = lo; t < hi;) {
    const int64_t ic0 = t % j->nic, group = t / j->nic;
    const int64_t ic1 = j->nic - ic0 < hi - t ? j->nic : ic0 + (hi - t);
    t += ic1 - ic0;
    const int64_t b = group / j->njc, n0 = group % j->njc * j->nc;
    const int64_t ncur = n - n0 < j->nc ? n - n0 : j->nc;
    T *const cb = j->c + b * a[CN_GEMM_ARG_C_BATCH];
    const T *const xb = j->x + b * a[CN_GEMM_ARG_X_BATCH];
    const T *const yb = j->y + b * a[CN_GEMM_ARG_Y_BATCH];
    for (int64_t p0 = 0; p0 < kk; p0 += j->kc) {
      const int64_t kc = kk - p0 < j->kc ? kk - p0 : j->kc;
      const int fresh = j->fresh && p0 == 0;
      if (!pack) {
        const int64_t i1 = ic1 * j->mc < m ? ic1 * j->mc : m;
        SUF(cells)(j, cb, xb, yb, ic0 * j->mc, i1, n0, ncur, p0, kc);
        continue;
      }
      for (int64_t j0 = 0; j0 < ncur; j0 += nr) {
        const int cols = ncur - j0 < nr ? (int)(ncur - j0) : nr;
        SUF(fill_b)(bp + j0 * kc, nr, cols, kc, yb + p0 * yk + (n0 + j0) * yn, yk, yn);
      }
      for (int64_t ic = ic0; ic < ic1; ic++) {
        const int64_t m0 = ic * j->mc, mb = m - m0 < j->mc ? m - m0 : j->mc;
        if (!j->in_place)
          for (int64_t i0 = 0; i0 < mb; i0 += mr) {
            const int rows = mb - i0 < mr ? (int)(mb - i0) : mr;
            SUF(pack_a)(ap + i0 * kc, mr, rows, kc, xb + (m0 + i0) * xm + p0 * xk, xm, xk);
          }
        for (int64_t j0 = 0; j0 < ncur; j0 += nr)
          for (int64_t i0 = 0; i0 < mb; i0 += mr) {
            const int rows = mb - i0 < mr ? (int)(mb - i0) : mr;
            const int cols = ncur - j0 < nr ? (int)(ncur - j0) : nr;
            T *rp[MAX_TILE_ROWS];
            const T *ar[MAX_TILE_ROWS];
            const void *apanel = ap + i0 * kc;
            if (j->in_place) { /* the last row repeated past the edge: never stored */
              for (int q = 0; q < mr; q++)
                ar[q] = xb + (m0 + i0 + (q < rows ? q : rows - 1)) * xm + p0;
              apanel = ar;
            }
            _Alignas(64) T tile[MAX_TILE_VECTORS * VL];
            const bool own = !(j->direct && rows == mr && cols == nr);
            T *const corner = cb + (m0 + i0) * cm + (n0 + j0) * cn;
            for (int r = 0; r < mr; r++) rp[r] = own ? tile + r * nr : corner + r * cm;
            if (own)
              for (int r = 0; r < mr; r++)
                for (int q = 0; q < nr; q++)
                  tile[r * nr + q] = !fresh && r < rows && q < cols ? corner[r * cm + q * cn] : 0;
            (j->in_place ? j->tile->in_place : j->tile->packed)(kc, apanel, bp + j0 * kc, rp, fresh,
                                                                j->fma);
            if (own)
              for (int r = 0; r < rows; r++)
                for (int q = 0; q < cols; q++) corner[r * cm + q * cn] = tile[r * nr + q];
          }
      }
    }
  }
  if (pack && !j->par) free(pack);
}

static void SUF(run)(const int64_t *a, T *c, const T *x, const T *y, const cn_parallel *par) {
  const int64_t batch = a[CN_GEMM_ARG_BATCH], m = a[CN_GEMM_ARG_M], n = a[CN_GEMM_ARG_N];
  if (batch <= 0 || m <= 0 || n <= 0) return;
  int mr = (int)a[CN_GEMM_ARG_TILE_MR], nv = (int)a[CN_GEMM_ARG_TILE_NV];
  if (mr <= 0 || nv <= 0) { /* the default, narrowed to fewer columns for a narrow product */
    nv = n < DEFAULT_NV * VL ? (int)((n + VL - 1) / VL) : DEFAULT_NV;
    mr =
        DEFAULT_MR * DEFAULT_NV / nv < MAX_TILE_ROWS ? DEFAULT_MR * DEFAULT_NV / nv : MAX_TILE_ROWS;
  }
  const SUF(tile_kernels) *tile = NULL;
  for (size_t t = 0; t < sizeof SUF(tiles) / sizeof SUF(tiles)[0]; t++)
    if (SUF(tiles)[t].mr == mr && SUF(tiles)[t].nv == nv) tile = &SUF(tiles)[t];
  for (size_t t = 0; !tile && t < sizeof SUF(tiles) / sizeof SUF(tiles)[0]; t++)
    if (SUF(tiles)[t].mr == DEFAULT_MR && SUF(tiles)[t].nv == DEFAULT_NV) tile = &SUF(tiles)[t];
  const int64_t flags = a[CN_GEMM_ARG_FLAGS], kk = a[CN_GEMM_ARG_K];
  SUF(job) j = {.args = a, .c = c, .x = x, .y = y, .par = par, .tile = tile, .mr = tile->mr};
  j.nr = tile->nv * VL;
  j.kc = a[CN_GEMM_ARG_KC] < kk ? a[CN_GEMM_ARG_KC] : kk;
  j.nc = a[CN_GEMM_ARG_NC] < n ? a[CN_GEMM_ARG_NC] : n;
  if (j.kc < 1) j.kc = 1;
  /* the plan's row block, but small enough for four tasks when there are rows enough */
  int64_t mc = a[CN_GEMM_ARG_MC], quarter = (m + 3) / 4;
  if (quarter < mc) mc = quarter < 16 ? 16 : quarter;
  j.mc = (mc + j.mr - 1) / j.mr * j.mr;
  j.nic = (m + j.mc - 1) / j.mc;
  j.njc = (n + j.nc - 1) / j.nc;
  j.fma = flags & CN_GEMM_FMA;
  j.fresh = flags & CN_GEMM_FRESH;
  j.no_scratch = flags & CN_GEMM_NO_SCRATCH;
  j.direct = a[CN_GEMM_ARG_C_N] == 1;
  /* x in place when its steps are adjacent and a packed value would serve few columns */
  j.in_place = a[CN_GEMM_ARG_X_K] == 1 && n <= 128;
  const int64_t tasks = batch * j.njc * j.nic;
  if ((flags & CN_GEMM_PARALLEL) && par && tasks > 1)
    par->pool_for(par->pool, tasks, SUF(range), &j);
  else
    SUF(range)(&j, 0, tasks);
}

#undef VL
#undef UKR_STEPS
#undef AREAD_PACKED
#undef AREAD_ROWS
#undef UPDATE_EXACT
#undef UPDATE_FMA
#undef DEFINE_UKR
#undef DEFINE_TILE
#undef TILE_ENTRY
