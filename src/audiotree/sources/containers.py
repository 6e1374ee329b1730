"""Kept so that existing imports work: container members live in :mod:`audiotree.discovery.containers`,
the check of ``shard_options`` and host shares in :mod:`audiotree.discovery.sharding`."""

from audiotree.discovery.containers import (
    SIDECAR_EXTENSIONS, ContainerItems, expand_braces, expand_container, is_container, label_rows,
)
from audiotree.discovery.sharding import check_shard_options, host_items, host_share

__all__ = ["expand_braces", "is_container", "expand_container", "ContainerItems", "SIDECAR_EXTENSIONS",
           "label_rows", "host_share", "host_items", "check_shard_options"]
