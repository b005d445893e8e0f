"""Build hook: the wheel carries the repository's examples as package data.

``scenarios/``, ``sweeps/``, ``fits/`` and ``notebooks/`` stay at the repository root (their
paths are what the README, the tests and the notebooks use); building the package copies them
into ``agentsim/examples/`` of the build, where :mod:`agentsim.examples` finds them in an
installed wheel. Everything else is declared in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
EXAMPLE_DIRS = ("scenarios", "sweeps", "fits", "notebooks")
EXAMPLE_PATTERNS = ("*.yaml", "*.ipynb")


class BuildPyWithExamples(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return   # an editable install reads the examples from the checkout itself
        for name in EXAMPLE_DIRS:
            target = Path(self.build_lib) / "agentsim" / "examples" / name
            target.mkdir(parents=True, exist_ok=True)
            for pattern in EXAMPLE_PATTERNS:
                for source in sorted((ROOT / name).glob(pattern)):
                    shutil.copyfile(source, target / source.name)


setup(cmdclass={"build_py": BuildPyWithExamples})
