"""Folded stacks (.folded, .collapsed): ``a;b;c N`` per line, N the microseconds of self time of that
stack (rounded; stacks under half a microsecond are left out), one line per distinct stack, sorted.
The format flamegraph.pl, inferno, speedscope and Brendan Gregg's tools read.

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
    """{stack string: self ns}"""
    names = {}
    out = {}
    for t in tree.threads:
        prefix = [_BAD.sub(" ", tree.thread_label(t)).replace(";", ":")] if thread_roots else []
        path = []
        for n, d in tree.walk(t["root"]):
            del path[d:]
            c = tree.code[n]
            if c not in names:
                names[c] = frame_name(tree, c)
            path.append(names[c])
            if tree.self_ns[n]:
                s = ";".join(prefix + path)
                out[s] = out.get(s, 0) + tree.self_ns[n]
    return out


def write(tree, path, options):
    folded = lines(tree, options.get("thread_roots", False))
    with open(path, "w", encoding="utf-8") as fh:
        for stack in sorted(folded):
            us = round(folded[stack] / 1000)
            if us:
                fh.write(f"{stack} {us}\n")
