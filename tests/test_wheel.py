"""What `pip install .` installs: every file of the package (src/ocular, but the C sources compiled into
the extension) is in the wheel, and so is the extension.  Under `make test-installed`
(OCULAR_TEST_INSTALLED=1) the installed package itself is checked against the source tree; otherwise a
wheel is built from the source tree (pip wheel, no dependencies, no build isolation) and its file list
checked (built from a clean copy of the tree: ~20 s, the extension is compiled), and its name: the
distribution's (pyproject.toml), not the package's (`ocular` on PyPI is another project)."""

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest
import tomllib

from conftest import INSTALLED, ROOT, SRC

PKG = os.path.join(ROOT, "src", "ocular")
with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    DIST = tomllib.load(f)["project"]["name"]


def package_files():
    """Paths (relative to src/) of every file the package uses at run time."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(PKG):
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and d != "_ext"]  # _ext: built into _ocular
        for name in filenames:
            if name.endswith((".pyc", ".so", ".pyd")):
                continue
            out.add(os.path.relpath(os.path.join(dirpath, name), os.path.join(ROOT, "src")).replace(os.sep, "/"))
    return out


def check(names):
    missing = sorted(package_files() - set(names))
    assert not missing, f"files of the package missing from the wheel: {missing}"
    ext = "ocular/_ocular" + sysconfig.get_config_var("EXT_SUFFIX")
    assert ext in names, f"no extension module {ext} in the wheel"
    assert "ocular/_boot/sitecustomize.py" in names  # --follow's start-up hook (it used to be left out)


def test_every_package_file_is_in_the_wheel(tmp_path):
    if INSTALLED:
        names = set()
        for dirpath, dirnames, filenames in os.walk(os.path.join(SRC, "ocular")):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            names |= {os.path.relpath(os.path.join(dirpath, n), SRC).replace(os.sep, "/") for n in filenames}
        check(names)
        import importlib.metadata

        dist = importlib.metadata.distribution(DIST)  # installed under the distribution's name
        assert os.path.dirname(str(dist.locate_file("ocular"))) == SRC, (dist.locate_file("ocular"), SRC)
        return
    wheel = os.environ.get("OCULAR_TEST_WHEEL")
    if not wheel:
        # from a clean copy: a build/ left in the source tree could hold files the package no longer lists
        tree = tmp_path / "tree"
        skip = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "build")
        shutil.copytree(os.path.join(ROOT, "src"), tree / "src", ignore=skip)
        for name in ("setup.py", "pyproject.toml", "README.md"):
            shutil.copy(os.path.join(ROOT, name), tree / name)
        p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path), str(tree)], capture_output=True, text=True, timeout=600)
        if p.returncode != 0 and "No module named pip" in p.stderr:
            pytest.skip("this interpreter has no pip to build the wheel with")
        assert p.returncode == 0, p.stdout + p.stderr
        (wheel,) = glob.glob(str(tmp_path / "*.whl"))
    # a wheel's file name and METADATA carry the distribution's name (normalized in the file name)
    assert os.path.basename(wheel).startswith(DIST.replace("-", "_") + "-"), (wheel, DIST)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        check(names)
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        assert f"\nName: {DIST}\n" in z.read(meta).decode(), meta
