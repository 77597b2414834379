"""Firefox Profiler output (.gecko.json): the profiler's processed profile format, the shape Python
3.15's ``profiling.sampling --gecko`` writes (meta.preprocessedProfileVersion 57), with tracing
weights instead of samples.

One thread per recorded thread.  Every call-tree node with self time is one sample whose stack is the
node's path and whose weight is its self time in milliseconds (``weightType: "tracing-ms"``), so the
profiler's call tree, flame graph and function list show exact self and running times.  The samples'
times (ms from the first event of the recording) lay each thread's tree out in call order from the
thread's first event (each sample starts where the previous one ended): the stack chart reads as a flame graph of that thread, not as its
chronology (the .json/.pftrace timeline is the chronology).  Strings are shared (shared.stringArray);
funcs are functions (name, file, first line), a frame is a function at its first line.  The process
name (each thread's processName, meta.product) is the one the recording holds: the traced program's
(``python3.12 script.py``, or a --follow'ed process's title).
"""

import json
import os
import platform

CATEGORIES = [
    {"name": "Other", "color": "grey", "subcategories": ["Other"]},
    {"name": "Python", "color": "yellow", "subcategories": ["Other"]},
    {"name": "Ocular", "color": "red", "subcategories": ["Other"]},
]
PYTHON, OCULAR = 1, 2
PROCESSED_VERSION = 57
GECKO_VERSION = 32


class _Strings:
    def __init__(self):
        self.index = {}
        self.array = []

    def __call__(self, s):
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.array)
            self.array.append(s)
        return i


def _table(columns, rows):
    t = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
    t["length"] = len(rows)
    return t


def _thread(tree, t, strings, pid, is_main, start_ns, process_name):
    funcs, frames, stacks, samples = [], [], [], []
    func_of, resource_of, resources = {}, {}, []
    frame_of = {}
    stack_of = {}  # node -> stack index
    time_ms = (t["first_ns"] - start_ns) / 1e6
    for n, d in tree.walk(t["root"]):
        code = tree.code[n]
        file, line, name = tree.func(code)
        cat = OCULAR if file == "<ocular>" else PYTHON
        key = (file, line, name)
        if key not in func_of:
            if file not in resource_of:
                resource_of[file] = len(resources)
                resources.append((None, strings(os.path.basename(file) or file), None, 1))
            func_of[key] = len(funcs)
            funcs.append((strings(name), True, False, resource_of[file], strings(file), line or None, None))
        f = func_of[key]
        if f not in frame_of:
            frame_of[f] = len(frames)
            frames.append((-1, cat, 0, f, None, None, line or None, None, 0, None))
        parent = tree.parent[n]
        stack_of[n] = len(stacks)
        stacks.append((frame_of[f], cat, 0, stack_of.get(parent)))
        if tree.self_ns[n]:
            w = tree.self_ns[n] / 1e6
            samples.append((stack_of[n], time_ms, w))
            time_ms += w
    return {
        "name": t["name"] or f"thread {t['tid']}",
        "isMainThread": is_main,
        "processType": "default",
        "processName": process_name,
        "processStartupTime": 0,
        "processShutdownTime": None,
        "registerTime": 0,
        "unregisterTime": None,
        "pausedRanges": [],
        "pid": str(pid),
        "tid": t["tid"],
        "samples": dict(_table(("stack", "time", "weight"), samples), weightType="tracing-ms"),
        "stackTable": _table(("frame", "category", "subcategory", "prefix"), stacks),
        "frameTable": _table(("address", "category", "subcategory", "func", "innerWindowID", "implementation",
                              "line", "column", "inlineDepth", "nativeSymbol"), frames),
        "funcTable": _table(("name", "isJS", "relevantForJS", "resource", "fileName", "lineNumber", "columnNumber"),
                            funcs),
        "resourceTable": _table(("lib", "name", "host", "type"), resources),
        "nativeSymbols": _table(("libIndex", "address", "name", "functionSize"), []),
        "markers": _table(("data", "name", "startTime", "endTime", "phase", "category"), []),
    }


def build(tree, pid=0, process_name="python"):
    strings = _Strings()
    start_ns = min((t["first_ns"] for t in tree.threads), default=0)
    end_ns = max((t["last_ns"] for t in tree.threads), default=0)
    threads = [_thread(tree, t, strings, pid, t["tid"] == pid or t["name"] == "MainThread", start_ns, process_name)
               for t in tree.threads]
    return {
        "meta": {
            "version": GECKO_VERSION,
            "preprocessedProfileVersion": PROCESSED_VERSION,
            "interval": 1,
            "startTime": 0,
            "profilingStartTime": 0,
            "profilingEndTime": (end_ns - start_ns) / 1e6,
            "processType": 0,
            "product": process_name + (f" (partial: {tree.note})" if getattr(tree, "note", None) else ""),
            "importedFrom": "Ocular",
            "symbolicated": True,
            "stackwalk": 0,
            "debug": 0,
            "categories": CATEGORIES,
            "markerSchema": [],
            "platform": platform.system(),
            "oscpu": platform.machine(),
            "abi": platform.machine(),
            "toolkit": "",
            "misc": "Ocular deterministic tracer: weights are exact self times",
            "appBuildID": "",
            "CPUName": "",
            "physicalCPUs": os.cpu_count() or 0,
            "logicalCPUs": os.cpu_count() or 0,
            "extensions": {"id": [], "name": [], "baseURL": [], "length": 0},
        },
        "libs": [],
        "pages": [],
        "threads": threads,
        "shared": {"stringArray": strings.array, "sources": {"length": 0, "uuid": [], "filename": []}},
    }


def write(tree, path, options):
    rendered = options.get("rendered") or {}
    doc = build(tree, rendered.get("pid", 0), rendered.get("process_name") or "python")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, separators=(",", ":"))
