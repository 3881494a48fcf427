"""The page at / in a real browser: headless Chromium driven by Selenium against a real `vgen
serve` (bundled model, a token, a free loopback port, a temporary directory).

It asks for the token once; shows a preview image of a running job and cancels it from the page;
submits a job from the form and renders every progress event of it (bar, step text, never
back), then the video element plays the clip (readyState >= 2, duration > 0, duration x fps =
the job's frame count) with a download link; shows a prompt holding markup as text (no element,
no script run); fits a phone-sized screen without sideways scrolling. Screenshots go to
$VGEN_TEST_ARTIFACTS (default <build>/test-artifacts/web).

Nothing here samples the page against the clock: the page dispatches "job-event" after it has
rendered each event of a job's stream and "job-preview" after each preview fetch (web/app.js),
a listener injected before any job is shown records them all, and the test waits on that log.
What must happen in order is made to: a long job submitted through the API holds the only
denoiser (--max-batch 1) until the page cancels it, so the form's job is still queued when
the page subscribes to its events and the page receives every one of them however busy the
machine is. Timeouts only bound a hang."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from test_cli_serve import BUILD, VGEN, Server

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

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


# Records what the page reports (see web/app.js): every "job-event" and "job-preview", in order.
RECORDER = """
window.__vgen = [];
for (const type of ["job-event", "job-preview", "job-live"])
  document.addEventListener(type, (e) => window.__vgen.push({ type, ...e.detail }));
"""


def record(driver):
    driver.execute_script(RECORDER)


def log(driver, job_id, type="job-event"):
    return [e for e in driver.execute_script("return window.__vgen") if e["type"] == type and e["id"] == job_id]


def wait_logged(driver, job_id, pred, type="job-event", timeout=300):
    """The first entry of the job's log that satisfies pred, waiting for it to be recorded (the
    timeout only bounds a hang)."""
    def find(d):
        return next((e for e in log(d, job_id, type) if pred(e)), False)
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.1).until(find)
    except TimeoutException:
        raise AssertionError(f"no {type} of job {job_id} matched within {timeout}s; log: {log(driver, job_id, type)}") \
            from None


def ended(name):
    return lambda e: e["name"] == name


def job_items(driver):
    return driver.find_elements(By.CSS_SELECTOR, "#jobs li.job")


def job_with_prompt(driver, prompt, timeout=120):
    def find(d):
        for li in job_items(d):
            if li.find_element(By.CLASS_NAME, "prompt").text == prompt:
                return li
        return False
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(find)


def give_token(driver):
    """Answers the page's token dialog (asked once, when the job list answers 401)."""
    dialog = WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "token-dialog").is_displayed()
                                             and d.find_element(By.ID, "token-dialog"))
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    dialog.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(driver, 60).until(lambda d: not d.find_element(By.ID, "token-dialog").is_displayed())


def submit(driver, prompt, **fields):
    driver.find_element(By.ID, "prompt").clear()
    driver.find_element(By.ID, "prompt").send_keys(prompt)
    for name, value in fields.items():
        box = driver.find_element(By.ID, name)
        box.clear()
        box.send_keys(str(value))
    driver.find_element(By.ID, "submit").click()
    return job_with_prompt(driver, prompt)


def news(data):
    """(state, step, total) of what the page was told: a stream event, or an API answer (as
    Job.update in web/app.js reads them)."""
    progress = data.get("progress") or {}
    state = progress.get("state") or data.get("status") or data.get("state")
    return state, progress.get("step", data.get("step", 0)), progress.get("total", data.get("total", 0))


def bar_for(state, step, total):
    """What the page's bar shows for that news (web/app.js STAGE_SHARE and setState)."""
    if state == "denoise" and total > 0:
        return 0.05 + 0.85 * step / total
    return {"queued": 0, "preprocess": 0.03, "running": 0.03, "denoise": 0.05, "decode": 0.92, "encode": 0.96,
            "done": 1}[state]


