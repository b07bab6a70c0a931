"""Evaluate a policy served elsewhere: :class:`~rlinf_core.remote.policy.RemotePolicy` (``rlinf validate`` with a
``ws://`` or ``http://`` url; docs/remote_eval.md).

- :mod:`.policy`: the eval-only ``Policy``: checks, action chunks, retries.
- :mod:`.requests`: observations -> requests, ``rlinf serve``'s mappings inverted.
- :mod:`.client`: a pool of connections on an event loop of its own, reconnects with backoff.
- :mod:`.transport`: one connection: openpi's websocket protocol, OpenVLA's REST ``/act``.
- :mod:`.images`: openpi's client-side resize with padding.

Client dependencies: ``pip install 'rlinf-core[serve]'`` (websockets, msgpack, json-numpy).
"""
