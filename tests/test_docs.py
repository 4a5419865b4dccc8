"""The repository stands on its own (issue 15, defect 7): every path a file of it cites
exists, a figure quoted in several places is the same everywhere and names the command
that measures it, and every invariant cited by number is in docs/DESIGN.md."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED_DIRS = ("mxsidecar", "tests", "perf", "examples", "docs", ".ci")
TOP_FILES = ("README.md", "setup.py", "pyproject.toml", "tox.ini", "pytest.ini")
TEXT_SUFFIXES = {".py", ".pyi", ".md", ".proto", ".toml", ".ini", ".cfg", ".txt", ""}
SKIPPED_DIRS = {"__pycache__", "results"}  # perf/results: what a benchmark run writes

# A cited path: a file name with one of these extensions, perhaps after directories.
CITATION = re.compile(
    r"(?<![\w./-])((?:\.{1,2}/)*(?:[\w-]+/)*[\w.-]*\w\.(?:md|py|pyi|proto|sh|toml|ini|cfg))(?![\w/-])"
)
# Bare names that can only mean a file of ours: the documents, the tests, the benchmarks.
OURS_BY_NAME = re.compile(r"[A-Z][A-Z_]+\.md|test_\w+\.py|bench_\w+\.py")
# Files a run makes (git-ignored), each with the program that writes it.
GENERATED = {"perf/results/results.md": "perf/run.py"}


def repo_files() -> Iterator[Path]:
    for name in TOP_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name
    for top in SCANNED_DIRS:
        for dirpath, dirnames, filenames in os.walk(ROOT / top):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith("."))
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if path.suffix in TEXT_SUFFIXES:
                    yield path


def text_of(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@functools.lru_cache(maxsize=None)
def _package_dirs() -> frozenset[str]:
    return frozenset(
        d for _, dirnames, _ in os.walk(ROOT / "mxsidecar") for d in dirnames if not d.startswith(("_", "."))
    )


@functools.lru_cache(maxsize=None)
def _relative_paths() -> tuple[str, ...]:
    return tuple(p.relative_to(ROOT).as_posix() for p in repo_files())


def resolve(cited: str, citing: Path) -> Path | None:
    """The file ``cited`` names: relative to ``citing``'s directory when it starts with
    ``./`` or ``../``, else any file of the repository whose path ends with it (so
    ``encoders/video.py``, written inside the package, is ``mxsidecar/sidecar/encoders/
    video.py``); None if it is ours and missing.  Raises LookupError for a path that is
    not ours to check (TensorBoard's, CPython's: ``plugins/hparams/metadata.py``)."""
    first = cited.split("/")[0]
    if first in (".", ".."):
        candidate = Path(os.path.normpath(citing.parent / cited))
        return candidate if candidate.exists() else None
    if "/" not in cited:
        ours = OURS_BY_NAME.fullmatch(cited) is not None
    else:
        ours = first in {*SCANNED_DIRS, "mxsidecar"} or first in _package_dirs()
    if not ours:
        raise LookupError(cited)
    for rel in _relative_paths():
        if rel == cited or rel.endswith("/" + cited):
            return ROOT / rel
    return None


def citations() -> Iterator[tuple[Path, int, str]]:
    for path in repo_files():
        if path.name == "test_docs.py":
            continue  # its own cases name missing files on purpose
        for lineno, line in enumerate(text_of(path).splitlines(), 1):
            for m in CITATION.finditer(line):
                yield path, lineno, m.group(1)


def test_every_cited_path_exists() -> None:
    missing = []
    checked = 0
    for path, lineno, cited in citations():
        if cited in GENERATED:
            continue
        try:
            target = resolve(cited, path)
        except LookupError:
            continue
        checked += 1
        if target is None:
            missing.append(f"{path.relative_to(ROOT)}:{lineno}: {cited}")
    assert checked > 100, "the scan found almost nothing: the citation pattern is broken"
    assert not missing, "cited but not in the repository:\n" + "\n".join(missing)


def test_generated_paths_are_written_by_their_program() -> None:
    """A cited file that only a run makes is named by the program that makes it, and
    git ignores where it lands."""
    ignored = text_of(ROOT / ".gitignore").split()
    for cited, program in GENERATED.items():
        assert os.path.basename(cited) in text_of(ROOT / program), (cited, program)
        assert os.path.dirname(cited) + "/" in ignored, cited


@pytest.mark.parametrize(
    "cited,citing,ok",
    [
        ("docs/DESIGN.md", "README.md", True),
        ("DESIGN.md", "tests/test_layering.py", True),
        ("../ARCHITECTURE.md", "mxsidecar/training/writer.py", True),  # mxsidecar/ARCHITECTURE.md
        ("../ARCHITECTURE.md", "docs/DESIGN.md", False),  # there is no ARCHITECTURE.md at the top
        ("../mxsidecar/ARCHITECTURE.md", "docs/DESIGN.md", True),
        ("encoders/video.py", "mxsidecar/training/kinds/video.py", True),  # sidecar/encoders/video.py
        ("encoders/nothing.py", "mxsidecar/training/kinds/video.py", False),
        ("sidecar/encoders/video.py", "tests/test_kinds.py", True),
        ("encoders/embedding.py", "mxsidecar/sidecar/output/projector.py", True),
        ("mxsidecar/faults.py", "examples/tuning_backpressure.py", False),  # the old place of the fault hook
        ("STYLE.md", "README.md", False),
        ("tests/test_nothing_here.py", "README.md", False),
        ("bench_nothing.py", "perf/README.md", False),
    ],
)
def test_resolve_finds_ours_and_misses_what_is_gone(cited: str, citing: str, ok: bool) -> None:
    """The checker itself: it must be able to fail."""
    assert (resolve(cited, ROOT / citing) is not None) is ok


@pytest.mark.parametrize("cited", ["plugins/hparams/metadata.py", "summary_v2.py", "Lib/test/test_x.py"])
def test_resolve_leaves_other_projects_paths_alone(cited: str) -> None:
    with pytest.raises(LookupError):
        resolve(cited, ROOT / "README.md")


# -- figures quoted in several places ---------------------------------------------------

PERF_README = ROOT / "perf" / "README.md"
NUMBER = r"(\d+(?:\.\d+)?)"
SIGNED_PCT = re.compile(r"[+−-]\d+(?:\.\d+)?(?:\s*(?:…|-)\s*[+−-]?\d+(?:\.\d+)?)?(?=\s?%)")

# (what, a pattern that finds the figures however they are phrased, the phrase with the
# command that measures them, the files that must quote that phrase).  Every file must
# give the same figures.
FIGURES = [
    (
        "SCHED_IDLE against nice 10, heavy profile",
        re.compile(rf"\+{NUMBER} % step time under `?SCHED_IDLE`? against \+{NUMBER} % at nice 10"),
        re.compile(
            rf"\+{NUMBER} % step time under `?SCHED_IDLE`? against \+{NUMBER} % at nice 10,? "
            r"`{0,2}python perf/bench_steptime\.py --diagnose --repeats 3"
        ),
        ("README.md", "perf/README.md", "mxsidecar/sidecar/process.py"),
    ),
    (
        "arena prefault per 64 MB",
        re.compile(rf"{NUMBER} ms per 64 MB"),
        re.compile(rf"about {NUMBER} ms per 64 MB[^.]*?`{{0,2}}(?:python )?perf/bench_arena\.py"),
        ("perf/README.md", "perf/bench_steptime.py"),
    ),
    (
        "fresh and warm 4 MB span",
        re.compile(
            rf"fresh 4 MB span costs (?:about |~){NUMBER} ms.{{0,40}}?a warm one (?:about |~){NUMBER} (?:us|µs)"
        ),
        re.compile(
            rf"fresh 4 MB span costs about {NUMBER} ms of page faults, a warm one about {NUMBER} (?:us|µs)"
            r"[^.]*?`{0,2}(?:python )?perf/bench_arena\.py"
        ),
        ("perf/README.md", "mxsidecar/wire/arena.py"),
    ),
]


def _flat(text: str) -> str:
    """Docstrings and comments wrap lines: one space for each run of whitespace, and
    comment markers dropped, so a phrase matches however it is wrapped."""
    return re.sub(r"\s+", " ", re.sub(r"\n\s*#", "\n", text))


def _quotes(pattern: re.Pattern[str]) -> dict[str, set[tuple[str, ...]]]:
    found: dict[str, set[tuple[str, ...]]] = {}
    for path in repo_files():
        if path.name == "test_docs.py":
            continue
        for m in pattern.finditer(_flat(text_of(path))):
            found.setdefault(str(path.relative_to(ROOT)), set()).add(m.groups())
    return found


@pytest.mark.parametrize("what,loose,strict,required", FIGURES, ids=[f[0] for f in FIGURES])
def test_a_figure_is_the_same_everywhere(what: str, loose: re.Pattern[str], strict: re.Pattern[str],
                                         required: tuple[str, ...]) -> None:  # fmt: skip
    found = _quotes(loose)
    values = set().union(*found.values()) if found else set()
    assert len(values) == 1, f"{what}: figures {sorted(values)} in {found}"


@pytest.mark.parametrize("what,loose,strict,required", FIGURES, ids=[f[0] for f in FIGURES])
def test_a_figure_names_its_command(what: str, loose: re.Pattern[str], strict: re.Pattern[str],
                                    required: tuple[str, ...]) -> None:  # fmt: skip
    found = _quotes(strict)
    for name in required:
        assert name in found, f"{name} does not quote {what} with the command that measures it"


def test_the_sched_idle_figure_is_the_measured_one() -> None:
    """The quoted pair is the diagnose table's, in perf/README.md."""
    text = text_of(PERF_README)
    idle = re.search(rf"^\| mxsidecar \(defaults: `sched_idle=True`, nice 10\) \| \+{NUMBER} %", text, re.M)
    nice10 = re.search(rf"^\| mxsidecar:nice10 \(`sched_idle=False`\) \| \+{NUMBER} %", text, re.M)
    assert idle and nice10, "the diagnose table of perf/README.md moved"
    quoted = FIGURES[0][2].search(_flat(text))
    assert quoted is not None and quoted.groups() == (idle.group(1), nice10.group(1))


