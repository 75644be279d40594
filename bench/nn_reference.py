#!/usr/bin/python3
"""Reference values for the nn tests (tests/nn/*.c), from PyTorch in float64.

Run with Debian's Python (torch 1.13, numpy):

    /usr/bin/python3 bench/nn_reference.py > /tmp/nn_reference.txt

It prints one C block per test file ("/* --- test_layers.c --- */",
test_conv_layers.c, test_pool_layers.c and so on), each a list of `static const double REF_<case>[] = {...};` arrays that
the tests hold verbatim. Every input is made by fill() below, which the
tests compute with the same IEEE operations (nn_fill in tests/nn/nn_test.h),
so the two sides see bit-identical inputs.

Layouts are tyto's: linear weights [in, out]; convolution weights OIHW
(1-d: [O, C/groups, 1, K]); transposed convolution weights [C, O/groups, KH,
KW]; recurrent weights wx [F, G units], wh [units, G units], one bias b [G
units] with PyTorch's gate orders (LSTM i, f, g, o; GRU r, z, n). PyTorch's
recurrent weights are the transposes, with bias_hh = 0.
"""

import math

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def fill(shape, k, scale=1.0):
    """Values in [-1, 1) times scale: ((i+1) 7919 + k 104729) mod 1009,
    divided by 504.5, minus 1 (distinct for up to 1009 elements)."""
    n = math.prod(shape)
    v = [(((i + 1) * 7919 + k * 104729) % 1009) / 504.5 - 1.0 for i in range(n)]
    t = torch.tensor(v, dtype=torch.float64).reshape(shape)
    return t * scale if scale != 1.0 else t


def emit(name, t):
    vals = t.detach().reshape(-1).tolist()
    body = ", ".join("%.13g" % v for v in vals)
    shape = list(t.shape)
    print("/* %s %s */" % (name, shape))
    print("static const double REF_%s[] = {%s};" % (name, body))


def same_pad(n, k, s, d):
    """TensorFlow's SAME rule: (before, after)."""
    out = (n + s - 1) // s
    total = max((out - 1) * s + d * (k - 1) + 1 - n, 0)
    return total // 2, total - total // 2


# ----------------------------------------------------------------------
print("/* --- test_layers.c --- */")

x = fill([3, 4], 1)
w = fill([4, 5], 2, 0.5)
b = fill([5], 3, 0.5)
emit("linear", x @ w + b)
x3 = fill([2, 3, 4], 4)
emit("linear3", x3 @ w + b)

# Batch normalisation: [4, 3, 2, 2] with momentum 0.2, eps 1e-3, and
# [5, 3] with the defaults (0.1, 1e-5).
for name, shape, mom, eps, k in (("bn4", [4, 3, 2, 2], 0.2, 1e-3, 16),
                                 ("bn2", [5, 3], 0.1, 1e-5, 21)):
    x = fill(shape, k, 2.0)
    gamma = fill([3], k + 1, 0.5) + 1.0
    beta = fill([3], k + 2, 0.5)
    rm = fill([3], k + 3, 0.5)
    rv = fill([3], k + 4, 0.5) + 1.0
    emit(name + "_eval", F.batch_norm(x, rm, rv, gamma, beta, False, mom, eps))
    y = F.batch_norm(x, rm, rv, gamma, beta, True, mom, eps)  # updates rm, rv
    emit(name + "_train", y)
    emit(name + "_running_mean", rm)
    emit(name + "_running_var", rv)

table = fill([5, 4], 22)
ids = torch.tensor([[0, 4, 2], [3, 3, 1]])
emit("embedding", F.embedding(ids, table))

x = fill([3, 5], 23, 3.0)
emit("act_relu", F.relu(x))
emit("act_leaky_relu", F.leaky_relu(x, 0.01))
emit("act_leaky_relu_02", F.leaky_relu(x, 0.2))
emit("act_elu", F.elu(x, 1.0))
emit("act_elu_05", F.elu(x, 0.5))
emit("act_tanh", torch.tanh(x))
emit("act_sigmoid", torch.sigmoid(x))
emit("act_softmax", F.softmax(x, dim=-1))
emit("act_gelu", F.gelu(x))

# ----------------------------------------------------------------------
print("/* --- test_conv_layers.c --- */")

