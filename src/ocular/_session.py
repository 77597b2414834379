"""A tracing session as two objects: Options, start_tracing()'s arguments with every one checked before
anything starts, and Session, one running session: its options and what starting it made (the tool id and
its callbacks, the recording, the own-cost figures) or set up later (the signals it saves on, its forked
children's directory).  ``ocular._current`` holds the running Session, None when none runs: start_tracing()
makes it, stop_tracing() ends it, and a forked child goes on with a copy of its own (Session.forked_child).
How each argument is read -- ring sizes, sampling, signals, loops, the format from a suffix -- is here too."""

import os

from . import _env, _formats
from ._paths import _check_output

MODES = ("adaptive", "precise")
REPORTS = (True, False, "text", "json")
FORMATS = _formats.NAMES


def _check_patterns(name, value):
    if value is None:
        return ()
    if isinstance(value, (str, bytes)):
        raise TypeError(
            f"{name} must be a list or tuple of strings, not a bare {type(value).__name__} "
            f"(did you mean {name}=[{value!r}]?)"
        )
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list or tuple of strings, not {type(value).__name__}")
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"{name} must contain only strings, found {type(item).__name__}: {item!r}")
        if not item:
            raise ValueError(f"{name} contains an empty pattern, which would match every file")
        if "\0" in item:
            raise ValueError(f"{name} contains a pattern with a NUL character: {item!r}")
    return tuple(value)



def _start_code(fmt):
    """what _start is told: the C timeline sink to render into while recording (0 JSON, 1 Perfetto), else 2
    (nothing while recording: the recording is kept, or rendered at stop)"""
    f = _formats.BY_NAME.get(fmt)
    return f.render if f is not None and f.live else _formats.RENDER_STATS


def _format_for(output, fmt):
    if fmt is None:
        low = str(output).lower()
        if low.endswith(".gz") and not _formats.suffix_format(low):  # (.pb.gz: pprof, gzip by nature)
            inner = _format_for(low[:-3], None) if low[:-3] else "json"
            if inner != "json":  # only JSON is written gzip-compressed: the rest would be JSON under its name
                raise ValueError(f"ocular: {str(output)!r}: only Chrome JSON is written gzip-compressed (.json.gz); "
                                 f"write {str(output)[:-3]!r} and compress it")
        f = _formats.suffix_format(low)
        return f.name if f is not None else "json"
    if not isinstance(fmt, str):
        raise TypeError(f"format must be None or one of {', '.join(map(repr, FORMATS))}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: choose one of {', '.join(map(repr, FORMATS))}")
    return fmt


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
LOOP_MODES = ("iterations", "runs", "off")


def _loops_code(loops, fmt):
    if loops is None:
        return 1 if fmt == "json" else 0
    if not isinstance(loops, str) or loops not in LOOP_MODES:
        raise ValueError(f"loops must be None or one of {', '.join(map(repr, LOOP_MODES))}, got {loops!r}")
    if loops == "runs" and fmt == "perfetto":
        raise ValueError("loops='runs' (a slice per loop run) is drawn in JSON traces only; a .pftrace shows "
                         "loops as 'iterations' or 'off'")
    return LOOP_MODES.index(loops)


SAMPLING_DEFAULT = (100.0, 1.0)  # ms: a window of 1 ms every 100 ms


def _parse_sampling(sampling):
    """sampling=True/False or (period_ms, window_ms) -> (period_us, window_us), or None (off)."""
    if sampling is True:
        env = _env_sampling()
        sampling = SAMPLING_DEFAULT if env is None else env
    if sampling is False or sampling is None:
        return None
    if (not isinstance(sampling, tuple) or len(sampling) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sampling)):
        raise TypeError("sampling must be True, False or a (period_ms, window_ms) tuple")
    period, window = sampling
    if not 0 < window < period <= 3_600_000:
        raise ValueError(f"sampling needs 0 < window_ms < period_ms, got {sampling!r}")
    return int(period * 1000), max(1, int(window * 1000))


