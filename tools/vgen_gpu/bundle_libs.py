"""The shared libraries of the GPU bundle (tools/gpu_bundle.sh): which are copied, which are left to
the device's torch or glibc, and which are replaced by stub libraries.

Why stubs: Debian's FFmpeg is built with every codec and protocol library it packages (x265, AV1
encoders, JPEG XL, librsvg with glib and cairo, libxml2 with ICU's 31 MB of data, gnutls, zmq,
VA-API, ...), and libavcodec/libavformat are linked with BIND_NOW, so all of them must load for
vgen to start. vgen uses none of them (it encodes with libx264, libvpx, the native GIF/PNG/AAC
and libopus; it decodes PNG/JPEG/WebP/H.264/VP9/AV1 through native decoders and libdav1d), yet
they were 40 of the 55 MiB of the bundle, which with the work tree went past the device's 64 MiB.
A stub carries the library's soname and exactly the symbols (with their versions) that the
bundled libraries import from it: functions that print which library is missing and abort,
zero-filled data objects of the real size (and, for the few functions FFmpeg calls while it
registers every codec, a 0 answer: ANSWER_ZERO). Loading and every path vgen takes work unchanged (the
bundle test renders with only the bundle's libraries); a path that did reach a stubbed codec
would stop with "vgen bundle: <library> is a stub (<symbol>)", not corrupt anything.

Usage: python bundle_libs.py BINARY LIB_OUT_DIR TORCH_DIR SITE_DIR CC  -> JSON on stdout
(bundled, from_torch, stubbed: sonames). Linux/ELF only; needs ldd, readelf and a C compiler.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Sonames (up to ".so") that vgen never calls into: see the module comment.
STUBBED = {
    "librsvg-2", "libgobject-2.0", "libglib-2.0", "libcairo", "libcodec2", "libx265", "libSvtAv1Enc", "libaom",
    "librav1e", "libjxl", "libjxl_threads", "libzvbi", "libxvidcore", "libtheoraenc", "libtheoradec", "libshine",
    "libtwolame", "libspeex", "libgsm", "libmp3lame", "libopenjp2", "libsnappy", "libmfx", "libva", "libva-drm",
    "libva-x11", "libvdpau", "libX11", "libOpenCL", "libdrm", "libxml2", "libgme", "libopenmpt", "libchromaprint",
    "libbluray", "libgnutls", "librabbitmq", "librist", "libsrt-gnutls", "libssh-gcrypt", "libzmq",
}
# Functions FFmpeg calls while it registers its codecs (a codec's init_static_data runs for every
# codec on the first codec lookup, used or not): their stubs return 0 (no version, no
# capabilities, no interface), which FFmpeg takes as a library that offers nothing. Every other
# stubbed function aborts.
ANSWER_ZERO = {"aom_codec_version", "aom_codec_get_caps", "aom_codec_av1_cx", "aom_codec_av1_dx", "x265_api_get_199"}
GLIBC = re.compile(r"^(linux-vdso|ld-linux.*|libc|libm|libpthread|libdl|librt|libutil|libresolv|libanl|libnsl"
                   r"|libBrokenLocale|libmvec|libnss_\w+)\.so")


def stem(soname: str) -> str:
    return soname.split(".so")[0]


def needed(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def host_paths(binary: Path) -> dict[str, Path]:
    """soname -> the file the host's loader picks, for the binary's whole closure."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    paths = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m:
            if m.group(2) == "not":
                raise SystemExit(f"bundle_libs: {m.group(1)} not found by ldd")
            paths[m.group(1)] = Path(m.group(2))
    return paths


