/* One precision of the GEMM library's kernels (included by gemm_isa.c for float and double, with
 * T the type, SUF(name) the precision's names, V and VU its aligned and unaligned vectors, VFMA
 * the vector fused multiply-add when the instruction set has one, FMA_SCALAR the scalar one).
 *
 * The work of cgen_gemm.c's generated driver, with the GEMM's sizes and loops as values: the
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
#define UKR_STEPS(FROM, TO, AREAD, UPDATE, GUARD)                                                  \
  for (int64_t k = FROM; k < TO; k++) {                                                            \
    V bv[nv];                                                                                      \
    _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) bv[v] =                                   \
        *(const V *)(b + (k * nv + v) * VL);                                                       \
    _Pragma("GCC unroll 16") for (int r = 0; r < mr; r++) {                                        \
      GUARD                                                                                        \
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
      UKR_STEPS(0, kc, AREAD, UPDATE_FMA, )                                                        \
    } else {                                                                                       \
      UKR_STEPS(0, kc, AREAD, UPDATE_EXACT, )                                                      \
    }                                                                                              \
    _Pragma("GCC unroll 16") for (int r = 0; r < mr; r++)                                          \
            _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) *                                 \
        (VU *)(rows[r] + v * VL) = acc[r][v];                                                      \
  }

/* A triangle of steps (CN_GEMM_TRI_K or M): row r takes the steps k with f0 + r <= k < e0 + r
 * only: the steps some rows take, guarded per row, and between them the steps every row takes,
 * in ascending order (each row's order is the nest's; the accumulators start from the tile). */
#define RAGGED_GUARD                                                                               \
  if (k < f0 + r || k >= e0 + r) continue;
#define RAGGED_ALL(AREAD, UPDATE)                                                                  \
  UKR_STEPS(kb, mid, AREAD, UPDATE, RAGGED_GUARD)                                                  \
  UKR_STEPS(mid, full, AREAD, UPDATE, )                                                            \
  UKR_STEPS(rest, ke, AREAD, UPDATE, RAGGED_GUARD)
#define DEFINE_UKR_RAGGED(name, MR, NV, AREAD)                                                     \
  static void name(int64_t kc, const void *a, const T *restrict b, T *const *rows, int fma,        \
                   int64_t f0, int64_t e0) {                                                       \
    enum { mr = MR, nv = NV };                                                                     \
    V acc[mr][nv];                                                                                 \
    _Pragma("GCC unroll 16") for (int r = 0; r < mr; r++)                                          \
        _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) acc[r][v] =                           \
            (V) * (const VU *)(rows[r] + v * VL);                                                  \
    const int64_t kb = f0 > 0 ? f0 : 0, ke = e0 + mr - 1 < kc ? e0 + mr - 1 : kc;                  \
    const int64_t full_lo = f0 + mr - 1 > kb ? f0 + mr - 1 : kb, full = e0 < ke ? e0 : ke;         \
    const int64_t mid = full_lo < ke ? full_lo : ke, rest = full > mid ? full : mid;               \
    if (fma) {                                                                                     \
      RAGGED_ALL(AREAD, UPDATE_FMA)                                                                \
    } else {                                                                                       \
      RAGGED_ALL(AREAD, UPDATE_EXACT)                                                              \
    }                                                                                              \
    _Pragma("GCC unroll 16") for (int r = 0; r < mr; r++)                                          \
            _Pragma("GCC unroll 8") for (int v = 0; v < nv; v++) *                                 \
        (VU *)(rows[r] + v * VL) = acc[r][v];                                                      \
  }

/* A panel of x for the tile's rows: kc steps by mr rows (rows of them from x, zeros past); step k
 * of row q at x[row[q] + step(k)], step(k) = ktab ? ktab[k] : k * ks; row by row when the steps
 * are adjacent, else step by step (a convolution's steps, from a table), with mr a constant: a
 * runtime count of rows made packing a third of a convolution's time. */
