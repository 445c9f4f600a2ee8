#!/usr/bin/env python3
"""mixed_images.py DIR: six small RGB PNGs of six sizes and aspects (12x6 ... 4x6) in DIR, the
image folder that the pack tests train on (--max-tokens)."""
import struct
import sys
import zlib


def png(path, w, h, seed):  # RGB, 8 bits, no filter
    rows = b''.join(b'\0' + bytes((x * 7 + y * 13 + seed * 29 + c * 50) % 256 for x in range(w) for c in range(3)) for y in range(h))
    chunk = lambda t, d: struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d))
    open(path, 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0)) +
                           chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b''))


for i, (w, h) in enumerate([(12, 6), (8, 8), (6, 14), (16, 4), (10, 10), (4, 6)]):
    png(f'{sys.argv[1]}/img{i}.png', w, h, i)
