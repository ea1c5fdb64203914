"""``clawc budgets --url-env VAR [--day YYYY-MM-DD] [--json]``: the fleet's budgets as the shared
store counts them (SPEC §24): every group and every agent of every pod that shares the store,
with what it spent today, what running requests hold, and the limit it is held against."""

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
    if as_json:
        records = [_record(name, row) for name, row in rows.items()]
        out.write(json.dumps({"day": day, "budgets": records, "cut_short": cut}) + "\n")
    else:
        out.write(f"budgets of {day} (UTC) in the shared store: {len(rows)}\n")
        for name, row in rows.items():
            tokens = _amount(row.tokens, row.token_limit, row.held_tokens, "")
            usd = _amount(row.usd, row.usd_limit, row.held_usd, "$")
            out.write(f"{name}  tokens {tokens}  usd {usd}\n")
    if cut:
        err.write(f"clawc: warning: only the first {MAX_FLEET_BUDGETS} budgets are shown\n")
    return 0
