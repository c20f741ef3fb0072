"""Resumable training checkpoints shared by train_target.py and train_drafter.py: model, optimiser, step,
counters, the curve so far, elapsed training seconds and both RNG states, written atomically (a stop mid-write
leaves the previous checkpoint)."""
import os

import torch


def save(path, cfg, model, opt, rng, step, elapsed_s, log, **counters):
    torch.save({"cfg": cfg, "state": model.state_dict(), "optim": opt.state_dict(), "step": step, "log": log,
                "elapsed_s": elapsed_s, "rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                **counters}, path + ".tmp")
    os.replace(path + ".tmp", path)


def load(path, model, opt, rng):
    """Restores model, optimiser and RNGs from `path`; returns the checkpoint dict (step, log, elapsed_s and the
    counters given to save)."""
    ck = torch.load(path)
    if "optim" not in ck:
        raise SystemExit(f"{path} is an export checkpoint without optimiser state; cannot resume")
    model.load_state_dict(ck["state"])
    opt.load_state_dict(ck["optim"])
    rng.bit_generator.state = ck["rng"]
    torch.set_rng_state(ck["torch_rng"])
    return ck