def _env_sampling():
    """OCULAR_SAMPLING=period_ms,window_ms (or 0: off) for runs started by the CLI or attach."""
    v = os.environ.get("OCULAR_SAMPLING", "").strip()
    if not v:
        return None
    if v in ("0", "off"):
        return False
    try:
        period, window = (float(x) for x in v.split(","))
        if not 0 < window < period <= 3_600_000:
            raise ValueError
    except ValueError:
        raise ValueError(f"OCULAR_SAMPLING must be PERIOD_MS,WINDOW_MS (0 < window < period) or 0, got {v!r}") from None
    return period, window


def _parse_ring(ring):
    """ring=None/0 (off), an int (bytes) or a str such as "64M" (K, M, G: powers of 1024)."""
    if ring is None:
        return 0
    if isinstance(ring, bool) or not isinstance(ring, (int, str)):
        raise TypeError(f"ring must be a size such as 64M or a number of bytes, not {type(ring).__name__}")
    if isinstance(ring, str):
        text = ring.strip().upper().removesuffix("B").removesuffix("I")
        unit = text[-1:] if text[-1:] in "KMG" else ""
        number = text[: len(text) - len(unit)]
        if not number.isdigit():
            raise ValueError(f"ring must be a size such as 64M, 512K or 1G, got {ring!r}")
        ring = int(number) * _SIZE_UNITS[unit]
    if ring < 0:
        raise ValueError(f"ring must not be negative, got {ring}")
    if ring and ring < (1 << 20):
        raise ValueError(f"ring must be at least 1M (the newest events of every thread), got {ring} bytes")
    if ring > (1 << 40):
        raise ValueError(f"ring is too large: {ring} bytes")
    return ring


SAVE_SIGNALS = ("SIGTERM", "SIGHUP")  # the signals save_on_signals= takes (SIGINT saves already: KeyboardInterrupt)


def _parse_signals(value):
    """save_on_signals= as a tuple of signal numbers (empty: off)."""
    if value is None or value is False:
        return ()
    import _signal as signal  # (the C module: signal.py's enums cost ~5 M instructions at start-up)

    if value is True:
        return tuple(int(getattr(signal, name)) for name in SAVE_SIGNALS)
    if not isinstance(value, (tuple, list, set, frozenset)):
        raise TypeError(f"save_on_signals must be True, False, None or a tuple of signals "
                        f"({', '.join('signal.' + n for n in SAVE_SIGNALS)}), not {type(value).__name__}")
    allowed = {int(getattr(signal, name)): name for name in SAVE_SIGNALS}
    out = []
    for sig in value:
        if isinstance(sig, bool) or not isinstance(sig, int):
            raise TypeError(f"save_on_signals: {sig!r} is not a signal number (signal.SIGTERM, signal.SIGHUP)")
        if int(sig) not in allowed:
            import signal

            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {int(sig)}"
            why = " (^C already saves: KeyboardInterrupt ends the program, and the trace is saved at exit)" \
                if sig == signal.SIGINT else ""
            raise ValueError(f"save_on_signals: {name} cannot be saved on; only "
                             f"{' and '.join(SAVE_SIGNALS)} can{why}")
        if int(sig) not in out:
            out.append(int(sig))
    return tuple(out)


