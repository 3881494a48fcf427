"""The page's form offers what the API does (issue 32 item 4): a model picker when the service
serves several models, an image upload for a model that takes one, the LoRAs of the service's
folder (GET /v1/loras) and a priority. Headless Chromium against a real `vgen serve` with the
tiny Wan text-to-video package (the default) and its image-to-video twin, a LoRA folder and a
token; every job's spec is read back through the API. Waits on the page's own events (see
test_web_browser.py), never on the clock."""
from __future__ import annotations

import json

import numpy as np
import pytest

from test_cli_serve import VGEN, Server, export_tiny_wan
from test_lora_cli import lora
from test_web_browser import (TOKEN, artifacts, browser, ended, give_token, job_with_prompt,  # noqa: F401 (fixtures)
                              record, submit, wait_logged)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

PIL = pytest.importorskip("PIL.Image")
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SMALL = {"width": 48, "height": 32, "frames": 9, "steps": 2, "seed": 5}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("web_form")
    for variant in ("t2v", "i2v"):
        export_tiny_wan(root, variant)
    return root


@pytest.fixture
def service(packages, tmp_path):
    loras = tmp_path / "loras"
    loras.mkdir()
    lora(loras / "style.safetensors")
    lora(tmp_path / "outside.safetensors", seed=1)
    (loras / "escape.safetensors").symlink_to(tmp_path / "outside.safetensors")  # leads out: not offered
    (loras / "notes.txt").write_text("not a LoRA")
    config = tmp_path / "serve.json"
    config.write_text(json.dumps({"models": {"i2v": str(packages / "i2v")}, "lora_dir": str(loras)}))
    with Server(packages / "t2v", tmp_path / "out", "--token", TOKEN, "--config", str(config)) as server:
        server.lora_bytes = (loras / "style.safetensors").stat().st_size
        yield server
        assert server.stop() == 0


def spec_of(server, li):
    job_id = li.get_attribute("data-id")
    status, _, info = server.json("GET", f"/v1/jobs/{job_id}", headers=AUTH)
    assert status == 200, info
    return info


def test_the_loras_route_lists_what_a_job_may_name(service):
    status, _, body = service.json("GET", "/v1/loras", headers=AUTH)
    assert status == 200 and body == {"object": "list", "data": [{"name": "style", "bytes": service.lora_bytes}]}, body
    status, _, body = service.json("GET", "/v1/loras")
    assert status == 401, body


def test_the_form_offers_models_an_image_loras_and_priority(service, tmp_path, browser, artifacts):  # noqa: F811
    browser.get(f"http://127.0.0.1:{service.port}/")
    give_token(browser)
    record(browser)
    model = WebDriverWait(browser, 60).until(
        lambda d: len(Select(d.find_element(By.ID, "model")).options) == 2 and Select(d.find_element(By.ID, "model")))
    assert [o.get_attribute("value") for o in model.options] == ["t2v", "i2v"]  # the default first
    assert browser.find_element(By.ID, "model-field").is_displayed()
    assert not browser.find_element(By.ID, "image-field").is_displayed()  # text-to-video takes none
    lora_box = WebDriverWait(browser, 60).until(
        lambda d: len(Select(d.find_element(By.ID, "lora")).options) == 2 and Select(d.find_element(By.ID, "lora")))
    assert [o.get_attribute("value") for o in lora_box.options] == ["", "style"]

    # A text-to-video job with the LoRA at 0.5 and priority 7.
    lora_box.select_by_value("style")
    scale = browser.find_element(By.ID, "lora_scale")
    scale.clear()
    scale.send_keys("0.5")
    li = submit(browser, "a lora job from the page", priority=7, **SMALL)
    wait_logged(browser, li.get_attribute("data-id"), ended("done"))
    info = spec_of(service, li)
    assert info["status"] == "done", info
    assert [{k: x[k] for k in ("name", "scale")} for x in info["spec"]["loras"]] == [{"name": "style", "scale": 0.5}], info
    assert info["spec"]["priority"] == 7 and info["spec"].get("model", "t2v") == "t2v", info["spec"]

    # The image-to-video model: the upload appears; without an image the API's refusal names it.
    lora_box.select_by_value("")
    model.select_by_value("i2v")
    field = browser.find_element(By.ID, "image-field")
    WebDriverWait(browser, 10).until(lambda d: field.is_displayed())
    problem = browser.find_element(By.ID, "form-error")
    browser.find_element(By.ID, "prompt").clear()
    browser.find_element(By.ID, "prompt").send_keys("an image job without its image")
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 60).until(lambda d: problem.is_displayed() and problem.text)
    assert "image" in problem.text, problem.text

    pixels = (np.arange(32 * 48 * 3).reshape(32, 48, 3) % 251).astype(np.uint8)
    picture = tmp_path / "first frame.png"
    PIL.fromarray(pixels).save(picture)
    browser.find_element(By.ID, "image").send_keys(str(picture))
    li = submit(browser, "an image job from the page", **SMALL)
    wait_logged(browser, li.get_attribute("data-id"), ended("done"))
    assert not problem.is_displayed()
    info = spec_of(service, li)
    assert info["status"] == "done" and info["spec"]["model"] == "i2v", info
    assert "loras" not in info["spec"] or not info["spec"]["loras"], info["spec"]
    assert len(info["spec"].get("image_sha256", "")) == 64, info["spec"]
    browser.save_screenshot(str(artifacts / "08-form-image.png"))
