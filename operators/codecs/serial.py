"""The codec file format: magic, version, JSON header, arrays, sha256 (see the package
docstring); a damaged file is refused with ``CodecFileError`` naming it."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np

from mvr.operators.codecs.base import Codec, CodecFileError, Transform
from mvr.operators.codecs.quantizers import Composed
from mvr.operators.codecs.registry import FAMILIES, REFINEMENTS, TRANSFORMS

MAGIC = b"MVRCODEC"
FORMAT_VERSION = 1

_PREFIX = struct.Struct("<8sIQ")  # magic, format version, header length


def serialise(codec: Codec) -> bytes:
    stages, arrays_meta, blobs = [], [], []
    offset = 0
    for i, stage in enumerate(codec.stages()):
        params, arrays = stage._state()
        stages.append({"family": stage.family, "params": params})
        for key in sorted(arrays):
            a = np.asarray(arrays[key])
            a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<") if a.dtype.itemsize > 1 else a.dtype)
            data = a.tobytes()
            arrays_meta.append({"name": f"{i}.{key}", "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset, "nbytes": len(data)})
            blobs.append(data)
            offset += len(data)
    header = {
        "format": "mvr-codec",
        "name": codec.name,
        "dim_in": codec.dim_in,
        "dim_out": codec.dim_out,
        "bytes_per_vector": codec.bytes_per_vector,
        "stages": stages,
        "arrays": arrays_meta,
    }
    hb = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    body = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(hb)) + hb + b"".join(blobs)
    return body + hashlib.sha256(body).digest()


def deserialise(data: bytes, source: str) -> Codec:
    def bad(why: str) -> CodecFileError:
        return CodecFileError(f"codec file {source}: {why}")

    if len(data) < _PREFIX.size + 32:
        raise bad(f"truncated ({len(data)} bytes, not even a header)")
    magic, version, hlen = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise bad("not an mvr codec file (bad magic bytes)")
    if version != FORMAT_VERSION:
        raise bad(f"format version {version}, this mvr reads {FORMAT_VERSION}")
    body, digest = data[:-32], data[-32:]
    try:
        header = json.loads(data[_PREFIX.size : _PREFIX.size + hlen])
        payload_size = sum(int(a["nbytes"]) for a in header["arrays"])
    except (ValueError, KeyError, TypeError):
        header, payload_size = None, None
    if header is not None and len(data) < _PREFIX.size + hlen + payload_size + 32:
        raise bad(f"truncated ({len(data)} bytes, the header describes {_PREFIX.size + hlen + payload_size + 32})")
    if hashlib.sha256(body).digest() != digest:
        raise bad("corrupted (sha256 mismatch)" if header is not None else "corrupted (unreadable header)")
    if header is None or len(data) != _PREFIX.size + hlen + payload_size + 32:
        raise bad("corrupted (header and size disagree)")
    start = _PREFIX.size + hlen
    try:
        arrays: list[dict[str, np.ndarray]] = [{} for _ in header["stages"]]
        for a in header["arrays"]:
            i, _, key = a["name"].partition(".")
            raw = data[start + a["offset"] : start + a["offset"] + a["nbytes"]]
            arrays[int(i)][key] = np.frombuffer(raw, dtype=np.dtype(a["dtype"])).reshape(a["shape"]).copy()
        built: list[Codec | Transform] = []
        for st, arr in zip(header["stages"], arrays):
            cls = FAMILIES.get(st["family"]) or REFINEMENTS.get(st["family"]) or TRANSFORMS.get(st["family"])
            if cls is None:
                raise ValueError(f"unknown family {st['family']!r}")
            built.append(cls._from_state(st["params"], arr))
        # the stages as ``serialise`` writes them (``Codec.stages``): a codec, or a transform then a codec
        if len(built) == 1 and isinstance(built[0], Codec):
            codec: Codec = built[0]
        elif len(built) == 2 and isinstance(built[0], Transform) and isinstance(built[1], Codec):
            codec = Composed(built[0], built[1])
        else:
            raise ValueError(f"stages {[st['family'] for st in header['stages']]}: not a codec, nor a transform then a codec")
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise bad(f"inconsistent content ({e})") from None
    if (codec.name, codec.dim_in, codec.dim_out, codec.bytes_per_vector) != (header["name"], header["dim_in"], header["dim_out"], header["bytes_per_vector"]):
        raise bad(f"header says {header['name']} ({header['dim_in']} → {header['dim_out']}, {header['bytes_per_vector']} B), the content is {codec!r}")
    return codec


def to_bytes(codec: Codec) -> bytes:
    """The codec as one deterministic byte string (the format above)."""
    return serialise(codec)


def from_bytes(data: bytes, source: str = "<bytes>") -> Codec:
    """The codec ``to_bytes`` wrote; ``CodecFileError`` naming ``source`` when ``data`` is
    truncated, corrupted or not a codec."""
    return deserialise(bytes(data), source)
