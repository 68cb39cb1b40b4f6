"""Kafka pieces that need no broker."""

from __future__ import annotations

import uuid

from etlstage_workers.kafka import broker
from etlstage_workers.kafka.options import default_name


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch):
    """An id starting with '-' made the storage format step read it as an option (it failed)."""
    ids = iter([uuid.UUID(bytes=b"\xf8" + b"\x00" * 15), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(broker.uuid, "uuid4", lambda: next(ids))
    got = broker.cluster_id()
    assert got == "AQEBAQEBAQEBAQEBAQEBAQ"


def test_default_group_and_transactional_names_come_from_the_stage_folder():
    assert default_name("/x/.etlstage/orders/stages/read", "read") == "etlstage.orders.read"
    assert default_name("", "read") == "etlstage.read"
