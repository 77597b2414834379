"""The call tree as text (``python -m ocular --tree``): per thread, each node's total and self time and
its calls, children by total time, pruned to what matters, the way pyinstrument's console view reads."""


def _fmt(ns):
    if ns >= 1e9:
        return f"{ns / 1e9:.2f}s"
    if ns >= 1e6:
        return f"{ns / 1e6:.1f}ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.0f}us"
    return f"{ns:.0f}ns"


def format_tree(tree, min_fraction=0.01, max_depth=40, width=120):
    """Lines of the call tree: nodes under min_fraction of their thread's total are left out (their count
    is said), deeper than max_depth cut."""
    out = []
    for t in tree.threads:
        root = t["root"]
        kids = tree.children[root]
        total = sum(tree.total[c] for c in kids)
        if not kids or total <= 0:
            continue
        out.append(f"{tree.thread_label(t)}: {_fmt(total)}   (total  self  calls  function)")
        hidden = 0
        stack = [(c, 0) for c in sorted(kids, key=lambda c: tree.total[c])]
        while stack:
            n, d = stack.pop()
            if tree.total[n] < min_fraction * total or d > max_depth:
                hidden += 1
                continue
            file, line, name = tree.func(tree.code[n])
            where = f"{file}:{line}" if file != "~" else "C"
            out.append(f"{'  ' * d}{_fmt(tree.total[n]):>8} {_fmt(tree.self_ns[n]):>7} {tree.calls[n]:>6}  "
                       f"{name}  ({where})"[:width])
            stack.extend((c, d + 1) for c in sorted(tree.children[n], key=lambda c: tree.total[c]))
        if hidden:
            out.append(f"  ({hidden} smaller node{'s' if hidden != 1 else ''} under {min_fraction:.0%} of the thread "
                       "left out)")
    return "\n".join(out) if out else "(no calls recorded)"


def tree_text(rec):
    """Render the recording's call tree and format it."""
    from .. import _ocular
    from . import RENDER_TREE, CallTree

    _ocular._render(rec, RENDER_TREE, None, False)
    return format_tree(CallTree(_ocular._calltree()))
