#!/usr/bin/python3
"""Writes the GGUF quantization fixtures under tests/data/quant/ that tests/kernels/quant_ref_test.cc compares
src/kernels/quant*.cc against, byte for byte and bit for bit.

References, both from llama.cpp (scripts/fetch-llama-cpp-ref.sh puts it into .cache/llama.cpp):
  - gguf-py (numpy): quantize for Q8_0 and Q4_0, dequantize for all four formats;
  - ggml's own C reference (ggml/src/ggml-quants.c, compiled here into a temporary shared library and called with
    ctypes): quantize_row_q4_K_ref and quantize_row_q6_K_ref, which gguf-py lacks. Every other result is computed
    by both and must agree, so the two references check each other.

Usage (Debian's python with numpy; a few seconds; byte-identical on rerun):
    /usr/bin/python3 tools/py/make_quant_fixtures.py [--llama-cpp .cache/llama.cpp] [--out tests/data/quant]

File format (little-endian), one file per format and kind, <type>_<kind>.bin:
    magic "TSQF", u32 version = 1, u32 ggml type id, u32 kind (1 = quantize, 2 = dequantize), u32 n_rows,
    then per row: char name[32] (NUL-padded), u32 n_values,
                  kind 1 only: f32 input[n_values],
                  u8 blocks[row_bytes], f32 dequantized[n_values].
Kind 1: blocks = quantize(input), dequantized = dequantize(blocks). Kind 2: crafted raw blocks (random bytes,
subnormal / negative-zero / extreme f16 scales), dequantized = dequantize(blocks).
many_blocks.txt: digests of 3 x 1024 super-blocks per format whose inputs the test regenerates (MANY_SETS).
"""
import argparse
import ctypes
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

MAGIC = b"TSQF"
VERSION = 1
KIND_QUANTIZE, KIND_DEQUANTIZE = 1, 2
NAME_BYTES = 32
QK_K = 256
# name: (ggml type id, values per block, bytes per block)
FORMATS = {"q8_0": (8, 32, 34), "q4_0": (2, 32, 18), "q4_k": (12, 256, 144), "q6_k": (14, 256, 210)}
C_NAMES = {"q8_0": "q8_0", "q4_0": "q4_0", "q4_k": "q4_K", "q6_k": "q6_K"}

# Definitions of the four ggml symbols ggml-quants.c calls outside itself (only on paths these fixtures never take).
C_STUBS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "ggml.h"
void ggml_abort(const char * file, int line, const char * fmt, ...) { fprintf(stderr, "ggml_abort %s:%d %s\n", file, line, fmt); abort(); }
size_t ggml_row_size(enum ggml_type type, int64_t ne) { abort(); }
size_t ggml_type_size(enum ggml_type type) { abort(); }
const char * ggml_type_name(enum ggml_type type) { abort(); }
"""


def build_ggml_reference(llama_cpp, workdir):
    """Compiles ggml-quants.c as llama.cpp's release build does (NDEBUG; no -march, so no FMA contraction)."""
    ggml = os.path.join(llama_cpp, "ggml")
    stubs = os.path.join(workdir, "stubs.c")
    with open(stubs, "w") as f:
        f.write(C_STUBS)
    lib = os.path.join(workdir, "libggmlquants.so")
    cmd = ["gcc", "-std=gnu11", "-O2", "-DNDEBUG", "-ffp-contract=off", "-fPIC", "-shared", "-w",
           "-I" + os.path.join(ggml, "include"), "-I" + os.path.join(ggml, "src"),
           "-I" + os.path.join(ggml, "src", "ggml-cpu"),
           os.path.join(ggml, "src", "ggml-quants.c"), stubs, "-o", lib, "-lm"]
    subprocess.run(cmd, check=True)
    return ctypes.CDLL(lib)


