"""The operator console in a real headless Chromium (Debian's chromium and chromedriver, through
Selenium): an operator signs in, sees an approval appear while a real mediated request waits,
decides it, and reads the audit. Screenshots of every page land in test-artifacts/<test>/
(``CLAW_TEST_ARTIFACTS`` moves them), for CI to keep and for a person to look at."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from tests.execution.test_governance import OPERATOR_TOKEN, Desk, ask_analyst

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30
DESKTOP = (1000, 1100)  # about 100 columns of a laptop screen
PHONE = (390, 844)
GME = ("c1", "desk_get_quote", {"symbol": "GME"})  # held by the pod's confirm rule


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.fail("chromium and chromedriver are missing: run scripts/install-browser.sh")
    return browser, driver


@pytest.fixture
def artifacts(request: pytest.FixtureRequest) -> Path:
    root = Path(os.environ.get("CLAW_TEST_ARTIFACTS", REPO / "test-artifacts"))
    folder = root / request.node.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def driver() -> Iterator[WebDriver]:
    browser, chromedriver = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
    ):
        options.add_argument(argument)
    running = webdriver.Chrome(options=options, service=Service(executable_path=chromedriver))
    try:
        yield running
    finally:
        running.quit()


class Operator:
    """The person at the browser; every step runs in a thread so the sidecar keeps serving."""

    def __init__(self, driver: WebDriver, desk: Desk, artifacts: Path) -> None:
        self.driver = driver
        self.base = desk.sidecar.admin_url
        self.artifacts = artifacts

    async def do(self, step: Any, *args: Any) -> Any:
        return await asyncio.to_thread(step, *args)

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def sign_in(self, token: str) -> None:
        self.open("/console/sign-in")
        field = self.driver.find_element(By.ID, "token")  # found by its label's target
        label = self.driver.find_element(By.CSS_SELECTOR, "label[for=token]")
        assert label.text == "Operator token"
        field.send_keys(token)
        self.screenshot("sign-in")
        field.submit()

    def wait_for(self, css: str) -> Any:
        return WebDriverWait(self.driver, WAIT_S).until(
            expected_conditions.visibility_of_element_located((By.CSS_SELECTOR, css))
        )

    def text(self) -> str:
        return self.driver.find_element(By.TAG_NAME, "body").text

    def screenshot(self, name: str, size: tuple[int, int] = DESKTOP) -> None:
        self.driver.set_window_size(*size)
        self.driver.save_screenshot(str(self.artifacts / f"{name}.png"))
        self.driver.set_window_size(*DESKTOP)

    def mark_page(self) -> None:
        """A flag only this page load holds: still set later means no reload happened."""
        self.driver.execute_script("window.clawNoReload = true;")

    def still_same_page(self) -> bool:
        return self.driver.execute_script("return window.clawNoReload === true;")

    def sign_in_to_approvals(self) -> None:
        self.sign_in(OPERATOR_TOKEN)
        self.wait_for("#live-status")

    def decide(self, decision: str, reason: str) -> None:
        item = self.wait_for("li.approval")
        reason_field = item.find_element(By.CSS_SELECTOR, "input[name=reason]")
        reason_field.send_keys(reason)
        item.find_element(By.CSS_SELECTOR, f"button[value={decision}]").click()

    def approve_by_keyboard(self, reason: str) -> None:
        """Reason, then Tab to the Approve button and Enter: no mouse needed."""
        item = self.wait_for("li.approval")
        label = item.find_element(By.CSS_SELECTOR, "label[for$=-reason]")
        assert label.text == "Reason (audited)"
        field = self.driver.find_element(By.ID, label.get_attribute("for"))
        field.send_keys(reason)
        ActionChains(self.driver).send_keys(Keys.TAB).perform()
        focused = self.driver.switch_to.active_element
        assert focused.get_attribute("value") == "approve"
        focused.send_keys(Keys.ENTER)


async def test_approve_a_waiting_mediated_call_and_read_its_audit(
    driver: WebDriver, desk: Desk, artifacts: Path
) -> None:
    operator = Operator(driver, desk, artifacts)
    await operator.do(operator.sign_in_to_approvals)
    assert "Pending approvals" in await operator.do(operator.text)
    await operator.do(operator.screenshot, "approvals-empty")
    await operator.do(operator.mark_page)

    asking = asyncio.create_task(ask_analyst(desk, GME))  # the analyst's request now waits
    item = await operator.do(operator.wait_for, "li.approval")
    assert await operator.do(operator.still_same_page)  # it appeared without a reload
    shown = await operator.do(lambda: item.text)
    for expected in ("desk.get_quote", "analyst", "desk-readonly", '"symbol": "GME"', "rule"):
        assert expected in shown
    assert not asking.done()
    await operator.do(operator.screenshot, "approval-pending")
    await operator.do(operator.screenshot, "approval-pending-phone", PHONE)

    await operator.do(operator.approve_by_keyboard, "GME checked by the desk head")
    await operator.do(operator.wait_for, ".notice")
    assert "approved" in await operator.do(operator.text)
    results = await asyncio.wait_for(asking, WAIT_S)
    assert results[0]["ok"] is True
    assert [r.path for r in desk.service.requests] == ["/quotes/GME"]  # the call ran once
    await operator.do(operator.screenshot, "approval-decided")

    await operator.do(operator.open, "/console/audit?agent=analyst")
    trace = await operator.do(operator.wait_for, "table.trace")
    assert "desk.get_quote" in await operator.do(lambda: trace.text)
    page = await operator.do(operator.text)
    assert "Chain intact" in page and "approval_decided" in page
    assert "GME checked by the desk head" in page
    await operator.do(operator.screenshot, "audit")
    await operator.do(operator.screenshot, "audit-phone", PHONE)
    for name in ("tools", "limits", "health"):
        await operator.do(operator.open, f"/console/{name}")
        await operator.do(operator.wait_for, "h1")
        await operator.do(operator.screenshot, name)
    assert sorted(p.name for p in artifacts.iterdir()) == sorted(
        f"{n}.png"
        for n in (
            "sign-in",
            "approvals-empty",
            "approval-pending",
            "approval-pending-phone",
            "approval-decided",
            "audit",
            "audit-phone",
            "tools",
            "limits",
            "health",
        )
    )


async def test_deny_a_waiting_call(driver: WebDriver, desk: Desk, artifacts: Path) -> None:
    operator = Operator(driver, desk, artifacts)
    await operator.do(operator.sign_in_to_approvals)
    asking = asyncio.create_task(ask_analyst(desk, GME))
    await operator.do(operator.decide, "deny", "not today")
    await operator.do(operator.wait_for, ".notice")
    results = await asyncio.wait_for(asking, WAIT_S)
    assert results[0]["error"]["code"] == "approval_denied"
    assert "not today" in results[0]["error"]["message"]
    assert desk.service.requests == []
    await operator.do(operator.screenshot, "denied")


async def test_an_agent_token_cannot_sign_in(driver: WebDriver, desk: Desk, artifacts: Path):
    operator = Operator(driver, desk, artifacts)
    await operator.do(operator.sign_in, desk.tokens["analyst"])
    alert = await operator.do(operator.wait_for, "[role=alert]")
    assert "Agent tokens cannot sign in" in await operator.do(lambda: alert.text)
    await operator.do(operator.screenshot, "agent-token-refused")
    await operator.do(operator.open, "/console/approvals")
    assert "/console/sign-in" in await operator.do(lambda: driver.current_url)


async def test_a_post_without_the_csrf_token_is_refused(
    driver: WebDriver, desk: Desk, artifacts: Path
) -> None:
    operator = Operator(driver, desk, artifacts)
    await operator.do(operator.sign_in_to_approvals)
    asking = asyncio.create_task(ask_analyst(desk, GME))
    await operator.do(operator.wait_for, "li.approval")
    await operator.do(
        driver.execute_script,
        "document.querySelectorAll('input[name=csrf]').forEach(e => e.remove());",
    )
    await operator.do(operator.decide, "approve", "no token")
    alert = await operator.do(operator.wait_for, "[role=alert]")
    assert "CSRF" in await operator.do(lambda: alert.text)
    await operator.do(operator.screenshot, "csrf-refused")
    assert not asking.done() and desk.service.requests == []
    await operator.do(operator.open, "/console/approvals")
    await operator.do(operator.decide, "deny", "cleanup")
    await asyncio.wait_for(asking, WAIT_S)
