#!/usr/bin/python3
"""bench/train_vs_torch: tyto-train against PyTorch on Fashion-MNIST.

Runs tyto-train and the same models in PyTorch (through
bench/torch_fashion.py) in one run, each training run in its own
subprocess, and prints a table, the ratios against the targets, and one
machine-readable line "BENCH {json}".  A benchmark, not a test: missing a
target never changes the exit status.  PyTorch runs under --python, by
default this interpreter when it can import torch (a pip install, a
virtual environment), else Debian's /usr/bin/python3 (python3-torch).

--device cpu (the default) compares on the CPU, with the targets below.  --device cuda
compares on the first NVIDIA GPU: tyto-train --devices cuda:0 against
PyTorch on torch.device('cuda'); see "On the GPU" below.

  cnn: conv2d 5x5/32 same, ReLU, max_pool 2x2, dropout 0.1, fc 1024 ReLU,
       linear 10, softmax cross-entropy; Adam lr 1e-3, batch 64, one epoch.
       Targets: test accuracy >= PyTorch's - 0.5 points; seconds/epoch
       <= 0.4x PyTorch's; peak RSS <= PyTorch's.  Also the arithmetic floor
       (FLOPs / measured sgemm rate + Adam memory traffic / measured
       bandwidth) and tyto's distance from it.
  mlp: 784-128-10 ReLU, SGD lr 0.1, batch 64, one epoch.
       Target: images/s >= 1.3x PyTorch's.

PyTorch is compared at its BEST threading setting in this run (the fastest
of the settings tried, each in its own process, all reported):
  t1          torch.set_num_threads(1)
  t2          torch.set_num_threads(2)
  t2-passive  torch.set_num_threads(2), OMP_WAIT_POLICY=PASSIVE

Test accuracy after one epoch moves by a point or more with the seed:
--seeds 1,2,3,4 runs every configuration once per seed and reports each
framework's accuracies with their mean and standard deviation (the
accuracy target compares the means; timings stay the best run).  --init
chooses the initial weights:
  native   each framework its own default: tyto's Glorot uniform weights
           and zero biases, PyTorch's U(+-1/sqrt(fan_in)) weights and biases
  pytorch  both start from the values PyTorch draws for the seed:
           torch_fashion.py --save-init writes them in tyto's layout and
           tyto-train resumes from a step-0 checkpoint that holds them
           (its peak RSS then counts the loaded checkpoint, about 100 MB)
  glorot   both draw tyto's distribution (PyTorch with its own generator)
--eval-every N evaluates every N steps in both and reports how far the
test accuracy moves between neighbouring evaluations over the second half
of the epoch.  Late in the epoch one step moves the test accuracy by up to
a point or two in both frameworks, so the accuracy after the last step is
a noisy sample: --eval-last K also evaluates after each of the last K
steps (tyto-train: the run again to step total - K, then resumed with
--eval-every 1) and compares the means over those steps.

--precision f32,bf16 (any of f32, bf16, f16, comma-separated) runs every
configuration in each precision: bf16 and f16 are automatic mixed
precision with f32 master weights, tyto-train --precision X (the
data-parallel step's AMP, one replica) against PyTorch under
torch.autocast(device, dtype=torch.bfloat16 or torch.float16), f16 with
a GradScaler (torch_fashion.py --precision); both evaluate in f32.  A
precision PyTorch cannot autocast to on the device (torch 1.13's CPU
autocast knows bfloat16 only) is reported as not supported, not as a
failure.  With f32 among them, each 16-bit precision is compared with
f32, each framework with itself.  Targets (issue 19), for the CNN:
tyto's AMP epoch <= 0.75x its f32 epoch, and its test accuracy at most
0.3 points below its f32 accuracy.  The CNN's floor in the 16-bit
precision is its FLOPs at the rate torch.matmul measures on 16-bit
tensors of the big layer's shape in the same run (on the CPU, with
torch.set_num_threads(2): oneDNN's bf16 matmul, libdnnl, which the CPU
plugin calls too; the probe records which oneDNN implementation ran,
from its verbose mode), plus Adam's f32 traffic and writing the 16-bit
copy of the weights (2 B per parameter and step) at the measured
bandwidth.  The table and the BENCH line's "results" and "targets"
against PyTorch are f32's (when it ran; else the first precision's);
"by_precision" holds every precision's, "amp" the comparison with f32.

On the GPU (--device cuda), with the same models, data and seeds:
  PyTorch runs eagerly at its best honest setting (torch_fashion.py
  --device cuda): the whole data set is moved to the GPU once before
  timing, the loss is read once per epoch, TF32 is off for cuBLAS and
  cuDNN (tyto computes f32 by default: f32 against f32), a warm-up step
  on a copy of the model sets up the CUDA context, handles and lazily
  loaded kernels before timing (tyto's compile is outside its epoch time
  too), and the epoch is timed between torch.cuda.synchronize() calls.
  Its settings, each in its own process, compared at the best:
    eager       cudnn.benchmark = False (PyTorch's default)
    benchmark   cudnn.benchmark = True
    fused       cudnn.benchmark = True and the optimiser's fused=True
                (not run unless asked for with --torch-settings)
  The CPU threading settings do not apply.
  Targets: cnn test accuracy >= PyTorch's - 0.5 points; cnn seconds/epoch
  <= 0.5x PyTorch's; mlp images/s >= 2x PyTorch's; peak device memory
  (tyto-train's peak_device_bytes: every buffer tyto allocated on the
  GPU) <= PyTorch's torch.cuda.max_memory_allocated() for each model
  (max_memory_reserved() is shown too, and how much of PyTorch's peak is
  its resident data set).
  The GPU's own floor, measured in the same run through torch.matmul
  (cuBLAS f32, TF32 off): each model's training FLOPs at the sgemm rate
  of its largest layer's three products (cnn fc 64x6272x1024, mlp fc1
  64x784x128), plus the optimiser's memory traffic at the device's copy
  bandwidth, and again at the 4096x4096x4096 sgemm rate (the GPU's f32
  peak); tyto's and PyTorch's distance from it.
  With --precision bf16 or f16 the probe also runs the same products on
  16-bit tensors (cuBLAS on the tensor cores), for each model's floor in
  that precision; PyTorch AMP's f16 uses a GradScaler.
  Exit status 2, with a one-line reason, when torch.cuda.is_available()
  is False for --python.

Usage: bench/train_vs_torch.py [--quick] [--models cnn,mlp] [--tyto PATH]
         [--data DIR] [--device cpu|cuda] [--python PATH]
         [--torch-settings t1,t2,t2-passive | eager,benchmark,fused]
         [--repeat N] [--seeds 1,2,...] [--init native|pytorch|glorot]
         [--eval-every N] [--eval-last K] [--precision f32,bf16,f16]

  on a GPU machine, for example:
    python3 bench/train_vs_torch.py --device cuda \\
        --tyto /tmp/tyto-gpu/prefix/bin/tyto-train --data /tmp/tyto-gpu/data
  mixed precision on the CPU, as issue 19 measures it:
    /usr/bin/python3 bench/train_vs_torch.py --models cnn --precision f32,bf16

Exit status: 0 when every run finished; 2 on bad arguments, when the
tyto-train binary is missing (PyTorch still runs and is reported) or when
--device cuda finds no GPU; 1 when a run failed.
"""

import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def default_torch_python():
    """This interpreter where it can import torch (pip, a virtual
    environment), else Debian's, whose python3-torch is installed for
    /usr/bin/python3 only."""
    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    if os.path.exists("/usr/bin/python3"):
        return "/usr/bin/python3"
    return sys.executable


TORCH_PYTHON = default_torch_python()  # --python overrides
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
CORES = 2  # the comparison is on 2 cores: sgemm probe and PyTorch's t2

MODELS = {
    "cnn": {"optimizer": "adam", "lr": 1e-3, "batch": 64},
    "mlp": {"optimizer": "sgd", "lr": 0.1, "batch": 64},
}

TORCH_SETTINGS = {
    "t1": {"threads": 1, "env": {},
           "label": "set_num_threads(1)"},
    "t2": {"threads": 2, "env": {},
           "label": "set_num_threads(2)"},
    "t2-passive": {"threads": 2, "env": {"OMP_WAIT_POLICY": "PASSIVE"},
                   "label": "set_num_threads(2), OMP_WAIT_POLICY=PASSIVE"},
}

# --device cuda: eager PyTorch on the GPU (torch_fashion.py --device cuda).
TORCH_SETTINGS_CUDA = {
    "eager": {"args": [], "env": {},
              "label": "eager, cudnn.benchmark off"},
    "benchmark": {"args": ["--cudnn-benchmark"], "env": {},
                  "label": "eager, cudnn.benchmark on"},
    "fused": {"args": ["--cudnn-benchmark", "--fused-optimizer"], "env": {},
              "label": "eager, cudnn.benchmark on, fused optimiser"},
}
# Run unless --torch-settings names others.
DEFAULT_SETTINGS_CUDA = ["eager", "benchmark"]

TARGET_CNN_ACCURACY_POINTS = -0.5  # tyto - pytorch, percentage points
TARGET_CNN_TIME_RATIO = 0.4        # tyto / pytorch seconds per epoch
TARGET_CNN_RSS_RATIO = 1.0         # tyto / pytorch peak RSS
TARGET_MLP_SPEED_RATIO = 1.3       # tyto / pytorch images per second
# --device cuda (issue 18).
TARGET_CUDA_CNN_TIME_RATIO = 0.5     # tyto / pytorch seconds per epoch
TARGET_CUDA_MLP_SPEED_RATIO = 2.0    # tyto / pytorch images per second
TARGET_CUDA_MEMORY_RATIO = 1.0       # tyto peak device bytes / pytorch's
                                     # max_memory_allocated()

# --precision (issue 19): automatic mixed precision against f32, for the
# CNN.
PRECISIONS = ("f32", "bf16", "f16")
TARGET_AMP_TIME_RATIO = 0.75       # tyto AMP / tyto f32 seconds per epoch
TARGET_AMP_ACCURACY_POINTS = -0.3  # tyto AMP - tyto f32, percentage points
# torch_fashion.py's exit status for a --precision this torch cannot
# autocast to on the device.
EXIT_UNSUPPORTED = 3

FULL_TRAIN_IMAGES = 60000
FULL_TEST_IMAGES = 10000
QUICK_TRAIN_IMAGES = 6000
QUICK_TEST_IMAGES = 1000


