"""The README's config reference is generated from the models; it must match the code."""

from pathlib import Path

from nimbus.config.reference import BEGIN, END, reference_markdown

README = Path(__file__).resolve().parents[3] / "README.md"


def test_readme_config_reference_is_current() -> None:
    text = README.read_text()
    block = text[text.index(BEGIN):text.index(END) + len(END)]
    assert block == reference_markdown(), \
        "README config reference is stale: regenerate it with `python -m nimbus.config.reference --write README.md`"


def test_every_key_and_section_in_the_reference_says_what_it_means() -> None:
    lines = reference_markdown().splitlines()
    broken = [line for line in lines[4:-2] if not line.startswith("| ")]    # a newline inside a cell ends its row
    assert broken == [], f"lines that are not table rows: {broken}"
    rows = [line for line in lines if line.startswith("| `")]
    unexplained = [row.split("|")[1].strip() for row in rows if not row.rstrip("|").split("|")[-1].strip()]
    assert len(rows) > 300 and unexplained == [], f"keys without a meaning: {unexplained}"
