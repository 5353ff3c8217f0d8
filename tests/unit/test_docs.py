"""The README stays a first screen, the docs stay linked, and the README's test command stays CI's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INSTALL, TEST = 'pip install -e ".[test]"', "pytest"


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


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


def test_docs_index_links_every_page() -> None:
    index = DOCS / "README.md"
    linked = {(DOCS / t.split("#", 1)[0]).resolve() for t in _relative_links(index)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p != index and p.resolve() not in linked]
    assert not missing, f"docs/README.md does not link: {', '.join(missing)}"


def test_readme_test_command_is_ci_s() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = [line for line in readme.splitlines() if INSTALL in line]
    assert command, f"README.md has no line with {INSTALL}"
    assert any(re.search(rf"\b{TEST}\b", line.split(INSTALL, 1)[1]) for line in command), \
        f"README.md's {INSTALL} line does not then run {TEST}: {command}"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    for line in (INSTALL, TEST):
        assert line in ci, f".ci/run has no line `{line}`: CI must run the README's test command"


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
