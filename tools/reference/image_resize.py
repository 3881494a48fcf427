#!/usr/bin/env python3
"""PIL's resizes, as diffusers' image processors apply them, for the C++ image-input test.

VaeImageProcessor.resize (Wan's video_processor.preprocess) calls
image.resize((width, height), resample=LANCZOS); CLIPImageProcessor resizes with BICUBIC.

Usage: python -m vgen_reference.image_resize IN.png OUT.png WIDTH HEIGHT lanczos|bicubic|bilinear
Writes OUT.png (RGB) and prints {"width": W, "height": H}.
"""
import json
import sys

from PIL import Image

FILTERS = {"lanczos": Image.LANCZOS, "bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR}


def main(argv):
    src, dst, width, height, name = argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5]
    out = Image.open(src).convert("RGB").resize((width, height), resample=FILTERS[name])
    out.save(dst)
    print(json.dumps({"width": out.width, "height": out.height}))


if __name__ == "__main__":
    main(sys.argv)
