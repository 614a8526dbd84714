"""The PyTorch side of bench_startup.c: how long PyTorch takes from its process's start to the end
of the first training step and of the first epoch of the models of the startup benchmark's
scripts, on one thread (bench_common.set_threads, OMP_WAIT_POLICY=PASSIVE as bench_fashion.py
explains). The models, data and steps are the other benchmarks' (imported, not repeated):
- moons: bench_moons.py's (examples/moons.cnl): the epoch is its 80 steps;
- mlp, convnet: bench_fashion.py's (examples/fashion_mnist.cnl), the data read from DATA_DIR
  (the training and test sets, as the script loads both), the epoch its 600 steps (the
  evaluation after it is not timed);
- gpt: bench_gpt.py's (examples/gpt.cnl), the corpus read from CORPUS, with the script's warm-up
  of 100 steps and the subnormals flushed as bench_gpt.py runs it; the "epoch" is the STEPS steps
  the C side runs the script for.
Nothing is warmed up: the first step pays for whatever PyTorch does on first use.

Usage: bench_startup.py moons | mlp DATA_DIR | convnet DATA_DIR | gpt CORPUS STEPS
Prints the missing-package and versions lines of bench_common, then `imported=T` (torch and numpy
loaded), `first_step=T` and `first_epoch=T` (flushed), T the time of CLOCK_MONOTONIC in seconds,
the clock the C side reads before it starts this process.
"""
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch loads libgomp

from bench_common import np, print_versions, set_threads, torch  # noqa: E402


def stamp(name):
    print(f"{name}={time.clock_gettime(time.CLOCK_MONOTONIC):.6f}", flush=True)


def moons():
    import bench_moons
    steps = bench_moons.BATCHES
    generator = torch.Generator().manual_seed(1)
    x, y = bench_moons.moons(generator)
    step = bench_moons.trainer(*bench_moons.build(generator), x, y, steps)
    for n in range(steps):
        step(n)
        if n == 0:
            stamp("first_step")
    stamp("first_epoch")


def fashion(model, data_dir):
    import bench_fashion

    def on_step(epoch, batch):
        if batch == 0:
            stamp("first_step")
        if batch == 599:
            stamp("first_epoch")
    bench_fashion.train("torch1", model, 1, bench_fashion.load_data(data_dir, 0, 0), on_step)


def gpt(corpus, steps):
    import bench_gpt
    tokens, vocab, train = bench_gpt.load_text([corpus])
    torch.set_flush_denormal(True)
    torch.manual_seed(1)
    model = bench_gpt.build_model(len(vocab))
    opt = bench_gpt.optimizer(model)
    for step in range(steps):
        x, y = bench_gpt.windows(tokens, 0, train, 0, step, bench_gpt.BATCH, bench_gpt.CONTEXT)
        loss = bench_gpt.train_step(model, opt, bench_gpt.as_tensor(x), bench_gpt.as_tensor(y),
                                    bench_gpt.learning_rate(step, steps, 100))
        loss.item()
        if step == 0:
            stamp("first_step")
    stamp("first_epoch")


def main():
    print_versions()
    if torch is None or np is None:
        return
    stamp("imported")
    set_threads(1)
    model = sys.argv[1]
    if model == "moons":
        moons()
    elif model in ("mlp", "convnet"):
        fashion(model, sys.argv[2])
    elif model == "gpt":
        gpt(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(f"bench_startup.py: unknown model {model}")


main()