def dyn_symbols(path: Path):
    """(defined, undefined): defined name -> (type, size, version or None);
    undefined: set of (name, version or None) that must resolve (weak ones left out)."""
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(path)], capture_output=True, text=True, check=True).stdout
    defined, undefined = {}, set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].endswith(":") or not f[1].isalnum():
            continue
        size, typ, bind, ndx, name = f[2], f[3], f[4], f[6], f[7]
        if ndx == "UND":
            if name and bind != "WEAK":
                n, _, v = name.partition("@")
                undefined.add((n, v or None))
        elif bind in ("GLOBAL", "WEAK") and typ in ("FUNC", "IFUNC", "OBJECT"):
            n, _, v = name.partition("@")
            v = v.lstrip("@") or None
            # A default version (name@@V) wins over a hidden one (name@V) of the same name.
            if n not in defined or "@@" in name:
                defined[n] = (typ, int(size, 0) if size.startswith("0x") else int(size), v)
    return defined, undefined


def make_stub(soname: str, real: Path, wanted: set[tuple[str, str | None]], out: Path, cc: str) -> int:
    defined, _ = dyn_symbols(real)
    syms = {}
    for name, version in sorted(wanted, key=lambda s: (s[0], s[1] or "")):
        if name not in defined:
            continue
        typ, size, dversion = defined[name]
        if name in syms and syms[name][2] != (version or dversion):
            raise SystemExit(f"bundle_libs: {soname}: {name} is needed in two versions")
        syms[name] = (typ, size, version or dversion)
    lines = ["#include <stdio.h>", "#include <stdlib.h>",
             "static void vgen_stub_missing(const char* sym) {",
             f'  fprintf(stderr, "vgen bundle: {soname} is a stub (%s): this path needs the real library\\n", sym);',
             "  abort();", "}"]
    for name, (typ, size, _) in syms.items():
        if typ == "OBJECT":
            lines.append(f"__attribute__((aligned(16))) unsigned char {name}[{max(size, 1)}];")
        elif name in ANSWER_ZERO:
            lines.append(f"long {name}(void) {{ return 0; }}")
        else:
            lines.append(f'void {name}(void) {{ vgen_stub_missing("{name}"); }}')
    versions: dict[str, list[str]] = {}
    for name, (_, _, v) in syms.items():
        versions.setdefault(v, []).append(name)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "stub.c"
        src.write_text("\n".join(lines) + "\n")
        cmd = [cc, "-shared", "-fPIC", "-O0", "-fno-builtin", "-w", "-o", str(out), str(src), f"-Wl,-soname,{soname}"]
        named = [v for v in versions if v]
        if named:
            # Unversioned references bind to any definition: give those symbols the first node.
            script = Path(tmp) / "stub.map"
            nodes = {v: list(versions[v]) for v in named}
            nodes[named[0]] += versions.get(None, [])
            script.write_text("".join(f"{v} {{ global: {'; '.join(s)}; }};\n" for v, s in nodes.items()))
            cmd.append(f"-Wl,--version-script={script}")
        subprocess.run(cmd, check=True)
    return len(syms)


def main(argv: list[str]) -> int:
    binary, lib_out, torch_dir, site, cc = Path(argv[0]), Path(argv[1]), argv[2], argv[3], argv[4]
    hosts = host_paths(binary)
    from_torch = lambda p: str(p).startswith((torch_dir + "/", site + "/nvidia/", site + "/triton/")) or \
        os.path.basename(str(p)).startswith("cuda") and str(p).startswith(site + "/")
    bundled, torch_libs, stubbed, queue, seen = [], [], [], needed(binary), set()
    while queue:
        name = queue.pop(0)
        if name in seen or GLIBC.match(name):
            continue
        seen.add(name)
        real = hosts[name].resolve()
        if from_torch(real):
            torch_libs.append(name)
        elif stem(name) in STUBBED:
            stubbed.append(name)
        else:
            shutil.copyfile(real, lib_out / name)
            bundled.append(name)
            queue += needed(real)
    wanted: set[tuple[str, str | None]] = set()
    for f in [binary] + [lib_out / n for n in bundled]:
        wanted |= dyn_symbols(f)[1]
    counts = {name: make_stub(name, hosts[name].resolve(), wanted, lib_out / name, cc) for name in stubbed}
    json.dump({"bundled": bundled, "from_torch": torch_libs, "stubbed": counts}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
