"""A small stateful program for the Docker sandbox tests (standard library only).

A ledger of accounts with tokens: reads, writes, a business-rule error that must roll back a
half-done write (atomic calls), and a snapshot. Used by the parity, isolation and benchmark checks.
"""

SCHEMA = """
CREATE TABLE accounts (id TEXT PRIMARY KEY, owner TEXT NOT NULL, balance INTEGER NOT NULL);
CREATE TABLE tokens (id INTEGER PRIMARY KEY AUTOINCREMENT, account TEXT NOT NULL, token TEXT NOT NULL);
"""


def get_account(db, args):
    row = db.execute("SELECT id, owner, balance FROM accounts WHERE id = ?", (args["account"],)).fetchone()
    if row is None:
        raise LookupError(f"no account {args['account']!r}")
    return dict(row)


def transfer(db, args):
    amount = int(args["amount"])
    db.execute("UPDATE accounts SET balance = balance - ? WHERE id = ?", (amount, args["source"]))
    (balance,) = db.execute("SELECT balance FROM accounts WHERE id = ?", (args["source"],)).fetchone() or (None,)
    if balance is None:
        raise LookupError(f"no account {args['source']!r}")
    if balance < 0:
        raise ValueError(f"insufficient funds in {args['source']}: short by {-balance}")
    changed = db.execute("UPDATE accounts SET balance = balance + ? WHERE id = ?", (amount, args["target"])).rowcount
    if not changed:
        raise LookupError(f"no account {args['target']!r}")
    return {"source": args["source"], "target": args["target"], "amount": amount, "balance": balance}


def add_token(db, args):
    cur = db.execute("INSERT INTO tokens (account, token) VALUES (?, ?)", (args["account"], args["token"]))
    return {"id": cur.lastrowid}


def list_tokens(db, args):
    return [row["token"] for row in db.execute("SELECT token FROM tokens ORDER BY id")]


def crash(db, args):
    raise Exception()


def stats(db, args):
    row = db.execute("SELECT COUNT(*) AS n, SUM(balance) AS total, AVG(balance) AS mean FROM accounts").fetchone()
    return {"n": row["n"], "total": row["total"], "mean": row["mean"], "ratio": 1 / 3, "unicode": "caf\u00e9 \u2713"}


TOOLS = {
    "get_account": get_account,
    "transfer": transfer,
    "add_token": add_token,
    "list_tokens": list_tokens,
    "crash": crash,
    "stats": stats,
}


def snapshot(db):
    return {
        "accounts": [dict(r) for r in db.execute("SELECT * FROM accounts ORDER BY id")],
        "tokens": [dict(r) for r in db.execute("SELECT * FROM tokens ORDER BY id")],
    }


def initial_state(num_accounts=3, balance=100):
    return {"accounts": [{"id": f"A{i}", "owner": f"owner {i}", "balance": balance} for i in range(num_accounts)]}
