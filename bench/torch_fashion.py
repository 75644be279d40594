#!/usr/bin/python3
"""PyTorch side of bench/train_vs_torch.py: train one Fashion-MNIST model.

Run as a subprocess by train_vs_torch.py, which sets the threading
environment (OMP_WAIT_POLICY, ...) before this process imports torch.
Prints one JSON line on stdout; progress goes to stderr.

The models are the ones tools/models.c builds for tyto-train:
  cnn: conv2d 5x5, 32 filters, stride 1, same padding, ReLU -> max_pool 2x2
       -> dropout 0.1 -> fully connected 1024 ReLU -> linear 10
  mlp: 784 -> 128 ReLU -> 10
both with softmax cross-entropy (batch mean).  --init default keeps
PyTorch's initialisation (weights and biases U(+-1/sqrt(fan_in))); --init
glorot draws tyto's instead (tyto_nn's layer defaults: Glorot uniform
weights, zero biases), with PyTorch's generator.  --save-init FILE writes
the initial parameters as safetensors in tyto's names and layouts
("conv.weight" OIHW, a linear weight as [in, out]; those of tyto-train's
presets), so that tyto can start from the same values; --init-only stops
there.  --eval-every N also evaluates every N steps, --eval-last K after
each of the last K steps ("eval_curve" in the JSON: [step, test accuracy]
pairs; evaluation time is not training time).

The whole data set lives in memory as float tensors scaled by 1/255 and is
batched by slicing a torch.randperm permutation each epoch: no DataLoader,
no workers, which is PyTorch's fastest path for a data set this small.
The last partial batch is kept (DataLoader's default drop_last=False).

--device cuda trains on torch.device('cuda') in eager mode, as a fast eager
loop does: the whole data set is moved to the GPU once, before timing; the
permutation (drawn on the CPU, so the batches are those of --device cpu
for the seed) is moved once per epoch; the loss is summed on the GPU and
read once per epoch, so no step waits for the host.  TF32 is off for
cuBLAS and cuDNN (f32 against tyto's f32).  The parameters are drawn on
the CPU, as with --device cpu, and then moved.  Before timing, a copy of
the model with its own optimiser runs a step at each batch size of the
epoch (the CUDA context, cuBLAS and cuDNN handles, lazily loaded kernels
and, with --cudnn-benchmark, cuDNN's algorithm search are set up then, as
tyto's compile is outside its epoch time); the random generators are
restored afterwards, and the seconds reported as warmup_seconds.  The
epoch is timed between torch.cuda.synchronize() calls.  Peak device
memory is torch.cuda.max_memory_allocated() and max_memory_reserved() over
the whole process (data set included; data_device_bytes says how much of
it is the data set).

--precision bf16 or f16 trains under automatic mixed precision, as a
PyTorch user would: the forward pass and the loss under
torch.autocast(device, dtype=torch.bfloat16 or torch.float16), the
parameters, their gradients and the optimiser's state in float32, and
with f16 a GradScaler (initial scale 65536, halved on a step whose
gradients overflow, which skips its update, and doubled after 2000 steps
without one: tyto-train --precision f16's defaults).  The test set is
evaluated in float32, outside autocast, as tyto-train's evaluation
program is.  Where this torch cannot autocast to the dtype on the device
(torch 1.13's CPU autocast knows bfloat16 only; a GPU without bfloat16)
it prints one line saying so and exits with status 3.

numpy is used where it is installed and is not needed otherwise (a pip
PyTorch does not require it).

Usage: torch_fashion.py --model cnn|mlp [--optimizer adam|sgd] [--lr X]
         [--batch N] [--epochs N] [--limit N] [--test-limit N]
         [--threads N] [--seed N] [--data DIR] [--init default|glorot]
         [--save-init FILE [--init-only]] [--eval-every N] [--eval-last K]
         [--device cpu|cuda] [--cudnn-benchmark] [--fused-optimizer]
         [--precision f32|bf16|f16]

Exit status: 0 done; 2 bad arguments or data, no GPU for --device cuda;
3 --precision not supported by this torch on this device.
"""

import argparse
import contextlib
import copy
import ctypes
import gzip
import json
import os
import resource
import sys
import time
import warnings

try:
    import numpy as np
