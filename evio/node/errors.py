"""The node package's exceptions: why the daemon cannot start or had to stop."""

from __future__ import annotations


class NodeError(Exception):
    """Base of every error raised by evio.node."""


class DependencyError(NodeError):
    """Something the daemon needs is missing: root, a program, a reachable OVSDB, a module."""


class NodeConfigError(NodeError):
    """The config is valid on its own but cannot be run as given (e.g. one account, two servers)."""


class StartupError(NodeError):
    """A part of the node failed to start; everything started before it was stopped again."""
