"""Pieces of the RL LightningModule (:class:`rlinf.RLModule`) kept in their own rooms: the
optimizer and schedule (shared with :class:`rlinf.sft.SFTModule`), the micro-batch schedule,
metric reduction across ranks and the evaluation passes."""
