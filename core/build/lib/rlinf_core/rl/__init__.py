"""The RL loop: the LightningModule, rollout collection and storage, evaluation, metrics and algorithms."""
