/* Generated C for GEMM-class nests run by their plans (CN_LL_GEMM, loops.h): the nest
 * c[w] := c[w] + x[p] * y[q] becomes a function that packs x into panels of MR rows and y into
 * panels of NR columns (contiguous, aligned, zero past the edges), blocked by the plan's mc x kc x
 * nc, and runs a micro-kernel holding an MR x NR tile of c in vector registers (GCC/clang vector
 * extensions) across a block of the reduction; the blocks of cells are tasks for the thread pool.
 *
 * Invariants: every cell of c gets its updates in the nest's K order — the reduction blocks run
 * in order, the steps inside a block in order, and a cell is in one task only — each update
 * c + x * y with the product and the sum rounded apart (exact) or one fused multiply-add (fma),
 * so the bits depend neither on the tile, the blocks nor the threads: the same as the
 * interpreter running the plan's nest. The loops of a group (M, N, K, batch) are flattened
 * row-major in nest order; an access's offset for a flat index is linear when the group's loops
 * are contiguous in it (one multiplication), else summed over the loops by division and
 * remainder (per row, column or reduction step of a block, never per update). An edge tile (fewer
 * than MR rows or NR columns) or a c whose columns are not adjacent goes through a tile of its
 * own: gathered, computed, scattered. Scratch: one block of each operand per task range,
 * malloc'd per call (aligned_alloc); without memory a range computes its cells one by one in the
 * same order (a cold function, compiled for size). The register tile comes from the plan or, when
 * the plan leaves it to the backend, from the instruction set the C compiler targets (its
 * predefined macros), as does the vector width; every identifier starts with cn_, which no user
 * name does. Compile time (issue 29): a GEMM calls its micro-kernel once (direct and edge tiles
 * alike), and the code that needs no constant of the GEMM (the edge tile's gather and scatter
 * where c's columns are adjacent, the transposed fill of y) is one function per precision in the
 * file's preamble, not one copy per GEMM. A GEMM the GEMM library runs (gemm_lib.h: single or
 * double precision) keeps this driver only for -DCN_STANDALONE (an exported model) and otherwise
 * calls the library (see "The GEMM library" below). */
#include "backend/cgen.h"
#include "backend/gemm_lib.h"

#include <string.h>

/* The part of the preamble every GEMM needs: vector width, register count and default tile of
 * the instruction set compiled for. No intrinsics header on x86: <immintrin.h> alone took half of
 * a GEMM file's compile time (0.27 of 0.55 s with gcc 12), so vectors are the compilers' vector
 * extensions, their shuffles and the builtins that gcc's and clang's intrinsics call (the same
 * names and operands in both). aarch64 keeps <arm_neon.h>: its FMA builtins differ between the
 * compilers, and a lane-by-lane fma is not one fmla per update in clang's micro-kernels. */
static const char preamble_common[] =
    "/* ---- GEMM micro-kernels: vector width and register tile of the target ---- */\n"
    "#include <stdlib.h>\n"
    "#pragma GCC diagnostic ignored \"-Wunknown-pragmas\"\n"
    "#if defined(__AVX512F__)\n"
    "#define CN_VBYTES 64\n"
    "#define CN_VREGS 32\n"
    "#elif defined(__AVX__)\n"
    "#define CN_VBYTES 32\n"
    "#define CN_VREGS 16\n"
    "#elif defined(__aarch64__) && defined(__ARM_NEON)\n"
    "#include <arm_neon.h>\n"
    "#define CN_VBYTES 16\n"
    "#define CN_VREGS 32\n"
    "#else\n"
    "#define CN_VBYTES 16 /* generic vectors: the compiler lowers them to what the target has */\n"
    "#define CN_VREGS 16\n"
    "#endif\n"
    "#if defined(__AVX__) /* 8 x 8 transposes of single precision (fill_b_transposed) */\n"
    "typedef float cn_v8f32u __attribute__((vector_size(32), aligned(4), __may_alias__));\n"
    "typedef int cn_v8i32 __attribute__((vector_size(32)));\n"
    "#if defined(__clang__)\n"
    "#define cn_shuffle8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)\n"
    "#else\n"
    "#define cn_shuffle8(a, b, ...) __builtin_shuffle(a, b, (cn_v8i32){__VA_ARGS__})\n"
    "#endif\n"
    "#define cn_unpacklo8(a, b) cn_shuffle8(a, b, 0, 8, 1, 9, 4, 12, 5, 13)\n"
    "#define cn_unpackhi8(a, b) cn_shuffle8(a, b, 2, 10, 3, 11, 6, 14, 7, 15)\n"
    "#define cn_shuffle8_44(a, b) cn_shuffle8(a, b, 0, 1, 8, 9, 4, 5, 12, 13)\n"
    "#define cn_shuffle8_ee(a, b) cn_shuffle8(a, b, 2, 3, 10, 11, 6, 7, 14, 15)\n"
    "#define cn_lows8(a, b) cn_shuffle8(a, b, 0, 1, 2, 3, 8, 9, 10, 11)\n"
    "#define cn_highs8(a, b) cn_shuffle8(a, b, 4, 5, 6, 7, 12, 13, 14, 15)\n"
    "#endif\n"
    "/* rows x vectors of columns: accumulators, a row of y's panel and a broadcast in registers "
    "*/\n"
    "#if CN_VREGS >= 32\n"
    "#define CN_GEMM_MR 6\n"
    "#define CN_GEMM_NV 4\n"
    "#else\n"
    "#define CN_GEMM_MR 6\n"
    "#define CN_GEMM_NV 2\n"
    "#endif\n"
    "/* packing scratch: the pool's buffer of the thread, kept across runs, else one per call;\n"
    "   CN_GEMM_NO_MEMORY (tests) makes every allocation fail */\n"
    "#ifndef CN_GEMM_NO_MEMORY\n"
    "#define cn_gemm_alloc(par, bytes) \\\n"
    "  ((par) ? (par)->scratch((par)->pool, bytes) : aligned_alloc(64, bytes))\n"
    "#define cn_gemm_free(par, data) ((par) ? (void)0 : free(data))\n"
    "#else\n"
    "#define cn_gemm_alloc(par, bytes) ((void)(par), (void *)0)\n"
    "#define cn_gemm_free(par, data) ((void)(par), (void)(data))\n"
    "#endif\n";

/* The part of one precision: its vector types and fused multiply-add on vectors (on x86 the
 * builtins of _mm512_fmadd_ps / _mm256_fmadd_ps and their double forms: a lane-by-lane fma, which
 * gcc also makes one vfmadd, loses the broadcast operand of the 16 x 1 tile to a vpermd). */
static const char preamble_prec[] =
    "#pragma GCC diagnostic push /* exact mode has no fused multiply-add to call */\n"
    "#pragma GCC diagnostic ignored \"-Wunused-function\"\n"
    "typedef @T@ cn_v@P@ __attribute__((vector_size(CN_VBYTES), __may_alias__));\n"
    "typedef @T@ cn_v@P@u __attribute__((vector_size(CN_VBYTES), aligned(sizeof(@T@)), "
    "__may_alias__));\n"
    "static inline cn_v@P@ cn_vfma_@P@(cn_v@P@ a, cn_v@P@ b, cn_v@P@ c) {\n"
    "#if defined(__AVX512F__) /* -1: every lane; 4: the current rounding */\n"
    "  return __builtin_ia32_vfmadd@X86@512_mask(a, b, c, -1, 4);\n"
    "#elif defined(__AVX__) && defined(__FMA__)\n"
    "  return __builtin_ia32_vfmadd@X86@256(a, b, c);\n"
    "#elif defined(__aarch64__) && defined(__ARM_NEON)\n"
    "  return (cn_v@P@)vfmaq_@NEON@((@NEONT@)c, (@NEONT@)a, (@NEONT@)b);\n"
    "#else\n"
    "  for (int l = 0; l < (int)(sizeof a / sizeof a[0]); l++)\n"
    "    c[l] = __builtin_fma@F@(a[l], b[l], c[l]);\n"
    "  return c;\n"
    "#endif\n"
    "}\n"
    "@FILLT@"
    "/* an edge tile's cells in and out of c, shared by the file's GEMMs of this precision whose\n"
    "   columns are adjacent in c: row r of the tile is c[row[r] + q] */\n"
    "__attribute__((noinline)) static void cn_gemm_gather_@P@(\n"
    "    @T@ *restrict cn_tile, int cn_mr, int cn_nr, int cn_rows, int cn_cols,\n"
    "    const @T@ *restrict cn_c, const int64_t *cn_row, int cn_load) {\n"
    "  for (int cn_r = 0; cn_r < cn_mr; cn_r++) {\n"
    "    @T@ *const cn_t = cn_tile + cn_r * cn_nr;\n"
    "    int cn_q = 0;\n"
    "    if (cn_load && cn_r < cn_rows)\n"
    "      for (const @T@ *const cn_cr = cn_c + cn_row[cn_r]; cn_q < cn_cols; cn_q++) cn_t[cn_q] = "
    "cn_cr[cn_q];\n"
    "    for (; cn_q < cn_nr; cn_q++) cn_t[cn_q] = 0;\n"
    "  }\n"
    "}\n"
    "__attribute__((noinline)) static void cn_gemm_scatter_@P@(\n"
    "    @T@ *restrict cn_c, const int64_t *cn_row, int cn_rows, int cn_cols,\n"
    "    const @T@ *restrict cn_tile, int cn_nr) {\n"
    "  for (int cn_r = 0; cn_r < cn_rows; cn_r++)\n"
    "    for (int cn_q = 0; cn_q < cn_cols; cn_q++)\n"
    "      cn_c[cn_row[cn_r] + cn_q] = cn_tile[cn_r * cn_nr + cn_q];\n"
    "}\n"
    "#pragma GCC diagnostic pop\n";

