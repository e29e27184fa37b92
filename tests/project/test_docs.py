"""The documentation builds strictly and says what the code does.

* ``mkdocs build --strict`` (mkdocs-material, mkdocstrings-python; nothing is
  fetched from the network) into a temporary directory: a broken link or
  anchor, a missing page or an API name that no longer resolves fails the
  suite. The built site loads nothing from another host (no web fonts, no
  CDN scripts), and its diagrams are SVG files shipped with it.
* Every ``python`` code block of the guide pages runs, in page order, in one
  namespace per page: the samples are the documentation's claims, and
  their ``assert`` lines pin what they promise.
* Every decision note is reachable from the navigation.
* Every ``docs/contract.md#anchor`` that the runtime, the pages or the README
  cite exists on the contract page, and the runtime's prose cites the
  contract by anchor only: no section numbers, decision numbers or
  field-case ids.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

GUIDE_PAGES = [
    "quickstart.md",
    "cancellation.md",
    "cooperative-tools.md",
    "policies.md",
    "batch-and-openai.md",
    "async.md",
]

_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: str) -> list[str]:
    return _FENCE.findall((DOCS / page).read_text(encoding="utf-8"))


@pytest.mark.timeout(180)
def test_mkdocs_build_strict_succeeds(tmp_path: Path) -> None:
    if (
        shutil.which("mkdocs") is None
        and subprocess.run([sys.executable, "-c", "import mkdocs"], capture_output=True).returncode
    ):
        pytest.fail("mkdocs is not installed (it is part of the test extra)")
    site = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (site / "index.html").exists()
    api = (site / "reference" / "signals" / "index.html").read_text(encoding="utf-8")
    assert "AbortSignal" in api and "add_listener" in api  # the reference is generated from docstrings
    # Offline at view time: every script, stylesheet, image and font is served from the site itself.
    remote = re.compile(r"""(?:<script[^>]*\ssrc|<link[^>]*\shref|<img[^>]*\ssrc)=["']?(?:https?:)?//""", re.I)
    for page in site.rglob("*.html"):
        found = remote.search(page.read_text(encoding="utf-8"))
        assert found is None, f"{page.relative_to(site)} loads a remote resource: {found.group(0)}"
    for page in site.rglob("*.css"):
        assert "fonts.googleapis" not in page.read_text(encoding="utf-8"), page
    # The diagrams are real images, present in the built site and referenced by the pages.
    contract = (site / "contract" / "index.html").read_text(encoding="utf-8")
    for diagram in ("pipeline.svg", "handoff.svg", "batch-timeline.svg"):
        assert (site / "diagrams" / diagram).stat().st_size > 1000
        assert f"diagrams/{diagram}" in contract


