"""Searching messages and sessions: parse, plan, execute per backend, present."""

from __future__ import annotations

from .pipeline import matching, search_messages, search_sessions, search_sql

__all__ = ["matching", "search_messages", "search_sessions", "search_sql"]
