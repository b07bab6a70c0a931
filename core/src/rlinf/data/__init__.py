"""Datasets: demonstrations for supervised fine-tuning."""

from rlinf.data.demos import DemoDataset, DemoWriter, read_meta

__all__ = ["DemoDataset", "DemoWriter", "read_meta"]
