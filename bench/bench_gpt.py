"""The PyTorch side of the GPT benchmark (issue 28; the C side, bench_gpt.c, comes later): nanoGPT's
character model trained on Debian's fortunes, for the comparison of training speed, validation
loss and sampling time with cannl.

The model is nanoGPT's (model.py): token and position embeddings, n_layer pre-norm blocks (layer
norm with bias, causal multi-head self-attention with a bias on the qkv and output projections,
layer norm, MLP 4x with GELU), a final layer norm and the head tied to the token embedding;
normal(0, 0.02) init, the residual projections at 0.02 / sqrt(2 n_layer). Its configuration is
the one nanoGPT's config/train_shakespeare_char.py gives for a CPU run: 4 layers, 4 heads,
embedding 128, context 64, batch 12, dropout 0, bias; AdamW (betas 0.9, 0.99, weight decay 0.1 on
the parameters of 2 or more axes only: matrices and embeddings, as configure_optimizers groups
them), learning rate 1e-3 decaying by a cosine to 1e-4 over the steps (no warm-up unless
--warmup, which nanoGPT's config sets to 100: linear from 0), gradients clipped to a global norm
of 1.0. Two choices differ from nanoGPT and follow cannl: the GELU is the tanh form (cannl's
gelu; nanoGPT's nn.GELU() is the erf form), and the attention is written out (softmax of the
masked scores; PyTorch 1.13 has no scaled_dot_product_attention).

The data follow src/data/text.c's rules (include/cannl.h, cn_data_load_text), written out here in
Python: the regular files of the directory (a symbolic link in it is not followed: NAME.u8 repeats
NAME) whose names start with no '.' and do not end in ".dat", in the byte order of their names;
the lines that are exactly "%" dropped, a newline added to a file whose last line has none; the
vocabulary the bytes that occur, ascending; the first floor(9 n / 10) tokens train, the rest
validate. The windows are cannl's own (cn_text_draw_windows): the starts of step s are slots
0 .. batch - 1 of cn_dataset_permute(seed, s, starts, .), the keyed Feistel permutation of
src/data/dataset.c reproduced below, so both sides train on the same batches in the same order.
The validation loss is the mean over --eval-batches batches (steps 0 .. E - 1 of the validation
split, the same seed) after the last step; the bigram baseline (add-one smoothing, fitted on the
training split, over the validation split's pairs: cn_text_bigram_loss) is printed with it.

Each thread count (1, then 2: bench_common.set_threads, OMP_WAIT_POLICY=PASSIVE unless the
environment sets it, as bench_fashion.py explains; subnormals flushed, torch.set_flush_denormal,
PyTorch's fastest setting here) trains a fresh model (torch.manual_seed(1))
and prints one JSON line: {"bench": "gpt", "side": "torchT", "threads": T, "steps", "batch",
"context", "params", "train_s", "train_tokens_per_s", "train_gflops_per_s" (nanoGPT's
estimate_mfu count: 6 N + 12 L H Q T flops per token, N the parameters without the position
embedding), "train_loss" (the last step's), "valid_loss", "bigram_valid_loss",
"sample_step_ms" (the median over 100 steps of one token's sampling: the forward of a [1, 64]
window without gradients, the head on the last position only as nanoGPT's generate does, the
softmax at temperature 1 and a multinomial draw)}.
Without torch it prints the missing-package and versions lines of bench_common and stops.
bench_startup.py imports its corpus, windows, model and training step.

Usage: bench_gpt.py [--data DIR] [--steps N] [--eval-batches E] [--seed S] [--warmup W]
                    [--threads 1,2]
"""
import argparse
import json
import math
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch loads libgomp

from bench_common import print_versions, set_threads, torch  # noqa: E402

N_LAYER, N_HEAD, N_EMBD, CONTEXT, BATCH = 4, 4, 128, 64, 12
LEARNING_RATE, MIN_LEARNING_RATE, BETAS, WEIGHT_DECAY, CLIP = 1e-3, 1e-4, (0.9, 0.99), 0.1, 1.0


# ---- The corpus (src/data/text.c) ----------------------------------------------------------

def read_text_file(path):
    """The file's lines but those that are exactly "%", with a final newline."""
    with open(path, "rb") as f:
        data = f.read()
    out = bytearray()
    for line in data.splitlines(keepends=True):
        if line in (b"%", b"%\n"):
            continue
        out += line
        if not line.endswith(b"\n"):
            out += b"\n"
    return bytes(out)


