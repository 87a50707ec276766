"""Package discovery only; all metadata lives in setup.cfg.

setup.cfg's ``package_dir`` maps each top-level folder into the one ``sopgym`` namespace. Listing
every subpackage by hand there would need an edit for every new domain pack, so this walks the
mapped folders and finds every package (a folder with ``__init__.py``).
"""

import configparser
import os

from setuptools import setup


def _package_dir():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(os.path.dirname(os.path.abspath(__file__)), "setup.cfg"))
    lines = [ln.strip() for ln in cfg["options"]["package_dir"].strip().splitlines() if ln.strip()]
    return dict(tuple(part.strip() for part in ln.split("=", 1)) for ln in lines)


def _packages(package_dir):
    found = []
    for package, folder in package_dir.items():
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
            if "__init__.py" in filenames:
                rel = os.path.relpath(dirpath, folder)
                found.append(package if rel == "." else package + "." + rel.replace(os.sep, "."))
    return found


if __name__ == "__main__":
    PACKAGE_DIR = _package_dir()
    setup(packages=_packages(PACKAGE_DIR), package_dir=PACKAGE_DIR)
