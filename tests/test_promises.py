"""tests/PROMISES.md maps README.md's promises to tests: every name it cites must exist.

A renamed or deleted test would otherwise leave a promise that looks proved and is
not.  Names are collected with ``ast`` (module-level ``test_*`` functions, and
``test_*`` methods of ``Test*`` classes as ``Class::method``), never by importing the
test modules.
"""

from __future__ import annotations

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMISES = os.path.join(ROOT, "tests", "PROMISES.md")
CITATION = re.compile(r"`(tests/test_\w+\.py)::(\w+(?:::\w+)?)`")
PATH = re.compile(r"`((?:tests|perf|\.ci)/[\w./-]+|[\w-]+\.(?:ini|py|cfg|toml))`")


def _test_names(path: str) -> set[str]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test_"):
                    names.add(f"{node.name}::{item.name}")
    return names


def _sections(text: str) -> dict[str, list[str]]:
    """Heading -> the table rows under it (header and separator rows left out)."""
    out: dict[str, list[str]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            out[heading] = []
        elif line.startswith("|") and not re.fullmatch(r"\|[\s|:-]+\|", line):
            out.setdefault(heading, []).append(line)
    return {h: rows[1:] for h, rows in out.items() if rows}  # rows[0]: the column names


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_every_cited_test_exists() -> None:
    missing = []
    cache: dict[str, set[str]] = {}
    for path, name in CITATION.findall(_read(PROMISES)):
        full = os.path.join(ROOT, path)
        if path not in cache:
            cache[path] = _test_names(full) if os.path.exists(full) else set()
        if name not in cache[path]:
            missing.append(f"{path}::{name}")
    missing = sorted(set(missing))
    assert not missing, f"PROMISES.md cites tests that do not exist: {missing}"


def test_every_promise_cites_a_test() -> None:
    sections = _sections(_read(PROMISES))
    promise_tables = {h: rows for h, rows in sections.items() if not h.startswith(("Checked by", "Measured"))}
    assert len(promise_tables) >= 8, sorted(sections)  # the README's sections, not a parse gone wrong
    bare = [row[:80] for rows in promise_tables.values() for row in rows if not CITATION.search(row)]
    assert not bare, f"promises with no test: {bare}"
    numbers = [int(row.split("|")[1]) for rows in promise_tables.values() for row in rows]
    assert numbers == list(range(1, len(numbers) + 1)), "rows are numbered 1, 2, ... in order"


def test_files_cited_for_configuration_and_measurements_exist() -> None:
    sections = _sections(_read(PROMISES))
    rows = [row for h, rs in sections.items() if h.startswith(("Checked by", "Measured")) for row in rs]
    assert rows
    for row in rows:
        paths = PATH.findall(row.split("|")[2])
        assert paths, f"no file named in {row!r}"
        for path in paths:
            assert os.path.exists(os.path.join(ROOT, path)), f"PROMISES.md names {path}, which does not exist"


def test_the_readme_links_to_the_promises() -> None:
    assert "(tests/PROMISES.md)" in _read(os.path.join(ROOT, "README.md"))


def test_the_collector_and_the_pattern_see_what_they_should(tmp_path) -> None:
    """Control: a module with two tests and a helper; the collector sees exactly the two
    tests, and the citation pattern reads both forms.  (The module's name is built, not
    written out, so that no check of cited paths takes it for a file of ours.)"""
    name = "test_x" + ".py"
    module = tmp_path / name
    module.write_text(
        "def test_a():\n    pass\n\ndef helper():\n    pass\n\nclass TestB:\n    def test_c(self):\n        pass\n"
    )
    assert _test_names(str(module)) == {"test_a", "TestB::test_c"}
    cited = f"`tests/{name}::test_a`, `tests/{name}::TestB::test_c`, `tests/{name}::helper`"
    found = CITATION.findall(cited)
    assert found == [(f"tests/{name}", "test_a"), (f"tests/{name}", "TestB::test_c"), (f"tests/{name}", "helper")]
    assert [n for _, n in found if n not in _test_names(str(module))] == ["helper"]  # what the check reports