def load_text(paths):
    """(tokens, vocabulary bytes, train): cn_data_load_text's corpus of the paths."""
    data = bytearray()
    for path in paths:
        if os.path.isdir(path):
            names = sorted((n for n in os.listdir(path)
                            if not n.startswith(".") and not n.endswith(".dat")),
                           key=os.fsencode)
            for name in names:
                full = os.path.join(path, name)
                if os.path.isfile(full) and not os.path.islink(full):
                    data += read_text_file(full)
        else:
            data += read_text_file(path)
    vocab = sorted(set(data))
    ids = {b: i for i, b in enumerate(vocab)}
    tokens = bytes(ids[b] for b in data)
    return tokens, bytes(vocab), len(tokens) * 9 // 10


# ---- The windows (src/data/dataset.c, cn_dataset_permute) ----------------------------------

M64 = (1 << 64) - 1
PERMUTE_ROUNDS = 6


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Permuter:
    """The keyed Feistel network of (seed, epoch) over [0, n), walked back into [0, n)."""

    def __init__(self, seed, epoch, n):
        self.h = 1
        while (1 << (2 * self.h)) < n:
            self.h += 1
        self.mask, self.n = (1 << self.h) - 1, n
        self.keys = [mix64(seed ^ mix64((epoch + 0x9E3779B97F4A7C15 * (r + 1)) & M64))
                     for r in range(PERMUTE_ROUNDS)]

    def __call__(self, i):
        x = i
        while True:
            left, right = x >> self.h, x & self.mask
            for key in self.keys:
                left, right = right, left ^ (mix64(key ^ right) & self.mask)
            x = (left << self.h) | right
            if x < self.n:
                return x


def windows(tokens, lo, length, seed, step, batch, context):
    """cn_text_draw_windows: (x, y) as lists of batch lists of context token ids."""
    permute = Permuter(seed, step, length - context)
    xs, ys = [], []
    for b in range(batch):
        start = lo + permute(b)
        xs.append(tokens[start:start + context])
        ys.append(tokens[start + 1:start + context + 1])
    return xs, ys


def bigram_loss(tokens, train):
    """cn_text_bigram_loss over the validation split: add-one smoothing, fitted on training."""
    vocab = max(tokens) + 1
    pairs, firsts = [0] * (vocab * vocab), [0] * vocab
    for a, b in zip(tokens[:train - 1], tokens[1:train]):
        pairs[a * vocab + b] += 1
        firsts[a] += 1
    valid = tokens[train:]
    total = sum(-math.log((pairs[a * vocab + b] + 1) / (firsts[a] + vocab))
                for a, b in zip(valid, valid[1:]))
    return total / (len(valid) - 1)


# ---- The model (nanoGPT's model.py) --------------------------------------------------------

def build_model(vocab):
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
            self.c_proj = nn.Linear(N_EMBD, N_EMBD)
            self.register_buffer("mask", torch.tril(torch.ones(CONTEXT, CONTEXT))
                                 .view(1, 1, CONTEXT, CONTEXT))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
            q, k, v = (t.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(N_EMBD), Attention()
            self.ln_2 = nn.LayerNorm(N_EMBD)
            self.c_fc, self.c_proj = nn.Linear(N_EMBD, 4 * N_EMBD), nn.Linear(4 * N_EMBD, N_EMBD)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, N_EMBD), nn.Embedding(CONTEXT, N_EMBD)
            self.h = nn.ModuleList(Block() for _ in range(N_LAYER))
            self.ln_f = nn.LayerNorm(N_EMBD)
            self.lm_head = nn.Linear(N_EMBD, vocab, bias=False)
            self.wte.weight = self.lm_head.weight  # nanoGPT's weight tying
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    nn.init.normal_(module.weight, 0.0, 0.02)
                    if module.bias is not None:
                        nn.init.zeros_(module.bias)
                elif isinstance(module, nn.Embedding):
                    nn.init.normal_(module.weight, 0.0, 0.02)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * N_LAYER))

        def forward(self, idx, last=False):
            pos = torch.arange(idx.size(1))
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            if last:  # nanoGPT's inference: the head on the last position only
                x = x[:, [-1], :]
            return self.lm_head(self.ln_f(x))

    return GPT()