def test_the_page_runs_a_job_end_to_end(tmp_path, browser, artifacts):
    with Server(MODEL, tmp_path / "out", "--token", TOKEN, "--max-batch", "1") as server:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        # The holder: far more steps than the test takes, cancelled from the page below. With one
        # job per denoiser call it keeps the form's job queued until then.
        holder_id = server.hold_denoiser({"prompt": "a blue square moving up", "width": 256, "height": 256,
                                          "frames": 32, "steps": 1000}, auth)

        url = f"http://127.0.0.1:{server.port}/"
        browser.get(url)
        # The token is asked once (the job list answered 401) and kept in the tab.
        dialog = WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "token-dialog").is_displayed()
                                                  and d.find_element(By.ID, "token-dialog"))
        record(browser)  # no job is shown before the token is given
        browser.save_screenshot(str(artifacts / "01-token.png"))
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        dialog.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        WebDriverWait(browser, 60).until(lambda d: not d.find_element(By.ID, "token-dialog").is_displayed())
        assert browser.execute_script("return sessionStorage.getItem('vgen.token')") == TOKEN
        assert TOKEN not in browser.current_url

        # The holder, listed by the page, shows a preview image while it denoises.
        holder = job_with_prompt(browser, "a blue square moving up")
        assert holder.get_attribute("data-id") == holder_id
        shown = wait_logged(browser, holder_id, lambda e: e["shown"], type="job-preview")
        assert shown["width"] > 0, shown
        img = holder.find_element(By.CLASS_NAME, "preview")
        assert img.is_displayed() and img.get_attribute("src").startswith("blob:")
        assert int(img.get_attribute("data-step")) >= shown["step"] > 0
        browser.save_screenshot(str(artifacts / "02-preview.png"))

        # The form's job waits behind the holder; once the page follows its events, the holder goes.
        frames, fps, steps = 16, 8, 16
        job = submit(browser, "a red circle moving left", width=128, height=128, frames=frames, steps=steps, seed=3)
        job_id = job.get_attribute("data-id")
        wait_logged(browser, job_id, lambda e: e["name"] == "progress")  # the page follows its stream
        holder.find_element(By.CLASS_NAME, "cancel").click()
        wait_logged(browser, holder_id, ended("cancelled"))
        assert holder.find_element(By.CLASS_NAME, "state").text == "cancelled"
        assert not holder.find_element(By.CLASS_NAME, "cancel").is_displayed()
        browser.save_screenshot(str(artifacts / "04-cancelled.png"))

        wait_logged(browser, job_id, ended("done"))
        events = log(browser, job_id)
        first = next(e for e in events if e["name"] == "progress")
        assert first["data"]["state"] in ("queued", "preprocess", "denoise") and first["data"]["step"] == 0, first
        shown_values = [e["value"] for e in events]
        assert shown_values == sorted(shown_values), events  # the bar never went back
        denoise_steps, before = [], 0.0
        for e in events:  # what the page rendered for each piece of news, in order
            if e["name"] != "preview":  # (a preview changes the image, not the bar)
                state, step, total = news(e["data"])
                assert e["state"] == state, e
                assert e["value"] == pytest.approx(max(before, bar_for(state, step, total))), (before, e)
                if state == "denoise" and total > 0:
                    assert total == steps and e["text"] == f"step {step} of {steps}", e
                    if e["name"] == "progress":
                        denoise_steps.append(step)
            before = e["value"]
        # Every step was sent while the page listened, and each one advanced the bar.
        assert sorted(set(denoise_steps) - {0}) == list(range(1, steps + 1)), denoise_steps
        assert any(e["name"] == "preview" for e in events), events
        assert events[-1]["name"] == "done" and events[-1]["state"] == "done" and events[-1]["value"] == 1.0, events[-1]
        assert job.find_element(By.CLASS_NAME, "state").text == "done"
        assert float(job.find_element(By.TAG_NAME, "progress").get_attribute("value")) == 1.0

        video = job.find_element(By.CLASS_NAME, "video")
        WebDriverWait(browser, 120).until(lambda d: d.execute_script("return arguments[0].readyState", video) >= 2)
        duration = browser.execute_script("return arguments[0].duration", video)
        assert duration > 0 and round(duration * fps) == frames, duration
        # The page played the live stream (GET .../video?live=1) through Media Source Extensions:
        # every frame of the clip was buffered in its "live" element from the fragments.
        live = wait_logged(browser, job_id, lambda e: e.get("ended"), type="job-live")
        assert live["bytes"] > 0 and round(live["buffered"] * fps) == frames, live
        browser.execute_script("arguments[0].play()", video)
        WebDriverWait(browser, 60).until(lambda d: d.execute_script("return arguments[0].currentTime", video) > 0)
        download = job.find_element(By.CLASS_NAME, "download")
        assert download.is_displayed() and download.get_attribute("href").startswith("blob:")
        assert download.get_attribute("download").endswith(".mp4")
        browser.save_screenshot(str(artifacts / "03-done.png"))

        # Markup in a prompt is shown as text: no element is made from it, no script runs.
        hostile = submit(browser, XSS_PROMPT, steps=1, width=128, height=128, frames=8)
        assert hostile.find_element(By.CLASS_NAME, "prompt").text == XSS_PROMPT
        assert hostile.find_elements(By.CSS_SELECTOR, ".prompt *") == []
        wait_logged(browser, hostile.get_attribute("data-id"), ended("done"))
        assert hostile.find_element(By.CLASS_NAME, "state").text == "done"
        assert browser.execute_script("return window.__pwned") is None
        # ... also when it comes back from the API after a reload (the list, not the form).
        browser.refresh()
        again = job_with_prompt(browser, XSS_PROMPT)
        assert again.find_elements(By.CSS_SELECTOR, ".prompt *") == []
        assert browser.execute_script("return window.__pwned") is None
        WebDriverWait(browser, 60).until(lambda d: len(job_items(d)) == 3)  # the list's one answer lists all
        browser.save_screenshot(str(artifacts / "05-reloaded.png"))

        # A phone-sized screen: one column, nothing wider than the screen.
        browser.set_window_size(390, 844)
        WebDriverWait(browser, 60).until(lambda d: d.execute_script("return window.innerWidth") <= 400)
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
        browser.save_screenshot(str(artifacts / "06-phone.png"))
        assert server.stop() == 0


