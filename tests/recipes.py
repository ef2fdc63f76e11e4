"""Follow a recipe of docs/development.md ("## Contributing") on a throwaway example, and count
the files it touches.

A recipe bullet names its files right after its bold title, with ``NAME`` standing for the new
entry's name::

    * **A workload** (files: `workloads/NAME.py`, `workloads/configs/__init__.py`; docs:
      `docs/running.md`): ...

``follow`` stages a copy of the package laid out as installed (``suite/`` -> ``dpsuite/``,
``workloads/`` -> ``dpsuite/workloads/``) in a temporary directory, lets the recipe's steps
write and edit files there by their repository paths, and asserts that the files created or
modified are exactly the bullet's ``files:`` (with ``NAME`` replaced) and no more than the
limit. The returned ``Staged`` tree then runs ``python -m dpsuite`` or the repository's own
tests against the copy (``PYTHONPATH`` puts it before the installed package), which proves the
addition works.

A further recipe (a measurement, a report section) takes a few lines in tests/test_recipes.py:
give its bullet a ``(files: ...)`` list, write its steps as a function of ``(tree, name)`` that
calls ``tree.write`` for new modules and ``tree.insert`` for a line in an existing list, then::

    def test_a_measurement(tmp_path):
        tree = follow("A measurement", limit=3, steps=add_probe, name="my_probe", tmp_path=tmp_path)
        assert tree.dpsuite("run", ...).returncode == 0

The tests are staged too, so a recipe that adds a test module counts it; a further folder is
staged by adding it to ``LAYOUT``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEVELOPMENT = REPO / "docs" / "development.md"
# repository folder -> where the installed package holds it (pyproject.toml's package-dir)
LAYOUT = {"workloads": "dpsuite/workloads", "suite": "dpsuite", "tests": "tests"}


@dataclass(frozen=True)
class Documented:
    """What a recipe bullet names: the files it touches and the docs it updates."""

    files: frozenset[str]
    docs: frozenset[str]


def documented(title: str, name: str, text: str | None = None) -> Documented:
    """The files and docs the bullet ``**title**`` of docs/development.md names, ``NAME``
    replaced by ``name``; AssertionError when there is no such bullet or it names no files."""
    text = DEVELOPMENT.read_text() if text is None else text
    flat = " ".join(text.split())
    found = re.search(rf"\* \*\*{re.escape(title)}\*\* \(files: ([^)]*)\)", flat)
    assert found, f"docs/development.md has no bullet '**{title}** (files: ...)'"
    files, _, docs = found.group(1).partition("; docs:")

    def paths(part: str) -> frozenset[str]:
        return frozenset(p.replace("NAME", name) for p in re.findall(r"`([^`]+)`", part))

    assert paths(files), f"the bullet '{title}' names no files"
    return Documented(paths(files), paths(docs))


class Staged:
    """A copy of the package as installed, whose files are edited by repository path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # outer folders first: `dpsuite/` before the `dpsuite/workloads/` inside it
        for folder, installed in sorted(LAYOUT.items(), key=lambda kv: len(kv[1])):
            shutil.copytree(
                REPO / folder,
                root / installed,
                ignore=shutil.ignore_patterns("__pycache__"),
                dirs_exist_ok=True,
            )
        self._before = self._digests()

    def path(self, repo_path: str) -> Path:
        """Where the repository's file ``repo_path`` lies in the copy."""
        folder, _, rest = repo_path.partition("/")
        assert folder in LAYOUT, f"{repo_path} is outside the staged folders {sorted(LAYOUT)}"
        return self.root / LAYOUT[folder] / rest

    def write(self, repo_path: str, text: str) -> None:
        """Create (or overwrite) a file."""
        target = self.path(repo_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def insert(self, repo_path: str, before: str, text: str) -> None:
        """Insert ``text`` right before ``before``, which must occur exactly once in the file."""
        target = self.path(repo_path)
        old = target.read_text()
        assert old.count(before) == 1, f"{repo_path}: {before!r} occurs {old.count(before)} times"
        target.write_text(old.replace(before, text + before))

    def touched(self) -> set[str]:
        """Repository paths of the files created, modified or removed since staging."""
        after = self._digests()
        return {
            p for p in self._before.keys() | after.keys() if self._before.get(p) != after.get(p)
        }

    def _digests(self) -> dict[str, str]:
        """Each staged file's content digest, by repository path."""
        return {
            self._repo_path(f): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in self.root.rglob("*")
            if f.is_file() and "__pycache__" not in f.parts
        }

    def _repo_path(self, staged: Path) -> str:
        rel = staged.relative_to(self.root).as_posix()
        inside = [(f, i) for f, i in LAYOUT.items() if rel.startswith(i + "/")]
        folder, installed = max(inside, key=lambda kv: len(kv[1]))  # the innermost folder
        return folder + rel[len(installed) :]

    def python(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """``python ARGS`` in the repository with the copy first on the path; the copy's
        ``dpsuite`` must be the one imported (checked)."""
        # an outer pytest-xdist worker's variables would make an inner pytest think it is one
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
        env["PYTHONPATH"] = os.pathsep.join([str(self.root), str(REPO)])
        check = [sys.executable, "-c", "import dpsuite; print(dpsuite.__file__)"]
        where = subprocess.run(check, capture_output=True, text=True, env=env, cwd=REPO)
        assert where.stdout.startswith(str(self.root)), f"imported {where.stdout}{where.stderr}"
        cmd = [sys.executable, *args]
        return subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout
        )

    def dpsuite(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """``python -m dpsuite ARGS`` on the copy."""
        return self.python("-m", "dpsuite", *args, timeout=timeout)

    def pytest(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """The repository's own tests, run against the copy."""
        return self.python("-m", "pytest", "-q", "-p", "no:cacheprovider", *args, timeout=timeout)


def follow(
    title: str,
    limit: int,
    steps: Callable[[Staged, str], None],
    name: str,
    tmp_path: Path,
    text: str | None = None,
) -> Staged:
    """Stage the package, follow the recipe's ``steps`` for the new entry ``name``, and assert
    that the files touched are exactly those the bullet names, within ``limit``."""
    expected = documented(title, name, text).files
    tree = Staged(tmp_path / "staged")
    steps(tree, name)
    touched = tree.touched()
    assert touched == expected, (
        f"'{title}' touched {sorted(touched)}; docs/development.md names {sorted(expected)}"
    )
    assert len(touched) <= limit, f"'{title}' touches {len(touched)} files (at most {limit})"
    return tree
