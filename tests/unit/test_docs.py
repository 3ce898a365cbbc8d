"""The README is a front page, every relative link in the docs resolves, and the README's commands are the Makefile's.

Links are checked as GitHub renders them: ``[text](target)`` and ``[label]: target`` outside code, relative to
the file that holds them. A relative link names a file or a folder (GitHub lists a folder, e.g. a technique's
src/nimbus/<technique>/) and no anchor: anchors break silently when a heading
moves, and pages are restructured as the code is.

docs/architecture.md's tree is checked against the file system: every path it lists exists, and every package under
src/nimbus is listed, so the page a newcomer reads first cannot send them to a file that moved.
"""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
README_MAX_BYTES = 15 * 1024            # a front page of at most ~15 KB; the rest lives in docs/
ARCHITECTURE = REPO / "docs" / "architecture.md"
ARCHITECTURE_MAX_BYTES = 20 * 1024      # the tree, the layers, the loop, links; decisions live on the technique pages
TWO_COMMANDS = ("make run", "make test")
TECHNIQUE_FOLDERS = ("stellaris", "nitro", "marless", "pbt", "onpolicy", "offpolicy")  # test_architecture's TECHNIQUES

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
    assert size <= README_MAX_BYTES, \
        f"README.md is {size} bytes; move how-to detail to docs/ (bound {README_MAX_BYTES})"



def test_the_readme_links_every_technique_folder() -> None:
    """The README's technique table links each technique's folder: the tree is cut by technique, and the front page
    says so."""
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


_TREE_ROOT = "src/nimbus/"
_TREE_LINE = re.compile(r"^(?P<indent> *)(?P<path>\S+)(?:\s+(?P<about>.*))?$")
_TREE_NAMED = re.compile(r"(?<![\w/*.-])(\w+\.(?:py|yaml))\b")    # a file a line's description names, beside its own


def tree_block(*, text: str) -> str:
    """The fenced block under "## The tree" that starts with ``src/nimbus/``."""
    section = text[text.index("\n## The tree"):]
    match = re.search(r"^```[^\n]*\n(src/nimbus/\n.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert match, "docs/architecture.md: no ``` block starting with src/nimbus/ under \"## The tree\""
    return match.group(1)


def tree_paths(*, block: str) -> list[str]:
    """Every path a tree block names, relative to the repository: each line's own (a folder ends in ``/``; two spaces
    of indent per level below the folder above it) and the ``name.py`` files its description names in that folder."""
    folders: list[str] = []   # the open folders, one per level
    paths = []
    for number, line in enumerate(block.splitlines(), start=1):
        if not line.strip():
            continue
        match = _TREE_LINE.match(line)
        level, name = len(match.group("indent")) // 2, match.group("path")
        assert len(match.group("indent")) % 2 == 0 and level <= len(folders), f"tree line {number}: indent {line!r}"
        if number == 1:
            assert name == _TREE_ROOT, f"the tree starts with {_TREE_ROOT}, not {name}"
            folders = [_TREE_ROOT]
            paths.append(_TREE_ROOT)
            continue
        assert level >= 1, f"tree line {number}: only {_TREE_ROOT} sits at the left margin: {line!r}"
        del folders[level:]
        path = folders[-1] + name
        paths.append(path)
        here = path if name.endswith("/") else folders[-1]
        paths += [here + named for named in _TREE_NAMED.findall(match.group("about") or "")]
        if name.endswith("/"):
            folders.append(path)
    return paths


def tree_mismatches(*, block: str, root: Path = REPO) -> list[str]:
    """Paths the tree names that do not exist, and packages under src/nimbus it does not list."""
    listed = tree_paths(block=block)
    missing = [f"{path} (no such file or folder)" for path in listed if not (root / path).exists()]
    packages = sorted(f"{init.parent.relative_to(root).as_posix()}/"
                      for init in (root / _TREE_ROOT).rglob("__init__.py"))
    unlisted = [f"{package} (a package the tree does not list)" for package in packages
                if package != _TREE_ROOT and package not in listed]
    return missing + unlisted


def test_the_architecture_page_is_short() -> None:
    size = len(ARCHITECTURE.read_bytes())
    assert size <= ARCHITECTURE_MAX_BYTES, \
        f"docs/architecture.md is {size} bytes; move decisions to the technique pages (bound {ARCHITECTURE_MAX_BYTES})"


def test_the_architecture_tree_is_the_file_system() -> None:
    assert tree_mismatches(block=tree_block(text=ARCHITECTURE.read_text())) == []


def test_the_tree_check_sees_a_moved_file_and_an_unlisted_package(tmp_path: Path) -> None:
    for package in ("src/nimbus", "src/nimbus/data", "src/nimbus/run", "src/nimbus/algos/ppo", "src/nimbus/algos"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    for module in ("src/nimbus/core.py", "src/nimbus/data/codec.py", "src/nimbus/data/store.py",
                   "src/nimbus/algos/ppo/loss.py"):
        (tmp_path / module).write_text("")
    block = ("src/nimbus/\n"
             "  core.py        the protocols\n"
             "  data/          codec.py, store.py and slots.py (moved away)\n"
             "    codec.py     the wire format\n"
             "  algos/         the algorithms\n"
             "    ppo/         loss.py\n"
             "  gone.py        listed, never there\n")
    assert tree_paths(block=block) == [
        "src/nimbus/", "src/nimbus/core.py", "src/nimbus/data/", "src/nimbus/data/codec.py", "src/nimbus/data/store.py",
        "src/nimbus/data/slots.py", "src/nimbus/data/codec.py", "src/nimbus/algos/", "src/nimbus/algos/ppo/",
        "src/nimbus/algos/ppo/loss.py", "src/nimbus/gone.py"]
    assert tree_mismatches(block=block, root=tmp_path) == [
        "src/nimbus/data/slots.py (no such file or folder)", "src/nimbus/gone.py (no such file or folder)",
        "src/nimbus/run/ (a package the tree does not list)"]
    text = "# page\n\n## The tree\n\n```\n" + block + "```\n"
    assert tree_block(text=text) == block
