#!/usr/bin/python3
"""bench/train_vs_torch: tyto-train against PyTorch on Fashion-MNIST.

Runs tyto-train and the same models in PyTorch (Debian's python3-torch,
through bench/torch_fashion.py) in one run, each training run in its own
subprocess, and prints a table, the ratios against the targets, and one
machine-readable line "BENCH {json}".  A benchmark, not a test: missing a
target never changes the exit status.

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

Usage: bench/train_vs_torch.py [--quick] [--models cnn,mlp] [--tyto PATH]
         [--data DIR] [--torch-settings t1,t2,t2-passive] [--repeat N]
         [--seeds 1,2,...] [--init native|pytorch|glorot] [--eval-every N]
         [--eval-last K]

Exit status: 0 when every run finished; 2 on bad arguments or when the
tyto-train binary is missing (PyTorch still runs and is reported); 1 when
a run failed.
"""

import argparse
import datetime
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
# torch 1.13 is installed for Debian's interpreter only.
TORCH_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") \
    else sys.executable
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

TARGET_CNN_ACCURACY_POINTS = -0.5  # tyto - pytorch, percentage points
TARGET_CNN_TIME_RATIO = 0.4        # tyto / pytorch seconds per epoch
TARGET_CNN_RSS_RATIO = 1.0         # tyto / pytorch peak RSS
TARGET_MLP_SPEED_RATIO = 1.3       # tyto / pytorch images per second

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


def run_torch(model, setting, args, seed):
    s = TORCH_SETTINGS[setting]
    env = dict(os.environ)
    # The setting decides the wait policy, not whatever the caller exported.
    env.pop("OMP_WAIT_POLICY", None)
    env.update(s["env"])
    cmd = torch_fashion_cmd(model, args, seed, s["threads"])
    if args.eval_every:
        cmd += ["--eval-every", str(args.eval_every)]
    if args.eval_last:
        cmd += ["--eval-last", str(args.eval_last)]
    run = finish_run("pytorch", model, setting, seed, cmd, env,
                     args.eval_every)
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
    if os.path.realpath(os.path.dirname(args.tyto)) == \
            os.path.realpath(os.path.join(REPO, "build", "tools")):
        # The uninstalled binary finds its plugins only through these.
        env.setdefault("TYTO_PLUGIN_PATH",
                       os.path.join(REPO, "build", "plugins", "cpu", ".libs"))
        env.setdefault("TYTO_DEVICES", "cpu")
    return env


def run_tyto(model, args, seed):
    cfg = MODELS[model]
    env = tyto_env(args)
    base = [args.tyto, "--model", model, "--data", args.data,
            "--epochs", "1", "--batch", str(cfg["batch"]),
            "--optimizer", cfg["optimizer"], "--lr", repr(cfg["lr"]),
            "--seed", str(seed)]
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
        init = os.path.join(args.workdir, f"init-{model}-{seed}.safetensors")
        start = os.path.join(args.workdir, f"start-{model}-{seed}.safetensors")
        ck = os.path.join(args.workdir, f"run-{model}-{seed}.safetensors")
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
                    "seed": seed, "error": msg}
        cmd += ["--checkpoint", ck, "--resume"]
    run = finish_run("tyto", model, "default", seed, cmd + ["--json"], env,
                     args.eval_every)
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
    ck = os.path.join(args.workdir, f"late-{model}-{seed}.safetensors")
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


def finish_run(framework, model, setting, seed, cmd, env, every=0):
    log(f"{framework} {model} {setting} seed {seed}: {' '.join(cmd)}")
    err_lines = []
    rc, out, rss, wall = run_child(cmd, env, err_lines)
    run = {"framework": framework, "model": model, "setting": setting,
           "seed": seed, "exit_status": rc, "wall_seconds": wall,
           "peak_rss_bytes": rss}
    result = last_json(out) if rc == 0 else None
    if rc != 0 or result is None:
        why = out.strip() if rc is None else \
            f"exit status {rc}" if rc != 0 else \
            "exit status 0 but no JSON object at the end of stdout"
        run["error"] = f"{framework} {model} {setting}: {why}"
        log(run["error"])
        return run
    run["reported"] = result
    for key in ("test_accuracy", "train_loss", "seconds_per_epoch",
                "images_per_second", "train_images", "test_images"):
        run[key] = result.get(key)
    if framework == "tyto" and rss == 0:
        run["peak_rss_bytes"] = result.get("peak_rss_bytes", 0)
    if framework == "tyto":
        curve = [[int(m.group(1)), float(m.group(2)) / 100]
                 for m in map(EVAL_LINE.search, err_lines) if m]
    else:
        curve = result.get("eval_curve") or []
    run["eval_curve"] = curve
    run["swing_points"] = swing(run["eval_curve"], every)
    log(f"{framework} {model} {setting} seed {seed}: "
        f"{run['seconds_per_epoch']:.2f} s/epoch, "
        f"accuracy {100 * run['test_accuracy']:.2f}%")
    return run


