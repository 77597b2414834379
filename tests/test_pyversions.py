"""The Python side's version differences (ocular._pyversions): what each CPython version is expected to
answer, one column per version, so that a flag that answers wrong on a version (a feature looked for under
the wrong name, a backport) fails here on that version; every flag is in the table, and every flag is used."""
import os
import re
import sys

import pytest

from ocular import _pyversions

#                       3.12   3.13   3.14   3.15
EXPECTED = {
    "BRANCH_SPLIT":        (False, False, True, True),
    "CLEAR_TOOL_ID":       (False, False, True, True),
    "REMOTE_EXEC":         (False, False, True, True),
    "CACHE_TABLE_BY_NAME": (False, True, True, True),
    "WARNINGS_BY_CONTEXT": (False, False, True, True),
    "NOT_TAKEN":           (False, False, True, True),
}
VERSIONS = [(3, 12), (3, 13), (3, 14), (3, 15)]


def _flags():
    return {k: v for k, v in vars(_pyversions).items() if k.isupper()}


def test_each_flag_answers_as_this_version_is_expected_to():
    version = sys.version_info[:2]
    if version not in VERSIONS:
        pytest.fail(f"Python {version[0]}.{version[1]} has no column in EXPECTED: add one")
    column = VERSIONS.index(version)
    got = _flags()
    assert set(got) == set(EXPECTED), set(got) ^ set(EXPECTED)
    wrong = {k: v for k, v in got.items() if v is not EXPECTED[k][column]}
    assert not wrong, f"Python {version[0]}.{version[1]}: {wrong}"


def test_every_flag_is_used_by_the_package():
    pkg = os.path.dirname(_pyversions.__file__)
    text = ""
    for root, _, files in os.walk(pkg):
        for f in files:
            if f.endswith(".py") and f != "_pyversions.py":
                text += open(os.path.join(root, f), encoding="utf-8").read()
    unused = [k for k in _flags() if not re.search(r"_pyversions\." + k + r"\b", text)]
    assert not unused, unused
