"""The server's msgpack-numpy codec against openpi-client's own (``openpi_client.msgpack_numpy``)."""

from __future__ import annotations

import numpy as np
import pytest

from rlinf_core.serve.codecs import msgpack_dumps, msgpack_loads, msgpack_packer
from rlinf_core.serve.errors import BadRequest

openpi_msgpack = pytest.importorskip("openpi_client.msgpack_numpy", reason="scripts/install.sh installs openpi-client")

SAMPLE = {
    "observation/image": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
    "observation/state": np.linspace(-1, 1, 8, dtype=np.float64),
    "nested": {"q": np.arange(3, dtype=np.int16)[::-1].copy(), "scalar": np.float32(0.25), "flag": True},
    "prompt": "open the drawer",
}


def _assert_same(a, b) -> None:
    assert type(a) is type(b) or isinstance(a, np.generic), (type(a), type(b))
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and np.shape(a) == np.shape(b) and np.array_equal(a, b)
    else:
        assert a == b


def test_reads_what_openpi_client_packs_and_openpi_client_reads_what_it_packs():
    _assert_same(msgpack_loads(openpi_msgpack.packb(SAMPLE)), SAMPLE)
    _assert_same(openpi_msgpack.unpackb(msgpack_dumps(SAMPLE)), SAMPLE)


def test_refuses_object_arrays_and_malformed_array_maps():
    fake_object = openpi_msgpack.packb({"x": {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O", b"shape": [1]}})
    with pytest.raises(BadRequest, match="dtype object"):
        msgpack_loads(fake_object)
    short = openpi_msgpack.packb({"x": {b"__ndarray__": True, b"data": b"\0" * 3, b"dtype": "<f4", b"shape": [4]}})
    with pytest.raises(BadRequest, match="malformed msgpack-numpy array"):
        msgpack_loads(short)
    with pytest.raises(TypeError, match="cannot send"):
        msgpack_dumps({"x": np.array([object()])})


@pytest.mark.parametrize("shape", [[-1], [2, -3], [True], [1.0], "4", {"a": 4}, None, 7, [[2]]], ids=lambda s: repr(s))
def test_an_array_map_with_a_shape_that_is_not_sizes_is_refused(shape):
    packed = openpi_msgpack.packb({"x": {b"__ndarray__": True, b"data": b"\0" * 4, b"dtype": "|u1", b"shape": shape}})
    with pytest.raises(BadRequest, match="shape must be a list of sizes"):
        msgpack_loads(packed)


def test_dtypes_spelled_any_way_decode_and_a_reused_packer_writes_what_msgpack_dumps_does():
    for spec in ("<f4", b"<f4", "float32", "<f4"):  # the last one from the cache
        packed = openpi_msgpack.packb({"x": {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": spec, b"shape": [2]}})
        x = msgpack_loads(packed)["x"]
        assert x.dtype == np.float32 and x.shape == (2,)
    pack = msgpack_packer().pack
    for _ in range(2):
        assert pack(SAMPLE) == msgpack_dumps(SAMPLE)
        _assert_same(openpi_msgpack.unpackb(pack(SAMPLE)), SAMPLE)
