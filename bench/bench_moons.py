"""The half-moons training step of bench_moons.c in PyTorch, for the time comparison.

Same model and step as examples/moons.c: 800 points in batches of 10, an MLP 2 -> 16 -> 16 -> 1
with relu (no bias on the last layer, as cannl's w3), the hinge loss relu(1 - y f(x)) averaged
over the batch, SGD with weight decay 1e-4 and a learning rate decaying linearly 0.2 -> 0.1.
One thread, as cannl's generated code. Run by bench_moons (usage: bench_moons.py STEPS); prints
`key=value` lines, or `torch=missing` (exit 3) when python3-torch is not installed. bench_startup.py
imports its data, model and step.
"""
import math
import sys
import time

try:
    import torch
except ImportError:
    print("torch=missing")
    sys.exit(3)

POINTS, BATCH, HIDDEN, NOISE = 800, 10, 16, 0.1
BATCHES = POINTS // BATCH


def moons(generator):
    t = torch.rand(POINTS // 2, generator=generator, dtype=torch.float64) * math.pi
    upper = torch.stack([torch.cos(t), torch.sin(t)], 1)
    lower = torch.stack([1 - torch.cos(t), 0.5 - torch.sin(t)], 1)
    xy = torch.stack([upper, lower], 1).reshape(POINTS, 2)  # interleaved: +1, -1, +1, ...
    xy += NOISE * torch.randn(POINTS, 2, generator=generator, dtype=torch.float64)
    labels = torch.tensor([1.0, -1.0]).repeat(POINTS // 2)
    return xy.float().reshape(BATCHES, BATCH, 2), labels.reshape(BATCHES, BATCH)


def build(generator):
    """The MLP 2 -> 16 -> 16 -> 1 (uniform init in [-0.25, 0.25) from the generator) and its SGD."""
    model = torch.nn.Sequential(
        torch.nn.Linear(2, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, 1, bias=False))
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.25, 0.25, generator=generator)
    return model, torch.optim.SGD(model.parameters(), lr=0.2, weight_decay=1e-4)


def trainer(model, opt, x, y, steps):
    """The training step n (of `steps`, for the learning rate) on batch n % BATCHES; returns the
    loss."""
    def step(n):
        for group in opt.param_groups:
            group["lr"] = 0.2 - 0.1 * n / steps
        b = n % BATCHES
        opt.zero_grad()
        loss = torch.relu(1 - y[b] * model(x[b]).squeeze(1)).mean()
        loss.backward()
        opt.step()
        return loss.item()
    return step


def main():
    steps = int(sys.argv[1])
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(1)
    x, y = moons(generator)
    step = trainer(*build(generator), x, y, steps)

    for n in range(BATCHES):  # warm-up: the first epoch, not timed
        step(n)
    start = time.perf_counter()
    epoch_loss = 0.0
    for n in range(steps):
        loss = step(n)
        epoch_loss = loss if n % BATCHES == 0 else epoch_loss + loss
    elapsed = time.perf_counter() - start
    print(f"version={torch.__version__}")
    print(f"threads={torch.get_num_threads()}")
    print(f"step_us={elapsed * 1e6 / steps:.3f}")
    print(f"final_epoch_loss={epoch_loss / BATCHES:.6f}")


if __name__ == "__main__":
    main()
