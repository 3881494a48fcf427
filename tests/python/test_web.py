"""`vgen serve`'s job list, previews and page over HTTP, on the bundled model (models/vgen-shapes):
GET /v1/jobs (newest first, pages by cursor, status filter, 400s naming the parameter); preview
events on the job's stream and GET /v1/jobs/{id}/preview (PNG); previews off by flag or for a
package without factors (said, not an error); the page at / and /ui/ without the token, with
its security headers. The browser drives the page in test_web_browser.py."""
from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import pytest

from test_cli_serve import VGEN, Server

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "vgen-shapes"
pytestmark = [pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built"),
              pytest.mark.skipif(not (MODEL / "manifest.json").exists(), reason="models/vgen-shapes missing")]

QUICK = {"width": 128, "height": 128, "frames": 8, "steps": 8}
HOLDER = {"prompt": "a green triangle holding the denoiser", "width": 256, "height": 128, "frames": 16, "steps": 1000}


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def wait_done(server, job_id, headers=None, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _, body = server.json("GET", f"/v1/jobs/{job_id}", headers=headers)
        assert status == 200, body
        if body["status"] in ("done", "failed", "cancelled"):
            return body
        time.sleep(0.05)
    raise AssertionError(f"{job_id} did not end")


def test_previews_arrive_as_events_and_as_png(tmp_path):
    with Server(MODEL, tmp_path / "out") as server:
        # Behind a holder, so that the stream is open before the first step (an 8-step job can
        # end before this process has opened it).
        holder = server.hold_denoiser(HOLDER)
        status, _, body = server.json("POST", "/v1/jobs", {"prompt": "a red circle moving left", **QUICK})
        assert status == 202, body
        job = body["id"]
        assert body["links"]["preview"] == f"/v1/jobs/{job}/preview"
        events = server.events_from_start(job, holder)
        previews = [data for name, data in events if name == "preview"]
        # vgen serve previews every 2 steps by default, and at the last.
        assert [p["step"] for p in previews] == [2, 4, 6, 8], events
        assert all(p["total"] == 8 and p["url"] == f"/v1/jobs/{job}/preview" for p in previews)
        assert (previews[0]["width"], previews[0]["height"]) == (128, 128)  # 16 x 16 latents, x 8
        assert events[-1][0] == "done"
        status, hdrs, data = server.request("GET", f"/v1/jobs/{job}/preview")
        assert status == 200
        assert hdrs["content-type"] == "image/png"
        assert hdrs["cache-control"] == "no-store"
        assert hdrs["x-vgen-preview-step"] == "8/8"
        assert png_size(data) == (128, 128)
        assert server.stop() == 0


def test_previews_off_by_flag_and_for_a_package_without_factors(tmp_path):
    with Server(MODEL, tmp_path / "out", "--preview-every", "0") as server:
        status, _, body = server.json("POST", "/v1/jobs", {"prompt": "a red circle moving left", **QUICK})
        job = body["id"]
        assert [e for e in server.events(job) if e[0] == "preview"] == []
        status, _, body = server.json("GET", f"/v1/jobs/{job}/preview")
        assert status == 409 and "previews are off" in body["error"]["message"]
        assert server.stop() == 0
    old = tmp_path / "old-package"
    shutil.copytree(MODEL, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["preview"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    with Server(old, tmp_path / "out-old") as server:
        status, _, body = server.json("POST", "/v1/jobs", {"prompt": "a blue square moving up", **QUICK})
        assert status == 202, body
        job = body["id"]
        events = server.events(job)
        assert events[-1][0] == "done" and not [e for e in events if e[0] == "preview"]
        status, _, body = server.json("GET", f"/v1/jobs/{job}/preview")
        assert status == 409 and "no preview factors" in body["error"]["message"]
        assert "previews: off for model 'old-package'" in server.logs()
        assert server.stop() == 0


def test_job_list_newest_first_in_pages_with_a_status_filter(tmp_path):
    with Server(MODEL, tmp_path / "out") as server:
        status, _, body = server.json("GET", "/v1/jobs")
        assert status == 200 and body == {"jobs": [], "next_cursor": None}
        ids = []
        for i in range(3):
            status, _, body = server.json("POST", "/v1/jobs", {"prompt": f"a red circle moving left", "seed": i,
                                                               "steps": 1, "width": 128, "height": 128, "frames": 8})
            assert status == 202, body
            ids.append(body["id"])
        for job in ids:
            wait_done(server, job)
        status, _, first = server.json("GET", "/v1/jobs?limit=2")
        assert status == 200
        assert [j["id"] for j in first["jobs"]] == ids[::-1][:2]
        assert first["jobs"][0]["status"] == "done" and first["jobs"][0]["spec"]["seed"] == 2
        assert first["jobs"][0]["links"]["video"] == f"/v1/jobs/{ids[2]}/video"
        assert first["next_cursor"] and first["links"]["next"] == f"/v1/jobs?limit=2&cursor={first['next_cursor']}"
        # A job submitted meanwhile does not shift the next page.
        status, _, body = server.json("POST", "/v1/jobs", {"prompt": "a blue square moving up", "steps": 1,
                                                           "width": 128, "height": 128, "frames": 8})
        newest = body["id"]
        status, _, second = server.json("GET", first["links"]["next"])
        assert [j["id"] for j in second["jobs"]] == [ids[0]]
        assert second["next_cursor"] is None and "links" not in second
        wait_done(server, newest)
        status, _, done = server.json("GET", "/v1/jobs?status=done&limit=200")
        assert [j["id"] for j in done["jobs"]] == [newest] + ids[::-1]
        assert server.json("GET", "/v1/jobs?status=failed")[2]["jobs"] == []
        for query, names in [("limit=0", "limit: must be an integer in [1, 200]"),
                             ("limit=201", "limit: must be an integer in [1, 200]"),
                             ("status=bogus", "status: must be one of"),
                             ("cursor=abc", "cursor: must be a next_cursor"),
                             ("colour=red", "unknown query parameter 'colour'")]:
            status, _, body = server.json("GET", f"/v1/jobs?{query}")
            assert status == 400 and body["error"]["message"].startswith(names), (query, body)
        assert server.stop() == 0


def test_the_page_is_served_without_the_token_and_with_its_policy(tmp_path):
    with Server(MODEL, tmp_path / "out", env={"VGEN_TOKEN": "s3cret"}) as server:
        status, hdrs, body = server.request("GET", "/")
        assert status == 200 and hdrs["content-type"] == "text/html; charset=utf-8"
        assert b'<script src="ui/app.js" defer></script>' in body
        csp = hdrs["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe" not in csp
        assert hdrs["x-content-type-options"] == "nosniff"
        assert "access-control-allow-origin" not in hdrs
        for name, kind in [("app.js", "text/javascript; charset=utf-8"), ("style.css", "text/css; charset=utf-8")]:
            status, hdrs, _ = server.request("GET", f"/ui/{name}")
            assert status == 200 and hdrs["content-type"] == kind
        for path in ["/ui/..%2fmanifest.json", "/ui/.hidden", "/ui/missing.js", "/ui/"]:
            assert server.request("GET", path)[0] == 404, path
        assert server.request("GET", "/v1/jobs")[0] == 401  # the data still needs the token
        assert server.request("GET", "/v1/jobs", headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert server.stop() == 0