/* Rounding of a vector of float values to a narrow precision and back, as a store and a load
 * round (builtins.h): per update in a tile of such a precision, exactly as the nest stores each
 * update. Half has the instruction set's conversions (round to nearest even, like
 * cn_store_half; the builtins behind _mm512_cvtps_ph and _mm256_cvtps_ph, with the same
 * operands, in gcc and clang alike); the others go lane by lane through the prelude's. */
static const char preamble_round[] = "static inline cn_vf32 cn_vround_@LC@(cn_vf32 v) {\n"
                                     "@HW@"
                                     "  for (int l = 0; l < (int)(sizeof v / sizeof v[0]); l++) "
                                     "v[l] = cn_load_@LC@(cn_store_@LC@(v[l]));\n"
                                     "  return v;\n"
                                     "@HWEND@"
                                     "}\n";

static const char round_half_hw[] =
    "#if defined(__AVX512F__) /* 8: to nearest, no exceptions; 4: the current rounding */\n"
    "  typedef short cn_v16i16 __attribute__((vector_size(32)));\n"
    "  return __builtin_ia32_vcvtph2ps512_mask(\n"
    "      __builtin_ia32_vcvtps2ph512_mask(v, 8, (cn_v16i16){0}, -1), (cn_vf32){0}, -1, 4);\n"
    "#elif defined(__AVX__) && defined(__F16C__)\n"
    "  return __builtin_ia32_vcvtph2ps256(__builtin_ia32_vcvtps2ph256(v, 8));\n"
    "#else\n";

/* The micro-kernel: the tile's rows start at rows[r] (NR adjacent cells each), a is a panel of
 * MR rows by kc steps, b one of kc steps by NR columns. With a triangle of steps (cn_ll_gemm.tri
 * K or M) row r takes the steps k with f0 + r <= k < e0 + r only (@KLOOP@: ragged steps where
 * some rows take them, the rest as a plain loop, ascending: each row's order is the nest's). */
static const char micro_kernel[] =
    "static inline void cn_ukr_@N@(int64_t cn_kc, @ATYPE@ cn_a, "
    "const @T@ *restrict cn_b,\n"
    "                            @T@ *const *cn_rows@FRESHP@@RAGGEDP@) {\n"
    "  enum { cn_mr = cn_g@N@_mr, cn_nv = cn_g@N@_nv, cn_vl = CN_VBYTES / (int)sizeof(@T@) };\n"
    "  cn_v@P@ cn_acc[cn_mr][cn_nv];\n"
    "#pragma GCC unroll 16\n"
    "  for (int cn_r = 0; cn_r < cn_mr; cn_r++)\n"
    "#pragma GCC unroll 8\n"
    "    for (int cn_v = 0; cn_v < cn_nv; cn_v++)\n"
    "      cn_acc[cn_r][cn_v] = @FRESHV@*(const cn_v@P@u *)(cn_rows[cn_r] + cn_v * cn_vl);\n"
    "@KLOOP@"
    "#pragma GCC unroll 16\n"
    "  for (int cn_r = 0; cn_r < cn_mr; cn_r++)\n"
    "#pragma GCC unroll 8\n"
    "    for (int cn_v = 0; cn_v < cn_nv; cn_v++)\n"
    "      *(cn_v@P@u *)(cn_rows[cn_r] + cn_v * cn_vl) = cn_acc[cn_r][cn_v];\n"
    "}\n";

/* One reduction step of the micro-kernel: a row of b's panel, then each row's update (@GUARD@:
 * a ragged step's rows that do not take it skip it). */
static const char kernel_step[] =
    "    cn_v@P@ cn_bv[cn_nv];\n"
    "#pragma GCC unroll 8\n"
    "    for (int cn_v = 0; cn_v < cn_nv; cn_v++)\n"
    "      cn_bv[cn_v] = *(const cn_v@P@ *)(cn_b + (cn_k * cn_nv + cn_v) * cn_vl);\n"
    "#pragma GCC unroll 16\n"
    "    for (int cn_r = 0; cn_r < cn_mr; cn_r++) {\n"
    "@GUARD@"
    "      const @T@ cn_s = @AREAD@;\n"
    "#pragma GCC unroll 8\n"
    "      for (int cn_v = 0; cn_v < cn_nv; cn_v++)\n"
    "        cn_acc[cn_r][cn_v] = @UPDATE@;\n"
    "    }\n";

static const char steps_plain[] = "  for (int64_t cn_k = 0; cn_k < cn_kc; cn_k++) {\n"
                                  "@STEP@"
                                  "  }\n";

/* Row r takes [f0 + r, e0 + r): steps [kb, mid) and [rest, ke) are ragged, [mid, full) every
 * row's. */
static const char steps_ragged[] =
    "  const int64_t cn_kb = cn_f0 > 0 ? cn_f0 : 0;\n"
    "  const int64_t cn_ke = cn_e0 + cn_mr - 1 < cn_kc ? cn_e0 + cn_mr - 1 : cn_kc;\n"
    "  const int64_t cn_full_lo = cn_f0 + cn_mr - 1 > cn_kb ? cn_f0 + cn_mr - 1 : cn_kb;\n"
    "  const int64_t cn_full = cn_e0 < cn_ke ? cn_e0 : cn_ke;\n"
    "  const int64_t cn_mid = cn_full_lo < cn_ke ? cn_full_lo : cn_ke;\n"
    "  const int64_t cn_rest = cn_full > cn_mid ? cn_full : cn_mid;\n"
    "  for (int64_t cn_k = cn_kb; cn_k < cn_mid; cn_k++) {\n"
    "@RAGGED@"
    "  }\n"
    "  for (int64_t cn_k = cn_mid; cn_k < cn_full; cn_k++) {\n"
    "@STEP@"
    "  }\n"
    "  for (int64_t cn_k = cn_rest; cn_k < cn_ke; cn_k++) {\n"
    "@RAGGED@"
    "  }\n";

/* A range of tasks' cells one by one, without scratch memory (rare: cold, so compiled for size
 * and out of the range's way; inline it was a tenth of a training step's compile time). */
static const char cells_by_one[] =
    "__attribute__((cold, noinline)) static void cn_gemm_cells_@N@(\n"
    "    @S@ *restrict cn_cb, const @S@ *restrict cn_xb, const @S@ *restrict cn_yb,\n"
    "    const int64_t *cn_kx, const int64_t *cn_ky, int64_t cn_ic0, int64_t cn_ic1, int64_t "
    "cn_n0,\n"
    "    int64_t cn_nc, int64_t cn_p0, int64_t cn_kc) {\n"
    "  enum { cn_mc = cn_g@N@_mc };\n"
    "  (void)cn_p0;\n"
    "  for (int64_t cn_i = cn_ic0 * cn_mc; cn_i < @M@ && cn_i < cn_ic1 * cn_mc; cn_i++)\n"
    "    for (int64_t cn_j = cn_n0; cn_j < cn_n0 + cn_nc@TRIJ@; cn_j++) {\n"
    "      @S@ *const cn_cell = cn_cb + @MC(cn_i)@ + @NC(cn_j)@;\n"
    "      const @S@ *const cn_xr = cn_xb + @MX(cn_i)@, *const cn_yc = cn_yb + @NY(cn_j)@;\n"
    "      @T@ cn_sum = @FRESHS@@LOAD(*cn_cell)@;\n"
    "      for (int64_t cn_k = @KFROM@; cn_k < cn_kc@KTO@; cn_k++)\n"
    "        cn_sum = @SCALAR(cn_sum, cn_xr[cn_kx[cn_k]], cn_yc[cn_ky[cn_k]])@;\n"
    "      @STORE(*cn_cell, cn_sum)@;\n"
    "    }\n"
    "}\n";

