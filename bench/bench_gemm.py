"""The PyTorch and numpy side of bench_gemm.c: the same contractions as cannl's, in PyTorch and numpy.

Usage: bench_gemm.py BUDGET_S NAME WORKLOAD SIZE [NAME WORKLOAD SIZE ...] (bench_gemm runs one
process per workload, or one for all of them with --quick), WORKLOAD one of (all f32)
  matmul N     c = a @ b, a and b N x N, into a preallocated c
  skinny N     c = a @ b, a N x 64, b 64 x N, into a preallocated c (N x N)
  attention S  c[b,h,q,k] = sum_d q[b,h,q,d] k[b,h,k,d] with b = h = S / 16, q = k = S, d = S / 2
               (S = 128: 8, 8, 128, 64), into a preallocated c; numpy as np.matmul of
               (b*h, S, d) by the transposed view (b*h, d, S)
  mlp B        784-128-10 MLP with relu, loss sum((f - y)^2) / B, one SGD step (lr 0.01)
  conv B       x B x 1 x 28 x 28, conv 1->32 3x3 valid + bias, relu, conv 32->64 3x3 valid + bias,
               loss sum(y^2) / B, forward + backward (no update)
  conv64 S     x 8 x 64 x S x S, conv 64->64 3x3 padding 1 ("same") + bias, forward only
PyTorch runs with one thread and then two (torch.set_num_threads, and OpenBLAS's threads
likewise, through threadpoolctl when installed and openblas_set_num_threads), numpy with one thread where the workload has a plain numpy form (matmul, skinny,
attention, mlp). Each is warmed up once, then timed over repetitions (as many as fit in BUDGET_S,
at least 3); prints `NAME SIDE median_ms=M best_ms=B reps=R` lines for SIDE torch1, torch2 and
numpy, after a `versions torch=V numpy=V blas=PATH` line, and `torch=missing` or `numpy=missing`
first when a package is not installed.
"""
import sys

sys.dont_write_bytecode = True  # no __pycache__ in bench/ (bench_common is imported)
from bench_common import main, np, numpy_matmul, numpy_mlp, numpy_product, torch, torch_conv, \
    torch_matmul, torch_mlp, torch_product


def attention_shape(s):
    return s // 16, s // 16, s, s // 2


def torch_skinny(n):
    return torch_product((n, 64), (64, n))


def torch_attention(s):
    b, h, q, d = attention_shape(s)
    x, y, c = torch.rand(b, h, q, d), torch.rand(b, h, q, d), torch.empty(b, h, q, q)
    return lambda: torch.matmul(x, y.transpose(-2, -1), out=c)


def torch_conv64(side):
    x = torch.rand(8, 64, side, side)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1)

    def run():
        with torch.no_grad():
            conv(x)
    return run


def numpy_skinny(n):
    return numpy_product((n, 64), (64, n))


def numpy_attention(s):
    b, h, q, d = attention_shape(s)
    x = np.random.default_rng(1).random((b * h, q, d), dtype=np.float32)
    y = np.random.default_rng(2).random((b * h, q, d), dtype=np.float32)
    yt, c = y.transpose(0, 2, 1), np.empty((b * h, q, q), np.float32)
    return lambda: np.matmul(x, yt, out=c)


TORCH = {"matmul": torch_matmul, "skinny": torch_skinny, "attention": torch_attention,
         "mlp": torch_mlp, "conv": torch_conv, "conv64": torch_conv64}
NUMPY = {"matmul": numpy_matmul, "skinny": numpy_skinny, "attention": numpy_attention,
         "mlp": numpy_mlp}


main("bench_gemm.py", TORCH, NUMPY)
