#!/usr/bin/python3
"""A GGUF file from a Hugging Face folder (one model.safetensors, as `treespark make-model` writes it), written with
llama.cpp's gguf-py the way its converter and llama-quantize lay a whole-file type out: the seven projections,
token_embd and output in TYPE, norms and biases F32. For load-time measurements on big random models (`treespark
bench load`); the tokenizer is left out, as the fixtures of make_gguf_model_fixtures.py leave it.

  /usr/bin/python3 tools/py/gguf_from_folder.py FOLDER OUT.gguf [--type q8_0|q4_0|bf16|f32]

Needs gguf-py (scripts/fetch-llama-cpp-ref.sh) and numpy; holds the model as float32 while it converts (about 4
bytes per parameter, plus the quantized copy). Written to OUT.partial, then renamed.
"""
import os
import sys

import make_gguf_model_fixtures as fixtures


def main():
    args = sys.argv[1:]
    qname = "q8_0"
    if len(args) == 4 and args[2] == "--type":
        qname = args[3]
        args = args[:2]
    if len(args) != 2 or qname not in ("q8_0", "q4_0", "bf16", "f32"):
        sys.exit(__doc__)
    folder, out = args
    gguf = fixtures.import_gguf()
    qtype = None if qname == "f32" else getattr(gguf.GGMLQuantizationType, qname.upper())
    partial = out + ".partial"
    fixtures.write_folder(gguf, folder, partial, f"treespark {os.path.basename(os.path.normpath(folder))} {qname}",
                          qtype, quantize_embeddings=qtype is not None)
    os.replace(partial, out)
    print(f"{out}: {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main()
