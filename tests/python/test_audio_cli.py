"""Sound through the real CLI (issue 33 item 1), with a TEST-ONLY family: `test-echo`
(tests/families/echo/) with its test-only "test_tone" option emits a 440 Hz sine at 16 kHz for
exactly the clip's duration. No real family makes a tone. bin/vgen_test_families is the vgen CLI
with the test-only families linked in (tests/families/CMakeLists.txt).

`render`, `batch` and `serve` write an mp4 (AAC) or webm (Opus) in which ffprobe shows a video
and an audio stream of the clip's duration (within one audio frame: 1024 samples for AAC, 960 at
48 kHz for Opus); the audio decoded back with ffmpeg matches the tone with an SNR of at least
20 dB (the codecs are lossy; measured about 40 dB, see the report). A batch rerun skips a complete
output and renders again one whose sound was cut short. /metrics counts the audio decode."""
from __future__ import annotations

import http.client
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen_test_families"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen_test_families not built")

TONE_HZ, RATE = 440.0, 16000
FRAMES, FPS = 17, 16
SECONDS = FRAMES / FPS
SIZE = ["--width", "128", "--height", "128", "--frames", str(FRAMES), "--steps", "2", "--fps", str(FPS)]
AUDIO_FRAME_S = {"aac": 1024 / 16000, "opus": 960 / 48000}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """The bundled package's files as a test-echo package with the test-only tone."""
    pkg = tmp_path_factory.mktemp("tone") / "pkg"
    shutil.copytree(ROOT / "models" / "vgen-shapes", pkg)
    manifest = json.loads((pkg / "manifest.json").read_text())
    manifest["family"] = "test-echo"
    manifest["test_tone"] = {"hz": TONE_HZ, "sample_rate": RATE, "channels": 1}
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    return pkg


def streams(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-show_streams", "-show_format", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    info = json.loads(out)
    return {s["codec_type"]: s for s in info["streams"]}, info["format"]


def decoded_audio(path, rate):
    """The file's audio decoded by ffmpeg to mono float32 at `rate` (its own rate: no resampling)."""
    pcm = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-map", "0:a", "-f", "f32le", "-ac", "1", "-"],
                         capture_output=True, check=True).stdout
    return np.frombuffer(pcm, dtype="<f4").astype(np.float64)


def tone_snr_db(got, rate):
    """SNR of decoded audio against the tone, over the clip's duration."""
    n = min(len(got), round(SECONDS * rate))
    want = 0.5 * np.sin(2 * np.pi * TONE_HZ * np.arange(n) / rate)
    noise = np.sum((got[:n] - want) ** 2)
    return 10 * np.log10(np.sum(want ** 2) / max(noise, 1e-20))