class References:
    def __init__(self, llama_cpp, workdir):
        sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
        import gguf.quants
        from gguf.constants import GGMLQuantizationType
        self.gguf = gguf.quants
        self.gguf_types = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0,
                           "q4_k": GGMLQuantizationType.Q4_K, "q6_k": GGMLQuantizationType.Q6_K}
        self.c = build_ggml_reference(llama_cpp, workdir)
        for name in C_NAMES.values():
            for fn in ("quantize_row_%s_ref" % name, "dequantize_row_%s" % name):
                getattr(self.c, fn).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
                getattr(self.c, fn).restype = None

    def c_quantize(self, fmt, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        _, values, nbytes = FORMATS[fmt]
        out = np.zeros(x.size // values * nbytes, dtype=np.uint8)
        getattr(self.c, "quantize_row_%s_ref" % C_NAMES[fmt])(x.ctypes.data, out.ctypes.data, x.size)
        return out

    def c_dequantize(self, fmt, blocks):
        _, values, nbytes = FORMATS[fmt]
        blocks = np.ascontiguousarray(blocks, dtype=np.uint8)
        out = np.zeros(blocks.size // nbytes * values, dtype=np.float32)
        getattr(self.c, "dequantize_row_%s" % C_NAMES[fmt])(blocks.ctypes.data, out.ctypes.data, out.size)
        return out

    def quantize(self, fmt, x):
        """gguf-py where it can (checked against ggml's C), else ggml's C."""
        expected = self.c_quantize(fmt, x)
        if fmt in ("q8_0", "q4_0"):
            ours = self.gguf.quantize(x.reshape(1, -1), self.gguf_types[fmt]).reshape(-1)
            if not np.array_equal(ours, expected):
                sys.exit("gguf-py and ggml-quants.c disagree on quantizing %s" % fmt)
        return expected

    def dequantize(self, fmt, blocks):
        """gguf-py, checked bit for bit against ggml's C."""
        y = self.gguf.dequantize(blocks.reshape(1, -1), self.gguf_types[fmt]).reshape(-1).astype(np.float32)
        if not np.array_equal(y.view(np.uint32), self.c_dequantize(fmt, blocks).view(np.uint32)):
            sys.exit("gguf-py and ggml-quants.c disagree on dequantizing %s" % fmt)
        return y


# ----------------------------------------------------------------------------------------------------------------
# Inputs

def quantize_inputs(block_values, rng):
    """(name, f32 row) cases; rows are whole blocks. block_values: 32 or 256 (edge patterns are per block)."""
    n = 2 * QK_K  # two super-blocks, or 16 small blocks
    f32 = np.float32
    cases = []
    for sigma, count in ((1e-3, QK_K), (0.02, n), (1.0, n), (30.0, QK_K)):
        cases.append(("gauss_%g" % sigma, rng.normal(0, sigma, count)))
    cases.append(("zeros", np.zeros(QK_K)))
    cases.append(("gauss_1e4", rng.normal(0, 1e4, QK_K)))
    extreme = rng.uniform(-6e4, 6e4, QK_K)
    extreme[::37] = 65504.0  # the largest f16
    extreme[5::41] = -6e4
    cases.append(("extreme_6e4", extreme))
    cases.append(("gauss_1e-6", rng.normal(0, 1e-6, QK_K)))  # f16 scales underflow to subnormals or zero
    cases.append(("gauss_1e-4", rng.normal(0, 1e-4, QK_K)))
    single = np.zeros(QK_K)
    for b in range(0, QK_K, block_values):
        single[b + rng.integers(block_values)] = rng.choice([-1, 1]) * rng.uniform(0.1, 10)
    cases.append(("single_nonzero_per_block", single))
    lone = np.zeros(QK_K)
    lone[77] = -3.25  # one value in a 256-value row: every other (sub-)block is zero
    cases.append(("single_nonzero_in_row", lone))
    cases.append(("negative_dominated", -3 * np.abs(rng.normal(0, 1, QK_K)) + 0.1 * rng.normal(0, 1, QK_K)))
    cases.append(("all_negative", -rng.uniform(1, 2, QK_K)))
    cases.append(("positive_offset", 5 + 0.1 * rng.normal(0, 1, QK_K)))  # min > 0: K-quants clamp min to 0
    cases.append(("constant_pos", np.full(QK_K, 0.75)))
    cases.append(("constant_neg", np.full(QK_K, -1.25)))
    # Sub-block magnitudes spread over 6 decades: small sub-blocks get 6-bit / int8 scale 0 in K-quants.
    mixed = rng.normal(0, 1, QK_K) * np.repeat(10.0 ** rng.uniform(-4, 2, QK_K // 16), 16)
    cases.append(("mixed_subblock_scales", mixed))
    half = rng.normal(0, 1, QK_K)
    half[: QK_K // 2] = 0
    cases.append(("half_zero", half))
    # Exact ties: amax 127 makes Q8_0's d = 1, so x.5 values test round-half-away-from-zero.
    ties = (np.arange(QK_K) % 64 - 32 + 0.5)
    ties[::32] = 127
    cases.append(("half_integer_ties", ties))
    # Per block, the largest magnitude twice with both signs (the first one seen sets the sign of the scale): the
    # other lands on Q4_0's level 16, which clamps to 15.
    opposite = rng.normal(0, 1, QK_K)
    for b in range(0, QK_K, 32):
        opposite[b + 3], opposite[b + 20] = 4.5, -4.5
    cases.append(("opposite_extremes", opposite))
    outliers = rng.normal(0, 1, QK_K)
    outliers[rng.integers(0, QK_K, 6)] *= 100
    cases.append(("outliers", outliers))
    return [(name, np.asarray(x, dtype=f32)) for name, x in cases]


# f16 scale bit patterns for crafted blocks: zero, negative zero, subnormals, the smallest normal, one, the largest
# finite, negatives. Exponent 31 (inf / NaN) is left out.
SPECIAL_F16 = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x3C00, 0x7BFF, 0xFBFF, 0x2E66, 0xB555]


def random_f16(rng, count):
    bits = rng.integers(0, 1 << 16, count, dtype=np.uint32)
    finite = ((bits >> 10) & 0x1F) != 0x1F
    return bits[finite][:count].astype(np.uint16) if finite.sum() >= count else random_f16(rng, count)


def dequantize_inputs(fmt, rng):
    """(name, raw blocks) cases: random bytes everywhere, the f16 scales from SPECIAL_F16 then random."""
    _, values, nbytes = FORMATS[fmt]
    n_blocks = 16 if values == QK_K else 32
    blocks = rng.integers(0, 256, (n_blocks, nbytes), dtype=np.uint32).astype(np.uint8)
    n_special = min(n_blocks, len(SPECIAL_F16))
    d = np.concatenate([np.array(SPECIAL_F16[:n_special], dtype=np.uint16), random_f16(rng, n_blocks - n_special)])
    dmin = np.concatenate([np.array(SPECIAL_F16[::-1][:n_special], dtype=np.uint16),
                           random_f16(rng, n_blocks - n_special)])
    as_bytes = lambda h: h.astype("<u2").view(np.uint8).reshape(-1, 2)
    if fmt == "q6_k":
        blocks[:, 208:210] = as_bytes(d)  # ql[128], qh[64], scales[16], d
    else:
        blocks[:, 0:2] = as_bytes(d)
        if fmt == "q4_k":
            blocks[:, 2:4] = as_bytes(dmin)
    cases = [("random_bytes_special_scales", blocks.reshape(-1))]
    # Extreme quantized values with the largest scales: every level at its minimum, then at its maximum.
    for fill, label in ((0x00, "levels_min"), (0xFF, "levels_max")):
        b = np.full((2, nbytes), fill, dtype=np.uint8)
        if fmt == "q6_k":
            b[:, 208:210] = as_bytes(np.array([0x7BFF, 0xFBFF], dtype=np.uint16))
        else:
            b[:, 0:2] = as_bytes(np.array([0x7BFF, 0xFBFF], dtype=np.uint16))
            if fmt == "q4_k":
                b[:, 2:4] = as_bytes(np.array([0x7BFF, 0x0001], dtype=np.uint16))
        cases.append((label, b.reshape(-1)))
    return cases


# Many-block sets: too large to store, so the fixture holds their digests and the test regenerates the inputs with
# this portable generator (quant_ref_test.cc has the same one). Each value is exact in f32: three 21-bit fields of a
# splitmix64 output, summed (a bell shape, std 0.5 * 2^20 units), centred, times a power of two.
MANY_SETS = [(-10, 1), (0, 2), (5, 3)]  # (log2 scale, seed)
MANY_VALUES = 1024 * QK_K
DIGEST_PRIME = 0x100000001B3


def splitmix64_values(seed, n, log2_scale):
    mask = (1 << 64) - 1
    state = seed
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        field = (1 << 21) - 1
        centred = (z & field) + ((z >> 21) & field) + ((z >> 42) & field) - 3 * (1 << 20)
        out[i] = np.float32(centred) * np.float32(2.0 ** (log2_scale - 20))
    return out


def digest(data):
    """sum_i (byte_i + 1) * P^(n-1-i) mod 2^64 (Horner: h = h * P + byte + 1)."""
    b = np.frombuffer(data, dtype=np.uint8).astype(np.uint64) + np.uint64(1)
    powers = np.cumprod(np.full(b.size, DIGEST_PRIME, dtype=np.uint64))[::-1]  # P^n .. P^1
    powers = np.concatenate([powers[1:], np.ones(1, dtype=np.uint64)])        # P^(n-1) .. P^0
    return int(np.sum(b * powers, dtype=np.uint64))


def many_block_lines(refs):
    lines = ["# type log2_scale seed n_values blocks_digest dequantized_digest (tools/py/make_quant_fixtures.py)"]
    for log2_scale, seed in MANY_SETS:
        x = splitmix64_values(seed, MANY_VALUES, log2_scale)
        for fmt in FORMATS:
            blocks = refs.quantize(fmt, x)
            y = refs.dequantize(fmt, blocks)
            lines.append("%s %d %d %d %016x %016x" % (fmt, log2_scale, seed, MANY_VALUES, digest(blocks.tobytes()),
                                                      digest(y.astype("<f4").tobytes())))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# Output

def header(fmt, kind, n_rows):
    return MAGIC + struct.pack("<IIII", VERSION, FORMATS[fmt][0], kind, n_rows)


def row_record(name, n_values, blocks, dequantized, inputs=None):
    assert len(name) < NAME_BYTES
    out = name.encode("ascii").ljust(NAME_BYTES, b"\0") + struct.pack("<I", n_values)
    if inputs is not None:
        out += inputs.astype("<f4").tobytes()
    return out + blocks.astype(np.uint8).tobytes() + dequantized.astype("<f4").tobytes()


def write_fixtures(refs, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    total = 0
    for seed, fmt in enumerate(FORMATS):
        _, values, nbytes = FORMATS[fmt]
        rng = np.random.default_rng(1000 + seed)
        files = {}
        rows = []
        for name, x in quantize_inputs(values, rng):
            blocks = refs.quantize(fmt, x)
            assert blocks.size == x.size // values * nbytes
            rows.append(row_record(name, x.size, blocks, refs.dequantize(fmt, blocks), inputs=x))
        files["quantize"] = header(fmt, KIND_QUANTIZE, len(rows)) + b"".join(rows)
        rows = []
        for name, blocks in dequantize_inputs(fmt, rng):
            rows.append(row_record(name, blocks.size // nbytes * values, blocks, refs.dequantize(fmt, blocks)))
        files["dequantize"] = header(fmt, KIND_DEQUANTIZE, len(rows)) + b"".join(rows)
        for kind, data in files.items():
            path = os.path.join(out_dir, "%s_%s.bin" % (fmt, kind))
            with open(path, "wb") as f:
                f.write(data)
            total += len(data)
            print("%-40s %7d bytes" % (path, len(data)))
    path = os.path.join(out_dir, "many_blocks.txt")
    with open(path, "w") as f:
        f.write(many_block_lines(refs))
    print("%-40s %7d bytes" % (path, os.path.getsize(path)))
    print("total %d bytes" % (total + os.path.getsize(path)))


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-cpp", default=os.path.join(root, ".cache", "llama.cpp"),
                        help="llama.cpp source (scripts/fetch-llama-cpp-ref.sh)")
    parser.add_argument("--out", default=os.path.join(root, "tests", "data", "quant"))
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.llama_cpp, "ggml", "src", "ggml-quants.c")):
        sys.exit("no llama.cpp source at %s: run scripts/fetch-llama-cpp-ref.sh" % args.llama_cpp)
    commit = subprocess.run(["git", "-C", args.llama_cpp, "rev-parse", "HEAD"], capture_output=True, text=True)
    print("llama.cpp %s at %s" % (commit.stdout.strip() or "(not a git checkout)", args.llama_cpp))
    with tempfile.TemporaryDirectory() as workdir:
        write_fixtures(References(args.llama_cpp, workdir), args.out)


if __name__ == "__main__":
    main()
