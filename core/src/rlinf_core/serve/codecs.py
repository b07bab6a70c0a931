"""Wire formats: openpi's msgpack-with-numpy and OpenVLA's json-numpy.

The msgpack layout is the one of openpi-client's ``msgpack_numpy`` (openpi:
packages/openpi-client/src/openpi_client/msgpack_numpy.py:21-52): an array is a map
``{b"__ndarray__": True, b"data": raw bytes, b"dtype": dtype.str, b"shape": shape}``, a numpy scalar
``{b"__npgeneric__": True, b"data": item, b"dtype": dtype.str}``. It is written here (not imported from
openpi-client, which pins numpy<2) and refuses object / void / complex dtypes, as openpi's packer does.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from rlinf_core.serve.errors import BadRequest, serve_dependency
from rlinf_core.serve.security import clip

_REFUSED_KINDS = ("V", "O", "c")
_DTYPES: dict[Any, np.dtype] = {}  # dtype strings seen (a few: "|u1", "<f4"...), parsed once


@functools.cache
def _msgpack():
    return serve_dependency("msgpack")


@functools.cache
def _json_numpy():
    return serve_dependency("json_numpy")


def _dtype(spec: Any) -> np.dtype:
    dtype = _DTYPES.get(spec) if isinstance(spec, (str, bytes)) else None
    if dtype is None:
        dtype = np.dtype(spec)
        if dtype.kind in _REFUSED_KINDS:
            raise BadRequest(f"arrays of dtype {dtype} are not accepted")
        if isinstance(spec, (str, bytes)) and len(_DTYPES) < 64:
            _DTYPES[spec] = dtype
    return dtype


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in _REFUSED_KINDS:
        raise TypeError(f"cannot send numpy dtype {obj.dtype}")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


def _unpack_hook(obj: dict) -> Any:
    # Called for every map of a request: the common cases (an array, a plain dict) take the fewest steps.
    if b"__ndarray__" in obj:
        try:
            spec = obj[b"dtype"]
            dtype = _DTYPES.get(spec) if type(spec) is str else None
            if dtype is None:
                dtype = _dtype(spec)
            shape = obj[b"shape"]
            _check_shape(shape)
            return np.ndarray(buffer=obj[b"data"], dtype=dtype, shape=shape)
        except BadRequest:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise BadRequest(f"malformed msgpack-numpy array ({exc})") from None
    if b"__npgeneric__" in obj:
        try:
            return _dtype(obj[b"dtype"]).type(obj[b"data"])
        except BadRequest:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise BadRequest(f"malformed msgpack-numpy array ({exc})") from None
    return obj


def msgpack_dumps(obj: Any) -> bytes:
    return _msgpack().packb(obj, default=_pack_default)


def msgpack_packer():
    """A reusable packer (``.pack(obj) -> bytes``, as :func:`msgpack_dumps`) for one thread, e.g. one connection."""
    return _msgpack().Packer(default=_pack_default)


def msgpack_loads(data: bytes) -> Any:
    msgpack = _msgpack()
    try:
        return msgpack.unpackb(data, object_hook=_unpack_hook)
    except BadRequest:
        raise
    except UnicodeDecodeError:
        raise BadRequest("the request holds a msgpack string that is not valid UTF-8 (send text as UTF-8)") from None
    except Exception as exc:  # msgpack's own ExtraData / FormatError / ValueError family
        raise BadRequest(f"the request is not msgpack-numpy (as openpi-client packs it): {exc}") from None


def json_numpy_dumps(obj: Any) -> str:
    return _json_numpy().dumps(obj)


def _check_shape(shape: Any) -> None:
    if isinstance(shape, (list, tuple)):
        for n in shape:
            if type(n) is not int or n < 0:  # noqa: E721 - bool is an int subclass, and no size
                break
        else:
            return
    raise BadRequest(f"an array's shape must be a list of sizes >= 0, got {clip(repr(shape), 80)}")


def json_numpy_loads(text: str) -> Any:
    json_numpy = _json_numpy()

    def check(obj: dict) -> dict:  # json_numpy decodes the array after this
        if "__numpy__" in obj:
            _check_shape(obj.get("shape"))  # numpy's reshape would take any negative size as -1
        return obj

    try:
        return json_numpy.loads(text, object_hook=check)
    except BadRequest:
        raise
    except RecursionError:
        raise BadRequest("the request body is nested too deeply") from None
    except Exception as exc:  # noqa: BLE001 - json / json_numpy decoding only: any failure is the body's
        raise BadRequest(f"the request body is not json-numpy JSON: {type(exc).__name__}: {clip(exc, 120)}") from None
