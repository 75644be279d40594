#!/usr/bin/env python3
"""PyTorch-derived constants for tests/optim (test_optim.c, test_schedule.c).

The problem of optim_test.h: parameters w [3] and u [2], seen here as one
vector p of 5 (float64), with the hand-written gradient
    g = A (p - C) + x(run),   x(run)[i] = 0.1 ((7 run + 3 i) mod 5 - 2)
set as .grad before each optimiser step (no autograd involved). Prints the
parameters after three updates for each case, and the learning rates of
PyTorch's schedulers at updates 1..N, as C initialisers.

Run with Debian's torch 1.13: /usr/bin/python3 tests/optim/torch_reference.py
"""
import torch

torch.set_default_dtype(torch.float64)

P0 = [0.5, -1.0, 2.0, 1.5, -0.25]
A = torch.tensor([1.0, 2.0, 0.5, 3.0, 1.5])
C = torch.tensor([0.2, 0.3, -0.4, 1.0, 0.0])
SIZES = [3, 2]


def x(run):
    return torch.tensor([0.1 * (((7 * run + 3 * i) % 5) - 2) for i in range(5)])


def fmt(vals):
    return "{" + ", ".join("%.17g" % v for v in vals) + "}"


def optimise(make, runs=3, clip_value=0.0, clip_norm=0.0):
    w = torch.tensor(P0[:3], requires_grad=True)
    u = torch.tensor(P0[3:], requires_grad=True)
    opt = make([w, u])
    for r in range(runs):
        p = torch.cat([w.detach(), u.detach()])
        g = A * (p - C) + x(r)
        w.grad, u.grad = g[:3].clone(), g[3:].clone()
        if clip_value > 0:
            torch.nn.utils.clip_grad_value_([w, u], clip_value)
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_([w, u], clip_norm)
        opt.step()
    return torch.cat([w.detach(), u.detach()]).tolist()


O = torch.optim
CASES = [
    ("sgd", lambda ps: O.SGD(ps, lr=0.1), {}),
    ("sgd_momentum", lambda ps: O.SGD(ps, lr=0.1, momentum=0.9), {}),
    ("sgd_nesterov_wd",
     lambda ps: O.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                      weight_decay=0.01), {}),
    ("adagrad_wd", lambda ps: O.Adagrad(ps, lr=0.1, weight_decay=0.01), {}),
    ("rmsprop_wd",
     lambda ps: O.RMSprop(ps, lr=0.01, alpha=0.9, weight_decay=0.01), {}),
    ("adam_wd", lambda ps: O.Adam(ps, lr=0.01, weight_decay=0.01), {}),
    ("adamw", lambda ps: O.AdamW(ps, lr=0.01, weight_decay=0.1), {}),
    ("adam_clip", lambda ps: O.Adam(ps, lr=0.01),
     {"clip_value": 0.5, "clip_norm": 1.0}),
]

for name, make, kw in CASES:
    print("/* %s */ %s," % (name, fmt(optimise(make, **kw))))


def lrs(make_sched, n, lr=0.1):
    w = torch.zeros(1, requires_grad=True)
    opt = O.SGD([w], lr=lr)
    sched = make_sched(opt)
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])  # the lr update k uses
        opt.step()
        sched.step()
    return out


S = torch.optim.lr_scheduler
print("/* StepLR(step_size=2, gamma=0.5) */ %s," %
      fmt(lrs(lambda o: S.StepLR(o, step_size=2, gamma=0.5), 6)))
print("/* ExponentialLR(gamma=0.9) */ %s," %
      fmt(lrs(lambda o: S.ExponentialLR(o, gamma=0.9), 6)))
print("/* CosineAnnealingLR(T_max=4, eta_min=0.01) */ %s," %
      fmt(lrs(lambda o: S.CosineAnnealingLR(o, T_max=4, eta_min=0.01), 5)))