/* A range of tasks: task t is the batch point, column block and row block
 * (t / (njc * nic), t / nic % njc, t % nic); consecutive tasks of one batch point and column
 * block share the packing of y. */
static const char task_range[] =
    "static void cn_gemm_range_@N@(@S@ *restrict cn_c, const @S@ *restrict cn_x,\n"
    "                              const @S@ *restrict cn_y, const cn_par_t *cn_par, int64_t "
    "cn_lo,\n"
    "                              int64_t cn_hi) {\n"
    "  enum { cn_mr = cn_g@N@_mr, cn_nr = cn_g@N@_nr, cn_mc = cn_g@N@_mc, cn_kcb = cn_g@N@_kc };\n"
    "  enum { cn_ncb = cn_g@N@_nc, cn_unit = sizeof(@T@) < 64 ? 64 / sizeof(@T@) : 1 };\n"
    "  const int64_t cn_nic = (@M@ + cn_mc - 1) / cn_mc, cn_njc = (@NN@ + cn_ncb - 1) / cn_ncb;\n"
    "  const int64_t cn_asize = (cn_mc * cn_kcb + cn_unit - 1) / cn_unit * cn_unit;\n"
    "  const int64_t cn_bsize = cn_kcb * ((cn_ncb + cn_nr - 1) / cn_nr * cn_nr);\n"
    "  const size_t cn_bytes = ((size_t)(cn_asize + cn_bsize) * sizeof(@T@) + 63) / 64 * 64;\n"
    "  @T@ *const cn_pack = cn_gemm_alloc(cn_par, cn_bytes);\n"
    "  @T@ *const cn_ap = cn_pack, *const cn_bp = cn_pack ? cn_pack + cn_asize : NULL;\n"
    "  (void)cn_ap; /* not read when x is read in place */\n"
    "  int64_t cn_kx[cn_kcb], cn_ky[cn_kcb];\n"
    "  for (int64_t cn_t = cn_lo; cn_t < cn_hi;) {\n"
    "    const int64_t cn_ic0 = cn_t % cn_nic, cn_group = cn_t / cn_nic;\n"
    "    const int64_t cn_ic1 = cn_nic - cn_ic0 < cn_hi - cn_t ? cn_nic : cn_ic0 + (cn_hi - "
    "cn_t);\n"
    "    cn_t += cn_ic1 - cn_ic0;\n"
    "    const int64_t cn_b = cn_group / cn_njc, cn_n0 = cn_group % cn_njc * cn_ncb;\n"
    "    const int64_t cn_nc = @NN@ - cn_n0 < cn_ncb ? @NN@ - cn_n0 : cn_ncb;\n"
    "    @S@ *const cn_cb = cn_c + @BC@;\n"
    "    const @S@ *const cn_xb = cn_x + @BX@, *const cn_yb = cn_y + @BY@;\n"
    "    (void)cn_b;\n"
    "    for (int64_t cn_p0 = 0; cn_p0 < @K@; cn_p0 += cn_kcb) {\n"
    "      const int64_t cn_kc = @K@ - cn_p0 < cn_kcb ? @K@ - cn_p0 : cn_kcb;\n"
    "      for (int64_t cn_k = 0; cn_k < cn_kc; cn_k++) {\n"
    "        cn_kx[cn_k] = @KX(cn_p0 + cn_k)@;\n"
    "        cn_ky[cn_k] = @KY(cn_p0 + cn_k)@;\n"
    "      }\n"
    "      if (!cn_pack) { /* no scratch memory: cell by cell, in the same order */\n"
    "        cn_gemm_cells_@N@(cn_cb, cn_xb, cn_yb, cn_kx, cn_ky, cn_ic0, cn_ic1, cn_n0, cn_nc, "
    "cn_p0, "
    "cn_kc);\n"
    "        continue;\n"
    "      }\n"
    "      /* y's block: panels of cn_nr columns by cn_kc steps, zeros past the last column */\n"
    "      for (int64_t cn_j0 = 0; cn_j0 < cn_nc; cn_j0 += cn_nr) {\n"
    "        @T@ *const cn_panel = cn_bp + cn_j0 * cn_kc;\n"
    "        const int cn_cols = cn_nc - cn_j0 < cn_nr ? (int)(cn_nc - cn_j0) : cn_nr;\n"
    "@COLS@"
    "@FILLB@"
    "      }\n"
    "      for (int64_t cn_ic = cn_ic0; cn_ic < cn_ic1; cn_ic++) {\n"
    "        const int64_t cn_m0 = cn_ic * cn_mc, cn_mb = @M@ - cn_m0 < cn_mc ? @M@ - cn_m0 : "
    "cn_mc;\n"
    "@PACKA@"
    "        for (int64_t cn_j0 = 0; cn_j0 < cn_nc; cn_j0 += cn_nr)\n"
    "          for (int64_t cn_i0 = 0; cn_i0 < cn_mb; cn_i0 += cn_mr) {\n"
    "            const int cn_rows = cn_mb - cn_i0 < cn_mr ? (int)(cn_mb - cn_i0) : cn_mr;\n"
    "            const int cn_cols = cn_nc - cn_j0 < cn_nr ? (int)(cn_nc - cn_j0) : cn_nr;\n"
    "@TRITILE@"
    "@TRISTEPS@"
    "            @T@ *cn_rp[cn_mr];\n"
    "@AROWS@"
    "            /* an edge tile, or columns apart in c: through a tile of its own */\n"
    "            _Alignas(64) @T@ cn_tile[cn_mr][cn_nr];\n"
    "            int64_t cn_row[cn_mr];\n"
    "@COLDECL@"
    "            const int cn_own = @OWN@;\n"
    "@DIRECT@"
    "            if (cn_own) {\n"
    "@COLTABLE@"
    "              for (int cn_r = 0; cn_r < cn_mr; cn_r++) {\n"
    "                cn_row[cn_r] = cn_r < cn_rows ? @MC(cn_m0 + cn_i0 + cn_r)@ : 0;\n"
    "                cn_rp[cn_r] = cn_tile[cn_r];\n"
    "              }\n"
    "@GATHER@"
    "            }\n"
    "            cn_ukr_@N@(cn_kc, @APANEL@, cn_bp + cn_j0 * cn_kc, cn_rp@FRESHA@@RAGGEDA@);\n"
    "            if (cn_own)\n"
    "@SCATTER@"
    "          }\n"
    "      }\n"
    "    }\n"
    "  }\n"
    "  cn_gemm_free(cn_par, cn_pack);\n"
    "}\n";

/* An edge tile's cells read from c and written back: by the preamble's functions of the
 * precision where c's columns are adjacent (one copy in the file: inline in every GEMM, these
 * loops were a third of a training step's compile time), else inline (a narrow precision
 * converts them, a triangle takes some of them, or the columns are apart). */
static const char gather_inline[] =
    "              for (int cn_r = 0; cn_r < cn_mr; cn_r++)\n"
    "                for (int cn_q = 0; cn_q < cn_nr; cn_q++)\n"
    "                  cn_tile[cn_r][cn_q] = @FRESHT@cn_r < cn_rows && cn_q < cn_cols@TRICELL@ ? "
    "@LOAD(cn_cb[cn_row[cn_r] + cn_col[cn_q]])@ : 0;\n";
static const char scatter_inline[] =
    "              for (int cn_r = 0; cn_r < cn_rows; cn_r++)\n"
    "                for (int cn_q = 0; cn_q < cn_cols@TRICELL@; cn_q++)\n"
    "                  @STORE(cn_cb[cn_row[cn_r] + cn_col[cn_q]], cn_tile[cn_r][cn_q])@;\n";
static const char gather_shared[] =
    "              cn_gemm_gather_@P@(&cn_tile[0][0], cn_mr, cn_nr, cn_rows, cn_cols,\n"
    "                                 cn_cb + @NC(cn_n0 + cn_j0)@, cn_row, @FRESHL@);\n";
static const char scatter_shared[] =
    "              cn_gemm_scatter_@P@(cn_cb + @NC(cn_n0 + cn_j0)@, cn_row, cn_rows, cn_cols, "
    "&cn_tile[0][0], cn_nr);\n";

/* The tile straight in c (rows of adjacent cells of the compute type): a full tile's rows are
 * pointers into c. */
static const char direct_tile[] =
    "            if (!cn_own)\n"
    "              for (int cn_q = 0; cn_q < cn_mr; cn_q++)\n"
    "                cn_rp[cn_q] = cn_cb + @MC(cn_m0 + cn_i0 + cn_q)@ + @NC(cn_n0 + cn_j0)@;\n";