def log(msg):
    print(f"train_vs_torch: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# The arithmetic floor of the CNN.

def cnn_parameters():
    conv = 32 * 1 * 5 * 5 + 32
    fc = 32 * 14 * 14 * 1024 + 1024
    out = 1024 * 10 + 10
    return conv + fc + out  # 6,434,634


def cnn_flops_per_image():
    """Training FLOPs per image, one multiply-add counted as 2 FLOPs.

    forward  F = conv  2 * (28*28 outputs) * 32 filters * (5*5*1 taps)
                                                           =  1,254,400
               + fc    2 * (32*14*14 = 6272) * 1024        = 12,845,056
               + out   2 * 1024 * 10                       =     20,480
                                                         F = 14,119,936
    backward B ~ 2F: each layer's gradient w.r.t. its input and w.r.t. its
               weights is one product the size of its forward product.
               (The conv's input gradient is not needed, x being data; a
               framework may skip it: 1.25 MFLOP, 3% of the total.  ReLU,
               pooling, dropout, bias and softmax are not counted.)
    training  3F = 42,359,808 FLOP per image, 2.71 GFLOP per 64-image step,
               2.54 TFLOP per 60,000-image epoch.
    """
    conv = 2 * 28 * 28 * 32 * 5 * 5
    fc = 2 * 32 * 14 * 14 * 1024
    out = 2 * 1024 * 10
    forward = conv + fc + out
    return 3 * forward


# Adam per step reads p, g, m, v and writes p, m, v: 7 float32 per parameter.
ADAM_BYTES_PER_PARAM = 7 * 4

FLOOR_PROBE = r"""
import json, time
import numpy as np

def best(fn, min_seconds=2.0, rounds=20):
    # Best of many short rounds: the machine is shared, and a round that
    # lost a core to a neighbour says nothing about the library.
    fn()  # warm up: thread pool, page faults
    times = []
    for _ in range(rounds):
        n, t0 = 0, time.perf_counter()
        while True:
            fn(); n += 1
            t = time.perf_counter() - t0
            if t >= min_seconds / rounds:
                break
        times.append(t / n)
    return min(times)

rng = np.random.default_rng(0)
M, K, N = 64, 6272, 1024      # batch x fc inputs x fc outputs
x = rng.standard_normal((M, K), dtype=np.float32)
w = rng.standard_normal((K, N), dtype=np.float32)
dy = rng.standard_normal((M, N), dtype=np.float32)
y = np.empty((M, N), np.float32)
dx = np.empty((M, K), np.float32)
dw = np.empty((K, N), np.float32)
t_fwd = best(lambda: np.matmul(x, w, out=y))      # y  = x w
t_dx = best(lambda: np.matmul(dy, w.T, out=dx))   # dx = dy w^T
t_dw = best(lambda: np.matmul(x.T, dy, out=dw))   # dw = x^T dy
flops = 2.0 * M * K * N

n = 64 << 20                  # 256 MiB of float32, far beyond any cache
a = np.ones(n, np.float32)
b = np.zeros(n, np.float32)
t_copy = min(best(lambda: np.copyto(b, a), min_seconds=0.0, rounds=1)
             for _ in range(5))

blas = sorted({l.split()[-1] for l in open("/proc/self/maps")
               if "blas" in l.lower() and len(l.split()) >= 6})
print(json.dumps({
    "gemm_shape": [M, K, N],
    "sgemm_seconds": {"x_w": t_fwd, "dy_wT": t_dx, "xT_dy": t_dw},
    "sgemm_gflops": {"x_w": flops / t_fwd / 1e9, "dy_wT": flops / t_dx / 1e9,
                     "xT_dy": flops / t_dw / 1e9,
                     "all": 3 * flops / (t_fwd + t_dx + t_dw) / 1e9},
    "copy_bytes": int(a.nbytes),
    # A copy reads the source and writes the destination: 2 bytes moved
    # per byte copied (the write-allocate read is not counted).
    "memory_gb_per_s": 2 * a.nbytes / t_copy / 1e9,
    "numpy_version": np.__version__,
    "blas_libraries": blas,
}))
"""


def run_probe(threads):
    """Runs the sgemm/bandwidth probe in a subprocess with `threads`
    OpenBLAS threads; returns its dictionary or None."""
    env = dict(os.environ)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    env["OMP_NUM_THREADS"] = str(threads)
    try:
        out = subprocess.run([TORCH_PYTHON, "-c", FLOOR_PROBE], env=env,
                             check=True, capture_output=True, text=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.CalledProcessError, ValueError,
            IndexError) as e:
        err = getattr(e, "stderr", "") or ""
        log(f"sgemm/bandwidth probe failed: {e} {err.strip()}")
        return None


# AMP keeps f32 master weights: each step also writes their 16-bit copy
# for the products, 2 bytes per parameter (the least it can cost: fused
# into the optimiser's update, which reads them anyway).
AMP_COPY_BYTES_PER_PARAM = 2

LOW_PROBE = r"""
import ctypes, json, os, sys, tempfile, time
import torch

precisions, threads = json.loads(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}

def best(fn, min_seconds=2.0, rounds=20):
    # As the f32 probe: the best of many short rounds.
    fn()
    times = []
    for _ in range(rounds):
        n, t0 = 0, time.perf_counter()
        while True:
            fn(); n += 1
            t = time.perf_counter() - t0
            if t >= min_seconds / rounds:
                break
        times.append(t / n)
    return min(times)

def onednn_calls(fn):
    # Which oneDNN primitives one call of fn ran ("matmul
    # brg:avx512_core_bf16"): oneDNN's verbose mode prints them on the C
    # stdout, caught here at the descriptor.  [] when none ran (the
    # product did not go through oneDNN); None when the mode is missing.
    verbose = getattr(torch.backends.mkldnn, "verbose", None)
    if verbose is None:
        return None
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 1)
        try:
            with verbose(torch.backends.mkldnn.VERBOSE_ON):
                fn()
        except (RuntimeError, AssertionError):
            return None
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
        f.seek(0)
        lines = f.read().decode(errors="replace").splitlines()
    calls = []
    for line in lines:
        v = line.split(",")
        if len(v) > 4 and v[0].endswith("_verbose") and v[1] == "exec":
            calls.append(f"{v[3]} {v[4]}")
    return calls

g = torch.Generator().manual_seed(0)
M, K, N = 64, 6272, 1024      # batch x fc inputs x fc outputs
flops = 2.0 * M * K * N
gemm = {}
for p in precisions:
    dt = DTYPES[p]
    try:
        x = torch.randn(M, K, generator=g).to(dt)
        w = torch.randn(K, N, generator=g).to(dt)
        dy = torch.randn(M, N, generator=g).to(dt)
        y = torch.empty(M, N, dtype=dt)
        dx = torch.empty(M, K, dtype=dt)
        dw = torch.empty(K, N, dtype=dt)
        fns = {"x_w": lambda: torch.matmul(x, w, out=y),
               "dy_wT": lambda: torch.matmul(dy, w.t(), out=dx),
               "xT_dy": lambda: torch.matmul(x.t(), dy, out=dw)}
        impl = {k: onednn_calls(fn) for k, fn in fns.items()}
        t = {k: best(fn) for k, fn in fns.items()}
    except RuntimeError as e:
        gemm[p] = {"error": (str(e).strip().splitlines() or ["?"])[0]}
        continue
    gf = {k: flops / v / 1e9 for k, v in t.items()}
    gf["all"] = 3 * flops / sum(t.values()) / 1e9
    gemm[p] = {"gemm_shape": [M, K, N], "dtype": str(dt), "seconds": t,
               "gflops": gf, "onednn": impl}
print(json.dumps({"torch_version": torch.__version__,
                  "threads": torch.get_num_threads(), "gemm": gemm}))
"""


def run_low_probe(precisions, threads):
    """Runs LOW_PROBE: torch.matmul on 16-bit CPU tensors (oneDNN where
    torch sends them there; the probe says which implementation ran), the
    CNN's big layer's three products; returns its dictionary or None."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    try:
        out = subprocess.run([TORCH_PYTHON, "-c", LOW_PROBE,
                              json.dumps(precisions), str(threads)], env=env,
                             check=True, capture_output=True, text=True)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.CalledProcessError, ValueError,
            IndexError) as e:
        err = getattr(e, "stderr", "") or ""
        log(f"16-bit GEMM probe failed: {e} {err.strip()}")
        return None


def onednn_impl(g):
    """One line on which oneDNN implementations ran a probe's products."""
    calls = g.get("onednn")
    if calls is None:
        return "implementation unknown (no oneDNN verbose mode)"
    seen = sorted({c for v in calls.values() for c in (v or [])})
    if not seen:
        return "not through oneDNN"
    return "oneDNN " + ", ".join(seen)


def low_floor_from(low_probes, floor, precision):
    """The CNN's floor in a 16-bit precision: its FLOPs at the best rate
    the low probes measured in that dtype, plus Adam's f32 traffic and the
    16-bit copy of the weights at the f32 probe's bandwidth; a dictionary
    with "error" when no probe ran the product."""
    rates = [lp["gemm"][precision] for lp in low_probes
             if lp and precision in lp["gemm"]]
    ok = [g for g in rates if "error" not in g]
    if floor is None or not ok:
        why = rates[0]["error"] if rates else "the probe did not run"
        return {"precision": precision, "error": why}
    g = max(ok, key=lambda r: r["gflops"]["all"])
    gflops = g["gflops"]["all"]
    compute_s = floor["cnn_flops_per_image"] * floor["train_images"] / \
        (gflops * 1e9)
    copy_s = floor["steps"] * floor["cnn_parameters"] * \
        AMP_COPY_BYTES_PER_PARAM / (floor["memory_gb_per_s"] * 1e9)
    return {"precision": precision, "gemm": g,
            "torch_version": next(lp["torch_version"] for lp in low_probes
                                  if lp),
            "implementation": onednn_impl(g),
            "compute_seconds": compute_s,
            "adam_seconds": floor["adam_seconds"],
            "copy_bytes_per_step": floor["cnn_parameters"]
            * AMP_COPY_BYTES_PER_PARAM,
            "copy_seconds": copy_s,
            "floor_seconds_per_epoch": compute_s + floor["adam_seconds"]
            + copy_s}


def floor_from(probes, threads, train_images, batch):
    """The CNN's floor from the best sgemm rate and the best bandwidth
    among `probes` (taken at different times of the run: on a shared
    machine the best is the one least disturbed); None if none ran."""
    probes = [p for p in probes if p]
    if not probes:
        return None
    probe = dict(max(probes, key=lambda p: p["sgemm_gflops"]["all"]))
    probe["memory_gb_per_s"] = max(p["memory_gb_per_s"] for p in probes)
    probe["probes"] = probes
    flops_per_image = cnn_flops_per_image()
    params = cnn_parameters()
    steps = math.ceil(train_images / batch)
    gflops = probe["sgemm_gflops"]["all"]
    gbps = probe["memory_gb_per_s"]
    compute_s = flops_per_image * train_images / (gflops * 1e9)
    adam_s = steps * params * ADAM_BYTES_PER_PARAM / (gbps * 1e9)
    probe.update({
        "threads": threads,
        "cnn_parameters": params,
        "cnn_flops_per_image": flops_per_image,
        "cnn_flops_per_step": flops_per_image * batch,
        "train_images": train_images,
        "steps": steps,
        "adam_bytes_per_step": params * ADAM_BYTES_PER_PARAM,
        "compute_seconds": compute_s,
        "adam_seconds": adam_s,
        "floor_seconds_per_epoch": compute_s + adam_s,
    })
    return probe


# ---------------------------------------------------------------------------
# The GPU's floor (--device cuda).

def mlp_parameters():
    return 784 * 128 + 128 + 128 * 10 + 10  # 101,770


def mlp_flops_per_image():
    """Training FLOPs per image as cnn_flops_per_image counts them: 3x the
    forward products 2 * (784 * 128 + 128 * 10) = 203,264, so 609,792."""
    return 3 * 2 * (784 * 128 + 128 * 10)


# Per parameter and step: Adam reads p, g, m, v and writes p, m, v; SGD
# reads p, g and writes p (float32).
OPTIMIZER_BYTES_PER_PARAM = {"adam": 7 * 4, "sgd": 3 * 4}

# Each model's largest layer as a product batch x inputs x outputs, and
# the large square product that shows the GPU's f32 peak.
GPU_GEMMS = {"cnn": [64, 6272, 1024], "mlp": [64, 784, 128],
             "peak": [4096, 4096, 4096]}

GPU_PROBE = r"""
import json, sys, time, warnings
import torch

shapes = json.loads(sys.argv[1])
# --precision's 16-bit dtypes: the same products in each (tensor cores).
low = json.loads(sys.argv[2]) if len(sys.argv) > 2 else []
LOW_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
if not torch.cuda.is_available():
    print(json.dumps({"error": "torch.cuda.is_available() is False"}))
    sys.exit(0)
dev = torch.device("cuda")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch >= 2.9: deprecation notice
    # The legacy switches set the newer fp32_precision ones to match.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tf32 = {"matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32}
prec = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
if prec is not None:
    tf32["matmul_fp32_precision"] = prec

def best(fn, rounds=10, round_seconds=0.02):
    # Best of short rounds timed with CUDA events; each round repeats fn
    # often enough to last about round_seconds.
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    reps = max(1, min(1000, int(round_seconds / max(time.perf_counter() - t0,
                                                    1e-6))))
    times = []
    for _ in range(rounds):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / reps)
    return min(times)

g = torch.Generator(device=dev)
g.manual_seed(0)
def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device=dev, generator=g).to(dtype)

def products(M, K, N, dtype=torch.float32):
    flops = 2.0 * M * K * N
    x, w, dy = randn(M, K, dtype=dtype), randn(K, N, dtype=dtype), \
        randn(M, N, dtype=dtype)
    y, dx, dw = randn(M, N, dtype=dtype), randn(M, K, dtype=dtype), \
        randn(K, N, dtype=dtype)
    t = {"x_w": best(lambda: torch.matmul(x, w, out=y)),          # y  = x w
         "dy_wT": best(lambda: torch.matmul(dy, w.t(), out=dx)),  # dx = dy w^T
         "xT_dy": best(lambda: torch.matmul(x.t(), dy, out=dw))}  # dw = x^T dy
    gf = {k: flops / v / 1e9 for k, v in t.items()}
    gf["all"] = 3 * flops / sum(t.values()) / 1e9
    del x, w, dy, y, dx, dw
    return {"shape": [M, K, N], "sgemm_seconds": t, "sgemm_gflops": gf}

gemm = {name: products(*shape) for name, shape in shapes.items()}
# Key names as the f32 ones ("sgemm_..."), whatever the dtype.
gemm_low = {}
for p in low:
    try:
        gemm_low[p] = {name: products(*shape, dtype=LOW_DTYPES[p])
                       for name, shape in shapes.items()}
    except RuntimeError as e:
        gemm_low[p] = {"error": (str(e).strip().splitlines() or ["?"])[0]}

n = 64 << 20                  # 256 MiB of float32
a = torch.ones(n, device=dev)
b = torch.zeros(n, device=dev)
t_copy = best(lambda: b.copy_(a), rounds=5)
p = torch.cuda.get_device_properties(dev)
print(json.dumps({
    "gemm": gemm,
    "gemm_low": gemm_low,
    "copy_bytes": a.numel() * 4,
    # A copy reads the source and writes the destination.
    "memory_gb_per_s": 2 * a.numel() * 4 / t_copy / 1e9,
    "tf32": tf32,
    "gpu": {"name": p.name, "capability": f"{p.major}.{p.minor}",
            "memory_bytes": p.total_memory,
            "multiprocessors": p.multi_processor_count},
    "torch_version": torch.__version__,
    "cuda_version": torch.version.cuda,
    "cudnn_version": torch.backends.cudnn.version(),
}))
"""


def run_gpu_probe(models, low=()):
    """Runs GPU_PROBE for the models' products and the peak one, in f32
    and in each 16-bit precision of `low`; returns its dictionary or
    None."""
    shapes = {m: GPU_GEMMS[m] for m in models}
    shapes["peak"] = GPU_GEMMS["peak"]
    try:
        out = subprocess.run([TORCH_PYTHON, "-c", GPU_PROBE,
                              json.dumps(shapes), json.dumps(list(low))],
                             check=True,
                             capture_output=True, text=True)
        probe = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.CalledProcessError, ValueError,
            IndexError) as e:
        err = getattr(e, "stderr", "") or ""
        log(f"GPU sgemm/bandwidth probe failed: {e} {err.strip()}")
        return None
    if "error" in probe:
        log(f"GPU sgemm/bandwidth probe: {probe['error']}")
        return None
    return probe


