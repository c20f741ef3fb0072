"""Check exported folders against the project's independent float64 references (tools/py/reference_model.py and
tools/py/reference_drafter.py): the trainer's batched forward must equal the one-anchor-at-a-time semantics the
engine implements, or the drafter would be trained for a different function than the one that runs.

Compares, in float32 vs float64 on the shipped bf16 weights:
  target logits and every layer output on a token sequence;
  drafter base logits U for several anchors (one batched pass vs one reference call per anchor), and the Markov
  conditional of each row given the true previous token.
Exits non-zero when a relative error exceeds --tol.

    /usr/bin/python3 tools/train/check_export.py --target models/treespark-target --drafter models/treespark-drafter
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))

import reference_drafter  # noqa: E402
import reference_model  # noqa: E402
from model import Drafter, DrafterConfig  # noqa: E402
from export import read_folder  # noqa: E402
from train_drafter import load_target  # noqa: E402


def rel_err(a, b):
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-12)).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="models/treespark-target")
    ap.add_argument("--drafter", default="models/treespark-drafter")
    ap.add_argument("--tol", type=float, default=2e-4)
    ap.add_argument("--seq", type=int, default=40)
    args = ap.parse_args()
    torch.manual_seed(0)
    errs = {}

    target = load_target(args.target, "cpu")
    V = target.c.vocab_size
    ids = torch.randint(0, V - 4, (1, args.seq))
    with torch.no_grad():
        logits, hidden = target(ids, return_hidden=True)
    rcfg, rw = reference_model.load_model(args.target)
    ref_logits, ref_hidden = reference_model.forward(rcfg, rw, ids[0])
    errs["target logits"] = rel_err(logits[0], ref_logits)
    errs["target layer outputs"] = max(rel_err(h[0], rh) for h, rh in zip(hidden, ref_hidden))

    if args.drafter:
        dcfg, dw = reference_drafter.load_drafter(args.drafter, rcfg.hidden)
        import json
        with open(os.path.join(args.drafter, "config.json")) as f:
            hf = json.load(f)
        c = DrafterConfig(**{k: hf[k] for k in DrafterConfig.__dataclass_fields__})
        drafter = Drafter(c)
        drafter.load_state_dict(read_folder(args.drafter))
        drafter.eval()
        ref_taps = torch.cat([ref_hidden[l] for l in c.target_layer_ids], dim=-1)  # [S, n_taps*Ht] float64
        anchors = torch.tensor([[1, 2, 7, args.seq // 2, args.seq - c.block_size - 1]])
        with torch.no_grad():
            U = drafter(ref_taps.float()[None], ids, anchors)[0]  # [A, B, V]
        e_u, e_c = 0.0, 0.0
        for j, a in enumerate(anchors[0].tolist()):
            ref_U = reference_drafter.block_logits(dcfg, dw, ref_taps[:a], int(ids[0, a]))  # [B, V]
            e_u = max(e_u, rel_err(U[j], ref_U))
            for k in range(c.block_size):
                prev = int(ids[0, a + k])
                with torch.no_grad():
                    cond = U[j, k] + drafter.markov_head(torch.tensor(prev))
                e_c = max(e_c, rel_err(cond, reference_drafter.markov_logits(dcfg, dw, ref_U, k + 1, prev)))
        errs["drafter U (batched anchors vs reference)"] = e_u
        errs["drafter Markov conditionals"] = e_c
    ok = True
    for k, v in errs.items():
        flag = "ok" if v <= args.tol else "FAIL"
        ok &= v <= args.tol
        print(f"{k}: max relative error {v:.2e} {flag}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
