"""The PyTorch side of bench_fashion.c: the Fashion-MNIST training of demo/fashion.c in PyTorch,
for the time comparison.

Same models (the MLP 784-128-10, or the convnet conv 1->16 3x3 padded, relu, max-pool 2,
conv 16->32 3x3 padded, relu, max-pool 2, dense 1568->128, relu, dense 128->10; PyTorch's default
init), same data (the IDX files read with numpy, pixels / 255 standardized by 0.2860 and 0.3530,
per mini-batch as cannl's graph does), same mini-batch of 100 reshuffled every epoch, same loss
(the mean cross-entropy) and optimizer (Adam, the learning rate decaying linearly over all steps
from 2e-3 to 1e-4), evaluation on the test set in batches of 500 after every epoch. Runs with one
and then two threads (bench_common.set_threads), with OMP_WAIT_POLICY=PASSIVE unless the
environment sets it: on two threads PyTorch's idle OpenMP workers otherwise spin against OpenBLAS's
threads, and on a 2-core machine an MLP epoch took 16 s instead of 1.1 s (the one-thread times do
not change).

Usage: bench_fashion.py DATA_DIR MODEL EPOCHS TRAIN_EXAMPLES TEST_EXAMPLES (0: all). Prints the
missing-package and `versions` lines of bench_common, then for each thread count T and epoch E
(from 1) `torchT epoch=E train_s=S eval_s=S accuracy=A` (flushed); the training time includes the
epoch's shuffle, not the evaluation. bench_startup.py imports its data, models and training.
"""
import gzip
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch loads libgomp

from bench_common import np, print_versions, set_threads, torch  # noqa: E402

MEAN, STD, BATCH, TEST_BATCH = 0.2860, 0.3530, 100, 500
LEARNING_RATE, FINAL_LEARNING_RATE = 2e-3, 1e-4


def load_idx(path, header, limit):
    """The bytes after an IDX file's header, as a tensor of its first `limit` items (0: all)."""
    with gzip.open(path, "rb") as f:
        data = np.frombuffer(f.read(), np.uint8, offset=header)
    items = torch.from_numpy(data.copy())
    if header == 16:
        items = items.reshape(-1, 28, 28)
    return items[:limit] if limit else items


def build(model):
    nn = torch.nn
    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(7 * 7 * 32, 128), nn.ReLU(), nn.Linear(128, 10))


def standardized(images):
    """uint8 images [N, 28, 28] as the float input [N, 1, 28, 28] both models take."""
    return ((images.float() / 255 - MEAN) / STD).unsqueeze(1)


def train(name, model_name, epochs, data, on_step=None):
    """Trains and evaluates; on_step(epoch, batch), when given, is called after every step (the
    loss read)."""
    x, y, test_x, test_y = data
    torch.manual_seed(1)
    model = build(model_name)
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = x.shape[0] // BATCH
    steps = epochs * batches
    generator = torch.Generator().manual_seed(1)
    for epoch in range(epochs):
        start = time.perf_counter()
        order = torch.randperm(x.shape[0], generator=generator)
        total = 0.0
        for b in range(batches):
            n = epoch * batches + b
            for group in opt.param_groups:
                group["lr"] = LEARNING_RATE + (FINAL_LEARNING_RATE - LEARNING_RATE) * n / steps
            index = order[b * BATCH:(b + 1) * BATCH]
            opt.zero_grad()
            loss = loss_fn(model(standardized(x[index])), y[index].long())
            loss.backward()
            opt.step()
            total += loss.item()
            if on_step:
                on_step(epoch, b)
        trained = time.perf_counter()
        correct = 0
        with torch.no_grad():
            for b in range(0, test_x.shape[0], TEST_BATCH):
                logits = model(standardized(test_x[b:b + TEST_BATCH]))
                correct += (logits.argmax(1) == test_y[b:b + TEST_BATCH].long()).sum().item()
        evaluated = time.perf_counter()
        print(f"{name} epoch={epoch + 1} train_s={trained - start:.6f} "
              f"eval_s={evaluated - trained:.6f} accuracy={correct / test_x.shape[0]:.6f} "
              f"loss={total / batches:.6f}", flush=True)


def load_data(data_dir, train_examples, test_examples):
    """(train images, train labels, test images, test labels), the first train_examples and
    test_examples of each set (0: all)."""
    files = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
             "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    paths = [os.path.join(data_dir, f) for f in files]
    return (load_idx(paths[0], 16, train_examples), load_idx(paths[1], 8, train_examples),
            load_idx(paths[2], 16, test_examples), load_idx(paths[3], 8, test_examples))


def main():
    data_dir, model, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    train_examples, test_examples = int(sys.argv[4]), int(sys.argv[5])
    print_versions()
    if torch is None or np is None:
        return
    data = load_data(data_dir, train_examples, test_examples)
    for threads in (1, 2):
        set_threads(threads)
        train(f"torch{threads}", model, epochs, data)


if __name__ == "__main__":
    main()