def gpu_floor_from(probes, models, train_images, low=()):
    """Each model's floor on the GPU from the best rate of each product and
    the best bandwidth among `probes` (before and after the training
    runs), in f32 and in each 16-bit precision of `low` (under
    "by_precision": the products at that dtype's rate, the optimiser's
    f32 traffic and the 16-bit copy of the weights); None if none ran."""
    probes = [p for p in probes if p]
    if not probes:
        return None
    first = probes[0]
    best_gemm = {name: max((p["gemm"][name] for p in probes),
                           key=lambda g: g["sgemm_gflops"]["all"])
                 for name in first["gemm"]}
    gbps = max(p["memory_gb_per_s"] for p in probes)
    peak = max(best_gemm["peak"]["sgemm_gflops"].values())
    floor = {"device": "cuda", "gpu": first["gpu"],
             "torch_version": first["torch_version"],
             "cuda_version": first["cuda_version"],
             "cudnn_version": first["cudnn_version"], "tf32": first["tf32"],
             "gemm": best_gemm, "peak_sgemm_gflops": peak,
             "copy_bytes": first["copy_bytes"], "memory_gb_per_s": gbps,
             "probes": probes, "train_images": train_images, "models": {}}
    counts = {"cnn": (cnn_flops_per_image(), cnn_parameters()),
              "mlp": (mlp_flops_per_image(), mlp_parameters())}
    for m in models:
        flops_per_image, params = counts[m]
        opt = MODELS[m]["optimizer"]
        steps = math.ceil(train_images / MODELS[m]["batch"])
        gflops = best_gemm[m]["sgemm_gflops"]["all"]
        flops = flops_per_image * train_images
        opt_bytes = params * OPTIMIZER_BYTES_PER_PARAM[opt]
        opt_s = steps * opt_bytes / (gbps * 1e9)
        floor["models"][m] = {
            "gemm_shape": best_gemm[m]["shape"],
            "sgemm_gflops": best_gemm[m]["sgemm_gflops"],
            "parameters": params, "flops_per_image": flops_per_image,
            "flops_per_epoch": flops, "steps": steps, "optimizer": opt,
            "optimizer_bytes_per_step": opt_bytes,
            "compute_seconds": flops / (gflops * 1e9),
            "optimizer_seconds": opt_s,
            "floor_seconds_per_epoch": flops / (gflops * 1e9) + opt_s,
            "peak_compute_seconds": flops / (peak * 1e9),
            "peak_floor_seconds_per_epoch": flops / (peak * 1e9) + opt_s,
            "by_precision": {},
        }
        copy_s = steps * params * AMP_COPY_BYTES_PER_PARAM / (gbps * 1e9)
        for p in low:
            got = [pr["gemm_low"][p] for pr in probes
                   if p in pr.get("gemm_low", {})]
            ok = [x for x in got if "error" not in x]
            if not ok:
                floor["models"][m]["by_precision"][p] = {
                    "error": got[0]["error"] if got else
                    "the probe did not run"}
                continue
            g = max((x[m] for x in ok),
                    key=lambda r: r["sgemm_gflops"]["all"])
            pk = max(max(x["peak"]["sgemm_gflops"].values()) for x in ok)
            rate = g["sgemm_gflops"]["all"]
            floor["models"][m]["by_precision"][p] = {
                "gemm": g, "peak_gflops": pk,
                "compute_seconds": flops / (rate * 1e9),
                "optimizer_seconds": opt_s, "copy_seconds": copy_s,
                "floor_seconds_per_epoch": flops / (rate * 1e9) + opt_s
                + copy_s,
                "peak_floor_seconds_per_epoch": flops / (pk * 1e9) + opt_s
                + copy_s}
    return floor


# ---------------------------------------------------------------------------
# Running one training process.

