"""The web console in a real browser: a real agent with streams and consumers, Debian's
Chromium (installed by scripts/lib.sh's ensure_chromium) driven by Playwright, the page's
content checked against what was created, and a screenshot checked for size and colour."""

from __future__ import annotations

import os
from pathlib import Path

import nats
from PIL import Image
from playwright.async_api import async_playwright

from support.agentproc import running_agent

CHROMIUM = "/usr/bin/chromium"
# Chromium headless, and nothing that reaches out: the tests run offline.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 1000}


async def _populate(url: str) -> int:
    """Two streams and two consumers; the bytes ORDERS holds, as stream info says."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    await js.add_stream(name="AUDIT", subjects=["audit"])
    for i in range(20):
        await js.publish(f"orders.{i % 3}", b"order")
    for _ in range(7):
        await js.publish("audit", b"entry")
    # A consumer that read nothing (lag 20), and one that read and acked 5 (lag 15).
    await js.pull_subscribe("orders.>", durable="idle")
    busy = await js.pull_subscribe("orders.>", durable="busy")
    for msg in await busy.fetch(5, timeout=5):
        await msg.ack_sync()
    info = await js.stream_info("ORDERS")
    await nc.close()
    return info.state.bytes


async def test_console_shows_streams_consumers_and_plots(tmp_path: Path) -> None:
    assert os.access(CHROMIUM, os.X_OK), "Chromium missing: scripts/test installs it"
    with (
        running_agent(tmp_path / "sd", "-m", "-1", "-n", "console-agent") as agent,
        # A second agent on the same store: the pool the agents table lists.
        running_agent(tmp_path / "sd", "-n", "other-agent"),
    ):
        orders_bytes = await _populate(agent.url)
        assert orders_bytes < 1024  # shown in bytes, as below
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport=VIEWPORT)
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.on(
                    "console",
                    lambda m: errors.append(m.text) if m.type == "error" else None,
                )
                await page.goto(f"http://127.0.0.1:{agent.http_port}/")
                # Two history samples or more, so that every plot has a line, and one taken
                # after the publishes (a PUT each at least).
                await page.wait_for_function(
                    "document.querySelectorAll('#plot-messages polyline')[0]"
                    "?.getAttribute('points').split(' ').length >= 2"
                    " && Number(document.querySelector('#objects tbody td:nth-child(2)')"
                    "?.textContent.replace(/,/g, '')) >= 27"
                    " && document.querySelector('#streams tbody').innerText.includes('AUDIT')"
                    " && document.querySelector('#consumers tbody').innerText.includes('busy')"
                    " && document.querySelector('#agents tbody').innerText.includes('other-agent')",
                    timeout=30_000,
                )
                streams = await page.locator("#streams tbody tr").all_inner_texts()
                consumers = await page.locator("#consumers tbody tr").all_inner_texts()
                agents = await page.locator("#agents tbody").inner_text()
                cards = await page.locator("#cards").inner_text()
                objects = await page.locator("#objects tbody").inner_text()
                jobs = await page.locator("#jobs tbody").inner_text()
                jobs_note = await page.locator("#jobs-note").inner_text()
                plots = await page.locator("svg.plot").count()
                health = await page.locator("#health").inner_text()
                shot = tmp_path / "console.png"
                await page.screenshot(path=str(shot), full_page=True)
            finally:
                await browser.close()

    rows = {r.split("\t")[0]: r.split("\t") for r in streams}
    assert rows["ORDERS"][1:4] == ["orders.>", "20", f"{orders_bytes} B"], streams
    assert rows["AUDIT"][2] == "7"
    lag = {r.split("\t")[1]: r.split("\t")[3] for r in consumers}
    assert lag == {"idle": "20", "busy": "15"}, consumers
    assert "console-agent" in agents and "other-agent" in agents, agents
    assert "Streams\n2" in cards and "Consumers\n2" in cards and "Consumer lag\n35" in cards
    puts = next(line for line in objects.splitlines() if line.startswith("PUT"))
    assert int(puts.split("\t")[1].replace(",", "")) >= 27  # a PUT per flush at least
    assert "compact" in jobs and "janitor" in jobs
    # The agents table and the jobs panel agree: in the jobs role (the default), no jobs given.
    assert "jobs" in agents and "in the jobs role but schedules no jobs" in jobs_note, jobs_note
    assert plots == 4
    assert health == "healthy"
    assert errors == []

    with Image.open(shot) as image:
        width, height = image.size
        colours = image.convert("RGB").getcolors(maxcolors=1 << 24)
    assert width == VIEWPORT["width"] and height >= VIEWPORT["height"], image.size
    # Not blank: text, plots and panels make many distinct colours.
    assert colours is not None and len(colours) > 200, len(colours or [])
