"""Scalar codecs: ``float16`` (the reference) and ``int8`` (a scale a vector)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from mvr.operators.codecs.base import Codec
from mvr.operators.kernels import half_to_float32


class Float16(Codec):
    """IEEE half floats, little-endian: 2·d bytes. Per value |x - x̂| ≤ 2^-11·|x| (round to
    nearest, 11 significant bits) for |x| ≥ 2^-14, and ≤ 2^-25 below (subnormals)."""

    family = "float16"

    def __init__(self, dim: int) -> None:
        self.dim_in = self.dim_out = dim
        self.bytes_per_vector = 2 * dim

    @property
    def name(self) -> str:
        return "float16"

    @classmethod
    def fit(cls, arg: Optional[int], sample: np.ndarray, **_: Any) -> "Float16":
        return cls(sample.shape[1])

    @staticmethod
    def spec_bytes(arg: Optional[int], dim: int, **_: Any) -> int:
        return 2 * dim

    def _encode(self, x: np.ndarray) -> np.ndarray:
        return x.astype("<f2").view(np.uint8)

    def _decode(self, codes: np.ndarray) -> np.ndarray:
        out = np.empty((len(codes), self.dim_out), np.float32)
        self._decode_into(np.ascontiguousarray(codes), out)
        return out

    def _decode_into(self, codes: np.ndarray, out: np.ndarray) -> None:
        half_to_float32(codes.view("<f2"), out)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"dim": self.dim_in}, {}

    @classmethod
    def _from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Float16":
        return cls(int(params["dim"]))


class Int8(Codec):
    """Per vector a scale s = max_i |x_i| / 127 (float32, 4 bytes) and q_i = round(x_i / s)
    as int8: d + 4 bytes. Decoded x̂_i = q_i·s, so |x_i - x̂_i| ≤ s/2 for every value (up to
    float32 rounding of x_i / s and q_i·s). Decodes are not renormalised."""

    family = "int8"

    def __init__(self, dim: int) -> None:
        self.dim_in = self.dim_out = dim
        self.bytes_per_vector = dim + 4

    @property
    def name(self) -> str:
        return "int8"

    @classmethod
    def fit(cls, arg: Optional[int], sample: np.ndarray, **_: Any) -> "Int8":
        return cls(sample.shape[1])

    @staticmethod
    def spec_bytes(arg: Optional[int], dim: int, **_: Any) -> int:
        return dim + 4

    def _encode(self, x: np.ndarray) -> np.ndarray:
        scale = (np.abs(x).max(axis=1) / 127.0).astype(np.float32)
        safe = np.where(scale > 0, scale, np.float32(1.0))
        q = np.clip(np.rint(x / safe[:, None]), -127, 127).astype(np.int8)
        out = np.empty((len(x), self.bytes_per_vector), dtype=np.uint8)
        out[:, :4] = scale.astype("<f4")[:, None].view(np.uint8)
        out[:, 4:] = q.view(np.uint8)
        return out

    def _decode(self, codes: np.ndarray) -> np.ndarray:
        out = np.empty((len(codes), self.dim_out), np.float32)
        self._decode_into(codes, out)
        return out

    def _decode_into(self, codes: np.ndarray, out: np.ndarray) -> None:
        scale = np.ascontiguousarray(codes[:, :4]).view("<f4").astype(np.float32)  # (n, 1)
        np.multiply(codes[:, 4:].view(np.int8), scale, out=out)  # int8 → float32 exactly, one rounding

    @staticmethod
    def scales(codes: np.ndarray) -> np.ndarray:
        """(n,) float32: each code's scale s (the error bound is s/2 per value)."""
        return np.ascontiguousarray(codes[:, :4]).view("<f4").reshape(-1).astype(np.float32)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return {"dim": self.dim_in}, {}

    @classmethod
    def _from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> "Int8":
        return cls(int(params["dim"]))
