"""Minimal safetensors reader/writer (F32, F16, BF16), written from the format description.

No `safetensors` Python package exists on this machine, so this is the project's own. The format:
  bytes [0, 8)        little-endian u64 N = length of the JSON header
  bytes [8, 8+N)      JSON: {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}
                      padded with spaces so that 8+N is a multiple of 8 (keeps the data section aligned)
  bytes [8+N, ...)    data section; offsets are relative to its start, tensors are row-major little-endian.

BF16 is the upper 16 bits of an f32 with round-to-nearest-even (torch's conversion does exactly that;
check_reference.py verifies it on hand-picked bit patterns).
"""
import json
import os
import struct

import numpy as np
import torch

# dtype name -> bytes per element
DTYPE_SIZES = {"F32": 4, "F16": 2, "BF16": 2}


def f32_to_bf16_bits(t):
    """float tensor -> int16 tensor holding the bf16 bit patterns (round-to-nearest-even)."""
    return t.to(torch.float32).to(torch.bfloat16).view(torch.int16)


def bf16_bits_to_f32(bits):
    """uint16 numpy array of bf16 bit patterns -> float32 numpy array (exact widening)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def round_to_dtype(t, dtype):
    """Value that a tensor takes after being stored as `dtype` (as f32 torch tensor)."""
    t = t.to(torch.float32)
    if dtype == "F32":
        return t.clone()
    if dtype == "BF16":
        return t.to(torch.bfloat16).to(torch.float32)
    if dtype == "F16":
        return t.to(torch.float16).to(torch.float32)
    raise ValueError(f"unsupported dtype {dtype!r}; expected one of {sorted(DTYPE_SIZES)}")


def _encode(t, dtype):
    """torch tensor -> raw little-endian bytes in `dtype`."""
    t = t.detach().to(torch.float32).contiguous()
    if dtype == "F32":
        return t.numpy().astype("<f4").tobytes()
    if dtype == "F16":
        return t.numpy().astype("<f2").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(t).numpy().astype("<i2").tobytes()
    raise ValueError(f"unsupported dtype {dtype!r}; expected one of {sorted(DTYPE_SIZES)}")


def write_safetensors(path, tensors, metadata=None):
    """Write {name: (tensor, dtype)} to `path`. Tensors are laid out in sorted name order."""
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        t, dtype = tensors[name]
        raw = _encode(t, dtype)
        assert len(raw) == t.numel() * DTYPE_SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def read_header(path):
    """Parse the JSON header; returns (header dict without __metadata__, metadata, data section start)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    return header, metadata, 8 + n


def read_safetensors(path):
    """Read a file into {name: float32 torch tensor} (F16/BF16 widened exactly) and {name: dtype}."""
    header, _, data_start = read_header(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        blob = f.read()
    tensors, dtypes = {}, {}
    for name, info in header.items():
        dtype, shape = info["dtype"], info["shape"]
        begin, end = info["data_offsets"]
        count = int(np.prod(shape)) if shape else 1
        if dtype not in DTYPE_SIZES:
            raise ValueError(f"{path}: tensor {name} has dtype {dtype}; expected one of {sorted(DTYPE_SIZES)}")
        if end - begin != count * DTYPE_SIZES[dtype] or data_start + end > size:
            raise ValueError(f"{path}: tensor {name} offsets [{begin}, {end}) do not fit shape {shape} {dtype}")
        raw = blob[data_start + begin:data_start + end]
        if dtype == "F32":
            arr = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif dtype == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        else:
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
        tensors[name] = torch.from_numpy(arr.reshape(shape).copy())
        dtypes[name] = dtype
    return tensors, dtypes


def read_checkpoint(folder):
    """Read model.safetensors, or the shards named by model.safetensors.index.json, into one dict."""
    index_path = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        tensors, dtypes = {}, {}
        for shard in sorted(set(weight_map.values())):
            t, d = read_safetensors(os.path.join(folder, shard))
            for name in t:
                if weight_map.get(name) != shard:
                    raise ValueError(f"{shard}: tensor {name} is not mapped to this shard by the index")
            tensors.update(t)
            dtypes.update(d)
        missing = set(weight_map) - set(tensors)
        if missing:
            raise ValueError(f"index names tensors missing from the shards: {sorted(missing)}")
        return tensors, dtypes
    return read_safetensors(os.path.join(folder, "model.safetensors"))
