"""Time units shared by every part (seconds)."""

MINUTE_S = 60.0
HOUR_S = 3_600.0
DAY_S = 86_400.0
