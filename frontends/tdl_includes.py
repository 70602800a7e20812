"""Where ``use`` may read files from, and how it reads them.

``use NAME`` loads a shipped preset.  ``use "path"`` loads a TDL file: a relative path is looked
up next to the including file, then in the preset folder, then in each extra include folder;
wherever it is found, it must

* lie inside an allowed folder: the folder of the top-level file (or the working directory for
  text without a file), the preset folder, or an extra folder given by the user
  (``tacosc --include-dir DIR``, ``tacos.load(..., include_dirs=[DIR])``); symbolic links are
  followed before this check;
* be named ``*.tdl``, and so must the file a symbolic link leads to (so an error in it never
  shows a line of some other kind of file);
* be a regular file (not a device, pipe or socket), read with the TDL size cap applied while
  reading.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tacos.frontends.tdl_parser import read_source

from tacos.errors import InputFileError


def preset_folder() -> Path:
    """The folder of the shipped presets."""
    return Path(str(resources.files("tacos") / "presets"))


@dataclass(frozen=True)
class IncludePolicy:
    """The folders ``use "path"`` may read from (resolved, absolute)."""

    roots: tuple[Path, ...]
    extra: tuple[Path, ...] = ()

    @classmethod
    def for_source(cls, source: str, include_dirs: Iterable[str | Path] | None = None
                   ) -> IncludePolicy:
        """The policy for a top-level file ``source`` (``'<...>'`` for text without a file)."""
        top = Path.cwd() if source.startswith("<") else Path(source).parent
        extra = []
        for d in include_dirs or ():
            p = Path(d)
            if not p.is_dir():
                raise InputFileError(f"include folder {d} does not exist or is not a folder")
            extra.append(p.resolve())
        return cls((top.resolve(), preset_folder().resolve(), *extra), tuple(extra))

    def allows(self, path: Path) -> bool:
        """True when ``path`` (resolved) lies inside one of the allowed folders."""
        return any(path == r or path.is_relative_to(r) for r in self.roots)

    def locate(self, rel: str, including: str) -> tuple[Path, str | None]:
        """The file ``use "rel"`` names (first match), or (first candidate, why it is refused).

        The second item is None when the file may be read.
        """
        given = Path(rel)
        if given.is_absolute():
            candidates = [given]
        else:
            base = Path.cwd() if including.startswith("<") else Path(including).parent
            candidates = [base / given, preset_folder() / given] + [d / given
                                                                     for d in self.extra]
        found = next((c for c in candidates if c.exists()), None)
        if found is None:
            return candidates[0], "not found"
        if given.suffix.lower() != ".tdl":
            return found, "not a .tdl file"
        real = found.resolve()
        if real.suffix.lower() != ".tdl":  # a link named *.tdl to some other kind of file
            return found, "a link to a file that is not a .tdl file"
        if not self.allows(real):
            return found, "outside the folders files may be used from"
        return found, None

    def describe(self) -> str:
        """The allowed folders, for hints."""
        return ", ".join(str(r) for r in self.roots)


def read_included(path: Path) -> str:
    """Read an included TDL file: regular files only, size cap applied while reading."""
    return read_source(path, regular_only=True)
