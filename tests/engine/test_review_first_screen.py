"""The review comment as GitHub shows it: parsed by a GFM parser (markdown-it, gfm-like), laid out in a 790 px
column with GitHub's line heights, the first 900 px must hold the verdict, what to do and what changed."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from markdown_it import MarkdownIt

from tests.golden import GOLDEN_DIR

COLUMN = 790  # px: the comment body on a PR page
CHAR = 7.4  # px: an average character at GitHub's 14 px body font
LINE = 21  # px: a body line (14 px × 1.5)
SCREEN = 900  # px: the first screen


def _parser() -> MarkdownIt:
    # gfm-like without linkify (its extra package is not installed): tables and strikethrough as GitHub has them
    return MarkdownIt("gfm-like", {"linkify": False})


@dataclass(frozen=True)
class Block:
    """One rendered block: what it is, its text, its estimated height in px."""

    kind: str
    text: str
    height: float


def _lines(text: str, width: float = COLUMN) -> int:
    return max(1, math.ceil(len(text) * CHAR / width))


def layout(markdown: str) -> list[Block]:
    """The top-level blocks of `markdown` with heights estimated the way GitHub lays them out."""
    tokens = _parser().parse(markdown)
    blocks: list[Block] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.type == "heading_open":
            text = tokens[i + 1].content
            blocks.append(Block("heading", text, 20 * 1.25 * _lines(text, COLUMN * 14 / 20) + 24 + 16))
            i += 3
        elif t.type == "paragraph_open" and t.level == 0:
            text = tokens[i + 1].content
            blocks.append(Block("paragraph", text, LINE * _lines(text) + 16))
            i += 3
        elif t.type in ("bullet_list_open", "ordered_list_open") and t.level == 0:
            close = t.type.replace("_open", "_close")
            j, items = i + 1, []
            while tokens[j].type != close or tokens[j].level != 0:
                if tokens[j].type == "inline" and tokens[j].level == 3:
                    items.append(tokens[j].content)
                j += 1
            blocks.append(Block("list", "\n".join(items), sum(LINE * _lines(x, COLUMN - 32) + 4 for x in items) + 16))
            i = j + 1
        elif t.type == "fence":
            if t.info.strip() == "mermaid":
                boxes = sum(1 for line in t.content.splitlines() if '["' in line)
                # a left-to-right flowchart: about 70 px per box down, capped by GitHub's frame
                blocks.append(Block("mermaid", t.content, min(120 + 70 * boxes, 1200)))
            else:
                blocks.append(Block("code", t.content, 20 * t.content.count("\n") + 32))
            i += 1
        elif t.type == "html_block":
            text = t.content
            if text.startswith("<details"):
                blocks.append(Block("details", text, LINE + 16))  # folded: its summary line
            elif text.startswith("<!--"):
                pass
            else:
                blocks.append(Block("html", text, 18 * _lines(text) + 16))
            i += 1
        elif t.type == "hr":
            blocks.append(Block("hr", "", 40))
            i += 1
        else:
            i += 1
    return blocks


def first_screen(markdown: str) -> list[Block]:
    """The blocks that start within the first SCREEN px."""
    out, top = [], 0.0
    for block in layout(markdown):
        if top >= SCREEN:
            break
        out.append(block)
        top += block.height
    return out


def _skip_details(markdown: str) -> str:
    """The body with each `<details>` folded to its summary (GitHub shows them closed)."""
    out, depth = [], 0
    for line in markdown.splitlines():
        if line.startswith("<details>"):
            if depth == 0:
                out.append(line.split("</summary>")[0] + "</summary></details>")
            depth += 1
            continue
        if depth:
            depth -= line.count("<details>") - line.count("</details>") if "details>" in line else 0
            continue
        out.append(line)
    return "\n".join(out)


SHAPES = [
    "seed-pr.md", "seed-pr-reverse.md", "80-tiers-1-changed.md", "move-2-tiers.md", "split-80-tiers-3000.md", "prod.md",
    # issue 24's shapes (tests/engine/test_review_comment.py SHAPE_GOLDENS)
    "shape-one-app-bump.md", "shape-20-commit-pr.md", "shape-repo-wide-change.md", "shape-new-cycle.md", "shape-fix-pr.md", "shape-moves.md",
]


@pytest.mark.parametrize("name", SHAPES)
def test_first_900_px_hold_the_verdict_the_action_and_the_change(name: str) -> None:
    text = (GOLDEN_DIR / "review" / name).read_text(encoding="utf-8").split("<!-- ====== next comment")[0]
    screen = first_screen(_skip_details(text))
    kinds = [b.kind for b in screen]
    assert kinds[0] == "heading" and screen[0].text[:2] in ("✅ ", "⚠️", "❌ "), screen[0]  # the verdict first
    texts = [b.text for b in screen]
    assert any(t.startswith(("**To do:**", "**Nothing to do.**")) for t in texts), texts  # what to do
    changed = texts.index("**What changed:**")
    assert kinds[changed + 1] == "list"  # …and the change in words, whole, on the first screen
    top = sum(b.height for b in screen[: changed + 2])
    assert top <= SCREEN, (name, top)
    # nothing but the verdict, the action and the summary above it
    assert not {"code", "details", "hr"} & set(kinds[: changed + 2])


def test_the_layout_reads_github_blocks() -> None:
    blocks = layout(_skip_details("### v\n**To do:** x\n\n- a\n- b\n\n```mermaid\nflowchart LR\n  a[\"a\"]\n  b[\"b\"]\n```\n<details><summary>s</summary>\n\nx\n\n</details>\n"))
    assert [b.kind for b in blocks] == ["heading", "paragraph", "list", "mermaid", "details"]
    assert blocks[3].height == 120 + 140