class Options:
    """start_tracing()'s arguments, checked (TypeError/ValueError name the argument; nothing has started
    then) and in the form the engine takes them: ``output`` the trace's absolute path (None: perfetto=False,
    no file), ``format`` a format name, ``loops`` a LOOP_MODES index, ``ring`` bytes, ``sampling``
    (period_us, window_us) or None, ``signals`` signal numbers, ``exclude``/``include_only`` tuples."""

    __slots__ = ("mode", "output", "format", "report", "threshold", "exclude", "include_only", "tool_id", "ring",
                 "sampling", "signals", "loops", "thread_roots", "c_functions", "near_zero", "stall_ms")

    def __init__(self, mode, perfetto, deinstrument_threshold, exclude, include_only, output, tool_id, format,
                 report, ring, loops, thread_roots, c_functions, sampling, near_zero, save_on_signals, stall_ms):
        if not isinstance(mode, str):
            raise TypeError(f"mode must be a str, one of {', '.join(map(repr, MODES))}")
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: choose one of {', '.join(map(repr, MODES))}")
        for name, value in (("perfetto", perfetto), ("near_zero", near_zero), ("thread_roots", thread_roots)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, not {type(value).__name__}")
        if isinstance(deinstrument_threshold, bool) or not isinstance(deinstrument_threshold, int):
            raise TypeError(f"deinstrument_threshold must be an int, not {type(deinstrument_threshold).__name__}")
        if deinstrument_threshold < 0:
            raise ValueError(f"deinstrument_threshold must be >= 0 (0 = trace everything), got {deinstrument_threshold}")
        if deinstrument_threshold > 0xFFFFFFF0:
            raise ValueError(f"deinstrument_threshold is too large: {deinstrument_threshold}")
        if isinstance(stall_ms, bool) or not isinstance(stall_ms, int):
            raise TypeError(f"stall_ms must be an int (milliseconds), not {type(stall_ms).__name__}")
        if not 1 <= stall_ms <= 3_600_000:
            raise ValueError(f"stall_ms must be from 1 to 3600000 (milliseconds), got {stall_ms}")
        self.exclude = _check_patterns("exclude", exclude)
        self.include_only = _check_patterns("include_only", include_only)
        if tool_id is not None:
            if isinstance(tool_id, bool) or not isinstance(tool_id, int):
                raise TypeError(f"tool_id must be an int from 0 to 5 or None, not {type(tool_id).__name__}")
            if not 0 <= tool_id <= 5:
                raise ValueError(f"tool_id must be from 0 to 5, got {tool_id}")
        _check_report(report)
        self.ring = _parse_ring(ring)
        self.sampling = _parse_sampling(sampling)
        self.signals = _parse_signals(save_on_signals)
        self.output = _check_output(output) if perfetto else None
        self.format = _format_for(output, format)
        self.loops = _loops_code(loops, self.format)
        if c_functions is None:
            c_functions = _env.c_functions()
        if not isinstance(c_functions, bool):
            raise TypeError(f"c_functions must be True, False or None, not {type(c_functions).__name__}")
        _env.check(perfetto_file=self.output is not None and self.format == "perfetto")
        self.mode, self.threshold, self.tool_id, self.report = mode, deinstrument_threshold, tool_id, report
        self.thread_roots, self.c_functions, self.near_zero, self.stall_ms = thread_roots, c_functions, near_zero, stall_ms


class Session:
    """One running session.  ``output``, ``pid``, ``recording`` and ``report`` are the options' until a fork:
    the child's copy (forked_child) has its own, and prints no report.  ``signals``: the signals armed to
    save on (set once they are); ``child_dir``: the private directory of its forked children's recordings
    (named at the first fork, docs/fork.md); ``forked``: this is a forked child's copy."""

    __slots__ = ("options", "tool_id", "callbacks", "recording", "output", "report", "pid", "own_cost", "signals",
                 "child_dir", "forked")

    def __init__(self, options, tool_id, callbacks, recording):
        self.options, self.tool_id, self.callbacks, self.recording = options, tool_id, callbacks, recording
        self.output, self.report, self.pid = options.output, options.report, os.getpid()
        self.own_cost = None
        self.signals = ()
        self.child_dir = None
        self.forked = False

    mode = property(lambda self: self.options.mode)
    format = property(lambda self: self.options.format)
    threshold = property(lambda self: self.options.threshold)
    ring = property(lambda self: self.options.ring)
    loops = property(lambda self: self.options.loops)
    thread_roots = property(lambda self: self.options.thread_roots)

    def forked_child(self, output, recording):
        """This session as a forked child goes on with it: its own output and recording, no report."""
        child = Session(self.options, self.tool_id, self.callbacks, recording)
        child.output, child.report, child.forked = output, False, True
        child.own_cost, child.signals, child.child_dir = self.own_cost, self.signals, self.child_dir
        return child


def _check_report(report):
    if report not in REPORTS or (report is not True and report is not False and not isinstance(report, str)):
        raise ValueError(f"report must be True, False, 'text' or 'json', got {report!r}")
