/* The CUDA C++ dialect of the emitter (cgen.h, kernels.h): kernels `extern "C" __global__`, the
 * linear id from blockIdx/blockDim/threadIdx, and the numeric prelude derived from builtins.h by
 * a transformation, so that builtins.h stays the one source of the numeric semantics:
 *   - a fixed head replaces builtins.h's includes: the <stdint.h> types and macros NVRTC lacks
 *     (int64_t is long long, so the linear id, loop variables and INT64_C literals are one type),
 *     NAN and INFINITY with glibc's bits, and cn_bit_copy overloads on the CUDA intrinsics
 *     (__float_as_uint, __double_as_longlong, ...);
 *   - every `memcpy(&to, &from, sizeof to);` of the text becomes `cn_bit_copy(&to, from);` (no
 *     memcpy on the device, and the same bits);
 *   - every `_Generic` macro `#define cn_f(p...) _Generic((p_k), T1: f1, T2: f2, ...)((p...))`
 *     becomes one C++ overload of cn_f per association, its parameter k of type Ti, the others
 *     template parameters, each calling fi: C++ overload resolution picks what _Generic picks
 *     for the operands generated code passes (exactly the compute types);
 *   - the rest is builtins.h's text: functions without an execution space compile as device
 *     functions under NVRTC's -default-device (cuda_rt.c compiles with it), C's integer and float
 *     semantics are C++'s, and the math calls are the typed ones of CUDA's device library.
 * The pruning to what a program uses is the host prelude's (cgen_prelude.c), whose text is
 * transformed. The op templates of ops.def call the type-generic names (log(a) on a float),
 * which CUDA C++ overloads as <tgmath.h> does in C; a uint4x32 constant is spelled as a C++
 * list-initialization (C's compound literal is not C++). */
#include "backend/cuda.h"
#include "numeric/numeric.h"

#include <ctype.h>
#include <inttypes.h>
#include <string.h>

/* What builtins.h gets from <stdint.h>, <string.h> and <math.h> on the host, and NVRTC's
 * counterparts of the host's quiet warnings: builtins.h's "-Wunused-function" (177: a static
 * function never referenced) and -Wtype-limits, which -Wall leaves off in C (186: `a >= 0` on an
 * unsigned operand, the op templates' relu and abs on uint64, true as intended). */
static const char cuda_head[] = "#pragma nv_diag_suppress 177\n"
                                "#pragma nv_diag_suppress 186\n"
                                "typedef unsigned char uint8_t;\n"
                                "typedef unsigned short uint16_t;\n"
                                "typedef int int32_t;\n"
                                "typedef unsigned int uint32_t;\n"
                                "typedef long long int64_t;\n"
                                "typedef unsigned long long uint64_t;\n"
                                "#define INT32_MIN (-2147483647 - 1)\n"
                                "#define INT32_MAX 2147483647\n"
                                "#define UINT32_MAX 4294967295u\n"
                                "#define INT64_MAX 9223372036854775807LL\n"
                                "#define INT64_MIN (-INT64_MAX - 1)\n"
                                "#define UINT64_MAX 18446744073709551615ULL\n"
                                "#define INT64_C(x) x##LL\n"
                                "#define UINT64_C(x) x##ULL\n"
                                "#define NAN __int_as_float(0x7fc00000)\n"
                                "#define INFINITY __int_as_float(0x7f800000)\n"
                                "static inline void cn_bit_copy(uint32_t *to, float from) {\n"
                                "  *to = __float_as_uint(from);\n"
                                "}\n"
                                "static inline void cn_bit_copy(float *to, uint32_t from) {\n"
                                "  *to = __uint_as_float(from);\n"
                                "}\n"
                                "static inline void cn_bit_copy(uint64_t *to, double from) {\n"
                                "  *to = (uint64_t)__double_as_longlong(from);\n"
                                "}\n"
                                "static inline void cn_bit_copy(double *to, uint64_t from) {\n"
                                "  *to = __longlong_as_double((long long)from);\n"
                                "}\n";

static bool starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* An identifier at *p (skipping blanks and line continuations before it) into out; false when
 * none. */
