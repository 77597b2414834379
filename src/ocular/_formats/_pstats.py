"""pstats output (.pstats, .prof): the marshal data ``pstats.Stats(path)`` loads, as cProfile writes it.

One entry per function, keyed (filename, first line, qualified name):
``(primitive calls, total calls, tottime, cumtime, callers)`` with callers
``{caller key: (total calls, primitive calls, tottime, cumtime)}``, times in seconds.  Counted as
cProfile counts them: every begin is a call (a generator's resume too); a call is primitive unless
another activation of the same function is open below it, and only primitive calls add to cumtime
(so recursion is not counted twice); the same rule applies per (caller, callee) edge.  In the call
tree "open below it" is a static property of a node (an ancestor with the same function), so the
counts come from one walk of the tree.  Threads are summed.
"""

import marshal


def build(tree):
    """The stats dict pstats expects."""
    keys = {}  # code id -> key (several ids may share one key: they are one function to pstats)
    stats = {}

    def key(code):
        k = keys.get(code)
        if k is None:
            k = keys[code] = tree.func(code)
        return k

    for t in tree.threads:
        active = {}       # function key -> activations open on the current path
        active_edge = {}  # (caller key, callee key) -> the same for edges
        # iterative DFS with explicit exit markers
        stack = [(c, None, False) for c in reversed(tree.children[t["root"]])]
        while stack:
            n, caller, leaving = stack.pop()
            f = key(tree.code[n])
            edge = (caller, f)
            if leaving:
                active[f] -= 1
                if caller is not None:
                    active_edge[edge] -= 1
                continue
            calls, tot, slf = tree.calls[n], tree.total[n] / 1e9, tree.self_ns[n] / 1e9
            st = stats.get(f)
            if st is None:
                st = stats[f] = [0, 0, 0.0, 0.0, {}]
            st[1] += calls
            st[2] += slf
            if not active.get(f):
                st[0] += calls
                st[3] += tot
            if caller is not None:
                ce = st[4].get(caller)
                if ce is None:
                    ce = st[4][caller] = [0, 0, 0.0, 0.0]
                ce[0] += calls
                ce[2] += slf
                if not active_edge.get(edge):
                    ce[1] += calls
                    ce[3] += tot
                active_edge[edge] = active_edge.get(edge, 0) + 1
            active[f] = active.get(f, 0) + 1
            stack.append((n, caller, True))
            stack.extend((c, f, False) for c in reversed(tree.children[n]))
    return {f: (st[0], st[1], st[2], st[3], {c: tuple(v) for c, v in st[4].items()}) for f, st in stats.items()}


def write(tree, path, options):
    with open(path, "wb") as fh:
        marshal.dump(build(tree), fh)
