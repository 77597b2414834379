"""Build of the C extension ocular._ocular (metadata lives in pyproject.toml)."""
import glob
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "src/ocular/_ext/*.c")))

setup(
    ext_modules=[
        Extension(
            "ocular._ocular",
            sources=SOURCES,
            depends=glob.glob("src/ocular/_ext/*.h"),
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE",
                                "-fvisibility=hidden"],
            extra_link_args=["-pthread"],
        )
    ]
)
