#!/usr/bin/python3
"""f16 and bf16 in safetensors, PyTorch's side (tests/torch/test_st16.sh).

  st16.py write FILE   16-bit tensors made by PyTorch, with their values
                       as float64 ("<name>.f64", exact), and the bytes as
                       PyTorch lays them out (tensor.view(int16), native
                       little-endian), in a safetensors file
  st16.py check FILE   reads a file tyto wrote back and checks that every
                       16-bit tensor has PyTorch's dtype name and, read
                       with torch.frombuffer, the bits PyTorch made

safetensors itself (the format: an 8-byte little-endian header length, a
JSON header of {name: {dtype, shape, data_offsets}}, the data) is written
and read here by hand: Debian ships torch without the safetensors package.
"""
import json
import struct
import sys

import torch


def tensors():
    g = torch.Generator().manual_seed(5)
    out = {}
    for name, dt in (("bf", torch.bfloat16), ("h", torch.float16)):
        r = (torch.randn(3, 5, generator=g, dtype=torch.float64) * 100).to(dt)
        info = torch.finfo(dt)
        special = torch.tensor(
            [0.0, -0.0, float("inf"), float("-inf"), float("nan"), info.max,
             -info.max, info.tiny, info.tiny * 2 ** -3, 1.0 / 3.0], dtype=dt)
        out[name + ".random"] = r
        out[name + ".special"] = special
    return out


def write(path):
    ts = tensors()
    items = []
    for k, t in ts.items():
        items.append((k, t))
        items.append((k + ".f64", t.to(torch.float64)))
    header, blobs, off = {}, [], 0
    names = {torch.bfloat16: "BF16", torch.float16: "F16",
             torch.float64: "F64"}
    for k, t in items:
        if t.dtype in (torch.bfloat16, torch.float16):
            raw = t.contiguous().view(torch.int16).numpy().tobytes()
        else:
            raw = t.contiguous().numpy().tobytes()
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def check(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    want = tensors()
    dts = {"BF16": torch.bfloat16, "F16": torch.float16}
    bad = 0
    for k, t in want.items():
        e = header.get(k)
        wname = "BF16" if t.dtype == torch.bfloat16 else "F16"
        if e is None or e["dtype"] != wname or e["shape"] != list(t.shape):
            print("%s: %s, want %s%s" % (k, e, wname, list(t.shape)))
            bad += 1
            continue
        a, b = e["data_offsets"]
        got = torch.frombuffer(bytearray(body[a:b]), dtype=dts[e["dtype"]])
        if not torch.equal(got.view(torch.int16),
                           t.reshape(-1).view(torch.int16)):
            print("%s: the bits differ: %s vs %s" % (k, got, t))
            bad += 1
        else:
            print("%s: %s%s, PyTorch's bits" % (k, wname, list(t.shape)))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit("usage: st16.py write|check FILE")
    if sys.argv[1] == "write":
        write(sys.argv[2])
        sys.exit(0)
    sys.exit(check(sys.argv[2]))
