"""The string formats RDSS messages use, as cheap Python checks shared by both validators.

The fast compiled validator and the explaining validator call the same functions, so a
value is never accepted by one and rejected by the other.

>>> is_timestamp("1997-07-16T19:20:30.45+01:00"), is_timestamp("1997-07-16 19:20:30")
(True, False)
>>> is_uuid("00578f5d-bca4-4e46-a48a-3739db0070ec"), is_uuid("00578F5D-BCA4-4E46-A48A-3739DB0070EC")
(True, False)
"""

from __future__ import annotations

import ipaddress
import re
from datetime import date
from functools import lru_cache

# The specification's own pattern: lower case, version 1-5, RFC 4122 variant.
UUID_PATTERN = "^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
UUID_EXPECTED = "a lower-case RFC 4122 UUID 8-4-4-4-12 (version 1-5, variant 8/9/a/b)"
TIMESTAMP_EXPECTED = "an RFC 3339 timestamp with date, time and zone, e.g. 1997-07-16T19:20:30.45+01:00"

_uuid = re.compile(UUID_PATTERN).match
# RFC 3339 section 5.6 date-time; the zone is mandatory (the spec: "MUST be provided in all instances").
_timestamp = re.compile(
    r"(\d{4})-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt]([01]\d|2[0-3]):([0-5]\d):([0-5]\d|60)(\.\d+)?"
    r"([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)\Z"
).match
_hostname = re.compile(r"(?=.{1,253}\Z)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?\Z").match
_email = re.compile(r"[^@\s\"(),:;<>\[\\\]]+@[^@\s\"(),:;<>\[\\\]]+\Z").match
_uri = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s]*\Z").match


def is_uuid(value: object) -> bool:
    return not isinstance(value, str) or _uuid(value) is not None


def is_timestamp(value: object) -> bool:
    if not isinstance(value, str):
        return True  # a type error is reported by the "type" keyword, not the format
    return _is_timestamp(value)


# Messages repeat the same timestamps and hosts many times: remember recent verdicts (pure functions of a string).
@lru_cache(maxsize=8192)
def _is_timestamp(value: str) -> bool:
    m = _timestamp(value)
    if m is None:
        return False
    if m[3] <= "28":  # month and day ranges are in the pattern; only 29..31 need the calendar
        return True
    try:
        date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return False
    return True


def is_hostname(value: object) -> bool:
    return not isinstance(value, str) or _hostname(value) is not None


def is_ip(value: object, version: int | None = None) -> bool:
    if not isinstance(value, str):
        return True
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return False
    return version is None or address.version == version


def is_hostname_or_ip(value: object) -> bool:
    return not isinstance(value, str) or _is_hostname_or_ip(value)


@lru_cache(maxsize=4096)
def _is_hostname_or_ip(value: str) -> bool:
    return _hostname(value) is not None or is_ip(value)


def is_email(value: object) -> bool:
    return not isinstance(value, str) or _email(value) is not None


def is_uri(value: object) -> bool:
    return not isinstance(value, str) or _uri(value) is not None


# Format name -> check, for the project's schemas and for the official releases' names.
FORMAT_CHECKS = {
    "rdss-timestamp": is_timestamp,
    "date-time": is_timestamp,
    "hostname-or-ip": is_hostname_or_ip,
    "hostname": is_hostname,
    "ipv4": lambda v: is_ip(v, 4),
    "ipv6": lambda v: is_ip(v, 6),
    "email": is_email,
    "uri": is_uri,
}
TIMESTAMP_FORMATS = frozenset({"rdss-timestamp", "date-time"})


def timestamp_seconds(value: str) -> float | None:
    """Seconds since the epoch of a valid RFC 3339 timestamp, None if it is not one.

    >>> timestamp_seconds("1970-01-01T01:00:00+01:00"), timestamp_seconds("2004-08-01T10:00:00-00:00")
    (0.0, 1091354400.0)
    """
    from datetime import datetime, timedelta, timezone

    if not isinstance(value, str) or not is_timestamp(value):
        return None
    try:  # the C parser handles the common forms; the pattern below covers leap seconds and lower-case t/z
        return datetime.fromisoformat(value).timestamp()
    except ValueError:
        pass
    m = _timestamp(value)
    if m is None or not is_timestamp(value):
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    fraction = float(m.group(7)) if m.group(7) else 0.0
    zone = m.group(8)
    offset = 0 if zone in ("Z", "z") else (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 60 + int(zone[4:6]))
    base = datetime(year, month, day, hour, minute, min(second, 59), tzinfo=timezone(timedelta(minutes=offset)))
    return base.timestamp() + fraction + (1 if second == 60 else 0)
