"""``clawc budgets --url-env VAR [--day YYYY-MM-DD] [--json]``: the fleet's budgets as the shared
store counts them (SPEC §24): every group and every agent of every pod that shares the store,
with what it spent today, what running requests hold, and the limit it is held against; of the
end users (``user/SUBJECT``, SPEC §21), the ones spending most and how many more there are."""

from __future__ import annotations

import asyncio
import json
import os
from typing import TextIO

from ..sidecar.state.budgets import utc_day
from ..sidecar.state.shared_counters import (
    MAX_FLEET_BUDGETS,
    TIMEOUT_S,
    BudgetRow,
    SharedLimitsError,
    connect,
    fleet_budgets,
)

# The view reads a store that may hold many budgets: a longer bound than a request's check.
VIEW_TIMEOUT_S = 10 * TIMEOUT_S
END_USER_PREFIX = "user/"
# End users can be many: the view lists those spending most, and counts the rest.
TOP_END_USERS = 50


def _amount(spent: float, limit: float | None, held: float, unit: str) -> str:
    shown = f"{unit}{spent:g}" + (f" of {unit}{limit:g}" if limit is not None else "")
    return shown + (f" (+{unit}{held:g} held)" if held else "")


def _record(name: str, row: BudgetRow) -> dict[str, object]:
    return {
        "budget": name,
        "tokens": row.tokens,
        "tokens_held": row.held_tokens,
        "tokens_limit": row.token_limit,
        "usd": round(row.usd, 9),
        "usd_held": round(row.held_usd, 9),
        "usd_limit": row.usd_limit,
    }


def _top_end_users(rows: dict[str, BudgetRow]) -> tuple[dict[str, BudgetRow], int]:
    """Every budget but the end users' after the first ``TOP_END_USERS`` by spending (USD,
    then tokens), and how many end users were left out."""
    users = sorted(
        (name for name in rows if name.startswith(END_USER_PREFIX)),
        key=lambda name: (-rows[name].usd, -rows[name].tokens, name),
    )
    left_out = set(users[TOP_END_USERS:])
    kept = {name: row for name, row in rows.items() if name not in left_out}
    ordered = {n: r for n, r in kept.items() if not n.startswith(END_USER_PREFIX)}
    return ordered | {name: kept[name] for name in users[:TOP_END_USERS]}, len(left_out)


async def _read(url: str, day: str) -> tuple[dict[str, BudgetRow], bool]:
    client = connect(url, timeout_s=VIEW_TIMEOUT_S)
    try:
        return await asyncio.wait_for(fleet_budgets(client, day), VIEW_TIMEOUT_S * 3)
    finally:
        await client.aclose()


def budgets_command(url_env: str, day: str | None, as_json: bool, out: TextIO, err: TextIO) -> int:
    url = os.environ.get(url_env)
    if not url:
        err.write(f"clawc: error: {url_env} is not set (the shared store's redis:// URL)\n")
        return 2
    day = day or utc_day()
    try:
        rows, cut = asyncio.run(_read(url, day))
    except SharedLimitsError as exc:
        err.write(f"clawc: error: {exc}\n")
        return 1
    except Exception as exc:  # the store away or out of shape; never its URL
        err.write(f"clawc: error: the shared store did not answer: {type(exc).__name__}\n")
        return 1
    counted = len(rows)
    rows, more_users = _top_end_users(rows)
    if as_json:
        records = [_record(name, row) for name, row in rows.items()]
        document = {"day": day, "budgets": records, "more_end_users": more_users}
        out.write(json.dumps(document | {"cut_short": cut}) + "\n")
    else:
        out.write(f"budgets of {day} (UTC) in the shared store: {counted}\n")
        for name, row in rows.items():
            tokens = _amount(row.tokens, row.token_limit, row.held_tokens, "")
            usd = _amount(row.usd, row.usd_limit, row.held_usd, "$")
            out.write(f"{name}  tokens {tokens}  usd {usd}\n")
        if more_users:
            out.write(f"and {more_users} more end users ({END_USER_PREFIX}...), spending less\n")
    if cut:
        err.write(f"clawc: warning: only the first {MAX_FLEET_BUDGETS} budgets are shown\n")
    return 0
