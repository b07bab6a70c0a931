"""Lightning strategies for RL fine-tuning (DDP, FSDP2, DeepSpeed) on CPU and GPU alike."""
