"""How many files a reader opens to follow one RL step's data from the rollout to the loss.

Runs one RL step of the toy PPO setup (``ReachEnv`` + ``TinyVLAPolicy``, CPU) under a profiler and lists the
rlinf_core source files whose functions run from the moment the rollout is done (``Algorithm.compute`` is called)
to the moment the first micro-batch's loss is computed (``Algorithm.loss`` returns): samples and advantages, the
buffer and its schedule, the loss denominators, the hand-over of the micro-batch to ``training_step`` and the loss.
The toy env and policy (``builtin/``) and files whose only code that ran is a dataclass or a property are counted
apart: a reader of the RL step does not open them to follow the data.

Prints the files and their count. Pass ``--source DIR`` (a ``core/src`` of another checkout, e.g. ``git archive``
of an older commit) to measure that tree instead; the measurement uses only ``Algorithm.compute`` and
``Algorithm.loss``, which both layouts have::

    OMP_NUM_THREADS=1 python benchmarks/rl_step_reading_path.py [--source /tmp/old/core/src]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", help="a core/src directory to import rlinf_core from")
    args = parser.parse_args()
    if args.source:
        sys.path.insert(0, str(Path(args.source).resolve()))
    import lightning.pytorch as pl
    import torch

    import rlinf_core
    from rlinf_core.builtin.toy_env import ReachEnv
    from rlinf_core.builtin.toy_policy import TinyVLAPolicy
    from rlinf_core.rl.algorithms import PPO
    from rlinf_core.rl.config import RolloutConfig
    from rlinf_core.rl.module import RLModule

    root = Path(rlinf_core.__file__).resolve().parent
    torch.manual_seed(0)
    module = RLModule(
        env=ReachEnv(num_envs=4, max_episode_steps=4),
        policy=TinyVLAPolicy(action_dim=2, num_action_chunks=2, add_value_head=True),
        algorithm=PPO(update_epoch=1),
        rollout=RolloutConfig(max_steps_per_rollout_epoch=4, show_progress=False),
        global_batch_size=4,
        micro_batch_size=2,
    )
    ran: dict[str, set[str]] = {}
    state = {"on": False, "done": False}

    def profile(frame, event, arg):
        if event != "call" or not state["on"]:
            return
        path = Path(frame.f_code.co_filename)
        if root in path.parents:
            ran.setdefault(str(path.relative_to(root)), set()).add(frame.f_code.co_name)

    algorithm_cls = type(module.algorithm)
    compute, loss = algorithm_cls.compute, algorithm_cls.loss

    def traced_compute(self, *a, **kw):
        if not state["done"]:
            state["on"] = True
            sys.setprofile(profile)
        return compute(self, *a, **kw)

    def traced_loss(self, *a, **kw):
        out = loss(self, *a, **kw)
        if state["on"]:
            state["on"], state["done"] = False, True
            sys.setprofile(None)
        return out

    algorithm_cls.compute, algorithm_cls.loss = traced_compute, traced_loss
    with tempfile.TemporaryDirectory() as tmp:
        pl.Trainer(
            max_epochs=1,
            accelerator="cpu",
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            check_val_every_n_epoch=1000,
            default_root_dir=tmp,
        ).fit(module)
    plumbing = {"__init__", "__post_init__", "__len__", "<lambda>", "<genexpr>", "<listcomp>", "<dictcomp>"}
    followed = {f: names for f, names in ran.items() if not f.startswith("builtin/") and names - plumbing}
    print(f"rlinf_core at {root}")
    for f in sorted(followed):
        print(f"  {f}: {', '.join(sorted(followed[f] - plumbing))}")
    print(
        f"files a reader opens from rollout to loss: {len(followed)} (toy env/policy and plumbing-only files "
        f"left out: {len(ran) - len(followed)})"
    )


if __name__ == "__main__":
    main()
