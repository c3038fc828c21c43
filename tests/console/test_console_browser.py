"""Browser tests: Playwright drives a real Chromium (``/usr/bin/chromium``) through the console
after the demo's loop, and saves a screenshot of each page under ``tests/console/artifacts/``.

Install the browser with ``apt-get install -y chromium``; Playwright's own download is not used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("RLOPS_CHROMIUM", "/usr/bin/chromium")
S = "credit_approval"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing: apt-get install -y chromium"),
]

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install '.[test]')"
)


@pytest.fixture(scope="module")
def page(live_server: str) -> Iterator[Any]:
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1440, "height": 1000}, base_url=live_server)
        pg = context.new_page()
        pg.set_default_timeout(30_000)
        yield pg
        context.close()
        browser.close()


def test_console_walkthrough(page: Any, artifacts: Path) -> None:
    page.goto(f"/s/{S}/map")
    nodes = page.locator("#decision-map .node")
    assert nodes.count() >= 2
    page.screenshot(path=str(artifacts / "01-decision-map.png"), full_page=True)

    # the busiest low-reward node: the most steps in the version's bottom quartile of return-to-go
    low = [int(nodes.nth(i).get_attribute("data-low-steps")) for i in range(nodes.count())]
    busiest = nodes.nth(low.index(max(low)))
    cluster = busiest.get_attribute("data-cluster")
    busiest.click()
    panel = page.locator(f"#cluster-{cluster}")
    playwright_api.expect(panel).to_be_visible()
    rows = panel.locator("table.top-actions tr")
    assert 2 <= rows.count() <= 4  # header + up to 3 actions
    playwright_api.expect(panel).to_contain_text("Behind the low scores")
    page.screenshot(path=str(artifacts / "02-decision-map-node.png"), full_page=True)

    panel.locator("ul.examples a").first.click()
    page.wait_for_url(f"**/s/{S}/episode/**")
    playwright_api.expect(page.locator("h1")).to_have_text("Episode replay")
    assert page.locator("section.step").count() >= 2
    playwright_api.expect(page.locator("section.step.focus")).to_contain_text("Reward breakdown")
    page.screenshot(path=str(artifacts / "03-episode-replay.png"), full_page=True)

    page.goto(f"/s/{S}/promotion")
    page.screenshot(path=str(artifacts / "04-champion-vs-candidate.png"), full_page=True)
    champion = page.locator("tr.champion td").first.inner_text().strip()  # "v1"
    page.click("#champion-gates")
    table = page.locator("#gate-table")
    playwright_api.expect(table).to_contain_text("mean_return")
    playwright_api.expect(table).to_contain_text("segment:")
    # the evaluation that promoted the champion names both versions and says it passed
    heading = page.locator("h1").inner_text()
    assert heading.startswith(f"Gate table: {champion} vs ") and "None" not in heading, heading
    playwright_api.expect(page.locator("#verdict")).to_have_text(re.compile(r"^passed"))
    # every gate reads exactly pass | fail | skipped; a gate that could not be judged reads skipped
    states = page.locator("#gate-table tr[data-state] td.state").all_inner_texts()
    assert states and set(states) <= {"pass", "fail", "skipped"}, states
    rows = page.locator("#gate-table tr[data-state]")
    for i in range(rows.count()):
        detail = rows.nth(i).locator("td").last.inner_text()
        if detail.startswith("skipped"):
            assert rows.nth(i).locator("td.state").inner_text() == "skipped", detail
    page.screenshot(path=str(artifacts / "05-champion-gate-table.png"), full_page=True)

    page.goto(f"/s/{S}/rewards")
    page.select_option("select[name=a]", "v0")
    page.select_option("select[name=b]", "v1")
    page.click("#diff-button")
    diff = page.locator("#reward-diff")
    playwright_api.expect(diff).to_contain_text("return 5.0")
    playwright_api.expect(diff).to_contain_text("LOW_SCORE_CAP_MULTIPLE, CAP_MULTIPLE")
    page.screenshot(path=str(artifacts / "06-reward-diff-v0-v1.png"), full_page=True)

    page.goto(f"/s/{S}/drift")
    page.screenshot(path=str(artifacts / "07-drift-calibration.png"), full_page=True)
    page.goto(f"/s/{S}/episode/not-a-trace")
    playwright_api.expect(page.locator("h1")).to_contain_text("404")
    page.screenshot(path=str(artifacts / "08-not-found.png"), full_page=True)
