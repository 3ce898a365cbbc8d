"""The README's config reference is generated from the models; it must match the code."""

from pathlib import Path

from nimbus.config.reference import BEGIN, END, reference_markdown

README = Path(__file__).resolve().parents[3] / "README.md"


def test_readme_config_reference_is_current() -> None:
    text = README.read_text()
    block = text[text.index(BEGIN):text.index(END) + len(END)]
    assert block == reference_markdown(), \
        "README config reference is stale: regenerate it with `python -m nimbus.config.reference --write README.md`"
