"""Sound in the live stream (issue 32 item 4, follow-up): a family with sound gets its audio in
`GET /v1/jobs/{id}/video?live=1` too, as a second track of the fragmented MP4 (AAC, interleaved
with the video by time, as in the finished file), and the file of a watched job is still the
bytes of the same job nobody watched.

The family is the TEST-ONLY `test-echo` with its "test_tone" (tests/families/echo/: a 440 Hz sine
at 16 kHz for exactly the clip's duration), served by bin/vgen_test_families, as in
test_audio_cli.py. LTX-2, the real family with sound, takes the same encode path
(stages/exec/model_set.cpp's encode stage hands the job's AudioTrack and the broadcast to
encode_to_file); its tiny package costs minutes to export, the tone costs nothing.

"Before the job ends" is an event, not a race: the fault plan's "hold" keeps the job in its encode
stage after the encode until the test cancels it (see test_live_stream.py)."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from test_cli_serve import BUILD, Server
from test_live_stream import Live, boxes, has_a_fragment

ROOT = Path(__file__).resolve().parents[2]
VGEN = BUILD / "bin" / "vgen_test_families"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen_test_families not built")

# 32 frames at 8 fps: four seconds, so several fragments (one about every half second).
JOB = {"width": 128, "height": 128, "frames": 32, "fps": 8, "steps": 2, "seed": 5}
# Shaped unlike JOB, far more steps than the test takes: keeps the denoiser busy until cancelled.
HOLDER = {"width": 256, "height": 256, "frames": 32, "steps": 1000, "prompt": "a grey holder"}
# The echo family denoises in a blink (1000 steps in 0.23 s measured once warm): the holder is
# held in its denoise stage by the fault plan until the test cancels it, not by its steps.
FAULTS = {"hold": [{"stage": "encode", "prompt": "held-after-encode"}, {"stage": "denoise", "prompt": "a grey holder"}]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live_sound")
    pkg = tmp / "pkg"
    shutil.copytree(ROOT / "models" / "vgen-shapes", pkg)
    manifest = json.loads((pkg / "manifest.json").read_text())
    manifest["family"] = "test-echo"
    manifest["test_tone"] = {"hz": 440.0, "sample_rate": 16000, "channels": 1}
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    config = tmp / "serve.json"
    config.write_text(json.dumps({"cache": {"results": {"entries": 0}}}))  # both jobs below render
    s = Server(pkg, tmp / "out", "--config", str(config), "--max-batch", "1", binary=VGEN,
               env={"VGEN_FAULTS": json.dumps(FAULTS)})
    yield s
    s.kill()


def submit(server, prompt):
    status, _, body = server.json("POST", "/v1/jobs", {**JOB, "prompt": prompt})
    assert status == 202, body
    return body["id"]


def probe(data):
    """ffprobe of an MP4 read from a pipe (as a player reads a stream): {codec_type: stream}."""
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                          "stream=codec_type,codec_name,sample_rate,channels,nb_read_frames", "-of", "json", "-i", "pipe:0"],
                         input=data, capture_output=True, check=True, timeout=120).stdout
    return {s["codec_type"]: s for s in json.loads(out)["streams"]}


def audio_samples(data):
    pcm = subprocess.run(["ffmpeg", "-v", "error", "-i", "pipe:0", "-map", "0:a", "-f", "s16le", "-ac", "1", "-"],
                         input=data, capture_output=True, check=True, timeout=120).stdout
    return len(pcm) // 2


def running(server, job):
    status, _, body = server.json("GET", f"/v1/jobs/{job}")
    return status == 200 and body["status"] not in ("done", "failed", "cancelled")


def test_the_live_stream_carries_the_sound_before_the_job_ends(server):
    holder = server.hold_denoiser(HOLDER)
    job = submit(server, "a red circle, held-after-encode")
    live = Live(server, f"/v1/jobs/{job}/video?live=1")
    assert server.json("DELETE", f"/v1/jobs/{holder}")[0] == 202  # the job runs from now on

    early = live.read_until(has_a_fragment)
    kinds = [t for t, _ in boxes(early)]
    assert kinds[:2] == ["ftyp", "moov"], kinds
    init = b"".join(b for _, b in boxes(early)[:2])
    assert set(probe(init)) == {"video", "audio"}  # the init segment names both tracks
    prefix = b"".join(b for _, b in boxes(early)[:kinds.index("mdat") + 1])
    first = probe(prefix)  # the first fragment alone: picture and sound of its stretch
    assert 0 < int(first["video"]["nb_read_frames"]) < JOB["frames"], first
    assert int(first["audio"]["nb_read_frames"]) > 0, first
    assert running(server, job)

    whole = live.read_to_end()  # the stream ends with the encode; the job is still held
    streams = probe(whole)
    assert streams["video"]["codec_name"] == "h264" and int(streams["video"]["nb_read_frames"]) == JOB["frames"]
    assert streams["audio"]["codec_name"] == "aac", streams
    assert int(streams["audio"]["sample_rate"]) == 16000 and int(streams["audio"]["channels"]) == 1
    # All of the clip's sound (JOB frames / fps seconds at 16 kHz), plus the encoder's priming
    # frame that the file hides in an edit list (a fragmented stream has none), within one frame.
    clip = JOB["frames"] * 16000 // JOB["fps"]
    assert abs(audio_samples(whole) - (clip + 1024)) <= 1024, audio_samples(whole)
    assert running(server, job)
    assert server.json("DELETE", f"/v1/jobs/{job}")[0] == 202
    assert server.wait_status(job, ("cancelled",))["status"] == "cancelled"


def test_a_watched_job_with_sound_writes_the_unwatched_bytes(server):
    prompt = "a blue square with a tone"
    plain = submit(server, prompt)
    server.wait_status(plain, ("done",))
    status, _, unwatched = server.request("GET", f"/v1/jobs/{plain}/video")
    assert status == 200 and set(probe(unwatched)) == {"video", "audio"}

    holder = server.hold_denoiser(HOLDER)
    job = submit(server, prompt)
    live = Live(server, f"/v1/videos/{job}/content?live=1")  # OpenAI's route, the same switch
    assert server.json("DELETE", f"/v1/jobs/{holder}")[0] == 202
    streamed = live.read_to_end()
    server.wait_status(job, ("done",))
    status, _, watched = server.request("GET", f"/v1/jobs/{job}/video")
    assert status == 200
    assert hashlib.sha256(watched).hexdigest() == hashlib.sha256(unwatched).hexdigest()
    assert set(probe(streamed)) == {"video", "audio"}  # it was a stream with sound, not the file
    assert [t for t, _ in boxes(streamed)][:3] == ["ftyp", "moov", "moof"]
