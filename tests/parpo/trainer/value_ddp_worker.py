"""The native value path under the trainer's DDP path, for test_value_ddp.py (run as a script).

Usage: python value_ddp_worker.py DEVICES OUT_DIR

Every process builds the same policy with a value head (seeded) and the same rollouts of the hand
world, and the critic's targets from them (``value_credit``). With DEVICES = 2 the trainer's own
Fabric (``loop._fabric``: DDP, gloo on CPU) launches a second rank and rank r runs one update
(``PolicyTrainer._update``, actor and critic jointly) on its half of the step samples; with 1 the
single process runs it on all of them. SGD with lr 1 moves each parameter by exactly minus its
(clipped) gradient. Each rank saves the parameters before and after to OUT_DIR/DEVICES-RANK.pt.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # tests.plugins

from parpo.algorithms import AnchorStore  # noqa: E402
from parpo.policy.native import NativePolicy  # noqa: E402
from parpo.presets import load  # noqa: E402
from parpo.trainer.config import PolicyTrainConfig  # noqa: E402
from parpo.trainer.critic import value_credit  # noqa: E402
from parpo.trainer.loop import PolicyTrainer, _fabric  # noqa: E402
from parpo.trainer.rollout import Rollouts, collect  # noqa: E402
from tests.plugins.envs import HandUsers, hand_catalogue, hand_tasks  # noqa: E402

USERS = {"u1": 0, "u2": 1, "u9": 2}


def config(devices: int) -> PolicyTrainConfig:
    small = [
        "policy.dim=16",
        "policy.heads=2",
        "policy.layers=1",
        "policy.max_k=3",
        "policy.max_candidates=6",
    ]
    env = ["env.k=3", "env.max_steps=3", "env.search_k=6"]
    train = ["train.ppo_epochs=1", "train.minibatches=1", "train.micro_batches=2", "train.max_grad_norm=0.5"]
    run = [f"runtime.devices={devices}", "runtime.device=cpu", "runtime.threads=1", "advantage.whiten=false"]
    return load(PolicyTrainConfig, "policy", "gae", [*small, *env, *train, *run])


def part(roll: Rollouts, idx: torch.Tensor) -> Rollouts:
    """The step samples ``idx`` of ``roll`` (``_update`` reads only the per-sample fields)."""
    return Rollouts(
        {k: v[idx] for k, v in roll.inputs.items()}, roll.tokens[idx], roll.old_logp[idx], roll.mask[idx],
        roll.episode[idx], roll.rewards, roll.group, roll.user, roll.infos,
    )  # fmt: skip


def main(devices: int, out: Path) -> None:
    from parpo.env import BatchEnv, EnvConfig

    cfg = config(devices)
    fabric = _fabric(cfg, out / "run")
    fabric.launch()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = NativePolicy.create(cfg.policy, HandUsers(), hand_catalogue(), search_k=6)
    module = fabric.setup_module(policy.net)
    module.mark_forward_method("forward_value")
    opt = fabric.setup_optimizers(torch.optim.SGD(policy.net.parameters(), lr=1.0))
    env = BatchEnv(hand_catalogue(), HandUsers(), EnvConfig(k=3, max_steps=3, search_k=6))
    policy.net.eval()
    roll = collect(policy, env, hand_tasks() * 2, 2, USERS, generator=torch.Generator().manual_seed(1))
    adv, _, critic = value_credit(
        module, policy.temperature, roll, AnchorStore.from_config(cfg.advantage), cfg
    )
    n = roll.n_samples - roll.n_samples % 2  # equal halves: DDP's mean of the halves is the whole's mean
    idx = torch.arange(n).chunk(devices)[fabric.global_rank]
    before = {k: v.detach().clone() for k, v in policy.net.state_dict().items()}
    policy.net.train()
    trainer = PolicyTrainer(cfg, None, out / "run")  # type: ignore[arg-type]
    metrics = trainer._update(
        fabric, policy, module, [opt], None, part(roll, idx), adv[idx], torch.Generator().manual_seed(2),
        type(critic)(critic.target[idx], critic.loss),
    )  # fmt: skip
    after = {k: v.detach().clone() for k, v in policy.net.state_dict().items()}
    torch.save({"before": before, "after": after, "metrics": metrics, "n": n},
               out / f"{devices}-{fabric.global_rank}.pt")  # fmt: skip


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