static bool read_word(const char **p, const char *end, char *out, size_t size) {
  while (*p < end && (isspace((unsigned char)**p) || **p == '\\')) (*p)++;
  size_t n = 0;
  while (*p < end && (isalnum((unsigned char)**p) || **p == '_')) {
    if (n + 1 < size) out[n++] = **p;
    (*p)++;
  }
  out[n] = '\0';
  return n > 0;
}

/* Skips blanks, line continuations and then the character c; false when c is not next. */
static bool expect(const char **p, const char *end, char c) {
  while (*p < end && (isspace((unsigned char)**p) || **p == '\\')) (*p)++;
  if (*p >= end || **p != c) return false;
  (*p)++;
  return true;
}

enum { MAX_PARAMS = 4, MAX_ASSOCS = 8, WORD = 64 };

/* A _Generic macro as overloads (file comment); false, writing nothing, when the text is not
 * of that shape. */
static bool generic_overloads(cn_sbuf *out, const char *text, size_t len) {
  const char *p = text + strlen("#define "), *end = text + len;
  char name[WORD], params[MAX_PARAMS][WORD], control[WORD], types[MAX_ASSOCS][WORD],
      fns[MAX_ASSOCS][WORD];
  int n_params = 0, n_assocs = 0, k_control = -1;
  if (!read_word(&p, end, name, WORD) || !expect(&p, end, '(')) return false;
  do {
    if (n_params == MAX_PARAMS || !read_word(&p, end, params[n_params++], WORD)) return false;
  } while (expect(&p, end, ','));
  if (!expect(&p, end, ')') || !read_word(&p, end, control, WORD) ||
      strcmp(control, "_Generic") != 0 || !expect(&p, end, '(') || !expect(&p, end, '(') ||
      !read_word(&p, end, control, WORD) || !expect(&p, end, ')'))
    return false;
  for (int k = 0; k < n_params; k++)
    if (strcmp(params[k], control) == 0) k_control = k;
  if (k_control < 0) return false;
  while (expect(&p, end, ',')) {
    if (n_assocs == MAX_ASSOCS || !read_word(&p, end, types[n_assocs], WORD) ||
        !expect(&p, end, ':') || !read_word(&p, end, fns[n_assocs++], WORD))
      return false;
  }
  if (!expect(&p, end, ')') || n_assocs == 0) return false;
  for (int a = 0; a < n_assocs; a++) {
    int n_templates = 0;
    for (int k = 0; k < n_params; k++) {
      if (k == k_control) continue;
      cn_sbuf_printf(out, "%stypename T_%s", n_templates++ ? ", " : "template <", params[k]);
    }
    if (n_templates) cn_sbuf_puts(out, ">\n");
    cn_sbuf_printf(out, "static inline auto %s(", name);
    for (int k = 0; k < n_params; k++) {
      if (k == k_control)
        cn_sbuf_printf(out, "%s%s %s", k ? ", " : "", types[a], params[k]);
      else
        cn_sbuf_printf(out, "%sT_%s %s", k ? ", " : "", params[k], params[k]);
    }
    cn_sbuf_printf(out, ") {\n  return %s(", fns[a]);
    for (int k = 0; k < n_params; k++) cn_sbuf_printf(out, "%s%s", k ? ", " : "", params[k]);
    cn_sbuf_puts(out, ");\n}\n");
  }
  return true;
}

/* One line of an item with its memcpy of bits (file comment) rewritten; false when the line is
 * not such a statement. */
static bool bit_copy_line(cn_sbuf *out, const char *line, size_t len) {
  const char *p = line, *end = line + len;
  size_t indent = 0;
  while (p < end && *p == ' ') p++, indent++;
  char to[WORD], from[WORD], size_of[WORD], word[WORD];
  if (!read_word(&p, end, word, WORD) || strcmp(word, "memcpy") != 0 || !expect(&p, end, '(') ||
      !expect(&p, end, '&') || !read_word(&p, end, to, WORD) || !expect(&p, end, ',') ||
      !expect(&p, end, '&') || !read_word(&p, end, from, WORD) || !expect(&p, end, ',') ||
      !read_word(&p, end, word, WORD) || strcmp(word, "sizeof") != 0 ||
      !read_word(&p, end, size_of, WORD) || strcmp(size_of, to) != 0 || !expect(&p, end, ')') ||
      !expect(&p, end, ';'))
    return false;
  cn_sbuf_printf(out, "%*scn_bit_copy(&%s, %s);\n", (int)indent, "", to, from);
  return true;
}

