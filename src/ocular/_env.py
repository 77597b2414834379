"""The environment variables the C engine reads (with getenv), checked in Python before a session starts.

The engine cannot raise where it reads them (the clock is chosen at start, the Perfetto sink reads its
variable on the writer thread), so ``start_tracing()`` checks them first (and ``convert()`` those a render
reads): a value the engine would not understand is a ValueError naming the variable and the accepted
values, instead of a silent default.
Unset, empty or blank means the default.  The USDT variables (OCULAR_USDT_POLL_MS, OCULAR_USDT_WAIT) are checked
by ``ocular.usdt.enable()``.
"""

import os

CLOCK = "OCULAR_CLOCK"                      # clock.c: "monotonic" = clock_gettime instead of the TSC
PERFETTO_DEFLATE = "OCULAR_PERFETTO_DEFLATE"  # sink_perfetto.c: "0" = plain packets, "1" = deflated (default)
LIVE_RENDER = "OCULAR_LIVE_RENDER"          # render.c: "0" = never render while recording, "1" = even on one CPU
RENDER_PIPE = "OCULAR_RENDER_PIPE"          # render.c: "0" = render on one thread, "1" = encode on a second always
CCALL_KEEP_NS = "OCULAR_CCALL_KEEP_NS"      # clock.c: the C call site rule's limit in ns (default 1000)


def shown(value, limit=60):
    """repr() of a value for an error message, cut short: a huge value makes no huge message (and an int
    too long for str() makes no second error)."""
    if isinstance(value, int) and value.bit_length() > 200:
        return f"{'-' if value < 0 else ''}<an int of {value.bit_length()} bits>"
    r = repr(value)
    if len(r) <= limit:
        return r
    return f"{r[:limit]}... ({len(value) if isinstance(value, (str, bytes)) else len(r)} characters)"


def _check_choice(name, accepted, meaning):
    raw = os.environ.get(name)
    if raw and raw.strip() and raw not in accepted:  # blank counts as unset, as in the C code
        raise ValueError(f"environment variable {name}={shown(raw)} is not valid: {meaning}")


def check(perfetto_file):
    """Raise ValueError if a variable the coming session uses has a value the engine does not accept."""
    _check_choice(CLOCK, ("monotonic",), "use 'monotonic' (clock_gettime instead of the CPU's time-stamp "
                                         "counter), or leave it unset for the default")
    _check_choice(LIVE_RENDER, ("0", "1"), "use 0 (render only at stop) or 1 (render while recording, even with "
                                           "one CPU), or leave it unset (render while recording with two CPUs)")
    raw = os.environ.get(CCALL_KEEP_NS)
    if raw and raw.strip() and not (raw.strip().isdigit() and int(raw) <= 10**12):
        raise ValueError(f"environment variable {CCALL_KEEP_NS}={shown(raw)} is not valid: use a whole number of "
                         "nanoseconds (a C call site stays instrumented while its calls average that long or more; "
                         "default 1000), or leave it unset")
    check_render(perfetto_file)


def check_render(perfetto_file):
    """The variables a render reads (at stop, or in convert): ValueError if one has a value it does not accept."""
    _check_choice(RENDER_PIPE, ("0", "1"), "use 0 (render on one thread) or 1 (encode the trace on a second "
                                           "thread whatever is left to render), or leave it unset (a second thread "
                                           "with a free CPU and 256K records or more to render)")
    if perfetto_file:
        _check_choice(PERFETTO_DEFLATE, ("0", "1"), "use 0 (plain packets) or 1 (deflated, the default), or "
                                                    "leave it unset")


C_FUNCTIONS = "OCULAR_C_FUNCTIONS"  # start_tracing(c_functions=None): "0" = off, "1" = on (the default)


def c_functions():
    """start_tracing()'s default for c_functions: on, unless OCULAR_C_FUNCTIONS=0."""
    _check_choice(C_FUNCTIONS, ("0", "1"), "use 0 (C functions not recorded) or 1 (recorded, the default), or "
                                           "leave it unset")
    raw = (os.environ.get(C_FUNCTIONS) or "").strip()
    return raw != "0"