except ImportError:  # a pip PyTorch runs without it; see RawImages
    np = None

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
IDX_IMAGES_MAGIC = 0x00000803  # unsigned byte, 3 dimensions
IDX_LABELS_MAGIC = 0x00000801  # unsigned byte, 1 dimension
EXIT_UNSUPPORTED = 3  # --precision that this torch cannot autocast to


class RawImages:
    """An IDX payload without numpy: its shape and its bytes."""

    def __init__(self, shape, data):
        self.shape, self.data = list(shape), data

    def __getitem__(self, sl):
        """The first items, as load_split's [:limit] asks."""
        row = 1
        for d in self.shape[1:]:
            row *= d
        n = len(range(*sl.indices(self.shape[0])))
        return RawImages([n] + self.shape[1:], self.data[:n * row])


def read_idx(path, magic):
    """Reads a gzip IDX file; returns a uint8 array shaped as its header
    (a RawImages without numpy)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: {len(data)} bytes, shorter than an IDX header")
    found = int.from_bytes(data[0:4], "big")
    if found != magic:
        raise ValueError(
            f"{path}: IDX magic 0x{found:08x}, expected 0x{magic:08x}")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big")
            for i in range(ndim)]
    count = 1
    for d in dims:
        count *= d
    if len(data) - header != count:
        raise ValueError(f"{path}: {len(data) - header} data bytes, "
                         f"header {dims} says {count}")
    if np is None:
        return RawImages(dims, data[header:])
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def load_split(data_dir, prefix, limit):
    """Images [n, 28, 28] uint8 and labels [n] uint8 of one split."""
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"),
                      IDX_IMAGES_MAGIC)
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"),
                      IDX_LABELS_MAGIC)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{data_dir}/{prefix}: {images.shape[0]} images but "
                         f"{labels.shape[0]} labels")
    if limit and limit > 0:
        images, labels = images[:limit], labels[:limit]
    return images, labels


def build_model(torch, name):
    nn = torch.nn
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=5, stride=1, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Dropout(0.1),
            nn.Flatten(),
            nn.Linear(32 * 14 * 14, 1024),
            nn.ReLU(),
            nn.Linear(1024, 10),
        )
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(28 * 28, 128),
            nn.ReLU(),
            nn.Linear(128, 10),
        )
    raise ValueError(f"unknown model '{name}': expected cnn or mlp")


# tyto's names of build_model's layers (tools/train/model_file.c's presets):
# Sequential index -> layer name.
TYTO_NAMES = {"cnn": {0: "conv", 5: "fc", 7: "out"},
              "mlp": {1: "fc1", 3: "fc2"}}


def tyto_parameters(model, name):
    """(tyto name, module) of each layer with parameters, in order."""
    return [(TYTO_NAMES[name][i], m) for i, m in enumerate(model)
            if i in TYTO_NAMES[name]]


def init_glorot(torch, model, name):
    """tyto_nn's defaults: Glorot uniform weights (fans as PyTorch's
    xavier_uniform_ counts them, which are tyto's), zero biases."""
    for _, m in tyto_parameters(model, name):
        torch.nn.init.xavier_uniform_(m.weight)
        torch.nn.init.zeros_(m.bias)


def f32_bytes(t):
    """A float32 CPU tensor's values, row-major, little-endian."""
    if np is not None:
        return np.ascontiguousarray(t.numpy().astype("<f4")).tobytes()
    if sys.byteorder != "little":
        raise ValueError("--save-init without numpy needs a little-endian "
                         "host")
    t = t.contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def save_init(path, model, name):
    """The parameters as safetensors, in tyto's names and layouts."""
    header = {"__metadata__": {"source": "torch_fashion.py"}}
    blobs, offset = [], 0
    for lname, m in tyto_parameters(model, name):
        for what, t in (("weight", m.weight), ("bias", m.bias)):
            a = t.detach().cpu().float()
            if a.dim() == 2:
                a = a.t()  # PyTorch's [out, in] -> tyto's [in, out]
            b = f32_bytes(a)
            header[f"{lname}.{what}"] = {
                "dtype": "F32", "shape": list(a.shape),
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


def evaluate(torch, model, x_test, y_test):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x_test.shape[0], 1000):
            pred = model(x_test[i:i + 1000]).argmax(dim=1)
            correct += int((pred == y_test[i:i + 1000]).sum())
    return correct / max(1, x_test.shape[0])