/* x's block packed: panels of cn_mr rows by cn_kc steps, zeros past the last row. */
static const char pack_x[] =
    "        /* x's block: panels of cn_mr rows by cn_kc steps, zeros past the last row */\n"
    "        for (int64_t cn_i0 = 0; cn_i0 < cn_mb; cn_i0 += cn_mr) {\n"
    "          @T@ *const cn_panel = cn_ap + cn_i0 * cn_kc;\n"
    "          const int cn_rows = cn_mb - cn_i0 < cn_mr ? (int)(cn_mb - cn_i0) : cn_mr;\n"
    "          int64_t cn_row[cn_mr];\n"
    "          for (int cn_q = 0; cn_q < cn_rows; cn_q++) cn_row[cn_q] = @MX(cn_m0 + cn_i0 + "
    "cn_q)@;\n"
    "@FILLA@"
    "        }\n";

/* x read in place: the tile's rows of x (the last one repeated past the edge: those rows'
 * results are never stored), each running along the reduction with step 1. */
static const char x_rows[] = "            const @T@ *cn_ar[cn_mr];\n"
                             "            for (int cn_q = 0; cn_q < cn_mr; cn_q++)\n"
                             "              cn_ar[cn_q] = cn_xb + @MX(cn_m0 + cn_i0 + (cn_q < "
                             "cn_rows ? cn_q : cn_rows - 1))@ +\n"
                             "                            @KX(cn_p0)@;\n";

/* The columns' offsets in y when they are not one multiplication away. */
static const char column_table[] = "        int64_t cn_col[cn_nr];\n"
                                   "        for (int cn_q = 0; cn_q < cn_cols; cn_q++) "
                                   "cn_col[cn_q] = @NY(cn_n0 + cn_j0 + cn_q)@;\n";

/* The filling of a panel of y (columns cn_q < cn_cols of cn_nr, cn_kc steps), step by step when
 * y's columns are adjacent (reads along a row of y), column by column when its reduction steps
 * are (reads along a column: a transposed y); the same for x's rows. */
static const char fill_b_by_step[] =
    "        for (int64_t cn_k = 0; cn_k < cn_kc; cn_k++) {\n"
    "          for (int cn_q = 0; cn_q < cn_cols; cn_q++)\n"
    "            cn_panel[cn_k * cn_nr + cn_q] = @LOAD(cn_yb[@BK@ + @BCOL@])@;\n"
    "          for (int cn_q = cn_cols; cn_q < cn_nr; cn_q++) cn_panel[cn_k * cn_nr + cn_q] = 0;\n"
    "        }\n";
static const char fill_b_by_column[] =
    "        for (int cn_q = 0; cn_q < cn_nr; cn_q++)\n"
    "          for (int64_t cn_k = 0; cn_k < cn_kc; cn_k++)\n"
    "            cn_panel[cn_k * cn_nr + cn_q] =\n"
    "                cn_q < cn_cols ? @LOAD(cn_yb[@BK@ + @BCOL@])@ : 0;\n";
/* The same transposition in blocks of 8 columns by 8 steps for single precision: on AVX, 8
 * vector loads along the steps, an 8 x 8 transpose in registers (the preamble's cn_unpacklo8...:
 * the shuffles of _mm256_unpacklo/hi_ps, _mm256_shuffle_ps 0x44/0xEE, _mm256_permute2f128_ps
 * 0x20/0x31, which gcc and clang compile to those instructions) and 8 vector stores (a panel of a
 * weight stored [out][in], as nn.Linear's, is this transpose: element by element it was a third
 * of a batch-of-one product); the steps past the last block of 8, and the last columns, element
 * by element, up to cn_nr (4 columns, one 16-byte vector, on generic vectors and NEON). The values
 * are copied, so the bits are those of fill_b_by_column. */
static const char fill_b_transposed[] =
    "        for (int cn_q0 = 0; cn_q0 < cn_nr; cn_q0 += 8) {\n"
    "          int64_t cn_k = 0;\n"
    "#if defined(__AVX__)\n"
    "          for (; cn_q0 + 8 <= cn_cols && cn_k + 8 <= cn_kc; cn_k += 8) {\n"
    "            cn_v8f32u cn_r[8], cn_t[8], cn_u[8];\n"
    "            for (int cn_i = 0; cn_i < 8; cn_i++) {\n"
    "              const int cn_q = cn_q0 + cn_i;\n"
    "              cn_r[cn_i] = *(const cn_v8f32u *)&cn_yb[@BK@ + @BCOL@];\n"
    "            }\n"
    "            for (int cn_i = 0; cn_i < 8; cn_i += 2) {\n"
    "              cn_t[cn_i] = cn_unpacklo8(cn_r[cn_i], cn_r[cn_i + 1]);\n"
    "              cn_t[cn_i + 1] = cn_unpackhi8(cn_r[cn_i], cn_r[cn_i + 1]);\n"
    "            }\n"
    "            for (int cn_i = 0; cn_i < 8; cn_i += 4) {\n"
    "              cn_u[cn_i] = cn_shuffle8_44(cn_t[cn_i], cn_t[cn_i + 2]);\n"
    "              cn_u[cn_i + 1] = cn_shuffle8_ee(cn_t[cn_i], cn_t[cn_i + 2]);\n"
    "              cn_u[cn_i + 2] = cn_shuffle8_44(cn_t[cn_i + 1], cn_t[cn_i + 3]);\n"
    "              cn_u[cn_i + 3] = cn_shuffle8_ee(cn_t[cn_i + 1], cn_t[cn_i + 3]);\n"
    "            }\n"
    "            for (int cn_j = 0; cn_j < 4; cn_j++) {\n"
    "              *(cn_v8f32u *)(cn_panel + (cn_k + cn_j) * cn_nr + cn_q0) =\n"
    "                  cn_lows8(cn_u[cn_j], cn_u[cn_j + 4]);\n"
    "              *(cn_v8f32u *)(cn_panel + (cn_k + cn_j + 4) * cn_nr + cn_q0) =\n"
    "                  cn_highs8(cn_u[cn_j], cn_u[cn_j + 4]);\n"
    "            }\n"
    "          }\n"
    "#endif\n"
    "          for (int cn_q = cn_q0; cn_q < cn_q0 + 8 && cn_q < cn_nr; cn_q++)\n"
    "            for (int64_t cn_kr = cn_k; cn_kr < cn_kc; cn_kr++)\n"
    "              cn_panel[cn_kr * cn_nr + cn_q] = cn_q < cn_cols ? @RESTLOAD@ : 0;\n"
    "        }\n";
/* fill_b_transposed as a function of the preamble, shared by the file's GEMMs of single
 * precision whose columns are evenly apart in y (step cn_cstep): one copy of its code. */
static const char fill_t_head[] =
    "/* a panel of y filled column by column: step k of column q at y + k + cstep * q */\n"
    "__attribute__((noinline)) static void cn_gemm_fill_t_f32(\n"
    "    float *restrict cn_panel, int cn_nr, int cn_cols, int64_t cn_kc,\n"
    "    const float *restrict cn_yb, int64_t cn_cstep) {\n";
static const char fill_b_shared_t[] =
    "        cn_gemm_fill_t_f32(cn_panel, cn_nr, cn_cols, cn_kc, cn_yb + @KY(cn_p0)@ + "
    "@NY(cn_n0 + cn_j0)@,\n"
    "                           @CSTEP@);\n";
static const char fill_a_by_step[] =
    "          for (int64_t cn_k = 0; cn_k < cn_kc; cn_k++) {\n"
    "            for (int cn_q = 0; cn_q < cn_rows; cn_q++)\n"
    "              cn_panel[cn_k * cn_mr + cn_q] = @LOAD(cn_xb[cn_row[cn_q] + @AK@])@;\n"
    "            for (int cn_q = cn_rows; cn_q < cn_mr; cn_q++) cn_panel[cn_k * cn_mr + cn_q] = "
    "0;\n"
    "          }\n";
/* (the row's test outside its loop of steps: inside it, gcc 12 vectorized that loop with gathers
 * and one store per lane, a matmul 1024 7% slower) */
static const char fill_a_by_row[] =
    "          for (int cn_q = 0; cn_q < cn_mr; cn_q++)\n"
    "            if (cn_q < cn_rows)\n"
    "              for (int64_t cn_k = 0; cn_k < cn_kc; cn_k++)\n"
    "                cn_panel[cn_k * cn_mr + cn_q] = @LOAD(cn_xb[cn_row[cn_q] + @AK@])@;\n"
    "            else\n"
    "              for (int64_t cn_k = 0; cn_k < cn_kc; cn_k++) cn_panel[cn_k * cn_mr + cn_q] = "
    "0;\n";