def test_percentages_beside_sched_idle_are_measured_ones() -> None:
    """Any paragraph about SCHED_IDLE or the nice levels quotes only step-time figures
    from perf/README.md's result tables: no third version, no rounded range."""
    measured = {
        m.group(0).replace(" ", "")
        for line in text_of(PERF_README).splitlines()
        if line.startswith("|")
        for m in SIGNED_PCT.finditer(line)
    }
    stray = []
    for path in repo_files():
        if path.name == "test_docs.py":
            continue
        for para in re.split(r"\n\s*\n", text_of(path)):
            if not re.search(r"SCHED_IDLE|sched_idle|nice ?10", para):
                continue
            for m in SIGNED_PCT.finditer(para):
                if m.group(0).replace(" ", "") not in measured:
                    stray.append(f"{path.relative_to(ROOT)}: {m.group(0)} %")
    assert not stray, "figures not in perf/README.md's tables:\n" + "\n".join(stray)


def test_cited_invariants_are_in_the_design() -> None:
    design = text_of(ROOT / "docs" / "DESIGN.md")
    section = design.split("## Invariants", 1)[1].split("\n## ", 1)[0]
    numbers = [int(n) for n in re.findall(r"^(\d+)\. \*\*", section, re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 10
    cited = {
        (str(path.relative_to(ROOT)), int(n))
        for path in repo_files()
        for n in re.findall(r"\b[Ii]nvariants? (\d+)", text_of(path))
    }
    assert cited, "no invariant cited anywhere: the pattern is broken"
    beyond = sorted(c for c in cited if c[1] > len(numbers))
    assert not beyond, f"invariants cited but not in docs/DESIGN.md: {beyond}"


def test_flush_secs_is_described_as_the_fsync_interval() -> None:
    """Events reach the file as soon as the sidecar has them; ``flush_secs`` only paces
    fsync (sidecar/loop.py ``fsync_all``).  The README once said it "writes buffered
    events", which would make a user lower it to see events sooner."""
    from mxsidecar import SidecarWriter

    readme_row = re.search(r"^\| `flush_secs` \|.*$", text_of(ROOT / "README.md"), re.M)
    doc = SidecarWriter.__doc__ or ""
    param = doc.split("flush_secs :", 1)[1].split("\n    filename_suffix", 1)[0]
    assert readme_row is not None
    for text in (readme_row.group(0), param):
        assert "fsync" in text and "buffered" not in text, text
    loop = text_of(ROOT / "mxsidecar" / "sidecar" / "loop.py")
    assert "self.next_fsync = time.monotonic() + self.flush_secs" in loop  # what both describe