def test_the_form_sends_interpolate_and_upscale(tmp_path, browser, artifacts):
    """The form's post-stage selects (issue 35): none sends neither field; 2x and 2x send
    "interpolate": 2 and "upscale": 2, and the clip the page plays has twice the size and
    (frames - 1) x 2 + 1 frames at twice the fps (minterpolate and lanczos, the fallbacks)."""
    with Server(MODEL, tmp_path / "out", "--token", TOKEN) as server:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        browser.get(f"http://127.0.0.1:{server.port}/")
        give_token(browser)
        record(browser)
        for name in ("interpolate", "upscale"):
            box = Select(browser.find_element(By.ID, name))
            assert [o.get_attribute("value") for o in box.options] == ["", "2", "4"]
            assert box.first_selected_option.get_attribute("value") == ""  # none unless asked

        plain = submit(browser, "a green square, no post-stages", width=128, height=128, frames=8, steps=2, seed=4)
        Select(browser.find_element(By.ID, "interpolate")).select_by_value("2")
        Select(browser.find_element(By.ID, "upscale")).select_by_value("2")
        frames, fps = 8, 8  # fps: the bundled model's default
        job = submit(browser, "a green square, twice", width=128, height=128, frames=frames, steps=2, seed=4)
        for li, post in [(plain, {}), (job, {"interpolate": 2, "upscale": 2})]:
            job_id = li.get_attribute("data-id")
            wait_logged(browser, job_id, ended("done"))
            status, _, info = server.json("GET", f"/v1/jobs/{job_id}", headers=auth)
            assert status == 200 and info["status"] == "done", info
            assert {k: info["spec"][k] for k in ("interpolate", "upscale") if k in info["spec"]} == post, info["spec"]

        video = job.find_element(By.CLASS_NAME, "video")
        WebDriverWait(browser, 120).until(lambda d: d.execute_script("return arguments[0].readyState", video) >= 2)
        size = browser.execute_script("return [arguments[0].videoWidth, arguments[0].videoHeight]", video)
        assert size == [256, 256], size
        duration = browser.execute_script("return arguments[0].duration", video)
        assert round(duration * fps * 2) == (frames - 1) * 2 + 1, duration
        browser.save_screenshot(str(artifacts / "07-post.png"))
        assert server.stop() == 0


def test_the_page_plays_a_live_stream_with_sound(tmp_path, browser):
    """A family with sound streams two tracks (H.264 and AAC): the page's MediaSource type names
    both (without the AAC its SourceBuffer refuses the init segment) and every frame is buffered.
    The family is the TEST-ONLY test-echo with its tone (tests/python/test_live_sound.py)."""
    binary = BUILD / "bin" / "vgen_test_families"
    if not binary.exists():
        pytest.skip("build/bin/vgen_test_families not built")
    pkg = tmp_path / "pkg"
    shutil.copytree(MODEL, pkg)
    manifest = json.loads((pkg / "manifest.json").read_text())
    manifest["family"] = "test-echo"
    manifest["test_tone"] = {"hz": 440.0, "sample_rate": 16000, "channels": 1}
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    # The echo family denoises in a blink: the holder is held in denoise by the fault plan until cancelled.
    faults = {"VGEN_FAULTS": json.dumps({"hold": [{"stage": "denoise", "prompt": "a grey holder"}]})}
    with Server(pkg, tmp_path / "out", "--max-batch", "1", binary=binary, env=faults) as server:
        # Keeps the form's job queued until the page follows it (as in the test above).
        holder = server.hold_denoiser({"prompt": "a grey holder", "width": 256, "height": 256, "frames": 32,
                                       "steps": 1000})
        browser.get(f"http://127.0.0.1:{server.port}/")
        record(browser)
        frames, fps = 16, 8
        job = submit(browser, "a red circle with a tone", width=128, height=128, frames=frames, steps=2, seed=3)
        job_id = job.get_attribute("data-id")
        wait_logged(browser, job_id, lambda e: e["name"] == "progress")  # the page follows its stream
        assert server.json("DELETE", f"/v1/jobs/{holder}")[0] == 202
        wait_logged(browser, job_id, ended("done"))
        live = wait_logged(browser, job_id, lambda e: e.get("ended"), type="job-live")
        assert "reason" not in live, live  # played, not given up on
        assert re.fullmatch(r'video/mp4; codecs="avc1\.[0-9a-f]{6},mp4a\.40\.2"', live["mime"]), live
        # Every frame buffered. The buffered range starts at 0 with the AAC priming packet, before
        # the first frame, which is shown after x264's reorder delay (the stream has no edit list:
        # stages.fragment_tap): measured 2.25 s for this 2 s clip.
        assert live["bytes"] > 0 and frames <= round(live["buffered"] * fps) <= frames + 2, live
        assert server.stop() == 0
