"""The bundled demo model (models/vgen-shapes): seeded synthetic clips, the networks, training,
export into a vgen package, evaluation through the C++ runtime, and package edits.

    python -m vgen_demo_model.train --out models/vgen-shapes      # trains, then exports
    python -m vgen_demo_model.evaluate --model models/vgen-shapes
    python -m vgen_demo_model.add_int8 --out build/vgen-shapes-int8
    python -m vgen_demo_model.set_sampler --model models/vgen-shapes --scheduler flow_euler --guidance 2

Installed with the rest of tools/ (tools/pyproject.toml) as ``vgen_demo_model``; the folder keeps
its name, tools/demo_model/, which the bundled model's manifest and model card cite.
"""