@pytest.mark.parametrize("page", GUIDE_PAGES)
@pytest.mark.timeout(60)
def test_every_python_block_of_the_page_runs(page: str, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = python_blocks(page)
    assert blocks, f"{page} has no python code block"
    namespace: dict[str, object] = {"__name__": f"docs_{page.replace('-', '_').removesuffix('.md')}"}
    threads_before = set(threading.enumerate())
    # A page may configure logging as a reader would (quickstart turns on
    # the library's DEBUG records): put it back for the tests that follow.
    loggers = [logging.getLogger(), logging.getLogger("dshtools")]
    saved = [(logger.level, list(logger.handlers)) for logger in loggers]
    try:
        for index, block in enumerate(blocks):
            code = compile(block, f"docs/{page}[block {index}]", "exec")
            exec(code, namespace)
    finally:
        for logger, (level, handlers) in zip(loggers, saved, strict=True):
            logger.setLevel(level)
            logger.handlers[:] = handlers
    # The samples close what they open: no tool body is left running.
    leftover = [t for t in threading.enumerate() if t not in threads_before and t.name.startswith("dshtools-tool")]
    for thread in leftover:
        thread.join(5)
        assert not thread.is_alive(), f"{page} left a tool worker running: {thread.name}"


def test_quickstart_covers_register_execute_cancel_and_outcome() -> None:
    text = "\n".join(python_blocks("quickstart.md"))
    for needle in ("registry.register(", "registry.execute(", ".abort", "result.code", "TOOL_ABORTED"):
        assert needle in text, needle


def test_every_decision_note_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    notes = sorted(p.name for p in (DOCS / "decisions").glob("*.md"))
    assert notes
    missing = [name for name in notes if f"decisions/{name}" not in nav]
    assert not missing, f"add these decision notes to mkdocs.yml nav: {missing}"


def test_every_decision_note_is_named_by_its_own_number() -> None:
    """A note's heading, its navigation entry and every link to it give the
    number in its file name (notes are renumbered when branches merge)."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    wrong = []
    for note in sorted((DOCS / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md")):
        number = note.name[:4]
        heading = note.read_text(encoding="utf-8").splitlines()[0]
        if not re.match(rf"# {number}\b", heading):
            wrong.append(f"{note.name}: heading {heading!r}")
        for entry in re.findall(rf'"(\d{{4}}) [^"]*": decisions/{re.escape(note.name)}', nav):
            if entry != number:
                wrong.append(f"{note.name}: mkdocs.yml names it {entry}")
    pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
    link = re.compile(r"(\d{4})\]\((?:\.\./)?(?:decisions/)?(\d{4})-[^)]*\.md\)")
    for page in pages:
        for shown, target in link.findall(page.read_text(encoding="utf-8")):
            if shown != target:
                wrong.append(f"{page.relative_to(ROOT)}: [{shown}] links to note {target}")
    assert not wrong, wrong


def test_benchmark_page_has_the_table_markers_and_the_command() -> None:
    from benchmarks import report

    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert report.START in text and report.END in text
    assert "python -m benchmarks" in text


def _sources() -> list[Path]:
    trees = [ROOT / "dshtools", ROOT / "tests", ROOT / "benchmarks", DOCS]
    return [p for tree in trees for p in tree.rglob("*") if p.suffix in (".py", ".md") and p.is_file()]


# A numbered contract cite: ``contract.md §9``, ``contract §16``, ``(§8 A11)``,
# a bare ``§3``. A section sign on a line that names an RFC or JSON-RPC is
# that standard's (``RFC 9110 §6.4.1, §15.3.5``, ``JSON-RPC 2.0 §5``), and a
# dotted number is never the contract's (``§6.5.1`` on the line after its RFC).
_NUMBERED_CITE = re.compile(r"contract(?:\.md)?,?\s*§|§\s*\d+(?![.\d])")


def numbered_contract_cites(text: str) -> list[str]:
    """The lines of ``text`` (``"<line number>: <line>"``) that cite the
    contract by number instead of by anchor."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in _NUMBERED_CITE.finditer(line):
            if match.group().startswith("§") and ("RFC" in line or "JSON-RPC" in line):
                continue
            found.append(f"{number}: {line.strip()}")
            break
    return found


def test_the_contract_has_every_section_and_amendment_that_code_cites() -> None:
    # Everything cites the contract by anchor (``docs/contract.md#backends``,
    # ``[A11](contract.md#a11)``): a section's number would go stale when
    # sections move, so none is left anywhere.
    text = (DOCS / "contract.md").read_text(encoding="utf-8")
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", text, re.M)}
    numbered = [int(n) for n in re.findall(r"^### A(\d+)\. ", text, re.M)]
    amendments = set(numbered)
    assert sections == set(range(1, 22))
    # Turn 4's amendments (A22 on) are each written beside the section they amend.
    assert set(range(1, 34)) == amendments
    assert len(numbered) == len(amendments), "an amendment is written twice"
    assert {f"a{n}" for n in amendments} <= contract_anchors()
    # This file names the patterns itself.
    here = Path(__file__).resolve()
    offenders = {
        str(path.relative_to(ROOT)): cites
        for path in sorted(_sources())
        if path.resolve() != here and (cites := numbered_contract_cites(path.read_text(encoding="utf-8")))
    }
    assert not offenders, f"cite these by anchor (docs/contract.md#...): {offenders}"


@pytest.mark.parametrize(
    "text",
    [
        "(docs/contract.md §9)",
        "(contract §16)",
        "docs/contract.md\n§8 A14",
        "never raises (§8 A11)",
        "[contract §1](contract.md#cancellation)",
        "the rule of §3 step 1",
    ],
)
def test_the_numbered_cite_check_finds_what_it_forbids(text: str) -> None:
    assert numbered_contract_cites(text)


def test_the_numbered_cite_check_allows_anchors_and_other_standards() -> None:
    text = """docs/contract.md#a11, [A12](contract.md#a12)
(RFC 9110 §6.4.1, §15.3.5) and (RFC 9112 §6.3 rule 6 by analogy, §8)
none (JSON-RPC 2.0 §5), as RFC 9110
    §6.5.1 asks"""
    assert numbered_contract_cites(text) == []


def _slug(heading: str) -> str:
    # Python-Markdown's ``toc`` slugify, for headings without ``{#id}``.
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def contract_anchors() -> set[str]:
    """Every anchor of docs/contract.md: a heading's ``{#id}`` (or its
    generated slug when it has none) and every explicit ``<a id="...">``."""
    text = (DOCS / "contract.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r'<a id="([\w-]+)"></a>', text))
    for heading in re.findall(r"^#{2,6} (.+)$", text, re.M):
        explicit = re.search(r"\{#([\w-]+)\}\s*$", heading)
        anchors.add(explicit.group(1) if explicit else _slug(heading))
    return anchors


def _contract_citers() -> list[Path]:
    # This file names the pattern itself (``contract.md#anchor``) in its messages.
    code = [
        path
        for folder in ("dshtools", "tests", "benchmarks")
        for path in (ROOT / folder).rglob("*.py")
        if path.resolve() != Path(__file__).resolve()
    ]
    return [*code, *DOCS.rglob("*.md"), ROOT / "README.md"]


def test_every_contract_anchor_cited_exists() -> None:
    anchors = contract_anchors()
    assert {"cancellation", "registry", "pipeline", "step-validate", "a11", "typed-tools"} <= anchors
    cited: dict[str, set[str]] = {}
    for path in _contract_citers():
        body = path.read_text(encoding="utf-8")
        found = set(re.findall(r"contract\.md#([\w-]+)", body))
        if path.name == "contract.md":
            found |= set(re.findall(r"\]\(#([\w-]+)\)", body))
        for anchor in found:
            cited.setdefault(anchor, set()).add(str(path.relative_to(ROOT)))
    assert len(cited) > 20, "hardly anything cites the contract by anchor: the pattern is wrong"
    missing = {anchor: sorted(where) for anchor, where in cited.items() if anchor not in anchors}
    assert not missing, missing


# A section sign is an RFC's (``RFC 9112 §6.1``, or a dotted number on the
# line after the RFC's) or a leftover numbered contract cite; decision numbers and field-case ids belong to docs/ and to
# the tests' docstrings, not to the runtime's prose.
_RUNTIME_PROSE_FORBIDDEN = {
    "a numbered contract cite (write docs/contract.md#anchor)": re.compile(
        r"contract\.md\s*§|(?<!RFC \d{4} )(?<!RFC \d{4}\n)§(?!\d+(?:\.\d+)+)"
    ),
    "a decision number": re.compile(r"decisions/\d{4}|[Dd]ecision \d{4}"),
    "a field-case id": re.compile(r"[Ff]ield cases?|\b[BN]\d{1,3}\b"),
}


def runtime_prose_problems(text: str) -> list[str]:
    return [what for what, pattern in _RUNTIME_PROSE_FORBIDDEN.items() if pattern.search(text)]


def test_the_runtime_cites_the_contract_by_anchor_only() -> None:
    offenders = {
        str(path.relative_to(ROOT)): problems
        for path in sorted((ROOT / "dshtools").rglob("*.py"))
        if (problems := runtime_prose_problems(path.read_text(encoding="utf-8")))
    }
    assert not offenders, offenders


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("(docs/contract.md §9)", "a numbered contract cite (write docs/contract.md#anchor)"),
        ("the rule of §3 step 1", "a numbered contract cite (write docs/contract.md#anchor)"),
        ("docs/contract.md\n    §6.1", "a numbered contract cite (write docs/contract.md#anchor)"),
        ("see docs/decisions/0026-http-message-framing.md", "a decision number"),
        ("(decision 0049)", "a decision number"),
        ("(field case B37: never a traceback)", "a field-case id"),
        ("ids repeat; B40", "a field-case id"),
    ],
)
def test_the_runtime_prose_check_finds_what_it_forbids(text: str, problem: str) -> None:
    assert runtime_prose_problems(text) == [problem]


