"""The config reference (docs/config.md) is generated from the models; it must match the code."""

from pathlib import Path

from nimbus.config.reference import BEGIN, END, reference_markdown

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "config.md"


def test_the_config_reference_page_is_current() -> None:
    text = PAGE.read_text()
    block = text[text.index(BEGIN):text.index(END) + len(END)]
    assert block == reference_markdown(), \
        "docs/config.md is stale: regenerate it with `python -m nimbus.config.reference --write docs/config.md`"


def test_the_readme_links_the_reference_instead_of_holding_it() -> None:
    readme = (REPO / "README.md").read_text()
    assert BEGIN not in readme and "(docs/config.md)" in readme


def test_every_key_and_section_in_the_reference_says_what_it_means() -> None:
    lines = reference_markdown().splitlines()
    broken = [line for line in lines[4:-2] if not line.startswith("| ")]    # a newline inside a cell ends its row
    assert broken == [], f"lines that are not table rows: {broken}"
    rows = [line for line in lines if line.startswith("| `")]
    unexplained = [row.split("|")[1].strip() for row in rows if not row.rstrip("|").split("|")[-1].strip()]
    assert len(rows) > 300 and unexplained == [], f"keys without a meaning: {unexplained}"
