"""The native policy and the trainer on another device, unchanged: a small synthetic set, a DICE
reward model, then 4 policy updates at the default preset's sizes per device, timing rollouts
and updates, checking that rescoring recorded tokens reproduces the sampling log-probabilities
and evaluating greedily. One JSON object on stdout (and in ``$OUT/device_check.json``).

    DEVICES=cuda,cpu REWARD_DEVICE=cuda python3 benchmarks/policy_device_check.py   # on a GPU box
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import torch

    from data_pipelines.synth import SynthConfig, write
    from parpo.env import EnvSource
    from parpo.env.evaluate import run_episodes, summarise
    from parpo.policy.agent import PolicyAgent
    from parpo.presets import load
    from parpo.trainer.config import PolicyTrainConfig
    from parpo.trainer.loop import PolicyTrainer
    from reward_models.config import RewardConfig
    from reward_models.pipeline import train_and_publish

    root = Path(os.environ.get("WORKDIR", "/tmp/device-check"))
    devices = os.environ.get("DEVICES", "cuda,cpu").split(",")
    res: dict = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    write(SynthConfig(n_users=300, n_items=400, seed=3, rounds=8), root / "data")
    over = [f"runtime.device={os.environ.get('REWARD_DEVICE', devices[0])}", "train.progress_bar=false",
            "train.epochs=5", "train.checkpoint=false"]  # fmt: skip
    t = time.perf_counter()
    train_and_publish(load(RewardConfig, "reward", "dice", over), root / "data", root / "REG", root / "run")
    res["reward_s"] = time.perf_counter() - t
    for dev in devices:
        cfg = PolicyTrainConfig.model_validate(
            {
                "runtime": {"device": dev},
                "train": {"updates": 4, "tasks_per_update": 128, "progress_bar": False},
            }
        )
        src = EnvSource.load(root / "data", root / "REG", cfg=cfg.env)
        t = time.perf_counter()
        r = PolicyTrainer(cfg, src, root / f"policy-{dev}").fit()
        total = time.perf_counter() - t
        p = next(r.policy.net.parameters())
        later = r.history[1:]
        obs = src.env().reset(src.tasks("train")[:64])
        out = r.policy.act(obs, generator=torch.Generator(device=p.device).manual_seed(0))
        logp, _ = r.policy.logprobs(out.inputs, out.tokens)
        res[dev] = {
            "param_device": str(p.device),
            "train_s": total,
            "rollout_s": sum(m["time/rollout_s"] for m in later) / len(later),
            "update_s": sum(m["time/update_s"] for m in later) / len(later),
            "rescore_max_abs": float((logp.detach() - out.logprobs).abs().max()),
            "warm": summarise(run_episodes(src.env(), PolicyAgent(r.policy), src.tasks("warm"))),
        }
    text = json.dumps(res, indent=1)
    print(text)
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "device_check.json").write_text(text)


if __name__ == "__main__":
    main()
