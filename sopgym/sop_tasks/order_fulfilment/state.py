"""Stateful program of OrderFulfilment: inventory reservations (standard library only).

This module also runs inside the Docker sandbox, where sopgym is not installed: it must import only
the standard library. Tools take ``(db, args)`` with validated arguments and return JSON-able
values; an exception's message is what the agent sees.

Availability is computed, never stored: ``on_hand`` minus the active reservations of every order,
so a reservation made earlier in the episode lowers what later availability checks report.
"""

SCHEMA = """
CREATE TABLE orders (order_id TEXT PRIMARY KEY, status TEXT NOT NULL);
CREATE TABLE order_lines (
    order_id TEXT NOT NULL, line_no INTEGER NOT NULL, sku TEXT NOT NULL, quantity INTEGER NOT NULL,
    PRIMARY KEY (order_id, line_no)
);
CREATE TABLE stock (warehouse_id TEXT NOT NULL, sku TEXT NOT NULL, on_hand INTEGER NOT NULL, PRIMARY KEY (warehouse_id, sku));
CREATE TABLE reservations (
    reservation_id TEXT PRIMARY KEY, order_id TEXT NOT NULL, line_no INTEGER NOT NULL, warehouse_id TEXT NOT NULL,
    sku TEXT NOT NULL, quantity INTEGER NOT NULL, status TEXT NOT NULL
);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""

#: Statuses an order takes before allocation; anything else is final.
OPEN_STATUSES = ("RELEASED",)


def _reserved(db, warehouse_id, sku):
    return db.execute(
        "SELECT COALESCE(SUM(quantity), 0) FROM reservations WHERE warehouse_id = ? AND sku = ? AND status = 'active'",
        (warehouse_id, sku),
    ).fetchone()[0]


def _order(db, order_id):
    row = db.execute("SELECT * FROM orders WHERE order_id = ?", (order_id,)).fetchone()
    if row is None:
        raise LookupError(f"order {order_id} not found")
    return row


def check_availability(db, args):
    sku = args["sku"]
    rows = db.execute("SELECT warehouse_id, on_hand FROM stock WHERE sku = ? ORDER BY warehouse_id", (sku,)).fetchall()
    known = db.execute("SELECT 1 FROM order_lines WHERE sku = ? LIMIT 1", (sku,)).fetchone()
    if not rows and known is None:
        raise LookupError(f"SKU {sku} is not in the catalogue")
    out = []
    for wh, on_hand in rows:
        reserved = _reserved(db, wh, sku)
        out.append({"warehouse_id": wh, "on_hand": on_hand, "reserved": reserved, "available": on_hand - reserved})
    return {"sku": sku, "warehouses": out}


def reserve_stock(db, args):
    order = _order(db, args["order_id"])
    if order["status"] not in OPEN_STATUSES:
        raise ValueError(f"order {order['order_id']} has status {order['status']}; reservations are closed")
    line = db.execute(
        "SELECT * FROM order_lines WHERE order_id = ? AND line_no = ?", (order["order_id"], args["line_no"])
    ).fetchone()
    if line is None:
        raise LookupError(f"order {order['order_id']} has no line {args['line_no']}")
    wh, sku, qty = args["warehouse_id"], line["sku"], args["quantity"]
    stocked = db.execute("SELECT on_hand FROM stock WHERE warehouse_id = ? AND sku = ?", (wh, sku)).fetchone()
    if stocked is None:
        raise LookupError(f"{wh} does not stock {sku}")
    held = db.execute(
        "SELECT COALESCE(SUM(quantity), 0) FROM reservations WHERE order_id = ? AND line_no = ? AND status = 'active'",
        (order["order_id"], line["line_no"]),
    ).fetchone()[0]
    if held + qty > line["quantity"]:
        raise ValueError(
            f"line {line['line_no']} needs {line['quantity'] - held} more unit(s); requested {qty} would over-reserve it"
        )
    available = stocked[0] - _reserved(db, wh, sku)
    if qty > available:
        raise ValueError(f"insufficient stock of {sku} at {wh}: requested {qty}, available {available}; nothing reserved")
    counter = db.execute("SELECT value FROM counters WHERE name = 'reservation'").fetchone()[0]
    db.execute("UPDATE counters SET value = value + 1 WHERE name = 'reservation'")
    rid = f"RSV-{counter:06d}"
    db.execute(
        "INSERT INTO reservations VALUES (?, ?, ?, ?, ?, ?, 'active')",
        (rid, order["order_id"], line["line_no"], wh, sku, qty),
    )
    return {
        "reservation_id": rid, "order_id": order["order_id"], "line_no": line["line_no"], "warehouse_id": wh,
        "sku": sku, "quantity": qty, "line_still_needed": line["quantity"] - held - qty,
    }


def release_reservation(db, args):
    rid = args["reservation_id"]
    row = db.execute("SELECT * FROM reservations WHERE reservation_id = ?", (rid,)).fetchone()
    if row is None:
        raise LookupError(f"reservation {rid} not found")
    if row["status"] != "active":
        raise ValueError(f"reservation {rid} is already {row['status']}")
    db.execute("UPDATE reservations SET status = 'released' WHERE reservation_id = ?", (rid,))
    return {"reservation_id": rid, "status": "released", "quantity_returned": row["quantity"], "warehouse_id": row["warehouse_id"]}


def get_order_reservations(db, args):
    order = _order(db, args["order_id"])
    oid = order["order_id"]
    active = [
        {"reservation_id": r[0], "line_no": r[1], "warehouse_id": r[2], "sku": r[3], "quantity": r[4]}
        for r in db.execute(
            "SELECT reservation_id, line_no, warehouse_id, sku, quantity FROM reservations "
            "WHERE order_id = ? AND status = 'active' ORDER BY reservation_id",
            (oid,),
        )
    ]
    lines = []
    for ln in db.execute("SELECT line_no, sku, quantity FROM order_lines WHERE order_id = ? ORDER BY line_no", (oid,)):
        reserved = sum(a["quantity"] for a in active if a["line_no"] == ln[0])
        lines.append({"line_no": ln[0], "sku": ln[1], "ordered": ln[2], "reserved": reserved})
    return {
        "order_id": oid, "status": order["status"], "active_reservations": active, "lines": lines,
        "num_shipments": len({a["warehouse_id"] for a in active}),
    }


def set_order_status(db, args):
    order = _order(db, args["order_id"])
    if order["status"] not in OPEN_STATUSES:
        raise ValueError(f"order {order['order_id']} already has status {order['status']}; a status is recorded once")
    db.execute("UPDATE orders SET status = ? WHERE order_id = ?", (args["status"], order["order_id"]))
    return {"order_id": order["order_id"], "status": args["status"]}


TOOLS = {
    "check_availability": check_availability,
    "reserve_stock": reserve_stock,
    "release_reservation": release_reservation,
    "get_order_reservations": get_order_reservations,
    "set_order_status": set_order_status,
}


def snapshot(db):
    """Active reservations aggregated per (order, line, FC, SKU), and every order's status."""
    reservations = [
        [r[0], r[1], r[2], r[3], r[4]]
        for r in db.execute(
            "SELECT order_id, line_no, warehouse_id, sku, SUM(quantity) FROM reservations WHERE status = 'active' "
            "GROUP BY order_id, line_no, warehouse_id, sku ORDER BY order_id, line_no, warehouse_id, sku"
        )
    ]
    statuses = [[r[0], r[1]] for r in db.execute("SELECT order_id, status FROM orders ORDER BY order_id")]
    return {"reservations": reservations, "order_status": statuses}
