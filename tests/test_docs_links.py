"""Every relative link of the README and the docs pages reaches a file that exists, and an
anchor in it that a heading makes (as GitHub names headings), so that a page moved or a heading
renamed shows up here rather than as a dead link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The page without code, where brackets and parentheses are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        name = slug(heading)
        n = 0
        while (candidate := name if n == 0 else f"{name}-{n}") in found:
            n += 1
        found.add(candidate)
    return found


def links(page: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(_prose(page.read_text()))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: ...
    ]


def test_the_pages_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/architecture.md", "docs/benchmarks.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_reach_a_file_and_a_heading(page: Path) -> None:
    broken: list[str] = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no file {destination.relative_to(ROOT)}")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: no heading makes #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_slugs_are_githubs() -> None:
    assert slug("Reload (SIGHUP)") == "reload-sighup"
    assert slug("Where the agent's time goes") == "where-the-agents-time-goes"
    assert slug("Zone cache: cold reads of 1,000 uncompacted streams, per zone") == (
        "zone-cache-cold-reads-of-1000-uncompacted-streams-per-zone"
    )
    assert slug("The `nats` CLI") == "the-nats-cli"


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## A section\n\n[ok](#a-section) [gone](#nowhere) [file](missing.md)\n"
        "`[not a link](nowhere.md)`\n\n```\n[nor this](nowhere.md)\n```\n"
    )
    assert links(page) == ["#a-section", "#nowhere", "missing.md"]
    assert anchors(page) == {"title", "a-section"}
