#!/usr/bin/env bash
# Install Mesa >= 24.3 lavapipe (software Vulkan) privately for ManiSkill on CPU-only machines.
# Usage: scripts/install_lavapipe.sh [--force] [DIR]   (see the script it runs for details)
# The installer ships inside the package, so `python -m rlinf_env_maniskill.lavapipe install` runs
# the same thing from a pip install.
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/../src/rlinf_env_maniskill/install_lavapipe.sh" "$@"
