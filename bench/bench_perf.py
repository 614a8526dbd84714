"""The PyTorch and numpy side of bench_perf.c: the same models as cannl's, in PyTorch and numpy.

Usage: bench_perf.py BUDGET_S NAME WORKLOAD SIZE [NAME WORKLOAD SIZE ...] (bench_perf runs one
process per workload, or one for all of them with --quick), WORKLOAD one of
  matmul N     c = a @ b, a and b N x N (f32), into a preallocated c
  mlp B        784-128-10 MLP with relu, loss sum((f - y)^2) / B, one SGD step (lr 0.01)
  conv B       x B x 1 x 28 x 28, conv 1->32 3x3 valid + bias, relu, conv 32->64 3x3 valid + bias,
               loss sum(y^2) / B, forward + backward (no update)
  softmax N    softmax over N values (softmax_lanes: the same, for cannl's sums in lanes)
  stream N     c = a + 3 * b over N values, into preallocated c as cannl's buffers (a fresh
               result would time PyTorch's page faults, 2-17 ms here); PyTorch as one fused
               torch.add(a, b, alpha=3, out=c)
  attention B  causal attention of q, k, v [B, 4, 64, 32] (masked_fill, softmax, matmul),
               loss sum(y^2) / B, forward + backward
  embedding B  torch.nn.functional.embedding of a [65, 128] table by [B, 64] ids, loss
               sum(x^2) / B, forward + backward
  moons STEPS  the half-moons step (MLP 2-16-16-1, hinge loss, SGD with weight decay, batch 10),
               STEPS steps per timed run, times per step
PyTorch runs with one thread and then two (torch.set_num_threads, and OpenBLAS's threads
likewise), numpy with one thread where the workload has a plain numpy form (matmul, mlp, softmax,
stream). Each is warmed up once, then timed over repetitions (as many as fit in BUDGET_S, at least
3); prints `NAME SIDE median_ms=M best_ms=B reps=R` lines for SIDE torch1, torch2 and numpy, after
a `versions torch=V numpy=V blas=PATH` line, and `torch=missing` or `numpy=missing` first when a
package is not installed.
"""
import sys

sys.dont_write_bytecode = True  # no __pycache__ in bench/ (bench_common is imported)
from bench_common import main, np, numpy_matmul, numpy_mlp, torch, torch_conv, torch_matmul, \
    torch_mlp


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


def torch_attention(batch):
    """nanoGPT's causal attention of one layer (masked_fill, softmax, matmul), q, k, v
    [batch, 4, 64, 32] leaves, loss sum(y^2) / batch, forward + backward."""
    q, k, v = (torch.rand(batch, 4, 64, 32, requires_grad=True) for _ in range(3))
    mask = torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64)

    def step():
        q.grad = k.grad = v.grad = None
        att = (q @ k.transpose(-2, -1)) * (1.0 / 32 ** 0.5)
        att = torch.softmax(att.masked_fill(mask == 0, float("-inf")), dim=-1)
        y = att @ v
        ((y * y).sum() / batch).backward()
    return step


def torch_embedding(batch):
    """F.embedding of a [65, 128] table by [batch, 64] ids, loss sum(x^2) / batch, forward +
    backward."""
    table = torch.rand(65, 128, requires_grad=True)
    ids = (torch.arange(batch * 64) * 37 + torch.arange(batch * 64) // 5) % 65
    ids = ids.view(batch, 64)

    def step():
        table.grad = None
        x = torch.nn.functional.embedding(ids, table)
        ((x * x).sum() / batch).backward()
    return step


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
         "softmax": torch_softmax, "softmax_lanes": torch_softmax, "stream": torch_stream,
         "moons": torch_moons,
         "attention": torch_attention, "embedding": torch_embedding}
NUMPY = {"matmul": numpy_matmul, "mlp": numpy_mlp, "softmax": numpy_softmax,
         "softmax_lanes": numpy_softmax,
         "stream": numpy_stream}


main("bench_perf.py", TORCH, NUMPY, lambda workload, size: size if workload == "moons" else 1)
