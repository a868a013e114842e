"""Builders for test deliveries."""

from __future__ import annotations

import json
from typing import Any

from oncebox import Delivery


def event(notification_id: str = "n-1", **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema_version": 1,
        "source": "listings-feed",
        "subscription": "sub-main",
        "notification_id": notification_id,
        "seller_id": "SELLER-A",
        "sku": "SKU-1",
        "marketplace_id": "ATVPDKIKX0DER",
        "notification_type": "listing_status_changed",
        "event_time": "2026-11-01T10:00:00Z",
        "payload": {"status": "ACTIVE", "issues": []},
    }
    base.update(changes)
    return base


def event_body(notification_id: str = "n-1", **changes: Any) -> bytes:
    return json.dumps(event(notification_id, **changes)).encode()


def frame(frame_id: str, text: str) -> Delivery:
    return Delivery(text.encode(), key=frame_id)
