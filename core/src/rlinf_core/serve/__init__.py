"""``rlinf serve``: a trained policy behind the protocols robot-side clients already speak.

- :mod:`.websocket_server`: openpi's websocket policy server (``openpi-client``'s ``WebsocketClientPolicy``).
- :mod:`.rest_server`: OpenVLA's REST deploy server (``POST /act`` with a json-numpy payload).
- :mod:`.mapping`: protocol observation dicts -> :class:`~rlinf_core.contracts.observation.Observation`
  (named presets plus YAML mappings).
- :mod:`.loading`: the policy from an exported directory or a run's checkpoint.
- :mod:`.runner`: one model thread shared by all connections (optional batching), per-request timings.

Server dependencies: ``pip install 'rlinf-core[serve]'``.
"""
