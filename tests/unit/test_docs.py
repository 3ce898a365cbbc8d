"""The README is a front page, every relative link in the docs resolves, and the README's commands are the Makefile's.

Links are checked as GitHub renders them: ``[text](target)`` and ``[label]: target`` outside code, relative to
the file that holds them. A relative link names a file or a folder (GitHub lists a folder, e.g. a technique's
src/nimbus/<technique>/) and no anchor: anchors break silently when a heading
moves, which is what the docs restructure (issue 24) does.
"""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
README_MAX_BYTES = 15 * 1024            # issue 24.6: a front page of at most ~15 KB; the rest lives in docs/
TWO_COMMANDS = ("make run", "make test")
TECHNIQUE_FOLDERS = ("stellaris", "nitro", "marless", "pbt", "onpolicy", "offpolicy")   # TECHNIQUES, test_architecture.py

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", re.MULTILINE)
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")     # http:, https:, mailto:, ...


def markdown_files() -> list[Path]:
    return [README, *sorted((REPO / "docs").rglob("*.md"))]


def link_targets(*, text: str) -> list[str]:
    """Every link target in Markdown ``text``, code blocks and code spans left out."""
    prose = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return _INLINE.findall(prose) + _REFERENCE.findall(prose)


def broken_links(*, path: Path, root: Path = REPO) -> list[str]:
    """Relative links of ``path`` that carry an anchor or name no existing file or folder under ``root``."""
    broken = []
    for target in link_targets(text=path.read_text()):
        if _EXTERNAL.match(target):
            continue
        if "#" in target:
            broken.append(f"{target} (an anchor)")
            continue
        resolved = (path.parent / target).resolve()
        if not (resolved.is_file() or resolved.is_dir()) or root.resolve() not in resolved.parents:
            broken.append(f"{target} (no such file)")
    return broken


def make_recipes(*, makefile: str) -> dict[str, list[str]]:
    """target -> its recipe lines, ``$(VENV)/bin/`` dropped (the README names the commands inside the venv)."""
    recipes: dict[str, list[str]] = {}
    current = None
    for line in makefile.splitlines():
        if line.startswith("\t") and current is not None:
            recipes[current].append(line.strip().replace("$(VENV)/bin/", ""))
        elif (match := re.match(r"^([A-Za-z][\w-]*)\s*:(?!=)", line)):
            current = match.group(1)
            recipes[current] = []
        else:
            current = None
    return recipes


def test_the_readme_is_a_front_page() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move how-to detail to docs/ (bound {README_MAX_BYTES})"



def test_the_readme_links_every_technique_folder() -> None:
    """Issue 24's "done when": the README's technique table links each technique's folder."""
    targets = link_targets(text=README.read_text())
    missing = [f"src/nimbus/{name}/" for name in TECHNIQUE_FOLDERS if f"src/nimbus/{name}/" not in targets]
    assert missing == [], f"README.md does not link {missing}"
    assert all((REPO / "src" / "nimbus" / name).is_dir() for name in TECHNIQUE_FOLDERS)


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_names_an_existing_file(path: Path) -> None:
    assert broken_links(path=path) == []


def test_the_link_check_sees_what_is_broken(tmp_path: Path) -> None:
    text = ("[ok](config.md) [gone](nowhere.md) [anchored](config.md#keys) ![img](missing.png)\n"
            "[folder](../src/pkg/) [no folder](../src/gone/)\n"
            "`[code](skipped.md)`\n```\n[block](skipped.md)\n```\n[ref]: also-missing.md\n[web](https://x.org/a#b)\n")
    docs = tmp_path / "repo" / "docs"
    docs.mkdir(parents=True)
    (docs / "config.md").write_text("# keys\n")
    (tmp_path / "repo" / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "elsewhere.md").write_text("a file, but outside the repository\n")
    (docs / "page.md").write_text(text + "[outside](../../elsewhere.md)\n")
    targets = link_targets(text=text)
    assert "skipped.md" not in targets and "https://x.org/a#b" in targets
    assert broken_links(path=docs / "page.md", root=tmp_path / "repo") == [
        "nowhere.md (no such file)", "config.md#keys (an anchor)", "missing.png (no such file)",
        "../src/gone/ (no such file)",
        "../../elsewhere.md (no such file)", "also-missing.md (no such file)"]


def test_the_readme_gives_the_two_commands_as_the_makefile_runs_them() -> None:
    readme = README.read_text()
    section = readme[readme.index("## Two commands"):]
    block = section[section.index("```bash\n") + len("```bash\n"):section.index("```", section.index("```bash\n") + 3)]
    lines = [line for line in block.splitlines() if line.strip()]
    assert tuple(" ".join(line.split("#")[0].split()) for line in lines) == TWO_COMMANDS
    recipes = make_recipes(makefile=(REPO / "Makefile").read_text())
    for command, line in zip(TWO_COMMANDS, lines):
        target = command.split()[1]
        assert target in recipes, f"the Makefile has no `{target}` target"
        assert "setup" in re.search(rf"^{target}\s*:(.*)$", (REPO / "Makefile").read_text(), re.MULTILINE).group(1)
        assert recipes[target] and all(step in line for step in recipes[target]), (line, recipes[target])
    assert "bash scripts/setup.sh" in (REPO / "Makefile").read_text() and "scripts/setup.sh" in lines[0]
