"""The README stays a first screen, the docs and the measurement pages stay linked (every file and anchor a
link names exists), and the README's test command stays CI's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MEASUREMENTS = ROOT / "benchmarks" / "measurements"  # dated logs, apart from the user pages (issue 52)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INSTALL, TEST = 'pip install -e ".[test]"', "pytest"


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md")), *sorted(MEASUREMENTS.glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation (dashes other than '-' too) dropped, spaces '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    """Every heading's anchor on ``page`` (a repeated one gets -1, -2, ... as GitHub numbers them)."""
    counts: dict[str, int] = {}
    anchors: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        heading = re.match(r"#{1,6} (.*)", line)
        if heading and not fenced:
            slug = _slug(heading.group(1))
            anchors.add(f"{slug}-{counts[slug]}" if slug in counts else slug)
            counts[slug] = counts.get(slug, 0) + 1
    return anchors


def _relative_links(page: Path) -> list[str]:
    """Targets of the page's markdown links, leaving out web links and links to an anchor of the page."""
    targets = LINK.findall(page.read_text(encoding="utf-8"))
    return [t for t in targets if not t.startswith(("http://", "https://", "mailto:", "#"))]


def test_readme_is_at_most_250_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250): move detail to docs/"


def test_every_relative_link_resolves() -> None:
    broken = [f"{page.relative_to(ROOT)}: {target}"
              for page in _pages() for target in _relative_links(page)
              if not (page.parent / target.split("#", 1)[0]).exists()]
    assert not broken, "links to missing files:\n" + "\n".join(broken)


def test_every_anchor_a_link_names_is_a_heading_of_its_page() -> None:
    broken = []
    for page in _pages():
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            path, _, anchor = target.partition("#")
            linked = (page.parent / path) if path else page
            if anchor and linked.suffix == ".md" and not target.startswith(("http://", "https://")) \
                    and linked.exists() and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "links to a heading that is not there:\n" + "\n".join(broken)


def test_docs_index_links_every_page() -> None:
    index = DOCS / "README.md"
    linked = {(DOCS / t.split("#", 1)[0]).resolve() for t in _relative_links(index)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p != index and p.resolve() not in linked]
    assert not missing, f"docs/README.md does not link: {', '.join(missing)}"


def test_readme_test_command_is_ci_s() -> None:
    """Every command of the README's test line after the install (the linter, then pytest) is a line of
    .ci/run, after its own install line."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = [line for line in readme.splitlines() if INSTALL in line and "venv-oldest" not in line]
    assert len(command) == 1, f"README.md has no single test line with {INSTALL}: {command}"
    after = [part.strip() for part in command[0].split(INSTALL, 1)[1].split("&&") if part.strip()]
    assert after and after[-1] == TEST and "ruff check ." in after, f"README.md's test line: {command[0]}"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert INSTALL in ci, f".ci/run has no line `{INSTALL}`"
    start = ci.index(INSTALL)
    assert ci[start + 1:start + 1 + len(after)] == after, f".ci/run must run {after} after `{INSTALL}`"


def test_readme_oldest_tensorflow_command_is_ci_s() -> None:
    """The second test command (the oldest supported TensorFlow) is run by CI as the README writes it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    oldest = [line.strip() for line in readme.splitlines() if line.startswith("python3 -m venv .venv-oldest")]
    assert len(oldest) == 1, "README.md has no single .venv-oldest test command"
    from perfkit._tf import SUPPORTED

    assert f'"tensorflow=={SUPPORTED[0][0]}.{SUPPORTED[0][1]}.' in oldest[0], "the oldest supported TensorFlow"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert oldest[0] in ci, ".ci/run must run the README's oldest-TensorFlow command as written"


def test_the_verdict_page_says_what_to_change_for_every_cause() -> None:
    from perfkit.analysis.advice import CauseKind

    page = (DOCS / "verdict.md").read_text(encoding="utf-8")
    table = page[page.index("## Causes and what to change"):]
    missing = [k.value for k in CauseKind if f"| `{k.value}` |" not in table]
    assert not missing, f"docs/verdict.md has no row for {missing}"
