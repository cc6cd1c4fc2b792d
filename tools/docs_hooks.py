"""mkdocs hooks (``mkdocs.yml``): the repository's files that the guides link to join the site.

The guides link to files outside ``docs/`` by relative paths that work on GitHub
(``../../examples/grain_dataloader.py``, ``../../CHANGELOG.md``). Here those files join the
site under their repository paths (``examples/grain_dataloader.py``: copied as is;
``CHANGELOG.md``, ``benchmarks/results.md``: rendered as pages), and each such link is
rewritten to point at them, so that the same Markdown reads well in both places.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
# repository files (globs) that the site carries beside docs/
CARRIED = ("CHANGELOG.md", "benchmarks/README.md", "benchmarks/results.md", "examples/*.py",
           "examples/recipes/*.py", "constraints.txt", "constraints-oldest.txt")
_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")


def _carried() -> list[str]:
    return sorted({p.relative_to(ROOT).as_posix() for g in CARRIED for p in ROOT.glob(g)})


def on_files(files: Files, config) -> Files:
    for path in _carried():
        files.append(File.generated(config, path, abs_src_path=str(ROOT / path)))
    return files


def _rewrite(src_uri: str, docs_prefix: str, carried: set[str]):
    """A link seen from ``src_uri``: where it points in the repository; carried files get the
    link to their place in the site, any other link stays as written."""
    here = posixpath.dirname(src_uri)

    def sub(m: re.Match[str]) -> str:
        target = m.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return m.group(0)
        if src_uri in carried:  # a carried page: its links are relative to the repository
            return m.group(0)
        repo_path = posixpath.normpath(posixpath.join(docs_prefix, here, target))
        if repo_path.startswith(docs_prefix + "/") or repo_path not in carried:
            return m.group(0)
        new = posixpath.relpath(repo_path, here or ".")
        return f"{m.group(1)}{new}{m.group(3) or ''}{m.group(4)}"

    return sub


def on_page_markdown(markdown: str, page, config, files: Files) -> str:
    docs_prefix = Path(config["docs_dir"]).resolve().relative_to(ROOT).as_posix()
    return _LINK.sub(_rewrite(page.file.src_uri, docs_prefix, set(_carried())), markdown)