def video_frames(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames", "-show_entries",
                          "stream=nb_read_frames", "-of", "json", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return int(json.loads(out)["streams"][0]["nb_read_frames"])


def check_sound(path):
    """A video stream of FRAMES frames and a mono audio stream whose decoded length is the clip's
    duration within one codec frame (Matroska keeps no per-stream duration: the samples are
    counted) and whose samples match the tone."""
    s, _ = streams(path)
    assert "video" in s and "audio" in s, s.keys()
    a = s["audio"]
    codec, rate = a["codec_name"], int(a["sample_rate"])
    assert codec in AUDIO_FRAME_S
    assert int(a["channels"]) == 1
    assert video_frames(path) == FRAMES
    got = decoded_audio(path, rate)
    assert abs(len(got) / rate - SECONDS) <= AUDIO_FRAME_S[codec] + 1e-6, (len(got), rate)
    snr = tone_snr_db(got, rate)
    print(f"{path.name}: {codec} {rate} Hz, {len(got) / rate:.4f} s decoded (clip {SECONDS} s), SNR {snr:.1f} dB")
    assert snr >= 20, snr
    return codec


@pytest.mark.parametrize("ext,codec", [("mp4", "aac"), ("webm", "opus")])
def test_render_muxes_the_tone(package, tmp_path, ext, codec):
    out = tmp_path / f"out.{ext}"
    trace = tmp_path / "trace.json"
    r = subprocess.run([str(VGEN), "render", "a dog barks at a passing car", "-o", str(out), "--model", str(package),
                        *SIZE, "--trace", str(trace)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert check_sound(out) == codec
    # The audio decode is a span of its own on the device's track, inside the decode span.
    events = json.loads(trace.read_text())["traceEvents"]
    spans = {e["name"]: e for e in events if e.get("ph") == "X" and e["name"] in ("decode", "audio_decode")
             and e["pid"] == next(m["pid"] for m in events if m.get("ph") == "M" and m["name"] == "process_name"
                                  and m["args"]["name"] == "devices")}
    assert set(spans) == {"decode", "audio_decode"}, spans
    d, a = spans["decode"], spans["audio_decode"]
    assert a["tid"] == d["tid"] and d["ts"] <= a["ts"] and a["ts"] + a["dur"] <= d["ts"] + d["dur"] + 1


def test_render_gif_writes_the_tone_beside_it(package, tmp_path):
    out = tmp_path / "out.gif"
    r = subprocess.run([str(VGEN), "render", "a dog barks", "-o", str(out), "--model", str(package), *SIZE],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    wav = tmp_path / "out.wav"
    s, _ = streams(wav)
    assert s["audio"]["codec_name"] == "pcm_s16le" and int(s["audio"]["sample_rate"]) == RATE
    assert abs(float(s["audio"]["duration"]) - SECONDS) <= 1 / RATE
    assert tone_snr_db(decoded_audio(wav, RATE), RATE) >= 60


def test_batch_muxes_the_tone_and_reruns_an_output_whose_sound_is_short(package, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p, "name": n, "seed": i}) for i, (p, n) in
                                 enumerate([("a dog barks", "dog"), ("a bell rings", "bell")])) + "\n")
    out = tmp_path / "out"

    def run():
        r = subprocess.run([str(VGEN), "batch", str(prompts), "--out", str(out), "--model", str(package), *SIZE,
                            "--json"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        return {j["name"]: j["status"] for j in json.loads(r.stdout)["jobs"]}

    assert run() == {"dog": "done", "bell": "done"}
    for name in ("dog", "bell"):
        check_sound(out / f"{name}.mp4")
    assert run() == {"dog": "skipped", "bell": "skipped"}
    # The same video and comment tag, with the sound cut to 0.3 s: not complete, rendered again.
    short = tmp_path / "short.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-t", "0.3", "-i", str(out / "dog.mp4"), "-i", str(out / "dog.mp4"),
                    "-map", "1:v", "-map", "0:a", "-map_metadata", "1", "-c:v", "copy", "-c:a", "aac", str(short)],
                   check=True)
    assert abs(len(decoded_audio(short, RATE)) / RATE - 0.3) < 0.1
    assert streams(short)[1]["tags"]["comment"] == streams(out / "dog.mp4")[1]["tags"]["comment"]
    shutil.move(short, out / "dog.mp4")
    assert run() == {"dog": "done", "bell": "skipped"}
    check_sound(out / "dog.mp4")


def test_serve_muxes_the_tone_and_counts_the_audio_decode(package, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    log = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen([str(VGEN), "serve", "--listen", "127.0.0.1:0", "--model", str(package),
                             "--output-dir", str(out)], stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        line = proc.stdout.readline() if ready else ""
        m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", line)
        assert m, line
        port = int(m.group(1))

        def request(method, path, body=None):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                headers = {"Content-Type": "application/json"} if body is not None else {}
                c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
                r = c.getresponse()
                return r.status, r.read()
            finally:
                c.close()

        status, body = request("POST", "/v1/jobs", {"prompt": "a dog barks at a passing car", "name": "dog",
                                                    "width": 128, "height": 128, "frames": FRAMES, "steps": 2,
                                                    "fps": FPS})
        assert status in (200, 201, 202), body
        job = json.loads(body)["id"]
        deadline = time.monotonic() + 120
        while True:  # the job's own state, polled: it ends in seconds
            status, body = request("GET", f"/v1/jobs/{job}")
            state = json.loads(body)["status"]
            if state in ("done", "failed", "cancelled") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert state == "done", body
        assert "audio_decode" in json.loads(body).get("stage_seconds", {}), body
        status, video = request("GET", f"/v1/jobs/{job}/video")
        assert status == 200
        (tmp_path / "dog.mp4").write_bytes(video)
        assert check_sound(tmp_path / "dog.mp4") == "aac"
        status, metrics = request("GET", "/metrics")
        m = re.search(rb'^vgen_stage_duration_seconds_count\{stage="audio_decode"\} (\d+)', metrics, re.M)
        assert m and int(m.group(1)) >= 1, metrics.decode()[-2000:]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
