"""factory-boy factories for the models, writing through the package's own write path."""

from __future__ import annotations

from typing import Any

import factory

from hermes_models.conversations.transcript import append_message
from hermes_models.models.tables import Message, Session
from hermes_models.store import binding

#: Start of the factory clock: sessions start a minute apart from here.
EPOCH = 1_700_000_000.0


class PeeweeFactory(factory.Factory):
    """Creates rows with ``Model.create`` inside one retried write."""

    class Meta:
        abstract = True

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Any:
        return binding.write(lambda: model_class.create(**kwargs))


class SessionFactory(PeeweeFactory):
    class Meta:
        model = Session

    id = factory.Sequence(lambda n: f"session-{n:04d}")
    source = "cli"
    model_name = "test-model"
    started_at = factory.Sequence(lambda n: EPOCH + n * 60.0)


class MessageFactory(factory.Factory):
    """Appends through ``append_message`` so session counters stay right."""

    class Meta:
        model = Message

    session = factory.SubFactory(SessionFactory)
    role = "user"
    content = factory.Sequence(lambda n: f"message number {n}")
    timestamp = factory.Sequence(lambda n: EPOCH + 1.0 + n)

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Any:
        session = kwargs.pop("session")
        role = kwargs.pop("role")
        content = kwargs.pop("content")
        message_id = append_message(session.id, role, content, **kwargs)
        return Message.get_by_id(message_id)


ALL_FACTORIES = (SessionFactory, MessageFactory)
