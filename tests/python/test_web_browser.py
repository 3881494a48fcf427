"""The page at / in a real browser: headless Chromium driven by Selenium against a real `vgen
serve` (bundled model, a token, a free loopback port, a temporary directory).

It asks for the token once; submits a job from the form, sees the progress bar advance and a
preview image appear, then the video element plays the clip (readyState >= 2, duration > 0,
duration x fps = the job's frame count) with a download link; cancels a second job and shows
it cancelled; shows a prompt holding markup as text (no element, no script run); fits a
phone-sized screen without sideways scrolling. Screenshots go to $VGEN_TEST_ARTIFACTS (default
<build>/test-artifacts/web)."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from test_cli_serve import BUILD, VGEN, Server

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "vgen-shapes"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built"),
    pytest.mark.skipif(not (MODEL / "manifest.json").exists(), reason="models/vgen-shapes missing"),
    pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromium-driver are not installed"),
]

TOKEN = "tab-token-7"
XSS_PROMPT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> a red circle'


@pytest.fixture
def artifacts():
    out = Path(os.environ.get("VGEN_TEST_ARTIFACTS", BUILD / "test-artifacts")) / "web"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1000", "--autoplay-policy=no-user-gesture-required"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


def job_items(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#jobs li.job")


def job_with_prompt(driver, prompt, timeout=60):
    def find(d):
        for li in job_items(d):
            if li.find_element(By.CLASS_NAME, "prompt").text == prompt:
                return li
        return False
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(find)


def submit(driver, prompt, **fields):
    driver.find_element(By.ID, "prompt").clear()
    driver.find_element(By.ID, "prompt").send_keys(prompt)
    for name, value in fields.items():
        box = driver.find_element(By.ID, name)
        box.clear()
        box.send_keys(str(value))
    driver.find_element(By.ID, "submit").click()
    return job_with_prompt(driver, prompt)


def test_the_page_runs_a_job_end_to_end(tmp_path, browser, artifacts):
    with Server(MODEL, tmp_path / "out", "--token", TOKEN) as server:
        url = f"http://127.0.0.1:{server.port}/"
        browser.get(url)
        # The token is asked once (the job list answered 401) and kept in the tab.
        dialog = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "token-dialog").is_displayed()
                                                  and d.find_element(By.ID, "token-dialog"))
        browser.save_screenshot(str(artifacts / "01-token.png"))
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        dialog.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        WebDriverWait(browser, 30).until(lambda d: not d.find_element(By.ID, "token-dialog").is_displayed())
        assert browser.execute_script("return sessionStorage.getItem('vgen.token')") == TOKEN
        assert TOKEN not in browser.current_url

        frames, fps, steps = 16, 8, 16
        job = submit(browser, "a red circle moving left", width=128, height=128, frames=frames, steps=steps, seed=3)
        bar = job.find_element(By.TAG_NAME, "progress")
        seen, preview_at = [], None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            value = float(bar.get_attribute("value"))
            if not seen or value != seen[-1]:
                seen.append(value)
            img = job.find_element(By.CLASS_NAME, "preview")
            if preview_at is None and img.is_displayed() and browser.execute_script(
                    "return arguments[0].complete && arguments[0].naturalWidth", img):
                preview_at = img.get_attribute("data-step")
                assert img.get_attribute("src").startswith("blob:")
                browser.save_screenshot(str(artifacts / "02-preview.png"))
            if job.find_element(By.CLASS_NAME, "state").text == "done":
                break
            time.sleep(0.02)
        assert job.find_element(By.CLASS_NAME, "state").text == "done"
        seen.append(float(bar.get_attribute("value")))  # read after "done" was seen
        assert preview_at is not None, "no preview image was shown while the job denoised"
        assert len(seen) >= 3 and seen == sorted(seen) and seen[-1] == 1.0, seen  # it advanced, never back

        video = job.find_element(By.CLASS_NAME, "video")
        WebDriverWait(browser, 60).until(lambda d: d.execute_script("return arguments[0].readyState", video) >= 2)
        duration = browser.execute_script("return arguments[0].duration", video)
        assert duration > 0 and round(duration * fps) == frames, duration
        browser.execute_script("arguments[0].play()", video)
        WebDriverWait(browser, 30).until(lambda d: d.execute_script("return arguments[0].currentTime", video) > 0)
        download = job.find_element(By.CLASS_NAME, "download")
        assert download.is_displayed() and download.get_attribute("href").startswith("blob:")
        assert download.get_attribute("download").endswith(".mp4")
        browser.save_screenshot(str(artifacts / "03-done.png"))

        # A second job, cancelled from the page while it runs.
        slow = submit(browser, "a blue square moving up", width=256, height=256, frames=32, steps=200)
        slow.find_element(By.CLASS_NAME, "cancel").click()
        WebDriverWait(browser, 60).until(lambda d: slow.find_element(By.CLASS_NAME, "state").text == "cancelled")
        assert not slow.find_element(By.CLASS_NAME, "cancel").is_displayed()
        browser.save_screenshot(str(artifacts / "04-cancelled.png"))

        # Markup in a prompt is shown as text: no element is made from it, no script runs.
        hostile = submit(browser, XSS_PROMPT, steps=1, width=128, height=128, frames=8)
        assert hostile.find_element(By.CLASS_NAME, "prompt").text == XSS_PROMPT
        assert hostile.find_elements(By.CSS_SELECTOR, ".prompt *") == []
        WebDriverWait(browser, 60).until(lambda d: hostile.find_element(By.CLASS_NAME, "state").text == "done")
        assert browser.execute_script("return window.__pwned") is None
        # ... also when it comes back from the API after a reload (the list, not the form).
        browser.refresh()
        again = job_with_prompt(browser, XSS_PROMPT)
        assert again.find_elements(By.CSS_SELECTOR, ".prompt *") == []
        assert browser.execute_script("return window.__pwned") is None
        assert len(job_items(browser)) == 3
        browser.save_screenshot(str(artifacts / "05-reloaded.png"))

        # A phone-sized screen: one column, nothing wider than the screen.
        browser.set_window_size(390, 844)
        WebDriverWait(browser, 10).until(lambda d: d.execute_script("return window.innerWidth") <= 400)
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
        browser.save_screenshot(str(artifacts / "06-phone.png"))
        assert server.stop() == 0
