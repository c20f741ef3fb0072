#!/usr/bin/env python3
"""Writes the small GGUF fixtures under tests/data/gguf/ with llama.cpp's own gguf-py, and a JSON sidecar each.

The files are written by gguf-py's GGUFWriter (the writer llama.cpp's converter uses); each sidecar is built from
what gguf-py's GGUFReader reads back (metadata in file order, tensors with their ggml type, ne, offset, byte size,
an FNV-1a 64 checksum of their bytes and their first values), so tests/io/gguf_test.cc compares treespark's
reader with gguf-py's view of the same bytes. ggml_types.json is gguf-py's GGML_QUANT_SIZES table. Deterministic: rerunning gives byte-identical files.

usage: make_gguf_fixtures.py [--llama-cpp DIR] [--out DIR]
  --llama-cpp  a llama.cpp source tree (its gguf-py/ is imported; default .cache/llama.cpp)
  --out        output folder (default tests/data/gguf)
Needs numpy only (Debian: /usr/bin/python3 with python3-numpy).
"""
import argparse
import json
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# C++ spelling of GGUF value types (io/gguf.h gguf_type_name), by GGUFValueType id.
TYPE_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"]


def fnv1a64(data: bytes) -> str:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return f"{h:016x}"


def ggml_type_name(qtype):
    """ggml's type_name spelling: lower case except the K of the k-quants ("q4_K")."""
    name = qtype.name.lower()
    return name[:-2] + "_K" if name.endswith("_k") else name


def flatten(value):
    if isinstance(value, list):
        return [x for item in value for x in flatten(item)]
    return [value]