/* A triangle's tile (cn_ll_gemm.tri): row r of the tile holds the columns q < cn_diag + r. */
static const char triangle_tile[] =
    "            const int64_t cn_diag = cn_m0 + cn_i0 + @TRI@ - cn_n0 - cn_j0;\n"
    "            if (cn_diag + cn_rows - 1 <= 0) continue; /* past the triangle: no cell */\n";

/* A triangle of steps' tile (cn_ll_gemm.tri K or M): row r's steps in this block of kc, as the
 * micro-kernel takes them, f0 + r <= k < e0 + r; a tile no row has a step of is left as it is. */
static const char steps_below_rows[] =
    "            const int64_t cn_f0 = -cn_mr, cn_e0 = cn_m0 + cn_i0 + @TRI@ - cn_p0;\n"
    "            if (cn_e0 + cn_rows - 1 <= 0) continue; /* no step of this block */\n";
static const char steps_above_rows[] =
    "            const int64_t cn_f0 = cn_m0 + cn_i0 - @TRI@ + 1 - cn_p0, cn_e0 = cn_kc + cn_mr;\n"
    "            if (cn_f0 >= cn_kc) continue; /* no step of this block */\n";

/* The pool's callback and the function the routine calls. */
static const char entry[] =
    "struct cn_genv_@N@ {\n"
    "  @S@ *c;\n"
    "  const @S@ *x, *y;\n"
    "  const cn_par_t *par;\n"
    "};\n"
    "static void cn_gemm_body_@N@(void *cn_envp, int64_t cn_lo, int64_t cn_hi) {\n"
    "  const struct cn_genv_@N@ *cn_env = cn_envp;\n"
    "  cn_gemm_range_@N@(cn_env->c, cn_env->x, cn_env->y, cn_env->par, cn_lo, cn_hi);\n"
    "}\n"
    "static void cn_gemm_@N@(@S@ *cn_c, const @S@ *cn_x, const @S@ *cn_y, const cn_par_t *cn_par) "
    "{\n"
    "  struct cn_genv_@N@ cn_env = {cn_c, cn_x, cn_y, cn_par};\n"
    "  const int64_t cn_tasks = @B@ * ((@NN@ + cn_g@N@_nc - 1) / cn_g@N@_nc) *\n"
    "                           ((@M@ + cn_g@N@_mc - 1) / cn_g@N@_mc);\n"
    "  if (@PARALLEL@ && cn_par && cn_tasks > 1)\n"
    "    cn_par->pool_for(cn_par->pool, cn_tasks, cn_gemm_body_@N@, &cn_env);\n"
    "  else\n"
    "    cn_gemm_body_@N@(&cn_env, 0, cn_tasks);\n"
    "}\n";

/* ---- The nest's geometry ---- */

enum { ACC_C, ACC_X, ACC_Y, ACCESSES };

typedef struct {
  const cn_ll_gemm *plan;
  const cn_ll_stmt *loops[CN_GEMM_MAX_LOOPS];
  int64_t extent[CN_GEMM_MAX_LOOPS];
  int64_t coeff[ACCESSES][CN_GEMM_MAX_LOOPS]; /* cells per step of each loop, per access */
  int64_t total[CN_GEMM_ROLES];               /* points of each group */
  int param[ACCESSES];
  const cn_index *idx[ACCESSES];
  cn_prec prec;
} geometry;

static void geometry_of(const cgen *g, const cn_ll_stmt *s, geometry *geo) {
  const cn_ll_gemm *plan = s->u.gemm.plan;
  *geo = (geometry){.plan = plan};
  cn_ll_gemm_parts parts;
  cn_ll_gemm_parts_of(s, &parts);
  for (int k = 0; k < plan->depth; k++) {
    geo->loops[k] = parts.loops[k];
    geo->extent[k] = parts.loops[k]->u.loop.to - parts.loops[k]->u.loop.from;
  }
  for (int a = 0; a < ACCESSES; a++) {
    geo->param[a] = parts.param[a];
    geo->idx[a] = parts.idx[a];
  }
  geo->prec = g->proc->params[geo->param[ACC_C]].node->prec;
  for (int r = 0; r < CN_GEMM_ROLES; r++) geo->total[r] = 1;
  for (int k = 0; k < plan->depth; k++) {
    geo->total[plan->role[k]] *= geo->extent[k];
    for (int a = 0; a < ACCESSES; a++) {
      const cn_node *node = g->proc->params[geo->param[a]].node;
      for (int d = 0; d < node->rank; d++)
        geo->coeff[a][k] += cn_index_coeff(&geo->idx[a][d], geo->loops[k]->u.loop.sym) *
                            g->strides[geo->param[a]][d];
    }
  }
}

/* Whether the loops of a group walk an access as one range: each outer loop's step is the next
 * inner loop's extent times its step, so the offset of flat index f is (innermost step) * f. */
static bool group_linear(const geometry *geo, cn_gemm_role role, int access, int64_t *step) {
  int last = -1;
  for (int k = 0; k < geo->plan->depth; k++) {
    if (geo->plan->role[k] != role) continue;
    if (last >= 0 && geo->coeff[access][last] != geo->coeff[access][k] * geo->extent[k])
      return false;
    last = k;
  }
  *step = last >= 0 ? geo->coeff[access][last] : 0;
  return true;
}

/* The offset in an access of the flat index `var` of a group: "(3 * (v))", or the sum over the
 * group's loops of step * (v / inner extents % extent). */
static void print_offset(cn_sbuf *sb, const geometry *geo, cn_gemm_role role, int access,
                         const char *var) {
  int64_t step;
  if (group_linear(geo, role, access, &step)) {
    cn_sbuf_printf(sb, "(int64_t)%lld * (%s)", (long long)step, var);
    return;
  }
  cn_sbuf_putc(sb, '(');
  bool first = true, outer = true;
  for (int k = 0; k < geo->plan->depth; k++) {
    if (geo->plan->role[k] != role) continue;
    int64_t inner = 1;
    for (int j = k + 1; j < geo->plan->depth; j++)
      if (geo->plan->role[j] == role) inner *= geo->extent[j];
    if (geo->coeff[access][k] != 0) {
      cn_sbuf_printf(sb, "%s(int64_t)%lld * ((%s) / %lld", first ? "" : " + ",
                     (long long)geo->coeff[access][k], var, (long long)inner);
      if (!outer) cn_sbuf_printf(sb, " %% %lld", (long long)geo->extent[k]);
      cn_sbuf_putc(sb, ')');
      first = false;
    }
    outer = false;
  }
  cn_sbuf_puts(sb, first ? "0)" : ")");
}

/* ---- Templates ---- */

/* Whether a GEMM of prec computes in float (single and the narrow ones), else in double. */
static bool in_float(cn_prec prec) {
  return cn_prec_table[prec].kind == CN_PKIND_FLOAT && prec != CN_PREC_DOUBLE;
}

typedef struct {
  const geometry *geo;
  const char *keys[64], *values[64];
  int n;
} expansion;

static void define(expansion *e, const char *key, const char *value) {
  CN_ASSERT(e->n < 64);
  e->keys[e->n] = key;
  e->values[e->n++] = value;
}

/* A template's text with @KEY@ replaced by the key's value and @KEY(arg)@ (an offset, MX for M
 * in x, NC for N in c...; SCALAR for one update) printed for arg. */