def run_child(cmd, env, err_lines=None):
    """Runs cmd with stderr passed through (and its lines appended to
    err_lines when given); returns (exit status, stdout, peak RSS in bytes
    from the kernel's wait4 accounting, wall seconds)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except OSError as e:
        return None, str(e), 0, 0.0

    def relay():
        for raw in p.stderr:
            line = raw.decode(errors="replace")
            sys.stderr.write(line)
            sys.stderr.flush()
            if err_lines is not None:
                err_lines.append(line)
    t = threading.Thread(target=relay, daemon=True)
    t.start()
    out = p.stdout.read()
    p.stdout.close()
    t.join()
    p.stderr.close()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    # ru_maxrss is in KiB on Linux.
    return p.returncode, out.decode(errors="replace"), usage.ru_maxrss * 1024, \
        wall


def last_json(text):
    """The JSON object that ends stdout, on one line or pretty-printed over
    several; None if there is none."""
    text = text.strip()
    dec = json.JSONDecoder()
    lines = text.splitlines(keepends=True)
    starts, pos = [], 0
    for line in lines:
        if line.lstrip().startswith("{"):
            starts.append(pos + len(line) - len(line.lstrip()))
        pos += len(line)
    for start in reversed(starts):
        try:
            obj, end = dec.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(obj, dict) and not text[end:].strip():
            return obj
    return None


def torch_fashion_cmd(model, args, seed, threads):
    cfg = MODELS[model]
    return [TORCH_PYTHON, os.path.join(HERE, "torch_fashion.py"),
            "--model", model, "--optimizer", cfg["optimizer"],
            "--lr", repr(cfg["lr"]), "--batch", str(cfg["batch"]),
            "--epochs", "1", "--seed", str(seed),
            "--threads", str(threads), "--data", args.data,
            "--limit", str(args.limit or 0),
            "--test-limit", str(args.test_limit or 0),
            "--init", "glorot" if args.init == "glorot" else "default"]


def run_torch(model, setting, args, seed, precision="f32"):
    s = settings_table(args.device)[setting]
    env = dict(os.environ)
    # The setting decides the wait policy, not whatever the caller exported.
    env.pop("OMP_WAIT_POLICY", None)
    env.update(s["env"])
    cmd = torch_fashion_cmd(model, args, seed, s.get("threads", 0))
    if args.device == "cuda":
        cmd += ["--device", "cuda"] + s["args"]
    if args.eval_every:
        cmd += ["--eval-every", str(args.eval_every)]
    if args.eval_last:
        cmd += ["--eval-last", str(args.eval_last)]
    if precision != "f32":
        cmd += ["--precision", precision]
    run = finish_run("pytorch", model, setting, seed, cmd, env,
                     args.eval_every, precision)
    if args.eval_last and "error" not in run:
        total = run["reported"].get("steps", 0)
        run["late_curve"] = [p for p in run["eval_curve"]
                             if p[0] > total - args.eval_last]
        run["late_mean"] = statistics.mean(
            a for _, a in run["late_curve"]) if run["late_curve"] else None
    return run


def read_safetensors(path):
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def start_from(template, init, out):
    """Writes `out`: tyto-train checkpoint `template` (any step of a run with
    the same options) turned into the checkpoint of step 0 of that run with
    the parameters of `init` (safetensors in tyto's names, float32): every
    other tensor (optimiser moments and step, dropout's step) zero, the
    position epoch 0, batch 0, step 0."""
    header, data = read_safetensors(template)
    iheader, idata = read_safetensors(init)
    body = bytearray(len(data))
    missing = [k for k in iheader if k != "__metadata__" and k not in header]
    if missing:
        raise ValueError(f"{init}: {', '.join(missing)} not in the model")
    for name, t in header.items():
        if name == "__metadata__" or name not in iheader:
            continue
        it = iheader[name]
        if it["dtype"] != t["dtype"] or it["shape"] != t["shape"]:
            raise ValueError(f"{init}: '{name}' is {it['dtype']}{it['shape']}, "
                             f"the model's {t['dtype']}{t['shape']}")
        b, e = t["data_offsets"]
        ib, ie = it["data_offsets"]
        body[b:e] = idata[ib:ie]
    meta = dict(header.get("__metadata__", {}))
    meta.update({"tyto.epoch": "0", "tyto.batch_in_epoch": "0",
                 "tyto.steps": "0"})
    header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(out, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        f.write(body)


def tyto_env(args):
    env = dict(os.environ)
    top = os.path.dirname(os.path.dirname(os.path.realpath(args.tyto)))
    if os.path.basename(os.path.dirname(os.path.realpath(args.tyto))) == \
            "tools" and os.path.isdir(os.path.join(top, "plugins", "cpu",
                                                   ".libs")):
        # An uninstalled binary (build/tools/tyto-train, or any build
        # directory's) finds its plugins only through these.
        plugins = os.path.join(top, "plugins")
        dirs = [os.path.join(plugins, "cpu", ".libs")]
        if args.device == "cuda":
            dirs.append(os.path.join(plugins, "cuda", ".libs"))
        env.setdefault("TYTO_PLUGIN_PATH", ":".join(dirs))
        env.setdefault("TYTO_DEVICES", "cpu")
    return env


def settings_table(device):
    """PyTorch's settings for the device: threading on the CPU, cuDNN's
    algorithm search (and the fused optimisers) on the GPU."""
    return TORCH_SETTINGS_CUDA if device == "cuda" else TORCH_SETTINGS


def run_tyto(model, args, seed, precision="f32"):
    cfg = MODELS[model]
    env = tyto_env(args)
    base = [args.tyto, "--model", model, "--data", args.data,
            "--epochs", "1", "--batch", str(cfg["batch"]),
            "--optimizer", cfg["optimizer"], "--lr", repr(cfg["lr"]),
            "--seed", str(seed)]
    if args.device == "cuda":
        base += ["--devices", "cuda:0"]
    if precision != "f32":
        # Automatic mixed precision through the data-parallel step (one
        # replica here), f32 master weights.
        base += ["--precision", precision]
    if args.limit:
        base += ["--limit", str(args.limit)]
    if args.test_limit:
        base += ["--test-limit", str(args.test_limit)]
    cmd = list(base)
    if args.eval_every:
        cmd += ["--eval-every", str(args.eval_every)]
    start = None
    if args.init == "pytorch":
        # PyTorch's initial values for this seed, then a checkpoint of step
        # 0 that holds them, for tyto-train --resume.
        tag = f"{model}-{seed}-{precision}"
        init = os.path.join(args.workdir, f"init-{tag}.safetensors")
        start = os.path.join(args.workdir, f"start-{tag}.safetensors")
        ck = os.path.join(args.workdir, f"run-{tag}.safetensors")
        prep = torch_fashion_cmd(model, args, seed, 1) + \
            ["--save-init", init, "--init-only"]
        tmpl = base + ["--max-steps", "1", "--checkpoint", start, "--quiet"]
        try:
            for c in (prep, tmpl):
                log(f"tyto {model} seed {seed}: {' '.join(c)}")
                subprocess.run(c, env=env, check=True, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL)
            start_from(start, init, start)
            shutil.copyfile(start, ck)
        except (OSError, subprocess.CalledProcessError, ValueError) as e:
            msg = f"tyto {model} seed {seed}: starting from PyTorch's " \
                f"initial values: {e}"
            log(msg)
            return {"framework": "tyto", "model": model, "setting": "default",
                    "seed": seed, "precision": precision, "error": msg}
        cmd += ["--checkpoint", ck, "--resume"]
    run = finish_run("tyto", model, "default", seed, cmd + ["--json"], env,
                     args.eval_every, precision)
    if args.eval_last and "error" not in run:
        tyto_late(run, base, env, args, start)
    return run


def tyto_late(run, base, env, args, start):
    """Adds the test accuracy after each of the last --eval-last steps to a
    tyto run: the same run again to --max-steps (total - K), then resumed
    with --eval-every 1 (a checkpoint resumes bit for bit)."""
    model, seed = run["model"], run["seed"]
    total = run["reported"].get("steps", 0)
    k = min(args.eval_last, total - 1)
    ck = os.path.join(args.workdir,
                      f"late-{model}-{seed}-{run['precision']}.safetensors")
    first = base + ["--max-steps", str(total - k), "--checkpoint", ck,
                    "--quiet"]
    if start:
        shutil.copyfile(start, ck)
        first += ["--resume"]
    second = base + ["--checkpoint", ck, "--resume", "--eval-every", "1",
                     "--no-progress", "--json"]
    try:
        if k < 1:
            raise ValueError(f"{total} steps: nothing to evaluate")
        log(f"tyto {model} seed {seed}: the last {k} steps: {' '.join(first)}")
        subprocess.run(first, env=env, check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL)
        err_lines = []
        log(f"tyto {model} seed {seed}: {' '.join(second)}")
        rc, out, _, _ = run_child(second, env, err_lines)
        result = last_json(out) if rc == 0 else None
        if result is None:
            raise ValueError(f"exit status {rc}")
    except (OSError, subprocess.CalledProcessError, ValueError) as e:
        run["error"] = f"tyto {model} seed {seed}: the last steps: {e}"
        log(run["error"])
        return
    run["late_curve"] = [[int(m.group(1)), float(m.group(2)) / 100]
                         for m in map(EVAL_LINE.search, err_lines) if m]
    run["late_mean"] = statistics.mean(a for _, a in run["late_curve"]) \
        if run["late_curve"] else None
    if result.get("test_accuracy") != run["test_accuracy"]:
        log(f"tyto {model} seed {seed}: the resumed run ended at "
            f"{result.get('test_accuracy')}, the whole run at "
            f"{run['test_accuracy']}: not reproducible")


EVAL_LINE = re.compile(r"step (\d+): test accuracy ([0-9.]+)%")


def swing(curve, every):
    """Mean |change| of the test accuracy between neighbouring evaluations
    every `every` steps over the second half of the run, in points; None
    with fewer than 3."""
    curve = [p for p in curve if every and p[0] % every == 0]
    late = [a for s, a in curve if s > curve[-1][0] / 2] if curve else []
    if len(late) < 3:
        return None
    return 100 * statistics.mean(abs(b - a) for a, b in zip(late, late[1:]))


def finish_run(framework, model, setting, seed, cmd, env, every=0,
               precision="f32"):
    what = f"{framework} {model} {setting} {precision} seed {seed}"
    log(f"{what}: {' '.join(cmd)}")
    err_lines = []
    rc, out, rss, wall = run_child(cmd, env, err_lines)
    run = {"framework": framework, "model": model, "setting": setting,
           "seed": seed, "precision": precision, "exit_status": rc,
           "wall_seconds": wall, "peak_rss_bytes": rss}
    if framework == "pytorch" and rc == EXIT_UNSUPPORTED:
        # Not a failure: this torch cannot autocast to the dtype here.
        said = [ln.strip() for ln in err_lines if ln.strip()]
        why = said[-1] if said else f"exit status {rc}"
        run["unsupported"] = re.sub(
            r"^torch_fashion: (--precision \S+ on --device \S+: )?", "", why)
        log(f"{what}: not supported: {run['unsupported']}")
        return run
    result = last_json(out) if rc == 0 else None
    if rc != 0 or result is None:
        why = out.strip() if rc is None else \
            f"exit status {rc}" if rc != 0 else \
            "exit status 0 but no JSON object at the end of stdout"
        said = [ln.strip() for ln in err_lines if ln.strip()]
        if rc and said:
            why += f" ({said[-1]})"  # its own last word on why
        run["error"] = f"{framework} {model} {setting} {precision}: {why}"
        log(run["error"])
        return run
    run["reported"] = result
    for key in ("test_accuracy", "train_loss", "seconds_per_epoch",
                "images_per_second", "train_images", "test_images"):
        run[key] = result.get(key)
    if framework == "tyto" and rss == 0:
        run["peak_rss_bytes"] = result.get("peak_rss_bytes", 0)
    # Device memory: tyto-train's count of its buffers on the device;
    # PyTorch's caching allocator (--device cuda).
    for key in ("peak_device_bytes", "peak_device_allocated_bytes",
                "peak_device_reserved_bytes", "data_device_bytes",
                "warmup_seconds", "loss_scale", "skipped_steps"):
        if key in result:
            run[key] = result[key]
    got = result.get("precision")
    if got is not None and got != precision:
        run["error"] = f"{what}: trained in {got}, not {precision}"
        log(run["error"])
        return run
    if framework == "tyto" and setting == "default" and \
            "--devices" in cmd and result.get("devices"):
        want = cmd[cmd.index("--devices") + 1]
        if result["devices"][0] != want:
            run["error"] = (f"tyto {model}: ran on {result['devices'][0]}, "
                            f"not {want}")
            log(run["error"])
            return run
    if framework == "tyto":
        curve = [[int(m.group(1)), float(m.group(2)) / 100]
                 for m in map(EVAL_LINE.search, err_lines) if m]
    else:
        curve = result.get("eval_curve") or []
    run["eval_curve"] = curve
    run["swing_points"] = swing(run["eval_curve"], every)
    log(f"{what}: "
        f"{run['seconds_per_epoch']:.2f} s/epoch, "
        f"accuracy {100 * run['test_accuracy']:.2f}%")
    return run


# ---------------------------------------------------------------------------
# Machine information.

def load_average():
    """The 1, 5 and 15 minute load averages, or None."""
    try:
        with open("/proc/loadavg") as f:
            return [float(v) for v in f.read().split()[:3]]
    except OSError:
        return None


def machine_info():
    cpu = "unknown"
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and cpu == "unknown":
                    cpu = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    isa = [f for f in ("avx512f", "avx512_bf16", "avx2", "fma") if f in flags]
    load = load_average()
    try:
        rev = subprocess.run(["git", "-C", REPO, "describe", "--always",
                              "--dirty"], capture_output=True, text=True,
                             check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = None
    try:
        torch_version = subprocess.run(
            [TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"],
            capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        torch_version = None
        log(f"{TORCH_PYTHON} cannot import torch "
            f"({getattr(e, 'stderr', e)}); install python3-torch")
    return {
        "cpu": cpu,
        "isa": isa,
        "cores_online": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE")
                            * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": platform.release(),
        "load_average": load,
        "date": datetime.datetime.now(datetime.timezone.utc)
        .isoformat(timespec="seconds"),
        "python": TORCH_PYTHON,
        "torch_version": torch_version,
        "tyto_revision": rev,
    }


CUDA_INFO = r"""
import json
import torch
info = {"torch_version": torch.__version__, "cuda_version": torch.version.cuda,
        "available": torch.cuda.is_available()}
if info["available"]:
    p = torch.cuda.get_device_properties(0)
    info.update(name=p.name, capability=f"{p.major}.{p.minor}",
                memory_bytes=p.total_memory,
                multiprocessors=p.multi_processor_count,
                device_count=torch.cuda.device_count(),
                cudnn_version=torch.backends.cudnn.version())
print(json.dumps(info))
"""


def cuda_info():
    """(the first GPU as PyTorch sees it, None) or (None, why not) in one
    line."""
    try:
        out = subprocess.run([TORCH_PYTHON, "-c", CUDA_INFO],
                             capture_output=True, text=True, check=True,
                             stdin=subprocess.DEVNULL)
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except OSError as e:
        return None, f"cannot run {TORCH_PYTHON}: {e.strerror}; pass " \
            "--python PATH"
    except subprocess.CalledProcessError as e:
        last = (e.stderr or "").strip().splitlines()
        return None, f"{TORCH_PYTHON} cannot import torch " \
            f"({last[-1] if last else f'exit status {e.returncode}'}); " \
            "pass --python PATH"
    except (ValueError, IndexError):
        return None, f"{TORCH_PYTHON} printed no answer about CUDA"
    if not info.get("available"):
        return None, (f"torch.cuda.is_available() is False in {TORCH_PYTHON}"
                      f" (torch {info.get('torch_version')}, CUDA "
                      f"{info.get('cuda_version') or 'not built in'}); run "
                      f"it where PyTorch sees an NVIDIA GPU, or pass "
                      f"--python PATH")
    return info, None


# ---------------------------------------------------------------------------
# Report.

def pick_best(runs, key):
    """The run with the lowest `key` among successful runs, or None."""
    ok = [r for r in runs if "error" not in r and r.get(key) is not None]
    return min(ok, key=lambda r: r[key]) if ok else None


def fmt(v, spec, unit="", none="n/a"):
    return none if v is None else format(v, spec) + unit


def device_bytes(r):
    """A run's peak device memory: tyto-train's count of its buffers, or
    PyTorch's max_memory_allocated(); None when not reported."""
    if r is None:
        return None
    v = r.get("peak_device_bytes", r.get("peak_device_allocated_bytes"))
    return v if v is not None and v >= 0 else None


def verdict(value, target, higher_is_better, unit="x"):
    if value is None:
        return "not measured"
    # A difference of whole test images in points is not exact in binary:
    # 88.48% - 88.98% gives -0.5000000000000004.
    slack = 1e-9 * max(1.0, abs(target))
    met = value >= target - slack if higher_is_better \
        else value <= target + slack
    if met:
        return "met"
    return f"MISSED by {abs(value - target):.2f}{unit}"


def print_gpu_floor(f, best_by, low=()):
    """Prints the GPU's floor for each model (gpu_floor_from), in f32 and
    in each 16-bit precision of `low`, and each framework's distance from
    it; adds the distances to f."""
    gpu = f["gpu"]
    print()
    print(f"GPU floor ({gpu['name']}, cuBLAS f32 with TF32 off through "
          f"torch {f['torch_version']} matmul, {f['train_images']} images;"
          f" best of {len(f['probes'])} probes, before and after the "
          f"training runs):")
    for name, g in f["gemm"].items():
        m, k, n = g["shape"]
        r = g["sgemm_gflops"]
        what = "peak" if name == "peak" else f"{name} largest layer"
        print(f"  sgemm {m}x{k}x{n} ({what}): x.w {r['x_w'] / 1e3:.1f}, "
              f"dy.wT {r['dy_wT'] / 1e3:.1f}, xT.dy {r['xT_dy'] / 1e3:.1f},"
              f" together {r['all'] / 1e3:.1f} TFLOP/s")
    print(f"  memory bandwidth (device copy of {f['copy_bytes'] >> 20} MiB):"
          f" {f['memory_gb_per_s']:.0f} GB/s")
    for model, fm in f["models"].items():
        rate = fm["sgemm_gflops"]["all"]
        opt = fm["optimizer"]
        print(f"  {model}: {fm['flops_per_image'] / 1e6:.2f} MFLOP/image x "
              f"{f['train_images']} = {fm['flops_per_epoch'] / 1e12:.3f} "
              f"TFLOP / {rate / 1e3:.1f} TFLOP/s = "
              f"{fm['compute_seconds']:.3f} s + {opt} {fm['steps']} steps x "
              f"{fm['parameters'] / 1e6:.2f}M params x "
              f"{OPTIMIZER_BYTES_PER_PARAM[opt]} B / "
              f"{f['memory_gb_per_s']:.0f} GB/s = "
              f"{fm['optimizer_seconds']:.3f} s  =>  "
              f"{fm['floor_seconds_per_epoch']:.3f} s/epoch")
        print(f"  {'':<{len(model)}}  at the peak rate "
              f"{f['peak_sgemm_gflops'] / 1e3:.1f} TFLOP/s: "
              f"{fm['peak_compute_seconds']:.3f} + "
              f"{fm['optimizer_seconds']:.3f}  =>  "
              f"{fm['peak_floor_seconds_per_epoch']:.3f} s/epoch")
        pad = " " * len(model)
        # Each floor against the runs of its own precision.
        for prec, fp in [("f32", fm)] + [
                (q, fm["by_precision"].get(q)) for q in low]:
            if prec != "f32":
                if not fp or "error" in fp:
                    why = fp["error"] if fp else "the probe did not run"
                    print(f"  {pad}  {prec}: no floor ({why})")
                    continue
                r = fp["gemm"]["sgemm_gflops"]
                print(f"  {pad}  {prec} products: x.w {r['x_w'] / 1e3:.1f}, "
                      f"dy.wT {r['dy_wT'] / 1e3:.1f}, xT.dy "
                      f"{r['xT_dy'] / 1e3:.1f}, together "
                      f"{r['all'] / 1e3:.1f} TFLOP/s (4096^3 "
                      f"{fp['peak_gflops'] / 1e3:.1f}): "
                      f"{fp['compute_seconds']:.3f} + "
                      f"{fp['optimizer_seconds']:.3f} + {prec} copy of the "
                      f"weights {fp['copy_seconds']:.3f}  =>  "
                      f"{fp['floor_seconds_per_epoch']:.3f} s/epoch "
                      f"(at the peak rate "
                      f"{fp['peak_floor_seconds_per_epoch']:.3f})")
            b = best_by.get(prec, {}).get(model, {})
            t = b.get("tyto")
            s = b.get("pytorch_best_setting")
            p = b["pytorch"][s] if s else None
            fl = fp["floor_seconds_per_epoch"]
            fp["tyto_over_floor"] = t["seconds_per_epoch"] / fl if t \
                else None
            fp["pytorch_over_floor"] = p["seconds_per_epoch"] / fl if p \
                else None
            tf = fmt(fp["tyto_over_floor"], ".1f", "x")
            pf = fmt(fp["pytorch_over_floor"], ".1f", "x")
            if low:
                print(f"  {pad}  tyto {prec}/{prec} floor = {tf}, pytorch "
                      f"{prec} ({s})/{prec} floor = {pf}")
            else:
                print(f"  {pad}  tyto/floor = {tf}, pytorch ({s})/floor = "
                      f"{pf}")


def amp_section(models, precisions, low, best_by, acc_by, target,
                unsupported, settings, seeds, eval_last):
    """Prints each 16-bit precision against f32, each framework against
    itself, with issue 19's targets for the CNN (through `target`);
    returns the comparison as a dictionary {model: {precision: ...}}."""
    amp = {}
    if not low:
        return amp
    print()
    if "f32" not in precisions:
        print("Mixed precision: no f32 run to compare with (--precision "
              f"f32,{','.join(low)} compares them)")
        return amp
    key = "late_mean" if eval_last else "mean"
    over = f", means over {len(seeds)} seeds" if len(seeds) > 1 else ""
    if eval_last:
        over += (" of" if over else ", mean of") + \
            f" the last {eval_last} steps"
    print("Mixed precision against f32, each framework against itself "
          f"(issue 19, the CNN: tyto's AMP epoch\n  <= "
          f"{TARGET_AMP_TIME_RATIO}x its f32 epoch, its test accuracy at "
          f"most {-TARGET_AMP_ACCURACY_POINTS} points below f32's{over}):")

    def secs(r):
        return r["seconds_per_epoch"] if r else None

    def ratio(a, b):
        return a / b if a is not None and b else None

    def points(a, b):
        return 100 * (a - b) if a is not None and b is not None else None

    def pct(a):
        return fmt(a and 100 * a, ".2f", "%")

    for model in models:
        amp[model] = {}
        for p in low:
            b32, bp = best_by["f32"][model], best_by[p][model]
            a32, alo = acc_by["f32"][model], acc_by[p][model]
            t32, tp = b32["tyto"], bp["tyto"]
            s32, sp = b32["pytorch_best_setting"], bp["pytorch_best_setting"]
            p32 = b32["pytorch"][s32] if s32 else None
            pp = bp["pytorch"][sp] if sp else None
            ta32, tap = a32["tyto"][key], alo["tyto"][key]
            pa32 = a32["pytorch"][s32][key] if s32 else None
            pap = alo["pytorch"][sp][key] if sp else None
            e = {"tyto_seconds": {"f32": secs(t32), p: secs(tp)},
                 "tyto_time_ratio": ratio(secs(tp), secs(t32)),
                 "tyto_accuracy": {"f32": ta32, p: tap},
                 "tyto_accuracy_points": points(tap, ta32),
                 "pytorch_setting": {"f32": s32, p: sp},
                 "pytorch_seconds": {"f32": secs(p32), p: secs(pp)},
                 "pytorch_time_ratio": ratio(secs(pp), secs(p32)),
                 "pytorch_accuracy": {"f32": pa32, p: pap},
                 "pytorch_accuracy_points": points(pap, pa32),
                 "tyto_over_pytorch": ratio(secs(tp), secs(pp)),
                 "tyto_minus_pytorch_points": points(tap, pap)}
            if tp:
                e["tyto_loss_scale"] = tp.get("loss_scale")
                e["tyto_skipped_steps"] = tp.get("skipped_steps")
            amp[model][p] = e
            tag = f"{model} {p}"
            time_text = (f"{tag:<9} tyto    {fmt(secs(tp), '.2f', ' s')} vs "
                         f"f32 {fmt(secs(t32), '.2f', ' s')}: "
                         f"{fmt(e['tyto_time_ratio'], '.3f', 'x')}")
            acc_text = (f"{'':<9} tyto    test accuracy {pct(tap)} vs f32 "
                        f"{pct(ta32)}: "
                        f"{fmt(e['tyto_accuracy_points'], '+.2f', ' points')}")
            if model == "cnn":
                target(f"cnn_{p}_time_ratio", secs(tp), None,
                       e["tyto_time_ratio"], TARGET_AMP_TIME_RATIO, False,
                       "x", time_text + f", target <= {TARGET_AMP_TIME_RATIO}x",
                       precision=p, tyto_f32=secs(t32))
                target(f"cnn_{p}_accuracy_points", tap, None,
                       e["tyto_accuracy_points"], TARGET_AMP_ACCURACY_POINTS,
                       True, " points", acc_text + ", target >= "
                       f"{TARGET_AMP_ACCURACY_POINTS:+.1f} points",
                       precision=p, tyto_f32=ta32)
            else:
                print(f"  {time_text}")
                print(f"  {acc_text}")
            if tp and tp.get("skipped_steps"):
                print(f"  {'':<9} tyto    {tp['skipped_steps']} steps "
                      f"skipped (gradient overflow), final loss scale "
                      f"{tp.get('loss_scale')}")
            if pp is None:
                why = next((w for w in (unsupported(model, st, p)
                                        for st in settings) if w), None)
                print(f"  {'':<9} pytorch {p}: "
                      + (f"not supported: {why}" if why else "did not run"))
            else:
                print(f"  {'':<9} pytorch {fmt(secs(pp), '.2f', ' s')} ({sp})"
                      f" vs f32 {fmt(secs(p32), '.2f', ' s')} ({s32}): "
                      f"{fmt(e['pytorch_time_ratio'], '.3f', 'x')}; test "
                      f"accuracy {pct(pap)} vs {pct(pa32)}: "
                      f"{fmt(e['pytorch_accuracy_points'], '+.2f', ' points')}")
                print(f"  {'':<9} tyto against pytorch, both {p}: "
                      f"{fmt(e['tyto_over_pytorch'], '.3f', 'x')} the time, "
                      f"{fmt(e['tyto_minus_pytorch_points'], '+.2f', ' points')}")
    return amp


def print_low_floor(f, best_by):
    """Prints the CNN's floor in each 16-bit precision measured (floor's
    "by_precision", low_floor_from) next to the f32 one, and each
    framework's distance from it; adds the distances to f."""
    fl32 = f["floor_seconds_per_epoch"]
    for p, fp in f.get("by_precision", {}).items():
        if "error" in fp:
            print(f"  {p}: no floor ({fp['error']})")
            continue
        g = fp["gemm"]
        m, k, n = g["gemm_shape"]
        r = g["gflops"]
        fl = fp["floor_seconds_per_epoch"]
        print(f"  {p} GEMM {m}x{k}x{n} (torch {fp['torch_version']} "
              f"matmul on {g['dtype']} tensors: {fp['implementation']};"
              f" best of {len(f.get('low_probes', []))} probes): x.w "
              f"{r['x_w']:.1f}, dy.wT {r['dy_wT']:.1f}, xT.dy "
              f"{r['xT_dy']:.1f}, together {r['all']:.1f} GFLOP/s")
        print(f"  {p} floor = "
              f"{f['cnn_flops_per_image'] * f['train_images'] / 1e12:.3f}"
              f" TFLOP / {r['all']:.1f} GFLOP/s = "
              f"{fp['compute_seconds']:.2f} s + Adam (f32 master weights, "
              f"as above) {fp['adam_seconds']:.2f} s\n"
              f"    + the {p} copy of the weights, {f['steps']} steps x "
              f"{f['cnn_parameters'] / 1e6:.2f}M params x "
              f"{AMP_COPY_BYTES_PER_PARAM} B / {f['memory_gb_per_s']:.1f} "
              f"GB/s = {fp['copy_seconds']:.2f} s  =>  {fl:.2f} s/epoch "
              f"({fl / fl32:.2f}x the f32 floor)")
        b = best_by.get(p, {}).get("cnn", {})
        t = b.get("tyto")
        s = b.get("pytorch_best_setting")
        pr = b["pytorch"][s] if s else None
        fp["tyto_over_floor"] = t["seconds_per_epoch"] / fl if t else None
        fp["pytorch_over_floor"] = pr["seconds_per_epoch"] / fl if pr \
            else None
        print(f"  tyto {p}/{p} floor = "
              f"{fmt(fp['tyto_over_floor'], '.2f', 'x')}, pytorch {p} "
              f"({s})/{p} floor = {fmt(fp['pytorch_over_floor'], '.2f', 'x')}")


def main(argv):
    global TORCH_PYTHON
    ap = argparse.ArgumentParser(
        description="tyto-train against PyTorch on Fashion-MNIST "
        "(a benchmark, not a test)")
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_TRAIN_IMAGES} training and "
                    f"{QUICK_TEST_IMAGES} test images, to check the harness")
    ap.add_argument("--models", default="cnn,mlp",
                    help="comma-separated subset of cnn,mlp")
    ap.add_argument("--tyto", default=None,
                    help="tyto-train binary (default: build/prefix/bin/"
                    "tyto-train if it exists, else build/tools/tyto-train)")
    ap.add_argument("--data", default=DEFAULT_DATA,
                    help="directory of the Fashion-MNIST gzip IDX files")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="compare on the CPU or on the first NVIDIA GPU "
                    "(tyto-train --devices cuda:0, PyTorch on "
                    "torch.device('cuda'))")
    ap.add_argument("--python", default=None,
                    help="the interpreter that runs PyTorch (default: "
                    f"{TORCH_PYTHON})")
    ap.add_argument("--torch-settings", default=None,
                    help="comma-separated subset of "
                    + ",".join(TORCH_SETTINGS) + " (cpu; default all) or "
                    + ",".join(TORCH_SETTINGS_CUDA) + " (cuda; default "
                    + ",".join(DEFAULT_SETTINGS_CUDA) + ")")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each configuration N times; timings are the "
                    "best of N")
    ap.add_argument("--limit", type=int, default=None,
                    help="training images (overrides --quick)")
    ap.add_argument("--test-limit", type=int, default=None,
                    help="test images (overrides --quick)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", default=None,
                    help="comma-separated seeds, each configuration run "
                    "once per seed (default: --seed)")
    ap.add_argument("--init", choices=["native", "pytorch", "glorot"],
                    default="native",
                    help="initial weights: each framework's own, both "
                    "PyTorch's values for the seed, or both tyto's "
                    "distribution")
    ap.add_argument("--eval-every", type=int, default=0,
                    help="evaluate every N steps in both frameworks and "
                    "report how far the accuracy moves between "
                    "neighbouring evaluations")
    ap.add_argument("--eval-last", type=int, default=0,
                    help="evaluate after each of the last K steps in both "
                    "and compare the means over them")
    ap.add_argument("--precision", default="f32",
                    help="comma-separated list of " + ",".join(PRECISIONS)
                    + ": each configuration runs in each (bf16, f16: "
                    "automatic mixed precision, tyto-train --precision and "
                    "PyTorch's autocast); default f32")
    args = ap.parse_args(argv)
    try:
        seeds = [int(v) for v in args.seeds.split(",") if v] \
            if args.seeds else [args.seed]
    except ValueError:
        ap.error(f"--seeds {args.seeds}: expected comma-separated integers")
    if not seeds or args.eval_every < 0 or args.eval_last < 0:
        ap.error("--seeds needs a seed, --eval-every and --eval-last "
                 "values >= 0")
    precisions = []
    for v in args.precision.split(","):
        if v and v not in precisions:
            precisions.append(v)
    if not precisions or any(v not in PRECISIONS for v in precisions):
        ap.error(f"--precision {args.precision}: expected a comma-separated "
                 f"list of {', '.join(PRECISIONS)}")
    # The existing targets (against PyTorch) and the "results" of the
    # BENCH line are those of f32 when it ran, else of the first listed.
    ref = "f32" if "f32" in precisions else precisions[0]
    low = [v for v in precisions if v != "f32"]

    cuda = args.device == "cuda"
    table = settings_table(args.device)
    if args.torch_settings is None:
        args.torch_settings = ",".join(DEFAULT_SETTINGS_CUDA if cuda
                                       else TORCH_SETTINGS)
    models = [m for m in args.models.split(",") if m]
    settings = [s for s in args.torch_settings.split(",") if s]
    bad = [m for m in models if m not in MODELS] + \
        [s for s in settings if s not in table]
    if bad or not models or not settings or args.repeat < 1:
        ap.error(f"bad --models/--torch-settings/--repeat: {bad or 'empty'}; "
                 f"models are {','.join(MODELS)}, settings "
                 f"{','.join(table)}"
                 + (" on --device cuda" if cuda else ""))
    if args.quick:
        args.limit = args.limit or QUICK_TRAIN_IMAGES
        args.test_limit = args.test_limit or QUICK_TEST_IMAGES
    train_images = args.limit or FULL_TRAIN_IMAGES
    for name in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz"):
        if not os.path.exists(os.path.join(args.data, name)):
            ap.error(f"{args.data}/{name} not found; pass --data DIR")
    if args.python:
        TORCH_PYTHON = args.python
    gpu = None
    if cuda:
        gpu, why = cuda_info()
        if gpu is None:
            log(f"--device cuda: {why}")
            return 2

    if args.tyto is None:
        installed = os.path.join(REPO, "build", "prefix", "bin", "tyto-train")
        args.tyto = installed if os.path.exists(installed) else \
            os.path.join(REPO, "build", "tools", "tyto-train")
    errors = []
    tyto_missing = not (os.path.isfile(args.tyto)
                        and os.access(args.tyto, os.X_OK))
    if tyto_missing:
        msg = (f"tyto-train not found or not executable at {args.tyto}; "
               f"build it (make -C build) or pass --tyto PATH. "
               f"Running PyTorch only; exit status will be 2.")
        log(msg)
        errors.append(msg)

    machine = machine_info()
    log(f"{machine['cpu']}, {machine['cores_usable']} cores, "
        f"torch {machine['torch_version']}, load {machine['load_average']}")
    if cuda:
        machine["gpu"] = gpu
        log(f"GPU: {gpu['name']} ({gpu['memory_bytes'] / 2**30:.0f} GiB, "
            f"compute capability {gpu['capability']}), CUDA "
            f"{gpu['cuda_version']}, cuDNN {gpu['cudnn_version']}")

    probes, low_probes = [], []
    if cuda:
        log("measuring cuBLAS sgemm (TF32 off)"
            + (f", {', '.join(low)} GEMMs" if low else "")
            + " and device memory bandwidth")
        probes.append(run_gpu_probe(models, low))
    elif "cnn" in models:
        log(f"measuring sgemm ({CORES} threads) and memory bandwidth")
        probes.append(run_probe(CORES))
        if low:
            log(f"measuring {', '.join(low)} GEMMs (torch.matmul, "
                f"{CORES} threads)")
            low_probes.append(run_low_probe(low, CORES))

    # Round-robin over the repeats, so slow drift on a shared machine
    # spreads over every configuration instead of landing on one.
    runs = []
    args.workdir = tempfile.mkdtemp(prefix="train_vs_torch-")
    try:
        for rep in range(args.repeat):
            if args.repeat > 1:
                log(f"repeat {rep + 1}/{args.repeat}")
            for seed in seeds:
                for model in models:
                    # Each framework's precisions back to back: their
                    # ratio, the figure --precision is for, then sees
                    # the least drift of a shared machine's load.
                    for prec in precisions if not tyto_missing else []:
                        runs.append(run_tyto(model, args, seed, prec))
                    for prec in precisions:
                        for setting in settings:
                            no = next((r for r in runs
                                       if r.get("unsupported")
                                       and r["precision"] == prec), None)
                            if no:
                                # The same torch on the same device: no
                                # other setting will autocast to it either.
                                runs.append(dict(no, model=model, seed=seed,
                                                 setting=setting,
                                                 wall_seconds=0.0))
                                continue
                            runs.append(run_torch(model, setting, args, seed,
                                                  prec))
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    errors += [r["error"] for r in runs if "error" in r]

    def accuracy(model, framework, setting, prec):
        """The configuration's test accuracy per seed (the mean of its
        repeats), its mean and standard deviation over the seeds, the same
        for the mean over the last steps (--eval-last), and the mean swing
        between neighbouring evaluations."""
        ok = [r for r in runs if "error" not in r and r["model"] == model
              and r["framework"] == framework and r["setting"] == setting
              and r["precision"] == prec and not r.get("unsupported")]

        def by_seed(key):
            per_seed = {}
            for r in ok:
                if r.get(key) is not None:
                    per_seed.setdefault(r["seed"], []).append(r[key])
            return [statistics.mean(per_seed[sd]) for sd in seeds
                    if sd in per_seed]
        accs, late = by_seed("test_accuracy"), by_seed("late_mean")
        swings = [r["swing_points"] for r in ok
                  if r.get("swing_points") is not None]
        return {"seeds": [sd for sd in seeds
                          if any(r["seed"] == sd for r in ok)],
                "accuracies": accs,
                "mean": statistics.mean(accs) if accs else None,
                "sd": statistics.stdev(accs) if len(accs) > 1 else None,
                "late_means": late,
                "late_mean": statistics.mean(late) if late else None,
                "late_sd": statistics.stdev(late) if len(late) > 1 else None,
                "swing_points": statistics.mean(swings) if swings else None}

    # Per precision; acc and best (below) are the reference precision's.
    acc_by = {p: {m: {"tyto": accuracy(m, "tyto", "default", p),
                      "pytorch": {st: accuracy(m, "pytorch", st, p)
                                  for st in settings}} for m in models}
              for p in precisions}
    acc = acc_by[ref]

    floor = None
    if cuda:
        log("measuring cuBLAS sgemm and device memory bandwidth again")
        probes.append(run_gpu_probe(models, low))
        floor = gpu_floor_from(probes, models, train_images, low)
        if floor is None:
            errors.append("GPU sgemm/bandwidth probe failed")
    elif "cnn" in models:
        log("measuring sgemm and memory bandwidth again")
        probes.append(run_probe(CORES))
        floor = floor_from(probes, CORES, train_images,
                           MODELS["cnn"]["batch"])
        if floor is None:
            errors.append("sgemm/bandwidth probe failed")
        if low:
            log(f"measuring {', '.join(low)} GEMMs again")
            low_probes.append(run_low_probe(low, CORES))
            if not any(low_probes):
                errors.append("16-bit GEMM probe failed")
            if floor is not None:
                floor["low_probes"] = low_probes
                floor["by_precision"] = {
                    p: low_floor_from(low_probes, floor, p) for p in low}
    machine["load_average_end"] = load_average()

    # Best of N per configuration, then PyTorch's best setting per model.
    def best_of(model, prec):
        b = {"tyto": pick_best(
            [r for r in runs if r["framework"] == "tyto"
             and r["model"] == model and r["precision"] == prec],
            "seconds_per_epoch"), "pytorch": {}}
        for setting in settings:
            b["pytorch"][setting] = pick_best(
                [r for r in runs if r["framework"] == "pytorch"
                 and r["model"] == model and r["setting"] == setting
                 and r["precision"] == prec], "seconds_per_epoch")
        b["pytorch_best_setting"] = None
        ok = {s: r for s, r in b["pytorch"].items() if r}
        if ok:
            b["pytorch_best_setting"] = min(
                ok, key=lambda s: ok[s]["seconds_per_epoch"])
        return b
    best_by = {p: {m: best_of(m, p) for m in models} for p in precisions}
    best = best_by[ref]

    # ---- table
    print("tyto-train vs PyTorch, Fashion-MNIST, one epoch, batch 64"
          + (f" (--quick: {args.limit} training, {args.test_limit} test "
             f"images)" if args.quick else ""))
    print(f"machine: {machine['cpu']} ({', '.join(machine['isa'])}), "
          f"{machine['cores_usable']} of {machine['cores_online']} cores, "
          f"{machine['memory_gib']} GiB, load {machine['load_average']} at "
          f"the start, {machine['load_average_end']} at the end")
    if cuda:
        print(f"GPU: {gpu['name']}, {gpu['memory_bytes'] / 2**30:.0f} GiB, "
              f"compute capability {gpu['capability']}, "
              f"{gpu['multiprocessors']} SMs; CUDA {gpu['cuda_version']}, "
              f"cuDNN {gpu['cudnn_version']}; both frameworks on cuda:0, "
              f"f32 (TF32 off)"
              + (f", and AMP in {', '.join(low)}" if low else ""))
    print(f"date: {machine['date']}   torch {machine['torch_version']}   "
          f"tyto {machine['tyto_revision']} ({args.tyto})")
    if args.repeat > 1:
        print(f"timings: best of {args.repeat} runs")
    print(f"initial weights: {args.init}; seeds "
          f"{','.join(map(str, seeds))}"
          + ("; test accuracy: the mean over the seeds" if len(seeds) > 1
             else ""))
    print()
    head = (f"{'model':<5} {'prec':<4} {'framework':<9} {'setting':<46} "
            f"{'test acc':>8} {'s/epoch':>8} {'images/s':>9} "
            f"{'peak RSS MB':>11}")
    if cuda:
        head += f" {'device MB':>9} {'reserved MB':>11}"
    print(head)
    print("-" * len(head))

    def unsupported(model, setting, prec):
        """Why PyTorch did not run the configuration, or None."""
        return next((r["unsupported"] for r in runs
                     if r["framework"] == "pytorch" and r["model"] == model
                     and r["setting"] == setting and r["precision"] == prec
                     and r.get("unsupported")), None)

    for model, prec in ((m, p) for m in models for p in precisions):
        bp, ap_ = best_by[prec][model], acc_by[prec][model]
        rows = [("tyto", "default", bp["tyto"])]
        rows += [("pytorch", s, bp["pytorch"][s]) for s in settings]
        for framework, setting, r in rows:
            label = table[setting]["label"] \
                if framework == "pytorch" else setting
            if framework == "pytorch" and \
                    setting == bp["pytorch_best_setting"]:
                label += " *"
            if r is None:
                why = framework == "pytorch" and \
                    unsupported(model, setting, prec)
                status = "not run (binary missing)" \
                    if framework == "tyto" and tyto_missing else \
                    "not supported (below)" if why else "FAILED"
                print(f"{model:<5} {prec:<4} {framework:<9} {label:<46} "
                      f"{status}")
                continue
            a = ap_["tyto"] if framework == "tyto" else \
                ap_["pytorch"][setting]
            line = (f"{model:<5} {prec:<4} {framework:<9} {label:<46} "
                    f"{100 * a['mean']:>7.2f}% "
                    f"{r['seconds_per_epoch']:>8.2f} "
                    f"{r['images_per_second']:>9.0f} "
                    f"{r['peak_rss_bytes'] / 1e6:>11.0f}")
            if cuda:
                dev_b = device_bytes(r)
                res_b = r.get("peak_device_reserved_bytes")
                res = fmt(res_b and res_b / 1e6, '11.0f', none='-')
                line += f" {fmt(dev_b and dev_b / 1e6, '9.0f'):>9} {res:>11}"
            print(line)
    print("* PyTorch's best (fastest) setting in this run, compared below")
    if low:
        print("prec: f32, or automatic mixed precision in that dtype with "
              "f32 master weights:\n  tyto-train --precision, PyTorch's "
              "torch.autocast"
              + (" (f16: with a GradScaler)" if "f16" in low else "")
              + "; both evaluate in f32")
    for prec in low:
        why = next((r["unsupported"] for r in runs
                    if r.get("unsupported") and r["precision"] == prec), None)
        if why:
            print(f"PyTorch {prec} on the {args.device}: not supported by "
                  f"torch {machine['torch_version']}: {why}")
    if cuda:
        data = ", ".join(f"{m} {r['data_device_bytes'] / 1e6:.0f} MB"
                         for m in models
                         for r in [best[m]["pytorch"].get(
                             best[m]["pytorch_best_setting"])]
                         if r and r.get("data_device_bytes") is not None)
        print("device MB: peak device memory, tyto-train's peak_device_bytes "
              "(every buffer tyto\n  allocated on the GPU) and PyTorch's "
              "torch.cuda.max_memory_allocated(); reserved MB:\n  "
              "max_memory_reserved(), what its caching allocator held. "
              "PyTorch's include its data\n  set, resident on the GPU"
              + (f" ({data})" if data else "")
              + ". Neither counts the CUDA context or memory\n  the "
              "libraries (cuBLAS, cuDNN) take for themselves.")
    print()
    if len(seeds) > 1 or args.eval_every or args.eval_last:
        print("Test accuracy by seed (%), mean and standard deviation"
              + ("; swing: mean |change| between neighbouring evaluations "
                 f"(every {args.eval_every} steps) over the second half of "
                 "the epoch, in points" if args.eval_every else "") + ":")
        for model, prec in ((m, p) for m in models for p in precisions):
            am = acc_by[prec][model]
            tag = f" {prec}" if len(precisions) > 1 else ""
            rows = [(f"tyto{tag}", am["tyto"])]
            rows += [(f"pytorch {st}{tag}", am["pytorch"][st])
                     for st in settings]
            for label, a in rows:
                if not a["accuracies"]:
                    continue
                print(f"  {model:<5} {label:<18} "
                      + " ".join(f"{100 * v:6.2f}" for v in a["accuracies"])
                      + f"   mean {fmt(a['mean'] and 100 * a['mean'], '.2f')}"
                      f" sd {fmt(a['sd'] and 100 * a['sd'], '.2f')}"
                      + (f"   swing {fmt(a['swing_points'], '.2f')}"
                         if args.eval_every else ""))
                if args.eval_last:
                    late = f"  last {args.eval_last} steps"
                    lm = a["late_mean"] and 100 * a["late_mean"]
                    ls = a["late_sd"] and 100 * a["late_sd"]
                    print(f"  {'':<5} {late:<18} "
                          + " ".join(f"{100 * v:6.2f}"
                                     for v in a["late_means"])
                          + f"   mean {fmt(lm, '.2f')} sd {fmt(ls, '.2f')}")
        print()

    # ---- ratios against the targets
    targets = []

    def target(name, tyto_v, torch_v, value, goal, higher, unit, text,
               **extra):
        v = verdict(value, goal, higher, unit)
        targets.append({"name": name, "tyto": tyto_v, "pytorch": torch_v,
                        "value": value, "target": goal,
                        "higher_is_better": higher,
                        "met": None if value is None else v == "met"})
        targets[-1].update(extra)
        print(f"  {text}: {v}")

    def memory_target(model, t, p, s):
        tb, pb = device_bytes(t), device_bytes(p)
        ratio = tb / pb if tb is not None and pb else None
        res = p and p.get("peak_device_reserved_bytes")
        data = p and p.get("data_device_bytes")
        target(f"{model}_device_memory_ratio", tb, pb, ratio,
               TARGET_CUDA_MEMORY_RATIO, False, "x",
               f"{model} device memory   tyto {fmt(tb and tb / 1e6, '.0f', ' MB')}"
               f" vs pytorch {fmt(pb and pb / 1e6, '.0f', ' MB')} allocated"
               f" ({fmt(res and res / 1e6, '.0f', ' MB')} reserved, of it"
               f" {fmt(data and data / 1e6, '.0f', ' MB')} its data set;"
               f" {s}): {fmt(ratio, '.3f', 'x')}, target <="
               f" {TARGET_CUDA_MEMORY_RATIO}x")
        targets[-1]["pytorch_reserved"] = res
        targets[-1]["pytorch_data"] = data

    print("Targets (tyto against PyTorch's best setting"
          + (f", both in {ref}" if low else "") + "):")
    if "cnn" in models:
        t = best["cnn"]["tyto"]
        s = best["cnn"]["pytorch_best_setting"]
        p = best["cnn"]["pytorch"][s] if s else None
        both = t is not None and p is not None
        # With --eval-last the means over the last steps: one step's
        # accuracy moves by a point or more late in the epoch.
        key = "late_mean" if args.eval_last else "mean"
        over = f", means over {len(seeds)} seeds" if len(seeds) > 1 else ""
        if args.eval_last:
            over += (" of" if over else ", mean of") + \
                f" the last {args.eval_last} steps"
        ta = acc["cnn"]["tyto"][key]
        pa = acc["cnn"]["pytorch"][s][key] if s else None
        diff = 100 * (ta - pa) if ta is not None and pa is not None else None
        target("cnn_accuracy_points", ta, pa, diff, TARGET_CNN_ACCURACY_POINTS,
               True, " points",
               f"cnn test accuracy   tyto {fmt(ta and 100 * ta, '.2f', '%')}"
               f" vs pytorch {fmt(pa and 100 * pa, '.2f', '%')} ({s}"
               f"{over}):"
               f" {fmt(diff, '+.2f', ' points')}, target >= "
               f"{TARGET_CNN_ACCURACY_POINTS:+.1f} points")
        goal = TARGET_CUDA_CNN_TIME_RATIO if cuda else TARGET_CNN_TIME_RATIO
        ratio = t["seconds_per_epoch"] / p["seconds_per_epoch"] \
            if both else None
        need = goal * p["seconds_per_epoch"] if p else None
        target("cnn_time_ratio", t and t["seconds_per_epoch"],
               p and p["seconds_per_epoch"], ratio, goal,
               False, "x",
               f"cnn seconds/epoch   tyto {fmt(t and t['seconds_per_epoch'], '.2f', ' s')}"
               f" vs pytorch {fmt(p and p['seconds_per_epoch'], '.2f', ' s')} ({s}):"
               f" {fmt(ratio, '.3f', 'x')}, target <= {goal}x"
               f" (<= {fmt(need, '.2f', ' s')})")
        if cuda:
            memory_target("cnn", t, p, s)
        else:
            ratio = t["peak_rss_bytes"] / p["peak_rss_bytes"] if both \
                else None
            target("cnn_rss_ratio", t and t["peak_rss_bytes"],
                   p and p["peak_rss_bytes"], ratio, TARGET_CNN_RSS_RATIO,
                   False, "x",
                   f"cnn peak RSS        tyto {fmt(t and t['peak_rss_bytes'] / 1e6, '.0f', ' MB')}"
                   f" vs pytorch {fmt(p and p['peak_rss_bytes'] / 1e6, '.0f', ' MB')} ({s}):"
                   f" {fmt(ratio, '.3f', 'x')}, target <= {TARGET_CNN_RSS_RATIO}x")
    if "mlp" in models:
        t = best["mlp"]["tyto"]
        s = best["mlp"]["pytorch_best_setting"]
        p = best["mlp"]["pytorch"][s] if s else None
        goal = TARGET_CUDA_MLP_SPEED_RATIO if cuda else TARGET_MLP_SPEED_RATIO
        ratio = t["images_per_second"] / p["images_per_second"] \
            if t and p else None
        target("mlp_speed_ratio", t and t["images_per_second"],
               p and p["images_per_second"], ratio, goal,
               True, "x",
               f"mlp images/s        tyto {fmt(t and t['images_per_second'], '.0f')}"
               f" vs pytorch {fmt(p and p['images_per_second'], '.0f')} ({s}):"
               f" {fmt(ratio, '.3f', 'x')}, target >= {goal}x")
        if cuda:
            memory_target("mlp", t, p, s)

    amp = amp_section(models, precisions, low, best_by, acc_by, target,
                      unsupported, settings, seeds, args.eval_last)

    if floor and cuda:
        print_gpu_floor(floor, best_by, low)
    elif floor:
        f = floor
        # The f32 floor against the f32 runs (none when f32 did not run).
        b32 = best_by["f32"]["cnn"] if "f32" in best_by else {}
        t = b32.get("tyto")
        s = b32.get("pytorch_best_setting")
        p = b32["pytorch"][s] if s else None
        fl = f["floor_seconds_per_epoch"]
        print()
        print(f"CNN arithmetic floor ({f['threads']} threads, "
              f"{f['train_images']} images):")
        print(f"  FLOPs: 3 x forward = {f['cnn_flops_per_image'] / 1e6:.2f}"
              f" MFLOP/image, {f['cnn_flops_per_step'] / 1e9:.2f} GFLOP per"
              f" 64-image step")
        print(f"  (best of {len(f['probes'])} probes, before and after the"
              f" training runs)")
        print(f"  sgemm {f['gemm_shape'][0]}x{f['gemm_shape'][1]}x"
              f"{f['gemm_shape'][2]} (OpenBLAS via numpy "
              f"{f['numpy_version']}): x.w "
              f"{f['sgemm_gflops']['x_w']:.1f}, dy.wT "
              f"{f['sgemm_gflops']['dy_wT']:.1f}, xT.dy "
              f"{f['sgemm_gflops']['xT_dy']:.1f}, together "
              f"{f['sgemm_gflops']['all']:.1f} GFLOP/s")
        print(f"  memory bandwidth (numpy copy of {f['copy_bytes'] >> 20} "
              f"MiB): {f['memory_gb_per_s']:.1f} GB/s")
        print(f"  floor = {f['cnn_flops_per_image'] * f['train_images'] / 1e12:.3f}"
              f" TFLOP / {f['sgemm_gflops']['all']:.1f} GFLOP/s"
              f" = {f['compute_seconds']:.2f} s"
              f" + Adam {f['steps']} steps x {f['cnn_parameters'] / 1e6:.2f}M"
              f" params x 28 B / {f['memory_gb_per_s']:.1f} GB/s"
              f" = {f['adam_seconds']:.2f} s"
              f"  =>  {fl:.2f} s/epoch")
        f["tyto_over_floor"] = t["seconds_per_epoch"] / fl if t else None
        f["pytorch_over_floor"] = p["seconds_per_epoch"] / fl if p else None
        print(f"  tyto/floor = {fmt(f['tyto_over_floor'], '.2f', 'x')}, "
              f"pytorch ({s})/floor = {fmt(f['pytorch_over_floor'], '.2f', 'x')}")
        print_low_floor(f, best_by)
    if errors:
        print()
        for e in errors:
            print(f"error: {e}")

    def summary(r):
        if r is None:
            return None
        keys = ("setting", "precision", "test_accuracy", "train_loss",
                "seconds_per_epoch", "images_per_second", "peak_rss_bytes",
                "train_images", "test_images")
        if r.get("precision", "f32") != "f32":
            keys += ("loss_scale", "skipped_steps")
        if cuda:
            keys += ("peak_device_bytes", "peak_device_allocated_bytes",
                     "peak_device_reserved_bytes", "data_device_bytes",
                     "warmup_seconds")
        return {k: r.get(k) for k in keys if k in r or
                not k.startswith(("peak_device", "data_device", "warmup",
                                  "loss_scale", "skipped"))}

    def results(b):
        return {m: {"tyto": summary(b[m]["tyto"]),
                    "pytorch": {s: summary(r) for s, r in
                                b[m]["pytorch"].items()},
                    "pytorch_best_setting":
                    b[m]["pytorch_best_setting"]} for m in models}

    bench = {
        "bench": "train_vs_torch",
        "machine": machine,
        "config": {"models": models, "torch_settings": settings,
                   "repeat": args.repeat, "quick": args.quick,
                   "train_images": train_images,
                   "test_images": args.test_limit or FULL_TEST_IMAGES,
                   "seed": args.seed, "seeds": seeds, "init": args.init,
                   "eval_every": args.eval_every,
                   "eval_last": args.eval_last,
                   "data": args.data, "tyto": args.tyto,
                   "device": args.device,
                   "precisions": precisions,
                   "reference_precision": ref,
                   "model_settings": {m: MODELS[m] for m in models}},
        # "accuracy" and "results": the reference precision's (f32 when
        # it ran); "by_precision": every precision's, the reference's too.
        "accuracy": acc,
        "results": results(best),
        "by_precision": {p: {"accuracy": acc_by[p],
                             "results": results(best_by[p])}
                         for p in precisions},
        "amp": amp,
        "targets": targets,
        "floor": floor,
        "runs": runs,
        "errors": errors,
    }
    print()
    print("BENCH " + json.dumps(bench, separators=(",", ":")))
    sys.stdout.flush()
    if tyto_missing:
        return 2
    return 1 if any("error" in r for r in runs) or floor is None and \
        ("cnn" in models or cuda) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
