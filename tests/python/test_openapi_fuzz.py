"""docs/openapi.json against a live `vgen serve`, fuzzed by schemathesis (pinned in
tools/requirements.txt): generated requests from the document, their responses checked
against it (status codes, content types, schemas, SSE events, no server error, auth honoured),
with and without a token, each run bounded in time.

Left out, and why (see the lead's report for issue 32):
- the coverage phase: schemathesis 4.32 stops with "Unsupported type: 'Binary'" on the
  multipart bodies (a file part beside a JSON part), a fault of the tool, not of the service;
- positive_data_acceptance: a schema-valid request may still be refused with 400 by the model
  package's limits (frames 4k+1, sizes, an image for a text-to-video model), which a document
  for every package cannot state, and a Range past the file's end is a 416;
- use_after_free: DELETE /v1/jobs/{id} cancels and the job stays readable, by design (the
  document says so; DELETE /v1/videos/{id} deletes)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli_serve import ROOT, VGEN, Server, package  # noqa: F401  (the module-scoped fixture)

pytest.importorskip("schemathesis")
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"


def fuzz(port, tmp_path, *headers):
    cmd = [str(SCHEMATHESIS), "run", str(ROOT / "docs" / "openapi.json"), "--url", f"http://127.0.0.1:{port}",
           "--phases", "examples,fuzzing,stateful", "--max-time", "30", "--max-examples", "20", "--seed", "1",
           "--exclude-checks", "positive_data_acceptance,use_after_free",
           "--exclude-path", "/v1/trace",  # each call records for seconds: the budget would go to waiting
           "--request-timeout", "30", "-w", "1", *headers]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"})
    assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-2000:]
    return r.stdout


@pytest.mark.parametrize("token", [None, "fuzz-token"])
def test_the_document_matches_the_service(package, tmp_path, token):  # noqa: F811
    args = ["--token", token] if token else []
    with Server(package, tmp_path / "out", *args) as server:
        out = fuzz(server.port, tmp_path, *(["-H", f"Authorization: Bearer {token}"] if token else []))
        assert "API Operations" in out
        assert server.stop() == 0