static void expand(cn_sbuf *sb, const expansion *e, const char *text) {
  static const struct {
    const char *key;
    cn_gemm_role role;
    int access;
  } offsets[] = {{"MC", CN_GEMM_M, ACC_C}, {"NC", CN_GEMM_N, ACC_C}, {"MX", CN_GEMM_M, ACC_X},
                 {"KX", CN_GEMM_K, ACC_X}, {"KY", CN_GEMM_K, ACC_Y}, {"NY", CN_GEMM_N, ACC_Y}};
  for (const char *p = text; *p;) {
    const char *at = strchr(p, '@');
    if (!at) {
      cn_sbuf_puts(sb, p);
      return;
    }
    cn_sbuf_printf(sb, "%.*s", (int)(at - p), p);
    /* the name, then an argument in parentheses (balanced, itself expanded first) or none */
    size_t name_len = 0;
    for (char c = at[1]; c == '_' || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
         c = at[1 + name_len])
      name_len++;
    const char *paren = at[1 + name_len] == '(' ? at + 1 + name_len : NULL, *end = NULL;
    size_t len = name_len;
    if (paren) {
      int depth = 0;
      for (end = paren; *end && (depth > 1 || *end != ')'); end++)
        depth += *end == '(' ? 1 : *end == ')' ? -1 : 0;
      CN_ASSERT(*end == ')' && end[1] == '@');
      end++; /* at the closing '@' */
    } else {
      end = at + 1 + name_len;
      CN_ASSERT(*end == '@');
    }
    bool done = false;
    if (paren) {
      char raw[160], arg[256], *args[3];
      size_t raw_len = (size_t)(end - paren - 2); /* between the parentheses */
      CN_ASSERT(raw_len < sizeof raw);
      memcpy(raw, paren + 1, raw_len);
      raw[raw_len] = 0;
      cn_sbuf inner = {0};
      expand(&inner, e, raw);
      CN_ASSERT(inner.failed || inner.len < sizeof arg);
      snprintf(arg, sizeof arg, "%s", inner.data ? inner.data : "");
      if (inner.failed) sb->failed = true;
      cn_sbuf_free(&inner);
      if (name_len == 6 && strncmp(at + 1, "SCALAR", 6) == 0) {
        /* SCALAR(sum, x, y): one update, as the plan's mode says */
        args[0] = arg;
        for (int k = 1; k < 3; k++) {
          args[k] = strchr(args[k - 1], ',');
          CN_ASSERT(args[k]);
          *args[k] = 0;
          args[k] += 2;
        }
        cn_prec prec = e->geo->prec;
        cn_sbuf x = {0}, y = {0};
        cn_load_c(&x, prec, args[1]);
        cn_load_c(&y, prec, args[2]);
        bool narrow = !cn_prec_stores_as_computed(prec);
        if (narrow) /* rounded as the store rounds each update */
          cn_sbuf_printf(sb, "cn_load_%s(cn_store_%s(", cn_prec_table[prec].name,
                         cn_prec_table[prec].name);
        if (e->geo->plan->fma)
          cn_sbuf_printf(sb, "__builtin_fma%s(%s, %s, %s)", in_float(prec) ? "f" : "", x.data,
                         y.data, args[0]);
        else
          cn_sbuf_printf(sb, "%s + %s * %s", args[0], x.data, y.data);
        if (narrow) cn_sbuf_puts(sb, "))");
        if (x.failed || y.failed) sb->failed = true;
        cn_sbuf_free(&x);
        cn_sbuf_free(&y);
        done = true;
      }
      if (name_len == 4 && strncmp(at + 1, "LOAD", 4) == 0) { /* a stored cell as computed */
        cn_load_c(sb, e->geo->prec, arg);
        done = true;
      }
      if (name_len == 5 && strncmp(at + 1, "STORE", 5) == 0) { /* STORE(cell, value) */
        char *value = strstr(arg, ", ");
        CN_ASSERT(value);
        *value = '\0';
        cn_store_c(sb, e->geo->prec, arg, value + 2);
        done = true;
      }
      for (size_t k = 0; !done && k < sizeof offsets / sizeof offsets[0]; k++)
        if (name_len == 2 && strncmp(at + 1, offsets[k].key, 2) == 0) {
          print_offset(sb, e->geo, offsets[k].role, offsets[k].access, arg);
          done = true;
        }
    }
    for (int k = 0; !done && k < e->n; k++)
      if (strlen(e->keys[k]) == len && strncmp(at + 1, e->keys[k], len) == 0) {
        cn_sbuf_puts(sb, e->values[k]);
        done = true;
      }
    CN_ASSERT(done); /* every key of the templates is defined */
    p = end + 1;
  }
}

/* The offset of batch point `cn_b` in an access, as the template's @BC@, @BX@, @BY@. */
static const char *batch_offset(cn_ctx *ctx, const geometry *geo, int access) {
  cn_sbuf sb = {0};
  print_offset(&sb, geo, CN_GEMM_BATCH, access, "cn_b");
  return cn_sbuf_finish(ctx, &sb);
}

/* A template expanded into an arena string (NULL on allocation failure); every value e uses
 * must be set. */
static const char *expanded(cn_ctx *ctx, const expansion *e, const char *text) {
  for (int k = 0; k < e->n; k++)
    if (!e->values[k]) return NULL;
  cn_sbuf sb = {0};
  expand(&sb, e, text);
  return cn_sbuf_finish(ctx, &sb);
}

static const char *number_text(cn_ctx *ctx, int64_t n) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)n);
  return cn_strdup(ctx, buf);
}

/* The row block: the plan's, rounded to the register tile, but small enough that the rows give
 * four tasks when there are rows enough (a 128-row batch still splits across threads). */
static int64_t row_block(const geometry *geo) {
  int64_t mc = geo->plan->mc, quarter = (geo->total[CN_GEMM_M] + 3) / 4;
  if (quarter < mc) mc = quarter < 16 ? 16 : quarter;
  return mc;
}

/* ---- The GEMM library ----
 * A GEMM the library runs (backend/gemm_lib.h: single or double precision) is described by its
 * sizes, plan, flags, triangle and loops (each one's group, extent and steps in c, x and y) and
 * run through the object's pointer <routine>_gemm_lib, which the C backend sets when it loads
 * the object (cc.c load_object); the generated driver stays in the text, compiled only with
 * -DCN_STANDALONE (an exported model, which needs nothing of cannl) and skipped by the
 * preprocessor otherwise: a GEMM then costs the compiler almost nothing. Both compute the same
 * bits (cgen_gemm.c's and gemm_lib.h's invariants). */

static bool library_gemm(const geometry *geo) {
  return geo->prec == CN_PREC_SINGLE || geo->prec == CN_PREC_DOUBLE;
}

/* The pointer (%s: the routine's name), defined in the unit or piece 0, declared in the other
 * pieces; and the flag of a test's -DCN_GEMM_NO_MEMORY (%d: CN_GEMM_NO_SCRATCH). */
static const char library_pointer[] =
    "#if !defined(CN_STANDALONE) /* the GEMM library of the cannl loading this object */\n"
    "#if defined(CN_PIECE) && CN_PIECE != 0\n"
    "extern\n"
    "#endif\n"
    "void (*%1$s_gemm_lib)(const int64_t *, void *, const void *, const void *, const cn_par_t "
    "*);\n"
    "#ifdef CN_GEMM_NO_MEMORY\n"
    "#define CN_GEMM_SCRATCH %2$d\n"
    "#else\n"
    "#define CN_GEMM_SCRATCH 0\n"
    "#endif\n"
    "#endif\n";

static void emit_library_call(const cgen *g, const geometry *geo, int number) {
  cn_sbuf *sb = &g->par->outlined;
  const cn_ll_gemm *plan = geo->plan;
  int64_t args[CN_GEMM_ARGS] = {0};
  args[CN_GEMM_ARG_BATCH] = geo->total[CN_GEMM_BATCH];
  args[CN_GEMM_ARG_M] = geo->total[CN_GEMM_M];
  args[CN_GEMM_ARG_N] = geo->total[CN_GEMM_N];
  args[CN_GEMM_ARG_K] = geo->total[CN_GEMM_K];
  args[CN_GEMM_ARG_TILE_MR] = plan->mr;
  args[CN_GEMM_ARG_TILE_NV] = plan->nv;
  args[CN_GEMM_ARG_MC] = plan->mc;
  args[CN_GEMM_ARG_KC] = plan->kc;
  args[CN_GEMM_ARG_NC] = plan->nc;
  args[CN_GEMM_ARG_FLAGS] = (geo->prec == CN_PREC_DOUBLE ? CN_GEMM_DOUBLE : 0) |
                            (plan->fma ? CN_GEMM_FMA : 0) | (plan->c_zero ? CN_GEMM_FRESH : 0) |
                            (plan->parallel ? CN_GEMM_PARALLEL : 0);
  args[CN_GEMM_ARG_TRI] = plan->tri;
  args[CN_GEMM_ARG_TRI_OFFSET] = plan->tri_offset;
  args[CN_GEMM_ARG_LOOPS] = plan->depth;
  const char *type = geo->prec == CN_PREC_DOUBLE ? "double" : "float";
  cn_sbuf_printf(
      sb,
      "static void cn_gemm_%d(%s *cn_c, const %s *cn_x, const %s *cn_y, "
      "const cn_par_t *cn_par) {\n"
      "  /* batch, rows, columns, steps, tile, blocks, flags, triangle, loops; each loop's "
      "group, extent and steps in c, x and y */\n"
      "  static const int64_t cn_args[%d] = {",
      number, type, type, type, CN_GEMM_ARGS + CN_GEMM_LOOP * plan->depth);
  for (int k = 0; k < CN_GEMM_ARGS; k++)
    cn_sbuf_printf(sb, "%s%lld%s", k ? ", " : "", (long long)args[k],
                   k == CN_GEMM_ARG_FLAGS ? " | CN_GEMM_SCRATCH" : "");
  for (int k = 0; k < plan->depth; k++)
    cn_sbuf_printf(sb, ",\n    %d, %lld, %lld, %lld, %lld", (int)plan->role[k],
                   (long long)geo->extent[k], (long long)geo->coeff[ACC_C][k],
                   (long long)geo->coeff[ACC_X][k], (long long)geo->coeff[ACC_Y][k]);
  cn_sbuf_printf(sb,
                 "};\n"
                 "  %s_gemm_lib(cn_args, cn_c, cn_x, cn_y, cn_par);\n"
                 "}\n",
                 g->proc->name);
}

