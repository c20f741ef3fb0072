#!/usr/bin/python3
"""A GGUF file from a Hugging Face folder (as `treespark make-model` writes it, or sharded), written with
llama.cpp's gguf-py the way its converter and llama-quantize lay a file type out: for q8_0, q4_0, bf16 and f32 the
seven projections, token_embd and output in TYPE; for q4_k_m llama.cpp's Q4_K_M mix (Q6_K output, attn_v and
ffn_down Q6_K in use_more_bits layers, Q4_K the rest; make_gguf_model_fixtures.q4_k_m_mix), quantized by ggml's own
C reference (ggml-quants.c, compiled on the fly as tools/py/make_quant_fixtures.py does: gguf-py has no K-quant
quantizer). Norms and biases F32. For load-time measurements on big random models (`treespark bench load`) and the
Q4_K_M load test (tests/model/gguf_q4km_test.cc); the tokenizer is left out unless --tokenizer asks for it, as
the fixtures of make_gguf_model_fixtures.py leave it.

  /usr/bin/python3 tools/py/gguf_from_folder.py FOLDER OUT.gguf [--type q8_0|q4_0|q4_k_m|bf16|f32]
                                                                [--float-embeddings] [--tokenizer PRE]

--float-embeddings keeps token_embd F32 (llama-quantize --token-embedding-type f32). --tokenizer PRE also writes
the folder's tokenizer.json, chat template and special ids as the converter does, with PRE as the pre-tokenizer
name (e.g. qwen2 for the shipped target, whose split regex is Qwen2's), so the file runs on its own.
The folder holds model.safetensors or the shards of a model.safetensors.index.json.
Needs gguf-py and ggml-quants.c (scripts/fetch-llama-cpp-ref.sh), numpy and gcc; holds the model as float32 while
it converts (about 4 bytes per parameter, plus the quantized copy). Written to OUT.partial, then renamed. Exit
status 77: llama.cpp's source is missing (a caller may skip).
"""
import os
import sys
import tempfile

import make_gguf_model_fixtures as fixtures


def main():
    args = sys.argv[1:]
    float_embeddings = "--float-embeddings" in args
    args = [a for a in args if a != "--float-embeddings"]
    tokenizer_pre = None
    if "--tokenizer" in args:
        at = args.index("--tokenizer")
        if at + 1 >= len(args):
            sys.exit(__doc__)
        tokenizer_pre = args[at + 1]
        del args[at:at + 2]
    qname = "q8_0"
    if len(args) == 4 and args[2] == "--type":
        qname = args[3]
        args = args[:2]
    if len(args) != 2 or qname not in ("q8_0", "q4_0", "q4_k_m", "bf16", "f32"):
        sys.exit(__doc__)
    folder, out = args
    gguf = fixtures.import_gguf()
    name = f"treespark {os.path.basename(os.path.normpath(folder))} {qname}"
    partial = out + ".partial"
    if qname == "q4_k_m":
        import make_quant_fixtures as quant
        if not os.path.isfile(os.path.join(fixtures.LLAMA_CPP, "ggml", "src", "ggml-quants.c")):
            print(f"missing ggml-quants.c in {fixtures.LLAMA_CPP}: run scripts/fetch-llama-cpp-ref.sh",
                  file=sys.stderr)
            sys.exit(77)
        with tempfile.TemporaryDirectory() as workdir:
            refs = quant.References(fixtures.LLAMA_CPP, workdir)
            c_names = {gguf.GGMLQuantizationType.Q4_K: "q4_k", gguf.GGMLQuantizationType.Q6_K: "q6_k"}

            def quantize(a, ttype):  # [rows, cols] float32 -> [rows, row bytes] uint8 from ggml's C reference
                if a.shape[-1] % 256:
                    sys.exit(f"{folder}: a {a.shape} tensor is not 256 wide; llama.cpp would fall back to "
                             "formats treespark does not read (Q5_0, Q5_1)")
                return refs.c_quantize(c_names[ttype], a.reshape(-1)).reshape(a.shape[0], -1)
            fixtures.write_folder(gguf, folder, partial, name, mix="q4_k_m",
                                  quantize_embeddings=not float_embeddings, quantize=quantize,
                                  tokenizer_pre=tokenizer_pre)
    else:
        qtype = None if qname == "f32" else getattr(gguf.GGMLQuantizationType, qname.upper())
        fixtures.write_folder(gguf, folder, partial, name, qtype,
                              quantize_embeddings=qtype is not None and not float_embeddings,
                              tokenizer_pre=tokenizer_pre)
    os.replace(partial, out)
    print(f"{out}: {os.path.getsize(out)} bytes")


if __name__ == "__main__":
    main()
