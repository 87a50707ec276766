"""sopgym: Gymnasium environments built around Standard Operating Procedures."""
