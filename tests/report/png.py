"""Just enough of a PNG decoder to count pixel colours in Chromium's screenshots (8-bit RGB or
RGBA, non-interlaced; the standard library has zlib but no image reader)."""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def read_rgb(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes).

    Raises:
        ValueError: not a PNG this decoder handles.
    """
    data = path.read_bytes()
    if data[:8] != SIGNATURE:
        raise ValueError("not a PNG")
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            channels = {2: 3, 6: 4}.get(colour, 0)
            if depth != 8 or not channels or interlace:
                raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}")
        elif kind == b"IDAT":
            idat += chunk
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            corner = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                line[x] = (line[x] + _paeth(left, up, corner)) & 0xFF
        previous = line
        rgb = bytes(line) if channels == 3 else bytes(
            b for i in range(0, stride, 4) for b in line[i:i + 3])
        rows.append(rgb)
    return width, height, rows


def colour_counts(path: Path) -> Counter[str]:
    """``#rrggbb`` -> number of pixels of exactly that colour."""
    _, _, rows = read_rgb(path)
    counts: Counter[str] = Counter()
    for row in rows:
        for i in range(0, len(row), 3):
            counts["#%02x%02x%02x" % (row[i], row[i + 1], row[i + 2])] += 1  # noqa: UP031
    return counts