def test_the_runtime_prose_check_allows_rfc_sections_and_anchors() -> None:
    assert runtime_prose_problems("framing (RFC 9112 §6.1), docs/contract.md#a14") == []
    assert runtime_prose_problems("as RFC 9110\n    §6.5.1 asks") == []


def test_every_field_case_cited_in_the_repository_is_listed() -> None:
    listed = set(re.findall(r"^### ([BN]\d+)$", (DOCS / "field-cases.md").read_text(encoding="utf-8"), re.M))
    assert {"B02", "B17", "B47", "N1", "N4"} <= listed
    cited: set[str] = set()
    for path in _sources():
        for group in re.findall(r"field cases? ((?:[BN]\d+(?:, | and |/)?)+)", path.read_text(encoding="utf-8")):
            cited |= set(re.findall(r"[BN]\d+", group))
    assert cited, "nothing cites a field case: the pattern is wrong"
    assert cited <= listed, sorted(cited - listed)


def test_no_page_shadows_the_standard_librarys_io() -> None:
    # A reader copies the samples into a script: ``from dshtools import io``
    # there hides the standard library's ``io`` (issue 21, item 10).
    pages = [*DOCS.rglob("*.md"), ROOT / "README.md"]
    bare = re.compile(r"^\s*(from dshtools import io|import dshtools\.io as io)\s*$", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in pages if bare.search(p.read_text(encoding="utf-8"))]
    assert not offenders, f"write `from dshtools import io as dio` in: {offenders}"
