"""The pinned environments' one base (properties/servers/venvs.py, ``PinnedVenv``), on a toy tier
that installs nothing from the registry: its mark is pip itself, at the version ``python -m venv``
puts there (``ensurepip``'s). A build is made beside the final folder and moved there only once it
holds what it must, so a failed or interrupted build never reads as installed; the messages name
the tier's command; each tier declares its own error class and command."""

from __future__ import annotations

import ensurepip
from pathlib import Path

import pytest

from specproof.properties.servers import mistralrs_env, openvino_env, ort_env, venvs, vllm_cpu


class ToyError(venvs.WorkerFault):
    pass


class Toy(venvs.PinnedVenv):
    dist, version, variable, folder = "pip", ensurepip.version(), "SPECPROOF_TOY_VENV", "toy"
    label, command, error = "toy", "specproof env install toy", ToyError
    fail = False

    def steps(self, py: Path, log: Path, progress) -> None:
        assert py.parent.parent.name.endswith(".tmp")  # built beside the final folder
        if self.fail:
            raise ToyError("the step failed on purpose")


def test_a_built_environment_is_moved_into_place_and_found_again(tmp_path):
    venv, said = tmp_path / "venv", []
    py = Toy().install(venv, progress=said.append)
    assert py == venv / "bin" / "python" and py.exists()
    assert Toy().installed(venv) == (True, ensurepip.version())
    assert not (tmp_path / "venv.tmp").exists()
    scripts = [p for p in (venv / "bin").iterdir() if p.is_file() and not p.is_symlink()]
    assert scripts and not any("venv.tmp" in p.read_text(errors="replace") for p in scripts)
    assert said[0].startswith(f"creating {venv} (pip ") and said[-1].startswith("pip ")
    again: list[str] = []
    assert Toy().install(venv, progress=again.append) == py
    assert again == [f"pip {ensurepip.version()} is installed in {venv}"]


def test_a_failed_build_leaves_no_environment(tmp_path):
    toy = Toy()
    toy.fail = True
    with pytest.raises(ToyError, match="failed on purpose"):
        toy.install(tmp_path / "venv", progress=lambda _: None)
    assert not (tmp_path / "venv").exists()
    assert toy.installed(tmp_path / "venv") == (
        False,
        f"no toy environment at {tmp_path / 'venv'} (specproof env install toy)",
    )


def test_a_build_without_what_it_must_hold_is_refused(tmp_path):
    class Short(Toy):
        also = ("specproof-no-such-distribution",)

    with pytest.raises(
        ToyError, match="does not hold what it needs: .* has no specproof-no-such-distribution"
    ):
        Short().install(tmp_path / "venv", progress=lambda _: None)

    class Other(Toy):
        version = "0.0.1"

    ok, why = Other().installed(tmp_path / "venv")
    assert not ok and f"has no pip 0.0.1 ({ensurepip.version()}; specproof env install toy)" in why


def test_the_environment_variable_names_another_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPROOF_TOY_VENV", str(tmp_path / "elsewhere"))
    assert Toy().venv_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("SPECPROOF_TOY_VENV")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert Toy().venv_dir() == tmp_path / "cache" / "specproof" / "toy" / "venv"


@pytest.mark.parametrize("mod", [mistralrs_env, openvino_env, ort_env, vllm_cpu])
def test_every_tier_declares_its_error_command_and_version(mod):
    env = mod.ENV
    assert issubclass(env.error, venvs.WorkerFault) and env.error is not venvs.WorkerFault
    assert env.version == mod.VERSION and env.command.startswith("specproof env install ")
    assert mod.installed == env.installed and mod.install == env.install
