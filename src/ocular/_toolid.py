"""The life of a sys.monitoring tool id, written once for the three parts of Ocular that hold one: the
tracer (from start_tracing() to stop_tracing()), the USDT probes' poller (usdt.c, while a probe is attached)
and the report's settling of code objects (_report._settle, for an instant).  Ids 3, 4 and 5, in that
order: 0-2 are left to the debugger, coverage and profiler tools (PEP 669's conventions) unless one of
them is asked for by number."""
import contextlib
import sys

from . import _pyversions

mon = sys.monitoring  # the real one, even if the program replaces the attribute later
PREFERENCE = (3, 4, 5)


def holders():
    """'3='other', 5='ocular'': the ids in use and their holders' names, for error messages."""
    return ", ".join(f"{i}={name!r}" for i, name in enumerate(map(mon.get_tool, range(6))) if name is not None)


def acquire(name, tool_id=None, hint=""):
    """Take `tool_id`, or else the first free id of PREFERENCE, under `name`; the id.  RuntimeError naming
    the holders if it is taken (none free); `hint` ends that message (what the caller can do about it)."""
    if tool_id is not None:
        holder = mon.get_tool(tool_id)
        if holder is not None:
            raise RuntimeError(f"ocular: sys.monitoring tool id {tool_id} is already in use by {holder!r} (ids in "
                               f"use: {holders()}){'; ' + hint if hint else ''}")
        mon.use_tool_id(tool_id, name)
        return tool_id
    for i in PREFERENCE:
        if mon.get_tool(i) is None:
            try:
                mon.use_tool_id(i, name)
            except ValueError:  # (taken meanwhile by another thread)
                continue
            return i
    raise RuntimeError(f"ocular: sys.monitoring tool ids 3, 4 and 5 are all in use ({holders()}); Ocular leaves "
                       f"0, 1 and 2 to the debugger, coverage and profiler tools{'; ' + hint if hint else ''}")


def events_of(names):
    """The event numbers of callbacks named by event ('PY_START', ...; 3.14+: 'BRANCH' is two events)."""
    out = []
    for name in names:
        if name == "BRANCH" and _pyversions.BRANCH_SPLIT:
            out += [mon.events.BRANCH_LEFT, mon.events.BRANCH_RIGHT]
        else:
            out.append(getattr(mon.events, name))
    return out


def register(tool_id, callbacks):
    """Register `callbacks` ({event name: callable}) on `tool_id` ('BRANCH': both of 3.14's branch events)."""
    for name, cb in callbacks.items():
        for ev in events_of([name]):
            mon.register_callback(tool_id, ev, cb)


def release(tool_id, name, callbacks, local_codes=None):
    """Clear our events and callbacks and free our id.  Another tool may have freed our id meanwhile
    (3.12/3.13's free_tool_id leaves the events and callbacks in place, so ours would go on firing):
    the id is taken back for a moment to clear them.  If another tool holds the id now, only our own
    callbacks are taken out (its events and callbacks are left alone) and the id stays its own.
    `local_codes`: a function giving the code objects we set local events on (3.12/3.13 clear them one by one)."""
    holder = mon.get_tool(tool_id)
    if holder is not None and holder != name:
        ours = {id(cb) for cb in callbacks.values()}
        for ev in events_of(callbacks):
            old = mon.register_callback(tool_id, ev, None)
            if old is not None and id(old) not in ours:
                mon.register_callback(tool_id, ev, old)  # not ours: put it back
        return
    if holder is None:
        mon.use_tool_id(tool_id, name)
    if _pyversions.CLEAR_TOOL_ID:
        # one call switches off the global and the local events (set_local_events by anyone on our id) and
        # unregisters every callback
        mon.clear_tool_id(tool_id)
    else:
        mon.set_events(tool_id, 0)
        for ev in events_of(callbacks):
            mon.register_callback(tool_id, ev, None)
        if callbacks and local_codes is not None:
            for code in local_codes():
                try:  # (the id is freed whatever; try, not contextlib.suppress: hundreds of codes)
                    mon.set_local_events(tool_id, code, 0)
                except (ValueError, TypeError):
                    pass
    mon.free_tool_id(tool_id)


@contextlib.contextmanager
def borrowed(name):
    """A free id of PREFERENCE under `name` for the time of a with block (None if all are taken), freed after."""
    try:
        tool = acquire(name)
    except RuntimeError:  # (3, 4 and 5 all taken)
        tool = None
    try:
        yield tool
    finally:
        if tool is not None:
            mon.free_tool_id(tool)
