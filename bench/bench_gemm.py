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
import ctypes
import statistics
import sys
import time

try:
    import numpy as np
except ImportError:
    np = None
try:
    import torch
except ImportError:
    torch = None
try:
    import threadpoolctl
except ImportError:
    threadpoolctl = None


def blas_libraries():
    """The BLAS and LAPACK libraries loaded into this process (numpy and torch link libblas.so.3,
    Debian's alternative: reference BLAS, or OpenBLAS when libopenblas0 is installed)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "blas" in line or "lapack" in line}
    return sorted(p for p in paths if p.startswith("/"))


def set_threads(threads):
    """PyTorch's intra-op threads and OpenBLAS's own pool (torch.set_num_threads does not reach
    OpenBLAS in Debian's build, BLAS_INFO=generic), so that "one thread" is one thread: through
    threadpoolctl when installed, and openblas_set_num_threads of each loaded BLAS in any case."""
    if torch is not None:
        torch.set_num_threads(threads)
    if threadpoolctl is not None:
        threadpoolctl.threadpool_limits(limits=threads, user_api="blas")
    for path in blas_libraries():
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_set_num_threads"):
            lib.openblas_set_num_threads(threads)


def measure(name, fn, budget):
    fn()  # warm-up
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    reps = max(3, min(200, int(budget / max(first, 1e-9))))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    print(f"{name} median_ms={statistics.median(times) * 1e3:.6f} "
          f"best_ms={min(times) * 1e3:.6f} reps={reps}", flush=True)


def attention_shape(s):
    return s // 16, s // 16, s, s // 2


def torch_product(a_shape, b_shape):
    a, b = torch.rand(*a_shape), torch.rand(*b_shape)
    c = torch.empty(a_shape[0], b_shape[1])
    return lambda: torch.matmul(a, b, out=c)


def torch_matmul(n):
    return torch_product((n, n), (n, n))


def torch_skinny(n):
    return torch_product((n, 64), (64, n))


def torch_attention(s):
    b, h, q, d = attention_shape(s)
    x, y, c = torch.rand(b, h, q, d), torch.rand(b, h, q, d), torch.empty(b, h, q, q)
    return lambda: torch.matmul(x, y.transpose(-2, -1), out=c)


def torch_mlp(batch):
    x, y = torch.rand(batch, 784), torch.zeros(batch, 10)
    y[torch.arange(batch), torch.arange(batch) % 10] = 1
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).sum() / batch
        loss.backward()
        opt.step()
    return step


def torch_conv(batch):
    x = torch.rand(batch, 1, 28, 28)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 64, 3))

    def step():
        model.zero_grad()
        y = model(x)
        ((y * y).sum() / batch).backward()
    return step


def torch_conv64(side):
    x = torch.rand(8, 64, side, side)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1)

    def run():
        with torch.no_grad():
            conv(x)
    return run


def numpy_product(a_shape, b_shape):
    a = np.random.default_rng(1).random(a_shape, dtype=np.float32)
    b = np.random.default_rng(2).random(b_shape, dtype=np.float32)
    c = np.empty((a_shape[0], b_shape[1]), np.float32)
    return lambda: np.matmul(a, b, out=c)


def numpy_matmul(n):
    return numpy_product((n, n), (n, n))


def numpy_skinny(n):
    return numpy_product((n, 64), (64, n))


def numpy_attention(s):
    b, h, q, d = attention_shape(s)
    x = np.random.default_rng(1).random((b * h, q, d), dtype=np.float32)
    y = np.random.default_rng(2).random((b * h, q, d), dtype=np.float32)
    yt, c = y.transpose(0, 2, 1), np.empty((b * h, q, q), np.float32)
    return lambda: np.matmul(x, yt, out=c)


def numpy_mlp(batch):
    rng = np.random.default_rng(1)
    x = rng.random((batch, 784), dtype=np.float32)
    y = np.zeros((batch, 10), np.float32)
    y[np.arange(batch), np.arange(batch) % 10] = 1
    w1 = (rng.random((784, 128), dtype=np.float32) - 0.5) * 0.1
    w2 = (rng.random((128, 10), dtype=np.float32) - 0.5) * 0.1
    b1, b2 = np.zeros(128, np.float32), np.zeros(10, np.float32)
    lr = np.float32(0.01)

    def step():
        h = np.maximum(x @ w1 + b1, 0)
        d = h @ w2 + b2 - y
        g = d * np.float32(2 / batch)
        gh = (g @ w2.T) * (h > 0)
        w2[...] -= lr * (h.T @ g)
        b2[...] -= lr * g.sum(0)
        w1[...] -= lr * (x.T @ gh)
        b1[...] -= lr * gh.sum(0)
    return step


TORCH = {"matmul": torch_matmul, "skinny": torch_skinny, "attention": torch_attention,
         "mlp": torch_mlp, "conv": torch_conv, "conv64": torch_conv64}
NUMPY = {"matmul": numpy_matmul, "skinny": numpy_skinny, "attention": numpy_attention,
         "mlp": numpy_mlp}


def run(name, workload, size, budget):
    if workload not in TORCH:
        sys.exit(f"bench_gemm.py: unknown workload {workload}")
    if torch is not None:
        for threads in (1, 2):
            set_threads(threads)
            torch.manual_seed(1)
            measure(f"{name} torch{threads}", TORCH[workload](size), budget)
    if np is not None and workload in NUMPY:
        set_threads(1)
        measure(f"{name} numpy", NUMPY[workload](size), budget)


def main():
    budget, args = float(sys.argv[1]), sys.argv[2:]
    if torch is None:
        print("torch=missing", flush=True)
    if np is None:
        print("numpy=missing", flush=True)
    blas = blas_libraries()
    print(f"versions torch={torch.__version__ if torch else 'missing'} "
          f"numpy={np.__version__ if np else 'missing'} "
          f"blas={blas[0] if blas else 'none'}", flush=True)
    for i in range(0, len(args) - 2, 3):
        run(args[i], args[i + 1], int(args[i + 2]), budget)


main()
