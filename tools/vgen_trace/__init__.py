"""vgen trace tooling (standard library only): ``python -m vgen_trace.picture TRACE OUT.svg`` draws
a trace that ``vgen ... --trace FILE`` or ``GET /v1/trace`` wrote as an SVG timeline."""
