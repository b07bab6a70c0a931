"""Rollout collection and storage."""
