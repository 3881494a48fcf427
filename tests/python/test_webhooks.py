"""Signed webhooks of `vgen serve`, checked by a receiver this test runs on a free loopback
port with PyPI's `standardwebhooks` (the Standard Webhooks reference library):
(a) a receiver that is down (connections refused), then answers 503, then 200 gets every job's
    event, each exactly once after deduplication by webhook-id, every signature valid;
(b) `vgen serve` SIGKILLed between a job's end and its event's delivery (the "webhook" fault
    point: after the end and the event are durable, before any send) delivers it after restart;
(c) a receiver that accepts and never answers holds at most `concurrency` connections and
    delays neither other jobs nor /healthz (latency measured while it hangs);
(d) a receiver with the wrong secret detects it (verification fails);
(e) in a fleet, the front end that accepted a job announces it, also when the job ended while
    that front end was down (SIGKILLed before the job ran, restarted after it ended); a job
    accepted by another front end is not announced by this one.
Waits are on events (requests seen by the receiver, jobs' event streams) or on states polled
with a deadline (job status, /metrics counters), never on sleeps that assume a speed."""
from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from test_cli_serve import SMALL, Server, package  # noqa: F401  (package is a fixture)

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OTHER_SECRET = "whsec_" + "QW5vdGhlciBzZWNyZXQgb2YgMzIgYnl0ZXMgbG9uZyEh"
TERMINAL = {"done", "failed", "cancelled"}


def fast_retry_config(tmp_path, **extra):
    """A config whose retries come quickly (the defaults start at 1 s and grow to 10 min)."""
    path = tmp_path / "webhooks.json"
    path.write_text(json.dumps({"webhooks": {"initial_backoff_ms": 100, "max_backoff_ms": 500, "jitter": 0.2, **extra}}))
    return path


