"""Byte-level BPE of the Qwen2/Qwen3 family: training, encoding, and export as a Hugging Face tokenizer.json.

The format matches Qwen3's tokenizer.json so one loader serves both: NFC normalizer; pre-tokenizer = Split on
Qwen2's regex (Isolated) then ByteLevel without its own regex; BPE model with merges as [left, right] pairs;
ByteLevel decoder; special tokens as added_tokens with ids after the BPE vocabulary.

Training counts pre-tokenized words once (fast), then merges the most frequent adjacent pair, updating only the
words that contain it. Ties break on the pair's strings so the result depends on the corpus alone.

    /usr/bin/python3 tools/train/bpe.py --corpus work-data/corpus --vocab-size 4096 --out work-data/tokenizer
"""
import argparse
import heapq
import json
import os
import unicodedata
from collections import Counter, defaultdict

import regex  # Debian python3-regex: \p{L} / \p{N} classes of Qwen2's pattern

# Qwen2 / Qwen3 pre-tokenizer pattern, verbatim from their tokenizer.json.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
_PRETOK = regex.compile(QWEN2_PATTERN)
_SPECIAL_SPLIT = regex.compile("(" + "|".join(regex.escape(s) for s in SPECIALS) + ")")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character table (also Qwen's); the list order is the id order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


BYTE_TABLE = bytes_to_unicode()
BYTE_ENC = {b: c for b, c in BYTE_TABLE}
BYTE_DEC = {c: b for b, c in BYTE_TABLE}


def pretokenize(text):
    """NFC text (no specials inside) -> list of byte-level mapped words."""
    return ["".join(BYTE_ENC[b] for b in w.encode("utf-8")) for w in _PRETOK.findall(text)]


def split_specials(text):
    """-> alternating [plain, special, plain, ...] pieces (plain pieces may be empty)."""
    return _SPECIAL_SPLIT.split(text)


def train(word_counts, vocab_size):
    """word_counts {mapped word: count} -> (vocab {token: id}, merges [(left, right)]); specials not included."""
    n_merges = vocab_size - len(SPECIALS) - 256
    symbols = [c for _, c in BYTE_TABLE]  # id -> string
    sym_id = {s: i for i, s in enumerate(symbols)}
    words = [[sym_id[c] for c in w] for w in word_counts]  # each word as symbol ids
    counts = list(word_counts.values())
    pair_count = Counter()
    where = defaultdict(set)  # pair -> indices of words containing it
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += counts[wi]
            where[(a, b)].add(wi)
    heap = [(-c, symbols[a], symbols[b], a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        negc, _, _, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -negc or -negc <= 0:
            continue  # stale entry
        new = len(symbols)
        symbols.append(symbols[a] + symbols[b])
        merges.append((symbols[a], symbols[b]))
        touched = set()
        for wi in list(where.pop((a, b), ())):
            w, c = words[wi], counts[wi]
            for x, y in zip(w, w[1:]):  # remove this word's old pairs
                pair_count[(x, y)] -= c
                touched.add((x, y))
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for x, y in zip(out, out[1:]):
                pair_count[(x, y)] += c
                where[(x, y)].add(wi)
                touched.add((x, y))
        pair_count.pop((a, b), None)
        for p in touched:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, symbols[p[0]], symbols[p[1]], p[0], p[1]))
    return {s: i for i, s in enumerate(symbols)}, merges


class Tokenizer:
    """Encoder/decoder for a tokenizer.json written by save() (enough for the training pipeline)."""

    def __init__(self, path):
        with open(path) as f:
            tj = json.load(f)
        self.vocab = tj["model"]["vocab"]
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.ranks = {tuple(m): r for r, m in enumerate(tj["model"]["merges"])}
        self.special = {t["content"]: t["id"] for t in tj["added_tokens"]}
        self.id_to_token.update({i: t for t, i in self.special.items()})
        self.cache = {}

    def _bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: self.ranks.get((parts[i], parts[i + 1]), 1 << 30))
            if (parts[best], parts[best + 1]) not in self.ranks:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        ids = [self.vocab[p] for p in parts]
        if len(self.cache) < 2_000_000:
            self.cache[word] = ids
        return ids

    def encode(self, text):
        ids = []
        for k, piece in enumerate(split_specials(text)):
            if k % 2:
                ids.append(self.special[piece])
            elif piece:
                for w in pretokenize(unicodedata.normalize("NFC", piece)):
                    ids.extend(self._bpe(w))
        return ids

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            t = self.id_to_token[int(i)]
            if t in self.special:
                out += t.encode()
            else:
                out += bytes(BYTE_DEC[c] for c in t)
        return out.decode("utf-8", errors="replace")


def chat_template():
    """ChatML in the structure of Qwen3's template (no tools); enable_thinking=false adds the empty think block."""
    return ("{%- for message in messages %}"
            "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
            "{%- endfor %}"
            "{%- if add_generation_prompt %}"
            "{{- '<|im_start|>assistant\\n' }}"
            "{%- if enable_thinking is defined and enable_thinking is false %}"
            "{{- '<think>\\n\\n</think>\\n\\n' }}"
            "{%- endif %}"
            "{%- endif %}")


def save(out_dir, vocab, merges):
    os.makedirs(out_dir, exist_ok=True)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    added = [{"id": len(vocab) + k, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for k, s in enumerate(SPECIALS)]
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(m) for m in merges]},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    cfg = {
        "add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "mask_token": "<|mask|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|mask|>"],
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
        "chat_template": chat_template(), "clean_up_tokenization_spaces": False, "errors": "replace",
        "model_max_length": 1024, "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)


def count_words(paths):
    counts = Counter()
    for path in paths:
        with open(path) as f:
            for line in f:
                text = json.loads(line)["text"]
                for k, piece in enumerate(split_specials(text)):
                    if k % 2 == 0 and piece:
                        counts.update(pretokenize(unicodedata.normalize("NFC", piece)))
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="work-data/corpus")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--out", default="work-data/tokenizer")
    args = ap.parse_args()
    counts = count_words([os.path.join(args.corpus, "train.jsonl")])  # the BPE never sees validation text
    print(f"{len(counts)} distinct words, {sum(counts.values())} words")
    vocab, merges = train(counts, args.vocab_size)
    save(args.out, vocab, merges)
    print(f"vocab {len(vocab)} + {len(SPECIALS)} specials, {len(merges)} merges -> {args.out}")


if __name__ == "__main__":
    main()