#define DEFINE_PACK_A(name, MR)                                                                    \
  static void name(T *restrict panel, int rows, int64_t kc, const T *restrict x,                   \
                   const int64_t *row, int64_t ks, const int64_t *ktab) {                          \
    enum { mr = MR };                                                                              \
    if (!ktab && ks == 1) {                                                                        \
      for (int q = 0; q < mr; q++)                                                                 \
        if (q < rows)                                                                              \
          for (int64_t k = 0; k < kc; k++) panel[k * mr + q] = x[row[q] + k];                      \
        else                                                                                       \
          for (int64_t k = 0; k < kc; k++) panel[k * mr + q] = 0;                                  \
      return;                                                                                      \
    }                                                                                              \
    if (rows == mr) {                                                                              \
      for (int64_t k = 0; k < kc; k++) {                                                           \
        const int64_t step = ktab ? ktab[k] : k * ks;                                              \
        _Pragma("GCC unroll 16") for (int q = 0; q < mr; q++) panel[k * mr + q] =                  \
            x[row[q] + step];                                                                      \
      }                                                                                            \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t k = 0; k < kc; k++) {                                                             \
      const int64_t step = ktab ? ktab[k] : k * ks;                                                \
      for (int q = 0; q < mr; q++) panel[k * mr + q] = q < rows ? x[row[q] + step] : 0;            \
    }                                                                                              \
  }

