"""A stand-in for torchvision in the APPFL benchmark venv only (benchmarks/appfl_w1.py).

APPFL 1.12 imports `piq` (image-quality metrics of its data-readiness report) at import time,
and piq imports torchvision; the package index's torchvision is a CUDA build whose operators
fail to register beside the CPU torch 2.13 ("operator torchvision::nms does not exist"), so
`import appfl.agent` fails. Nothing the benchmark runs uses torchvision: this stub gives piq
the names it binds at import (models.vgg16 / vgg19 / inception_v3, the Inception blocks it
subclasses) and raises if any of them is ever called. `make bench` installs it in place of
torchvision in benchmarks/results/tmp_appfl_venv; the timed path is unchanged."""
__version__ = "0.0+flemu-bench-stub"

from . import models  # noqa: E402,F401