def to_tensor(torch, images, labels, model):
    if np is None:
        # uint8 -> float32, then a float32 division: numpy's values.
        x = torch.frombuffer(bytearray(images.data), dtype=torch.uint8) \
            .reshape(images.shape).to(torch.float32) / 255.0
        y = torch.frombuffer(bytearray(labels.data), dtype=torch.uint8) \
            .to(torch.int64)
    else:
        x = torch.from_numpy(images.astype(np.float32) / np.float32(255.0))
        y = torch.from_numpy(labels.astype(np.int64))
    x = x.reshape(-1, 1, 28, 28) if model == "cnn" else x.reshape(-1, 28 * 28)
    return x.contiguous(), y


def f32_only(torch):
    """TF32 off for cuBLAS and cuDNN (the legacy switches, which set the
    newer fp32_precision ones to match: setting only the newer ones leaves
    the two disagreeing, which torch >= 2.9 refuses at the next check);
    returns the flags as torch then reports them."""
    with warnings.catch_warnings():
        # torch >= 2.9 warns once that these switches will be deprecated.
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        state = {"matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                 "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
    for name, obj in (("matmul", torch.backends.cuda.matmul),
                      ("cudnn_conv", getattr(torch.backends.cudnn, "conv",
                                             None))):
        prec = getattr(obj, "fp32_precision", None) if obj else None
        if prec is not None:
            state[f"{name}_fp32_precision"] = prec
    if state["matmul_allow_tf32"] or state["cudnn_allow_tf32"] or \
            "tf32" in state.values():
        raise RuntimeError(f"TF32 is still on after switching it off: {state}")
    return state


def warm_up(torch, model, make_opt, make_step, x, y, sizes):
    """One training step per batch size in `sizes` on a copy of model with
    its own optimiser (and loss scaler), the random generators left as
    they were; returns the seconds it took."""
    t0 = time.perf_counter()
    cpu_rng, cuda_rng = torch.get_rng_state(), torch.cuda.get_rng_state_all()
    m = copy.deepcopy(model)
    m.train()
    o = make_opt(m.parameters())
    step = make_step(m, o)
    for n in sizes:
        step(x[:n], y[:n])
    torch.cuda.synchronize()
    del m, o, step
    torch.set_rng_state(cpu_rng)
    torch.cuda.set_rng_state_all(cuda_rng)
    return time.perf_counter() - t0


AMP_DTYPES = {"bf16": "bfloat16", "f16": "float16"}


def autocast_for(torch, device, precision):
    """(a function returning a fresh autocast context for the training
    step, None) for --precision on the device, or (None, why not) where
    this torch cannot autocast to that dtype there.  f32: a null
    context."""
    if precision == "f32":
        return contextlib.nullcontext, None
    dtype = getattr(torch, AMP_DTYPES[precision])

    def ctx():
        return torch.autocast(device, dtype=dtype)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with ctx():
                # An unsupported dtype turns autocast off with a warning
                # (torch 1.13 on the CPU: bfloat16 only) or raises.
                if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
                    on = torch.is_autocast_enabled(device) and \
                        torch.get_autocast_dtype(device) == dtype
                elif device == "cpu":
                    on = torch.is_autocast_cpu_enabled() and \
                        torch.get_autocast_cpu_dtype() == dtype
                else:
                    on = torch.is_autocast_enabled() and \
                        torch.get_autocast_gpu_dtype() == dtype
    except (RuntimeError, ValueError) as e:
        return None, str(e).strip().splitlines()[0]
    if not on:
        said = "; ".join(str(w.message) for w in caught)
        return None, (f"torch {torch.__version__} does not autocast to "
                      f"{dtype} on the {device}" + (f" ({said})" if said
                                                    else ""))
    return ctx, None


def grad_scaler_for(torch, device):
    """(a function returning a fresh GradScaler, None) for f16 on the
    device, or (None, why not)."""
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        # torch >= 2.3: one class for every device.
        try:
            amp.GradScaler(device)
            return (lambda: amp.GradScaler(device)), None
        except (RuntimeError, TypeError, ValueError) as e:
            why = str(e).strip().splitlines()[0]
    else:
        why = f"torch {torch.__version__} has no GradScaler for the {device}"
    if device == "cuda":
        return torch.cuda.amp.GradScaler, None
    return None, why


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["cnn", "mlp"], required=True)
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0,
                    help="training images (0: all)")
    ap.add_argument("--test-limit", type=int, default=0,
                    help="test images (0: all)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads (0: leave torch's default)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--init", choices=["default", "glorot"], default="default",
                    help="PyTorch's initialisation or tyto's (Glorot "
                    "uniform weights, zero biases)")
    ap.add_argument("--save-init", metavar="FILE",
                    help="write the initial parameters as safetensors in "
                    "tyto's names and layouts")
    ap.add_argument("--init-only", action="store_true",
                    help="stop after --save-init")
    ap.add_argument("--eval-every", type=int, default=0,
                    help="also evaluate every N steps")
    ap.add_argument("--eval-last", type=int, default=0,
                    help="also evaluate after each of the last K steps")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="train on the CPU or on the first CUDA GPU")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="torch.backends.cudnn.benchmark = True (cuda)")
    ap.add_argument("--fused-optimizer", action="store_true",
                    help="the optimiser's fused=True implementation (cuda)")
    ap.add_argument("--precision", choices=["f32", "bf16", "f16"],
                    default="f32",
                    help="f32, or automatic mixed precision: the forward "
                    "pass under torch.autocast to bfloat16 or float16 "
                    "(f16 with a GradScaler)")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.epochs < 1 or args.lr <= 0 or \
            args.eval_every < 0 or args.eval_last < 0:
        ap.error("--batch and --epochs must be >= 1, --lr > 0, and "
                 "--eval-every and --eval-last >= 0")
    if args.init_only and not args.save_init:
        ap.error("--init-only needs --save-init FILE")
    if args.device == "cpu" and (args.cudnn_benchmark or args.fused_optimizer):
        ap.error("--cudnn-benchmark and --fused-optimizer need --device cuda")

    try:
        train_np = load_split(args.data, "train", args.limit)
        test_np = load_split(args.data, "t10k", args.test_limit)
    except (OSError, ValueError) as e:
        print(f"torch_fashion: {e}", file=sys.stderr)
        return 2

    import torch  # after the environment is final: OpenMP reads it at load

    cuda = args.device == "cuda"
    tf32 = None
    if cuda:
        if not torch.cuda.is_available():
            print(f"torch_fashion: --device cuda: torch.cuda.is_available() "
                  f"is False (torch {torch.__version__}, CUDA "
                  f"{torch.version.cuda or 'not built in'})", file=sys.stderr)
            return 2
        torch.backends.cudnn.benchmark = args.cudnn_benchmark
        tf32 = f32_only(torch)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    autocast, why = autocast_for(torch, args.device, args.precision)
    make_scaler = None
    if autocast is not None and args.precision == "f16":
        make_scaler, why = grad_scaler_for(torch, args.device)
    if why:
        print(f"torch_fashion: --precision {args.precision} on "
              f"--device {args.device}: {why}", file=sys.stderr)
        return EXIT_UNSUPPORTED

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    x_train, y_train = to_tensor(torch, *train_np, args.model)
    x_test, y_test = to_tensor(torch, *test_np, args.model)
    del train_np, test_np
    n_train = x_train.shape[0]

    # On the CPU, whatever the device: the same values for a seed.
    model = build_model(torch, args.model)
    if args.init == "glorot":
        init_glorot(torch, model, args.model)
    if args.save_init:
        save_init(args.save_init, model, args.model)
        if args.init_only:
            return 0
    loss_fn = torch.nn.CrossEntropyLoss()  # mean over the batch

    def make_opt(params):
        kw = {"fused": True} if args.fused_optimizer else {}
        if args.optimizer == "adam":
            return torch.optim.Adam(params, lr=args.lr, **kw)
        return torch.optim.SGD(params, lr=args.lr, **kw)

    def make_step(m, o):
        """The training step of model m with optimiser o (and, for f16, a
        loss scaler of its own); returns the batch's loss as a tensor."""
        scaler = make_scaler() if make_scaler else None

        def step(xb, yb):
            o.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_fn(m(xb), yb)
            if scaler is None:
                loss.backward()
                o.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(o)
                scaler.update()
            return loss
        step.scaler = scaler
        return step

    data_device_bytes = 0
    warmup_seconds = 0.0
    if cuda:
        # The whole data set on the GPU once, before any timing.
        x_train, y_train = x_train.to(device), y_train.to(device)
        x_test, y_test = x_test.to(device), y_test.to(device)
        data_device_bytes = sum(t.numel() * t.element_size()
                                for t in (x_train, y_train, x_test, y_test))
        model.to(device)
        sizes = sorted({min(args.batch, n_train), n_train % args.batch} - {0})
        warmup_seconds = warm_up(torch, model, make_opt, make_step, x_train,
                                 y_train, sizes)
        # The warm-up's copy of the model is gone: peaks from here on.
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    opt = make_opt(model.parameters())
    train_step = make_step(model, opt)

    epoch_seconds = []
    eval_curve = []
    steps = 0
    total_steps = args.epochs * -(-n_train // args.batch)
    train_loss = float("nan")
    for epoch in range(args.epochs):
        model.train()
        loss_sum = 0.0
        # On the GPU the loss is summed there: reading it each step would
        # make every step wait for the GPU.
        loss_acc = torch.zeros((), device=device) if cuda else None
        sync()
        t0 = time.perf_counter()
        perm = torch.randperm(n_train)
        if cuda:
            perm = perm.to(device)
        for i in range(0, n_train, args.batch):
            idx = perm[i:i + args.batch]
            loss = train_step(x_train[idx], y_train[idx])
            if cuda:
                loss_acc += loss.detach() * idx.shape[0]
            else:
                loss_sum += loss.item() * idx.shape[0]
            steps += 1
            if args.eval_every and steps % args.eval_every == 0 or \
                    steps > total_steps - args.eval_last:
                sync()
                te = time.perf_counter()
                eval_curve.append([steps, evaluate(torch, model, x_test,
                                                   y_test)])
                model.train()
                t0 += time.perf_counter() - te  # not training time
        sync()
        epoch_seconds.append(time.perf_counter() - t0)
        if cuda:
            loss_sum = float(loss_acc)
        train_loss = loss_sum / n_train
        print(f"torch_fashion: {args.model} epoch {epoch + 1}/{args.epochs}: "
              f"loss {train_loss:.4f}, {epoch_seconds[-1]:.2f} s",
              file=sys.stderr)

    test_accuracy = evaluate(torch, model, x_test, y_test)

    train_seconds = sum(epoch_seconds)
    # ru_maxrss is in KiB on Linux.
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = {
        "framework": "pytorch",
        "model": args.model,
        "optimizer": args.optimizer,
        "lr": args.lr,
        "batch": args.batch,
        "epochs": args.epochs,
        "steps": steps,
        "seed": args.seed,
        "threads": torch.get_num_threads(),
        "wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "train_images": n_train,
        "test_images": int(x_test.shape[0]),
        "init": args.init,
        "test_accuracy": test_accuracy,
        "train_loss": train_loss,
        "seconds_per_epoch": train_seconds / len(epoch_seconds),
        "epoch_seconds": epoch_seconds,
        "images_per_second": n_train * args.epochs / train_seconds,
        "peak_rss_bytes": peak_rss,
        "torch_version": torch.__version__,
        "eval_curve": eval_curve,
        "precision": args.precision,
        "autocast_dtype": None if args.precision == "f32" else
        f"torch.{AMP_DTYPES[args.precision]}",
        "loss_scale": train_step.scaler.get_scale()
        if train_step.scaler else None,
    }
    if cuda:
        result.update({
            "device": "cuda",
            "gpu": torch.cuda.get_device_name(device),
            "cuda_version": torch.version.cuda,
            "cudnn_version": torch.backends.cudnn.version(),
            "cudnn_benchmark": args.cudnn_benchmark,
            "fused_optimizer": args.fused_optimizer,
            "tf32": tf32,
            "warmup_seconds": warmup_seconds,
            "data_device_bytes": data_device_bytes,
            "peak_device_allocated_bytes": torch.cuda.max_memory_allocated(),
            "peak_device_reserved_bytes": torch.cuda.max_memory_reserved(),
        })
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
