"""What the PyTorch and numpy sides of the benchmarks (bench_perf.py, bench_gemm.py) share: the
thread setting, the timing, the models both time and the command line.

Invariants: every timed side is warmed up once, then timed over repetitions (as many as fit in the
budget, 3 to 200), and prints one `NAME SIDE median_ms=M best_ms=B reps=R` line (flushed), as the
C side parses it; `torch` and `np` are None when the package is not installed. Imported by the
scripts next to it (Python puts a script's own directory first on sys.path).
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


def measure(name, fn, budget, per_run=1):
    """Times fn (milliseconds divided by per_run, the steps one call does) and prints the line."""
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
    scale = 1e3 / per_run
    print(f"{name} median_ms={statistics.median(times) * scale:.6f} "
          f"best_ms={min(times) * scale:.6f} reps={reps}", flush=True)


def torch_product(a_shape, b_shape):
    a, b = torch.rand(*a_shape), torch.rand(*b_shape)
    c = torch.empty(a_shape[0], b_shape[1])
    return lambda: torch.matmul(a, b, out=c)


def torch_matmul(n):
    return torch_product((n, n), (n, n))


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


def numpy_product(a_shape, b_shape):
    a = np.random.default_rng(1).random(a_shape, dtype=np.float32)
    b = np.random.default_rng(2).random(b_shape, dtype=np.float32)
    c = np.empty((a_shape[0], b_shape[1]), np.float32)
    return lambda: np.matmul(a, b, out=c)


def numpy_matmul(n):
    return numpy_product((n, n), (n, n))


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


def run(script, name, workload, size, budget, models, per_run):
    """One workload: PyTorch with one and then two threads, numpy with one where it has a form.
    models is (TORCH, NUMPY), dicts from workload to a function of the size returning the callable
    to time."""
    torch_models, numpy_models = models
    if workload not in torch_models:
        sys.exit(f"{script}: unknown workload {workload}")
    if torch is not None:
        for threads in (1, 2):
            set_threads(threads)
            torch.manual_seed(1)
            measure(f"{name} torch{threads}", torch_models[workload](size), budget, per_run)
    if np is not None and workload in numpy_models:
        set_threads(1)
        measure(f"{name} numpy", numpy_models[workload](size), budget)


def print_versions():
    """The missing packages and versions lines the C side reads."""
    if torch is None:
        print("torch=missing", flush=True)
    if np is None:
        print("numpy=missing", flush=True)
    blas = blas_libraries()
    print(f"versions torch={torch.__version__ if torch else 'missing'} "
          f"numpy={np.__version__ if np else 'missing'} "
          f"blas={blas[0] if blas else 'none'}", flush=True)


def main(script, torch_models, numpy_models, per_run=lambda workload, size: 1):
    """The command line BUDGET_S NAME WORKLOAD SIZE [NAME WORKLOAD SIZE ...]: the missing packages
    and versions lines, then each workload; per_run(workload, size) is the steps one timed call
    does (torch only)."""
    budget, args = float(sys.argv[1]), sys.argv[2:]
    print_versions()
    for i in range(0, len(args) - 2, 3):
        workload, size = args[i + 1], int(args[i + 2])
        run(script, args[i], workload, size, budget, (torch_models, numpy_models),
            per_run(workload, size))
