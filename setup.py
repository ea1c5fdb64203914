"""The one compiled module (its source says why it is compiled); the rest is pyproject.toml."""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "sidecar/translation/_text_runs.c"
# The module tells which source it was built from: a test fails on a module older than its
# source (an editable install is not rebuilt when the C changes; scripts/setup.sh rebuilds it).
DIGEST = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()

setup(
    ext_modules=[
        Extension(
            "clawpod.sidecar.translation._text_runs",
            [SOURCE],
            define_macros=[("SOURCE_SHA256", f'"{DIGEST}"')],
            extra_compile_args=["-Wextra"],
        )
    ]
)
