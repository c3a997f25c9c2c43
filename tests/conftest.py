from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import hermes_models
from hermes_models import HermesDatabase, SessionDB

from factories import ALL_FACTORIES


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing a test does may reach the real ~/.hermes."""
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes-home"))


@pytest.fixture(autouse=True)
def _reset_factory_sequences() -> None:
    for factory_class in ALL_FACTORIES:
        factory_class.reset_sequence(0, force=True)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def database(db_path: Path) -> Iterator[HermesDatabase]:
    """A migrated database file the models are bound to."""
    db = hermes_models.connect(db_path)
    yield db
    db.close()


@pytest.fixture
def store(db_path: Path) -> Iterator[SessionDB]:
    """A SessionDB on a fresh file (the models are bound to it too)."""
    session_db = SessionDB(db_path)
    yield session_db
    session_db.close()
