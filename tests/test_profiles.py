"""profiles.yaml holds only differences: no profile sets a parameter to its chapter's ``Params`` default
(the one place defaults live), so changing a default changes every profile that does not say otherwise, and a
chapter a profile does not name (a new one) runs with its declared defaults."""
from __future__ import annotations

import importlib

import pytest

from datajourney.book import registry, runner

#: Iterates over the registry's chapters: tests/test_new_chapter.py runs it against a new chapter too.
pytestmark = pytest.mark.chapters


def _defaults(ch) -> dict:
    return importlib.import_module(ch.module.rsplit(".", 1)[0] + ".params").Params().as_dict()


@pytest.mark.parametrize("ch", [c for c in registry.available() if c.module], ids=lambda c: c.name)
def test_no_profile_repeats_a_default(ch):
    defaults = _defaults(ch)
    repeats = [f"{profile}: {name} = {value!r}"
               for profile, chapters in runner.profiles().items()
               for name, value in ((chapters or {}).get(ch.name) or {}).items()
               if name in defaults and defaults[name] == value]
    assert not repeats, (f"{runner.PROFILES_FILE.name} repeats {ch.name}'s Params defaults (delete these "
                         "entries): " + "; ".join(repeats))


def test_a_chapter_a_profile_does_not_name_runs_with_its_defaults(tmp_path, monkeypatch):
    """A profile without an entry for a chapter injects none of its parameters: the notebook keeps the
    parameters cell, which is the chapter's ``Params`` defaults; one with an entry injects it."""
    ch = registry.lookup("2")
    for profile, chapters in runner.profiles().items():
        without = {k: v for k, v in (chapters or {}).items() if k != ch.name}
        monkeypatch.setattr(runner, "profiles", lambda without=without, profile=profile: {profile: without})
        (p,) = runner.plan([ch.name], profile, {}, tmp_path)
        assert set(p.parameters) == {"run_dir"}, (profile, p.parameters)
    named = next(name for name, chapters in yaml_profiles().items() if (chapters or {}).get(ch.name))
    monkeypatch.setattr(runner, "profiles", yaml_profiles)
    (p,) = runner.plan([ch.name], named, {}, tmp_path)
    assert set(p.parameters) - {"run_dir"} == set(yaml_profiles()[named][ch.name])


def yaml_profiles() -> dict:
    import yaml

    return yaml.safe_load(runner.PROFILES_FILE.read_text())
