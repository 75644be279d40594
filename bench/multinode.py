#!/usr/bin/python3
"""bench/multinode: data-parallel training over MPI ranks on one machine.

Runs tyto-train (the seed CNN on Fashion-MNIST, or --model mlp) under
mpirun with 1 rank and with 2 ranks, each rank pinned to a core of its
own and given one thread (the CPU plugin's pool through a one-core
HWLOC_SYNTHETIC topology, OpenBLAS and OpenMP through their variables),
and prints a table: images/s, step time, the time each rank spent waiting
for the others' gradients per step, the bytes each rank sent per step,
and the scaling efficiency (images/s over N x the 1-rank images/s, with
the same batch per rank: weak scaling; a second 2-rank row keeps the
global batch instead: strong scaling).  Then the ring all-reduce model of
docs/distributed.md fed with the measured 1-rank step time and the bytes
sent, for 2 to 64 nodes at 10, 25 and 100 Gb/s, and one machine-readable
line "BENCH {json}".  A benchmark, not a test: timings never fail it.

  python3 bench/multinode.py --tyto PREFIX/bin/tyto-train [--steps N]
      [--model cnn|mlp] [--batch B] [--data DIR] [--plugin-path DIR]
      [--mpirun mpirun] [--latency-us 5]

--plugin-path sets TYTO_PLUGIN_PATH (for a build tree:
build/plugins/cpu/.libs).  The first 5 steps of every run are not timed:
their rate comes from the difference between an N-step and a 5-step run.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def run(args, ranks, batch, steps, exact=False):
    """One tyto-train run under mpirun: its JSON report (rank 0's)."""
    env = dict(os.environ)
    env.update({
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    })
    if args.plugin_path:
        env["TYTO_PLUGIN_PATH"] = args.plugin_path
    cmd = [args.mpirun, "-np", str(ranks), "--bind-to", "core",
           "--map-by", "core"]
    # For the ranks only: mpirun binds them through the real topology.
    cmd += ["-x", "HWLOC_SYNTHETIC=pack:1 core:1 pu:1"]
    for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "TYTO_PLUGIN_PATH"):
        if v in env:
            cmd += ["-x", v]
    cmd += [args.tyto, "--model", args.model, "--devices", "cpu:0",
            "--batch", str(batch), "--max-steps", str(steps), "--json",
            "--no-progress", "--test-limit", "64"]
    if exact:
        cmd.append("--exact-exchange")
    if args.data:
        cmd += ["--data", args.data]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("multinode: %s exited %d:\n%s" %
                 (" ".join(cmd), p.returncode, p.stderr[-3000:]))
    return json.loads(p.stdout)


def measure(args, ranks, batch, exact=False):
    """Per-step figures over steps 6..N (the N-step run less a 5-step run)."""
    warm = 5
    a = run(args, ranks, batch, warm, exact)
    b = run(args, ranks, batch, args.steps, exact)
    n = b["steps"] - a["steps"]
    step = (b["train_seconds"] - a["train_seconds"]) / n
    comm = (b["network_seconds"] - a["network_seconds"]) / n
    return {
        "ranks": ranks,
        "batch": batch,
        "rank_batch": b["rank_batch"],
        "images_per_second": batch / step,
        "step_ms": 1e3 * step,
        "comm_ms": 1e3 * comm,
        "bytes_per_step": b["network_bytes_per_step"],
        "test_accuracy": b["test_accuracy"],
        "exchange": "f64" if exact else "model dtype",
    }