def learning_rate(step, steps, warmup):
    """Linear warm-up over `warmup` steps, then a cosine from LEARNING_RATE to MIN_LEARNING_RATE."""
    if step < warmup:
        return LEARNING_RATE * (step + 1) / warmup
    ratio = (step - warmup) / max(1, steps - warmup)
    return MIN_LEARNING_RATE + 0.5 * (1 + math.cos(math.pi * ratio)) * (
        LEARNING_RATE - MIN_LEARNING_RATE)


def optimizer(model):
    """nanoGPT's AdamW: weight decay on the parameters of 2 or more axes only."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=LEARNING_RATE, betas=BETAS)


def train_step(model, opt, x, y, lr):
    """One step on the windows x, y (tensors) at the learning rate lr; returns the loss tensor."""
    for group in opt.param_groups:
        group["lr"] = lr
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    opt.step()
    return loss


def as_tensor(rows):
    return torch.tensor([list(r) for r in rows], dtype=torch.long)


def run(threads, args, corpus):
    tokens, vocab, train = corpus
    set_threads(threads)
    # The reference at its best: this model's activations and optimizer state reach subnormal
    # values, which PyTorch's CPU kernels compute slowly (microcode assists): flushing them to zero
    # made it 1.21x faster here (10547 against 8692 tokens/s over 300 steps on one thread); cannl
    # computes them as IEEE says, at full speed, and is compared with the faster reference.
    torch.set_flush_denormal(True)
    torch.manual_seed(1)
    model = build_model(len(vocab))
    opt = optimizer(model)
    loss_fn = torch.nn.functional.cross_entropy
    # the batches are drawn before the clock starts: the data pipeline is not the benchmark
    batches = [windows(tokens, 0, train, args.seed, s, BATCH, CONTEXT) for s in range(args.steps)]
    batches = [(as_tensor(x), as_tensor(y)) for x, y in batches]
    model.train()
    start = time.perf_counter()
    for step, (x, y) in enumerate(batches):
        loss = train_step(model, opt, x, y, learning_rate(step, args.steps, args.warmup))
    train_s = time.perf_counter() - start
    train_loss = loss.item()

    model.eval()
    valid_total = 0.0
    with torch.no_grad():
        for k in range(args.eval_batches):
            x, y = windows(tokens, train, len(tokens) - train, args.seed, k, BATCH, CONTEXT)
            logits = model(as_tensor(x))
            valid_total += loss_fn(logits.view(-1, logits.size(-1)), as_tensor(y).view(-1)).item()
        window = torch.full((1, CONTEXT), vocab.index(ord("\n")), dtype=torch.long)
        generator = torch.Generator().manual_seed(args.seed)
        times = []
        for _ in range(100):
            begin = time.perf_counter()
            probs = torch.softmax(model(window, last=True)[0, -1], dim=-1)
            token = torch.multinomial(probs, 1, generator=generator)
            window = torch.cat((window[:, 1:], token.view(1, 1)), dim=1)
            times.append(time.perf_counter() - begin)

    params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    flops_per_token = 6 * params + 12 * N_LAYER * N_HEAD * (N_EMBD // N_HEAD) * CONTEXT
    tokens_trained = args.steps * BATCH * CONTEXT
    print(json.dumps({
        "bench": "gpt", "side": f"torch{threads}", "threads": threads, "steps": args.steps,
        "batch": BATCH, "context": CONTEXT, "params": params, "train_s": round(train_s, 6),
        "train_tokens_per_s": round(tokens_trained / train_s, 3),
        "train_gflops_per_s": round(flops_per_token * tokens_trained / train_s / 1e9, 3),
        "train_loss": round(train_loss, 6),
        "valid_loss": round(valid_total / args.eval_batches, 6),
        "bigram_valid_loss": round(args.bigram, 6),
        "sample_step_ms": round(statistics.median(times) * 1e3, 6)}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="/usr/share/games/fortunes")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--eval-batches", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    print_versions()
    if torch is None:
        return
    corpus = load_text([args.data])
    args.bigram = bigram_loss(*corpus[::2])
    for threads in (int(t) for t in args.threads.split(",")):
        run(threads, args, corpus)


if __name__ == "__main__":
    main()
