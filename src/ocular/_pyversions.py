"""How the CPython versions Ocular runs on (3.12-3.15) differ, for the Python side: one named flag per
difference, each with the version that brought it, read once at import by looking for the feature itself
(not at the version number, so a backport or an alternative build answers right).  The C side's differences
are in _ext/compat.h.  A new version's quirk is a flag here and a column of tests/test_pyversions.py's
table, which says what each version is expected to answer."""
import opcode
import sys
import warnings

_mon = sys.monitoring

# 3.14: sys.monitoring's BRANCH event became two, BRANCH_LEFT and BRANCH_RIGHT, each registered on its own
BRANCH_SPLIT = hasattr(_mon.events, "BRANCH_LEFT")

# 3.14: sys.monitoring.clear_tool_id() switches a tool id's events off and unregisters its callbacks;
# 3.12 and 3.13 have only free_tool_id(), which leaves both in place (they go on firing for the next holder)
CLEAR_TOOL_ID = hasattr(_mon, "clear_tool_id")

# 3.14: sys.remote_exec() (PEP 768) runs a script in another Python process: what `attach` stands on
REMOTE_EXEC = hasattr(sys, "remote_exec")

# 3.13: the inline cache table (opcode._inline_cache_entries) is keyed by opcode name (a dict; 3.15 a
# frozendict); 3.12's is a list indexed by opcode
CACHE_TABLE_BY_NAME = hasattr(opcode._inline_cache_entries, "keys")

# 3.14: the warnings machinery reads the current context's filters (context-aware warnings:
# warnings._get_filters()), not always warnings.filters
WARNINGS_BY_CONTEXT = hasattr(warnings, "_get_filters")

# 3.14: a conditional jump is followed by NOT_TAKEN, a no-op that fires BRANCH_LEFT (a row of the disassembly)
NOT_TAKEN = "NOT_TAKEN" in opcode.opmap
