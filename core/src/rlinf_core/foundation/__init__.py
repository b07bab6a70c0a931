"""Generic helpers every layer may import: lazy package attributes, optional dependencies, config value
checks, the Trainer a module is attached to. Imports nothing of rlinf_core and nothing heavy."""
