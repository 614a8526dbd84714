/* The OpenCL C dialect of the generator (cn_cgen_opencl, a kernel dialect: kernels.h): kernels
 * `__kernel void`, buffers `__global`, the linear id get_global_id(0) as a long.
 *
 * The numeric semantics are builtins.h's, the one source of truth of the host C backend, not a
 * fork of it: the prelude is a short header that gives OpenCL C what builtins.h takes from the
 * C library (<stdint.h>'s fixed-width types and limit macros over OpenCL's long/uint/ushort/...,
 * the float math names with an `f` suffix as OpenCL's overloaded built-ins, memcpy as clang's
 * __builtin_memcpy on private memory), followed by builtins.h's items pruned to what the program
 * calls, without its #include lines (cgen_prelude.c). OpenCL C has no _Generic (clang accepts
 * the keyword but not a selected function designator), so ops are spelled with the typed helper
 * each generic macro selects (cn_op_c_typed). Every other spelling is the host C one (cn_conv_c,
 * cn_load_c, cn_store_c, cn_const_c): OpenCL C is C99 with these names defined.
 *
 * Invariants that keep the bits of the C backend: `#pragma OPENCL FP_CONTRACT OFF` (no a*b+c
 * contracted into an fma; a plan's fma is spelled fma()), the program built with
 * -cl-fp32-correctly-rounded-divide-sqrt (opencl.c), so + - * / sqrt and every conversion are
 * IEEE's correctly rounded results, as in C; integer ops are builtins.h's wrapping, total ones.
 * Transcendental built-ins (log, sin, exp2, pow's non-integer case, tanh's double) are the
 * device's and may differ from glibc's in the last bits. Double needs cl_khr_fp64 (enabled when
 * the device has it; a program using double fails to build on a device without it, with the
 * build log). */
#include "backend/kernels.h"

/* What builtins.h needs from the C library, for OpenCL C. The list of `f` names is the float
 * math builtins.h calls (expf, fabsf, fmodf, powf, tanhf, truncf): a new one there fails the
 * OpenCL build of tests/test_opencl.c's all-ops case until it is added here. */
static const char opencl_header[] = "#pragma OPENCL FP_CONTRACT OFF\n"
                                    "#ifdef cl_khr_fp64\n"
                                    "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
                                    "#endif\n"
                                    "typedef long int64_t;\n"
                                    "typedef ulong uint64_t;\n"
                                    "typedef int int32_t;\n"
                                    "typedef uint uint32_t;\n"
                                    "typedef ushort uint16_t;\n"
                                    "typedef uchar uint8_t;\n"
                                    "#define INT64_C(x) ((int64_t)x##L)\n"
                                    "#define UINT64_C(x) ((uint64_t)x##UL)\n"
                                    "#define INT64_MIN LONG_MIN\n"
                                    "#define INT64_MAX LONG_MAX\n"
                                    "#define UINT64_MAX ULONG_MAX\n"
                                    "#define INT32_MIN INT_MIN\n"
                                    "#define INT32_MAX INT_MAX\n"
                                    "#define UINT32_MAX UINT_MAX\n"
                                    "#define memcpy(d, s, n) __builtin_memcpy(d, s, n)\n"
                                    "#define expf exp\n"
                                    "#define fabsf fabs\n"
                                    "#define fmodf fmod\n"
                                    "#define powf pow\n"
                                    "#define tanhf tanh\n"
                                    "#define truncf trunc\n";

static cn_status opencl_prelude(cn_ctx *ctx, cn_sbuf *out, const cn_sbuf *body) {
  cn_sbuf_puts(out, opencl_header);
  return cn_cgen_prelude_items(ctx, out, body, false);
}

const cn_cgen_dialect cn_cgen_opencl = {
    /* C99's keywords, OpenCL C's (address spaces, access qualifiers, its scalar, vector, image
     * and event types), the built-ins the kernels call themselves and the limit macros of
     * OpenCL C and of the header above: no variable may take them. Names ending in _t (size_t,
     * image2d_t, ...) and of the shapes of <stdint.h>'s and <math.h>'s macros are reserved by the
     * emitter already. */
    .keywords =
        "auto break case char const continue default do double else enum extern float for goto "
        "if inline int long register restrict return short signed sizeof static struct switch "
        "typedef union unsigned void volatile while bool true false _Bool _Complex _Imaginary "
        "__kernel kernel __global global __local local __constant constant __private private "
        "__generic generic __read_only read_only __write_only write_only __read_write read_write "
        "uniform pipe __attribute__ uchar ushort uint ulong half quad complex imaginary "
        "char2 char3 char4 char8 char16 uchar2 uchar3 uchar4 uchar8 uchar16 short2 short3 short4 "
        "short8 short16 ushort2 ushort3 ushort4 ushort8 ushort16 int2 int3 int4 int8 int16 uint2 "
        "uint3 uint4 uint8 uint16 long2 long3 long4 long8 long16 ulong2 ulong3 ulong4 ulong8 "
        "ulong16 float2 float3 float4 float8 float16 double2 double3 double4 double8 double16 "
        "half2 half3 half4 half8 half16 get_global_id get_global_size get_local_id "
        "get_local_size get_group_id get_num_groups get_work_dim barrier min max clamp select "
        "mix sign abs memcpy CHAR_BIT CHAR_MAX CHAR_MIN SCHAR_MAX SCHAR_MIN UCHAR_MAX SHRT_MAX "
        "SHRT_MIN USHRT_MAX INT_MAX INT_MIN UINT_MAX LONG_MAX LONG_MIN ULONG_MAX MAXFLOAT",
    .index_type = "int64_t",
    .const_qualifier = "const ",
    .restrict_qualifier = "restrict ",
    .vector_pragma = NULL,
    .precs = cn_prec_table,
    .convert = cn_conv_c,
    .load = cn_load_c,
    .store = cn_store_c,
    .constant = cn_const_c,
    .op = cn_op_c_typed,
    .parallel_loop = NULL, /* kernels never outline: their parallel loops are the grid */
    .gemm = cn_kernel_gemm,
    .prelude = opencl_prelude,
    .kernel_prefix = "__kernel void ",
    .global_qualifier = "__global ",
    .linear_id = "(long)get_global_id(0)",
    .local_qualifier = "__local ",
    .barrier = "barrier(CLK_LOCAL_MEM_FENCE);",
    .unroll_pragma = "#pragma unroll",
};
