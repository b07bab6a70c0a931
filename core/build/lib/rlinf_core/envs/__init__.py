"""Env contract and helpers."""
