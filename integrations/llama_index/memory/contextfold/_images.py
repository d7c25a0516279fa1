"""Image sizes read from the first bytes of a base64 PNG, GIF or JPEG.

Token counting prices an image by its size (OpenAI's tile formula); LlamaIndex's
``ImageBlock`` does not carry it, so it is read from the header when the bytes are there.
"""

from __future__ import annotations

import base64
import binascii
import struct

__all__ = ["image_size"]

_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


def image_size(b64: str) -> tuple[int, int] | None:
    """Width and height from a base64 PNG, GIF or JPEG header, when they can be read."""
    prefix = b64[: 1 << 16]
    try:
        head = base64.b64decode(prefix[: len(prefix) // 4 * 4])
    except (binascii.Error, ValueError):
        return None
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return int(w), int(h)
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return int(w), int(h)
    if head[:2] == b"\xff\xd8":
        return _jpeg_size(head)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        length = struct.unpack(">H", data[i + 2 : i + 4])[0]
        if marker in _SOF:
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(w), int(h)
        i += 2 + length
    return None
