"""The config tests' fixtures: the shipped configs resolved once per module."""

from __future__ import annotations

import pytest

from causalpos.config import Resolved
from tests.config.configs import load


@pytest.fixture(scope="module")
def default() -> Resolved:
    return Resolved(load("config.yaml"))


@pytest.fixture(scope="module")
def smoke() -> Resolved:
    return Resolved(load("configs/smoke.yaml"))


@pytest.fixture(scope="module")
def paper() -> Resolved:
    return Resolved(load("configs/paper.yaml"))