def ring_model(t_compute, grad_bytes, nodes, gbps, latency):
    """Seconds per step: compute, then a ring all-reduce of grad_bytes
    (2 (N - 1) / N x bytes over the link, 2 (N - 1) latencies), with
    and without overlap."""
    link = gbps * 1e9 / 8
    t_ar = 2 * (nodes - 1) / nodes * grad_bytes / link + 2 * (nodes - 1) * latency
    no_overlap = t_compute / (t_compute + t_ar)
    overlap = t_compute / max(t_compute, t_ar)
    return t_ar, no_overlap, overlap


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tyto", default=shutil.which("tyto-train") or "tyto-train")
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--model", default="cnn", choices=["cnn", "mlp"])
    ap.add_argument("--batch", type=int, default=64,
                    help="examples per rank per step (default 64)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--data", default=None)
    ap.add_argument("--plugin-path", default=None)
    ap.add_argument("--latency-us", type=float, default=5.0,
                    help="per-message latency in the model (default 5 us)")
    args = ap.parse_args()
    if os.cpu_count() is not None and os.cpu_count() < 2:
        print("multinode: fewer than 2 cores: the ranks would share one")

    rows = [measure(args, 1, args.batch),
            measure(args, 2, 2 * args.batch),
            measure(args, 2, args.batch),
            measure(args, 2, 2 * args.batch, exact=True)]
    base = rows[0]["images_per_second"]
    print("tyto-train --model %s, one core and one thread per rank, "
          "steps 6..%d timed" % (args.model, args.steps))
    print("%-7s %6s %6s %-8s %10s %9s %11s %14s %10s" %
          ("ranks", "batch", "/rank", "exchange", "images/s", "step ms",
           "comm ms/st", "bytes/step", "efficiency"))
    for r in rows:
        eff = r["images_per_second"] / (r["ranks"] * base)
        r["efficiency"] = eff
        print("%-7d %6d %6d %-8s %10.0f %9.2f %11.2f %14.0f %9.0f%%" %
              (r["ranks"], r["batch"], r["rank_batch"],
               "f64" if r["exchange"] == "f64" else "f32",
               r["images_per_second"], r["step_ms"], r["comm_ms"],
               r["bytes_per_step"], 100 * eff))
    print("(efficiency: images/s over ranks x the 1-rank images/s; rows 2 "
          "and 4 keep %d per rank (weak scaling), row 3 the global batch "
          "(strong); row 4 adds the ranks' gradients in double, "
          "--exact-exchange)" % args.batch)

    # The model: the 1-rank step time, and the gradient bytes as sent in
    # f32 (the default) and in double (--exact-exchange).
    t_c = rows[0]["step_ms"] / 1e3
    sent = rows[3]["bytes_per_step"]
    latency = args.latency_us * 1e-6
    print()
    print("ring all-reduce model: t_step = %.1f ms compute + 2(N-1)/N x "
          "bytes / link + 2(N-1) x %.0f us" % (1e3 * t_c, args.latency_us))
    model = {}
    for label, g in (("f32 gradients (the default)", sent / 2),
                     ("f64 partial sums (--exact-exchange)", sent)):
        print("%s: %.1f MB per step; efficiency without overlap / with "
              "full overlap" % (label, g / 1e6))
        print("%-6s %19s %19s %19s" % ("nodes", "10 Gb/s", "25 Gb/s",
                                       "100 Gb/s"))
        for n in (2, 4, 8, 16, 32, 64):
            cells = []
            for gbps in (10, 25, 100):
                _, a, b = ring_model(t_c, g, n, gbps, latency)
                cells.append("%7.0f%% / %5.0f%%" % (100 * a, 100 * b))
                model["%s,%d,%d" % ("f64" if "f64" in label else "f32", n,
                                    gbps)] = round(a, 4)
            print("%-6d %19s %19s %19s" % (n, *cells))
    bench = {
        "bench": "multinode",
        "model": args.model,
        "rows": rows,
        "weak_scaling_efficiency_2": rows[1]["efficiency"],
        "strong_scaling_efficiency_2": rows[2]["efficiency"],
        "weak_scaling_efficiency_2_exact": rows[3]["efficiency"],
        "ring_model_no_overlap": model,
    }
    print("BENCH " + json.dumps(bench, separators=(",", ":")))


if __name__ == "__main__":
    main()
