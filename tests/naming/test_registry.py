"""The one registration rule: entries registered by name, found by name, discovered from a package."""

import pytest

from convinit.errors import ConfigError
from convinit.naming.registry import Registry


def test_registered_entry_is_found_by_its_name():
    registry = Registry("widget")
    registry.add("round", 1)
    assert registry.get("round") == 1
    assert registry.names() == ["round"]
    assert "round" in registry


def test_a_name_registered_twice_is_refused():
    registry = Registry("widget")
    registry.register("round")(1)
    with pytest.raises(ValueError, match="registered twice"):
        registry.add("round", 2)


def test_an_unknown_name_is_one_line_suggesting_the_closest():
    registry = Registry("widget", listing="; `widgets` lists them")
    registry.add("round", 1)
    with pytest.raises(ConfigError, match=r"unknown widget 'rond'; did you mean 'round'\?"):
        registry.get("rond")
    with pytest.raises(ConfigError, match="`widgets` lists them"):
        registry.get("zzz")


def test_a_registry_words_its_own_refusal_when_given_one():
    registry = Registry("widget", unknown=lambda typed, names: f"no {typed}; have {', '.join(names)}")
    registry.add("round", 1)
    with pytest.raises(ConfigError, match="no square; have round"):
        registry.get("square")


def test_discovery_imports_every_module_of_the_package(tmp_path, monkeypatch):
    package = tmp_path / "widgets_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from convinit.naming.registry import Registry\nR = Registry('widget', 'widgets_pkg')\n"
    )
    (package / "round.py").write_text("from widgets_pkg import R\nR.add('round', 1)\n")
    (package / "square.py").write_text("from widgets_pkg import R\nR.add('square', 4)\n")
    (package / "_private.py").write_text("raise RuntimeError('private modules are not imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import widgets_pkg

    assert widgets_pkg.R.names() == ["round", "square"]
