"""Folded stacks (.folded, .collapsed): ``a;b;c N`` per line, N the nanoseconds of self time of that
stack (an integer, exact: the counts add up to the recording's time, and a stack of a few hundred
nanoseconds is not left out; a stack with no self time is), one line per distinct stack, sorted.
The format flamegraph.pl, inferno, speedscope and Brendan Gregg's tools read (``flamegraph.pl
--countname=ns`` labels the counts).

A frame is ``qualname (file:line)``; ';' in a name becomes ':' and whitespace a space, so the line
stays parseable.  With the thread_roots option each stack starts with its thread (``name (tid)``);
without it the threads' identical stacks are summed.
"""

import os
import re

_BAD = re.compile(r"[;\s]")


def frame_name(tree, code):
    file, line, name = tree.func(code)
    text = f"{name} ({os.path.basename(file)}:{line})" if line else f"{name} ({os.path.basename(file)})"
    return _BAD.sub(lambda m: ":" if m.group() == ";" else " ", text)


def lines(tree, thread_roots=False):
    """{stack string: self ns}, for the stacks with self time (what write() shows).  Identical stacks (the threads', or frames of the same name) are summed first, as a
    tree (a node: its parent and its frame's name), so a deep recursion does not keep a string for each
    of its stacks."""
    names = {}
    merged = {}  # (summed parent, frame name) -> summed node
    self_ns = []
    parent_of = []
    name_of = []
    for t in tree.threads:
        base = -1
        if thread_roots:
            label = _BAD.sub(" ", tree.thread_label(t)).replace(";", ":")
            base = merged.get((-1, label))
            if base is None:
                base = merged[(-1, label)] = len(self_ns)
                self_ns.append(0)
                parent_of.append(-1)
                name_of.append(label)
        path = [base]
        for n, d in tree.walk(t["root"]):
            del path[d + 1:]
            c = tree.code[n]
            name = names.get(c)
            if name is None:
                name = names[c] = frame_name(tree, c)
            key = (path[d], name)
            m = merged.get(key)
            if m is None:
                m = merged[key] = len(self_ns)
                self_ns.append(0)
                parent_of.append(path[d])
                name_of.append(name)
            self_ns[m] += tree.self_ns[n]
            path.append(m)
    del merged
    children = [[] for _ in self_ns]
    roots = []
    for m, p in enumerate(parent_of):
        (children[p] if p >= 0 else roots).append(m)
    # Each shown stack is the names on the path joined; every 64 levels the path's string so far is kept
    # (cut[d], for d + 1 a multiple of 64), so a stack costs its own length and what is kept stays small
    # however deep the recursion (keeping every level's string would hold the square of the depth).
    out = {}
    path = []
    cut = {}
    todo = [(m, 0) for m in reversed(roots)]
    while todo:
        m, d = todo.pop()
        del path[d:]
        path.append(name_of[m])
        last = (d + 1) // 64 * 64 - 1  # the deepest kept level at or above d
        if last == d:
            cut[d] = (cut[d - 64] + ";" if d >= 64 else "") + ";".join(path[d - 63:])
        if self_ns[m]:
            if last == d:
                out[cut[d]] = self_ns[m]
            elif last < 0:
                out[";".join(path)] = self_ns[m]
            else:
                out[cut[last] + ";" + ";".join(path[last + 1:])] = self_ns[m]
        todo.extend((k, d + 1) for k in reversed(children[m]))
    return out


def write(tree, path, options):
    folded = lines(tree, options.get("thread_roots", False))
    with open(path, "w", encoding="utf-8") as fh:
        for stack in sorted(folded):
            fh.write(f"{stack} {folded[stack]}\n")