/* The host prelude of body (cgen_prelude.c: builtins.h pruned to what body uses) as CUDA C++, line
 * by line (file comment); runs after the head. */
static cn_status cuda_prelude(cn_ctx *ctx, cn_sbuf *out, const cn_sbuf *body) {
  cn_sbuf host = {0};
  cn_status status = cn_cgen_prelude(ctx, &host, body);
  if (status != CN_OK || host.failed) {
    cn_sbuf_free(&host);
    return status != CN_OK ? status : cn_fail(ctx, CN_ERR_NOMEM, "out of memory for a prelude");
  }
  cn_sbuf_puts(out, cuda_head);
  const char *text = cn_cgen_text(&host), *end = text + host.len;
  for (const char *line = text; line < end;) {
    const char *next = line;
    /* a line with its continuations (a macro) */
    do {
      const char *nl = memchr(next, '\n', (size_t)(end - next));
      next = nl ? nl + 1 : end;
    } while (next < end && next - line >= 2 && next[-2] == '\\');
    size_t n = (size_t)(next - line);
    if (starts_with(line, "#include")) {
      /* the head replaces <stdint.h>, <string.h> and <math.h> */
    } else if (!(starts_with(line, "#define ") && generic_overloads(out, line, n)) &&
               !bit_copy_line(out, line, n)) {
      cn_sbuf_printf(out, "%.*s", (int)n, line);
    }
    line = next;
  }
  cn_sbuf_free(&host);
  return CN_OK;
}

/* A uint4x32 constant as a C++ list-initialization; the others as in C. */
static void cuda_constant(cn_sbuf *sb, cn_prec prec, cn_value v) {
  if (cn_prec_table[prec].kind != CN_PKIND_BITS) {
    cn_const_c(sb, prec, v);
    return;
  }
  cn_sbuf_printf(sb, "(cn_u4x32{{0x%" PRIx32 "u, 0x%" PRIx32 "u, 0x%" PRIx32 "u, 0x%" PRIx32 "u}})",
                 v.w.v[0], v.w.v[1], v.w.v[2], v.w.v[3]);
}

const cn_cgen_dialect cn_cgen_cuda = {
    /* C++17's keywords and alternative tokens, C's restrict, and CUDA's built-in variables */
    .keywords =
        "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t "
        "char16_t char32_t class compl concept const consteval constexpr constinit const_cast "
        "continue co_await co_return co_yield decltype default delete do double dynamic_cast "
        "else enum explicit export extern false float for friend goto if inline int long "
        "mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected "
        "public register reinterpret_cast requires restrict return short signed sizeof static "
        "static_assert static_cast struct switch template this thread_local throw true try "
        "typedef typeid typename union unsigned using virtual void volatile wchar_t while xor "
        "xor_eq threadIdx blockIdx blockDim gridDim warpSize",
    .index_type = "int64_t",
    .const_qualifier = "const ",
    .restrict_qualifier = "__restrict__ ",
    .vector_pragma = NULL,
    .precs = cn_prec_table,
    .convert = cn_conv_c,
    .load = cn_load_c,
    .store = cn_store_c,
    .constant = cuda_constant,
    .op = cn_op_c,
    .parallel_loop = NULL, /* kernels outline nothing: the grid is the kernel view's */
    .gemm = cn_kernel_gemm,
    .prelude = cuda_prelude,
    .kernel_prefix = "extern \"C\" __global__ void ",
    .global_qualifier = "",
    .linear_id = "((int64_t)blockIdx.x * blockDim.x + threadIdx.x)",
    .local_qualifier = "__shared__ ",
    .barrier = "__syncthreads();",
    .unroll_pragma = "#pragma unroll",
};
