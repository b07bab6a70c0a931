"""Plumbing shared by VLA policy plugins: Hugging Face-layout weights, value head, LoRA, norm stats."""
