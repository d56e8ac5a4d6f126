"""The README's report screenshots: open a report in headless Chromium and save two PNGs here.

    agentic-rl train --smoke trainer.run_name=search_qa_smoke
    agentic-rl report runs/search_qa_smoke --out /tmp/report.html
    python docs/report/screenshots.py /tmp/report.html

Needs selenium and the system's chromium + chromedriver (as the browser tests).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

HERE = Path(__file__).parent


def main(report: str) -> None:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("google-chrome") or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(Path(report).resolve().as_uri())
        while driver.execute_script("return document.body.dataset.ready") != "1":
            time.sleep(0.1)
        driver.execute_script("document.getElementById('sec-curves').scrollIntoView()")
        time.sleep(0.5)
        driver.save_screenshot(str(HERE / "curves.png"))
        # a trained episode with a tool call (from a group whose rewards differ, where there is
        # one), coloured by loss mask
        driver.execute_script(
            """
            document.getElementById('sec-trajectories').scrollIntoView();
            const rows = [...document.querySelectorAll('tr.traj-row')];
            const traj = r => REPORT.runs[r.dataset.run].trajectories[r.dataset.index];
            const tool = t => t.trained && t.turns.some(u => u.action && u.action.kind === 'tool');
            const spread = t => t.adv && t.adv.some(a => a !== 0);
            const pick = rows.find(r => tool(traj(r)) && spread(traj(r)))
              || rows.find(r => tool(traj(r))) || rows[0];
            pick.click();
            """
        )
        time.sleep(0.5)
        driver.save_screenshot(str(HERE / "trajectory.png"))
    finally:
        driver.quit()


if __name__ == "__main__":
    main(sys.argv[1])
