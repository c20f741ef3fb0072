#!/usr/bin/env python3
"""An independent safetensors reader and writer, with torch decoding and encoding the element values.

The `safetensors` Python package is not installable here, so this follows the rules of the reference (Rust)
implementation, huggingface/safetensors, by hand:
  read:  the header starts with '{' and has no repeated keys; the tensors are packed back to back and cover the
         data section exactly; each size equals numel x element size.
  write: "__metadata__" first, tensors ordered by element size (largest first) then name, compact JSON, header
         padded with spaces to a multiple of 8.

usage: reference_safetensors.py read PATH    prints {"metadata": ..., "tensors": {name: {dtype, shape, values}}}
       reference_safetensors.py write PATH   writes a sample file and prints the same description of it
Exit status 77 when torch is missing (the caller skips).
"""
import json
import math
import struct
import sys

try:
    import torch
except ImportError:
    sys.exit(77)

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"repeated key in {keys}")
    return dict(pairs)


def describe(tensor):
    flat = tensor.flatten()
    values = flat.double().tolist() if tensor.is_floating_point() else flat.long().tolist()
    return {"dtype": NAMES[tensor.dtype], "shape": list(tensor.shape), "values": values}


def read(path):
    buf = open(path, "rb").read()
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise ValueError("header length past end of file")
    text = buf[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        raise ValueError("header does not start with '{'")
    header = json.loads(text, object_pairs_hook=no_duplicates)
    metadata = header.pop("__metadata__", None)
    data = buf[8 + n:]
    tensors = {}
    position = 0
    for name, info in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        dtype = DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        if begin != position:
            raise ValueError(f"{name}: begins at {begin}, expected {position} (gap or overlap)")
        numel = math.prod(info["shape"])
        if end - begin != numel * torch.empty((), dtype=dtype).element_size():
            raise ValueError(f"{name}: {end - begin} bytes for shape {info['shape']}")
        raw = bytearray(data[begin:end])
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = describe(flat.reshape(info["shape"]))
        position = end
    if position != len(data):
        raise ValueError(f"data section has {len(data)} bytes, tensors cover {position}")
    return {"metadata": metadata, "tensors": tensors}


def write(path):
    g = torch.Generator().manual_seed(1234)
    tensors = {
        "model.embed": torch.randn(3, 4, generator=g).to(torch.bfloat16),
        "model.norm": torch.randn(5, generator=g),
        "model.half": (torch.randn(2, 3, generator=g) * 100).to(torch.float16),
        "model.ids": torch.arange(-3, 3, dtype=torch.int64).reshape(2, 3),
        "model.empty": torch.zeros(0, 4),
        "model.mask": torch.tensor([True, False, True]),
    }
    order = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header = {"__metadata__": {"format": "pt"}}
    chunks = []
    offset = 0
    for name in order:
        t = tensors[name].contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    return {"metadata": header["__metadata__"], "tensors": {k: describe(v) for k, v in tensors.items()}}


if __name__ == "__main__":
    mode, target = sys.argv[1], sys.argv[2]
    print(json.dumps(read(target) if mode == "read" else write(target)))
