"""The C sources' layout rules (#33), checked so that they stay true: every C file says its one job in a
header comment that names it, and every compile-time difference between CPython versions is in compat.h
(one place to look when a new version comes)."""
import os
import re

EXT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "ocular", "_ext")


def _sources():
    return sorted(f for f in os.listdir(EXT) if f.endswith((".c", ".h")))


def test_every_c_file_starts_with_its_job():
    files = _sources()
    assert len(files) > 20, files
    for name in files:
        with open(os.path.join(EXT, name), encoding="utf-8") as f:
            first = f.readline()
        assert first.startswith(f"/* {name} -- ") and len(first) > len(name) + 20, (name, first)


def test_version_branches_are_in_compat_h_only():
    branch = re.compile(r"^\s*#\s*(if|elif)\b.*\bPY_VERSION_HEX\b", re.M)
    found = {name: len(branch.findall(open(os.path.join(EXT, name), encoding="utf-8").read())) for name in _sources()}
    assert found.pop("compat.h") >= 2  # (the rule is not checked against nothing)
    assert not {k: v for k, v in found.items() if v}, found
