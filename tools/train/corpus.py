"""Build the training corpus of the shipped treespark model pair from Debian packages.

Reproducible on any Debian 12 machine: the packages are fetched with `apt-get download` and unpacked with
`dpkg-deb -x` (nothing is installed). Sources and their licenses:

  libpython3.11-stdlib, libpython3.11-testsuite  Python source (*.py)            PSF-2.0   (the core: code)
  python3.11-doc                                 html/_sources/**/*.rst.txt      PSF-2.0   (prose)
  linux-doc-6.1                                  Documentation/**/*.rst.gz       GPL-2.0   (prose, a hashed subset)

The split is by FILE, never by offset: a file goes to validation when sha1(its path inside the package) mod 100 <
--val-percent; every document derived from a file (including its chat-formatted variants) follows it.

A fraction of the prose sections and of documented Python functions is also emitted as ChatML conversations
(user: a question built from the section heading / function docstring; assistant: the section body / the code) so
the model learns the turn markers used by the chat prompts.

Output (under --out): train.jsonl, val.jsonl (one {"src", "path", "text"} per document) and manifest.json.

    /usr/bin/python3 tools/train/corpus.py --work work-data --out work-data/corpus --seed 1234
"""
import argparse
import ast
import gzip
import hashlib
import json
import os
import random
import re
import subprocess

PACKAGES = {
    "libpython3.11-stdlib": "PSF-2.0",
    "libpython3.11-testsuite": "PSF-2.0",
    "python3.11-doc": "PSF-2.0",
    "linux-doc-6.1": "GPL-2.0",
}
MAX_FILE_BYTES = 200_000  # a few generated test data files are huge and repetitive: leave them out
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
EMPTY_THINK = "<think>\n\n</think>\n\n"  # what the template adds when enable_thinking is false


def fetch_packages(work):
    """apt-get download + dpkg-deb -x each package into work/x/<name>; returns {name: root}."""
    debs, roots = os.path.join(work, "debs"), {}
    os.makedirs(debs, exist_ok=True)
    for name in PACKAGES:
        have = [f for f in os.listdir(debs) if f.startswith(name + "_") and f.endswith(".deb")]
        if not have:
            subprocess.run(["apt-get", "download", name], cwd=debs, check=True)
            have = [f for f in os.listdir(debs) if f.startswith(name + "_") and f.endswith(".deb")]
        deb = sorted(have)[-1]
        root = os.path.join(work, "x", deb[:-4])
        if not os.path.isdir(root):
            os.makedirs(root)
            subprocess.run(["dpkg-deb", "-x", os.path.join(debs, deb), root], check=True)
        roots[name] = (root, deb)
    return roots


def path_hash(rel):
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16)


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) > MAX_FILE_BYTES:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    return text if text.strip() else None


def list_files(root, package, kernel_keep_mod):
    """Yields (src, rel_path, abs_path) of the files of one package that enter the corpus."""
    for dirpath, _, files in os.walk(root):
        for fn in files:
            p = os.path.join(dirpath, fn)
            rel = os.path.relpath(p, root)
            if os.path.islink(p) or not os.path.isfile(p):
                continue  # dangling links into other packages
            if package.startswith("libpython") and fn.endswith(".py"):
                yield "python-code", rel, p
            elif package == "python3.11-doc" and fn.endswith(".rst.txt") and "/_sources/" in p:
                yield "python-doc", rel, p
            elif package == "linux-doc-6.1" and fn.endswith(".rst.gz"):
                if path_hash(rel) % kernel_keep_mod == 0:  # a fixed, hash-chosen subset keeps the mix code-heavy
                    yield "kernel-doc", rel, p


HEADING_RE = re.compile(r"^(?P<title>[^\n]{3,80})\n(?P<rule>[=\-~^*#\"'`+]{3,})\n", re.M)
QUESTIONS = ["What is {h}?", "Explain {h}.", "Tell me about {h}.", "Can you describe {h}?",
             "Give me an overview of {h}.", "How does {h} work?", "What should I know about {h}?"]


def chat(user, assistant, rng):
    """One ChatML conversation; half with the empty think block the template emits when thinking is off."""
    think = EMPTY_THINK if rng.random() < 0.5 else ""
    return f"{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n{think}{assistant}{IM_END}\n"


def prose_chats(text, rng, fraction):
    """Sections of a reST file (heading + body up to the next heading) turned into Q/A conversations."""
    heads = list(HEADING_RE.finditer(text))
    out = []
    for i, m in enumerate(heads):
        title = m.group("title").strip().strip("=").strip()
        if not re.search(r"[A-Za-z]", title) or len(m.group("rule")) < len(m.group("title").rstrip()) - 2:
            continue
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        body = text[m.end():end].strip()
        if not 200 <= len(body) <= 3000 or rng.random() >= fraction:
            continue
        q = rng.choice(QUESTIONS).format(h=title)
        out.append(chat(q, body, rng))
    return out


def code_chats(text, rng, fraction):
    """Documented top-level functions turned into 'write a function' conversations."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines, out = text.split("\n"), []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc or getattr(node, "end_lineno", None) is None or rng.random() >= fraction:
            continue
        src = "\n".join(lines[node.lineno - 1:node.end_lineno])
        if not 100 <= len(src) <= 2500:
            continue
        summary = doc.strip().split("\n")[0].rstrip(".")
        args = ", ".join(a.arg for a in node.args.args)
        q = rng.choice(["Write a Python function `{n}({a})`: {s}.", "Implement `{n}({a})` in Python. {s}.",
                        "How would you write {n}({a}) in Python? It should: {s}."]).format(n=node.name, a=args,
                                                                                         s=summary)
        out.append(chat(q, f"```python\n{src}\n```", rng))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="work-data")
    ap.add_argument("--out", default="work-data/corpus")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--val-percent", type=int, default=3)
    ap.add_argument("--kernel-keep-mod", type=int, default=4, help="keep kernel docs whose path hash %% N == 0")
    ap.add_argument("--chat-fraction", type=float, default=0.3)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    roots = fetch_packages(args.work)
    os.makedirs(args.out, exist_ok=True)
    stats = {}
    with open(os.path.join(args.out, "train.jsonl"), "w") as ftr, open(os.path.join(args.out, "val.jsonl"), "w") as fva:
        for package, (root, deb) in roots.items():
            for src, rel, p in sorted(list_files(root, package, args.kernel_keep_mod)):
                text = read_text(p)
                if text is None:
                    continue
                split = "val" if path_hash(rel) % 100 < args.val_percent else "train"
                docs = [(src, text)]
                if src == "python-code":
                    docs += [("chat-code", c) for c in code_chats(text, rng, args.chat_fraction)]
                else:
                    docs += [("chat-prose", c) for c in prose_chats(text, rng, args.chat_fraction)]
                for s, t in docs:
                    (fva if split == "val" else ftr).write(json.dumps({"src": s, "path": rel, "text": t}) + "\n")
                    st = stats.setdefault(f"{split}/{s}", {"docs": 0, "bytes": 0})
                    st["docs"] += 1
                    st["bytes"] += len(t.encode())
    manifest = {"seed": args.seed, "val_percent": args.val_percent, "kernel_keep_mod": args.kernel_keep_mod,
                "split_rule": "val iff int(sha1(path inside package).hexdigest(), 16) % 100 < val_percent",
                "packages": {n: {"deb": deb, "license": PACKAGES[n]} for n, (_, deb) in roots.items()},
                "stats": stats}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps(stats, indent=1))


if __name__ == "__main__":
    main()
