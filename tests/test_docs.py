"""The README and the pages under docs/: every page is reachable from the README, every
relative link (and its #anchor) lands, the README stays short, and every
``python -m autotune ...`` command in a ```bash block names config keys that exist and
composes as the CLI composes it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from omegaconf import DictConfig

from autotune.app.composition import OPEN_KEYS, compose

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
CONF = ROOT / "conf"
README_MAX_LINES = 250

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
EXTERNAL = ("http://", "https://", "mailto:")


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _prose(page: Path) -> str:
    """The page without its fenced blocks (a ``#`` there is a comment, not a heading)."""
    return FENCE.sub("", page.read_text())


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as -."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", _prose(page), flags=re.M)}


def _links(page: Path) -> list[str]:
    return [target for target in LINK.findall(_prose(page)) if not target.startswith(EXTERNAL)]


def test_docs_exist_and_each_starts_with_a_title_and_a_summary() -> None:
    assert DOCS, "no pages under docs/"
    for page in DOCS:
        text = page.read_text()
        assert text.startswith("# "), f"{_name(page)} does not start with a # title"
        first = text.split("\n\n")[1]
        assert not first.startswith(("#", "```", "|", "-")), (
            f"{_name(page)}: the title is not followed by a paragraph"
        )


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / t.split("#")[0]).resolve() for t in _links(README) if t.split("#")[0]}
    missing = [_name(page) for page in DOCS if page.resolve() not in linked]
    assert not missing, f"not linked from README.md: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading with that anchor in {file.name}")
    assert not broken, f"{_name(page)}:\n" + "\n".join(broken)


def test_the_readme_is_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


def _commands(page: Path) -> list[list[str]]:
    """The arguments of every ``python -m autotune ...`` in the page's ```bash blocks."""
    found = []
    for info, body in FENCE.findall(page.read_text()):
        if info.split()[:1] != ["bash"]:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|;", line):
                words = shlex.split(part, comments=True)
                if words[:3] == ["python", "-m", "autotune"]:
                    found.append([w for w in words[3:] if not w.startswith("-")])
    return found


def _written_on(page: Path) -> set[str]:
    """The files the page's fenced blocks write out (```yaml conf/dataset/clips.yaml)."""
    return {
        info.split()[1] for info, _ in FENCE.findall(page.read_text()) if len(info.split()) > 1
    }


COMMANDS = [(page, args) for page in PAGES for args in _commands(page)]


@pytest.fixture(scope="module")
def default_config() -> DictConfig:
    return compose([])


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) >= 10
    assert any(args == ["mode=verify"] for _, args in COMMANDS)


@pytest.mark.parametrize(
    ("page", "args"),
    COMMANDS,
    ids=[f"{_name(p)}: {' '.join(a) or '(defaults)'}" for p, a in COMMANDS],
)
def test_commands_use_config_keys_that_exist(
    page: Path, args: list[str], default_config: DictConfig
) -> None:
    overrides = []
    for arg in args:
        key, equals, value = arg.partition("=")
        key = key.lstrip("+~")
        assert equals, f"{arg!r} is not a key=value override"
        assert key.split(".")[0] in default_config, f"{arg}: no config key {key.split('.')[0]!r}"
        if "." not in key and (CONF / key).is_dir():  # a config group: its option must exist
            own = f"conf/{key}/{value}.yaml"
            assert (CONF / key / f"{value}.yaml").is_file() or own in _written_on(page), (
                f"{arg}: no option {value!r} in conf/{key}/, nor written out on the page"
            )
            if own in _written_on(page):
                continue  # the user's own file, only there in the documented project
        elif "." in key and not key.startswith(OPEN_KEYS):
            node = default_config
            for part in key.split("."):
                assert isinstance(node, DictConfig) and part in node, f"{arg}: no key {key!r}"
                node = node[part]
        overrides.append(arg)
    compose(overrides)  # and the CLI composes them as they stand
