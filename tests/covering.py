"""covering.py: test cells that cover every pair of values of any two dimensions (a pairwise
covering), so that a test meets each interaction of two settings at least once in far fewer cells
than the whole product. Greedy: each time the cell that covers the most pairs not yet covered (the
first such in the dimensions' order), until none is left. Deterministic."""
import itertools


def covering(dims, allowed=lambda cell: True):
    """the cells (tuples, one value of each dimension) that cover every pair of values of two
    dimensions that some allowed cell holds"""
    cells = [c for c in itertools.product(*dims) if allowed(c)]

    def pairs(c):
        return {(i, c[i], j, c[j]) for i, j in itertools.combinations(range(len(dims)), 2)}
    todo = set().union(*(pairs(c) for c in cells))
    chosen = []
    while todo:
        best = max(cells, key=lambda c: len(pairs(c) & todo))
        chosen.append(best)
        todo -= pairs(best)
    return chosen