class Receiver:
    """A webhook receiver: records every request (headers, body) and answers 503 to the first
    `fail_first`, 200 after that."""

    def __init__(self, port=0, fail_first=0):
        self.requests = []
        self.cond = threading.Condition()
        self.fail_first = fail_first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.cond:
                    receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    status = 503 if len(receiver.requests) <= receiver.fail_first else 200
                    receiver.cond.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/hooks/vgen"

    def wait_for(self, predicate, timeout=300):
        with self.cond:
            assert self.cond.wait_for(lambda: predicate(self.requests), timeout), f"receiver saw {len(self.requests)} request(s)"
            return list(self.requests)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class HangingReceiver:
    """Accepts connections and never answers; counts them (at once and in all)."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.sock.getsockname()[1]
        self.conns, self.cond, self.closed = [], threading.Condition(), False
        self.thread = threading.Thread(target=self.accept, daemon=True)
        self.thread.start()

    def accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.cond:
                self.conns.append(conn)
                self.cond.notify_all()

    def open_now(self):
        """Connections the client has not closed (a closed one reads EOF)."""
        n = 0
        for c in self.conns:
            c.setblocking(False)
            try:
                data = c.recv(65536, socket.MSG_PEEK)
                n += 1 if data else 0
            except BlockingIOError:
                n += 1
            except OSError:
                pass
        return n

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


def verified(requests, secret=SECRET):
    """Each request verified with standardwebhooks: [(webhook-id, payload)]."""
    wh = Webhook(secret)
    return [(headers["webhook-id"], wh.verify(body, headers)) for headers, body in requests]


def submit(server, prompt, seed):
    status, _, body = server.json("POST", "/v1/jobs", {"prompt": prompt, "seed": seed, **SMALL})
    assert status == 202, body
    return body["id"]


def metric(server, name, **labels):
    """The sum of the series of `name` whose labels include `labels` (0 if none)."""
    status, _, text = server.request("GET", "/metrics")
    assert status == 200
    total = 0.0
    for line in text.decode().splitlines():
        m = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            total += float(m.group(2))
    return total


def wait_metric(server, name, at_least, timeout=120, **labels):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = metric(server, name, **labels)
        if value >= at_least:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{name}{labels} stayed below {at_least} for {timeout}s: {metric(server, name, **labels)}")


def test_receiver_down_then_up_gets_every_event_once(package, tmp_path):
    # Down: a port bound but not listening refuses connections.
    placeholder = socket.socket()
    placeholder.bind(("127.0.0.1", 0))
    port = placeholder.getsockname()[1]
    url = f"http://127.0.0.1:{port}/hooks/vgen"
    server = Server(package, tmp_path / "out", "--config", str(fast_retry_config(tmp_path)), "--webhook", url,
                    env={"VGEN_WEBHOOK_SECRET": SECRET})
    receiver = None
    try:
        ids = [submit(server, f"a red circle moving left {i}", i) for i in range(3)]
        for i in ids:
            assert server.wait_status(i, TERMINAL, timeout=300)["status"] == "done"
        # Every event was tried and refused at least once while the receiver was down.
        wait_metric(server, "vgen_webhook_pending", len(ids))  # recorded (before each job's end), then queued
        wait_metric(server, "vgen_webhook_deliveries_total", 2 * len(ids), result="failed_attempt")
        assert metric(server, "vgen_webhook_pending") == len(ids)
        placeholder.close()
        receiver = Receiver(port=port, fail_first=2)  # up, but the first two answers are 503
        requests = receiver.wait_for(lambda rs: {h["webhook-id"] for h, _ in rs[2:]} >= {f"evt_{i}" for i in ids})
        events = verified(requests)
        by_id = {}
        for webhook_id, payload in events:  # the receiver's dedup
            by_id.setdefault(webhook_id, payload)
        assert set(by_id) == {f"evt_{i}" for i in ids}
        for i in ids:
            p = by_id[f"evt_{i}"]
            assert p["id"] == f"evt_{i}" and p["object"] == "event" and p["type"] == "video.completed"
            assert p["data"] == {"id": i} and isinstance(p["created_at"], int)
        assert len(events) >= len(ids) + 2  # the 503s were retried
        assert all(h["webhook-timestamp"].isdigit() for h, _ in requests)
        wait_metric(server, "vgen_webhook_deliveries_total", len(ids), result="delivered")
        assert metric(server, "vgen_webhook_pending") == 0
        assert metric(server, "vgen_webhook_deliveries_total", result="expired") == 0
        # Settled: nothing more is sent. Each event was acknowledged (200) exactly once.
        acknowledged = [h["webhook-id"] for h, _ in receiver.requests[2:]]
        assert sorted(acknowledged) == sorted(f"evt_{i}" for i in ids)
    finally:
        server.stop()
        placeholder.close()
        if receiver:
            receiver.close()


def test_event_delivered_after_sigkill_between_end_and_delivery(package, tmp_path):
    receiver = Receiver()
    out = tmp_path / "out"
    drill = {"VGEN_FAULTS": json.dumps({"crash": {"stage": "webhook", "prompt": "crash after the end"}}),
             "VGEN_WEBHOOK_SECRET": SECRET}
    server = Server(package, out, "--webhook", receiver.url, env=drill)
    try:
        job = submit(server, "a blue square, crash after the end", 7)
        assert server.proc.wait(timeout=600) == -9  # killed at the fault point
    finally:
        server.kill()
    assert receiver.requests == []  # nothing was sent before the kill
    server = Server(package, out, "--webhook", receiver.url, env={"VGEN_WEBHOOK_SECRET": SECRET})
    try:
        assert server.wait_status(job, TERMINAL)["status"] == "done"  # finished before the kill: not run again
        requests = receiver.wait_for(lambda rs: len(rs) >= 1)
        [(webhook_id, payload)] = verified(requests[:1])
        assert webhook_id == f"evt_{job}" and payload["data"] == {"id": job} and payload["type"] == "video.completed"
        wait_metric(server, "vgen_webhook_deliveries_total", 1, result="delivered")
    finally:
        server.stop()
        receiver.close()


def test_hanging_receiver_delays_neither_jobs_nor_healthz(package, tmp_path):
    hanging = HangingReceiver()
    url = f"http://127.0.0.1:{hanging.port}/hooks/vgen"
    config = fast_retry_config(tmp_path, concurrency=2, response_timeout_ms=600_000)
    server = Server(package, tmp_path / "out", "--config", str(config), "--webhook", url, env={"VGEN_WEBHOOK_SECRET": SECRET})
    try:
        first = [submit(server, f"a green dot {i}", i) for i in range(3)]
        for i in first:
            assert server.wait_status(i, TERMINAL, timeout=300)["status"] == "done"
        with hanging.cond:  # two requests hang now (the third event waits for room)
            assert hanging.cond.wait_for(lambda: len(hanging.conns) >= 2, 120)
        # Jobs still run end to end while the receiver holds its connections.
        later = submit(server, "a yellow dot", 11)
        assert server.wait_status(later, TERMINAL, timeout=300)["status"] == "done"
        latencies = []
        for _ in range(20):
            start = time.monotonic()
            status, _, body = server.request("GET", "/healthz", timeout=10)
            latencies.append(time.monotonic() - start)
            assert status == 200, body
        print(f"/healthz while the receiver hangs: max {max(latencies) * 1000:.1f} ms, "
              f"median {sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms")
        assert max(latencies) < 1.0
        wait_metric(server, "vgen_webhook_pending", 4)  # the later job's event is queued behind the hanging two
        assert metric(server, "vgen_webhook_pending") == 4
        assert metric(server, "vgen_webhook_in_flight") == 2  # bounded per endpoint
        assert len(hanging.conns) == 2 and hanging.open_now() == 2
    finally:
        server.stop()
        hanging.close()


def test_wrong_secret_is_detected_by_the_receiver(package, tmp_path):
    receiver = Receiver()
    server = Server(package, tmp_path / "out", "--webhook", receiver.url, env={"VGEN_WEBHOOK_SECRET": SECRET})
    try:
        job = submit(server, "a purple ring", 3)
        requests = receiver.wait_for(lambda rs: len(rs) >= 1)
    finally:
        server.stop()
        receiver.close()
    with pytest.raises(WebhookVerificationError):
        verified(requests[:1], secret=OTHER_SECRET)
    # The same request verifies with the right secret, and any change to the body breaks it.
    assert verified(requests[:1])[0][1]["data"] == {"id": job}
    headers, body = requests[0]
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(body.replace(job.encode(), b"x" * len(job)), headers)


def test_fleet_front_end_announces_its_jobs_also_those_that_ended_while_it_was_down(package, tmp_path):
    import test_fleet

    if not test_fleet.HAVE_BROKER:
        pytest.skip("nats-server is not installed")
    if not test_fleet._vgen_has_worker():
        pytest.skip("vgen was built without the fleet")
    receiver = Receiver()
    out = tmp_path / "out"
    out.mkdir()
    config = tmp_path / "fleet.json"
    config.write_text(json.dumps({"queue": {"ack_wait_ms": 2000, "fetch_wait_ms": 500},
                                  "webhooks": {"initial_backoff_ms": 100, "max_backoff_ms": 500, "jitter": 0.2}}))
    broker = test_fleet.Broker(tmp_path)
    hooks = ("--queue", broker.url, "--config", str(config), "--webhook", receiver.url)
    env = {"VGEN_WEBHOOK_SECRET": SECRET}
    front = other = worker = None
    try:
        front = Server(package, out, *hooks, env=env, log_dir=tmp_path)
        other = Server(package, out, "--queue", broker.url, "--config", str(config), log_dir=tmp_path)  # no webhooks
        mine = submit(front, "a red circle, announced after a restart", 1)  # no worker yet: it waits in the stream
        theirs = submit(other, "a blue square, another front end's", 2)
        front.kill()  # SIGKILL: the job's watch is in the outbox, nothing else of it here
        worker = test_fleet.Worker("w1", broker, package, out, config, None)
        for job in (mine, theirs):
            assert other.wait_status(job, TERMINAL, timeout=300)["status"] == "done"
        assert receiver.requests == []  # nobody announced while the front end was down
        front = Server(package, out, *hooks, env=env, log_dir=tmp_path)  # its bucket watch replays both ends
        later = submit(front, "a green dot, announced at once", 3)
        requests = receiver.wait_for(lambda rs: len({h["webhook-id"] for h, _ in rs}) >= 2)
        events = dict(verified(requests))
        assert set(events) == {f"evt_{mine}", f"evt_{later}"}, set(events)
        assert all(e["type"] == "video.completed" for e in events.values())
        assert events[f"evt_{mine}"]["data"] == {"id": mine}
        wait_metric(front, "vgen_webhook_deliveries_total", 2, result="delivered")
        # theirs was replayed before later was even submitted, and was left to its front end.
        assert metric(front, "vgen_webhook_pending") == 0
        assert metric(front, "vgen_webhook_deliveries_total", result="delivered") == 2
        assert f"evt_{theirs}" not in {h["webhook-id"] for h, _ in receiver.requests}
    finally:
        for p in (worker, front, other):
            if p:
                p.kill()
        broker.stop()
        receiver.close()
