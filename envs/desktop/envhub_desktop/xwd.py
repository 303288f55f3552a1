"""Screenshots from Xvfb's own framebuffer file (`Xvfb -fbdir`), turned into PNG on the host.

Xvfb keeps its screen as an XWD image in a memory-mapped file; the sandbox's /tmp is a host directory,
so the host reads the pixels with no process in the sandbox at all (measured against running `xwd` in
the sandbox in docs/desktop.md). Pillow has no XWD reader, hence this header parser: the format is
a fixed big-endian header, a colormap, then rows of pixels.
"""

from __future__ import annotations

import io
import struct

from PIL import Image

HEADER = struct.Struct(">25I")
"""XWD version 7's fixed header: 25 big-endian 32-bit fields (X11's XWDFileHeader)."""
XWD_VERSION = 7
ZPIXMAP = 2
COLORMAP_ENTRY = 12


class BadFramebuffer(ValueError):
    """The framebuffer file is not the 24/32-bit ZPixmap XWD image Xvfb writes."""


def xwd_to_image(data: bytes) -> Image.Image:
    """An RGB image of an XWD dump as Xvfb writes it (depth 24, 32 bits per pixel, TrueColor)."""
    if len(data) < HEADER.size:
        raise BadFramebuffer(f"{len(data)} bytes is shorter than an XWD header")
    f = HEADER.unpack_from(data)
    header_size, version, pixmap_format, depth, width, height = f[0], f[1], f[2], f[3], f[4], f[5]
    byte_order, bits_per_pixel, bytes_per_line, ncolors = f[7], f[11], f[12], f[19]
    red_mask = f[14]  # XWDFileHeader: ..., visual_class (13), red_mask (14), green_mask, blue_mask
    if version != XWD_VERSION or pixmap_format != ZPIXMAP or bits_per_pixel != 32 or depth < 24:
        raise BadFramebuffer(
            "expected an XWD v7 ZPixmap of 32 bits per pixel (Xvfb -screen 0 WxHx24), got "
            f"version {version}, format {pixmap_format}, depth {depth}, {bits_per_pixel} bits per pixel"
        )
    start = header_size + ncolors * COLORMAP_ENTRY
    end = start + bytes_per_line * height
    if len(data) < end:
        raise BadFramebuffer(f"the framebuffer holds {len(data)} bytes, {end} expected for {width}x{height}")
    # Pixels are 32-bit words in the file's byte order; red's mask says where red sits in the word.
    little = byte_order == 0
    raw = (
        ("BGRX" if red_mask == 0xFF0000 else "RGBX")
        if little
        else ("XRGB" if red_mask == 0xFF0000 else "XBGR")
    )
    image = Image.frombuffer("RGB", (width, height), data[start:end], "raw", raw, bytes_per_line, 1)
    return image if image.mode == "RGB" else image.convert("RGB")


def xwd_to_png(data: bytes, *, compress_level: int = 1) -> bytes:
    """PNG bytes of an XWD dump; level 1 because a screenshot per step is on the hot path and desktop
    frames (flat colours, text) compress well already at that level."""
    out = io.BytesIO()
    xwd_to_image(data).save(out, format="PNG", compress_level=compress_level)
    return out.getvalue()
