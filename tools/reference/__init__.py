"""Reference generators for vgen's C++ tests: each runs diffusers (or PIL, sentencepiece, a plain
torch module) on a tiny offline case and prints JSON naming what it wrote.

The parity fixtures run ``python -m vgen_reference.<family>_parity DIR`` (tests/CMakeLists.txt,
vgen_parity_fixture); the C++ tests run tools/reference/<script>.py by path
(tests/support/python_reference.hpp). So every module here imports absolutely
(``vgen_export...``, ``vgen_reference...``), which works both ways. Installed with the rest of
tools/ (tools/pyproject.toml) as ``vgen_reference``; the folder keeps the name those tests use.
"""
