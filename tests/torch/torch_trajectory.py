#!/usr/bin/python3
"""PyTorch's side of tests/torch/test_vs_torch: one training run, recorded.

Trains tyto-train's CNN or MLP on the first --limit Fashion-MNIST training
images for --steps steps with PyTorch (Debian's python3-torch), in float64
by default, and writes what tyto needs to compute the same run and what it
must arrive at, as safetensors files in --out:

  init.safetensors   the initial parameters: PyTorch's default
                     initialisation (torch.manual_seed(--seed)), in tyto's
                     names and layouts (a linear weight is W^T, [in, out];
                     a convolution's is OIHW as PyTorch's)
  final.safetensors  the parameters after the last step, same names
  run.safetensors    "order"     I64 [steps, batch]: the training images of
                                 each step (a torch.randperm of the subset
                                 per pass; every batch full)
                     "mask"      U64 [steps, words] (CNN with --dropout > 0):
                                 the dropout keep-masks of each step,
                                 [batch, 32, 14, 14] row-major, 64 bits per
                                 word, least significant bit first
                     "loss"      F64 [steps]: the batch's mean loss
                     "grad_ss"   F64 [steps, params]: each gradient's sum of
                                 squares
                     "param_sum", "param_ss"  F64 [steps, params]: each
                                 parameter's sum and sum of squares after
                                 the step's update
                     metadata: "params" (the names, comma-separated, in
                     the order of the columns), and the options

The network is tools/train/model_file.c's preset, in PyTorch:
  cnn: conv 5x5/32 same (padding 2), ReLU, max_pool 2x2, dropout, fc 1024
       ReLU, linear 10; dropout is x * (mask / (1 - p)), which is what
       torch.nn.functional.dropout computes, with the mask drawn here
  mlp: linear 784-128, ReLU, linear 10
and the loss softmax cross-entropy, the batch mean.  Images are the bytes
times 1/255 (tyto_dataset_read_images' arithmetic).

Usage: torch_trajectory.py --out DIR [--model cnn|mlp] [--optimizer NAME]
         [--lr X] [--momentum X] [--nesterov] [--weight-decay X]
         [--batch N] [--steps N] [--limit N] [--dropout P] [--seed N]
         [--dtype f64|f32] [--threads N] [--data DIR]
Exit status 0, 2 on bad arguments or data, 77 when torch is missing.
"""

import argparse
import gzip
import json
import os
import sys

