"""The PyTorch and numpy side of bench_perf.c: the same models as cannl's, in PyTorch and numpy.

Usage: bench_perf.py BUDGET_S NAME WORKLOAD SIZE [NAME WORKLOAD SIZE ...] (bench_perf runs one
process per workload, or one for all of them with --quick), WORKLOAD one of
  matmul N     c = a @ b, a and b N x N (f32), into a preallocated c
  mlp B        784-128-10 MLP with relu, loss sum((f - y)^2) / B, one SGD step (lr 0.01)
  conv B       x B x 1 x 28 x 28, conv 1->32 3x3 valid + bias, relu, conv 32->64 3x3 valid + bias,
               loss sum(y^2) / B, forward + backward (no update)
  softmax N    softmax over N values
  stream N     c = a + 3 * b over N values, into preallocated c as cannl's buffers (a fresh
               result would time PyTorch's page faults, 2-17 ms here); PyTorch as one fused
               torch.add(a, b, alpha=3, out=c)
  moons STEPS  the half-moons step (MLP 2-16-16-1, hinge loss, SGD with weight decay, batch 10),
               STEPS steps per timed run, times per step
PyTorch runs with one thread and then two (torch.set_num_threads, and OpenBLAS's threads
likewise), numpy with one thread where the workload has a plain numpy form (matmul, mlp, softmax,
stream). Each is warmed up once, then timed over repetitions (as many as fit in BUDGET_S, at least
3); prints `NAME SIDE median_ms=M best_ms=B reps=R` lines for SIDE torch1, torch2 and numpy, after
a `versions torch=V numpy=V blas=PATH` line, and `torch=missing` or `numpy=missing` first when a
package is not installed.
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


def blas_libraries():
    """The BLAS and LAPACK libraries loaded into this process (numpy and torch link libblas.so.3,
    Debian's alternative: reference BLAS, or OpenBLAS when libopenblas0 is installed)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "blas" in line or "lapack" in line}
    return sorted(p for p in paths if p.startswith("/"))


def set_threads(threads):
    """PyTorch's intra-op threads and OpenBLAS's own pool (torch.set_num_threads does not reach
    OpenBLAS in Debian's build, BLAS_INFO=generic), so that "one thread" is one thread."""
    if torch is not None:
        torch.set_num_threads(threads)
    for path in blas_libraries():
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_set_num_threads"):
            lib.openblas_set_num_threads(threads)


def measure(name, fn, budget, per_run=1):
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


def torch_matmul(n):
    a, b, c = torch.rand(n, n), torch.rand(n, n), torch.empty(n, n)
    return lambda: torch.matmul(a, b, out=c)


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


def torch_softmax(n):
    x = torch.rand(n)
    return lambda: torch.softmax(x, 0)


def torch_stream(n):
    a, b, c = torch.rand(n), torch.rand(n), torch.empty(n)
    return lambda: torch.add(a, b, alpha=3, out=c)


def torch_moons(steps):
    x, y = torch.rand(steps, 10, 2), torch.tensor([1.0, -1.0]).repeat(5)
    model = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 1, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.2, weight_decay=1e-4)

    def run():  # `steps` steps; the caller divides by the count
        for n in range(steps):
            opt.zero_grad()
            loss = torch.relu(1 - y * model(x[n]).squeeze(1)).mean()
            loss.backward()
            opt.step()
            loss.item()
    return run


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


def numpy_matmul(n):
    a = np.random.default_rng(1).random((n, n), dtype=np.float32)
    b = np.random.default_rng(2).random((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    return lambda: np.matmul(a, b, out=c)


def numpy_softmax(n):
    x = np.random.default_rng(1).random(n, dtype=np.float32)

    def run():
        e = np.exp(x - x.max())
        return e / e.sum()
    return run


def numpy_stream(n):
    a = np.random.default_rng(1).random(n, dtype=np.float32)
    b = np.random.default_rng(2).random(n, dtype=np.float32)
    c, t = np.empty(n, np.float32), np.empty(n, np.float32)

    def run():
        np.multiply(b, np.float32(3), out=t)
        np.add(a, t, out=c)
    return run


TORCH = {"matmul": torch_matmul, "mlp": torch_mlp, "conv": torch_conv,
         "softmax": torch_softmax, "stream": torch_stream, "moons": torch_moons}
NUMPY = {"matmul": numpy_matmul, "mlp": numpy_mlp, "softmax": numpy_softmax,
         "stream": numpy_stream}


def run(name, workload, size, budget):
    if workload not in TORCH:
        sys.exit(f"bench_perf.py: unknown workload {workload}")
    per_run = size if workload == "moons" else 1
    if torch is not None:
        for threads in (1, 2):
            set_threads(threads)
            torch.manual_seed(1)
            measure(f"{name} torch{threads}", TORCH[workload](size), budget, per_run)
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