def write_metadata_file(gguf, path):
    """Every value type as a scalar and as an array, nested arrays, and a tokenizer's arrays; no tensors."""
    T = gguf.GGUFValueType
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name("treespark gguf metadata fixture")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 3.140625)
    w.add_bool("test.bool_true", True)
    w.add_bool("test.bool_false", False)
    w.add_string("test.string", "h\u00e9llo, w\u00f6rld \u2713 \U0001F600")
    w.add_uint64("test.u64", 2**64 - 1)
    w.add_int64("test.i64", -2**63)
    w.add_float64("test.f64", 2.718281828459045)
    # Small values in wide or signed types: the getters widen and narrow them when the value fits.
    w.add_uint8("test.small_u8", 7)
    w.add_int32("test.small_i32", 42)
    w.add_int32("test.negative_i32", -1)
    w.add_uint64("test.small_u64", 12345)
    w.add_uint64("test.big_u64", 2**40)
    w.add_float32("test.f32_small", -0.1)  # not exact in binary: compared as the f32 gguf-py reads back
    arrays = {
        "u8": (T.UINT8, [0, 1, 255]), "i8": (T.INT8, [-128, 0, 127]), "u16": (T.UINT16, [0, 65535]),
        "i16": (T.INT16, [-32768, 32767]), "u32": (T.UINT32, [0, 4294967295]),
        "i32": (T.INT32, [-2147483648, 0, 2147483647]), "u64": (T.UINT64, [0, 2**64 - 1]),
        "i64": (T.INT64, [-2**63, 2**63 - 1]), "f32": (T.FLOAT32, [0.5, -1.25, 1e-3]),
        "f64": (T.FLOAT64, [0.1, -2.5e300]), "bool": (T.BOOL, [True, False, True]),
        "string": (T.STRING, ["", "a", "two words", "\u00fcnicode"]),
    }
    for name, (sub, values) in arrays.items():
        w.add_key_value(f"test.array.{name}", values, T.ARRAY, sub_type=sub)
    # Arrays of arrays (gguf-py infers i32 / string elements); depth 3 is the deepest treespark reads.
    w.add_array("test.nested.ints", [[1, 2, 3], [4], [5, 6]])
    w.add_array("test.nested.strings", [["a", "b"], ["c"]])
    w.add_array("test.nested.depth3", [[[1, 2], [3]], [[4]]])
    # A small BPE vocabulary as the converter writes it.
    tokens = ["<unk>", "<s>", "</s>", "\u0120the", "\u0120a", "h", "e", "he", "\u4f60\u597d", "<0x0A>"]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([2, 3, 3, 1, 1, 1, 1, 1, 1, 6])
    w.add_token_scores([-float(i) / 4 for i in range(len(tokens))])
    w.add_token_merges(["h e", "\u0120 t", "\u0120t he"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"test.nested.ints": [[1, 2, 3], [4], [5, 6]], "test.nested.strings": [["a", "b"], ["c"]],
            "test.nested.depth3": [[[1, 2], [3]], [[4]]]}


def tensor_values(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def write_tensor_file(gguf, path, alignment=None):
    """Tensors of F32 (1-D, 2-D, 3-D, 4-D), F16, BF16, Q8_0, Q4_0 and I32 with fixed-seed contents."""
    Q = gguf.GGMLQuantizationType
    rng = np.random.default_rng(20261203 + (alignment or 0))
    w = gguf.GGUFWriter(path, arch="llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint32("llama.block_count", 1)
    w.add_uint32("llama.embedding_length", 64)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    # numpy shapes (row-major); the file stores them reversed as ne.
    w.add_tensor("token_embd.weight", tensor_values(rng, (5, 64)))                      # F32 ne [64, 5]
    w.add_tensor("output_norm.weight", tensor_values(rng, (7,)))                        # F32 ne [7]
    w.add_tensor("blk.0.attn_q.weight", tensor_values(rng, (3, 64)).astype(np.float16))  # F16 ne [64, 3]
    w.add_tensor("blk.0.attn_k.weight", gguf.quants.quantize(tensor_values(rng, (2, 48)), Q.BF16), raw_dtype=Q.BF16)
    w.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(tensor_values(rng, (3, 64)), Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("blk.0.ffn_down.weight", gguf.quants.quantize(tensor_values(rng, (2, 96)), Q.Q4_0), raw_dtype=Q.Q4_0)
    w.add_tensor("test.cube", tensor_values(rng, (2, 3, 5)))                             # F32 ne [5, 3, 2]
    w.add_tensor("test.hyper", tensor_values(rng, (2, 1, 3, 2)))                         # F32 ne [2, 3, 1, 2]
    w.add_tensor("test.ids", np.arange(-3, 6, dtype=np.int32))                           # I32 ne [9]
    w.add_tensor("test.odd_f16", tensor_values(rng, (5,)).astype(np.float16))            # 10 bytes: padding follows
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {}


def value_of(field, written_nested):
    """gguf-py's reading of one field as (type, element_type, count, value)."""
    T = field.types
    if T[0].name != "ARRAY":
        return TYPE_NAMES[int(T[0])], None, None, field.contents()
    element = TYPE_NAMES[int(T[1])]
    count = int(field.parts[4][0])  # after key length, key, value type, element type: the count
    if len(T) > 2:  # an array of arrays: gguf-py flattens it; the sidecar keeps the written nesting
        nested = written_nested[field.name]
        assert flatten(nested) == field.contents(), field.name
        return "array", element, len(nested), nested
    return "array", element, count, field.contents()


def first_values(gguf, t, n=8):
    Q = gguf.GGMLQuantizationType
    flat = np.asarray(t.data).reshape(-1)
    if t.tensor_type in (Q.F32, Q.F16, Q.I32):
        return [v.item() for v in flat[:n].astype(np.float64 if t.tensor_type != Q.I32 else np.int64)]
    # BF16 and quantized types come back as bytes: dequantize them with gguf-py's reference.
    return [float(v) for v in gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(-1)[:n]]


def sidecar(gguf, path, written_nested):
    r = gguf.GGUFReader(path)
    metadata = []
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        type_name, element, count, value = value_of(field, written_nested)
        entry = {"key": name, "type": type_name, "value": value}
        if element is not None:
            entry["element_type"] = element
            entry["count"] = count
        metadata.append(entry)
    tensors = []
    for t in r.tensors:
        raw = bytes(np.asarray(t.data).reshape(-1).view(np.uint8))
        assert len(raw) == t.n_bytes
        tensors.append({
            "name": t.name, "ggml_type": int(t.tensor_type), "type_name": ggml_type_name(t.tensor_type),
            "ne": [int(d) for d in t.shape], "offset": int(t.data_offset - r.data_offset), "nbytes": int(t.n_bytes),
            "fnv1a64": fnv1a64(raw), "first_values": first_values(gguf, t),
        })
    return {"file": os.path.basename(path), "version": int(r.fields["GGUF.version"].parts[0][0]),
            "alignment": int(r.alignment), "data_offset": int(r.data_offset), "file_size": os.path.getsize(path),
            "metadata": metadata, "tensors": tensors}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", default=os.path.join(REPO, ".cache", "llama.cpp"))
    parser.add_argument("--out", default=os.path.join(REPO, "tests", "data", "gguf"))
    args = parser.parse_args()
    gguf_py = os.path.join(os.path.abspath(args.llama_cpp), "gguf-py")
    if not os.path.isdir(os.path.join(gguf_py, "gguf")):
        sys.exit(f"make_gguf_fixtures.py: no gguf-py under {args.llama_cpp} (pass --llama-cpp DIR)")
    sys.path.insert(0, gguf_py)
    import gguf  # noqa: E402  (llama.cpp's gguf-py, from the tree given)

    os.makedirs(args.out, exist_ok=True)
    cases = [("metadata.gguf", lambda p: write_metadata_file(gguf, p)),
             ("tensors.gguf", lambda p: write_tensor_file(gguf, p)),
             ("aligned64.gguf", lambda p: write_tensor_file(gguf, p, alignment=64))]
    # gguf-py's table of ggml types (id -> name, values per block, bytes per block), to check treespark's.
    types = [{"id": int(q), "name": ggml_type_name(q), "block_values": bs, "block_bytes": ts}
             for q, (bs, ts) in sorted(gguf.GGML_QUANT_SIZES.items())]
    with open(os.path.join(args.out, "ggml_types.json"), "w", encoding="utf-8") as f:
        json.dump(types, f, indent=1)
        f.write("\n")
    total = 0
    for name, write in cases:
        path = os.path.join(args.out, name)
        written_nested = write(path)
        with open(path[:-len(".gguf")] + ".json", "w", encoding="utf-8") as f:
            json.dump(sidecar(gguf, path, written_nested), f, indent=1, ensure_ascii=False)
            f.write("\n")
        total += os.path.getsize(path)
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    print(f"total {total} bytes of GGUF")


if __name__ == "__main__":
    main()
