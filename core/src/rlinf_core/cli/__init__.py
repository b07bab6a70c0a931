"""The ``rlinf`` command (:mod:`rlinf_core.cli.main`) and everything only it uses: errors, shipped configs, plots,
memory, coevolve."""
