#!/usr/bin/env python3
"""place_grid.py GRID.png ROWS COLS SIZE: where the shape lies in each sample of a sample grid (train
sample's PNG: a label column, then ROWS x COLS cells of SIZE-pixel samples drawn 2-4x larger, on a
uniform background). Prints each row's mean centre (x, y in [0, 1] of the sample, from the top
left) of the pixels brighter than half the cell's brightest: one line a row, "x y"."""
import sys

import numpy as np
from PIL import Image

path, rows, cols, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
a = np.asarray(Image.open(path).convert('RGB')).astype(float)
background = a[0, -1]
plain = np.abs(a - background).sum(2) < 1  # the grid's background between the cells


def runs(free, at_least):  # [start, end) of the runs of non-background of at least that length
    out, i = [], 0
    while i < len(free):
        if free[i]:
            i += 1
            continue
        j = i
        while j < len(free) and not free[j]:
            j += 1
        if j - i >= at_least:
            out.append((i, j))
        i = j
    return out


up = max(1, min(4, 96 // size))
xs = runs(plain.all(axis=0), up * size - 2)[-cols:]  # the cells' columns, right of the labels
ys = runs(plain[:, xs[0][0]:].all(axis=1), up * size - 2)[:rows]
if len(xs) != cols or len(ys) != rows:
    sys.exit(f"place_grid.py: found {len(ys)} x {len(xs)} cells in {path}, not {rows} x {cols}")
for y0, y1 in ys:
    centres = []
    for x0, x1 in xs:
        cell = a[y0:y1, x0:x1].sum(2)
        yy, xx = np.nonzero(cell > cell.max() / 2)
        centres.append(((xx.mean() + 0.5) / (x1 - x0), (yy.mean() + 0.5) / (y1 - y0)))
    c = np.array(centres)
    print(f"{c[:, 0].mean():.3f} {c[:, 1].mean():.3f}")
