"""Build the wheel, install it in a fresh virtual environment and import every module from it.

An explicit ``packages`` list in pyproject.toml silently leaves a new folder out of the
wheel while the editable install used by the tests keeps working; this catches it.  The
venv sees the system's site-packages for the dependencies (numpy, scipy, torch, ...), but
dpforge itself comes from the wheel: the check fails if it is imported from anywhere else.
Usage: python .ci/check_wheel.py  (exit 0 when every module of the wheel imports).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

IMPORT_ALL = r"""
import importlib, sys, zipfile
wheel, venv = sys.argv[1], sys.argv[2]
names = sorted(
    n[:-3].replace("/", ".").removesuffix(".__init__")
    for n in zipfile.ZipFile(wheel).namelist()
    if n.startswith("dpforge/") and n.endswith(".py")
)
import dpforge
assert dpforge.__file__.startswith(venv), f"dpforge imported from {dpforge.__file__}, not from the wheel"
failed = []
for name in names:
    try:
        importlib.import_module(name)
    except Exception as error:  # report every failure, not only the first
        failed.append(f"{name}: {type(error).__name__}: {error}")
print(f"wheel check: {len(names) - len(failed)} of {len(names)} modules imported from the wheel")
for line in failed:
    print("  " + line)
sys.exit(1 if failed else 0)
"""


def main() -> int:
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # a stale build/ can carry deleted modules
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
            check=True,
        )
        wheel = next(out.glob("dpforge-*.whl"))
        listed = {n.split("/")[1] for n in zipfile.ZipFile(wheel).namelist() if n.startswith("dpforge/") and n.count("/") > 1}
        venv = out / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
        python = venv / "bin" / "python"
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
        print(f"wheel {wheel.name}: folders {', '.join(sorted(listed))}")
        code = subprocess.run([str(python), "-c", IMPORT_ALL, str(wheel), str(venv)], cwd=scratch).returncode
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