static void emit_functions(const cgen *g, const geometry *geo, int number) {
  cn_ctx *ctx = g->ctx;
  cgen_par *par = g->par;
  cn_sbuf *sb = &par->outlined, *pre = par->gemm_preamble ? par->gemm_preamble : sb;
  const cn_ll_gemm *plan = geo->plan;
  /* computed in float (single and the narrow ones) or double; stored in the node's type */
  bool single = in_float(geo->prec);
  bool narrow = !cn_prec_stores_as_computed(geo->prec);
  expansion e = {.geo = geo};
  define(&e, "T", single ? "float" : "double");
  define(&e, "P", single ? "f32" : "f64");
  define(&e, "S", cn_prec_table[geo->prec].store_c);
  if (!(par->gemm_emitted & GEMM_COMMON)) {
    cn_sbuf_puts(pre, preamble_common);
    par->gemm_emitted |= GEMM_COMMON;
  }
  unsigned vectors = single ? GEMM_F32 : GEMM_F64;
  if (!(par->gemm_emitted & vectors)) {
    expansion p = e;
    define(&p, "X86", single ? "ps" : "pd");
    define(&p, "F", single ? "f" : "");
    define(&p, "NEON", single ? "f32" : "f64");
    define(&p, "NEONT", single ? "float32x4_t" : "float64x2_t");
    const char *fill_t = "";
    if (single) { /* the transposed fill of a panel, its reads at y + k + cstep * q */
      expansion t = p;
      define(&t, "BK", "cn_k");
      define(&t, "BCOL", "cn_cstep * cn_q");
      define(&t, "RESTLOAD", "cn_yb[cn_kr + cn_cstep * cn_q]");
      cn_sbuf text = {0};
      cn_sbuf_puts(&text, fill_t_head);
      expand(&text, &t, fill_b_transposed);
      cn_sbuf_puts(&text, "}\n");
      fill_t = cn_sbuf_finish(ctx, &text);
    }
    define(&p, "FILLT", fill_t);
    expand(pre, &p, preamble_prec);
    par->gemm_emitted |= vectors;
  }
  unsigned rounding = GEMM_ROUND << geo->prec;
  if (narrow && !(par->gemm_emitted & rounding)) {
    expansion p = e;
    bool half = geo->prec == CN_PREC_HALF;
    define(&p, "LC", cn_prec_table[geo->prec].name);
    define(&p, "HW", half ? round_half_hw : "");
    define(&p, "HWEND", half ? "#endif\n" : "");
    expand(pre, &p, preamble_round);
    par->gemm_emitted |= rounding;
  }
  int64_t direct_step; /* the tile's rows straight in c: adjacent columns of the compute type */
  bool direct = !narrow && group_linear(geo, CN_GEMM_N, ACC_C, &direct_step) && direct_step == 1;
  int64_t kc = plan->kc < geo->total[CN_GEMM_K] ? plan->kc : geo->total[CN_GEMM_K];
  int64_t nc = plan->nc < geo->total[CN_GEMM_N] ? plan->nc : geo->total[CN_GEMM_N];
  cn_sbuf_printf(sb, "/* GEMM %d: %lld batch x %lld rows x %lld columns x %lld steps, %s", number,
                 (long long)geo->total[CN_GEMM_BATCH], (long long)geo->total[CN_GEMM_M],
                 (long long)geo->total[CN_GEMM_N], (long long)geo->total[CN_GEMM_K],
                 plan->fma ? "fused multiply-adds" : "exact: multiply, then add");
  static const char *const triangles[] = {"", "column < row", "step < row", "row < step"};
  if (plan->tri)
    cn_sbuf_printf(sb, ", the triangle %s + %lld", triangles[plan->tri],
                   (long long)plan->tri_offset);
  cn_sbuf_puts(sb, " */\n");
  bool library = library_gemm(geo);
  if (library) {
    if (!(par->gemm_emitted & GEMM_LIB)) {
      cn_sbuf_printf(pre, library_pointer, g->proc->name, CN_GEMM_NO_SCRATCH);
      par->gemm_emitted |= GEMM_LIB;
    }
    cn_sbuf_puts(sb, CGEN_STANDALONE_OPEN);
  }
  if (plan->mr > 0)
    cn_sbuf_printf(sb, "enum { cn_g%d_mr = %d, cn_g%d_nv = %d };\n", number, plan->mr, number,
                   plan->nv);
  else if (plan->tri ==
           CN_GEMM_TRI_N) /* one vector of columns (and 16 rows on AVX-512): the diagonal crosses
                           * few cells of each tile, and more tiles lie wholly below it (direct) */
    cn_sbuf_printf(sb,
                   "enum { cn_g%d_nv = 1, cn_g%d_mr = CN_GEMM_MR * CN_GEMM_NV < 16 ? CN_GEMM_MR * "
                   "CN_GEMM_NV : 16 };\n",
                   number, number);
  else /* the default tile, narrowed to fewer columns (and more rows, at most 16) when the
        * product has fewer: 32 columns on AVX-512 run as 12 x 2 vectors, not half-empty 6 x 4 */
    cn_sbuf_printf(sb,
                   "enum { cn_g%d_lanes = CN_VBYTES / (int)sizeof(%s), cn_g%d_nv =\n"
                   "  %lld < CN_GEMM_NV * cn_g%d_lanes ? (%lld + cn_g%d_lanes - 1) / cn_g%d_lanes"
                   " : CN_GEMM_NV };\n"
                   "enum { cn_g%d_mr = CN_GEMM_MR * CN_GEMM_NV / cn_g%d_nv < 16 ? CN_GEMM_MR * "
                   "CN_GEMM_NV / cn_g%d_nv : 16 };\n",
                   number, single ? "float" : "double", number, (long long)geo->total[CN_GEMM_N],
                   number, (long long)geo->total[CN_GEMM_N], number, number, number, number,
                   number);
  cn_sbuf_printf(sb,
                 "enum { cn_g%d_nr = cn_g%d_nv * (CN_VBYTES / (int)sizeof(%s)), cn_g%d_kc = %lld, "
                 "cn_g%d_nc = %lld };\n",
                 number, number, single ? "float" : "double", number, (long long)kc, number,
                 (long long)nc);
  cn_sbuf_printf(sb, "enum { cn_g%d_mc = (%lld + cn_g%d_mr - 1) / cn_g%d_mr * cn_g%d_mr };\n",
                 number, (long long)row_block(geo), number, number, number);
  define(&e, "N", number_text(ctx, number));
  /* fma: the broadcast is s - 0, exactly s (s + 0 would turn -0 into +0) */
  const char *update = !plan->fma ? "cn_acc[cn_r][cn_v] + cn_bv[cn_v] * cn_s"
                       : single
                           ? "cn_vfma_f32(cn_bv[cn_v], cn_s - (cn_vf32){0}, cn_acc[cn_r][cn_v])"
                           : "cn_vfma_f64(cn_bv[cn_v], cn_s - (cn_vf64){0}, cn_acc[cn_r][cn_v])";
  if (narrow) { /* each update rounded as the nest's store rounds it */
    cn_sbuf rounded = {0};
    cn_sbuf_printf(&rounded, "cn_vround_%s(%s)", cn_prec_table[geo->prec].name, update);
    update = cn_sbuf_finish(ctx, &rounded);
  }
  define(&e, "UPDATE", update);
  /* x in place when its reduction steps are adjacent and a packed value would serve few columns
   * (packing costs about what 32 multiply-adds do: a convolution's input gradient has 32; two
   * register tiles of 64 columns still gain: sampling the GPT, whose 64-row products pack x
   * again for every block of rows, took 0.99 ms a token instead of 1.38) */
  int64_t x_step;
  bool x_in_place = !narrow && group_linear(geo, CN_GEMM_K, ACC_X, &x_step) && x_step == 1 &&
                    geo->total[CN_GEMM_N] <= 128;
  define(&e, "ATYPE", expanded(ctx, &e, x_in_place ? "const @T@ *const *" : "const @T@ *restrict"));
  define(&e, "AREAD", x_in_place ? "cn_a[cn_r][cn_k]" : "cn_a[cn_k * cn_mr + cn_r]");
  define(&e, "M", number_text(ctx, geo->total[CN_GEMM_M]));
  define(&e, "NN", number_text(ctx, geo->total[CN_GEMM_N]));
  define(&e, "K", number_text(ctx, geo->total[CN_GEMM_K]));
  define(&e, "B", number_text(ctx, geo->total[CN_GEMM_BATCH]));
  define(&e, "BC", batch_offset(ctx, geo, ACC_C));
  define(&e, "BX", batch_offset(ctx, geo, ACC_X));
  define(&e, "BY", batch_offset(ctx, geo, ACC_Y));
  define(&e, "PARALLEL", plan->parallel ? "1" : "0");
  int64_t step;
  bool x_along_k = group_linear(geo, CN_GEMM_K, ACC_X, &step) && step == 1;
  bool y_along_k = group_linear(geo, CN_GEMM_K, ACC_Y, &step) && step == 1;
  /* offsets of linear groups inline (contiguous reads the compiler sees), others from tables */
  define(&e, "AK",
         group_linear(geo, CN_GEMM_K, ACC_X, &step) ? expanded(ctx, &e, "@KX(cn_p0 + cn_k)@")
                                                    : "cn_kx[cn_k]");
  define(&e, "BK",
         group_linear(geo, CN_GEMM_K, ACC_Y, &step) ? expanded(ctx, &e, "@KY(cn_p0 + cn_k)@")
                                                    : "cn_ky[cn_k]");
  bool columns_linear = group_linear(geo, CN_GEMM_N, ACC_Y, &step);
  define(&e, "BCOL",
         columns_linear ? expanded(ctx, &e, "@NY(cn_n0 + cn_j0 + cn_q)@") : "cn_col[cn_q]");
  define(&e, "COLS", columns_linear ? "" : expanded(ctx, &e, column_table));
  define(&e, "FILLA", expanded(ctx, &e, x_along_k ? fill_a_by_row : fill_a_by_step));
  /* the rest of a transposed block: step cn_kr of column cn_q */
  define(&e, "BKR",
         group_linear(geo, CN_GEMM_K, ACC_Y, &step) ? expanded(ctx, &e, "@KY(cn_p0 + cn_kr)@")
                                                    : "cn_ky[cn_kr]");
  define(&e, "RESTLOAD", expanded(ctx, &e, "@LOAD(cn_yb[@BKR@ + @BCOL@])@"));
  bool transposed = y_along_k && geo->prec == CN_PREC_SINGLE;
  /* the preamble's transposed fill where y's columns are evenly apart */
  int64_t column_step = 0;
  bool columns_even = group_linear(geo, CN_GEMM_N, ACC_Y, &column_step);
  define(&e, "CSTEP", number_text(ctx, column_step));
  define(&e, "FILLB",
         expanded(ctx, &e,
                  transposed && columns_even ? fill_b_shared_t
                  : transposed               ? fill_b_transposed
                  : y_along_k                ? fill_b_by_column
                                             : fill_b_by_step));
  define(&e, "PACKA", x_in_place ? "" : expanded(ctx, &e, pack_x));
  define(&e, "AROWS", x_in_place ? expanded(ctx, &e, x_rows) : "");
  define(&e, "APANEL", x_in_place ? "cn_ar" : "cn_ap + cn_i0 * cn_kc");
  /* a triangle of cells (causal scores): tiles past it skipped, a tile across it through the
   * scratch tile, storing only its cells; the full tiles below it direct */
  bool cells = plan->tri == CN_GEMM_TRI_N;
  bool steps = plan->tri == CN_GEMM_TRI_K || plan->tri == CN_GEMM_TRI_M;
  define(&e, "TRI", number_text(ctx, plan->tri_offset));
  define(&e, "TRIJ", cells ? expanded(ctx, &e, " && cn_j < cn_i + @TRI@") : "");
  define(&e, "TRITILE", cells ? expanded(ctx, &e, triangle_tile) : "");
  define(&e, "TRICELL", cells ? " && cn_q < cn_diag + cn_r" : "");
  define(&e, "TRIFULL", cells ? " && cn_nr <= cn_diag" : "");
  /* a triangle of steps (P V and the gradients of Q, K and V): each row its own steps */
  define(&e, "TRISTEPS",
         !steps
             ? ""
             : expanded(ctx, &e, plan->tri == CN_GEMM_TRI_K ? steps_below_rows : steps_above_rows));
  define(&e, "RAGGEDP", steps ? ", int64_t cn_f0, int64_t cn_e0" : "");
  define(&e, "RAGGEDA", steps ? ", cn_f0, cn_e0" : "");
  define(&e, "KFROM",
         plan->tri != CN_GEMM_TRI_M
             ? "0"
             : expanded(ctx, &e, "(cn_i - @TRI@ + 1 - cn_p0 > 0 ? cn_i - @TRI@ + 1 - cn_p0 : 0)"));
  define(&e, "KTO",
         plan->tri == CN_GEMM_TRI_K ? expanded(ctx, &e, " && cn_p0 + cn_k < cn_i + @TRI@") : "");
  /* c all +0 before the product (c_zero): the first block of steps starts from +0, not from c */
  define(&e, "FRESHP", plan->c_zero ? ", int cn_fresh" : "");
  define(&e, "FRESHA", plan->c_zero ? ", cn_p0 == 0" : "");
  define(&e, "FRESHV",
         plan->c_zero ? expanded(ctx, &e, "cn_fresh ? (cn_v@P@){0} : (cn_v@P@)") : "");
  define(&e, "FRESHS", plan->c_zero ? "cn_p0 == 0 ? 0 : " : "");
  define(&e, "FRESHT", plan->c_zero ? "cn_p0 > 0 && " : "");
  define(&e, "DIRECT", direct ? expanded(ctx, &e, direct_tile) : "");
  define(&e, "FRESHL", plan->c_zero ? "cn_p0 > 0" : "1");
  /* columns adjacent in c (runs): the preamble's gather and scatter; else inline, with a table
   * of the columns (shared, a conv's columns apart ran 1% slower) */
  bool shared_edges = !narrow && !cells && direct;
  define(&e, "COLTABLE",
         shared_edges
             ? ""
             : expanded(ctx, &e,
                        "              for (int cn_q = 0; cn_q < cn_cols; cn_q++) cn_col[cn_q] = "
                        "@NC(cn_n0 + cn_j0 + cn_q)@;\n"));
  define(&e, "COLDECL", shared_edges ? "" : "            int64_t cn_col[cn_nr];\n");
  define(&e, "GATHER", expanded(ctx, &e, shared_edges ? gather_shared : gather_inline));
  define(&e, "SCATTER", expanded(ctx, &e, shared_edges ? scatter_shared : scatter_inline));
  define(&e, "OWN",
         direct ? expanded(ctx, &e, "!(cn_rows == cn_mr && cn_cols == cn_nr@TRIFULL@)") : "1");
  /* the micro-kernel's steps: every row each step, or a triangle's ragged ones */
  expansion full = e, ragged = e;
  define(&full, "GUARD", "");
  define(&ragged, "GUARD", "      if (cn_k < cn_f0 + cn_r || cn_k >= cn_e0 + cn_r) continue;\n");
  define(&e, "STEP", expanded(ctx, &full, kernel_step));
  define(&e, "RAGGED", steps ? expanded(ctx, &ragged, kernel_step) : "");
  define(&e, "KLOOP", expanded(ctx, &e, steps ? steps_ragged : steps_plain));
  for (int k = 0; k < e.n; k++)
    if (!e.values[k]) {
      sb->failed = true;
      return;
    }
  expand(sb, &e, micro_kernel);
  expand(sb, &e, cells_by_one);
  expand(sb, &e, task_range);
  expand(sb, &e, entry);
  if (library) {
    cn_sbuf_puts(sb, CGEN_STANDALONE_ELSE);
    emit_library_call(g, geo, number);
    cn_sbuf_puts(sb, "#endif\n");
  }
}

void cn_cgen_gemm(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  geometry geo;
  geometry_of(g, s, &geo);
  const cn_ll_gemm *plan = s->u.gemm.plan;
  if (!g->par) { /* a kernel's key: the plan and the nest */
    cn_sbuf_indent(sb, depth);
    cn_sbuf_printf(sb, "gemm %d %d %lld %lld %lld %d %d %d\n", plan->mr, plan->nv,
                   (long long)plan->mc, (long long)plan->kc, (long long)plan->nc, plan->fma,
                   plan->parallel, plan->c_zero);
    cn_cgen_stmt(g, depth, s->u.gemm.nest);
    return;
  }
  int number = g->par->count++;
  emit_functions(g, &geo, number);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "cn_gemm_%d(", number);
  for (int a = 0; a < ACCESSES; a++) {
    cn_cgen_base_cell(g, sb, geo.param[a], geo.idx[a], geo.loops, plan->depth);
    cn_sbuf_puts(sb, ", ");
  }
  cn_sbuf_puts(sb, g->par->inside ? "NULL);\n" : "cn_par);\n");
}