# conv2d: (name, filters, kernel, stride, dilation, groups, padding, pad)
CONV = [
    ("conv_valid", 4, (3, 3), (1, 1), (1, 1), 1, "valid", (0, 0)),
    ("conv_same", 3, (3, 3), (1, 1), (1, 1), 1, "same", (0, 0)),
    ("conv_same_k42", 3, (4, 2), (1, 1), (1, 1), 1, "same", (0, 0)),
    ("conv_same_s2", 3, (3, 2), (2, 2), (1, 1), 1, "same", (0, 0)),
    ("conv_stride2", 4, (3, 3), (2, 2), (1, 1), 1, "valid", (0, 0)),
    ("conv_dil2", 3, (3, 2), (1, 1), (2, 2), 1, "valid", (0, 0)),
    ("conv_same_dil2", 2, (3, 3), (1, 1), (2, 2), 1, "same", (0, 0)),
    ("conv_groups2", 4, (3, 3), (1, 1), (1, 1), 2, "explicit", (1, 0)),
]
x = fill([2, 2, 6, 5], 10)
for i, (name, o, k, s, d, g, padding, pad) in enumerate(CONV):
    w = fill([o, 2 // g, k[0], k[1]], 20 + i, 0.5)
    b = fill([o], 40 + i, 0.5)
    if padding == "same":
        hb, ha = same_pad(6, k[0], s[0], d[0])
        wb, wa = same_pad(5, k[1], s[1], d[1])
        xp = F.pad(x, (wb, wa, hb, ha))
        y = F.conv2d(xp, w, b, stride=s, dilation=d, groups=g)
    else:
        y = F.conv2d(x, w, b, stride=s, padding=pad, dilation=d, groups=g)
    emit(name, y)

# conv1d: (name, filters, kernel, stride, dilation, groups, padding)
CONV1 = [
    ("conv1d_same_s2", 3, 3, 2, 1, 1, "same"),
    ("conv1d_dil2_g2", 4, 2, 1, 2, 2, "valid"),
]
x = fill([2, 4, 9], 11)
for i, (name, o, k, s, d, g, padding) in enumerate(CONV1):
    w = fill([o, 4 // g, 1, k], 60 + i, 0.5)
    b = fill([o], 70 + i, 0.5)
    xp = x
    if padding == "same":
        xp = F.pad(x, same_pad(9, k, s, d))
    emit(name, F.conv1d(xp, w[:, :, 0, :], b, stride=s, dilation=d, groups=g))

# conv2d_transpose: (name, filters, kernel, stride, dilation, groups,
# padding, pad, output_pad)
TCONV = [
    ("tconv_s2_op1", 3, (3, 3), (2, 2), (1, 1), 1, "explicit", (1, 1), (1, 1)),
    ("tconv_g2_dil", 4, (3, 2), (2, 1), (1, 2), 2, "valid", (0, 0), (1, 0)),
    ("tconv_same_s2", 2, (3, 3), (2, 2), (1, 1), 1, "same", (0, 0), (0, 0)),
    ("tconv_same_k41", 2, (4, 1), (2, 2), (1, 1), 1, "same", (0, 0), (0, 0)),
]
x = fill([2, 2, 3, 2], 12)
for i, (name, o, k, s, d, g, padding, pad, op) in enumerate(TCONV):
    w = fill([2, o // g, k[0], k[1]], 80 + i, 0.5)
    b = fill([o], 90 + i, 0.5)
    if padding == "same":
        # TensorFlow's conv2d_transpose: the adjoint of the SAME convolution
        # from [H s] to [H]: the full transposed convolution, cropped.
        full = F.conv_transpose2d(x, w, None, stride=s, dilation=d, groups=g)
        oh, ow = 3 * s[0], 2 * s[1]
        hb, _ = same_pad(oh, k[0], s[0], d[0])
        wb, _ = same_pad(ow, k[1], s[1], d[1])
        full = F.pad(full, (0, max(0, wb + ow - full.shape[3]),
                            0, max(0, hb + oh - full.shape[2])))
        y = full[:, :, hb:hb + oh, wb:wb + ow] + b.reshape(1, o, 1, 1)
    else:
        y = F.conv_transpose2d(x, w, b, stride=s, padding=pad,
                               output_padding=op, groups=g, dilation=d)
    emit(name, y)


# ----------------------------------------------------------------------
print("/* --- test_pool_layers.c --- */")


def pool(x, k, s, padding, pad, is_max):
    """2-d pooling over [N, C, H, W]; the mean excludes padding."""
    h, w = x.shape[2], x.shape[3]
    s = tuple(s[i] or k[i] for i in range(2))
    if padding == "same":
        hb, ha = same_pad(h, k[0], s[0], 1)
        wb, wa = same_pad(w, k[1], s[1], 1)
    elif padding == "explicit":
        hb = ha = pad[0]
        wb = wa = pad[1]
    else:
        hb = ha = wb = wa = 0
    if is_max:
        xp = F.pad(x, (wb, wa, hb, ha), value=-math.inf)
        return F.max_pool2d(xp, k, s)
    xp = F.pad(x, (wb, wa, hb, ha))
    ones = F.pad(torch.ones_like(x), (wb, wa, hb, ha))
    return F.avg_pool2d(xp, k, s) / F.avg_pool2d(ones, k, s)


# pools: (name, kernel, stride, padding, pad)
POOL = [
    ("k3s2_valid", (3, 3), (2, 2), "valid", (0, 0)),
    ("k3s2_same", (3, 3), (2, 2), "same", (0, 0)),
    ("k2s1_same", (2, 2), (1, 1), "same", (0, 0)),
    ("k32_default", (3, 2), (0, 0), "valid", (0, 0)),
    ("k3s1_pad1", (3, 3), (1, 1), "explicit", (1, 1)),
    ("k43s32_same", (4, 3), (3, 2), "same", (0, 0)),
]
x = fill([2, 2, 7, 6], 13)
for name, k, s, padding, pad in POOL:
    emit("maxpool_" + name, pool(x, k, s, padding, pad, True))
    emit("avgpool_" + name, pool(x, k, s, padding, pad, False))
# Cross-checks of the helper against PyTorch's own pools.
assert torch.allclose(pool(x, (3, 3), (1, 1), "explicit", (1, 1), False),
                      F.avg_pool2d(x, 3, 1, 1, count_include_pad=False))
assert torch.allclose(pool(x, (3, 3), (1, 1), "explicit", (1, 1), True),
                      F.max_pool2d(x, 3, 1, 1))

POOL1 = [
    ("k3s2_same", 3, 2, "same", 0),
    ("k2_valid", 2, 0, "valid", 0),
    ("k4s1_pad2", 4, 1, "explicit", 2),
]
x = fill([2, 2, 9], 14)
for name, k, s, padding, pad in POOL1:
    x4 = x.reshape(2, 2, 1, 9)
    for kind, is_max in (("max", True), ("avg", False)):
        y = pool(x4, (1, k), (1, s), padding, (0, pad), is_max)
        emit(kind + "pool1d_" + name, y.reshape(2, 2, -1))

x = fill([2, 3, 4, 5], 15)
emit("global_max", x.amax(dim=(2, 3)))
emit("global_avg", x.mean(dim=(2, 3)))

# ----------------------------------------------------------------------
print("/* --- test_recurrent.c --- */")

x = fill([2, 4, 3], 30)
UNITS = 5
for name, cls, gates, k in (("rnn", torch.nn.RNN, 1, 31),
                            ("lstm", torch.nn.LSTM, 4, 34),
                            ("gru", torch.nn.GRU, 3, 37)):
    wx = fill([3, gates * UNITS], k, 0.5)
    wh = fill([UNITS, gates * UNITS], k + 1, 0.5)
    b = fill([gates * UNITS], k + 2, 0.5)
    m = cls(3, UNITS, batch_first=True)
    with torch.no_grad():
        m.weight_ih_l0.copy_(wx.t())
        m.weight_hh_l0.copy_(wh.t())
        m.bias_ih_l0.copy_(b)
        m.bias_hh_l0.zero_()
    y, _ = m(x)
    emit(name + "_seq", y)
    emit(name + "_last", y[:, -1, :])

# ----------------------------------------------------------------------
print("/* --- test_losses.c --- */")

logits = fill([4, 5], 50, 2.0)
target = torch.tensor([1, 0, 4, 2])
emit("hinge", torch.nn.MultiMarginLoss()(logits, target).reshape(1))
logits = fill([3, 4], 51, 0.25)
target = torch.tensor([3, 3, 0])
emit("hinge_small", torch.nn.MultiMarginLoss()(logits, target).reshape(1))