import numpy as np

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path, ndim):
    """A gzip (or plain) IDX file of unsigned bytes as a uint8 array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = 0x800 | ndim
    found = int.from_bytes(data[0:4], "big")
    if found != magic:
        raise ValueError(f"{path}: IDX magic 0x{found:08x}, expected "
                         f"0x{magic:08x}")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
            for i in range(ndim)]
    header = 4 + 4 * ndim
    return np.frombuffer(data, np.uint8, offset=header).reshape(dims)


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    raise ValueError(f"{data_dir}: no {stem}(.gz)")


DTYPES = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32",
          np.dtype("<i8"): "I64", np.dtype("<u8"): "U64"}


def save_safetensors(path, tensors, meta):
    """Writes (name, array) pairs and string metadata as safetensors."""
    header = {"__metadata__": {k: str(v) for k, v in meta.items()}}
    blobs, offset = [], 0
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        b = a.tobytes()
        header[name] = {"dtype": DTYPES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    ap.add_argument("--optimizer", choices=["adam", "adamw", "sgd"],
                    default="adam")
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--nesterov", action="store_true")
    ap.add_argument("--weight-decay", type=float, default=None)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--limit", type=int, default=1024)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", choices=["f64", "f32"], default="f64")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--data", default=DEFAULT_DATA)
    args = ap.parse_args(argv)
    if args.batch < 1 or args.steps < 1 or args.limit < args.batch or \
            not 0 <= args.dropout < 1:
        ap.error("need --batch, --steps >= 1, --limit >= --batch and "
                 "--dropout in [0, 1)")
    try:
        images = read_idx(find(args.data, "train-images-idx3-ubyte"), 3)
        labels = read_idx(find(args.data, "train-labels-idx1-ubyte"), 1)
    except (OSError, ValueError) as e:
        print(f"torch_trajectory: {e}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError as e:
        print(f"torch_trajectory: {e}", file=sys.stderr)
        return 77
    nn, F = torch.nn, torch.nn.functional
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = torch.float64 if args.dtype == "f64" else torch.float32
    npdtype = np.float64 if args.dtype == "f64" else np.float32
    # Drawn in float64 whatever --dtype is, so that the float32 and float64
    # runs of one seed start from the same values (rounded) and draw the
    # same masks.
    torch.set_default_dtype(torch.float64)

    n = args.limit
    x_all = torch.from_numpy(images[:n].astype(np.float64) * (1.0 / 255.0))
    x_all = x_all.to(dtype).reshape(n, 1, 28, 28)
    if args.model == "mlp":
        x_all = x_all.reshape(n, 784)
    y_all = torch.from_numpy(labels[:n].astype(np.int64))

    torch.manual_seed(args.seed)
    if args.model == "cnn":
        layers = {"conv": nn.Conv2d(1, 32, 5, stride=1, padding=2),
                  "fc": nn.Linear(32 * 14 * 14, 1024),
                  "out": nn.Linear(1024, 10)}
    else:
        layers = {"fc1": nn.Linear(784, 128), "fc2": nn.Linear(128, 10)}
    model = nn.ModuleDict(layers).to(dtype)
    p = args.dropout

    def forward(x, mask):
        if args.model == "mlp":
            return model["fc2"](F.relu(model["fc1"](x)))
        h = F.max_pool2d(F.relu(model["conv"](x)), 2)
        if mask is not None:
            # torch.nn.functional.dropout: input * (bernoulli / (1 - p))
            h = h * (mask / (1.0 - p))
        h = F.relu(model["fc"](h.flatten(1)))
        return model["out"](h)

    # tyto's names and layouts, in the order of tyto_nn_parameters().
    params = []
    for lname, layer in layers.items():
        params.append((lname + ".weight", layer.weight))
        params.append((lname + ".bias", layer.bias))

    def tyto_layout(name, t):
        a = t.detach().numpy().astype(npdtype)
        return a.T if a.ndim == 2 else a

    os.makedirs(args.out, exist_ok=True)
    meta = {"model": args.model, "optimizer": args.optimizer,
            "dtype": args.dtype, "params": ",".join(n_ for n_, _ in params),
            "torch": torch.__version__}
    save_safetensors(os.path.join(args.out, "init.safetensors"),
                     [(nm, tyto_layout(nm, t)) for nm, t in params], meta)

    ps = [t for _, t in params]
    kw = {}
    if args.lr is not None:
        kw["lr"] = args.lr
    if args.weight_decay is not None:
        kw["weight_decay"] = args.weight_decay
    if args.optimizer == "adam":
        opt = torch.optim.Adam(ps, **kw)
    elif args.optimizer == "adamw":
        opt = torch.optim.AdamW(ps, **kw)
    else:
        opt = torch.optim.SGD(ps, lr=kw.pop("lr", 0.01),
                              momentum=args.momentum,
                              nesterov=args.nesterov, **kw)
    meta.update({k: v for k, v in opt.defaults.items()
                 if isinstance(v, (int, float, bool))})

    gen = torch.Generator().manual_seed(args.seed + 1)
    use_mask = args.model == "cnn" and p > 0
    mask_shape = (args.batch, 32, 14, 14)
    mask_bits = int(np.prod(mask_shape))
    words = (mask_bits + 63) // 64
    steps = args.steps
    order = np.zeros((steps, args.batch), np.int64)
    masks = np.zeros((steps, words), np.uint64)
    loss_v = np.zeros(steps)
    grad_ss = np.zeros((steps, len(ps)))
    param_sum = np.zeros((steps, len(ps)))
    param_ss = np.zeros((steps, len(ps)))
    perm, pos = None, n
    for s in range(steps):
        if pos + args.batch > n:
            perm, pos = torch.randperm(n, generator=gen), 0
        idx = perm[pos:pos + args.batch]
        pos += args.batch
        order[s] = idx.numpy()
        mask = None
        if use_mask:
            mask = torch.bernoulli(torch.full(mask_shape, 1.0 - p),
                                   generator=gen).to(dtype)
            bits = np.zeros(words * 64, np.uint8)
            bits[:mask_bits] = mask.numpy().reshape(-1) != 0
            masks[s] = np.packbits(bits, bitorder="little").view("<u8")
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(x_all[idx], mask), y_all[idx])
        loss.backward()
        loss_v[s] = loss.item()
        for k, t in enumerate(ps):
            g = t.grad.detach().double()
            grad_ss[s, k] = float((g * g).sum())
        opt.step()
        for k, t in enumerate(ps):
            v = t.detach().double()
            param_sum[s, k] = float(v.sum())
            param_ss[s, k] = float((v * v).sum())

    run = [("order", order), ("loss", loss_v), ("grad_ss", grad_ss),
           ("param_sum", param_sum), ("param_ss", param_ss)]
    if use_mask:
        run.append(("mask", masks))
    save_safetensors(os.path.join(args.out, "final.safetensors"),
                     [(nm, tyto_layout(nm, t)) for nm, t in params], meta)
    save_safetensors(os.path.join(args.out, "run.safetensors"), run, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