# ---------------------------------------------------------------------------
# Machine information.

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
    try:
        with open("/proc/loadavg") as f:
            load = [float(v) for v in f.read().split()[:3]]
    except OSError:
        load = None
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


# ---------------------------------------------------------------------------
# Report.

def pick_best(runs, key):
    """The run with the lowest `key` among successful runs, or None."""
    ok = [r for r in runs if "error" not in r and r.get(key) is not None]
    return min(ok, key=lambda r: r[key]) if ok else None


def fmt(v, spec, unit="", none="n/a"):
    return none if v is None else format(v, spec) + unit


def verdict(value, target, higher_is_better, unit="x"):
    if value is None:
        return "not measured"
    met = value >= target if higher_is_better else value <= target
    if met:
        return "met"
    return f"MISSED by {abs(value - target):.2f}{unit}"


def main(argv):
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
    ap.add_argument("--torch-settings", default=",".join(TORCH_SETTINGS),
                    help="comma-separated subset of "
                    + ",".join(TORCH_SETTINGS))
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
    args = ap.parse_args(argv)
    try:
        seeds = [int(v) for v in args.seeds.split(",") if v] \
            if args.seeds else [args.seed]
    except ValueError:
        ap.error(f"--seeds {args.seeds}: expected comma-separated integers")
    if not seeds or args.eval_every < 0 or args.eval_last < 0:
        ap.error("--seeds needs a seed, --eval-every and --eval-last "
                 "values >= 0")

    models = [m for m in args.models.split(",") if m]
    settings = [s for s in args.torch_settings.split(",") if s]
    bad = [m for m in models if m not in MODELS] + \
        [s for s in settings if s not in TORCH_SETTINGS]
    if bad or not models or not settings or args.repeat < 1:
        ap.error(f"bad --models/--torch-settings/--repeat: {bad or 'empty'}; "
                 f"models are {','.join(MODELS)}, settings "
                 f"{','.join(TORCH_SETTINGS)}")
    if args.quick:
        args.limit = args.limit or QUICK_TRAIN_IMAGES
        args.test_limit = args.test_limit or QUICK_TEST_IMAGES
    train_images = args.limit or FULL_TRAIN_IMAGES
    for name in ("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz"):
        if not os.path.exists(os.path.join(args.data, name)):
            ap.error(f"{args.data}/{name} not found; pass --data DIR")

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

    probes = []
    if "cnn" in models:
        log(f"measuring sgemm ({CORES} threads) and memory bandwidth")
        probes.append(run_probe(CORES))

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
                    if not tyto_missing:
                        runs.append(run_tyto(model, args, seed))
                    for setting in settings:
                        runs.append(run_torch(model, setting, args, seed))
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    errors += [r["error"] for r in runs if "error" in r]

    def accuracy(model, framework, setting):
        """The configuration's test accuracy per seed (the mean of its
        repeats), its mean and standard deviation over the seeds, the same
        for the mean over the last steps (--eval-last), and the mean swing
        between neighbouring evaluations."""
        ok = [r for r in runs if "error" not in r and r["model"] == model
              and r["framework"] == framework and r["setting"] == setting]

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

    acc = {m: {"tyto": accuracy(m, "tyto", "default"),
               "pytorch": {st: accuracy(m, "pytorch", st)
                           for st in settings}} for m in models}

    floor = None
    if "cnn" in models:
        log("measuring sgemm and memory bandwidth again")
        probes.append(run_probe(CORES))
        floor = floor_from(probes, CORES, train_images,
                           MODELS["cnn"]["batch"])
        if floor is None:
            errors.append("sgemm/bandwidth probe failed")

    # Best of N per configuration, then PyTorch's best setting per model.
    best = {}
    for model in models:
        best[model] = {"tyto": pick_best(
            [r for r in runs if r["framework"] == "tyto"
             and r["model"] == model], "seconds_per_epoch"),
            "pytorch": {}}
        for setting in settings:
            best[model]["pytorch"][setting] = pick_best(
                [r for r in runs if r["framework"] == "pytorch"
                 and r["model"] == model and r["setting"] == setting],
                "seconds_per_epoch")
        best[model]["pytorch_best_setting"] = None
        ok = {s: r for s, r in best[model]["pytorch"].items() if r}
        if ok:
            best[model]["pytorch_best_setting"] = min(
                ok, key=lambda s: ok[s]["seconds_per_epoch"])

    # ---- table
    print("tyto-train vs PyTorch, Fashion-MNIST, one epoch, batch 64"
          + (f" (--quick: {args.limit} training, {args.test_limit} test "
             f"images)" if args.quick else ""))
    print(f"machine: {machine['cpu']} ({', '.join(machine['isa'])}), "
          f"{machine['cores_usable']} of {machine['cores_online']} cores, "
          f"{machine['memory_gib']} GiB, load {machine['load_average']}")
    print(f"date: {machine['date']}   torch {machine['torch_version']}   "
          f"tyto {machine['tyto_revision']} ({args.tyto})")
    if args.repeat > 1:
        print(f"timings: best of {args.repeat} runs")
    print(f"initial weights: {args.init}; seeds "
          f"{','.join(map(str, seeds))}"
          + ("; test accuracy: the mean over the seeds" if len(seeds) > 1
             else ""))
    print()
    head = (f"{'model':<5} {'framework':<9} {'setting':<46} {'test acc':>8} "
            f"{'s/epoch':>8} {'images/s':>9} {'peak RSS MB':>11}")
    print(head)
    print("-" * len(head))
    for model in models:
        rows = [("tyto", "default", best[model]["tyto"])]
        rows += [("pytorch", s, best[model]["pytorch"][s]) for s in settings]
        for framework, setting, r in rows:
            label = TORCH_SETTINGS[setting]["label"] \
                if framework == "pytorch" else setting
            if framework == "pytorch" and \
                    setting == best[model]["pytorch_best_setting"]:
                label += " *"
            if r is None:
                status = "not run (binary missing)" \
                    if framework == "tyto" and tyto_missing else "FAILED"
                print(f"{model:<5} {framework:<9} {label:<46} {status}")
                continue
            a = acc[model]["tyto"] if framework == "tyto" else \
                acc[model]["pytorch"][setting]
            print(f"{model:<5} {framework:<9} {label:<46} "
                  f"{100 * a['mean']:>7.2f}% "
                  f"{r['seconds_per_epoch']:>8.2f} "
                  f"{r['images_per_second']:>9.0f} "
                  f"{r['peak_rss_bytes'] / 1e6:>11.0f}")
    print("* PyTorch's best (fastest) setting in this run, compared below")
    print()
    if len(seeds) > 1 or args.eval_every or args.eval_last:
        print("Test accuracy by seed (%), mean and standard deviation"
              + ("; swing: mean |change| between neighbouring evaluations "
                 f"(every {args.eval_every} steps) over the second half of "
                 "the epoch, in points" if args.eval_every else "") + ":")
        for model in models:
            rows = [("tyto", acc[model]["tyto"])]
            rows += [(f"pytorch {st}", acc[model]["pytorch"][st])
                     for st in settings]
            for label, a in rows:
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

    def target(name, tyto_v, torch_v, value, goal, higher, unit, text):
        v = verdict(value, goal, higher, unit)
        targets.append({"name": name, "tyto": tyto_v, "pytorch": torch_v,
                        "value": value, "target": goal,
                        "higher_is_better": higher,
                        "met": None if value is None else v == "met"})
        print(f"  {text}: {v}")

    print("Targets (tyto against PyTorch's best setting):")
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
        ratio = t["seconds_per_epoch"] / p["seconds_per_epoch"] \
            if both else None
        need = TARGET_CNN_TIME_RATIO * p["seconds_per_epoch"] if p else None
        target("cnn_time_ratio", t and t["seconds_per_epoch"],
               p and p["seconds_per_epoch"], ratio, TARGET_CNN_TIME_RATIO,
               False, "x",
               f"cnn seconds/epoch   tyto {fmt(t and t['seconds_per_epoch'], '.2f', ' s')}"
               f" vs pytorch {fmt(p and p['seconds_per_epoch'], '.2f', ' s')} ({s}):"
               f" {fmt(ratio, '.3f', 'x')}, target <= {TARGET_CNN_TIME_RATIO}x"
               f" (<= {fmt(need, '.2f', ' s')})")
        ratio = t["peak_rss_bytes"] / p["peak_rss_bytes"] if both else None
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
        ratio = t["images_per_second"] / p["images_per_second"] \
            if t and p else None
        target("mlp_speed_ratio", t and t["images_per_second"],
               p and p["images_per_second"], ratio, TARGET_MLP_SPEED_RATIO,
               True, "x",
               f"mlp images/s        tyto {fmt(t and t['images_per_second'], '.0f')}"
               f" vs pytorch {fmt(p and p['images_per_second'], '.0f')} ({s}):"
               f" {fmt(ratio, '.3f', 'x')}, target >= {TARGET_MLP_SPEED_RATIO}x")

    if floor:
        f = floor
        t = best["cnn"]["tyto"]
        s = best["cnn"]["pytorch_best_setting"]
        p = best["cnn"]["pytorch"][s] if s else None
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
    if errors:
        print()
        for e in errors:
            print(f"error: {e}")

    def summary(r):
        if r is None:
            return None
        return {k: r.get(k) for k in (
            "setting", "test_accuracy", "train_loss", "seconds_per_epoch",
            "images_per_second", "peak_rss_bytes", "train_images",
            "test_images")}

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
                   "model_settings": {m: MODELS[m] for m in models}},
        "accuracy": acc,
        "results": {m: {"tyto": summary(best[m]["tyto"]),
                        "pytorch": {s: summary(r) for s, r in
                                    best[m]["pytorch"].items()},
                        "pytorch_best_setting":
                        best[m]["pytorch_best_setting"]} for m in models},
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
        "cnn" in models else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
