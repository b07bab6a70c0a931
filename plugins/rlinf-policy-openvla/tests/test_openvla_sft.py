"""The SFT flow (core's SFTModule on a demo dataset) trains the tiny OFT through ``sft_loss`` and
exports a checkpoint the RL config loads through ``model_path``."""

import lightning.pytorch as pl
import torch

from rlinf_core.builtin.reach_demos import collect_reach_demos
from rlinf_core.datasets.demos import DemoDataset
from rlinf_core.rl.config import OptimConfig
from rlinf_core.supervised.sft import SFTModule
from rlinf_policy_openvla import OpenVLAOFTPolicy
from rlinf_policy_openvla.settings import ActionConfig, InputConfig
from rlinf_policy_openvla.testing import tiny_checkpoint


def test_sft_module_trains_and_exports(tmp_path):
    collect_reach_demos(tmp_path / "demos", episodes=10, max_episode_steps=12, trials_per_task=4)
    torch.manual_seed(0)
    model = tiny_checkpoint(kind="oft", action_dim=2, norm_keys=["reach"], proprio_dim=4)
    policy = OpenVLAOFTPolicy(
        model_path=str(model),
        actions=ActionConfig(num_action_chunks=2),
        inputs=InputConfig(use_proprio=True),
    )
    ds = DemoDataset(tmp_path / "demos", num_action_chunks=2, only_success=False)
    obs, actions = DemoDataset.collate([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        before = float(policy.sft_loss(obs, actions))
    module = SFTModule(policy, str(tmp_path / "demos"), batch_size=16, optim=OptimConfig(lr=3e-3, clip_grad=None),
                       val_fraction=0.0, only_success=False, export_dir=str(tmp_path / "sft_policy"))  # fmt: skip
    trainer = pl.Trainer(max_epochs=10, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(module)
    with torch.no_grad():
        after = float(policy.sft_loss(obs, actions))
    assert after < 0.7 * before, (before, after)
    exported = OpenVLAOFTPolicy(model_path=str(tmp_path / "sft_policy"))
    assert exported.use_proprio and exported.num_action_chunks == 2 and exported.unnorm_key == "reach"
    policy.eval()
    with torch.no_grad():
        torch.testing.assert_close(exported.act(obs, do_sample=False).actions, policy.act(obs, do_sample=False).actions)