#define DEFINE_TILE(MR, NV)                                                                        \
  DEFINE_UKR(SUF(ukr_p_##MR##_##NV), MR, NV, AREAD_PACKED)                                         \
  DEFINE_UKR(SUF(ukr_r_##MR##_##NV), MR, NV, AREAD_ROWS)                                           \
  DEFINE_UKR_RAGGED(SUF(ukr_tp_##MR##_##NV), MR, NV, AREAD_PACKED)                                 \
  DEFINE_UKR_RAGGED(SUF(ukr_tr_##MR##_##NV), MR, NV, AREAD_ROWS)                                   \
  DEFINE_PACK_A(SUF(pack_##MR##_##NV), MR)
CN_GEMM_TILES(DEFINE_TILE)

typedef void SUF(ukr_fn)(int64_t kc, const void *a, const T *restrict b, T *const *rows, int fresh,
                         int fma);
typedef void SUF(pack_fn)(T *restrict panel, int rows, int64_t kc, const T *restrict x,
                          const int64_t *row, int64_t ks, const int64_t *ktab);
typedef void SUF(ragged_fn)(int64_t kc, const void *a, const T *restrict b, T *const *rows, int fma,
                            int64_t f0, int64_t e0);
typedef struct {
  int mr, nv;
  SUF(ukr_fn) * packed, *in_place;
  SUF(ragged_fn) * ragged_packed, *ragged_in_place;
  SUF(pack_fn) * pack_a;
} SUF(tile_kernels);
#define TILE_ENTRY(MR, NV)                                                                         \
  {MR,                                                                                             \
   NV,                                                                                             \
   SUF(ukr_p_##MR##_##NV),                                                                         \
   SUF(ukr_r_##MR##_##NV),                                                                         \
   SUF(ukr_tp_##MR##_##NV),                                                                        \
   SUF(ukr_tr_##MR##_##NV),                                                                        \
   SUF(pack_##MR##_##NV)},
static const SUF(tile_kernels) SUF(tiles)[] = {CN_GEMM_TILES(TILE_ENTRY)};

/* ---- Packing ---- */

/* A panel of y: kc steps by nr columns (cols of them from y, zeros past); step k of column q at
 * y[step(k) + column(q)], step(k) = ktab ? ktab[k] : k * ks, column(q) = ctab ? ctab[q] : q * ns.
 * Steps adjacent (ks 1): column by column, in single precision on AVX by blocks of 8 columns by 8
 * steps transposed in registers (a weight stored [out][in]); else step by step. The values are
 * copied: the bits are the same either way. */
static void SUF(fill_b)(T *restrict panel, int nr, int cols, int64_t kc, const T *restrict y,
                        int64_t ks, const int64_t *ktab, int64_t ns, const int64_t *ctab) {
  if (ktab || ks != 1) {
    for (int64_t k = 0; k < kc; k++) {
      const T *row = y + (ktab ? ktab[k] : k * ks);
      if (ctab)
        for (int q = 0; q < cols; q++) panel[k * nr + q] = row[ctab[q]];
      else
        for (int q = 0; q < cols; q++) panel[k * nr + q] = row[q * ns];
      for (int q = cols; q < nr; q++) panel[k * nr + q] = 0;
    }
    return;
  }
  const T *column[MAX_TILE_VECTORS * VL];
  for (int q = 0; q < cols; q++) column[q] = y + (ctab ? ctab[q] : q * ns);
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
      for (int i = 0; i < 8; i++) r[i] = *(const v8 *)&column[q0 + i][k];
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
      for (int64_t kr = k; kr < kc; kr++) panel[kr * nr + q] = q < cols ? column[q][kr] : 0;
  }
}

/* ---- Tasks ---- */

typedef struct {
  T *c;
  const T *x, *y;
  const cn_parallel *par;
  const SUF(tile_kernels) * tile;
  int mr, nr;
  int64_t m, n, k, mc, kc, nc, nic, njc;
  bool fma, fresh, in_place, direct, no_scratch;
  cn_gemm_tri tri; /* a triangle of cells or of steps (loops.h), its bound's offset */
  int64_t tri_offset;
  /* the groups' offsets: rows in c and x, columns in c and y, steps in x and y, batch points */
  walk c_m, c_n, x_m, x_k, y_k, y_n, c_b, x_b, y_b;
} SUF(job);

/* Rows [i0, i1) and columns [n0, n0 + ncur) of one batch point, steps [p0, p0 + kc), one cell
 * after the other (no scratch memory). */
static void SUF(cells)(const SUF(job) * j, T *cb, const T *xb, const T *yb, int64_t i0, int64_t i1,
                       int64_t n0, int64_t ncur, int64_t p0, int64_t kc) {
  for (int64_t i = i0; i < i1; i++)
    for (int64_t n = n0; n < n0 + ncur; n++) {
      if (j->tri == CN_GEMM_TRI_N && n >= i + j->tri_offset) break; /* past the triangle */
      int64_t from = p0, to = p0 + kc; /* a triangle of steps: the row's own */
      if (j->tri == CN_GEMM_TRI_K && to > i + j->tri_offset) to = i + j->tri_offset;
      if (j->tri == CN_GEMM_TRI_M && from < i - j->tri_offset + 1) from = i - j->tri_offset + 1;
      T *cell = cb + walk_at(&j->c_m, i) + walk_at(&j->c_n, n);
      const T *xr = xb + walk_at(&j->x_m, i), *yc = yb + walk_at(&j->y_n, n);
      T sum = j->fresh && p0 == 0 ? 0 : *cell;
      for (int64_t k = from; k < to; k++) {
        T xv = xr[walk_at(&j->x_k, k)], yv = yc[walk_at(&j->y_k, k)];
        sum = j->fma ? FMA_SCALAR(xv, yv, sum) : sum + xv * yv;
      }
      *cell = sum;
    }
}

/* Task t is batch point t / (njc * nic), column block t / nic % njc, row block t % nic;
 * consecutive tasks of one batch point and column block share the packing of y. The scratch:
 * x's block, y's block, then the offsets of the block's steps in x and y, of its rows in c and x
 * and of its columns in c and y (walk_fill: once per block, not per tile). */
static void SUF(range)(void *envp, int64_t lo, int64_t hi) {
  const SUF(job) *j = envp;
  const int mr = j->mr, nr = j->nr;
  const int64_t unit = sizeof(T) < 64 ? 64 / (int64_t)sizeof(T) : 1;
  const int64_t asize = (j->mc * j->kc + unit - 1) / unit * unit;
  const int64_t bsize = (j->kc * ((j->nc + nr - 1) / nr * nr) + unit - 1) / unit * unit;
  const size_t tables = 2 * (size_t)(j->kc + j->mc + j->nc);
  const size_t bytes =
      ((size_t)(asize + bsize) * sizeof(T) + tables * sizeof(int64_t) + 63) / 64 * 64;
  void *const scratch = j->no_scratch ? NULL
                        : j->par      ? j->par->scratch(j->par->pool, bytes)
                                      : aligned_alloc(64, bytes);
  T *const ap = scratch, *const bp = scratch ? ap + asize : NULL;
  int64_t *const kx = scratch ? (int64_t *)(bp + bsize) : NULL;
  int64_t *const ky = kx ? kx + j->kc : NULL, *const crow = ky ? ky + j->kc : NULL;
  int64_t *const xrow = crow ? crow + j->mc : NULL, *const ccol = xrow ? xrow + j->mc : NULL;
  int64_t *const ycol = ccol ? ccol + j->nc : NULL;
  for (int64_t t = lo; t < hi;) {
    const int64_t ic0 = t % j->nic, group = t / j->nic;
    const int64_t ic1 = j->nic - ic0 < hi - t ? j->nic : ic0 + (hi - t);
    t += ic1 - ic0;
    const int64_t b = group / j->njc, n0 = group % j->njc * j->nc;
    const int64_t ncur = j->n - n0 < j->nc ? j->n - n0 : j->nc;
    T *const cb = j->c + walk_at(&j->c_b, b);
    const T *const xb = j->x + walk_at(&j->x_b, b), *const yb = j->y + walk_at(&j->y_b, b);
    if (scratch) {
      walk_fill(&j->c_n, n0, ncur, ccol);
      walk_fill(&j->y_n, n0, ncur, ycol);
    }
    for (int64_t p0 = 0; p0 < j->k; p0 += j->kc) {
      const int64_t kc = j->k - p0 < j->kc ? j->k - p0 : j->kc;
      const int fresh = j->fresh && p0 == 0;
      if (!scratch) {
        const int64_t i1 = ic1 * j->mc < j->m ? ic1 * j->mc : j->m;
        SUF(cells)(j, cb, xb, yb, ic0 * j->mc, i1, n0, ncur, p0, kc);
        continue;
      }
      /* the block's steps: x and y from their first step, offsets from there or from a table */
      const T *const xs = xb + (j->x_k.linear ? walk_at(&j->x_k, p0) : 0);
      const T *const ys = yb + (j->y_k.linear ? walk_at(&j->y_k, p0) : 0);
      if (!j->x_k.linear) walk_fill(&j->x_k, p0, kc, kx);
      if (!j->y_k.linear) walk_fill(&j->y_k, p0, kc, ky);
      for (int64_t j0 = 0; j0 < ncur; j0 += nr) {
        const int cols = ncur - j0 < nr ? (int)(ncur - j0) : nr;
        SUF(fill_b)
        (bp + j0 * kc, nr, cols, kc, ys + (j->y_n.linear ? ycol[j0] : 0), j->y_k.stride,
         j->y_k.linear ? NULL : ky, j->y_n.stride, j->y_n.linear ? NULL : ycol + j0);
      }
      for (int64_t ic = ic0; ic < ic1; ic++) {
        const int64_t m0 = ic * j->mc, mb = j->m - m0 < j->mc ? j->m - m0 : j->mc;
        walk_fill(&j->c_m, m0, mb, crow);
        walk_fill(&j->x_m, m0, mb, xrow);
        if (!j->in_place)
          for (int64_t i0 = 0; i0 < mb; i0 += mr) {
            const int rows = mb - i0 < mr ? (int)(mb - i0) : mr;
            j->tile->pack_a(ap + i0 * kc, rows, kc, xs, xrow + i0, j->x_k.stride,
                            j->x_k.linear ? NULL : kx);
          }
        for (int64_t j0 = 0; j0 < ncur; j0 += nr)
          for (int64_t i0 = 0; i0 < mb; i0 += mr) {
            const int rows = mb - i0 < mr ? (int)(mb - i0) : mr;
            const int cols = ncur - j0 < nr ? (int)(ncur - j0) : nr;
            SUF(ukr_fn) *const kernel = j->in_place ? j->tile->in_place : j->tile->packed;
            T *rp[MAX_TILE_ROWS];
            const T *ar[MAX_TILE_ROWS];
            const void *apanel = ap + i0 * kc;
            if (j->in_place) { /* the last row repeated past the edge: never stored */
              for (int q = 0; q < mr; q++) ar[q] = xs + xrow[i0 + (q < rows ? q : rows - 1)];
              apanel = ar;
            }
            const int64_t *const row = crow + i0, *const col = ccol + j0;
            /* a triangle: row r's cells q < diag + r, or its steps f0 + r <= k < e0 + r; a tile
             * with none is left as it is */
            int64_t diag = nr, f0 = 0, e0 = 0;
            if (j->tri == CN_GEMM_TRI_N) {
              diag = m0 + i0 + j->tri_offset - n0 - j0;
              if (diag + rows - 1 <= 0) continue;
            } else if (j->tri == CN_GEMM_TRI_K) {
              f0 = -mr;
              e0 = m0 + i0 + j->tri_offset - p0;
              if (e0 + rows - 1 <= 0) continue;
            } else if (j->tri == CN_GEMM_TRI_M) {
              f0 = m0 + i0 - j->tri_offset + 1 - p0;
              e0 = kc + mr;
              if (f0 >= kc) continue;
            }
            const bool steps = j->tri == CN_GEMM_TRI_K || j->tri == CN_GEMM_TRI_M;
            SUF(ragged_fn) *const ragged =
                j->in_place ? j->tile->ragged_in_place : j->tile->ragged_packed;
            if (j->direct && rows == mr && cols == nr && nr <= diag) {
              for (int r = 0; r < mr; r++) rp[r] = cb + row[r] + col[0];
              if (steps)
                ragged(kc, apanel, bp + j0 * kc, rp, j->fma, f0, e0);
              else
                kernel(kc, apanel, bp + j0 * kc, rp, fresh, j->fma);
              continue;
            }
            /* an edge, columns apart in c, or a diagonal: row r's first `take` cells of c in and
             * out of a tile of its own (along c's row where its columns are adjacent) */
            _Alignas(64) T tile[MAX_TILE_VECTORS * VL];
            for (int r = 0; r < mr; r++) {
              T *const t = rp[r] = tile + r * nr;
              const int64_t limit = cols < diag + r ? cols : diag + r;
              const int take = r < rows && limit > 0 ? (int)limit : 0;
              int q = 0; /* (row[r] is set for the tile's rows only: no pointer past them) */
              if (!fresh && take > 0 && j->direct)
                for (const T *const from = cb + row[r] + col[0]; q < take; q++) t[q] = from[q];
              else if (!fresh && take > 0)
                for (; q < take; q++) t[q] = cb[row[r] + col[q]];
              for (; q < nr; q++) t[q] = 0;
            }
            if (steps)
              ragged(kc, apanel, bp + j0 * kc, rp, j->fma, f0, e0);
            else
              kernel(kc, apanel, bp + j0 * kc, rp, fresh, j->fma);
            for (int r = 0; r < rows; r++) {
              const T *const t = tile + r * nr;
              const int64_t limit = cols < diag + r ? cols : diag + r;
              if (j->direct)
                for (int64_t q = 0; q < limit; q++) cb[row[r] + col[0] + q] = t[q];
              else
                for (int64_t q = 0; q < limit; q++) cb[row[r] + col[q]] = t[q];
            }
          }
      }
    }
  }
  if (scratch && !j->par) free(scratch);
}

static void SUF(run)(const int64_t *a, T *c, const T *x, const T *y, const cn_parallel *par) {
  const int64_t batch = a[CN_GEMM_ARG_BATCH], m = a[CN_GEMM_ARG_M], n = a[CN_GEMM_ARG_N];
  if (batch <= 0 || m <= 0 || n <= 0) return;
  int mr = (int)a[CN_GEMM_ARG_TILE_MR], nv = (int)a[CN_GEMM_ARG_TILE_NV];
  const cn_gemm_tri tri = (cn_gemm_tri)a[CN_GEMM_ARG_TRI];
  if ((mr <= 0 || nv <= 0) && tri == CN_GEMM_TRI_N) {
    /* one vector of columns: the diagonal crosses few cells of a tile, more lie below it */
    nv = 1;
    mr = DEFAULT_MR * DEFAULT_NV < MAX_TILE_ROWS ? DEFAULT_MR * DEFAULT_NV : MAX_TILE_ROWS;
  } else if (mr <= 0 || nv <= 0) { /* the default, narrowed to fewer columns for a narrow one */
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
  SUF(job) j = {.c = c, .x = x, .y = y, .par = par, .tile = tile, .mr = tile->mr, .m = m, .n = n};
  j.k = kk;
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
  j.tri = tri;
  j.tri_offset = a[CN_GEMM_ARG_TRI_OFFSET];
  walk_of(a, CN_GEMM_M, CN_GEMM_LOOP_C, &j.c_m);
  walk_of(a, CN_GEMM_N, CN_GEMM_LOOP_C, &j.c_n);
  walk_of(a, CN_GEMM_M, CN_GEMM_LOOP_X, &j.x_m);
  walk_of(a, CN_GEMM_K, CN_GEMM_LOOP_X, &j.x_k);
  walk_of(a, CN_GEMM_K, CN_GEMM_LOOP_Y, &j.y_k);
  walk_of(a, CN_GEMM_N, CN_GEMM_LOOP_Y, &j.y_n);
  walk_of(a, CN_GEMM_BATCH, CN_GEMM_LOOP_C, &j.c_b);
  walk_of(a, CN_GEMM_BATCH, CN_GEMM_LOOP_X, &j.x_b);
  walk_of(a, CN_GEMM_BATCH, CN_GEMM_LOOP_Y, &j.y_b);
  j.direct = j.c_n.linear && j.c_n.stride == 1;
  /* x in place when its steps are adjacent and a packed value would serve few columns */
  j.in_place = j.x_k.linear && j.x_k.stride == 1 && n <= 128;
  const int64_t tasks = batch * j.njc * j.nic;
  /* the pool chooses between sharing and running alone per GEMM (its arguments, a static array
   * of the generated code), not once for every GEMM the one task function runs */
  if ((flags & CN_GEMM_PARALLEL) && par && tasks > 1 && par->pool_for_site)
    par->pool_for_site(par->pool, tasks, SUF(range), &j, a);
  else if ((flags & CN_GEMM_PARALLEL) && par && tasks > 1)
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
#undef DEFINE_UKR_RAGGED
#undef RAGGED_GUARD
#undef RAGGED_ALL
#undef DEFINE_TILE
#undef DEFINE_PACK_A
#undef TILE_ENTRY
